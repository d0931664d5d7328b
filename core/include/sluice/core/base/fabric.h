// What production fabrics turn on, decided per device from the configuration and what the device
// and rdma-core answer: PCIe relaxed ordering on registrations (NCCL_IB_PCI_RELAXED_ORDERING),
// adaptive-routing-safe sends (NCCL_IB_ADAPTIVE_ROUTING, NCCL_IB_AR_THRESHOLD) and Enhanced
// Connection Establishment (NCCL_IB_ECE_ENABLE). The decisions are pure (unit tested); the probes
// touch verbs. Every decision carries its reason, for the INFO log and sluice-info.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace sluice {

// ---- PCIe relaxed ordering ------------------------------------------------------------------
// A one-page host registration with IBV_ACCESS_RELAXED_ORDERING through ibv_reg_mr_iova2. The
// flag is optional (IBV_ACCESS_OPTIONAL_RANGE): rdma-core drops it where the kernel has no
// optional access flags, the kernel drops it where the device cannot use it, so the probe tells
// whether registrations with it work, not whether the PCIe path reorders.
struct RoProbe {
  bool ok = false;
  std::string text;
};
RoProbe probe_relaxed_ordering(ibv_pd* pd, const std::string& nic);

struct RelaxedOrdering {
  bool on = false;
  std::string why;  // "on: ..." / "off: ..."
};
// mode: 0 off, 1 on (requested whatever the probe says), 2 on where the probe registered.
RelaxedOrdering decide_relaxed_ordering(int mode, const RoProbe& probe);
// The access flags of a data registration with the decision applied.
inline unsigned with_relaxed_ordering(unsigned access, bool on) {
  return on ? access | IBV_ACCESS_RELAXED_ORDERING : access;
}

// ---- Adaptive routing -------------------------------------------------------------------------
struct AdaptiveRouting {
  bool on = false;
  size_t threshold = SIZE_MAX;  // messages larger than this close with a separate WRITE_WITH_IMM
  std::string why;
};
// mode: NCCL_IB_ADAPTIVE_ROUTING (negative = NCCL's default: on for InfiniBand, off for RoCE);
// threshold: NCCL_IB_AR_THRESHOLD in bytes.
AdaptiveRouting decide_adaptive_routing(int mode, int threshold, uint8_t link_layer);
// Whether a message of `size` bytes closes with its own zero-length WRITE_WITH_IMM.
inline bool ar_separate_imm(size_t size, size_t threshold) {
  return size > threshold;
}

// ---- Enhanced Connection Establishment ------------------------------------------------------
struct Ece {
  bool supported = false;
  uint32_t vendor_id = 0;
  uint32_t options = 0;
  uint32_t comp_mask = 0;
};
// What both ends can use: supported only when both are and the vendor is the same; then the
// options and comp_mask bits both offer.
Ece ece_intersection(const Ece& local, const Ece& remote);
std::string ece_text(const Ece& e);  // "vendor 0x15b3 options 0x30000000 comp_mask 0x0" / "none"

struct EceQuery {
  Ece ece;
  int err = 0;       // ibv_query_ece's error (EOPNOTSUPP on rxe); 0 = answered
  std::string text;  // why there is no ECE, when there is none
};
// ibv_query_ece on `qp`, when enabled (NCCL_IB_ECE_ENABLE) and rdma-core has it (31+).
EceQuery query_ece(ibv_qp* qp, bool enabled);
// For reports (sluice-info): a throwaway RC QP on `pd`, its ibv_query_ece answer, then gone.
EceQuery probe_ece(ibv_context* ctx, ibv_pd* pd, bool enabled);
// ibv_set_ece before RTR; returns 0 or the error.
int set_ece(ibv_qp* qp, const Ece& e);

}  // namespace sluice
