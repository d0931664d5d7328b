#include "sluice/core/base/qp.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>

#include "sluice/core/base/log.h"

namespace sluice {
namespace {

std::string gid_text(const ibv_gid& g) {
  char buf[64];
  std::snprintf(buf, sizeof buf,
                "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x", g.raw[0],
                g.raw[1], g.raw[2], g.raw[3], g.raw[4], g.raw[5], g.raw[6], g.raw[7], g.raw[8],
                g.raw[9], g.raw[10], g.raw[11], g.raw[12], g.raw[13], g.raw[14], g.raw[15]);
  return buf;
}

// After a successful ibv_modify_qp, confirm the QP really is in `want`.
Status modify_failed(ibv_qp* qp, const char* step, int rc, const std::string& attrs,
                     const char* likely) {
  std::string m = std::string(step) + ": ibv_modify_qp(qpn " + std::to_string(qp->qp_num) +
                  ", state " + verbs::qp_state_name(qp_query_state(qp)) +
                  ") failed: " + std::strerror(rc) + " (errno " + std::to_string(rc) +
                  "); attributes " + attrs + "; likely: " + likely;
  return Status(Code::kSystemError, std::move(m));
}

}  // namespace

bool mqp_retryable(const MqpRetry& p, int rc) {
  if (rc == 0) return false;
  return p.all || rc == ETIMEDOUT || rc == -ETIMEDOUT;
}

int modify_qp_retrying(ibv_qp* qp, ibv_qp_attr* attr, int mask, const MqpRetry& p, const char* step,
                       const ModifyQpFn& modify, const SleepMsFn& sleep, int* attempts) {
  int calls = 0;
  int rc = 0;
  for (;;) {
    rc = modify ? modify(qp, attr, mask) : ibv_modify_qp(qp, attr, mask);
    ++calls;
    if (!mqp_retryable(p, rc) || calls > p.count) break;
    const int ms = p.sleep_ms * calls;  // linear backoff, as NCCL's
    const int e = rc < 0 ? -rc : rc;
    SLUICE_INFO(kSubNet,
                "%s: ibv_modify_qp(qpn %u) failed: %s (errno %d); retry %d of %d in %d ms "
                "(NCCL_IB_MQP_RETRY_CNT, NCCL_IB_MQP_RETRY_SLEEP_MSEC%s)",
                step, qp != nullptr ? qp->qp_num : 0u, std::strerror(e), e, calls, p.count, ms,
                p.all ? ", NCCL_IB_MQP_RETRY_ALL=1" : "");
    if (sleep) {
      sleep(ms);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    }
  }
  if (attempts != nullptr) *attempts = calls;
  return rc < 0 ? -rc : rc;
}

ibv_qp_state qp_query_state(ibv_qp* qp) {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  if (ibv_query_qp(qp, &attr, IBV_QP_STATE, &init) != 0) return static_cast<ibv_qp_state>(-1);
  return attr.qp_state;
}

uint32_t random_psn() {
  static thread_local std::mt19937 rng{std::random_device{}()};
  return rng() & 0xffffffu;
}

Result<verbs::Qp> create_rc_qp(ibv_pd* pd, ibv_cq* cq, const QpCaps& caps) {
  ibv_qp_init_attr a{};
  a.send_cq = cq;
  a.recv_cq = cq;
  a.qp_type = IBV_QPT_RC;
  a.sq_sig_all = 0;
  a.cap.max_send_wr = caps.max_send_wr;
  a.cap.max_recv_wr = caps.max_recv_wr;
  a.cap.max_send_sge = caps.max_send_sge;
  a.cap.max_recv_sge = caps.max_recv_sge;
  a.cap.max_inline_data = caps.max_inline_data;
  ibv_qp* qp = ibv_create_qp(pd, &a);
  if (qp == nullptr) {
    int err = errno;
    return errno_status(Code::kSystemError,
                        "ibv_create_qp(RC, send_wr " + std::to_string(caps.max_send_wr) +
                            ", recv_wr " + std::to_string(caps.max_recv_wr) + ", inline " +
                            std::to_string(caps.max_inline_data) + ")",
                        err);
  }
  return verbs::Qp(qp);
}

Status qp_to_init(ibv_qp* qp, const InitParams& p) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = p.pkey_index;
  a.port_num = p.port;
  a.qp_access_flags = p.access;
  int rc = modify_qp_retrying(qp, &a,
                              IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
                              p.retry, "RESET->INIT");
  if (rc != 0) {
    return modify_failed(qp, "RESET->INIT", rc,
                         "{port " + std::to_string(p.port) + ", pkey_index " +
                             std::to_string(p.pkey_index) + ", access " + std::to_string(p.access) +
                             "}",
                         "port_num not a valid port of the device, or pkey_index (NCCL_IB_PKEY) "
                         "outside the port's P_Key table");
  }
  return Status::ok();  // ibv_modify_qp returned 0: the QP is in that state (no query_qp)
}

Status qp_to_rtr(ibv_qp* qp, const RtrParams& p) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = p.path_mtu;
  a.dest_qp_num = p.dest_qpn;
  a.rq_psn = p.rq_psn & 0xffffffu;
  a.max_dest_rd_atomic = p.max_dest_rd_atomic;
  a.min_rnr_timer = p.min_rnr_timer;
  a.ah_attr.port_num = p.port;
  a.ah_attr.sl = p.sl;
  a.ah_attr.src_path_bits = 0;
  a.ah_attr.static_rate = 0;
  if (p.is_global) {
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = p.dgid;
    a.ah_attr.grh.sgid_index = p.sgid_index;
    a.ah_attr.grh.hop_limit = p.hop_limit;
    a.ah_attr.grh.traffic_class = p.traffic_class;
    a.ah_attr.grh.flow_label = p.flow_label & 0xFFFFFu;
  } else {
    a.ah_attr.is_global = 0;
    a.ah_attr.dlid = p.dlid;
  }
  int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  int rc = modify_qp_retrying(qp, &a, mask, p.retry, "INIT->RTR");
  if (rc != 0) {
    std::string attrs =
        "{path_mtu " + std::string(verbs::mtu_name(p.path_mtu)) + ", dest_qpn " +
        std::to_string(p.dest_qpn) + ", rq_psn " + std::to_string(a.rq_psn) + ", port " +
        std::to_string(p.port) +
        (p.is_global ? ", dgid " + gid_text(p.dgid) + ", sgid_index " +
                           std::to_string(p.sgid_index) + ", tc " + std::to_string(p.traffic_class)
                     : ", dlid " + std::to_string(p.dlid)) +
        ", sl " + std::to_string(p.sl) + "}";
    const char* likely =
        p.is_global ? "sgid_index (NCCL_IB_GID_INDEX) not a valid GID of the local port, a remote "
                      "GID that cannot be routed, or path_mtu above the port's active MTU"
                    : "dlid not reachable from this port, or path_mtu above the active MTU";
    return modify_failed(qp, "INIT->RTR", rc, attrs, likely);
  }
  return Status::ok();  // ibv_modify_qp returned 0: the QP is in that state (no query_qp)
}

Status qp_to_rts(ibv_qp* qp, const RtsParams& p) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = p.sq_psn & 0xffffffu;
  a.timeout = p.timeout;
  a.retry_cnt = p.retry_cnt;
  a.rnr_retry = p.rnr_retry;
  a.max_rd_atomic = p.max_rd_atomic;
  int mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
             IBV_QP_MAX_QP_RD_ATOMIC;
  int rc = modify_qp_retrying(qp, &a, mask, p.retry, "RTR->RTS");
  if (rc != 0) {
    return modify_failed(qp, "RTR->RTS", rc,
                         "{sq_psn " + std::to_string(a.sq_psn) + ", timeout " +
                             std::to_string(p.timeout) + ", retry_cnt " +
                             std::to_string(p.retry_cnt) + ", rnr_retry " +
                             std::to_string(p.rnr_retry) + "}",
                         "timeout (NCCL_IB_TIMEOUT) above 31 or retry counts above 7");
  }
  return Status::ok();  // ibv_modify_qp returned 0: the QP is in that state (no query_qp)
}

Status qp_to_error(ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE);
  if (rc != 0) return errno_status(Code::kSystemError, "ibv_modify_qp(->ERROR)", rc);
  return Status::ok();
}

Status fence_qp(ibv_qp* qp, uint64_t marker) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  if (int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE); rc != 0)
    return errno_status(Code::kSystemError,
                        "fence: ibv_modify_qp(->ERROR) of qpn " + std::to_string(qp->qp_num), rc);
  if (ibv_qp_state st = qp_query_state(qp); st != IBV_QPS_ERR)
    return Status(Code::kSystemError, "fence: qpn " + std::to_string(qp->qp_num) + " is in state " +
                                          std::to_string(st) +
                                          " after ibv_modify_qp(->ERROR) succeeded");
  // Posted in ERROR, it completes with IBV_WC_WR_FLUSH_ERR after every WR posted before it. No
  // receive marker: rxe (Debian 6.1) never flushes a receive a process posts to a QP already in
  // ERROR (user-space post_recv does not wake its responder), measured in qp_fence; the receives
  // posted before the fence flush on their own and are the data path's to discard.
  ibv_send_wr swr{}, *bad_s = nullptr;
  swr.wr_id = marker;
  swr.opcode = IBV_WR_SEND;
  swr.send_flags = IBV_SEND_SIGNALED;
  if (int rc = ibv_post_send(qp, &swr, &bad_s); rc != 0)
    return errno_status(Code::kSystemError,
                        "fence: the send marker on qpn " + std::to_string(qp->qp_num), rc);
  return Status::ok();
}

}  // namespace sluice
