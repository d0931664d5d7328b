// libFuzzer target: a clear-to-send slot and a completion record as the data path reads them,
// through the real functions of core/src/base/cts_match.cc (the ones isend and poll_recv call).
//
// Input layout (short inputs are zero-padded):
//   [0, 256)    the FIFO slot: kEntriesPerSlot CtsEntry, as the peer RDMA-wrote them
//   [256]       control: bit 0 = expect the seq found in entry 0 (else the seq below)
//   [257, 265)  expected seq (when control bit 0 is clear)
//   [265, 329)  up to 8 sends: (int32 tag, uint32 size) each, matched in order
//   [329, 393)  a DoneRecord
//   [393, 401)  the receive's seq for the record
//   [401]       n (receives in the group; taken modulo 9)
//   [402, 434)  posted sizes (8 x uint32)
//   [434, 466)  immediates (8 x uint32)
//   [466, 978)  a fused comm's slot: kEntriesPerSlot cell pairs (CtsMembers, CtsEntry)
//   [978]       npaths - 2 (mod 3) in the low nibble, receiver members - 1 (mod npaths) above
//   [979, 987)  the seq the sender waits for in the fused slot
// Contract: never crash; every rejection is a clear error (non-empty message, expected code);
// every acceptance is consistent with the input (checked independently here).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "../core/src/rules/cts_match.h"

using namespace sluice;

namespace {

struct Reader {
  const uint8_t* p;
  size_t n;
  size_t at = 0;
  template <typename T>
  T get() {
    T v{};
    uint8_t b[sizeof(T)] = {};
    for (size_t i = 0; i < sizeof(T); ++i) b[i] = at + i < n ? p[at + i] : 0;
    std::memcpy(&v, b, sizeof v);
    at += sizeof(T);
    return v;
  }
};

// Each byte of v is a's or b's: what a reader can see of a WRITE of b landing over a.
bool bytewise_between(uint64_t v, uint64_t a, uint64_t b) {
  uint8_t x[8], y[8], z[8];
  std::memcpy(x, &v, 8);
  std::memcpy(y, &a, 8);
  std::memcpy(z, &b, 8);
  for (int i = 0; i < 8; ++i)
    if (x[i] != y[i] && x[i] != z[i]) return false;
  return true;
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "contract violated: %s\n", what);
    std::abort();
  }
}

void fuzz_slot(Reader& in) {
  wire::CtsEntry fifo[wire::kEntriesPerSlot];
  for (auto& e : fifo) e = in.get<wire::CtsEntry>();
  const uint8_t control = in.get<uint8_t>();
  const uint64_t seq_in = in.get<uint64_t>();
  const uint64_t want = (control & 1) ? fifo[0].seq : seq_in;
  cts::Snapshot snap;
  Status st = cts::take_snapshot(fifo, want, &snap);
  if (st.is_again()) {
    bool unpublished = fifo[0].seq != want;
    for (int i = 1; i < fifo[0].nreqs && i < wire::kEntriesPerSlot; ++i)
      unpublished = unpublished || fifo[i].seq != want;
    check(unpublished, "again for a completely published slot");
    const uint64_t prev = want > wire::kFifoSlots ? want - wire::kFifoSlots : 0;
    check(fifo[0].seq == want || bytewise_between(fifo[0].seq, prev, want),
          "again on an entry 0 that is neither this receive, nor the slot's previous use, nor a "
          "byte mix of the two (its WRITE landing)");
    in.at += 64;
    return;
  }
  if (!st.is_ok()) {
    check(st.code() == Code::kRemoteError, "corrupt slot must be a remote error");
    const uint64_t prev = want > wire::kFifoSlots ? want - wire::kFifoSlots : 0;
    check(fifo[0].seq == want || !bytewise_between(fifo[0].seq, prev, want),
          "an error on an entry 0 that may be its WRITE landing (a wait)");
    check(!st.message().empty(), "error without a message");
    in.at += 64;
    return;
  }
  // Accepted: a faithful, self-consistent copy.
  check(snap.seq == want && snap.nreqs >= 1 && snap.nreqs <= wire::kEntriesPerSlot, "snapshot");
  for (int i = 0; i < snap.nreqs; ++i) {
    check(std::memcmp(&snap.e[i], &fifo[i], sizeof fifo[i]) == 0, "copy differs");
    check(snap.e[i].index == i && snap.e[i].nreqs == snap.nreqs && snap.e[i].seq == want,
          "accepted an inconsistent entry");
  }
  // Matching, as isend does it: each send either takes an unmatched entry with its tag and room
  // for it, is too large for the first unmatched entry with its tag, or waits for a later slot.
  uint8_t matched = 0;
  for (int k = 0; k < 8; ++k) {
    const int32_t tag = in.get<int32_t>();
    const uint32_t size = in.get<uint32_t>();
    const cts::Match m = cts::match(snap, matched, tag, size);
    int first = -1;
    for (int i = 0; i < snap.nreqs && first < 0; ++i)
      if (snap.e[i].tag == tag && !(matched & (1u << i))) first = i;
    if (m.kind == cts::Match::kLater) {
      check(first < 0, "later although an unmatched entry has the tag");
      continue;
    }
    check(m.index == first, "matched another entry than the first unmatched with the tag");
    if (m.kind == cts::Match::kTooLarge) {
      check(size > snap.e[m.index].size, "too large for a buffer that fits");
      continue;
    }
    check(m.kind == cts::Match::kMatched && size <= snap.e[m.index].size, "bad match");
    matched |= static_cast<uint8_t>(1u << m.index);
  }
}

void fuzz_record(Reader& in) {
  const wire::DoneRecord rec = in.get<wire::DoneRecord>();
  const uint64_t seq = in.get<uint64_t>();
  const int n = 1 + in.get<uint8_t>() % wire::kEntriesPerSlot;
  size_t posted[wire::kEntriesPerSlot];
  int tags[wire::kEntriesPerSlot];
  for (int i = 0; i < wire::kEntriesPerSlot; ++i) {
    posted[i] = in.get<uint32_t>();
    tags[i] = i;
  }
  size_t received[wire::kEntriesPerSlot];
  for (size_t& r : received) r = SIZE_MAX;
  Status st = cts::check_record(rec, seq, n, posted, tags, received);
  if (st.is_ok()) {
    check(rec.seq == seq + 1 && rec.status == wire::kRecordOk, "accepted a bad record");
    for (int i = 0; i < n; ++i)
      check(received[i] == rec.sizes[i] && received[i] <= posted[i], "received size");
    for (int i = n; i < wire::kEntriesPerSlot; ++i) check(received[i] == SIZE_MAX, "wrote past n");
  } else {
    check(!st.message().empty(), "error without a message");
    check(st.code() == Code::kRemoteError ||
              (st.code() == Code::kInvalidUsage &&
               (rec.status == wire::kRecordTooLarge || rec.status == wire::kRecordOverLimit) &&
               rec.bad_index < static_cast<uint32_t>(n)),
          "unexpected error code");
    for (size_t r : received) check(r == SIZE_MAX, "sizes written on error");
  }
  for (int k = 0; k < wire::kEntriesPerSlot; ++k) {
    const uint32_t imm = in.get<uint32_t>();
    bool has_record = false;
    size_t got = SIZE_MAX;
    Status s = cts::check_imm(imm, posted[k], &has_record, &got);
    if (imm & wire::kImmRecord) {
      check(s.is_ok() && has_record && got == SIZE_MAX, "record immediate");
    } else if (imm > posted[k]) {
      check(s.code() == Code::kRemoteError && !s.message().empty() && got == SIZE_MAX, "imm");
    } else {
      check(s.is_ok() && !has_record && got == imm, "byte-count immediate");
    }
  }
  // The lane layout covers every byte exactly once, in 128-byte-aligned chunks.
  const int nlanes = 1 + static_cast<int>(seq % wire::kMaxQps);
  size_t sizes[wire::kEntriesPerSlot];
  for (int i = 0; i < n; ++i) sizes[i] = rec.sizes[i];
  uint32_t wrs = 0;
  for (int lane = 0; lane < nlanes; ++lane) {
    const uint32_t w = cts::group_wrs(sizes, n, lane, nlanes);
    // A message longer than the progress chunk on a lane goes as up to kMaxPieces WRITEs
    // (cts::plan_lane); a chain of shorter ones is one WRITE per message and the close, as ever.
    uint32_t most = 1;  // the close
    for (int i = 0; i < n; ++i) {
      const size_t chunk = cts::chunk_of(sizes[i], nlanes);
      const size_t off = static_cast<size_t>(lane) * chunk;
      if (off < sizes[i]) most += cts::pieces(std::min(chunk, sizes[i] - off));
    }
    check(w >= 1 && w <= most && w <= cts::kMaxLaneWrs, "WRs per lane");
    wrs += w;
  }
  check(wrs >= static_cast<uint32_t>(nlanes), "a lane without its closing WR");
  for (int i = 0; i < n; ++i) {
    const size_t chunk = cts::chunk_of(sizes[i], nlanes);
    check(nlanes == 1 ? chunk == sizes[i] : chunk % cts::kSplitAlign == 0, "chunk alignment");
    check(chunk * static_cast<size_t>(nlanes) >= sizes[i], "chunks do not cover the message");
  }
}

}  // namespace

// take_snapshot_fused: an accepted slot names a non-empty mask of the comm's paths, the same in
// every entry, each entry's member-0 key equal to its rkey, no key beyond the receiver's members.
void fuzz_fused(Reader& in) {
  wire::CtsEntry cells[2 * wire::kEntriesPerSlot];
  for (auto& c : cells) c = in.get<wire::CtsEntry>();
  const uint8_t shape = in.get<uint8_t>();
  const int npaths = 2 + (shape & 0xf) % 3;
  const int nrecv = 1 + (shape >> 4) % npaths;
  const uint64_t want = in.get<uint64_t>();
  cts::Snapshot snap;
  Status st = cts::take_snapshot_fused(cells, want, npaths, nrecv, &snap);
  if (st.is_again()) return;
  if (!st.is_ok()) {
    check(st.code() == Code::kRemoteError && !st.message().empty(), "fused refusal unclear");
    check(snap.seq == 0 || snap.seq == want, "refused fused slot left a foreign snapshot");
    return;
  }
  check(snap.seq == want, "fused snapshot of another seq");
  check(snap.paths != 0 && (snap.paths >> npaths) == 0, "accepted a mask outside the paths");
  for (int i = 0; i < snap.nreqs; ++i) {
    check(snap.x[i].paths == snap.paths, "entries name different paths");
    check(snap.x[i].rkey[0] == snap.e[i].rkey, "member-0 key differs from the entry's");
    for (int m = nrecv; m < wire::kMaxMetaMembers; ++m)
      check(snap.x[i].rkey[m] == 0, "key on a member the receiver lacks");
    check(std::memcmp(&snap.e[i], &cells[2 * i + 1], sizeof snap.e[i]) == 0, "entry copy differs");
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader in{data, size};
  fuzz_slot(in);
  in.at = 329;
  fuzz_record(in);
  in.at = 466;
  fuzz_fused(in);
  return 0;
}
