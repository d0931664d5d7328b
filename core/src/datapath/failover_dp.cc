// Failover's driver, the part both sides share (health/path_failover.h says the design,
// health/failover.h the rules of one path): it takes what the comm saw (the async-event thread's
// word, faults found by completion polls and the watchdog, the peer's path messages, drain
// markers, the clock), feeds each path's rules, and carries out what they answer (fo_apply). The
// sender's and the receiver's own steps are failover_send.cc and failover_recv.cc. Runs at the
// start of every call on the comm (check_device), never inside a completion poll's loop. On a
// healthy comm it costs one atomic load and one flag test per call.
#include "datapath/failover_dp.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "sluice/core/base/log.h"
#include "sluice/core/base/qp.h"

namespace sluice::dp {

int64_t fo_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const char* fo_side(const Conn& c) {
  return c.fo.sender ? "send" : "receive";
}

std::string fo_path_desc(const Conn& c, int p) {
  const int q = p * c.qpp;
  return "path " + std::to_string(p) + " (" + c.describe_qp(q) +
         (c.qpp > 1 ? " +" + std::to_string(c.qpp - 1) + " QPs" : "") + ")";
}

Status fo_every_path_failed(Conn& c) {
  return fail(
      c, Status(Code::kRemoteError, std::string(fo_side(c)) + " comm to " + c.peer +
                                        ": every path failed, none is left to carry its traffic; " +
                                        failover::paths_report(c.fo.path, c.npaths)));
}

bool fo_member_dead(const Conn& c, int p) {
  return (c.fo.dead_members >> c.qp_member[p * c.qpp] & 1u) != 0;
}

namespace {

// Moves the path's QPs to ERROR and posts each one's drain marker (a full send queue takes it
// once flushed WRs were polled: retried at every step). A QP of a dead device (DEVICE_FATAL) is
// fenced without waiting: a device that reported a fatal error places no byte in memory any more,
// and its CQ reports nothing more (it is not polled again: datapath.cc), so what this side polled
// of it is final; its marker counts as back and its receive WRs as flushed. Its move to ERROR is
// still tried, and its failure ignored: a device whose fatal event was reported while it still
// works (or injected by a test) then stops placing too.
Status fence_local(Conn& c, int p, int64_t now) {
  const bool dead = fo_member_dead(c, p);
  for (int q = p * c.qpp; q < (p + 1) * c.qpp; ++q) {
    QpLife& l = c.qp[q];
    if (!l.led.fenced) {
      l.led.fenced = true;
      l.fence_ms = now;
      l.since_ns = 0;  // the watchdog no longer watches it
      if (dead) {
        (void)qp_to_error(l.get());
        l.led.marker_posted = l.led.marker_seen = true;
        l.rq_outstanding = 0;
        continue;
      }
      if (Status st = qp_to_error(l.get()); !st.is_ok())
        return fail(c, on_qp(c, q, Status(st.code(), "failover fence: " + st.message())));
    }
    if (l.led.marker_posted) continue;
    ibv_send_wr w{};
    w.wr_id = kWrDrainMarker | static_cast<uint64_t>(q);
    w.opcode = IBV_WR_SEND;
    w.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    const int rc = ibv_post_send(l.get(), &w, &bad);
    if (rc == ENOMEM) continue;  // full: flushed WRs make room once polled
    if (rc != 0) {
      return fail(c, Status(Code::kSystemError, "failover fence: the drain marker on " +
                                                    c.describe_qp(q) + ": " + std::strerror(rc)));
    }
    l.led.marker_posted = true;
  }
  return Status::ok();
}

Status restripe(Conn& c) {
  if (fo_restripe(c.fo, c.paths) == 0 && failover::none_left(c.fo.path, c.npaths))
    return fo_every_path_failed(c);
  return Status::ok();
}

Status fault(Conn& c, int p, failover::Cause cause, const std::string& what, int64_t now) {
  if (p < 0 || p >= c.npaths) return Status::ok();
  const failover::State was = c.fo.path[p].state();
  const uint32_t a = c.fo.path[p].on_fault(cause, what, now);
  if (was == failover::State::kUp || was == failover::State::kRamping) c.fo.rec->fault_ms[p] = now;
  return fo_apply(c, p, a, now);
}

std::string members_text(const Conn& c, uint32_t bits) {
  std::string t;
  for (int m = 0; m < c.nmembers; ++m) {
    if ((bits >> m & 1u) == 0) continue;
    const Device* d = c.members[m].dev;
    t += (t.empty() ? "" : ", ") + (d != nullptr ? port_label(*d) : "?");
  }
  return t;
}

}  // namespace

wire::PathMsg fo_msg(const Conn& c, wire::PathMsgType t, int p) {
  wire::PathMsg m;
  m.type = t;
  m.path = static_cast<uint8_t>(p);
  m.epoch = c.fo.path[p].epoch();
  m.nqps = static_cast<uint8_t>(c.qpp);
  return m;
}

wire::PathMsg fo_fence_msg(const Conn& c, int p, uint32_t epoch, bool counts) {
  const PathFailover& f = c.fo;
  wire::PathMsg m = fo_msg(c, wire::PathMsgType::kFence, p);
  m.epoch = epoch;
  for (int k = 0; k < c.qpp && counts; ++k) {
    const ledger::QpLedger& l = c.qp[p * c.qpp + k].led;
    m.last_seq[k] = f.sender ? l.chains : l.closes;
  }
  // The receiver's fence of a carrying path names its substitute and first receive without the
  // path; a refusal of an attempt (no counts) names none.
  if (!f.sender && counts && f.sub[p] >= 0) {
    m.sub = static_cast<uint8_t>(f.sub[p] + 1);
    m.from_seq = f.from_seq[p];
  }
  return m;
}

// A message this small fits an idle socket's buffer; a short or refused write fails the comm.
Status fo_send_msg(Conn& c, const wire::PathMsg& m) {
  uint8_t buf[wire::kPathMsgMaxBytes];
  const size_t n = wire::encode_path_msg(m, buf);
  if (n == 0) {
    return fail(c, Status(Code::kInternalError, std::string("failover: a ") +
                                                    wire::path_msg_type_name(m.type) +
                                                    " message did not encode"));
  }
  if (c.link.on()) {  // on the peer link (health/peer_link.h): queued when the socket is full
    std::string why;
    if (link_send(c.link, wire::LinkFrameType::kPath, buf, n, &why)) return Status::ok();
    return fail(c, Status(Code::kRemoteError,
                          std::string("failover: the ") + wire::path_msg_type_name(m.type) +
                              " of " + fo_path_desc(c, m.path) + " to peer " + c.peer +
                              " could not be sent on the peer link (" + why + "); " +
                              failover::paths_report(c.fo.path, c.npaths)));
  }
  const ssize_t sent = ::send(c.fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (sent != static_cast<ssize_t>(n)) {
    return fail(c, Status(Code::kRemoteError,
                          std::string("failover: the ") + wire::path_msg_type_name(m.type) +
                              " of " + fo_path_desc(c, m.path) + " to peer " + c.peer +
                              " could not be sent on the connection socket (" +
                              (sent < 0 ? std::string(std::strerror(errno)) : "short write") +
                              "); " + failover::paths_report(c.fo.path, c.npaths)));
  }
  return Status::ok();
}

// What a path's rules answered, carried out. The order is part of the protocol:
//  1. kLog: the INFO line names the transition the rest carries out.
//  2. kCommFails: nothing else is done for a comm that gives up.
//  3. kRestripe: the live stripe first, so that every receive taken from here on (the receiver)
//     leaves a failed path out before its FENCE names the first such receive (from_seq).
//  4. kFenceLocal: this side's QPs of the path to ERROR and their drain markers, before any FENCE
//     (a FENCE is only ever answered once the local fence is complete: on_local_fenced).
//  5. kSendFence: the receiver first moves the credits the path's QPs still owe to the substitute
//     (failover_recv.cc), so that what the FENCE tells the sender to send there has its receive
//     WRs before the sender can act on it; then the FENCE, which ends this side's counting on
//     those QPs (ledger fence_told). With kDropFresh (an attempt failed here) it is a refusal of
//     the attempt's epoch: no substitute, no counts, nothing moved.
//  6. kSendChecked: the sender's checks completed (CHECKED).
//  7. kReplay: both sides fenced: the sender replays (its driver's next step), the receiver
//     publishes every receive not yet complete again, over the paths that carry.
//  8. The recovery actions last (kDropFresh, kOffer, kAnswer, kConnect, kCheck): they replace QPs
//     of a path that carries nothing by now.
Status fo_apply(Conn& c, int p, uint32_t a, int64_t now, const wire::PathMsg* peer) {
  PathFailover& f = c.fo;
  if (a & failover::kLog) {
    SLUICE_INFO(kSubNet, "%s comm to %s: %s %s", fo_side(c), c.peer.c_str(),
                fo_path_desc(c, p).c_str(), f.path[p].describe().c_str());
  }
  if (a & failover::kCommFails) {
    return fail(
        c, Status(Code::kRemoteError, std::string(fo_side(c)) + " comm to " + c.peer + ": " +
                                          fo_path_desc(c, p) + " " + f.path[p].describe() + "; " +
                                          failover::paths_report(f.path, c.npaths)));
  }
  if (a & failover::kRestripe) SLUICE_RETURN_IF_ERROR(restripe(c));
  if (a & failover::kFenceLocal) SLUICE_RETURN_IF_ERROR(fence_local(c, p, now));
  if (a & failover::kSendFence) {
    const bool refusal = (a & failover::kDropFresh) != 0;
    if (!refusal && !f.sender)
      SLUICE_RETURN_IF_ERROR(fo_recv_before_fence(*static_cast<RecvComm*>(c.owner), p));
    SLUICE_RETURN_IF_ERROR(fo_send_msg(c, fo_fence_msg(c, p, f.path[p].epoch(), !refusal)));
    if (!refusal)
      for (int q = p * c.qpp; q < (p + 1) * c.qpp; ++q) c.qp[q].led.fence_told = true;
  }
  if (a & failover::kSendChecked)
    SLUICE_RETURN_IF_ERROR(fo_send_msg(c, fo_msg(c, wire::PathMsgType::kChecked, p)));
  if (a & failover::kReplay) {
    f.rec->down_ms[p] = now;
    if (!f.can_recover) {
      SLUICE_INFO(kSubNet,
                  "%s comm to %s: %s is not brought back (an iWARP comm: its QPs connect only "
                  "through rdma_cm); it runs on the paths left",
                  fo_side(c), c.peer.c_str(), fo_path_desc(c, p).c_str());
    } else if (fo_member_dead(c, p)) {
      SLUICE_INFO(kSubNet, "%s comm to %s: %s stays down: %s", fo_side(c), c.peer.c_str(),
                  fo_path_desc(c, p).c_str(), f.rec->dead_why[p].c_str());
    }
    if (f.sender) {
      f.replay_pending[p] = true;
    } else {
      RecvComm& r = *static_cast<RecvComm*>(c.owner);
      SLUICE_RETURN_IF_ERROR(fo_recv_republish(r));
      f.last_stall_ms = f.rec->path_stall_ms[p] = now - f.rec->fault_ms[p];
      if (r.rewrite.is_open()) {
        SLUICE_INFO(kSubNet,
                    "receive comm to %s: %s fenced on both sides %lld ms after the fault; every "
                    "receive not yet complete is published again over the paths left (receives "
                    "%llu..%llu; entries from receive %llu on wait until those writes complete)",
                    c.peer.c_str(), fo_path_desc(c, p).c_str(),
                    static_cast<long long>(f.last_stall_ms),
                    static_cast<unsigned long long>(r.rewrite.lo()),
                    static_cast<unsigned long long>(r.rewrite.hi() - 1),
                    static_cast<unsigned long long>(r.rewrite.lo() + wire::kFifoSlots));
      } else {
        SLUICE_INFO(kSubNet,
                    "receive comm to %s: %s fenced on both sides %lld ms after the fault; no "
                    "published receive is waiting: nothing to publish again",
                    c.peer.c_str(), fo_path_desc(c, p).c_str(),
                    static_cast<long long>(f.last_stall_ms));
      }
    }
  }
  if (a & (failover::kOffer | failover::kAnswer)) f.sub[p] = -1;  // fresh QPs: the path's own
  if (a & (failover::kDropFresh | failover::kOffer | failover::kAnswer | failover::kConnect |
           failover::kCheck))
    SLUICE_RETURN_IF_ERROR(fo_recovery_action(c, p, a, peer, now));
  return Status::ok();
}

namespace {

// The peer's FENCE of path p. Its epoch is checked before anything of it is used: a FENCE of an
// incarnation already gone (a late one of a failed attempt) changes nothing. A FENCE that fences
// a carrying path (or completes this side's fence) brings the receiver's substitute, first receive
// without the path and close counts; one that answers an attempt (the peer refused it, or its
// fresh path failed) ends the attempt and carries nothing this side uses.
Status take_fence(Conn& c, const wire::PathMsg& m, int64_t now) {
  PathFailover& f = c.fo;
  const int p = m.path;
  using PeerFence = failover::Path::PeerFence;
  const PeerFence use = f.path[p].classify_peer_fence(m.epoch);
  if (use == PeerFence::kStale) return Status::ok();  // of an incarnation already gone
  const failover::State was = f.path[p].state();
  if (use == PeerFence::kFences && f.sender) {
    if (m.sub == 0 || m.sub - 1 >= c.npaths || m.sub - 1 == p) {
      return fail(c, Status(Code::kRemoteError,
                            "failover: peer " + c.peer + "'s FENCE of path " + std::to_string(p) +
                                " names no substitute path (" + std::to_string(m.sub) + ")"));
    }
    f.sub[p] = static_cast<int8_t>(m.sub - 1);
    f.from_seq[p] = m.from_seq;
    for (int k = 0; k < c.qpp; ++k) f.rec->peer_counts[p][k] = m.last_seq[k];
  }
  const uint32_t a = f.path[p].on_peer_fence(m.epoch, now);
  if (was == failover::State::kUp || was == failover::State::kRamping) f.rec->fault_ms[p] = now;
  return fo_apply(c, p, a, now);
}

Status take_inbox(Conn& c, int64_t now) {
  PathFailover& f = c.fo;
  if (f.inbox_lost) {
    return fail(c, Status(Code::kInternalError, "failover: a path message from peer " + c.peer +
                                                    " was read with the inbox full"));
  }
  for (int i = 0; i < f.inbox_n; ++i) {
    const wire::PathMsg& m = f.inbox[i];
    if (m.path >= c.npaths || m.nqps != c.qpp) {
      return fail(
          c, Status(Code::kRemoteError,
                    "failover: peer " + c.peer + " sent a " + wire::path_msg_type_name(m.type) +
                        " for path " + std::to_string(m.path) + " of " + std::to_string(m.nqps) +
                        " QPs; this comm has " + std::to_string(c.npaths) + " paths of " +
                        std::to_string(c.qpp)));
    }
    if (m.type == wire::PathMsgType::kChecked && !f.timing.checked_word) {
      return fail(c, Status(Code::kRemoteError,
                            "failover: peer " + c.peer +
                                " sent CHECKED, which the path-message set agreed at connect "
                                "(set 1: FENCE, OFFER, ANSWER) does not have"));
    }
    const int p = m.path;
    if (m.type == wire::PathMsgType::kOffer) {  // to the receiver: the sender's attempt
      if (f.sender) continue;                   // the receiver never offers
      if (f.path[p].state() == failover::State::kDown && !fo_may_answer(c, p, now)) {
        // Refused with a FENCE of the offer's epoch, which ends the sender's attempt at once.
        SLUICE_INFO(kSubNet,
                    "receive comm to %s: path %d: the recovery offer of epoch %u is refused (%s); "
                    "the sender offers again",
                    c.peer.c_str(), p, m.epoch,
                    fo_member_dead(c, p) ? f.rec->dead_why[p].c_str()
                                         : "this side cannot take the path back yet");
        SLUICE_RETURN_IF_ERROR(fo_send_msg(c, fo_fence_msg(c, p, m.epoch, false)));
        continue;
      }
      SLUICE_RETURN_IF_ERROR(fo_apply(c, p, f.path[p].on_peer_offer(m.epoch, now), now, &m));
      continue;
    }
    if (m.type == wire::PathMsgType::kAnswer) {  // to the sender: its offer accepted
      if (!f.sender) continue;
      SLUICE_RETURN_IF_ERROR(fo_apply(c, p, f.path[p].on_peer_answer(m.epoch, now), now, &m));
      continue;
    }
    if (m.type == wire::PathMsgType::kChecked) {  // to the receiver: the path works both ways
      if (f.sender) continue;
      SLUICE_RETURN_IF_ERROR(fo_apply(c, p, f.path[p].on_peer_checked(m.epoch, now), now));
      continue;
    }
    SLUICE_RETURN_IF_ERROR(take_fence(c, m, now));
  }
  f.inbox_n = 0;
  return Status::ok();
}

// The async-event thread's word: ports lost or back, QP events, dead devices.
Status take_events(Conn& c, uint64_t ev, int64_t now) {
  PathFailover& f = c.fo;
  const uint32_t dead = static_cast<uint32_t>(ev >> kEvDeviceDeadShift) & 0xffu;
  if (dead != 0) {
    const uint32_t fresh = dead & ~f.dead_members;
    f.dead_members |= dead;
    for (int p = 0; p < c.npaths && fresh != 0; ++p) {
      if ((fresh >> c.qp_member[p * c.qpp] & 1u) == 0) continue;
      const Device* d = c.members[c.qp_member[p * c.qpp]].dev;
      f.rec->dead_why[p] = "its device " + (d != nullptr ? d->name : std::string("?")) +
                           " reported IBV_EVENT_DEVICE_FATAL (device reset, firmware fault or "
                           "removal); the path comes back only in a new comm";
      SLUICE_RETURN_IF_ERROR(
          fault(c, p, failover::Cause::kLocalDevice,
                "async event IBV_EVENT_DEVICE_FATAL on " + members_text(c, fresh), now));
    }
  }
  const uint32_t down = static_cast<uint32_t>(ev >> kEvPortDownShift) & 0xffu;
  if (down != 0) {
    const std::string what = "async event IBV_EVENT_PORT_ERR (or a CQ error) on " +
                             members_text(c, down) + ": link lost (cable, switch port, ip link)";
    for (int p = 0; p < c.npaths; ++p)
      if (down >> c.qp_member[p * c.qpp] & 1u)
        SLUICE_RETURN_IF_ERROR(fault(c, p, failover::Cause::kLocalPort, what, now));
  }
  const uint32_t qb = static_cast<uint32_t>(ev >> kEvQpShift) & 0xffffu;
  for (int q = 0; q < c.nqps && qb != 0; ++q) {
    if ((qb >> q & 1u) == 0) continue;
    SLUICE_RETURN_IF_ERROR(fault(c, q / c.qpp, failover::Cause::kCompletion,
                                 "an async QP event on " + c.describe_qp(q), now));
  }
  // Ports back: kept until a path of the member may take it (its attempt at once).
  f.port_back |= static_cast<uint32_t>(ev >> kEvPortUpShift) & 0xffu;
  return Status::ok();
}

}  // namespace

Status fo_fence_step(Conn& c, int p, int64_t now) {
  PathFailover& f = c.fo;
  if (f.path[p].state() != failover::State::kFencing) return Status::ok();
  SLUICE_RETURN_IF_ERROR(fence_local(c, p, now));  // a marker that did not fit yet
  // The local half of the fence is complete when every QP of the path has its drain marker back
  // (every send-queue WR before it completed) and every receive WR posted on it completed,
  // successfully or flushed: receive-queue completions are not ordered against send-queue ones
  // (neither the IB spec nor Linux's ib_drain_qp orders them), so a close counted after the
  // marker would be one the FENCE did not count. Bounded by SLUICE_CLOSE_TIMEOUT_MS, as close's
  // drain: a device that does not flush fails the comm with what it left.
  bool all = true;
  std::string left;
  int64_t began = now;
  for (int q = p * c.qpp; q < (p + 1) * c.qpp; ++q) {
    const QpLife& l = c.qp[q];
    const bool done = l.led.marker_seen && l.rq_outstanding == 0;
    all = all && done;
    began = std::min(began, l.fence_ms);
    if (done) continue;
    left +=
        std::string(left.empty() ? "" : ", ") + "qpn " + std::to_string(l.qpn) + ": " +
        (!l.led.marker_posted ? "its drain marker not posted (send queue full)"
         : !l.led.marker_seen ? "its drain marker not back"
                              : "") +
        (l.rq_outstanding > 0 ? (l.led.marker_seen ? "" : ", ") + std::to_string(l.rq_outstanding) +
                                    " receive WR(s) not completed"
                              : "");
  }
  if (all) {
    SLUICE_RETURN_IF_ERROR(fo_apply(c, p, f.path[p].on_local_fenced(now), now));
  } else {
    const Engine* e = engine();
    const int bound = e ? e->config().close_timeout_ms : 2000;
    if (now - began > bound) {
      return fail(
          c, Status(Code::kSystemError,
                    std::string(fo_side(c)) + " comm to " + c.peer + ": the fence of " +
                        fo_path_desc(c, p) + " did not complete within SLUICE_CLOSE_TIMEOUT_MS=" +
                        std::to_string(bound) + " ms (" + left +
                        "); its device did not flush its work (likely: a hung device or "
                        "driver), so what the path delivered cannot be known"));
    }
  }
  if (f.path[p].state() == failover::State::kFencing)
    SLUICE_RETURN_IF_ERROR(fo_apply(c, p, f.path[p].on_tick(now), now));
  return Status::ok();
}

Status fo_clock_step(Conn& c, int p, int64_t now) {
  PathFailover& f = c.fo;
  const failover::State st = f.path[p].state();
  if (st == failover::State::kFencing) return Status::ok();
  if (st == failover::State::kDown) {
    // The receiver answers; the sender offers when every receive naming the old path is
    // consumed. A port back is kept for the path until it may offer.
    if (!fo_may_offer(c, p, now)) return Status::ok();
    const uint32_t bit = 1u << c.qp_member[p * c.qpp];
    const bool port_back = (f.port_back & bit) != 0;
    f.port_back &= ~bit;
    return fo_apply(c, p, port_back ? f.path[p].on_port_active(now) : f.path[p].on_tick(now), now);
  }
  if (st == failover::State::kChecking) {
    bool all = true;
    for (int q = p * c.qpp; q < (p + 1) * c.qpp; ++q) all = all && c.qp[q].checked;
    if (all) SLUICE_RETURN_IF_ERROR(fo_apply(c, p, f.path[p].on_checked(now), now));
    // The receiver waits for the sender's CHECKED within the attempt's bound (on_tick).
    if (f.path[p].state() != failover::State::kChecking) return Status::ok();
  }
  return fo_apply(c, p, f.path[p].on_tick(now), now);
}

Status fo_drive(Conn& c) {
  PathFailover& f = c.fo;
  if (c.failed()) return c.failure;
  // A healthy comm: one atomic load (nothing from the async-event thread) and the flags below.
  int64_t now = 0;
  if (f.events.load(std::memory_order_relaxed) != 0) {
    now = fo_now_ms();
    SLUICE_RETURN_IF_ERROR(take_events(c, f.events.exchange(0, std::memory_order_acquire), now));
  }
  // Faults that completion polls and the watchdog recorded.
  if (f.any_pending) {
    if (now == 0) now = fo_now_ms();
    f.any_pending = false;
    for (int p = 0; p < c.npaths; ++p) {
      if (f.pending_cause[p] == failover::Cause::kNone) continue;
      const failover::Cause cause = f.pending_cause[p];
      f.pending_cause[p] = failover::Cause::kNone;
      SLUICE_RETURN_IF_ERROR(fault(c, p, cause, f.rec->pending_what[p], now));
    }
  }
  // The socket: read at every call only while a message is awaited (a FENCE, an answer, CHECKED);
  // otherwise the liveness poll reads it at its cadence and a message it brought is taken here.
  if (f.awaiting) liveness_poll_now(c);
  if (f.inbox_n > 0 || f.inbox_lost) {
    if (now == 0) now = fo_now_ms();
    SLUICE_RETURN_IF_ERROR(take_inbox(c, now));
    f.quiet_until_ms = 0;
  }
  if (!f.any_not_up) return Status::ok();
  const bool woken = now != 0;  // an event, a fault or a message came: drive now
  if (now == 0) now = fo_now_ms();
  if (!woken && now < f.quiet_until_ms) return Status::ok();
  if (f.sender) {
    SLUICE_RETURN_IF_ERROR(fo_drive_send(*static_cast<SendComm*>(c.owner), now));
  } else {
    SLUICE_RETURN_IF_ERROR(fo_drive_recv(*static_cast<RecvComm*>(c.owner), now));
  }
  f.failbacks = 0;
  for (int p = 0; p < c.npaths; ++p) f.failbacks += f.path[p].failbacks();
  SLUICE_RETURN_IF_ERROR(restripe(c));  // the ramp's shares, any_not_up, awaiting as they are now
  // The next time anything is due (health/failover.h next_due_ms): a path whose attempts cannot
  // come (its device dead, an iWARP comm) has none; a port back or the sender's receives to
  // consume are rechecked at every call (0).
  int64_t due = INT64_MAX;
  for (int p = 0; p < c.npaths; ++p) {
    int64_t d = f.path[p].next_due_ms();
    if (f.path[p].state() == failover::State::kDown && f.sender) {
      // A replay that did not finish (no room on the substitute's send queue) goes on at the next
      // call, whatever else the path waits for (its device dead included).
      if (f.replay_pending[p]) {
        d = 0;
      } else if (fo_member_dead(c, p) || !f.can_recover) {
        d = INT64_MAX;
      } else if ((f.port_back >> c.qp_member[p * c.qpp] & 1u) != 0 || !fo_may_offer(c, p, d)) {
        d = 0;
      }
    }
    due = std::min(due, d);
  }
  for (const RetiredQp& r : c.retired_list()) {
    if (!r) continue;
    const Engine* e = engine();
    due = std::min<int64_t>(due, r.since_ms + (e ? e->config().close_timeout_ms : 2000) + 1);
  }
  f.quiet_until_ms = due;
  return Status::ok();
}

bool fo_error_wc(Conn& c, const ibv_wc& wc, int q, const char* what) {
  PathFailover& f = c.fo;
  if (!f.on || q < 0) return false;
  QpLife& l = c.qp[q];
  if (wc.wr_id == (kWrDrainMarker | static_cast<uint64_t>(q))) {
    l.led.marker_seen = true;
    return true;
  }
  if (l.led.fenced) return true;  // flushed behind the fence: settled by the replay
  const int p = q / c.qpp;
  // A fresh QP's error during an attempt (the check's RC retries ran out: the path does not work
  // both ways) ends the attempt now, not at its bound.
  const failover::State st = f.path[p].state();
  const bool attempt = st == failover::State::kRecovering || st == failover::State::kChecking;
  if (f.pending_cause[p] == failover::Cause::kNone && (f.path[p].carries() || attempt)) {
    f.pending_cause[p] = failover::Cause::kCompletion;
    f.rec->pending_what[p] = completion_error(c, wc, what, c.qp_member[q]).message();
    f.any_pending = true;
  }
  // Taken by the driver at the next call; the QP's further completions are flushes until then.
  return true;
}

Status fo_stale_wc(Conn& c, const ibv_wc& wc, int member, const char* what) {
  const std::span<RetiredQp> ret = c.retired_list();
  const int nret = static_cast<int>(ret.size());
  int k = 0;
  while (k < nret && !(ret[k] && ret[k].qpn == wc.qp_num && ret[k].member == member)) ++k;
  if (k == nret) {
    // None of the comm's QPs, current or retired: on a failover comm, a flush of an incarnation
    // destroyed before its last completion was polled (its retirement's bound ran out); a
    // success is never stale.
    if (c.fo.on && wc.status != IBV_WC_SUCCESS) return Status::ok();
    return fail(c,
                Status(Code::kInternalError,
                       std::string(what) + " completion (status " + ibv_wc_status_str(wc.status) +
                           ", wr_id " + std::to_string(wc.wr_id) + ") for qpn " +
                           std::to_string(wc.qp_num) + ", none of " + c.describe_qp(0) + "'s QPs"));
  }
  RetiredQp& r = ret[k];
  if (wc.wr_id == (kWrDrainMarker | kWrDrainRetired | static_cast<uint64_t>(k))) {
    r.marker_seen = true;
  } else if (wc.wr_id < wire::kFifoSlots && r.rq_outstanding > 0 && !c.fo.sender) {
    --r.rq_outstanding;  // a receive WR (the receiver's credits and checks carry a slot)
  }
  // A retired incarnation carried nothing since its fence, or only a recovery check: a success
  // other than a check's is a byte placed after its fence.
  if (wc.status == IBV_WC_SUCCESS) {
    const bool check =
        c.fo.sender ? (wc.wr_id & kWrCheck) != 0 : ntohl(wc.imm_data) == wire::kImmPathCheck;
    if (!check && (wc.wr_id & (kWrDrainMarker | kWrDrainRetired)) == 0) {
      return fail(c, Status(Code::kInternalError, std::string("failover protocol: a ") + what +
                                                      " completion succeeded on retired qpn " +
                                                      std::to_string(r.qpn) + " of " +
                                                      c.describe_qp(r.index) + " after its fence"));
    }
  }
  if (r.marker_seen && r.rq_outstanding == 0) r = RetiredQp{};  // drained: destroyed
  return Status::ok();
}

void fo_retire(Conn& c, int q, int64_t now) {
  QpLife& l = c.qp[q];
  if (!l) return;
  // Drained already (its fence saw its marker and every receive WR): nothing more can come.
  if (l.led.marker_seen && l.rq_outstanding == 0) {
    l.qp.reset();
    return;
  }
  // Else a slot, the oldest one taken if none is free (its late completions then count as those
  // of an unknown QP: ignored when flushed).
  if (!c.retired_qps) c.retired_qps = std::make_unique<RetiredQp[]>(kMaxRetiredQps);
  const std::span<RetiredQp> ret = c.retired_list();
  int k = 0, oldest = 0;
  while (k < kMaxRetiredQps && ret[k]) {
    if (ret[k].since_ms < ret[oldest].since_ms) oldest = k;
    ++k;
  }
  if (k == kMaxRetiredQps) k = oldest;
  RetiredQp& r = ret[k];
  r = RetiredQp{};
  r.qpn = l.qpn;
  r.member = c.qp_member[q];
  r.index = q;
  r.rq_outstanding = l.rq_outstanding;
  r.since_ms = now;
  r.qp = std::move(l.qp);
  // Its drain marker (it is in ERROR since its fence or its drop): the retired slot's own wr_id.
  (void)qp_to_error(r.qp.get());
  ibv_send_wr w{};
  w.wr_id = kWrDrainMarker | kWrDrainRetired | static_cast<uint64_t>(k);
  w.opcode = IBV_WR_SEND;
  w.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  r.marker_seen = fo_member_dead(c, q / c.qpp) || ibv_post_send(r.qp.get(), &w, &bad) != 0;
  if (r.marker_seen && fo_member_dead(c, q / c.qpp)) r.rq_outstanding = 0;
  if (r.marker_seen && r.rq_outstanding == 0) r = RetiredQp{};
}

void fo_reap_retired(Conn& c, int64_t now) {
  const Engine* e = engine();
  const int bound = e ? e->config().close_timeout_ms : 2000;
  for (RetiredQp& r : c.retired_list())
    if (r && now - r.since_ms > bound) r = RetiredQp{};
}

bool fo_watchdog(Conn& c, int q, const std::string& why) {
  PathFailover& f = c.fo;
  if (!f.on) return false;
  const int p = q / c.qpp;
  int carrying = 0;
  for (int k = 0; k < c.npaths; ++k) carrying += f.path[k].carries() && k != p ? 1 : 0;
  if (carrying == 0) return false;  // the last path: the comm fails as before
  if (f.pending_cause[p] == failover::Cause::kNone && f.path[p].carries()) {
    f.pending_cause[p] = failover::Cause::kWatchdog;
    f.rec->pending_what[p] = why;
    f.any_pending = true;
  }
  return true;
}

}  // namespace sluice::dp
