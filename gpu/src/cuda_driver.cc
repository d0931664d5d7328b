#include "sluice/gpu/cuda_driver.h"

#include <dlfcn.h>

#include <cctype>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "sluice/core/base/log.h"
#include "sluice/gpu/sysfs_path.h"

namespace sluice::gpu {
namespace {

// The few driver entry points we need, declared here so no CUDA header is required.
// CUresult is an enum (int-sized); CUDA_SUCCESS == 0.
using CuResult = int;
using CuInitFn = CuResult (*)(unsigned int flags);
using CuDeviceGetCountFn = CuResult (*)(int* count);
using CuDriverGetVersionFn = CuResult (*)(int* version);
using CuGetErrorStringFn = CuResult (*)(CuResult error, const char** str);
using CuDeviceGetFn = CuResult (*)(int* dev, int ordinal);
using CuDeviceGetAttributeFn = CuResult (*)(int* value, int attrib, int dev);
using CuDeviceGetNameFn = CuResult (*)(char* name, int len, int dev);
using CuDeviceGetBusIdFn = CuResult (*)(char* bus_id, int len, int dev);
using CuMemGetHandleForAddressRangeFn = CuResult (*)(void* handle, uintptr_t ptr, size_t size,
                                                     int handle_type, unsigned long long flags);

// Values from cuda.h (stable ABI constants).
constexpr int kAttrGpuDirectRdmaSupported = 116;  // CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED
constexpr int kAttrDmaBufSupported = 124;         // CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED
constexpr int kAttrHostNativeAtomic = 86;  // CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED
constexpr int kErrorInvalidValue = 1;      // CUDA_ERROR_INVALID_VALUE
constexpr int kErrorNotSupported = 801;    // CUDA_ERROR_NOT_SUPPORTED
constexpr int kHandleTypeDmaBufFd = 1;     // CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD

constexpr const char* kLibName = "libcuda.so.1";  // the default; SLUICE_CUDA_LIBRARY overrides

std::string cu_error(CuGetErrorStringFn get_string, CuResult r) {
  const char* s = nullptr;
  if (get_string != nullptr && get_string(r, &s) == 0 && s != nullptr) {
    return std::string(s) + " (" + std::to_string(r) + ")";
  }
  return "CUresult " + std::to_string(r);
}

std::string hex(uintptr_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

const CudaDriver& CudaDriver::instance(const char* library) {
  static const CudaDriver driver(library);  // magic static: thread-safe one-time load
  return driver;
}

CudaDriver::CudaDriver(const char* library) {
  try {
    library_ = library != nullptr && *library != '\0' ? library : kLibName;
    const char* name = library_.c_str();  // the name every message below reports
    // RTLD_LOCAL: the driver's symbols stay out of the global namespace of the host process.
    void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* err = dlerror();
      reason_ = std::string(name) +
                " not found: no NVIDIA driver (dlerror: " + (err != nullptr ? err : "unknown") +
                ")";
      SLUICE_INFO(kSubInit, "CUDA driver unavailable: %s", reason_.c_str());
      return;
    }
    auto sym = [lib](const char* s) { return dlsym(lib, s); };
    auto cu_init = reinterpret_cast<CuInitFn>(sym("cuInit"));
    auto cu_count = reinterpret_cast<CuDeviceGetCountFn>(sym("cuDeviceGetCount"));
    auto cu_version = reinterpret_cast<CuDriverGetVersionFn>(sym("cuDriverGetVersion"));
    auto cu_error_string = reinterpret_cast<CuGetErrorStringFn>(sym("cuGetErrorString"));
    if (cu_init == nullptr || cu_count == nullptr || cu_version == nullptr) {
      reason_ = std::string(name) +
                " lacks cuInit/cuDeviceGetCount/cuDriverGetVersion: not a usable CUDA driver";
      SLUICE_WARN("%s", reason_.c_str());
      return;  // the handle is deliberately kept: unloading a driver library is never safe
    }
    if (CuResult r = cu_version(&driver_version_); r != 0) {
      reason_ = "cuDriverGetVersion failed: " + cu_error(cu_error_string, r);
      driver_version_ = 0;
      return;
    }
    if (CuResult r = cu_init(0); r != 0) {
      // e.g. CUDA_ERROR_NO_DEVICE (100) on a machine with the library but no GPU.
      reason_ = "cuInit failed: " + cu_error(cu_error_string, r);
      SLUICE_INFO(kSubInit, "CUDA driver unavailable: %s", reason_.c_str());
      return;
    }
    if (CuResult r = cu_count(&device_count_); r != 0) {
      reason_ = "cuDeviceGetCount failed: " + cu_error(cu_error_string, r);
      device_count_ = 0;
      return;
    }
    ctx_get_device_ = sym("cuCtxGetDevice");
    device_get_bus_id_ = sym("cuDeviceGetPCIBusId");
    get_error_string_ = reinterpret_cast<void*>(cu_error_string);
    get_handle_ = sym("cuMemGetHandleForAddressRange");
    if (device_count_ <= 0) {
      reason_ = "cuDeviceGetCount found no GPU";
      SLUICE_INFO(kSubInit, "CUDA driver unavailable: %s", reason_.c_str());
      return;
    }
    auto dev_get = reinterpret_cast<CuDeviceGetFn>(sym("cuDeviceGet"));
    auto dev_attr = reinterpret_cast<CuDeviceGetAttributeFn>(sym("cuDeviceGetAttribute"));
    auto dev_name = reinterpret_cast<CuDeviceGetNameFn>(sym("cuDeviceGetName"));
    auto bus_id = reinterpret_cast<CuDeviceGetBusIdFn>(device_get_bus_id_);
    for (int i = 0; i < device_count_; ++i) {
      Gpu g;
      int dev = i;
      if (dev_get == nullptr || dev_get(&dev, i) != 0) {
        g.attr_error = "cuDeviceGet(" + std::to_string(i) + ") failed or is missing";
        gpus_.push_back(std::move(g));
        continue;
      }
      char buf[128] = {};
      if (dev_name != nullptr && dev_name(buf, sizeof buf, dev) == 0) g.name = buf;
      char bus[32] = {};
      if (bus_id != nullptr && bus_id(bus, sizeof bus, dev) == 0) g.bus_id = bus;
      int v = 0;
      if (dev_attr == nullptr) {
        g.attr_error = "cuDeviceGetAttribute is missing";
      } else {
        if (CuResult r = dev_attr(&v, kAttrGpuDirectRdmaSupported, dev); r == 0) {
          g.rdma = v != 0;
        } else {
          g.attr_error = "GPU_DIRECT_RDMA_SUPPORTED: " + cu_error(cu_error_string, r);
        }
        v = 0;
        if (CuResult r = dev_attr(&v, kAttrDmaBufSupported, dev); r == 0) {
          g.dmabuf = v != 0;
        } else {
          g.attr_error = "DMA_BUF_SUPPORTED: " + cu_error(cu_error_string, r);
        }
        v = 0;
        if (dev_attr(&v, kAttrHostNativeAtomic, dev) == 0) g.c2c = v != 0;
      }
      gpus_.push_back(std::move(g));
    }
    available_ = true;
    SLUICE_INFO(kSubInit, "CUDA driver %d.%d loaded, %d device(s)", driver_version_ / 1000,
                (driver_version_ % 1000) / 10, device_count_);
  } catch (...) {
    // std::string allocation failure only; report unavailable rather than throw out of a static.
    available_ = false;
    reason_ = "CUDA driver probe failed (out of memory)";
  }
}

std::string CudaDriver::error_text(int result) const {
  return cu_error(reinterpret_cast<CuGetErrorStringFn>(get_error_string_), result);
}

std::string CudaDriver::export_dmabuf(uintptr_t addr, size_t len, const std::string& nic_pci_path,
                                      int* fd, unsigned long long* flags_used) const {
  *fd = -1;
  if (flags_used != nullptr) *flags_used = 0;
  if (!available_) return "no CUDA driver: " + reason_;
  if (get_handle_ == nullptr) {
    return library_ + " has no cuMemGetHandleForAddressRange (driver older than 11.7)";
  }
  // The GPU that owns the range is the caller's current device (NCCL makes it current).
  unsigned long long flags = 0;
  const std::string bus = current_device_bus_id();
  for (const auto& g : gpus_) {
    if (g.bus_id.empty() || g.bus_id != bus) continue;
    std::string lower = bus;
    for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    char real[PATH_MAX];
    const std::string link = "/sys/bus/pci/devices/" + lower;
    const std::string gpu_path = realpath(link.c_str(), real) != nullptr ? real : "";
    flags = dmabuf_export_flags(g.c2c, driver_version_, gpu_path, nic_pci_path);
  }
  auto get = reinterpret_cast<CuMemGetHandleForAddressRangeFn>(get_handle_);
  int out = -1;
  CuResult r = get(&out, addr, len, kHandleTypeDmaBufFd, flags);
  std::string first;
  if (r != 0 && flags != 0 && (r == kErrorInvalidValue || r == kErrorNotSupported)) {
    // A driver or platform without the PCIe mapping: the default mapping still works.
    first = " (with MAPPING_TYPE_PCIE: " + error_text(r) + ")";
    flags = 0;
    r = get(&out, addr, len, kHandleTypeDmaBufFd, flags);
  }
  if (r != 0) {
    return "cuMemGetHandleForAddressRange(" + hex(addr) + ", " + std::to_string(len) +
           ", DMA_BUF_FD, flags " + std::to_string(flags) + ") failed: " + error_text(r) + first;
  }
  *fd = out;
  if (flags_used != nullptr) *flags_used = flags;
  return "";
}

bool share_pcie_root_port(const std::string& a, const std::string& b) {
  const auto pa = sysfs_path_parts(a), pb = sysfs_path_parts(b);
  // /sys/devices/pciDDDD:BB/<root port>/...: find the host bridge component, then compare the one
  // after it (the root port); both devices must lie below it.
  auto root = [](const std::vector<std::string>& v) -> int {
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i].rfind("pci", 0) == 0 && v[i].find(':') != std::string::npos) return int(i);
    return -1;
  };
  const int ra = root(pa), rb = root(pb);
  if (ra < 0 || rb < 0) return false;
  if (pa.size() < size_t(ra) + 3 || pb.size() < size_t(rb) + 3) return false;
  return pa[ra] == pb[rb] && pa[ra + 1] == pb[rb + 1];
}

unsigned long long dmabuf_export_flags(bool gpu_c2c, int driver_version,
                                       const std::string& gpu_pci_path,
                                       const std::string& nic_pci_path) {
  if (!gpu_c2c || driver_version < 12080) return 0;
  if (gpu_pci_path.empty() || nic_pci_path.empty()) return 0;
  return share_pcie_root_port(gpu_pci_path, nic_pci_path) ? kDmabufMappingPcie : 0;
}

std::string CudaDriver::current_device_bus_id() const {
  if (!available_ || ctx_get_device_ == nullptr || device_get_bus_id_ == nullptr) return "";
  using CtxGetDeviceFn = CuResult (*)(int* dev);
  using DeviceGetBusIdFn = CuResult (*)(char* bus_id, int len, int dev);
  int dev = -1;
  if (reinterpret_cast<CtxGetDeviceFn>(ctx_get_device_)(&dev) != 0 || dev < 0) return "";
  char buf[32] = {};
  if (reinterpret_cast<DeviceGetBusIdFn>(device_get_bus_id_)(buf, sizeof buf, dev) != 0) return "";
  return buf;
}

}  // namespace sluice::gpu
