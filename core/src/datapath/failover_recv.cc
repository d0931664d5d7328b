// Failover's driver on the receive side (failover_dp.h): the fence of each failed path (whose
// local half also waits for every receive WR posted on the path's QPs), the credits the path
// still owes moved to a substitute before the FENCE, the re-publication of every receive not yet
// complete once both sides fenced, and the failback clock (the receiver answers). The comm's mu
// is held by the caller throughout (a receive comm's state is guarded by it).
#include <algorithm>

#include "datapath/failover_dp.h"
#include "sluice/core/base/log.h"

namespace sluice::dp {
namespace {

// The receiver's substitute for path p: the next path after it that carries.
int choose_sub(const Conn& c, int p) {
  for (int k = 1; k < c.npaths; ++k) {
    const int s = (p + k) % c.npaths;
    if (c.fo.path[s].carries()) return s;
  }
  return -1;
}

// The held completions whose QP's marker is back (SLUICE_TEST_HOLD_RQ), taken now.
Status release_held(RecvComm& r) {
  if (r.held.empty()) return Status::ok();
  size_t kept = 0;
  for (size_t i = 0; i < r.held.size(); ++i) {
    const auto& [wc, member] = r.held[i];
    const int q = qp_index(r.c, wc.qp_num, member);
    if (q >= 0 && !r.c.qp[q].led.marker_seen) {
      r.held[kept++] = r.held[i];
      continue;
    }
    ++r.c.fo.held_taken;
    SLUICE_RETURN_IF_ERROR(take_held_wc(r, wc, member));
  }
  r.held.resize(kept);
  return Status::ok();
}

}  // namespace

bool fo_hold_wc(RecvComm& r, const ibv_wc& wc, int member, int q) {
  if (!r.c.fo.hold_rq) return false;  // tests only: one flag test otherwise
  const QpLife& l = r.c.qp[q];
  if (wc.status != IBV_WC_SUCCESS || wc.wr_id >= wire::kFifoSlots) return false;
  if (!l.led.fenced || l.led.marker_seen) return false;
  if (r.held.empty()) r.held.reserve(kRecvRqMaxDepth * wire::kMaxQps);
  r.held.emplace_back(wc, member);
  ++r.c.fo.held_total;
  return true;
}

Status fo_drive_recv(RecvComm& r, int64_t now) {
  Conn& c = r.c;
  PathFailover& f = c.fo;
  // The drain markers, the receive WRs of a fenced QP and the checks of a fresh path (their
  // immediates) come from the CQs; a poll records nothing else to apply here but faults, taken at
  // the next call.
  bool poll = false;
  for (int p = 0; p < c.npaths; ++p) {
    const failover::State st = f.path[p].state();
    poll = poll || st == failover::State::kFencing || st == failover::State::kChecking;
  }
  if (poll) SLUICE_RETURN_IF_ERROR(poll_recv(r));
  for (int p = 0; p < c.npaths; ++p) SLUICE_RETURN_IF_ERROR(fo_fence_step(c, p, now));
  // SLUICE_TEST_HOLD_RQ: held completions are taken only after this call's fence steps, so that a
  // fence which went by its marker alone would already have stated its count without them.
  SLUICE_RETURN_IF_ERROR(release_held(r));
  if (f.held_total > f.held_said && r.held.empty()) {
    SLUICE_INFO(kSubNet,
                "receive comm to %s: SLUICE_TEST_HOLD_RQ held %llu successful receive "
                "completion(s) of fenced QPs until their drain markers were back; all taken",
                c.peer.c_str(), static_cast<unsigned long long>(f.held_total - f.held_said));
    f.held_said = f.held_total;
  }
  for (int p = 0; p < c.npaths; ++p) SLUICE_RETURN_IF_ERROR(fo_clock_step(c, p, now));
  fo_reap_retired(c, now);
  return Status::ok();
}

Status fo_recv_before_fence(RecvComm& r, int p) {
  PathFailover& f = r.c.fo;
  const int sub = choose_sub(r.c, p);
  if (sub < 0) return fo_every_path_failed(r.c);
  f.sub[p] = static_cast<int8_t>(sub);
  // Its QPs' CTS writes completed or were flushed: a rewrite waits for none of them any more (what
  // a flushed one carried is written again by the republication that follows this fence).
  for (int x = p * r.c.qpp; x < (p + 1) * r.c.qpp; ++x) r.c.qp[x].cts_rewrite = 0;
  // Every receive from here on leaves the path out (restriped at the fault, or earlier).
  f.from_seq[p] = r.seq;
  // The path's QPs are in ERROR, their markers back and every receive WR on them completed: their
  // close counts are final. What each still owes (credits - closes) comes on the same lane of the
  // substitute: its receive WRs are posted there before the FENCE tells the sender to send there.
  for (int x = p * r.c.qpp; x < (p + 1) * r.c.qpp; ++x) {
    const int t = sub * r.c.qpp + x % r.c.qpp;
    Result<uint64_t> owed = ledger::move_credits(r.c.qp[x].led, r.c.qp[t].led);
    if (!owed.is_ok()) return fail(r.c, on_qp(r.c, x, owed.status()));
    SLUICE_RETURN_IF_ERROR(post_plain_credits(r, t, owed.value()));
  }
  return Status::ok();
}

Status fo_recv_republish(RecvComm& r) {
  // The oldest published receive not complete: its entries and every later one's are in the
  // stage, each in its own slot (the slot of receive k is reused only by k + kFifoSlots, posted
  // after k completed), so writing them again writes what the sender may already hold, byte for
  // byte, and what a CTS write on the fenced path never delivered.
  uint64_t lo = r.published;
  for (uint64_t k = r.published > wire::kFifoSlots ? r.published - wire::kFifoSlots : 0;
       k < r.published; ++k) {
    const RecvReq& q = r.pool[k % wire::kFifoSlots];
    if (q.magic == Request::kMagic && q.in_use && !q.done && q.seq == k) {
      lo = k;
      break;
    }
  }
  // With the eager path, a receive completed from the ring is complete, but its entries (resolved)
  // may have gone on the failed path: the sender reads its FIFO in order and would stop at one it
  // never got. So from the first slot the sender is not known to have read (eg.head; at most 32
  // behind `published`, and no slot from it on was reused: eager_slot_free), with the grant again
  // first (it may have gone with them; the same bytes).
  if (r.eg.on && r.eg.ring.held()) {
    lo = std::min(
        lo, std::max(r.eg.head, r.published > wire::kFifoSlots ? r.published - wire::kFifoSlots
                                                               : uint64_t{0}));
    if (lo < r.published) {
      r.eg.grant_sent = false;
      r.eg.flush = true;  // resolved entries go now, not in a later batch
      // and what was published goes again as it was: none of it is held back now
      r.eg.flush_to = std::max(r.eg.flush_to, r.published);
    }
  }
  if (lo == r.published) return Status::ok();
  // Later entries for the rewritten slots wait until the rewrite has landed (rules/rewrite_gate.h),
  // and until every CTS write already posted on a path that carries has: the first copy of a
  // rewritten entry may still be on its way there (an RC retry), and would land as late.
  r.rewrite.open(lo, r.published);
  for (int q = 0; q < r.c.nqps; ++q) {
    QpLife& l = r.c.qp[q];
    if (!l || l.led.fenced || !r.c.fo.path[q / r.c.qpp].carries() || l.cts_outstanding == 0)
      continue;
    // An unsignaled tail completes only behind a signaled WR: a zero-length probe.
    if (l.cts_unsignaled > 0) SLUICE_RETURN_IF_ERROR(post_cts_probe(r, q));
    l.cts_rewrite = l.cts_posted;
  }
  r.published = lo;
  return republish_from(r);
}

}  // namespace sluice::dp
