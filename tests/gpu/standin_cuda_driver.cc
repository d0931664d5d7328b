// A stand-in CUDA driver for tests: libsluice-test-fake-cuda.so. It exports the few driver entry
// points Sluice resolves (cuInit, cuDeviceGet*, cuMemAlloc/Free, cuMemGetAddressRange,
// cuMemGetHandleForAddressRange, cuPointerGetAttribute, ...) and reports one "GPU" whose memory is
// ordinary host pages. With it, the type dispatch, the peermem registration path, the cache keying
// by memory type and the flush run end to end over Soft-RoCE. It is NOT a GPU: nothing measured
// through it is GPU performance, and it is never installed (tests load it by path through
// SLUICE_CUDA_LIBRARY).
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
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
std::vector<Alloc> g_allocs;
bool g_init = false;

const Alloc* find(uintptr_t p) {
  for (const Alloc& a : g_allocs)
    if (p >= a.base && p < a.base + a.size) return &a;
  return nullptr;
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
// 116 GPU_DIRECT_RDMA_SUPPORTED: yes; 124 DMA_BUF_SUPPORTED: no (host pages cannot be exported
// as a dma-buf), so the peer-memory module and SLUICE_GDR are what the decision turns on.
__attribute__((visibility("default"))) int cuDeviceGetAttribute(int* v, int attr, int dev) {
  if (dev != 0) return kErrorInvalidDevice;
  *v = attr == 116 ? 1 : 0;
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
// Host pages cannot become a dma-buf here: say so, as a driver without support would.
__attribute__((visibility("default"))) int cuMemGetHandleForAddressRange(void*, uintptr_t, size_t,
                                                                         int, unsigned long long) {
  return kErrorNotSupported;
}
// CU_POINTER_ATTRIBUTE_MEMORY_TYPE (2) -> CU_MEMORYTYPE_DEVICE (2) for our allocations.
__attribute__((visibility("default"))) int cuPointerGetAttribute(void* data, int attr,
                                                                 uintptr_t p) {
  if (attr != 2) return kErrorInvalidValue;
  std::lock_guard<std::mutex> lk(g_mu);
  if (find(p) == nullptr) return kErrorInvalidValue;
  *static_cast<unsigned int*>(data) = 2;
  return kSuccess;
}

}  // extern "C"
