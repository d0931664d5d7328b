#include "rules/cts_match.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>

namespace sluice::cts {

namespace {

// Whether v could be read while a WRITE of `now` lands over `was`: each of its bytes is the old
// value's or the new one's. A provider may store a payload a byte at a time (rxe copies it into our
// memory with memcpy, and a string copy under emulation goes byte by byte), so a reader polling the
// flag can see it half written: in the bed, 269 (0x10d) landing over 237 (0xed) was read as 13
// (0x0d), 282 over 250 as 26, 256 over 224 as 0, each failing a fused comm as "corrupt" (about one
// run in 50 of Coalesce.* on a loaded host). The copy runs forward, the flag last: once it reads
// `want`, the entry's other fields are in place.
bool mix_of(uint64_t v, uint64_t was, uint64_t now) {
  for (int b = 0; b < 64; b += 8) {
    const uint64_t m = uint64_t{0xff} << b;
    if ((v & m) != (was & m) && (v & m) != (now & m)) return false;
  }
  return true;
}

// Entry i of the slot is fifo_slot[i * stride] (stride 2: a fused comm's pairs, called with the
// pair's second cell).
Status take_strided(const wire::CtsEntry* fifo_slot, int stride, uint64_t want, Snapshot* out,
                    bool eager = false) {
  // The receiver writes the FIFO with RDMA; seq (the last field) is each entry's publication flag.
  auto seq_of = [](const wire::CtsEntry& x) {
    return std::atomic_ref<const uint64_t>(x.seq).load(std::memory_order_acquire);
  };
  // Entry 0 is written at every use of the slot: until the receive `want` is published it still
  // holds the slot's previous use (want - kFifoSlots; 0 for a fresh FIFO), or, while its WRITE
  // lands, a byte mix of the two (mix_of). Anything else was never a clear-to-send of this
  // connection: waiting for it would wait forever.
  if (const uint64_t s0 = seq_of(fifo_slot[0]); s0 != want) {
    const uint64_t prev = want > wire::kFifoSlots ? want - wire::kFifoSlots : 0;
    if (s0 == prev || mix_of(s0, prev, want)) return Status::again();  // the first: the usual
    return Status(Code::kRemoteError, "corrupt clear-to-send slot: entry 0 has seq " +
                                          std::to_string(s0) + ", expected " +
                                          std::to_string(want) + " (or " + std::to_string(prev) +
                                          ", the slot's previous use, or a byte mix of the two "
                                          "while it lands)");
  }
  wire::CtsEntry first;
  std::memcpy(&first, &fifo_slot[0], sizeof first);
  const uint8_t count_byte = first.nreqs;
  const bool resolved = eager && (count_byte & wire::kCtsResolved) != 0;
  const int nreqs = eager ? count_byte & wire::kCtsCountMask : count_byte;
  if (nreqs < 1 || nreqs > wire::kEntriesPerSlot) {
    return Status(Code::kRemoteError,
                  "corrupt clear-to-send entry (" + std::to_string(nreqs) + " receives)");
  }
  for (int i = 1; i < nreqs; ++i)
    if (seq_of(fifo_slot[i * stride]) != want) return Status::again();
  if (stride == 1) {
    std::memcpy(out->e, fifo_slot, static_cast<size_t>(nreqs) * sizeof(wire::CtsEntry));
  } else {
    for (int i = 0; i < nreqs; ++i)
      std::memcpy(&out->e[i], &fifo_slot[i * stride], sizeof out->e[i]);
  }
  for (int i = 0; i < nreqs; ++i) {
    const wire::CtsEntry& x = out->e[i];
    // A rewrite between the seq check and the copy shows here: the copy is what gets used.
    const int index = eager ? x.index & wire::kCtsIndexMask : x.index;
    if (x.seq != want || x.nreqs != count_byte || index != i) {
      out->seq = 0;
      return Status(Code::kRemoteError,
                    "corrupt clear-to-send slot: entry " + std::to_string(i) + " says index " +
                        std::to_string(x.index) + " of " + std::to_string(x.nreqs) + " (seq " +
                        std::to_string(x.seq) + "), expected index " + std::to_string(i) + " of " +
                        std::to_string(nreqs) + " (seq " + std::to_string(want) + ")");
    }
  }
  out->nreqs = nreqs;
  out->resolved = resolved;
  out->seq = want;
  return Status::ok();
}

}  // namespace

Status take_snapshot(const wire::CtsEntry* fifo_slot, uint64_t want, Snapshot* out, bool eager) {
  out->paths = 1;
  return take_strided(fifo_slot, 1, want, out, eager);
}

Status take_snapshot_fused(const wire::CtsEntry* fifo_slot, uint64_t want, int npaths, int nrecv,
                           Snapshot* out, bool shares_ok, bool eager) {
  if (npaths < 2 || npaths > wire::kMaxMetaMembers || nrecv < 1 || nrecv > npaths)
    return Status(Code::kInternalError, "take_snapshot_fused: " + std::to_string(npaths) +
                                            " paths, " + std::to_string(nrecv) + " members");
  SLUICE_RETURN_IF_ERROR(take_strided(fifo_slot + 1, 2, want, out, eager));
  const auto bad = [&](const std::string& why) {
    out->seq = 0;
    return Status(Code::kRemoteError,
                  "corrupt clear-to-send slot (seq " + std::to_string(want) + "): " + why);
  };
  const uint32_t all = (1u << npaths) - 1;
  for (int i = 0; i < out->nreqs; ++i) {
    wire::CtsMembers& x = out->x[i];
    std::memcpy(&x, &fifo_slot[2 * i], sizeof x);  // written before the entry's seq, same WRITE
    const std::string at = "entry " + std::to_string(i);
    if (i == 0) {
      out->paths = x.paths;
      out->shares = x.shares;
    }
    if (x.paths == 0 || (x.paths & ~all) != 0)
      return bad(at + " names paths 0x" + std::to_string(x.paths) + " of a comm of " +
                 std::to_string(npaths) + " paths");
    if (x.paths != out->paths)
      return bad(at + " names other paths than entry 0 (" + std::to_string(x.paths) + " vs " +
                 std::to_string(out->paths) + ")");
    if (x.rkey[0] != out->e[i].rkey) return bad(at + ": its member-0 key differs from its rkey");
    if (x.reserved[0] != 0 || x.reserved[1] != 0) return bad(at + " has non-zero reserved words");
    if (x.shares != out->shares)
      return bad(at + " names other shares than entry 0 (" + std::to_string(x.shares) + " vs " +
                 std::to_string(out->shares) + ")");
    if (x.shares != 0 && !shares_ok)
      return bad(at + " has shares 0x" + std::to_string(x.shares) +
                 ", which path-message set 1 does not have (a non-zero reserved word)");
    for (int p = 0; p < 4 && x.shares != 0; ++p) {
      const uint32_t b = x.shares >> (8 * p) & 0xffu;
      if (b != 0 && ((x.paths >> p & 1u) == 0 || b > 99))
        return bad(at + " gives path " + std::to_string(p) + " a share of " + std::to_string(b) +
                   " %" + ((x.paths >> p & 1u) == 0 ? " outside its paths" : ""));
    }
    for (int m = nrecv; m < wire::kMaxMetaMembers; ++m)
      if (x.rkey[m] != 0)
        return bad(at + " keys member " + std::to_string(m) + " of " + std::to_string(nrecv));
  }
  return Status::ok();
}

Match match(const Snapshot& s, uint8_t matched, int tag, size_t size) {
  for (int i = 0; i < s.nreqs && i < wire::kEntriesPerSlot; ++i) {
    if (s.e[i].tag != tag || (matched & (1u << i))) continue;
    if (size > s.e[i].size) return {Match::kTooLarge, i};
    return {Match::kMatched, i};
  }
  return {};
}

Status check_imm(uint32_t imm, size_t posted0, bool* has_record, size_t* received0, bool eager,
                 bool* eager_part) {
  if (imm & wire::kImmRecord) {
    *has_record = true;
    return Status::ok();
  }
  if (eager && (imm & wire::kImmEager) == wire::kImmEager) {
    imm &= wire::kImmEagerSizeMask;
    if (eager_part != nullptr) *eager_part = true;
  }
  if (imm > posted0) {
    return Status(Code::kRemoteError, "peer reported " + std::to_string(imm) +
                                          " bytes into a receive buffer of " +
                                          std::to_string(posted0));
  }
  *received0 = imm;
  return Status::ok();
}

Status check_record(const wire::DoneRecord& rec_in, uint64_t seq, int n, const size_t* posted,
                    const int* tags, size_t* received, uint8_t* eager_mask) {
  wire::DoneRecord rec;  // one read of memory the peer writes
  std::memcpy(&rec, &rec_in, sizeof rec);
  if (eager_mask != nullptr) *eager_mask = 0;
  if (rec.seq != seq + 1) {
    return Status(Code::kRemoteError, "completion record out of sequence (seq " +
                                          std::to_string(rec.seq) + ", expected " +
                                          std::to_string(seq + 1) + ")");
  }
  if (rec.status == wire::kRecordTooLarge || rec.status == wire::kRecordOverLimit) {
    if (rec.bad_index >= static_cast<uint32_t>(n)) {
      return Status(Code::kRemoteError, "completion record reports a refused send into buffer " +
                                            std::to_string(rec.bad_index) + " of a receive of " +
                                            std::to_string(n));
    }
    const uint32_t i = rec.bad_index;
    std::string m = "peer tried to send " + std::to_string(rec.sizes[i]) +
                    (rec.sizes[i] == UINT32_MAX ? " or more" : "") + " bytes into receive buffer " +
                    std::to_string(i) + " (tag " + std::to_string(tags[i]) + ") of ";
    m += rec.status == wire::kRecordTooLarge
             ? "only " + std::to_string(posted[i]) + " bytes"
             : std::to_string(posted[i]) +
                   " bytes, more than maxP2pBytes = " + std::to_string(wire::kMaxMessageBytes) +
                   " bytes";
    return Status(Code::kInvalidUsage, m + "; nothing was written");
  }
  if (rec.status != wire::kRecordOk) {
    return Status(Code::kRemoteError,
                  "completion record has unknown status " + std::to_string(rec.status));
  }
  for (int i = 0; i < n && eager_mask != nullptr; ++i) {
    if ((rec.sizes[i] & wire::kRecordEager) == 0) continue;
    rec.sizes[i] &= ~wire::kRecordEager;
    *eager_mask |= static_cast<uint8_t>(1u << i);
  }
  for (int i = 0; i < n; ++i) {
    if (rec.sizes[i] > posted[i]) {
      return Status(Code::kRemoteError, "completion record reports " +
                                            std::to_string(rec.sizes[i]) + " bytes into buffer " +
                                            std::to_string(i) + " of " + std::to_string(posted[i]));
    }
  }
  for (int i = 0; i < n; ++i) received[i] = rec.sizes[i];
  return Status::ok();
}

size_t chunk_of(size_t size, int nlanes) {
  if (nlanes <= 1) return size;
  const auto n = static_cast<size_t>(nlanes);
  return ((size + n - 1) / n + kSplitAlign - 1) / kSplitAlign * kSplitAlign;
}

namespace {
// Bytes of message `size` on `lane` (0: none there).
size_t lane_len(size_t size, int lane, int nlanes) {
  const size_t chunk = chunk_of(size, nlanes);
  const size_t off = static_cast<size_t>(lane) * chunk;
  return off < size ? std::min(chunk, size - off) : 0;
}
}  // namespace

uint32_t group_wrs(const size_t* sizes, int n, int lane, int nlanes, size_t ar_threshold) {
  uint32_t w = 0;
  for (int i = 0; i < n; ++i) w += pieces(lane_len(sizes[i], lane, nlanes));
  // A single message with bytes on the lane: its last WRITE carries the immediate, unless adaptive
  // routing closes it with its own WR. Otherwise a separate close (zero-length or the record).
  if (n == 1 && w > 0) return sizes[0] > ar_threshold ? w + 1 : w;
  return w + 1;
}

size_t piece_bytes(size_t len) {
  if (len <= kProgressChunk) return len;
  const size_t chunks = (len + kProgressChunk - 1) / kProgressChunk;
  return (chunks + kMaxPieces - 1) / kMaxPieces * kProgressChunk;
}

uint32_t pieces(size_t len) {
  if (len == 0) return 0;
  const size_t p = piece_bytes(len);
  return static_cast<uint32_t>((len + p - 1) / p);
}

uint32_t plan_lane(const size_t* sizes, int n, int lane, int nlanes, size_t ar_threshold,
                   LaneWr* out, uint32_t* tail_wrs, uint64_t* tail_bytes, uint64_t* seg_max) {
  LaneWr scratch;  // counts only: every WR is built here and forgotten
  uint32_t nw = 0;
  // The WR before the current one, held back until the next WR's size decides its signal.
  LaneWr prev;
  bool have_prev = false;
  uint64_t acc = 0, seg = 0, tail_b = 0;
  uint32_t tail_w = 0;
  const auto emit = [&](const LaneWr& w, size_t next_len) {
    LaneWr x = w;
    acc += x.len;
    // Signal when this WR ends a run that the next WR would push past kProgressChunk.
    x.progress = acc + next_len > kProgressChunk;
    seg = std::max<uint64_t>(seg, acc);
    ++tail_w;
    tail_b += x.len;
    if (x.progress) acc = 0, tail_w = 0, tail_b = 0;
    (out != nullptr ? out[nw] : scratch) = x;
    ++nw;
  };
  for (int i = 0; i < n; ++i) {
    const size_t len = lane_len(sizes[i], lane, nlanes);
    if (len == 0) continue;
    const size_t base = static_cast<size_t>(lane) * chunk_of(sizes[i], nlanes);
    const size_t p = piece_bytes(len);
    for (size_t off = 0; off < len; off += p) {
      LaneWr w;
      w.msg = i;
      w.off = base + off;
      w.len = std::min(p, len - off);
      if (have_prev) emit(prev, w.len);
      prev = w;
      have_prev = true;
    }
  }
  const bool separate_close = !(n == 1 && have_prev) || sizes[0] > ar_threshold;
  if (separate_close) {
    if (have_prev) emit(prev, 0);
    prev = LaneWr{};
    have_prev = true;
  }
  // The close: signaled anyway (never a progress WR), the end of the chain's last run.
  LaneWr close = prev;
  close.progress = false;
  acc += close.len;
  seg = std::max<uint64_t>(seg, acc);
  ++tail_w;
  tail_b += close.len;
  (out != nullptr ? out[nw] : scratch) = close;
  ++nw;
  if (tail_wrs != nullptr) *tail_wrs = tail_w;
  if (tail_bytes != nullptr) *tail_bytes = tail_b;
  if (seg_max != nullptr) *seg_max = seg;
  return nw;
}

}  // namespace sluice::cts
