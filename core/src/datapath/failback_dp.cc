// Failback: a failed path brought back (health/failover.h's kRecovering, kChecking, kRamping;
// docs/failover.md "Recovery and failback"). The sender offers, the receiver answers, over the
// kept socket: each side replaces its QPs of the path (in ERROR since the fence, their work
// flushed) by fresh ones at INIT, with new QP numbers and PSNs, and the member's GID found again
// in the port's table (a RoCE flap may move its index). The receiver brings its fresh QPs to RTS
// with the offer, posts one receive WR on each for the check and answers; the sender brings its
// own to RTS with the answer and posts the check: a zero-length WRITE_WITH_IMM of
// wire::kImmPathCheck on each fresh QP. It moves no byte, so it touches no memory. Its completion
// (the receiver's ACK came back) proves the path both ways to the sender, which ramps in and
// sends CHECKED on the socket; its immediate proves only the sender's direction, so the receiver
// ramps in on its immediates and that word together: a path that drops the ACKs only (a one-way
// fault) never returns. The receiver puts the path in new receives' masks by its ramp share, so
// no chain uses it before both sides took it back. An attempt that fails (an error completion,
// the attempt's bound, a FENCE from the peer, no CHECKED) needs no fence: the fresh QPs carried
// no data; they go to ERROR and the next attempt replaces them.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "comm/qp_bringup.h"
#include "datapath/failover_dp.h"
#include "sluice/core/base/log.h"
#include "sluice/core/base/qp.h"
#include "sluice/core/device/device_info.h"

namespace sluice::dp {
namespace {

// This side's member of path p: its port read again and its GID found again (by value; else the
// automatic choice, as at init), into m.member. *why says what failed.
bool member_now(Conn& c, int p, wire::PathMsg* m, std::string* why) {
  PathFailover& f = c.fo;
  const int mi = c.qp_member[p * c.qpp];
  const Device& d = *c.members[mi].dev;
  ibv_port_attr attr{};
  if (ibv_query_port(d.adapter->ctx.get(), d.port, &attr) != 0) {
    *why = "ibv_query_port of " + d.name + " failed: " + std::strerror(errno);
    return false;
  }
  if (attr.state != IBV_PORT_ACTIVE) {
    *why = d.name + " port " + std::to_string(d.port) + " is " + ibv_port_state_str(attr.state);
    return false;
  }
  wire::MemberInfo& e = m->member;
  e = wire::MemberInfo{};
  e.lid = attr.lid;
  e.port = d.port;
  e.mtu = static_cast<uint8_t>(attr.active_mtu);
  e.link_layer = attr.link_layer;
  if (d.roce) {
    const auto table =
        read_gid_table(d.adapter->ctx.get(), d.adapter->name, d.port, attr.gid_tbl_len);
    int index = -1;
    GidBytes gid{};
    for (const GidEntry& g : table) {
      if (std::memcmp(g.gid.data(), f.member_gid[p], 16) == 0) {
        index = g.index;
        gid = g.gid;
        break;
      }
    }
    if (index < 0) {  // the address is gone: the automatic choice, as at init
      auto choice = choose_roce_gid(table, gid_policy(engine()->config()));
      if (!choice.is_ok()) {
        *why = d.name + ": no usable GID after the flap (" + choice.status().message() + ")";
        return false;
      }
      index = choice.value().index;
      gid = choice.value().gid;
    }
    e.gid_index = static_cast<uint8_t>(index);
    std::memcpy(e.gid, gid.data(), 16);
  } else {
    ibv_gid g{};
    if (ibv_query_gid(d.adapter->ctx.get(), d.port, 0, &g) == 0) std::memcpy(e.gid, g.raw, 16);
  }
  f.fresh_gid_index[p] = e.gid_index;
  return true;
}

// SLUICE_TEST_FAILBACK_CREATE_FAILS (tests only): the first N fresh QPs of the process fail to be
// created, as an ibv_create_qp that runs out of memory or QPs would.
bool injected_create_failure() {
  static std::atomic<int> injected{0};
  const Engine* e = engine();
  const int want = e ? e->config().test_failback_create_fails : 0;
  if (want <= 0) return false;
  int n = injected.load(std::memory_order_relaxed);
  while (n < want && !injected.compare_exchange_weak(n, n + 1, std::memory_order_relaxed)) {
  }
  return n < want;
}

// Path p's fresh QPs at INIT, into m.qps (with their PSNs). They are made beside the old
// incarnations, which stay in place until every fresh one exists: a create that fails (ENOMEM,
// the device's QP limit) leaves the path as it was, down with its reason, and the attempt fails;
// and a fresh QP made while the old one still exists gets a new QP number. Then each old
// incarnation is retired (destroyed once its last completions are polled: fo_retire) and the fresh
// one, with every count at zero (comm/qp_life.h), takes its place.
Status fresh_qps(Conn& c, int p, wire::PathMsg* m, int64_t now) {
  const bool sender = c.fo.sender;
  const QpCaps caps = sender ? QpCaps{kSendSqDepth, 1, 1, 1, 0}
                             : QpCaps{kRecvSqDepth, kRecvRqDepth * static_cast<uint32_t>(c.npaths),
                                      1, 1, c.max_inline};
  QpLife fresh[wire::kMaxQps];
  uint32_t inline_max = c.max_inline;
  for (int k = 0; k < c.qpp; ++k) {
    const int q = p * c.qpp + k;
    if (injected_create_failure()) {
      return Status(Code::kSystemError,
                    "failback: ibv_create_qp on " + c.members[c.qp_member[q]].dev->name +
                        " failed: Cannot allocate memory (errno 12; injected by "
                        "SLUICE_TEST_FAILBACK_CREATE_FAILS)");
    }
    QpCaps k_caps = caps;
    SLUICE_RETURN_IF_ERROR(
        qp_bring_init(c, q, &k_caps, &fresh[k]).with_context("failback: fresh QP"));
    inline_max = std::min(inline_max, k_caps.max_inline_data);
    fresh[k].epoch = c.fo.path[p].epoch();
    fresh[k].psn = random_psn();
  }
  for (int k = 0; k < c.qpp; ++k) {
    const int q = p * c.qpp + k;
    fo_retire(c, q, now);
    c.qp[q] = std::move(fresh[k]);
    m->qps[k].qpn = c.qp[q].qpn;
    m->qps[k].psn = c.qp[q].psn;
  }
  c.max_inline = inline_max;  // what every QP takes
  return Status::ok();
}

// RTR and RTS of path p's fresh QPs against the peer's offer or answer: the bring-up of
// connection setup (comm/qp_bringup.h), with the comm's agreed ECE, this side's port read again
// and its GID index found again (member_now).
Status connect_fresh(Conn& c, int p, const wire::PathMsg& peer) {
  PathFailover& f = c.fo;
  for (int k = 0; k < c.qpp; ++k) {
    const int q = p * c.qpp + k;
    const Device& d = *c.members[c.qp_member[q]].dev;
    ibv_port_attr attr{};
    (void)ibv_query_port(d.adapter->ctx.get(), d.port, &attr);
    QpEnds e;
    e.mtu = static_cast<uint8_t>(attr.active_mtu);
    e.sgid_index = f.fresh_gid_index[p];
    e.peer = &peer.member;
    e.dest_qpn = peer.qps[k].qpn;
    e.dest_psn = peer.qps[k].psn;
    e.sq_psn = c.qp[q].psn;
    e.tc = f.tc;
    e.sl = f.sl;
    SLUICE_RETURN_IF_ERROR(qp_bring_connect(c, q, e).with_context("failback"));
  }
  return Status::ok();
}

// The check: the sender's zero-length WRITE_WITH_IMM on each fresh QP (the receiver's records
// address, with its key on that path: no byte moves).
Status post_checks(SendComm& s, int p) {
  for (int q = p * s.c.qpp; q < (p + 1) * s.c.qpp; ++q) {
    ibv_send_wr w{};
    w.wr_id = kWrCheck | static_cast<uint64_t>(q);
    w.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    w.send_flags = IBV_SEND_SIGNALED;
    w.imm_data = htonl(wire::kImmPathCheck);
    w.wr.rdma.remote_addr = s.remote_records;
    w.wr.rdma.rkey = remote_mem_rkey(s.c, q);
    ibv_send_wr* bad = nullptr;
    if (int rc = ibv_post_send(s.c.qp[q].get(), &w, &bad); rc != 0) {
      return Status(Code::kSystemError,
                    "failback: the check on " + s.c.describe_qp(q) + ": " + std::strerror(rc));
    }
    ++s.c.qp[q].sq_used;
  }
  return Status::ok();
}

// The receiver's receive WR for the check, on each fresh QP (not a credit of any chain).
Status post_check_credits(RecvComm& r, int p) {
  for (int q = p * r.c.qpp; q < (p + 1) * r.c.qpp; ++q) {
    ibv_recv_wr w{};
    w.wr_id = 0;
    ibv_recv_wr* bad = nullptr;
    if (int rc = ibv_post_recv(r.c.qp[q].get(), &w, &bad); rc != 0) {
      return Status(Code::kSystemError, "failback: the check's receive WR on " +
                                            r.c.describe_qp(q) + ": " + std::strerror(rc));
    }
    ++r.c.qp[q].rq_outstanding;
  }
  return Status::ok();
}

// Drops an attempt's fresh QPs: to ERROR (they carried nothing but the check) with a drain marker
// behind their work, fenced so that nothing is posted on them; the next attempt retires them
// (their last completions, flushed or not, are then recognised as stale).
void drop_fresh(Conn& c, int p, int64_t now) {
  for (int q = p * c.qpp; q < (p + 1) * c.qpp; ++q) {
    QpLife& l = c.qp[q];
    l.checked = false;
    if (!l || l.led.fenced) continue;
    l.led.fenced = true;
    l.fence_ms = now;
    l.since_ns = 0;
    if (fo_member_dead(c, p) || !qp_to_error(l.get()).is_ok()) {
      l.led.marker_posted = l.led.marker_seen = true;
      continue;
    }
    ibv_send_wr w{};
    w.wr_id = kWrDrainMarker | static_cast<uint64_t>(q);
    w.opcode = IBV_WR_SEND;
    w.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    l.led.marker_posted = ibv_post_send(l.get(), &w, &bad) == 0;
    // One that cannot take its marker is retired with a marker of its own at the next attempt.
  }
}

// The attempt failed on this side (a step above): the path's rules take it as a fault.
Status attempt_fault(Conn& c, int p, const Status& st, int64_t now) {
  SLUICE_INFO(kSubNet, "%s comm to %s: path %d: recovery attempt step failed: %s",
              c.fo.sender ? "send" : "receive", c.peer.c_str(), p, st.message().c_str());
  return fo_apply(c, p, c.fo.path[p].on_fault(failover::Cause::kAttemptFailed, st.message(), now),
                  now);
}

}  // namespace

Status fo_recovery_action(Conn& c, int p, uint32_t a, const wire::PathMsg* peer, int64_t now) {
  PathFailover& f = c.fo;
  if (a & failover::kDropFresh) drop_fresh(c, p, now);
  if (a & failover::kOffer) {  // the sender: fresh QPs, the offer
    wire::PathMsg m = fo_msg(c, wire::PathMsgType::kOffer, p);
    std::string why;
    if (!member_now(c, p, &m, &why))
      return attempt_fault(c, p, Status(Code::kRemoteError, why), now);
    if (Status st = fresh_qps(c, p, &m, now); !st.is_ok()) return attempt_fault(c, p, st, now);
    SLUICE_RETURN_IF_ERROR(fo_send_msg(c, m));
  }
  if (a & failover::kAnswer) {  // the receiver: fresh QPs at RTS, the check's WRs, the answer
    wire::PathMsg m = fo_msg(c, wire::PathMsgType::kAnswer, p);
    std::string why;
    if (!member_now(c, p, &m, &why))
      return attempt_fault(c, p, Status(Code::kRemoteError, why), now);
    if (Status st = fresh_qps(c, p, &m, now); !st.is_ok()) return attempt_fault(c, p, st, now);
    if (Status st = connect_fresh(c, p, *peer); !st.is_ok()) return attempt_fault(c, p, st, now);
    if (Status st = post_check_credits(*static_cast<RecvComm*>(c.owner), p); !st.is_ok())
      return attempt_fault(c, p, st, now);
    SLUICE_RETURN_IF_ERROR(fo_send_msg(c, m));
    SLUICE_RETURN_IF_ERROR(fo_apply(c, p, f.path[p].on_connected(now), now));
  }
  if (a & failover::kConnect) {  // the sender: its fresh QPs at RTS with the answer
    if (Status st = connect_fresh(c, p, *peer); !st.is_ok()) return attempt_fault(c, p, st, now);
    SLUICE_RETURN_IF_ERROR(fo_apply(c, p, f.path[p].on_connected(now), now));
  }
  if ((a & failover::kCheck) && f.sender) {
    if (Status st = post_checks(*static_cast<SendComm*>(c.owner), p); !st.is_ok())
      return attempt_fault(c, p, st, now);
  }
  return Status::ok();
}

bool fo_may_offer(const Conn& c, int p, int64_t now) {
  const PathFailover& f = c.fo;
  if (!f.sender || !f.can_recover || f.replay_pending[p] || fo_member_dead(c, p)) return false;
  // Every receive that may name the old path is consumed (its chains went to the substitute).
  if (static_cast<const SendComm*>(c.owner)->head < f.from_seq[p]) return false;
  return now - f.rec->down_ms[p] >= 0;
}

// The receiver takes an attempt whenever its member's device lives: its old QPs' work was polled
// whole by the fence (or is a failed attempt's, which fresh_qps retires), and a port that is not
// ACTIVE yet fails the attempt's first step with its state (member_now), which the sender is told.
bool fo_may_answer(const Conn& c, int p, int64_t /*now*/) {
  return c.fo.can_recover && !fo_member_dead(c, p);
}

void fo_check_done(Conn& c, int q) {
  PathFailover& f = c.fo;
  const int p = q / c.qpp;
  if (f.path[p].state() != failover::State::kChecking) return;  // an attempt given up meanwhile
  c.qp[q].checked = true;
}

}  // namespace sluice::dp
