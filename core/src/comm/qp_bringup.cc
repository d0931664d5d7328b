// One QP of a comm brought up (qp_bringup.h).
#include "comm/qp_bringup.h"

#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "sluice/core/base/config.h"

namespace sluice {

Status qp_bring_init(Conn& c, int q, QpCaps* caps, QpLife* out) {
  const Config& cfg = engine()->config();
  const int mi = c.qp_member[q];
  Device& d = *c.members[mi].dev;
  ibv_cq* cq = c.members[mi].cq.get();
  auto qp = create_rc_qp(d.adapter->pd.get(), cq, *caps);
  if (!qp.is_ok() && caps->max_inline_data > 0) {
    caps->max_inline_data = 0;  // the device takes no inline data of that size: post from memory
    qp = create_rc_qp(d.adapter->pd.get(), cq, *caps);
  }
  if (!qp.is_ok()) return qp.status().with_context(d.name);
  *out = QpLife{};
  out->qp = std::move(qp).value();
  out->qpn = out->qp->qp_num;
  InitParams ip;
  ip.port = d.port;
  ip.pkey_index = static_cast<uint16_t>(cfg.pkey_index);
  ip.access = IBV_ACCESS_REMOTE_WRITE;
  ip.retry = mqp_retry_from(cfg);
  return qp_to_init(out->get(), ip).with_context(d.name);
}

Status qp_bring_connect(Conn& c, int q, const QpEnds& e) {
  const Config& cfg = engine()->config();
  const Device& d = *c.members[c.qp_member[q]].dev;
  RtrParams r;
  r.path_mtu = static_cast<ibv_mtu>(std::min(e.mtu, e.peer->mtu));
  r.dest_qpn = e.dest_qpn;
  r.rq_psn = e.dest_psn;
  r.max_dest_rd_atomic = 1;
  r.min_rnr_timer = static_cast<uint8_t>(cfg.min_rnr_timer);
  r.port = d.port;
  r.is_global = d.roce;
  std::memcpy(r.dgid.raw, e.peer->gid, 16);
  r.sgid_index = e.sgid_index;
  r.hop_limit = 255;
  r.traffic_class = e.tc;
  r.flow_label = c.flow.label(static_cast<uint32_t>(q));
  r.dlid = e.peer->lid;
  r.sl = e.sl;
  r.retry = mqp_retry_from(cfg);
  c.qp[q].remote_qpn = e.dest_qpn;
  SLUICE_RETURN_IF_ERROR(set_agreed_ece(c, q));
  Status st = qp_to_rtr(c.qp[q].get(), r);
  if (!st.is_ok()) return st.with_context(c.describe_qp(q));
  RtsParams s;
  s.sq_psn = e.sq_psn;
  s.timeout = static_cast<uint8_t>(cfg.ib_timeout);
  s.retry_cnt = static_cast<uint8_t>(cfg.retry_cnt);
  s.rnr_retry = static_cast<uint8_t>(cfg.rnr_retry);
  s.max_rd_atomic = 1;
  s.retry = mqp_retry_from(cfg);
  st = qp_to_rts(c.qp[q].get(), s);
  if (!st.is_ok()) return st.with_context(c.describe_qp(q));
  return Status::ok();
}

Status set_agreed_ece(Conn& c, int q) {
  if (!c.ece.supported) return Status::ok();
  const int rc = set_ece(c.qp[q].get(), c.ece);
  if (rc == 0) return Status::ok();
  if (rc == EOPNOTSUPP) {  // as NCCL: a provider that takes none is not an error
    c.ece = Ece{};
    return Status::ok();
  }
  return Status(Code::kSystemError, "ibv_set_ece(" + ece_text(c.ece) + ") on " + c.describe_qp(q) +
                                        " failed: " + std::strerror(rc) + " (errno " +
                                        std::to_string(rc) +
                                        "); NCCL_IB_ECE_ENABLE=0 connects without ECE");
}

}  // namespace sluice
