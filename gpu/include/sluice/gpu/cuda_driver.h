// The CUDA driver, loaded at run time. Sluice never links libcuda: a machine without an NVIDIA
// driver must still load the plugin and run host-memory transfers. gdr.h builds the GPUDirect facts
// and the dma-buf export that core uses on top of the entry points resolved here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sluice::gpu {

class CudaDriver {
 public:
  // Process-wide instance: the first call dlopens `library` ("libcuda.so.1" when NULL; the plugin
  // passes SLUICE_CUDA_LIBRARY), resolves the entry points and runs cuInit(0). Later calls return
  // the same instance whatever they pass. Thread safe; never throws.
  static const CudaDriver& instance(const char* library = nullptr);

  // One GPU as the driver describes it.
  struct Gpu {
    std::string name;
    std::string bus_id;
    bool rdma = false;       // CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED
    bool dmabuf = false;     // CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED
    std::string attr_error;  // an attribute query that failed, "" when none did
  };
  const std::vector<Gpu>& gpus() const { return gpus_; }
  // The library that was loaded (or tried).
  const std::string& library() const { return library_; }
  // cuMemGetHandleForAddressRange resolved (driver 11.7 and later).
  bool has_dmabuf_export() const { return get_handle_ != nullptr; }

  // Exports [addr, addr + len) as a dma-buf fd (caller closes it). The range must lie inside one
  // allocation (checked with cuMemGetAddressRange). Returns "" on success, else the reason.
  std::string export_dmabuf(uintptr_t addr, size_t len, int* fd) const;

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
  ~CudaDriver() = default;  // the library stays loaded for the process lifetime (as NCCL does)

  explicit CudaDriver(const char* library);
  std::string error_text(int result) const;

  bool available_ = false;
  std::string library_;
  std::vector<Gpu> gpus_;
  void* get_error_string_ = nullptr;   // cuGetErrorString
  void* get_handle_ = nullptr;         // cuMemGetHandleForAddressRange
  void* get_address_range_ = nullptr;  // cuMemGetAddressRange_v2
  std::string reason_;
  int driver_version_ = 0;
  int device_count_ = 0;
  void* ctx_get_device_ = nullptr;     // cuCtxGetDevice
  void* device_get_bus_id_ = nullptr;  // cuDeviceGetPCIBusId
};

}  // namespace sluice::gpu
