// The data path's reading of what the peer writes into our memory, as pure functions without verbs:
// the sender's snapshot and matching of a clear-to-send slot, the receiver's check of an immediate
// and of a completion record, and how a message is laid over the QPs. datapath code calls these
// on live comms; fuzz/cts_slot_fuzz.cc drives the same functions with arbitrary bytes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sluice/core/base/status.h"
#include "sluice/core/wire/wire.h"

namespace sluice::cts {

// A validated copy of one FIFO slot, taken once at its first use: nothing is matched against the
// FIFO memory itself, which the peer may rewrite at any time.
struct Snapshot {
  uint64_t seq = 0;  // receive sequence number + 1 of the slot; 0 = no snapshot held
  int nreqs = 0;     // 1..kEntriesPerSlot
  // The eager path (wire::kCtsResolved, only where `eager` was passed): every part of the receive
  // came from the eager ring before its entries were written; the sender posts nothing for it.
  bool resolved = false;
  wire::CtsEntry e[wire::kEntriesPerSlot] = {};
  // Fused comms (wire::CtsMembers): each entry's rkey per receiver member, and the receive's
  // paths; one path (mask 1, x zero) on a comm of one path.
  uint32_t paths = 1;
  uint32_t shares =
      0;  // wire::CtsMembers::shares (path-message set 2; 0: every path's whole share)
  wire::CtsMembers x[wire::kEntriesPerSlot] = {};
};

// Reads the slot `fifo_slot` (kEntriesPerSlot entries) for the receive whose published seq is
// `want`. ok: *out holds a validated copy; again: not (completely) published yet (entry 0 still
// holds the slot's previous seq, want - kFifoSlots or 0); kRemoteError: the entries are corrupt
// (entry 0's seq neither `want` nor the previous one, count outside 1..8, an entry whose index or
// count disagrees).
// `eager`: the comm negotiated the eager path, so nreqs may carry wire::kCtsResolved (the same in
// every entry); without it that bit makes the count invalid, as before.
Status take_snapshot(const wire::CtsEntry* fifo_slot, uint64_t want, Snapshot* out,
                     bool eager = false);
// The same for a fused comm of `npaths` paths (2..kMaxMetaMembers) whose receiver has `nrecv`
// members: the slot's entries are cell pairs (wire::cts_cells). Also kRemoteError: a paths mask
// that is empty, names a path >= npaths or differs between entries, rkey[0] other than the entry's,
// a key on a member the receiver does not have, non-zero reserved words; shares other than entry
// 0's, a share for a path outside the mask or above 99 %, or any share where `shares_ok` is false
// (a comm of path-message set 1). `eager`: as for take_snapshot.
Status take_snapshot_fused(const wire::CtsEntry* fifo_slot, uint64_t want, int npaths, int nrecv,
                           Snapshot* out, bool shares_ok = false, bool eager = false);

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
// `eager` (a one-path comm with the eager path): an immediate with wire::kImmEager set says the
// single message came through the eager ring (*eager_part = true; its size below the bit).
Status check_imm(uint32_t imm, size_t posted0, bool* has_record, size_t* received0,
                 bool eager = false, bool* eager_part = nullptr);

// Checks the completion record of receive `seq` (n buffers of posted[i] bytes, tags[i]) and fills
// received[0..n) on success. kInvalidUsage: the peer's send was larger than the buffer (nothing
// was written); kRemoteError: the record is out of sequence, has an unknown status or reports more
// bytes than posted.
// `eager_mask` (not null on a comm with the eager path): sizes may carry wire::kRecordEager, the
// part came through the eager ring; bit i set for each such part, its size below the flag.
Status check_record(const wire::DoneRecord& rec, uint64_t seq, int n, const size_t* posted,
                    const int* tags, size_t* received, uint8_t* eager_mask = nullptr);

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

// ---- Progress signals inside long chains (the watchdog's view, health/progress.h) -------------
// A message's bytes on a lane travel as WRITEs of at most piece_bytes(len) bytes: the whole `len`
// up to kProgressChunk (the small-message path: one WRITE, as before), else kProgressChunk, or,
// past kMaxPieces chunks, the smallest multiple of kProgressChunk that keeps the message at
// kMaxPieces WRITEs (so one group always fits the send queue: kMaxLaneWrs). Along a lane's chain a
// WRITE is signaled ("progress" WR) when the bytes since the previous signal, its own included,
// plus the next WR's would exceed kProgressChunk; the closing WR is signaled anyway. So no chain
// moves more than max(kProgressChunk, its largest WRITE) bytes between two signaled completions,
// and a chain of messages at most kProgressChunk long each gets no extra WR, and no extra
// completion unless its lane carries more than kProgressChunk in all (a group).
// 1 MiB: a completion per MiB costs one CQE poll (~0.1 us) against ~40 us of wire time at
// 200 Gb/s, and WRITEs of 1 MiB still run at line rate; the watchdog then sees progress every MiB.
inline constexpr size_t kProgressChunk = size_t{1} << 20;
// 7 (issue 32): a group of eight messages, 57 WRs on one lane, fits a send queue of 63 WRs, a
// quarter of the 255 that 16 pieces needed (rxe rounds a queue to a power of two, so 63 holds 64
// slots): the queue's memory is most of what an idle send comm holds.
inline constexpr uint32_t kMaxPieces = 7;
inline constexpr uint32_t kMaxLaneWrs = wire::kEntriesPerSlot * kMaxPieces + 1;
size_t piece_bytes(size_t len);
uint32_t pieces(size_t len);  // WRITEs for `len` bytes of one message (0 for none)

// One WR of a lane's chain (plan_lane): bytes [off, off + len) of message `msg` (-1: the separate
// closing WRITE_WITH_IMM, no data bytes of a message), signaled as a progress WR or not.
struct LaneWr {
  int msg = -1;
  size_t off = 0;
  size_t len = 0;
  bool progress = false;
};
// The lane's chain in order: the WRITEs, then the separate close where there is one (the last WR
// is the close either way; group_wrs() WRs in all). Also, when not null: *tail_wrs / *tail_bytes,
// the WRs and data bytes after the last progress WR (what the closing completion frees), and
// *seg_max, the most data bytes between two signaled completions of the chain. out: kMaxLaneWrs
// entries, or null for the counts only.
uint32_t plan_lane(const size_t* sizes, int n, int lane, int nlanes, size_t ar_threshold,
                   LaneWr* out, uint32_t* tail_wrs = nullptr, uint64_t* tail_bytes = nullptr,
                   uint64_t* seg_max = nullptr);

}  // namespace sluice::cts
