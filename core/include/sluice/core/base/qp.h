// RC queue-pair bring-up: RESET -> INIT -> RTR -> RTS, each step with exactly the attributes it
// requires, checked twice: the ibv_modify_qp return value first, then ibv_query_qp for the state.
// A failure names the step, the attributes given, and the likely wrong field.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <functional>
#include <string>

#include "sluice/core/base/config.h"
#include "sluice/core/base/status.h"
#include "sluice/core/base/verbs.h"

namespace sluice {

// Retries of a failed ibv_modify_qp, as NCCL's (NCCL_IB_MQP_RETRY_ALL / _CNT / _SLEEP_MSEC): a
// transient ETIMEDOUT (a firmware command that timed out) is retried; with `all`, every error.
struct MqpRetry {
  bool all = false;
  int count = 34;      // retries after the first attempt
  int sleep_ms = 100;  // retry k (1-based) sleeps k * sleep_ms first
};
// Whether `rc` (ibv_modify_qp's return: an errno value, some providers negate it) is retried.
bool mqp_retryable(const MqpRetry& p, int rc);
inline MqpRetry mqp_retry_from(const Config& c) {
  return MqpRetry{c.mqp_retry_all, c.mqp_retry_cnt, c.mqp_retry_sleep_ms};
}
using ModifyQpFn = std::function<int(ibv_qp*, ibv_qp_attr*, int)>;
using SleepMsFn = std::function<void(int ms)>;
// ibv_modify_qp (or `modify`, for tests) with the retry policy: at most p.count retries, each
// after its sleep (`sleep`, default a real one) and announced by an INFO naming `step`, the QP,
// the error and the attempt. Returns the last attempt's result; *attempts (optional) = calls made.
// The whole wait is bounded: p.sleep_ms * p.count * (p.count + 1) / 2 milliseconds.
int modify_qp_retrying(ibv_qp* qp, ibv_qp_attr* attr, int mask, const MqpRetry& p, const char* step,
                       const ModifyQpFn& modify = {}, const SleepMsFn& sleep = {},
                       int* attempts = nullptr);

struct QpCaps {
  uint32_t max_send_wr = 128;
  uint32_t max_recv_wr = 128;
  uint32_t max_send_sge = 1;
  uint32_t max_recv_sge = 1;
  uint32_t max_inline_data = 0;
};

// Creates an RC QP with send and receive completions on `cq`, sq_sig_all = 0 (selective signaling).
Result<verbs::Qp> create_rc_qp(ibv_pd* pd, ibv_cq* cq, const QpCaps& caps);

struct InitParams {
  uint8_t port = 1;
  uint16_t pkey_index = 0;
  unsigned access = IBV_ACCESS_REMOTE_WRITE;
  MqpRetry retry;
};

// Everything RTR needs about the remote side and the path.
struct RtrParams {
  ibv_mtu path_mtu = IBV_MTU_1024;  // min of both active MTUs
  uint32_t dest_qpn = 0;
  uint32_t rq_psn = 0;  // = the peer's sq_psn (24 bits)
  uint8_t max_dest_rd_atomic = 1;
  uint8_t min_rnr_timer = 12;
  uint8_t port = 1;
  bool is_global = true;  // RoCE: always; IB: when the subnet differs
  ibv_gid dgid{};
  uint8_t sgid_index = 0;
  uint8_t hop_limit = 255;
  uint8_t traffic_class = 0;
  uint32_t flow_label = 0;  // 20 bits; 0 = none (RoCE v2: the kernel hashes the QP numbers)
  uint16_t dlid = 0;        // IB
  uint8_t sl = 0;
  MqpRetry retry;
};

struct RtsParams {
  uint32_t sq_psn = 0;  // = the peer's rq_psn (24 bits)
  uint8_t timeout = 20;
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
  uint8_t max_rd_atomic = 1;
  MqpRetry retry;
};

Status qp_to_init(ibv_qp* qp, const InitParams& p);
Status qp_to_rtr(ibv_qp* qp, const RtrParams& p);
Status qp_to_rts(ibv_qp* qp, const RtsParams& p);
// Moves the QP to ERROR so outstanding work flushes (teardown). Best effort.
Status qp_to_error(ibv_qp* qp);

// The local half of failover's fence (health/failover.h, docs/failover.md): moves the QP to
// ERROR, checks that it is there, and posts a drain marker, a zero-length signaled send with
// wr_id `marker`. A QP in ERROR places no incoming byte (qp_fence measures it on the bed), and a
// work queue completes in order, so once the marker has completed (flushed) the provider has
// taken the QP into ERROR and no WR posted before it is still in progress. The caller polls the
// QP's send CQ for it (is_fence_marker); earlier work's completions come first, flushed or not.
Status fence_qp(ibv_qp* qp, uint64_t marker);
inline bool is_fence_marker(const ibv_wc& wc, uint32_t qp_num, uint64_t marker) {
  return wc.qp_num == qp_num && wc.wr_id == marker;
}

// Current state via ibv_query_qp (IBV_QPS_UNKNOWN on failure).
ibv_qp_state qp_query_state(ibv_qp* qp);

// 24-bit random PSN.
uint32_t random_psn();

}  // namespace sluice
