// A stand-in CUDA driver for tests: libsluice-test-fake-cuda.so. It exports the driver entry points
// that the plugin (gpu/src/cuda_driver.cc: cuInit, cuDriverGetVersion, cuDeviceGet*,
// cuCtxGetDevice, cuGetErrorString, cuMemGetHandleForAddressRange) and gpu-check resolve (those,
// plus cuDevicePrimaryCtxRetain, cuCtxSetCurrent, cuMemAlloc/Free, cuMemcpyHtoD/DtoH and NCCL's
// allocator: cuMemAddressReserve, cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease,
// cuMemAddressFree, cuMemGetAllocationGranularity, cuMemGetAddressRange), and reports one "GPU"
// whose memory is ordinary host pages (cuMemCreate chunks are memfds mapped into a reserved range).
// With it, the type dispatch, the peermem registration path, the cache keying by memory type and
// the flush run end to end over Soft-RoCE. It is NOT a GPU: nothing measured through it is GPU
// performance, and it is never installed (tests load it by path through SLUICE_CUDA_LIBRARY).
// Knobs (read at each call): SLUICE_STANDIN_DMABUF=1 reports DMA_BUF_SUPPORTED and exports a
// range that is wholly mapped (as a memfd, not a real dma-buf: a NIC refuses to register it);
// SLUICE_STANDIN_C2C=1 reports HOST_NATIVE_ATOMIC_SUPPORTED (a C2C GPU);
// SLUICE_STANDIN_REFUSE_PCIE=1 answers INVALID_VALUE to the PCIe mapping flag.
// sluice_standin_last_export_flags() returns the flags of the last export call.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

namespace {

constexpr int kSuccess = 0;
constexpr int kErrorInvalidValue = 1;
constexpr int kErrorOutOfMemory = 2;
constexpr int kErrorNotInitialized = 3;
constexpr int kErrorInvalidDevice = 101;
constexpr int kErrorNotSupported = 801;

struct Alloc {
  uintptr_t base;
  size_t size;
};
std::mutex g_mu;
std::vector<Alloc> g_allocs;    // cuMemAlloc allocations and cuMemMap mappings
std::vector<Alloc> g_reserved;  // cuMemAddressReserve ranges
bool g_init = false;
unsigned long long g_last_flags = ~0ull;
constexpr size_t kGranularity = size_t{2} << 20;

const Alloc* find(uintptr_t p) {
  for (const Alloc& a : g_allocs)
    if (p >= a.base && p < a.base + a.size) return &a;
  return nullptr;
}

bool env_on(const char* n) {
  const char* v = std::getenv(n);
  return v != nullptr && std::strcmp(v, "1") == 0;
}

// [p, p + n) wholly covered by allocations/mappings (possibly several adjacent ones).
bool covered(uintptr_t p, size_t n) {
  const uintptr_t end = p + n;
  while (p < end) {
    const Alloc* a = find(p);
    if (a == nullptr) return false;
    p = a->base + a->size;
  }
  return true;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int cuInit(unsigned int) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_init = true;
  return kSuccess;
}
__attribute__((visibility("default"))) int cuDriverGetVersion(int* v) {
  *v = 13000;
  return kSuccess;
}
__attribute__((visibility("default"))) int cuDeviceGetCount(int* n) {
  *n = g_init ? 1 : 0;
  return g_init ? kSuccess : kErrorNotInitialized;
}
__attribute__((visibility("default"))) int cuDeviceGet(int* dev, int ordinal) {
  if (ordinal != 0) return kErrorInvalidDevice;
  *dev = 0;
  return kSuccess;
}
__attribute__((visibility("default"))) int cuDeviceGetName(char* name, int len, int dev) {
  if (dev != 0 || len <= 0) return kErrorInvalidDevice;
  std::strncpy(name, "Sluice stand-in CUDA driver (host pages, not a GPU)",
               static_cast<size_t>(len) - 1);
  name[len - 1] = '\0';
  return kSuccess;
}
__attribute__((visibility("default"))) int cuDeviceGetPCIBusId(char* bus, int len, int dev) {
  if (dev != 0 || len <= 0) return kErrorInvalidDevice;
  std::strncpy(bus, "0000:00:00.0", static_cast<size_t>(len) - 1);
  bus[len - 1] = '\0';
  return kSuccess;
}
// 116 GPU_DIRECT_RDMA_SUPPORTED and 102 VMM: yes; 124 DMA_BUF_SUPPORTED: no unless
// SLUICE_STANDIN_DMABUF=1 (host pages are no real dma-buf), so the peer-memory module and
// SLUICE_GDR are what the decision turns on; 86 HOST_NATIVE_ATOMIC (C2C): SLUICE_STANDIN_C2C=1.
__attribute__((visibility("default"))) int cuDeviceGetAttribute(int* v, int attr, int dev) {
  if (dev != 0) return kErrorInvalidDevice;
  *v = attr == 116 || attr == 102 ? 1  // GPU_DIRECT_RDMA, VIRTUAL_MEMORY_MANAGEMENT
       : attr == 124              ? (env_on("SLUICE_STANDIN_DMABUF") ? 1 : 0)
       : attr == 86               ? (env_on("SLUICE_STANDIN_C2C") ? 1 : 0)
                                  : 0;
  return kSuccess;
}
__attribute__((visibility("default"))) int cuCtxGetDevice(int* dev) {
  *dev = 0;
  return kSuccess;
}
__attribute__((visibility("default"))) int cuGetErrorString(int r, const char** s) {
  switch (r) {
    case kSuccess:
      *s = "no error";
      return kSuccess;
    case kErrorNotSupported:
      *s = "operation not supported (stand-in driver: no dma-buf export of host pages)";
      return kSuccess;
    case kErrorInvalidValue:
      *s = "invalid argument";
      return kSuccess;
    default:
      *s = "stand-in driver error";
      return kSuccess;
  }
}
__attribute__((visibility("default"))) int cuMemAlloc_v2(uintptr_t* p, size_t size) {
  if (size == 0) return kErrorInvalidValue;
  void* m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return kErrorOutOfMemory;
  std::lock_guard<std::mutex> lk(g_mu);
  g_allocs.push_back({reinterpret_cast<uintptr_t>(m), size});
  *p = reinterpret_cast<uintptr_t>(m);
  return kSuccess;
}
__attribute__((visibility("default"))) int cuMemFree_v2(uintptr_t p) {
  std::lock_guard<std::mutex> lk(g_mu);
  for (auto it = g_allocs.begin(); it != g_allocs.end(); ++it) {
    if (it->base == p) {
      munmap(reinterpret_cast<void*>(it->base), it->size);
      g_allocs.erase(it);
      return kSuccess;
    }
  }
  return kErrorInvalidValue;
}
__attribute__((visibility("default"))) int cuMemGetAddressRange_v2(uintptr_t* base, size_t* size,
                                                                   uintptr_t p) {
  std::lock_guard<std::mutex> lk(g_mu);
  const Alloc* a = find(p);
  if (a == nullptr) return kErrorInvalidValue;
  if (base != nullptr) *base = a->base;
  if (size != nullptr) *size = a->size;
  return kSuccess;
}
__attribute__((visibility("default"))) int cuDevicePrimaryCtxRetain(void** ctx, int dev) {
  if (dev != 0) return kErrorInvalidDevice;
  static int token;
  *ctx = &token;
  return kSuccess;
}
__attribute__((visibility("default"))) int cuCtxSetCurrent(void*) {
  return kSuccess;
}
__attribute__((visibility("default"))) int cuMemcpyHtoD_v2(uintptr_t dst, const void* src,
                                                           size_t n) {
  std::memcpy(reinterpret_cast<void*>(dst), src, n);
  return kSuccess;
}
__attribute__((visibility("default"))) int cuMemcpyDtoH_v2(void* dst, uintptr_t src, size_t n) {
  std::memcpy(dst, reinterpret_cast<const void*>(src), n);
  return kSuccess;
}
// Without SLUICE_STANDIN_DMABUF=1: host pages cannot become a dma-buf, say so as a driver without
// support would. With it: a range wholly mapped (across chunks too, as the real driver accepts)
// gets a memfd standing for the dma-buf.
__attribute__((visibility("default"))) int cuMemGetHandleForAddressRange(void* handle, uintptr_t p,
                                                                         size_t n, int type,
                                                                         unsigned long long flags) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_last_flags = flags;
  if (!env_on("SLUICE_STANDIN_DMABUF")) return kErrorNotSupported;
  if (type != 1 || n == 0 || handle == nullptr) return kErrorInvalidValue;
  if ((flags & 1) != 0 && env_on("SLUICE_STANDIN_REFUSE_PCIE")) return kErrorInvalidValue;
  if (!covered(p, n)) return kErrorInvalidValue;
  const int fd = memfd_create("sluice-standin-dmabuf", MFD_CLOEXEC);
  if (fd < 0) return kErrorOutOfMemory;
  *static_cast<int*>(handle) = fd;
  return kSuccess;
}
__attribute__((visibility("default"))) unsigned long long sluice_standin_last_export_flags() {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_last_flags;
}

// NCCL's allocator (cuMem*): a reservation of PROT_NONE pages; chunks are memfds mapped into it.
__attribute__((visibility("default"))) int cuMemGetAllocationGranularity(size_t* g, const void*,
                                                                         int) {
  *g = kGranularity;
  return kSuccess;
}
__attribute__((visibility("default"))) int cuMemAddressReserve(uintptr_t* p, size_t size, size_t,
                                                               uintptr_t, unsigned long long) {
  if (size == 0 || size % kGranularity != 0) return kErrorInvalidValue;
  void* m = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return kErrorOutOfMemory;
  std::lock_guard<std::mutex> lk(g_mu);
  g_reserved.push_back({reinterpret_cast<uintptr_t>(m), size});
  *p = reinterpret_cast<uintptr_t>(m);
  return kSuccess;
}
__attribute__((visibility("default"))) int cuMemAddressFree(uintptr_t p, size_t size) {
  std::lock_guard<std::mutex> lk(g_mu);
  for (auto it = g_reserved.begin(); it != g_reserved.end(); ++it) {
    if (it->base == p && it->size == size) {
      munmap(reinterpret_cast<void*>(p), size);
      g_reserved.erase(it);
      return kSuccess;
    }
  }
  return kErrorInvalidValue;
}
__attribute__((visibility("default"))) int cuMemCreate(unsigned long long* handle, size_t size,
                                                       const void*, unsigned long long) {
  if (size == 0 || size % kGranularity != 0) return kErrorInvalidValue;
  const int fd = memfd_create("sluice-standin-chunk", MFD_CLOEXEC);
  if (fd < 0) return kErrorOutOfMemory;
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    close(fd);
    return kErrorOutOfMemory;
  }
  *handle = static_cast<unsigned long long>(fd) + 1;  // 0 is never a handle
  return kSuccess;
}
__attribute__((visibility("default"))) int cuMemRelease(unsigned long long handle) {
  if (handle == 0) return kErrorInvalidValue;
  close(static_cast<int>(handle - 1));  // a mapping keeps its own reference to the memfd
  return kSuccess;
}
__attribute__((visibility("default"))) int cuMemMap(uintptr_t p, size_t size, size_t offset,
                                                    unsigned long long handle, unsigned long long) {
  if (handle == 0 || size == 0) return kErrorInvalidValue;
  void* m = mmap(reinterpret_cast<void*>(p), size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                 static_cast<int>(handle - 1), static_cast<off_t>(offset));
  if (m == MAP_FAILED) return kErrorInvalidValue;
  std::lock_guard<std::mutex> lk(g_mu);
  g_allocs.push_back({p, size});  // cuMemGetAddressRange reports this one mapping, as CUDA does
  return kSuccess;
}
__attribute__((visibility("default"))) int cuMemSetAccess(uintptr_t p, size_t size, const void*,
                                                          size_t) {
  std::lock_guard<std::mutex> lk(g_mu);
  return covered(p, size) ? kSuccess : kErrorInvalidValue;
}
__attribute__((visibility("default"))) int cuMemUnmap(uintptr_t p, size_t size) {
  std::lock_guard<std::mutex> lk(g_mu);
  for (auto it = g_allocs.begin(); it != g_allocs.end(); ++it) {
    if (it->base == p && it->size == size) {
      mmap(reinterpret_cast<void*>(p), size, PROT_NONE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
      g_allocs.erase(it);
      return kSuccess;
    }
  }
  return kErrorInvalidValue;
}

}  // extern "C"
