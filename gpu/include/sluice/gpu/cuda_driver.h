// The CUDA driver, loaded at run time. Sluice never links libcuda: a machine without an NVIDIA
// driver must still load the plugin and run host-memory transfers. This is the seam for GPU memory
// registration (later issue): for now the plugin only asks whether a driver exists.
#pragma once

#include <string>

namespace sluice::gpu {

class CudaDriver {
 public:
  // Process-wide instance: the first call dlopens "libcuda.so.1", resolves the entry points and
  // runs cuInit(0). Thread safe; never throws; the result is fixed after the first call.
  static const CudaDriver& instance();

  // True when the library loaded, every required symbol resolved and cuInit(0) succeeded.
  bool available() const { return available_; }
  // Why the driver is unavailable ("" when available), e.g.
  // "libcuda.so.1 not found: no NVIDIA driver (dlerror: ...)".
  const std::string& reason() const { return reason_; }
  // cuDriverGetVersion (e.g. 12040 for 12.4); 0 when unavailable.
  int driver_version() const { return driver_version_; }
  // cuDeviceGetCount at load time; 0 when unavailable.
  int device_count() const { return device_count_; }

  // PCI bus id ("0000:1b:00.0") of the calling thread's current CUDA device, "" when there is no
  // driver or no current context (NCCL makes the comm's GPU current before it calls the plugin).
  std::string current_device_bus_id() const;

  CudaDriver(const CudaDriver&) = delete;
  CudaDriver& operator=(const CudaDriver&) = delete;

 private:
  CudaDriver();
  ~CudaDriver() = default;  // the library stays loaded for the process lifetime (as NCCL does)

  bool available_ = false;
  std::string reason_;
  int driver_version_ = 0;
  int device_count_ = 0;
  void* ctx_get_device_ = nullptr;     // cuCtxGetDevice
  void* device_get_bus_id_ = nullptr;  // cuDeviceGetPCIBusId
};

}  // namespace sluice::gpu
