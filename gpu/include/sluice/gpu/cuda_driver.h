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
    bool c2c = false;        // CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED: a C2C link to the
                             // CPU (GH200/GB200), where a dma-buf may map over C2C or over PCIe
    std::string attr_error;  // an attribute query that failed, "" when none did
  };
  const std::vector<Gpu>& gpus() const { return gpus_; }
  // The library that was loaded (or tried).
  const std::string& library() const { return library_; }
  // cuMemGetHandleForAddressRange resolved (driver 11.7 and later).
  bool has_dmabuf_export() const { return get_handle_ != nullptr; }

  // Exports [addr, addr + len) as a dma-buf fd (caller closes it). The range may span several
  // mapped chunks of one cuMemCreate/cuMemMap reservation (PyTorch's expandable segments): the
  // driver decides, no pre-check here. `nic_pci_path` is the sysfs path of the NIC that will
  // register it: on a C2C GPU whose NIC sits on the GPU's PCIe tree the export asks for the PCIe
  // mapping (CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE), as NCCL does; a driver that refuses
  // the flag is asked again without it. `flags_used` (may be null) gets the flags of the call that
  // succeeded. Returns "" on success, else the reason.
  std::string export_dmabuf(uintptr_t addr, size_t len, const std::string& nic_pci_path, int* fd,
                            unsigned long long* flags_used = nullptr) const;

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
  void* get_error_string_ = nullptr;  // cuGetErrorString
  void* get_handle_ = nullptr;        // cuMemGetHandleForAddressRange
  std::string reason_;
  int driver_version_ = 0;
  int device_count_ = 0;
  void* ctx_get_device_ = nullptr;     // cuCtxGetDevice
  void* device_get_bus_id_ = nullptr;  // cuDeviceGetPCIBusId
};

// CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE (cuda.h, CUDA 12.8 and later).
inline constexpr unsigned long long kDmabufMappingPcie = 0x1;

// The flags for cuMemGetHandleForAddressRange, NCCL's rule (ncclTopoCheckGdr's ncclTopoGdrModePci):
// the PCIe mapping on a C2C GPU (driver 12.8+) whose NIC shares a PCIe root port with it, else 0
// (a NIC that reaches the GPU through the CPU uses the default C2C mapping). Paths are sysfs
// device paths (/sys/devices/pci0000:00/0000:00:01.0/...); an empty one means unknown (0).
unsigned long long dmabuf_export_flags(bool gpu_c2c, int driver_version,
                                       const std::string& gpu_pci_path,
                                       const std::string& nic_pci_path);

// Whether two sysfs PCI device paths share a root port (the same PCIe tree below the host bridge).
bool share_pcie_root_port(const std::string& a, const std::string& b);

}  // namespace sluice::gpu
