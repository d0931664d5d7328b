// GPUDirect facts for core's decision, from the driver and from sysfs.
#include "sluice/gpu/gdr.h"

#include <unistd.h>

#include "sluice/gpu/cuda_driver.h"

namespace sluice::gpu {
namespace {

Status export_dmabuf(uintptr_t addr, size_t len, const std::string& nic_pci_path, int* fd) {
  std::string why = CudaDriver::instance().export_dmabuf(addr, len, nic_pci_path, fd);
  if (why.empty()) return Status::ok();
  return Status(Code::kSystemError, "dma-buf export failed: " + why);
}

}  // namespace

bool peermem_loaded(const std::vector<std::string>& paths, std::string* reason) {
  std::string looked;
  for (const auto& p : paths) {
    if (access(p.c_str(), F_OK) == 0) {
      *reason = "loaded (" + p + " exists)";
      return true;
    }
    looked += (looked.empty() ? "" : ", ") + p;
  }
  *reason = "nvidia_peermem not loaded (none of " + looked +
            " exists; `modprobe nvidia_peermem` loads it)";
  return false;
}

GpuFacts gpu_facts(const Config& cfg) {
  GpuFacts f;
  f.peermem = peermem_loaded(peermem_paths(), &f.peermem_reason);
  const CudaDriver& drv = CudaDriver::instance(cfg.cuda_library.c_str());
  if (!drv.available()) {
    f.driver_reason = drv.reason();
    f.gpu_rdma_reason = f.gpu_dmabuf_reason = "no CUDA driver";
    return f;
  }
  f.driver = true;
  f.gpu_rdma = f.gpu_dmabuf = !drv.gpus().empty();
  std::string no_rdma, no_dmabuf;
  for (size_t i = 0; i < drv.gpus().size(); ++i) {
    const auto& g = drv.gpus()[i];
    const std::string who = "GPU " + std::to_string(i) + (g.bus_id.empty() ? "" : " " + g.bus_id) +
                            (g.attr_error.empty() ? "" : " (" + g.attr_error + ")");
    if (!g.rdma) {
      f.gpu_rdma = false;
      no_rdma += (no_rdma.empty() ? "" : ", ") + who;
    }
    if (!g.dmabuf) {
      f.gpu_dmabuf = false;
      no_dmabuf += (no_dmabuf.empty() ? "" : ", ") + who;
    }
  }
  if (!f.gpu_rdma) f.gpu_rdma_reason = "GPU_DIRECT_RDMA_SUPPORTED is 0 on " + no_rdma;
  if (!f.gpu_dmabuf) f.gpu_dmabuf_reason = "DMA_BUF_SUPPORTED is 0 on " + no_dmabuf;
  if (f.gpu_dmabuf && drv.driver_version() < 11070) {
    f.gpu_dmabuf = false;
    f.gpu_dmabuf_reason = "CUDA driver " + std::to_string(drv.driver_version()) +
                          " is older than 11.7 (no dma-buf export)";
  }
  if (f.gpu_dmabuf && !drv.has_dmabuf_export()) {
    f.gpu_dmabuf = false;
    f.gpu_dmabuf_reason = drv.library() + " lacks cuMemGetHandleForAddressRange";
  }
  return f;
}

GpuOps make_gpu_ops(const Config& cfg) {
  GpuOps ops;
  ops.facts = gpu_facts(cfg);
  ops.export_dmabuf = &export_dmabuf;
  return ops;
}

}  // namespace sluice::gpu
