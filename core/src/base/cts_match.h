// The data path's reading of what the peer writes into our memory, as pure functions without verbs:
// the sender's snapshot and matching of a clear-to-send slot, the receiver's check of an immediate
// and of a completion record, and how a message is laid over the QPs. datapath code calls these
// on live comms; fuzz/cts_slot_fuzz.cc drives the same functions with arbitrary bytes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sluice/core/base/status.h"
#include "sluice/core/base/wire.h"

namespace sluice::cts {

// A validated copy of one FIFO slot, taken once at its first use: nothing is matched against the
// FIFO memory itself, which the peer may rewrite at any time.
struct Snapshot {
  uint64_t seq = 0;  // receive sequence number + 1 of the slot; 0 = no snapshot held
  int nreqs = 0;     // 1..kEntriesPerSlot
  wire::CtsEntry e[wire::kEntriesPerSlot] = {};
};

// Reads the slot `fifo_slot` (kEntriesPerSlot entries) for the receive whose published seq is
// `want`. ok: *out holds a validated copy; again: not (completely) published yet (entry 0 still
// holds the slot's previous seq, want - kFifoSlots or 0); kRemoteError: the entries are corrupt
// (entry 0's seq neither `want` nor the previous one, count outside 1..8, an entry whose index or
// count disagrees).
Status take_snapshot(const wire::CtsEntry* fifo_slot, uint64_t want, Snapshot* out);

struct Match {
  enum Kind {
    kMatched,   // entry `index` takes this send
    kLater,     // no unmatched entry has this tag: it belongs to a later receive
    kTooLarge,  // entry `index` has the tag but a smaller buffer than the send
  } kind = kLater;
  int index = -1;
};
// Matches a send of `size` bytes with `tag` against the snapshot; bit i of `matched` = entry i
// already has its send. The first unmatched entry with the tag wins.
Match match(const Snapshot& s, uint8_t matched, int tag, size_t size);

// Receive side. `imm` is the host-order immediate of a completion for a receive whose first
// buffer holds `posted0` bytes: sets *has_record, or *received0 for a single receive. Error: the
// peer reports more bytes than were posted.
Status check_imm(uint32_t imm, size_t posted0, bool* has_record, size_t* received0);

// Checks the completion record of receive `seq` (n buffers of posted[i] bytes, tags[i]) and fills
// received[0..n) on success. kInvalidUsage: the peer's send was larger than the buffer (nothing
// was written); kRemoteError: the record is out of sequence, has an unknown status or reports more
// bytes than posted.
Status check_record(const wire::DoneRecord& rec, uint64_t seq, int n, const size_t* posted,
                    const int* tags, size_t* received);

// How messages are laid over `nqps` QPs. split: every message is cut into 128-byte-aligned chunks,
// one per QP ("lane" = QP). Otherwise the whole group of receive `seq` travels on QP seq % nqps
// (one lane), an order both sides derive from the receive sequence number.
inline constexpr size_t kSplitAlign = 128;  // LL128 lines stay intact
inline int lanes(bool split, int nqps) {
  return split ? nqps : 1;
}
inline int qp_of_lane(bool split, int nqps, uint64_t seq, int lane) {
  return split ? lane : static_cast<int>(seq % static_cast<uint64_t>(nqps));
}
// Bytes of a message of `size` bytes that each lane carries (the last lane may carry less).
size_t chunk_of(size_t size, int nlanes);
// WRs a group (sizes[0..n)) puts on one lane: one WRITE per member with bytes on the lane, and the
// closing WRITE_WITH_IMM (which is the last WRITE itself for a single message with bytes there,
// unless the message is larger than `ar_threshold`: adaptive routing closes it with its own WR).
uint32_t group_wrs(const size_t* sizes, int n, int lane, int nlanes,
                   size_t ar_threshold = SIZE_MAX);

}  // namespace sluice::cts
