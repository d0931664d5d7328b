// One incarnation of one of a comm's QPs (issue 31): the verbs QP and every count kept about the
// work on it, made and dropped whole. A comm holds one per QP index (Conn::qp); failback replaces a
// path's QPs by making fresh incarnations beside the old ones and swapping them in only once they
// exist (failback_dp.cc), so a failed ibv_create_qp leaves the old incarnation, and its reason,
// in place; the old ones go to the comm's retired list (RetiredQp) until their last completions
// are polled, so that a stale completion is known as such, and a QP number is never reused while
// a completion of it may still be in a CQ. No field of an incarnation is reset by hand: a new one
// starts from this struct's defaults.
#pragma once

#include <cstdint>
#include <memory>

#include "health/qp_ledger.h"
#include "sluice/core/base/verbs.h"

namespace sluice {

struct QpLife {
  verbs::Qp qp;             // null only before setup created it
  uint32_t qpn = 0;         // qp->qp_num, kept: a completion is matched without touching qp
  uint32_t remote_qpn = 0;  // the peer's QP at the other end (set at RTR)
  uint32_t epoch = 0;       // the path's epoch it was made for (0: at connect)
  uint32_t psn = 0;         // its first send PSN (failback's fresh QPs)
  // Work posted on its queues and not yet completed. The sender's send queue: WRs, their data
  // bytes, and the most data bytes between two signaled completions since it was last idle
  // (the watchdog's bound, progress.h). Receive WRs: both sides (the receiver's credits, a check).
  uint32_t sq_used = 0;
  uint64_t sq_bytes = 0;
  uint64_t sq_seg = 0;
  uint32_t rq_outstanding = 0;
  // The receiver's clear-to-send writes on it: since the last signaled one, whose send-queue slot
  // is in use, the first receive of its latest write, a watchdog probe outstanding (progress.h).
  uint32_t cts_unsignaled = 0;
  uint32_t cts_outstanding = 0;
  uint64_t cts_tail_from = 0;
  bool cts_probing = false;
  // Its CTS writes (entries, probes, grants) posted, and the count of them a failover's rewrite
  // waits to see complete (rules/rewrite_gate.h; 0: none). Complete: all but the outstanding ones.
  uint64_t cts_posted = 0;
  uint64_t cts_rewrite = 0;
  uint64_t cts_completed() const { return cts_posted - cts_outstanding; }
  // The progress watchdog's clock (progress.h ProgressWatch): watched work without completion
  // since this time (steady clock, ns); 0: not running.
  int64_t since_ns = 0;
  // Failover: its ledger (closes, credits, the chain-log window, the fence's flags) and, for a
  // fresh incarnation, whether its check passed (failback_dp.cc).
  ledger::QpLedger led;
  bool checked = false;
  // When its fence began (ms, steady clock): the local half of the fence is bounded
  // (SLUICE_CLOSE_TIMEOUT_MS).
  int64_t fence_ms = 0;

  explicit operator bool() const { return static_cast<bool>(qp); }
  ibv_qp* get() const { return qp.get(); }
};

// A comm's QP incarnations, one per QP index (Conn::nqps of them), made once by create_qps before
// the first QP: a one-QP comm holds one QpLife (144 bytes), not wire::kMaxQps of them. Every
// reader indexes below Conn::nqps, which create_qps sets after make().
class QpSet {
 public:
  void make(int n) {
    p_ = std::make_unique<QpLife[]>(static_cast<size_t>(n));
    n_ = n;
  }
  int size() const { return n_; }
  QpLife& operator[](int q) { return p_[q]; }
  const QpLife& operator[](int q) const { return p_[q]; }

 private:
  std::unique_ptr<QpLife[]> p_;
  int n_ = 0;
};

// An incarnation replaced by failback or dropped by a failed attempt, kept until its queues'
// completions are polled (or the comm closes): its QP number stays taken, and a completion that
// names it is recognised as stale (failover_dp.cc) instead of failing the comm as unknown.
struct RetiredQp {
  verbs::Qp qp;
  uint32_t qpn = 0;
  int member = -1;              // its member (QP numbers are per adapter)
  int index = -1;               // the comm QP index it was
  uint32_t rq_outstanding = 0;  // receive WRs not completed yet
  bool marker_seen = false;     // its drain marker (posted when it was retired) came back
  int64_t since_ms = 0;         // retired at (ms): dropped anyway after SLUICE_CLOSE_TIMEOUT_MS
  explicit operator bool() const { return index >= 0; }  // a slot in use
};

}  // namespace sluice
