// The GPUDirect decision: pure logic over GpuFacts, the configuration and the NIC's dma-buf probe,
// plus the probe itself (one failing ibv_reg_dmabuf_mr per NIC).
#include "sluice/core/memory/gdr.h"

#include <cerrno>
#include <cstring>

#include "sluice/core/api.h"
#include "sluice/core/base/verbs_ext.h"

namespace sluice {
namespace {

std::string errno_name(int e) {
  switch (e) {
    case EBADF:
      return "EBADF";
    case EOPNOTSUPP:
      return "EOPNOTSUPP";
    case EPROTONOSUPPORT:
      return "EPROTONOSUPPORT";
    case ENOSYS:
      return "ENOSYS";
    case EINVAL:
      return "EINVAL";
    default:
      return "errno " + std::to_string(e);
  }
}

}  // namespace

DmabufProbe classify_dmabuf_probe(int err, bool registered, const std::string& nic) {
  DmabufProbe p;
  const std::string call = "ibv_reg_dmabuf_mr(fd -1) on " + nic;
  if (registered) {  // cannot happen with fd -1
    p.supported = true;
    p.text = call + " unexpectedly succeeded: treating dma-buf as supported";
    return p;
  }
  if (err == EBADF) {
    p.supported = true;
    p.text = call + ": EBADF, so the kernel and the NIC driver accept dma-buf registrations";
  } else if (err == EOPNOTSUPP || err == EPROTONOSUPPORT) {
    p.text = call + ": " + errno_name(err) +
             ": the NIC driver (or the kernel, before 5.12) has no dma-buf registration";
  } else {
    // NCCL (ncclIbDmaBufSupport) counts every answer but EOPNOTSUPP/EPROTONOSUPPORT as support:
    // the path exists and refused the dummy arguments (EINVAL on some VFs). So do we; a real
    // registration that then fails names its own errno, and peermem stays the fallback.
    p.supported = true;
    p.warn = true;
    p.text = call + ": " + errno_name(err) + " (" + std::strerror(err) +
             "), not the EBADF a dma-buf-capable NIC answers nor the EOPNOTSUPP/EPROTONOSUPPORT "
             "of one without it: treating dma-buf as supported, as NCCL does (a failing "
             "regMrDmaBuf will name its own errno)";
  }
  return p;
}

DmabufProbe probe_dmabuf(ibv_pd* pd, const std::string& nic) {
  return probe_dmabuf_with(pd, nic, verbs::ext().reg_dmabuf_mr);
}

DmabufProbe probe_dmabuf_with(ibv_pd* pd, const std::string& nic, RegDmabufFn reg) {
  if (reg == nullptr) {
    DmabufProbe p;
    p.text = "no dma-buf (rdma-core too old): libibverbs has no " +
             verbs::ext_origin("ibv_reg_dmabuf_mr") + "; upgrade rdma-core to 34 or later";
    return p;
  }
  errno = 0;
  ibv_mr* mr = reg(pd, 0, 4096, 0, -1, IBV_ACCESS_LOCAL_WRITE);
  const int e = errno;
  if (mr != nullptr) ibv_dereg_mr(mr);  // never keep it
  return classify_dmabuf_probe(e, mr != nullptr, nic);
}

GdrDecision decide_gdr(const Config& cfg, const GpuFacts& gpu, const DmabufProbe& nic,
                       const std::string& nic_name) {
  GdrDecision d;
  const auto mode = static_cast<GdrMode>(cfg.gdr_mode);
  // Every part is examined and every "no" is reported, even when an earlier one already decides.
  if (mode == GdrMode::kOff) d.reasons.push_back("SLUICE_GDR=off");
  if (!gpu.driver) d.reasons.push_back("no CUDA driver: " + gpu.driver_reason);
  bool dmabuf = true;
  if (!cfg.dmabuf_enable) {
    dmabuf = false;
    d.reasons.push_back("dmabuf: NCCL_DMABUF_ENABLE=0");
  }
  if (gpu.driver && !gpu.gpu_dmabuf) {
    dmabuf = false;
    d.reasons.push_back("dmabuf: " + gpu.gpu_dmabuf_reason);
  }
  if (!nic.supported) {
    dmabuf = false;
    d.reasons.push_back("dmabuf: " + nic.text);
  }
  if (!gpu.peermem) d.reasons.push_back("peermem: " + gpu.peermem_reason);
  if (gpu.driver && !gpu.gpu_rdma) d.reasons.push_back("GPU: " + gpu.gpu_rdma_reason);
  if (mode != GdrMode::kOff && gpu.driver) {
    d.dmabuf = dmabuf && gpu.gpu_dmabuf;
    d.peermem = gpu.peermem && gpu.gpu_rdma;
    d.cuda = d.dmabuf || d.peermem;
    if (mode == GdrMode::kForce && !d.cuda) {
      d.cuda = true;  // regMr of CUDA memory is tried anyway (peermem path, then a clear error)
      d.peermem = true;
      d.reasons.push_back("SLUICE_GDR=force: CUDA memory offered although detection says no");
    }
  }
  d.ptr_support = kPtrHost | (d.cuda ? kPtrCuda : 0) | (d.dmabuf ? kPtrDmabuf : 0);
  if (d.cuda) {
    d.summary = "GPUDirect RDMA on " + nic_name + " (zero-copy: the NIC reads and writes GPU " +
                "memory) through " +
                (d.dmabuf && d.peermem ? "dma-buf, peermem as fallback"
                 : d.dmabuf            ? "dma-buf"
                                       : "peermem") +
                "; ptrSupport HOST|CUDA" + (d.dmabuf ? "|DMABUF" : "");
  } else {
    d.summary = "GPUDirect RDMA off on " + nic_name +
                ": NCCL stages GPU data through host memory (ptrSupport HOST)";
  }
  for (const auto& r : d.reasons) d.summary += "; " + r;
  return d;
}

}  // namespace sluice
