// The CUDA driver is loaded at run time. Without libcuda.so.1 it must report unavailable with a
// reason; with a driver, the reported values must be plausible. No fake results either way.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include "sluice/gpu/cuda_driver.h"

namespace {

bool libcuda_present() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (h == nullptr) h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h == nullptr) return false;
  dlclose(h);
  return true;
}

TEST(CudaDriver, ReportsAvailabilityWithReason) {
  const auto& drv = sluice::gpu::CudaDriver::instance();
  if (!libcuda_present()) {
    EXPECT_FALSE(drv.available());
    EXPECT_NE(drv.reason().find("libcuda.so.1 not found: no NVIDIA driver"), std::string::npos)
        << drv.reason();
    EXPECT_EQ(drv.device_count(), 0);
    EXPECT_EQ(drv.driver_version(), 0);
    return;
  }
  if (drv.available()) {
    EXPECT_TRUE(drv.reason().empty()) << drv.reason();
    EXPECT_GE(drv.device_count(), 0);
    EXPECT_GT(drv.driver_version(), 0);
  } else {
    // Library present but unusable (e.g. cuInit: no device): still a reason, never silence.
    EXPECT_FALSE(drv.reason().empty());
  }
}

TEST(CudaDriver, InstanceIsStable) {
  const auto& a = sluice::gpu::CudaDriver::instance();
  const auto& b = sluice::gpu::CudaDriver::instance();
  EXPECT_EQ(&a, &b);
  EXPECT_EQ(a.available(), b.available());
  EXPECT_EQ(a.reason(), b.reason());
}

}  // namespace
