// A failover's re-publication of clear-to-send entries (failover_recv.cc fo_recv_republish), as
// a pure rule: which later entries must wait until every rewritten entry has landed.
//
// The hazard. The sender's FIFO slot s holds the entry of receive k (s = k % kFifoSlots) until the
// receiver writes the entry of receive k + kFifoSlots there. In a comm's ordinary life each entry
// is written once, and k + kFifoSlots is written only after the receiver knows the sender read k
// (k completed, or the sender's head passed it), so the write of k had landed: whatever QPs the two
// go on, k + kFifoSlots lands last. A re-publication breaks that: after a failover the receiver
// writes the entries of receives [lo, hi) again, because some may have gone on the failed path
// and never arrived. The sender may hold those entries already (it read k before the fault) and
// finish k, and the receiver may then publish k + kFifoSlots, while the second copy of k is still
// in flight. The two writes go on the QPs that cts_qp picks for the first receive of each write,
// which differ whenever the comm has more than one carrying QP and the writes start at different
// receives. RC orders writes on one QP only: the copy of k could land after the entry of
// k + kFifoSlots and hide it, and the sender would wait for that slot until the comm's progress
// bound failed it.
//
// The same holds for the first copy of a rewritten entry, if it is still on its way on a QP left
// (a packet lost and retried by RC): it too could land after k + kFifoSlots's entry.
//
// The rule. While a rewrite is open, entries from lo + kFifoSlots on (the first one that reuses a
// rewritten slot) are not published. When it opens, every QP of a carrying path with CTS writes
// not known complete takes its count of CTS writes as its target (QpLife::cts_rewrite), with a
// zero-length signaled probe behind an unsignaled tail; every CTS write that carries a rewritten
// entry is signaled, and its QP's count at that point becomes its target. The rewrite closes once
// every entry of [lo, hi) was written again and every QP's completed count reached its target. A
// completed CTS write landed at the sender (RC: the responder acknowledged it), so nothing written
// before the close, first copies included, can land after it. A QP fenced meanwhile loses its
// target (fo_recv_before_fence): its writes either completed or were flushed and never land; the
// fence republishes again, and the rewrite widens to cover both.
//
// What it costs: receives k + kFifoSlots and later wait one CTS write's round trip after a
// failover, once; nothing at all on a comm that never fails over.
#pragma once

#include <algorithm>
#include <cstdint>

#include "sluice/core/wire/wire.h"

namespace sluice::rules {

class RewriteGate {
 public:
  // Receives [lo, hi) are written again (hi: the receives published before). A rewrite still open
  // widens to cover both: while one is open nothing from its lo + kFifoSlots on was published, so
  // the union spans at most kFifoSlots receives.
  void open(uint64_t lo, uint64_t hi) {
    if (hi <= lo) return;
    if (is_open()) {
      lo_ = std::min(lo_, lo);
      hi_ = std::max(hi_, hi);
    } else {
      lo_ = lo;
      hi_ = hi;
    }
  }
  bool is_open() const { return hi_ > lo_; }
  // Whether a CTS write of receives [from, to) carries a rewritten entry: it is signaled, and its
  // QP's count after it becomes that QP's target.
  bool rewrites(uint64_t from, uint64_t to) const { return is_open() && from < hi_ && lo_ < to; }
  // The end of what may be published now, of `end` wanted.
  uint64_t limit(uint64_t end) const {
    return is_open() ? std::min(end, lo_ + static_cast<uint64_t>(wire::kFifoSlots)) : end;
  }
  // Closes the rewrite once every rewritten entry went out again (published >= hi) and `landed`
  // (every QP's completed CTS writes reached its target). True: it closed now.
  bool close_if(uint64_t published, bool landed) {
    if (!is_open() || published < hi_ || !landed) return false;
    lo_ = hi_ = 0;
    return true;
  }
  uint64_t lo() const { return lo_; }
  uint64_t hi() const { return hi_; }

 private:
  uint64_t lo_ = 0;
  uint64_t hi_ = 0;
};

}  // namespace sluice::rules
