// GPUDirect facts (driver, per-GPU attributes, peermem module) and the dma-buf export, in core's
// type-free shape (sluice/core/memory/gdr.h). The plugin layer hands make_gpu_ops to
// engine_acquire.
#pragma once

#include <string>
#include <vector>

#include "sluice/core/base/config.h"
#include "sluice/core/memory/gdr.h"

namespace sluice::gpu {

// Where the peer-memory modules announce themselves (NCCL looks at the same files).
inline const std::vector<std::string>& peermem_paths() {
  static const std::vector<std::string> paths = {
      "/sys/module/nvidia_peermem/version", "/sys/kernel/mm/memory_peers/nv_mem/version",
      "/sys/kernel/mm/memory_peers/nv_mem_nc/version", "/sys/module/nv_peer_mem/version"};
  return paths;
}

// peermem: loaded when any of `paths` exists; the reason names every path looked at.
bool peermem_loaded(const std::vector<std::string>& paths, std::string* reason);

// Loads the driver (cfg.cuda_library) and gathers the facts.
GpuFacts gpu_facts(const Config& cfg);

// Facts plus the dma-buf export entry point.
GpuOps make_gpu_ops(const Config& cfg);

}  // namespace sluice::gpu
