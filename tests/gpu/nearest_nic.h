// gpu-check's choice of the NIC for its loopback: the plugin device whose PCI path shares the
// longest run of sysfs components with the GPU's (the same switch beats the same root port beats
// the same host bridge), the lowest index among equals. Pure, so tests/unit checks it.
#pragma once

#include <string>
#include <vector>

#include "sluice/gpu/sysfs_path.h"

namespace gpucheck {

// Shared leading components below /sys/devices ("pci0000:00", the root port, switches...).
inline int pci_affinity(const std::string& gpu, const std::string& nic) {
  const auto a = sluice::gpu::sysfs_path_parts(gpu), b = sluice::gpu::sysfs_path_parts(nic);
  int n = 0;
  for (size_t i = 0; i < a.size() && i < b.size() && a[i] == b[i]; ++i)
    if (a[i].rfind("pci", 0) == 0 || a[i].find(':') != std::string::npos) ++n;
  return n;
}

// Index into `nic_paths` of the device nearest `gpu_path`; 0 when nothing is known.
inline int nearest_nic(const std::string& gpu_path, const std::vector<std::string>& nic_paths) {
  int best = 0, best_score = -1;
  for (size_t i = 0; i < nic_paths.size(); ++i) {
    const int s = gpu_path.empty() ? 0 : pci_affinity(gpu_path, nic_paths[i]);
    if (s > best_score) {
      best_score = s;
      best = static_cast<int>(i);
    }
  }
  return best;
}

}  // namespace gpucheck
