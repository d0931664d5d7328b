// One QP of a comm brought up, the same way wherever it happens: at connection setup
// (connect/comm_setup.cc, every QP against the peer's metadata) and at failback
// (datapath/failback_dp.cc, a path's fresh QPs against the peer's offer or answer). The
// attributes come from the configuration (NCCL_IB_PKEY, NCCL_IB_TIMEOUT, NCCL_IB_RETRY_CNT,
// NCCL_IB_RNR_RETRY, NCCL_IB_MIN_RNR_TIMER, the MQP retry knobs) and the comm (its agreed ECE, its
// flow labels); only the two ends' addresses differ between the callers.
#pragma once

#include <cstdint>

#include "comm/comm.h"
#include "sluice/core/base/qp.h"
#include "sluice/core/base/status.h"
#include "sluice/core/wire/wire.h"

namespace sluice {

// Creates a QP for index q of c on its member's PD and CQ, into *out (a new incarnation, every
// count at zero; the caller puts it in c.qp[q]), and moves it to INIT (remote write access). A
// device that takes no inline data of caps->max_inline_data gets the QP without
// (caps->max_inline_data is then 0: the caller posts from memory).
Status qp_bring_init(Conn& c, int q, QpCaps* caps, QpLife* out);

// The two ends of QP q's path as the RTR needs them.
struct QpEnds {
  uint8_t mtu = 0;                         // this side's port's active MTU (ibv_mtu code)
  uint8_t sgid_index = 0;                  // this side's GID index (RoCE)
  const wire::MemberInfo* peer = nullptr;  // the peer's member: GID, LID, MTU
  uint32_t dest_qpn = 0, dest_psn = 0;     // the peer's QP
  uint32_t sq_psn = 0;                     // this QP's own first PSN
  uint8_t tc = 0, sl = 0;                  // the comm's traffic class and service level
};

// The agreed ECE (set_agreed_ece), then RTR and RTS of QP q against `e`; records the peer's QP
// number in c.qp[q].remote_qpn. Errors name the QP (c.describe_qp).
Status qp_bring_connect(Conn& c, int q, const QpEnds& e);

// ECE (fabric.h): ibv_set_ece of the comm's agreed ECE (c.ece) on QP q before its RTR; a provider
// answering EOPNOTSUPP leaves the comm without ECE, as NCCL's.
Status set_agreed_ece(Conn& c, int q);

}  // namespace sluice
