#include "sluice/core/base/verbs.h"

#include "sluice/core/base/log.h"

namespace sluice::verbs {

void ContextDeleter::operator()(ibv_context* c) const {
  if (int rc = ibv_close_device(c); rc != 0) SLUICE_WARN("ibv_close_device failed: %d", rc);
}
void PdDeleter::operator()(ibv_pd* p) const {
  if (int rc = ibv_dealloc_pd(p); rc != 0)
    SLUICE_WARN("ibv_dealloc_pd failed: %d (a QP or MR still uses the PD)", rc);
}
void CqDeleter::operator()(ibv_cq* c) const {
  if (int rc = ibv_destroy_cq(c); rc != 0)
    SLUICE_WARN("ibv_destroy_cq failed: %d (a QP still uses the CQ)", rc);
}
void QpDeleter::operator()(ibv_qp* q) const {
  uint32_t qpn = q->qp_num;
  if (int rc = ibv_destroy_qp(q); rc != 0)
    SLUICE_WARN("ibv_destroy_qp(qpn %u) failed: %d", qpn, rc);
}
void MrDeleter::operator()(ibv_mr* m) const {
  if (int rc = ibv_dereg_mr(m); rc != 0) SLUICE_WARN("ibv_dereg_mr failed: %d", rc);
}
void DeviceListDeleter::operator()(ibv_device** l) const {
  ibv_free_device_list(l);
}

const char* qp_state_name(ibv_qp_state s) {
  switch (s) {
    case IBV_QPS_RESET:
      return "RESET";
    case IBV_QPS_INIT:
      return "INIT";
    case IBV_QPS_RTR:
      return "RTR";
    case IBV_QPS_RTS:
      return "RTS";
    case IBV_QPS_SQD:
      return "SQD";
    case IBV_QPS_SQE:
      return "SQE";
    case IBV_QPS_ERR:
      return "ERROR";
    default:
      return "UNKNOWN";
  }
}

int mtu_bytes(ibv_mtu m) {
  switch (m) {
    case IBV_MTU_256:
      return 256;
    case IBV_MTU_512:
      return 512;
    case IBV_MTU_1024:
      return 1024;
    case IBV_MTU_2048:
      return 2048;
    case IBV_MTU_4096:
      return 4096;
  }
  return 0;
}

const char* mtu_name(ibv_mtu m) {
  switch (m) {
    case IBV_MTU_256:
      return "256";
    case IBV_MTU_512:
      return "512";
    case IBV_MTU_1024:
      return "1024";
    case IBV_MTU_2048:
      return "2048";
    case IBV_MTU_4096:
      return "4096";
  }
  return "invalid";
}

const char* link_layer_name(uint8_t ll) {
  switch (ll) {
    case IBV_LINK_LAYER_INFINIBAND:
      return "InfiniBand";
    case IBV_LINK_LAYER_ETHERNET:
      return "Ethernet";
    default:
      return "unspecified";
  }
}

const char* wc_status_hint(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_RETRY_EXC_ERR:
      return "no ACK from the peer within timeout x retry_cnt: the peer is unreachable (wrong GID "
             "index or routing between the NICs, port down) or gone, or the fabric drops packets "
             "(raise NCCL_IB_TIMEOUT only for the latter)";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return "the peer had no receive posted (receiver not ready) for longer than rnr_retry allows";
    case IBV_WC_REM_ACCESS_ERR:
      return "the peer rejected the access: stale or wrong rkey, address outside the peer's "
             "registered buffer, or missing remote-write permission";
    case IBV_WC_REM_INV_REQ_ERR:
      return "the peer found the request invalid: message longer than the peer's buffer or "
             "mismatched QP attributes";
    case IBV_WC_LOC_PROT_ERR:
      return "local protection error: a buffer outside its memory registration or a wrong lkey";
    case IBV_WC_LOC_LEN_ERR:
      return "local length error: message larger than the posted receive";
    case IBV_WC_WR_FLUSH_ERR:
      return "work request flushed: the QP had already failed (look for the first error) or is "
             "being closed";
    case IBV_WC_REM_OP_ERR:
      return "the peer could not complete the operation (its QP failed)";
    case IBV_WC_LOC_QP_OP_ERR:
      return "local QP error: malformed work request or QP not in RTS";
    default:
      return "see ibv_wc_status_str and the device's vendor_err";
  }
}

}  // namespace sluice::verbs
