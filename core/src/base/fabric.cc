#include "sluice/core/base/fabric.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "sluice/core/base/verbs_ext.h"

namespace sluice {

RoProbe probe_relaxed_ordering(ibv_pd* pd, const std::string& nic) {
  RoProbe p;
  const long page = sysconf(_SC_PAGESIZE);
  void* mem = mmap(nullptr, static_cast<size_t>(page), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    p.text = std::string("probe buffer: mmap failed: ") + std::strerror(errno);
    return p;
  }
  const unsigned access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING;
  ibv_mr* mr = ibv_reg_mr_iova2(pd, mem, static_cast<size_t>(page),
                                reinterpret_cast<uintptr_t>(mem), access);
  const int err = errno;
  if (mr != nullptr) {
    p.ok = true;
    p.text = "ibv_reg_mr_iova2 with IBV_ACCESS_RELAXED_ORDERING on " + nic + " registered";
    ibv_dereg_mr(mr);
  } else {
    p.text = "ibv_reg_mr_iova2 with IBV_ACCESS_RELAXED_ORDERING on " + nic +
             " failed: " + std::strerror(err) + " (errno " + std::to_string(err) + ")";
  }
  munmap(mem, static_cast<size_t>(page));
  return p;
}

RelaxedOrdering decide_relaxed_ordering(int mode, const RoProbe& probe) {
  RelaxedOrdering r;
  if (mode == 0) {
    r.why = "off: NCCL_IB_PCI_RELAXED_ORDERING=0";
  } else if (mode == 1) {
    r.on = true;
    r.why = "on: NCCL_IB_PCI_RELAXED_ORDERING=1 (requested; " + probe.text + ")";
  } else if (probe.ok) {
    r.on = true;
    r.why = "on: NCCL_IB_PCI_RELAXED_ORDERING=2 and " + probe.text +
            " (an optional flag: the device uses it where its PCIe path allows)";
  } else {
    r.why = "off: NCCL_IB_PCI_RELAXED_ORDERING=2 but " + probe.text;
  }
  return r;
}

AdaptiveRouting decide_adaptive_routing(int mode, int threshold, uint8_t link_layer) {
  AdaptiveRouting a;
  const bool ib = link_layer == IBV_LINK_LAYER_INFINIBAND;
  std::string source;
  if (mode < 0) {
    a.on = ib;
    source = std::string("NCCL_IB_ADAPTIVE_ROUTING unset: ") +
             (ib ? "on for InfiniBand" : "off for RoCE") + " (NCCL's default)";
  } else {
    a.on = mode != 0;
    source = "NCCL_IB_ADAPTIVE_ROUTING=" + std::to_string(mode);
  }
  if (a.on) {
    a.threshold = static_cast<size_t>(threshold);
    a.why = "on: " + source + "; messages above NCCL_IB_AR_THRESHOLD=" + std::to_string(threshold) +
            " bytes travel as RDMA WRITEs closed by a separate zero-length WRITE_WITH_IMM";
  } else {
    a.why = "off: " + source + "; the last data WRITE carries the immediate";
  }
  return a;
}

Ece ece_intersection(const Ece& local, const Ece& remote) {
  Ece e;
  if (!local.supported || !remote.supported || local.vendor_id != remote.vendor_id) return e;
  e.supported = true;
  e.vendor_id = local.vendor_id;
  e.options = local.options & remote.options;
  e.comp_mask = local.comp_mask & remote.comp_mask;
  return e;
}

std::string ece_text(const Ece& e) {
  if (!e.supported) return "none";
  char buf[96];
  std::snprintf(buf, sizeof buf, "vendor 0x%x options 0x%x comp_mask 0x%x", e.vendor_id, e.options,
                e.comp_mask);
  return buf;
}

EceQuery query_ece(ibv_qp* qp, bool enabled) {
  EceQuery q;
  if (!enabled) {
    q.text = "NCCL_IB_ECE_ENABLE=0";
    return q;
  }
  const auto fn = verbs::ext().query_ece;
  if (fn == nullptr) {
    q.err = ENOSYS;
    q.text = "rdma-core too old: libibverbs has no " + verbs::ext_origin("ibv_query_ece");
    return q;
  }
  ibv_ece raw{};
  const int rc = fn(qp, &raw);
  if (rc != 0) {
    q.err = rc < 0 ? -rc : rc;
    q.text = std::string("ibv_query_ece: ") + std::strerror(q.err) + " (errno " +
             std::to_string(q.err) + ")" + (q.err == EOPNOTSUPP ? ": the provider has no ECE" : "");
    return q;
  }
  q.ece.supported = true;
  q.ece.vendor_id = raw.vendor_id;
  q.ece.options = raw.options;
  q.ece.comp_mask = raw.comp_mask;
  return q;
}

EceQuery probe_ece(ibv_context* ctx, ibv_pd* pd, bool enabled) {
  if (!enabled || verbs::ext().query_ece == nullptr) return query_ece(nullptr, enabled);
  EceQuery q;
  ibv_cq* cq = ibv_create_cq(ctx, 1, nullptr, nullptr, 0);
  if (cq == nullptr) {
    q.text = std::string("probe: ibv_create_cq failed: ") + std::strerror(errno);
    return q;
  }
  ibv_qp_init_attr a{};
  a.send_cq = a.recv_cq = cq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = a.cap.max_recv_wr = 1;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  ibv_qp* qp = ibv_create_qp(pd, &a);
  if (qp == nullptr) {
    q.text = std::string("probe: ibv_create_qp failed: ") + std::strerror(errno);
  } else {
    q = query_ece(qp, enabled);
    ibv_destroy_qp(qp);
  }
  ibv_destroy_cq(cq);
  return q;
}

int set_ece(ibv_qp* qp, const Ece& e) {
  const auto fn = verbs::ext().set_ece;
  if (fn == nullptr) return ENOSYS;
  ibv_ece raw{};
  raw.vendor_id = e.vendor_id;
  raw.options = e.options;
  raw.comp_mask = e.comp_mask;
  const int rc = fn(qp, &raw);
  return rc < 0 ? -rc : rc;
}

}  // namespace sluice
