// gpu-check runs its loopback on the one plugin device nearest the GPU (tests/gpu/nearest_nic.h).
#include <gtest/gtest.h>

#include "../gpu/nearest_nic.h"

namespace {

using gpucheck::nearest_nic;

TEST(GpuCheckNearest, PicksTheNicOnTheGpusSwitch) {
  const std::string gpu =
      "/sys/devices/pci0000:16/0000:16:01.0/0000:17:00.0/0000:18:02.0/0000:1b:00.0";
  const std::vector<std::string> nics = {
      "/sys/devices/pci0000:3a/0000:3a:01.0/0000:3b:00.0",  // other host bridge
      "/sys/devices/pci0000:16/0000:16:02.0/0000:20:00.0",  // same host bridge
      "/sys/devices/pci0000:16/0000:16:01.0/0000:17:00.0/0000:18:03.0/0000:1c:00.0",  // same switch
      "/sys/devices/pci0000:16/0000:16:01.0/0000:17:00.0/0000:18:03.0/0000:1c:00.1",  // its twin
  };
  EXPECT_EQ(nearest_nic(gpu, nics), 2) << "the same switch, lowest index among equals";
  EXPECT_EQ(nearest_nic(gpu, {nics[0], nics[1]}), 1) << "the same host bridge beats another";
}

TEST(GpuCheckNearest, UnknownPathsFallBackToDeviceZero) {
  EXPECT_EQ(nearest_nic("", {"/sys/devices/pci0000:16/0000:16:02.0", "x"}), 0);
  EXPECT_EQ(nearest_nic("/sys/devices/pci0000:16/0000:16:02.0/0000:20:00.0", {"", ""}), 0);
  EXPECT_EQ(nearest_nic("/sys/devices/pci0000:16/0000:16:02.0/0000:20:00.0",
                        {"", "/sys/devices/pci0000:16/0000:16:02.0/0000:21:00.0"}),
            1);
  EXPECT_EQ(nearest_nic("/a", {}), 0);
}

}  // namespace
