#include "sluice/gpu/cuda_driver.h"

#include <dlfcn.h>

#include <string>

#include "sluice/core/log.h"

namespace sluice::gpu {
namespace {

// The few driver entry points we need, declared here so no CUDA header is required.
// CUresult is an enum (int-sized); CUDA_SUCCESS == 0.
using CuResult = int;
using CuInitFn = CuResult (*)(unsigned int flags);
using CuDeviceGetCountFn = CuResult (*)(int* count);
using CuDriverGetVersionFn = CuResult (*)(int* version);
using CuGetErrorStringFn = CuResult (*)(CuResult error, const char** str);

constexpr const char* kLibName = "libcuda.so.1";

std::string cu_error(CuGetErrorStringFn get_string, CuResult r) {
  const char* s = nullptr;
  if (get_string != nullptr && get_string(r, &s) == 0 && s != nullptr) {
    return std::string(s) + " (" + std::to_string(r) + ")";
  }
  return "CUresult " + std::to_string(r);
}

}  // namespace

const CudaDriver& CudaDriver::instance() {
  static const CudaDriver driver;  // magic static: thread-safe one-time load
  return driver;
}

CudaDriver::CudaDriver() {
  try {
    // RTLD_LOCAL: the driver's symbols stay out of the global namespace of the host process.
    void* lib = dlopen(kLibName, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* err = dlerror();
      reason_ = std::string(kLibName) +
                " not found: no NVIDIA driver (dlerror: " + (err != nullptr ? err : "unknown") +
                ")";
      SLUICE_INFO(kSubInit, "CUDA driver unavailable: %s", reason_.c_str());
      return;
    }
    auto sym = [lib](const char* name) { return dlsym(lib, name); };
    auto cu_init = reinterpret_cast<CuInitFn>(sym("cuInit"));
    auto cu_count = reinterpret_cast<CuDeviceGetCountFn>(sym("cuDeviceGetCount"));
    auto cu_version = reinterpret_cast<CuDriverGetVersionFn>(sym("cuDriverGetVersion"));
    auto cu_error_string = reinterpret_cast<CuGetErrorStringFn>(sym("cuGetErrorString"));
    if (cu_init == nullptr || cu_count == nullptr || cu_version == nullptr) {
      reason_ = std::string(kLibName) +
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
    available_ = true;
    SLUICE_INFO(kSubInit, "CUDA driver %d.%d loaded, %d device(s)", driver_version_ / 1000,
                (driver_version_ % 1000) / 10, device_count_);
  } catch (...) {
    // std::string allocation failure only; report unavailable rather than throw out of a static.
    available_ = false;
    reason_ = "CUDA driver probe failed (out of memory)";
  }
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
