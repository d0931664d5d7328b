#include "base/cts_match.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>

namespace sluice::cts {

Status take_snapshot(const wire::CtsEntry* fifo_slot, uint64_t want, Snapshot* out) {
  // The receiver writes the FIFO with RDMA; seq (the last field) is each entry's publication flag.
  auto seq_of = [](const wire::CtsEntry& x) {
    return std::atomic_ref<const uint64_t>(x.seq).load(std::memory_order_acquire);
  };
  // Entry 0 is written at every use of the slot: until the receive `want` is published it still
  // holds the slot's previous use (want - kFifoSlots; 0 for a fresh FIFO). Anything else was never
  // a clear-to-send of this connection: waiting for it would wait forever.
  if (const uint64_t s0 = seq_of(fifo_slot[0]); s0 != want) {
    const uint64_t prev = want > wire::kFifoSlots ? want - wire::kFifoSlots : 0;
    if (s0 == prev) return Status::again();
    return Status(Code::kRemoteError, "corrupt clear-to-send slot: entry 0 has seq " +
                                          std::to_string(s0) + ", expected " +
                                          std::to_string(want) + " (or " + std::to_string(prev) +
                                          ", the slot's previous use, while not yet published)");
  }
  wire::CtsEntry first;
  std::memcpy(&first, &fifo_slot[0], sizeof first);
  const int nreqs = first.nreqs;
  if (nreqs < 1 || nreqs > wire::kEntriesPerSlot) {
    return Status(Code::kRemoteError,
                  "corrupt clear-to-send entry (" + std::to_string(nreqs) + " receives)");
  }
  for (int i = 1; i < nreqs; ++i)
    if (seq_of(fifo_slot[i]) != want) return Status::again();
  std::memcpy(out->e, fifo_slot, static_cast<size_t>(nreqs) * sizeof(wire::CtsEntry));
  for (int i = 0; i < nreqs; ++i) {
    const wire::CtsEntry& x = out->e[i];
    // A rewrite between the seq check and the copy shows here: the copy is what gets used.
    if (x.seq != want || x.nreqs != nreqs || x.index != i) {
      out->seq = 0;
      return Status(Code::kRemoteError,
                    "corrupt clear-to-send slot: entry " + std::to_string(i) + " says index " +
                        std::to_string(x.index) + " of " + std::to_string(x.nreqs) + " (seq " +
                        std::to_string(x.seq) + "), expected index " + std::to_string(i) + " of " +
                        std::to_string(nreqs) + " (seq " + std::to_string(want) + ")");
    }
  }
  out->nreqs = nreqs;
  out->seq = want;
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

Status check_imm(uint32_t imm, size_t posted0, bool* has_record, size_t* received0) {
  if (imm & wire::kImmRecord) {
    *has_record = true;
    return Status::ok();
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
                    const int* tags, size_t* received) {
  wire::DoneRecord rec;  // one read of memory the peer writes
  std::memcpy(&rec, &rec_in, sizeof rec);
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

uint32_t group_wrs(const size_t* sizes, int n, int lane, int nlanes, size_t ar_threshold) {
  uint32_t w = 0;
  for (int i = 0; i < n; ++i)
    if (static_cast<size_t>(lane) * chunk_of(sizes[i], nlanes) < sizes[i]) ++w;
  if (n == 1 && w == 1) return sizes[0] > ar_threshold ? 2 : 1;
  return w + 1;
}

}  // namespace sluice::cts
