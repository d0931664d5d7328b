// The dma-buf export through gpu/'s CudaDriver, against the stand-in driver
// (tests/gpu/standin_cuda_driver.cc, whose cuMem* chunks are memfds mapped into a reserved range):
// a range over two mapped chunks of one reservation (NCCL's allocator, PyTorch's expandable
// segments) is passed to the driver and exported, although cuMemGetAddressRange reports only one
// chunk; a range with an unmapped hole is refused by the driver, with its reason; a non-C2C GPU
// gets flags 0.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "sluice/gpu/cuda_driver.h"

namespace {

struct StandIn {
  void* lib = nullptr;
  int (*reserve)(uintptr_t*, size_t, size_t, uintptr_t, unsigned long long) = nullptr;
  int (*create)(unsigned long long*, size_t, const void*, unsigned long long) = nullptr;
  int (*map)(uintptr_t, size_t, size_t, unsigned long long, unsigned long long) = nullptr;
  int (*unmap)(uintptr_t, size_t) = nullptr;
  int (*release)(unsigned long long) = nullptr;
  int (*addr_free)(uintptr_t, size_t) = nullptr;
  int (*range)(uintptr_t*, size_t*, uintptr_t) = nullptr;
  unsigned long long (*last_flags)() = nullptr;
  StandIn() {
    lib = dlopen(SLUICE_STANDIN_CUDA, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return;
    reserve = reinterpret_cast<decltype(reserve)>(dlsym(lib, "cuMemAddressReserve"));
    create = reinterpret_cast<decltype(create)>(dlsym(lib, "cuMemCreate"));
    map = reinterpret_cast<decltype(map)>(dlsym(lib, "cuMemMap"));
    unmap = reinterpret_cast<decltype(unmap)>(dlsym(lib, "cuMemUnmap"));
    release = reinterpret_cast<decltype(release)>(dlsym(lib, "cuMemRelease"));
    addr_free = reinterpret_cast<decltype(addr_free)>(dlsym(lib, "cuMemAddressFree"));
    range = reinterpret_cast<decltype(range)>(dlsym(lib, "cuMemGetAddressRange_v2"));
    last_flags =
        reinterpret_cast<decltype(last_flags)>(dlsym(lib, "sluice_standin_last_export_flags"));
  }
};

constexpr size_t kChunk = size_t{2} << 20;

const sluice::gpu::CudaDriver& driver() {
  return sluice::gpu::CudaDriver::instance(SLUICE_STANDIN_CUDA);
}

// A reservation of two chunks; `map_second` false leaves a hole.
struct Vmm {
  StandIn& s;
  uintptr_t base = 0;
  unsigned long long h[2] = {0, 0};
  bool mapped[2] = {false, false};
  Vmm(StandIn& st, bool map_second) : s(st) {
    if (s.reserve(&base, 2 * kChunk, 0, 0, 0) != 0) return;
    for (int i = 0; i < 2; ++i) {
      if (i == 1 && !map_second) break;
      if (s.create(&h[i], kChunk, nullptr, 0) != 0) return;
      mapped[i] = s.map(base + i * kChunk, kChunk, 0, h[i], 0) == 0;
    }
  }
  ~Vmm() {
    for (int i = 0; i < 2; ++i) {
      if (mapped[i]) s.unmap(base + i * kChunk, kChunk);
      if (h[i] != 0) s.release(h[i]);
    }
    if (base != 0) s.addr_free(base, 2 * kChunk);
  }
};

TEST(StandInExport, RangeOverTwoMappedChunksIsExported) {
  static StandIn s;
  ASSERT_NE(s.lib, nullptr) << dlerror();
  ASSERT_NE(s.last_flags, nullptr);
  ASSERT_TRUE(driver().available()) << driver().reason();
  setenv("SLUICE_STANDIN_DMABUF", "1", 1);
  Vmm v(s, true);
  ASSERT_TRUE(v.mapped[0] && v.mapped[1]);
  // The driver reports one chunk as "the allocation": a pre-check on it would refuse the range.
  uintptr_t b = 0;
  size_t n = 0;
  ASSERT_EQ(s.range(&b, &n, v.base + kChunk - 4096), 0);
  EXPECT_EQ(b, v.base);
  EXPECT_EQ(n, kChunk);
  // 1 MiB before the chunk boundary to 1 MiB after it.
  int fd = -1;
  unsigned long long flags = 99;
  const std::string why = driver().export_dmabuf(v.base + kChunk / 2, kChunk,
                                                 "/sys/devices/pci0000:00/x/y", &fd, &flags);
  EXPECT_EQ(why, "");
  EXPECT_GE(fd, 0);
  EXPECT_EQ(flags, 0u) << "a GPU without C2C gets the default mapping";
  EXPECT_EQ(s.last_flags(), 0u);
  if (fd >= 0) close(fd);
  unsetenv("SLUICE_STANDIN_DMABUF");
}

TEST(StandInExport, HoleIsRefusedByTheDriverWithItsReason) {
  static StandIn s;
  ASSERT_NE(s.lib, nullptr) << dlerror();
  ASSERT_TRUE(driver().available()) << driver().reason();
  setenv("SLUICE_STANDIN_DMABUF", "1", 1);
  Vmm v(s, false);
  ASSERT_TRUE(v.mapped[0]);
  int fd = -1;
  const std::string why = driver().export_dmabuf(v.base + kChunk / 2, kChunk, "", &fd);
  EXPECT_EQ(fd, -1);
  EXPECT_NE(why.find("cuMemGetHandleForAddressRange("), std::string::npos) << why;
  EXPECT_NE(why.find("invalid argument"), std::string::npos) << why;
  unsetenv("SLUICE_STANDIN_DMABUF");
  // Without dma-buf support the driver's own answer is reported.
  Vmm w(s, true);
  const std::string no = driver().export_dmabuf(w.base, kChunk, "", &fd);
  EXPECT_NE(no.find("operation not supported"), std::string::npos) << no;
}

}  // namespace
