// GPUDirect RDMA: what the GPU side reports, what each NIC accepts, and the decision (with a reason
// for every "no") that sets a device's ptrSupport. Core sees no CUDA type: gpu/ fills GpuFacts and
// GpuOps, the plugin layer hands them to engine_acquire.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sluice/core/base/config.h"
#include "sluice/core/base/status.h"

namespace sluice {

// Facts about the CUDA side, each with its reason when false.
struct GpuFacts {
  bool driver = false;  // the driver loaded, cuInit succeeded and at least one GPU exists
  std::string driver_reason;
  bool gpu_rdma = false;  // every GPU: CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED
  std::string gpu_rdma_reason;
  bool gpu_dmabuf = false;  // every GPU: CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, driver >= 11.7
  std::string gpu_dmabuf_reason;
  bool peermem = false;        // nvidia_peermem (or the legacy nv_peer_mem) is loaded
  std::string peermem_reason;  // which paths were looked at
};

// Operations on GPU memory that core needs, supplied by the plugin layer from gpu/.
struct GpuOps {
  GpuFacts facts;
  // Exports [addr, addr + len) of device memory as a dma-buf file descriptor (the caller closes
  // it) for the NIC at sysfs path `nic_pci_path` ("" when unknown; it picks the PCIe or the C2C
  // mapping). addr and len are page aligned. A failure says why ("cuMemGetHandleForAddressRange:
  // ...").
  Status (*export_dmabuf)(uintptr_t addr, size_t len, const std::string& nic_pci_path,
                          int* fd) = nullptr;
};

// The kernel/verbs side of DMA-BUF on one NIC: ibv_reg_dmabuf_mr with fd -1 fails with EBADF when
// the path exists, EOPNOTSUPP/EPROTONOSUPPORT when it does not. Any other answer (EINVAL on some
// VFs) counts as supported, as in NCCL, and is worth a WARN naming the errno (docs/gpu.md).
struct DmabufProbe {
  bool supported = false;
  std::string text;   // "ibv_reg_dmabuf_mr(fd -1) on rxe0: EOPNOTSUPP: the NIC driver has no ..."
  bool warn = false;  // an unexpected answer: the caller logs `text` as a WARN
};
DmabufProbe probe_dmabuf(ibv_pd* pd, const std::string& nic);
// The same with the registration entry point given: null = this rdma-core has none (before 34),
// which the probe reports as "no dma-buf (rdma-core too old)".
using RegDmabufFn = ibv_mr* (*)(ibv_pd*, uint64_t, size_t, uint64_t, int, int);
DmabufProbe probe_dmabuf_with(ibv_pd* pd, const std::string& nic, RegDmabufFn reg);
// Pure: the verdict for the probe's errno (`registered`: the call unexpectedly returned an MR).
DmabufProbe classify_dmabuf_probe(int err, bool registered, const std::string& nic);

enum class GdrMode { kOff = 0, kAuto = 1, kForce = 2 };  // SLUICE_GDR

struct GdrDecision {
  int ptr_support = 0x1;             // kPtrHost | kPtrCuda | kPtrDmabuf
  bool cuda = false;                 // regMr accepts CUDA pointers
  bool dmabuf = false;               // regMrDmaBuf and dma-buf export are used
  bool peermem = false;              // ibv_reg_mr of a device pointer is expected to work
  std::string summary;               // one line: the decision and, for every "no", its reason
  std::vector<std::string> reasons;  // each "no" on its own ("dmabuf: ...")
};

// Pure: the decision for one NIC from the configuration, the GPU facts and the NIC's probe.
GdrDecision decide_gdr(const Config& cfg, const GpuFacts& gpu, const DmabufProbe& nic,
                       const std::string& nic_name);

}  // namespace sluice
