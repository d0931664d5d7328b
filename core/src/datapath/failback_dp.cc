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
#include <cerrno>
#include <cstring>

#include "comm/qp_bringup.h"
#include "datapath/datapath_internal.h"
#include "sluice/core/base/log.h"
#include "sluice/core/base/qp.h"
#include "sluice/core/device/device_info.h"

namespace sluice::dp {
namespace {

// Waits this long after the fence for the old QPs' receive WRs to flush before replacing them.
constexpr int64_t kOldQpFlushMs = 1000;

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

// Replaces path p's QPs by fresh ones at INIT, into m.qps (with their PSNs).
Status fresh_qps(Conn& c, int p, wire::PathMsg* m) {
  PathFailover& f = c.fo;
  const bool sender = f.sender;
  QpCaps caps = sender ? QpCaps{kSendSqDepth, 1, 1, 1, 0}
                       : QpCaps{kRecvSqDepth, kRecvRqDepth * static_cast<uint32_t>(c.npaths), 1, 1,
                                c.max_inline};
  for (int k = 0; k < c.qpp; ++k) {
    const int q = p * c.qpp + k;
    c.qps[q].reset();  // in ERROR since its fence, its work polled (or dropped with it)
    QpCaps k_caps = caps;
    SLUICE_RETURN_IF_ERROR(qp_bring_init(c, q, &k_caps).with_context("failback: fresh QP"));
    c.max_inline = std::min(c.max_inline, k_caps.max_inline_data);  // what every QP takes
    // A new incarnation: its counts start again on both sides.
    f.qp_fenced[q] = f.marker_posted[q] = f.marker_seen[q] = f.checked[q] = false;
    f.closes[q] = f.credits[q] = f.log_lo[q] = 0;
    c.rq_outstanding[q] = 0;
    c.progress.since_ns[q] = 0;
    if (sender) {
      auto& s = *static_cast<SendComm*>(c.owner);
      s.sq_used[q] = 0;
      s.sq_bytes[q] = 0;
      s.sq_seg[q] = 0;
    } else {
      auto& r = *static_cast<RecvComm*>(c.owner);
      r.cts_outstanding[q] = r.cts_unsignaled[q] = 0;
      r.cts_probing[q] = false;
    }
    f.fresh_psn[q] = random_psn();
    m->qps[k].qpn = c.qps[q]->qp_num;
    m->qps[k].psn = f.fresh_psn[q];
  }
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
    e.sq_psn = f.fresh_psn[q];
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
    if (int rc = ibv_post_send(s.c.qps[q].get(), &w, &bad); rc != 0) {
      return Status(Code::kSystemError,
                    "failback: the check on " + s.c.describe_qp(q) + ": " + std::strerror(rc));
    }
    ++s.sq_used[q];
  }
  return Status::ok();
}

// The receiver's receive WR for the check, on each fresh QP (not a credit of any chain).
Status post_check_credits(RecvComm& r, int p) {
  for (int q = p * r.c.qpp; q < (p + 1) * r.c.qpp; ++q) {
    ibv_recv_wr w{};
    w.wr_id = 0;
    ibv_recv_wr* bad = nullptr;
    if (int rc = ibv_post_recv(r.c.qps[q].get(), &w, &bad); rc != 0) {
      return Status(Code::kSystemError, "failback: the check's receive WR on " +
                                            r.c.describe_qp(q) + ": " + std::strerror(rc));
    }
    ++r.c.rq_outstanding[q];
  }
  return Status::ok();
}

// Drops an attempt's fresh QPs: to ERROR (they carried nothing; their flushed work is ignored
// as a fenced QP's), replaced at the next attempt.
void drop_fresh(Conn& c, int p) {
  for (int q = p * c.qpp; q < (p + 1) * c.qpp; ++q) {
    if (c.qps[q]) (void)qp_to_error(c.qps[q].get());
    c.fo.qp_fenced[q] = true;
    c.fo.marker_posted[q] = c.fo.marker_seen[q] = true;  // nothing to drain: no data moved
    c.fo.checked[q] = false;
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
  if (a & failover::kDropFresh) drop_fresh(c, p);
  if (a & failover::kOffer) {  // the sender: fresh QPs, the offer
    wire::PathMsg m = fo_msg(c, wire::PathMsgType::kOffer, p);
    std::string why;
    if (!member_now(c, p, &m, &why))
      return attempt_fault(c, p, Status(Code::kRemoteError, why), now);
    if (Status st = fresh_qps(c, p, &m); !st.is_ok()) return attempt_fault(c, p, st, now);
    SLUICE_RETURN_IF_ERROR(fo_send_msg(c, m));
  }
  if (a & failover::kAnswer) {  // the receiver: fresh QPs at RTS, the check's WRs, the answer
    wire::PathMsg m = fo_msg(c, wire::PathMsgType::kAnswer, p);
    std::string why;
    if (!member_now(c, p, &m, &why))
      return attempt_fault(c, p, Status(Code::kRemoteError, why), now);
    if (Status st = fresh_qps(c, p, &m); !st.is_ok()) return attempt_fault(c, p, st, now);
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
  if (!f.sender || !f.can_recover || f.replay_pending[p]) return false;
  // Every receive that may name the old path is consumed (its chains went to the substitute).
  if (static_cast<const SendComm*>(c.owner)->head < f.from_seq[p]) return false;
  return now - f.down_ms[p] >= 0;
}

bool fo_may_answer(const Conn& c, int p, int64_t now) {
  const PathFailover& f = c.fo;
  if (!f.can_recover) return false;
  bool flushed = true;
  for (int q = p * c.qpp; q < (p + 1) * c.qpp; ++q) flushed = flushed && c.rq_outstanding[q] == 0;
  return flushed || now - f.down_ms[p] >= kOldQpFlushMs;
}

void fo_check_done(Conn& c, int q) {
  PathFailover& f = c.fo;
  const int p = q / c.qpp;
  if (f.path[p].state() != failover::State::kChecking) return;  // an attempt given up meanwhile
  f.checked[q] = true;
}

}  // namespace sluice::dp
