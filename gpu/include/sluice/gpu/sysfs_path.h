// The components of a sysfs device path ("/sys/devices/pci0000:00/0000:00:01.0/..." ->
// {"sys", "devices", "pci0000:00", "0000:00:01.0", ...}), empty ones dropped. Header-only so that
// gpu-check (tests/gpu), which links no Sluice library, compares paths the way gpu/ does.
#pragma once

#include <string>
#include <vector>

namespace sluice::gpu {

inline std::vector<std::string> sysfs_path_parts(const std::string& p) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < p.size()) {
    size_t j = p.find('/', i);
    if (j == std::string::npos) j = p.size();
    if (j > i) out.push_back(p.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

}  // namespace sluice::gpu
