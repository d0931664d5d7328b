// Failover's driver (health/path_failover.h says the design, health/failover.h the rules of one
// path): it takes what the comm saw (async bits, faults found by completion polls and the
// watchdog, the peer's path messages, drain markers, the clock), feeds each path's rules, and
// carries out what they answer: the fence of a path's QPs, the FENCE message, the sender's replay
// and the receiver's re-publication. Runs at the start of every call on the comm (check_device),
// never inside a completion poll's loop. Not on the data path of a healthy comm: one flag test.
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "datapath/datapath_internal.h"
#include "sluice/core/base/log.h"
#include "sluice/core/base/qp.h"

namespace sluice::dp {
namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const char* side(const Conn& c) {
  return c.fo.sender ? "send" : "receive";
}

std::string path_desc(const Conn& c, int p) {
  const int q = p * c.qpp;
  return "path " + std::to_string(p) + " (" + c.describe_qp(q) +
         (c.qpp > 1 ? " +" + std::to_string(c.qpp - 1) + " QPs" : "") + ")";
}

Status every_path_failed(Conn& c) {
  return fail(
      c, Status(Code::kRemoteError, std::string(side(c)) + " comm to " + c.peer +
                                        ": every path failed, none is left to carry its traffic; " +
                                        failover::paths_report(c.fo.path, c.npaths)));
}

// Moves the path's QPs to ERROR and posts each one's drain marker (a full send queue takes it
// once flushed WRs were polled: retried at every step).
Status fence_local(Conn& c, int p) {
  PathFailover& f = c.fo;
  for (int q = p * c.qpp; q < (p + 1) * c.qpp; ++q) {
    if (!f.qp_fenced[q]) {
      if (Status st = qp_to_error(c.qps[q].get()); !st.is_ok())
        return fail(c, on_qp(c, q, Status(st.code(), "failover fence: " + st.message())));
      f.qp_fenced[q] = true;
      c.progress.since_ns[q] = 0;  // the watchdog no longer watches it
    }
    if (f.marker_posted[q]) continue;
    ibv_send_wr w{};
    w.wr_id = kWrDrainMarker | static_cast<uint64_t>(q);
    w.opcode = IBV_WR_SEND;
    w.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    const int rc = ibv_post_send(c.qps[q].get(), &w, &bad);
    if (rc == ENOMEM) continue;  // full: flushed WRs make room once polled
    if (rc != 0) {
      return fail(c, Status(Code::kSystemError, "failover fence: the drain marker on " +
                                                    c.describe_qp(q) + ": " + std::strerror(rc)));
    }
    f.marker_posted[q] = true;
  }
  return Status::ok();
}

// The receiver's substitute for path p: the next path after it that carries.
int choose_sub(const Conn& c, int p) {
  for (int k = 1; k < c.npaths; ++k) {
    const int s = (p + k) % c.npaths;
    if (c.fo.path[s].carries()) return s;
  }
  return -1;
}

Status restripe(Conn& c) {
  if (fo_restripe(c.fo, c.paths) == 0 && failover::none_left(c.fo.path, c.npaths))
    return every_path_failed(c);
  return Status::ok();
}

Status fault(Conn& c, int p, failover::Cause cause, const std::string& what, int64_t now) {
  if (p < 0 || p >= c.npaths) return Status::ok();
  const failover::State was = c.fo.path[p].state();
  const uint32_t a = c.fo.path[p].on_fault(cause, what, now);
  if (was == failover::State::kUp || was == failover::State::kRamping) c.fo.fault_ms[p] = now;
  return fo_apply(c, p, a, now);
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

wire::PathMsg fo_fence_msg(const Conn& c, int p, uint32_t epoch) {
  const PathFailover& f = c.fo;
  wire::PathMsg m = fo_msg(c, wire::PathMsgType::kFence, p);
  m.epoch = epoch;
  for (int k = 0; k < c.qpp; ++k) m.last_seq[k] = f.closes[p * c.qpp + k];
  if (!f.sender) {
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
  const ssize_t sent = ::send(c.fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (sent != static_cast<ssize_t>(n)) {
    return fail(c, Status(Code::kRemoteError,
                          std::string("failover: the ") + wire::path_msg_type_name(m.type) +
                              " of " + path_desc(c, m.path) + " to peer " + c.peer +
                              " could not be sent on the connection socket (" +
                              (sent < 0 ? std::string(std::strerror(errno)) : "short write") +
                              "); " + failover::paths_report(c.fo.path, c.npaths)));
  }
  return Status::ok();
}

Status fo_apply(Conn& c, int p, uint32_t a, int64_t now, const wire::PathMsg* peer) {
  PathFailover& f = c.fo;
  if (a & failover::kLog) {
    SLUICE_INFO(kSubNet, "%s comm to %s: %s %s", side(c), c.peer.c_str(), path_desc(c, p).c_str(),
                f.path[p].describe().c_str());
  }
  if (a & failover::kCommFails) {
    return fail(c, Status(Code::kRemoteError, std::string(side(c)) + " comm to " + c.peer + ": " +
                                                  path_desc(c, p) + " " + f.path[p].describe() +
                                                  "; " + failover::paths_report(f.path, c.npaths)));
  }
  if (a & failover::kRestripe) SLUICE_RETURN_IF_ERROR(restripe(c));
  if (a & failover::kFenceLocal) SLUICE_RETURN_IF_ERROR(fence_local(c, p));
  if (a & failover::kSendFence) {
    if (!f.sender) {
      const int s = choose_sub(c, p);
      if (s < 0) return every_path_failed(c);
      f.sub[p] = static_cast<int8_t>(s);
      // Every receive from here on leaves the path out (restriped at the fault, or earlier).
      f.from_seq[p] = static_cast<RecvComm*>(c.owner)->seq;
      // The credits the path's QPs still held go to the substitute before the FENCE tells the
      // sender to send there.
      SLUICE_RETURN_IF_ERROR(fo_recv_move_credits(*static_cast<RecvComm*>(c.owner), p, s));
    }
    SLUICE_RETURN_IF_ERROR(fo_send_msg(c, fo_fence_msg(c, p, f.path[p].epoch())));
  }
  if (a & failover::kSendChecked)
    SLUICE_RETURN_IF_ERROR(fo_send_msg(c, fo_msg(c, wire::PathMsgType::kChecked, p)));
  if (a & failover::kReplay) {
    f.down_ms[p] = now;
    if (!f.can_recover) {
      SLUICE_INFO(kSubNet,
                  "%s comm to %s: %s is not brought back (an iWARP comm: its QPs connect only "
                  "through rdma_cm); it runs on the paths left",
                  side(c), c.peer.c_str(), path_desc(c, p).c_str());
    }
    if (f.sender) {
      f.replay_pending[p] = true;
    } else {
      SLUICE_RETURN_IF_ERROR(fo_recv_republish(*static_cast<RecvComm*>(c.owner)));
      f.last_stall_ms = f.path_stall_ms[p] = now - f.fault_ms[p];
      SLUICE_INFO(kSubNet,
                  "receive comm to %s: %s fenced on both sides %lld ms after the fault; every "
                  "receive not yet complete is published again over the paths left",
                  c.peer.c_str(), path_desc(c, p).c_str(), static_cast<long long>(f.last_stall_ms));
    }
  }
  if (a & (failover::kOffer | failover::kAnswer)) f.sub[p] = -1;  // fresh QPs: the path's own
  if (a & (failover::kDropFresh | failover::kOffer | failover::kAnswer | failover::kConnect |
           failover::kCheck))
    SLUICE_RETURN_IF_ERROR(fo_recovery_action(c, p, a, peer, now));
  return Status::ok();
}

namespace {

Status take_inbox(Conn& c, int64_t now) {
  PathFailover& f = c.fo;
  if (f.inbox_overflow) {
    return fail(c, Status(Code::kRemoteError, "failover: peer " + c.peer +
                                                  " sent more path messages than one poll holds"));
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
    const int p = m.path;
    if (m.type == wire::PathMsgType::kOffer) {  // to the receiver: the sender's attempt
      if (f.sender) continue;                   // the receiver never offers
      if (f.path[p].state() == failover::State::kDown && !fo_may_answer(c, p, now)) {
        // Refused with a FENCE of the offer's epoch, which ends the sender's attempt at once.
        SLUICE_INFO(kSubNet,
                    "receive comm to %s: path %d: the recovery offer of epoch %u waits for the "
                    "old QPs' receive WRs to flush; refused, the sender offers again",
                    c.peer.c_str(), p, m.epoch);
        SLUICE_RETURN_IF_ERROR(fo_send_msg(c, fo_fence_msg(c, p, m.epoch)));
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
    if (f.sender) {
      if (m.sub == 0 || m.sub - 1 >= c.npaths) {
        return fail(
            c, Status(Code::kRemoteError, "failover: peer " + c.peer + "'s FENCE of path " +
                                              std::to_string(p) + " names no substitute path"));
      }
      f.sub[p] = static_cast<int8_t>(m.sub - 1);
      f.from_seq[p] = m.from_seq;
    }
    f.peer_fence_seen[p] = true;
    for (int k = 0; k < c.qpp; ++k) f.peer_counts[p][k] = m.last_seq[k];
    const failover::State was = f.path[p].state();
    const uint32_t a = f.path[p].on_peer_fence(m.epoch, now);
    if (was == failover::State::kUp || was == failover::State::kRamping) f.fault_ms[p] = now;
    SLUICE_RETURN_IF_ERROR(fo_apply(c, p, a, now));
  }
  f.inbox_n = 0;
  return Status::ok();
}

std::string members_text(const Conn& c, uint32_t bits) {
  std::string t;
  for (int m = 0; m < c.nmembers; ++m) {
    if ((bits >> m & 1u) == 0) continue;
    const Device* d = c.members[m].dev;
    t += (t.empty() ? "" : ", ") + (d != nullptr ? d->name + ":" + std::to_string(d->port) : "?");
  }
  return t;
}

}  // namespace

Status fo_drive(Conn& c) {
  PathFailover& f = c.fo;
  if (c.failed()) return c.failure;
  const int64_t now = now_ms();
  // The async-event thread's bits: a member's port (or CQ) lost, a QP's own event.
  if (const uint32_t bits = f.port_down.exchange(0, std::memory_order_acquire); bits != 0) {
    const std::string what = "async event IBV_EVENT_PORT_ERR (or a CQ error) on " +
                             members_text(c, bits) + ": link lost (cable, switch port, ip link)";
    for (int p = 0; p < c.npaths; ++p)
      if (bits >> c.qp_member[p * c.qpp] & 1u)
        SLUICE_RETURN_IF_ERROR(fault(c, p, failover::Cause::kLocalPort, what, now));
  }
  if (const uint32_t qb = f.qp_event.exchange(0, std::memory_order_acquire); qb != 0) {
    for (int q = 0; q < c.nqps; ++q) {
      if ((qb >> q & 1u) == 0) continue;
      SLUICE_RETURN_IF_ERROR(fault(c, q / c.qpp, failover::Cause::kCompletion,
                                   "an async QP event on " + c.describe_qp(q), now));
    }
  }
  // Faults that completion polls and the watchdog recorded.
  for (int p = 0; p < c.npaths; ++p) {
    if (f.pending_cause[p] == failover::Cause::kNone) continue;
    const failover::Cause cause = f.pending_cause[p];
    f.pending_cause[p] = failover::Cause::kNone;
    SLUICE_RETURN_IF_ERROR(fault(c, p, cause, f.pending_what[p], now));
  }
  // Healthy: the liveness poll reads the socket at its cadence, and a FENCE it brought is
  // taken here; with a path not up, the socket is read at every call.
  if (f.any_not_up) liveness_poll_now(c);
  if (f.inbox_n > 0 || f.inbox_overflow) SLUICE_RETURN_IF_ERROR(take_inbox(c, now));
  if (!f.any_not_up) return Status::ok();
  // The drain markers, and the checks of a fresh path (the sender's completion, the receiver's
  // immediate): a poll of the comm's CQs brings them (it records nothing else to apply here but
  // faults, taken at the next call).
  bool fencing = false;
  for (int p = 0; p < c.npaths; ++p)
    fencing = fencing || f.path[p].state() == failover::State::kFencing ||
              f.path[p].state() == failover::State::kChecking;
  if (fencing) {
    if (c.owner->kind == CommKind::kSend) {
      SLUICE_RETURN_IF_ERROR(poll_send(*static_cast<SendComm*>(c.owner)));
    } else {
      SLUICE_RETURN_IF_ERROR(poll_recv(*static_cast<RecvComm*>(c.owner)));
    }
  }
  for (int p = 0; p < c.npaths; ++p) {
    if (f.path[p].state() != failover::State::kFencing) continue;
    SLUICE_RETURN_IF_ERROR(fence_local(c, p));  // a marker that did not fit yet
    bool all = true;
    for (int q = p * c.qpp; q < (p + 1) * c.qpp; ++q) all = all && f.marker_seen[q];
    if (all) SLUICE_RETURN_IF_ERROR(fo_apply(c, p, f.path[p].on_local_fenced(now), now));
    if (f.path[p].state() == failover::State::kFencing)
      SLUICE_RETURN_IF_ERROR(fo_apply(c, p, f.path[p].on_tick(now), now));
  }
  // Failback: ports back, the checks' completions, the clock (attempts, bounds, ramp steps).
  const uint32_t up = f.port_up.exchange(0, std::memory_order_acquire);
  for (int p = 0; p < c.npaths; ++p) {
    const failover::State st = f.path[p].state();
    if (st == failover::State::kFencing) continue;
    if (st == failover::State::kDown) {
      if (!fo_may_offer(c, p, now))
        continue;  // the receiver answers; the sender offers when
                   // every receive naming the old path is consumed
      const bool port_back = (up >> c.qp_member[p * c.qpp] & 1u) != 0;
      SLUICE_RETURN_IF_ERROR(
          fo_apply(c, p, port_back ? f.path[p].on_port_active(now) : f.path[p].on_tick(now), now));
      continue;
    }
    if (st == failover::State::kChecking) {
      bool all = true;
      for (int q = p * c.qpp; q < (p + 1) * c.qpp; ++q) all = all && f.checked[q];
      if (all) SLUICE_RETURN_IF_ERROR(fo_apply(c, p, f.path[p].on_checked(now), now));
      // The receiver waits for the sender's CHECKED within the attempt's bound (on_tick).
      if (f.path[p].state() != failover::State::kChecking) continue;
    }
    SLUICE_RETURN_IF_ERROR(fo_apply(c, p, f.path[p].on_tick(now), now));
  }
  if (f.sender) {
    for (int p = 0; p < c.npaths; ++p) {
      if (!f.replay_pending[p]) continue;
      bool done = false;
      SLUICE_RETURN_IF_ERROR(fo_send_replay(*static_cast<SendComm*>(c.owner), p, &done));
      if (!done) continue;
      f.replay_pending[p] = false;
      f.last_stall_ms = f.path_stall_ms[p] = now - f.fault_ms[p];
      SLUICE_INFO(kSubNet,
                  "send comm to %s: %s fenced on both sides %lld ms after the fault; %llu chains "
                  "(%llu bytes) replayed so far on this comm, later ones go to path %d",
                  c.peer.c_str(), path_desc(c, p).c_str(), static_cast<long long>(f.last_stall_ms),
                  static_cast<unsigned long long>(f.chains_replayed),
                  static_cast<unsigned long long>(f.bytes_replayed), f.sub[p]);
    }
  }
  f.failbacks = 0;
  for (int p = 0; p < c.npaths; ++p) f.failbacks += f.path[p].failbacks();
  return restripe(c);  // the ramp's shares, and any_not_up as the states are now
}

bool fo_error_wc(Conn& c, const ibv_wc& wc, int member, const char* what) {
  PathFailover& f = c.fo;
  if (!f.on) return false;
  const int q = qp_index(c, wc.qp_num, member);
  if (q < 0) return false;
  if (wc.wr_id == (kWrDrainMarker | static_cast<uint64_t>(q))) {
    f.marker_seen[q] = true;
    return true;
  }
  if (f.qp_fenced[q]) return true;  // flushed behind the fence: settled by the replay
  const int p = q / c.qpp;
  // A fresh QP's error during an attempt (the check's RC retries ran out: the path does not work
  // both ways) ends the attempt now, not at its bound.
  const failover::State st = f.path[p].state();
  const bool attempt = st == failover::State::kRecovering || st == failover::State::kChecking;
  if (f.pending_cause[p] == failover::Cause::kNone && (f.path[p].carries() || attempt)) {
    f.pending_cause[p] = failover::Cause::kCompletion;
    f.pending_what[p] = completion_error(c, wc, what, member).message();
  }
  // Taken by the driver at the next call; the QP's further completions are flushes until then.
  return true;
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
    f.pending_what[p] = why;
  }
  return true;
}

}  // namespace sluice::dp
