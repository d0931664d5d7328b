// Shared by rdma-labelled tests: which RDMA devices to use, and skip-or-fail when there are none.
// Without a device a test skips with the reason, unless SLUICE_REQUIRE_RDMA=1 (CI), where it fails.
#pragma once

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace sluice::rdmatest {

// Names of devices with at least one ACTIVE port, in ibv_get_device_list order.
inline std::vector<std::string> active_rdma_devices() {
  std::vector<std::string> out;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return out;
  for (int i = 0; i < n; ++i) {
    ibv_context* ctx = ibv_open_device(list[i]);
    if (ctx == nullptr) continue;
    ibv_device_attr da{};
    if (ibv_query_device(ctx, &da) == 0) {
      for (int p = 1; p <= da.phys_port_cnt; ++p) {
        ibv_port_attr pa{};
        if (ibv_query_port(ctx, p, &pa) == 0 && pa.state == IBV_PORT_ACTIVE) {
          out.emplace_back(ibv_get_device_name(list[i]));
          break;
        }
      }
    }
    ibv_close_device(ctx);
  }
  ibv_free_device_list(list);
  return out;
}

inline bool rdma_required() {
  const char* v = std::getenv("SLUICE_REQUIRE_RDMA");
  return v != nullptr && std::string(v) == "1";
}

}  // namespace sluice::rdmatest

// Use at the top of a test body: skips (or fails under SLUICE_REQUIRE_RDMA=1) without devices.
#define SLUICE_REQUIRE_DEVICES(devs, min_count)                                                    \
  do {                                                                                             \
    if ((devs).size() < static_cast<size_t>(min_count)) {                                          \
      if (::sluice::rdmatest::rdma_required()) {                                                   \
        FAIL() << "SLUICE_REQUIRE_RDMA=1 but only " << (devs).size()                               \
               << " active RDMA device(s) found; run inside scripts/rdma-bed";                     \
      }                                                                                            \
      GTEST_SKIP() << "needs " << (min_count) << " active RDMA device(s), found " << (devs).size() \
                   << " (no RDMA NIC or Soft-RoCE here; use scripts/rdma-bed)";                    \
    }                                                                                              \
  } while (0)
