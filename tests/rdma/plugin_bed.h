// The process-wide test bed of the plugin's rdma tests: one v12 ctx, the devices to use, and the
// skip-or-fail rule. Shared by plugin_rdma_test.cc and plugin_rdma_stress_test.cc (one binary);
// everything is inline so both translation units see one instance.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "net_harness.h"

namespace nettest {

inline constexpr size_t kSizes[] = {
    0, 1, 7, 4095, 4096, 65537, size_t{1} << 20, (size_t{8} << 20) + 3};
inline constexpr size_t kMaxSize = (size_t{8} << 20) + 3;
inline constexpr size_t kGuard = 64;
inline constexpr uint8_t kGuardByte = 0xEE;

// ---- The bed: one v12 ctx for the whole process
// --------------------------------------------------

struct Bed {
  bool ready = false;
  bool lib_failed = false;
  std::string reason;
  int ndev = 0;
  int dev_a = 0;  // the test pair's first port (rdma_env.h: SLUICE_TEST_DEVICES, else the first
  int dev_b = 0;  // two active ports); dev_b == dev_a for loopback
  std::unique_ptr<Net> net;
  std::vector<Props> props;
};

inline Bed& bed() {
  static Bed b = [] {
    Bed x;
    const Lib& lib = Lib::get();
    if (!lib.error.empty()) {
      x.lib_failed = true;
      x.reason = lib.error;
      return x;
    }
    x.net = std::make_unique<Net>(12);
    ncclResult_t r = x.net->init(0xbed);
    if (r != ncclSuccess) {
      x.reason = "no usable RDMA device: plugin init returned " + std::to_string(r) +
                 (access("/sys/class/infiniband", F_OK) != 0
                      ? " (/sys/class/infiniband does not exist; run through scripts/rdma-bed)"
                      : " (see the WARN above)");
      x.net.reset();
      return x;
    }
    if (x.net->devices(&x.ndev) != ncclSuccess || x.ndev <= 0) {
      x.reason = "devices() failed after a successful init";
      x.lib_failed = true;  // a plugin bug, not a missing device
      return x;
    }
    x.props.resize(x.ndev);
    for (int d = 0; d < x.ndev; ++d) x.net->properties(d, &x.props[d]);
    // The plugin's indices of the test pair's ports (it names them "dev" or "dev:port").
    auto pair = sluice::rdmatest::test_pair();
    if (!pair.error.empty()) {
      x.reason = pair.error;
      x.lib_failed = true;  // a wrong SLUICE_TEST_DEVICES fails, never skips
      return x;
    }
    auto index_of = [&](const sluice::rdmatest::TestPort& p) {
      for (int d = 0; d < x.ndev; ++d)
        if (p.matches(x.props[d].name)) return d;
      return -1;
    };
    x.dev_a = pair.ports.empty() ? -1 : index_of(pair.a());
    x.dev_b = pair.ports.empty() ? -1 : index_of(pair.b());
    if (x.dev_a < 0 || x.dev_b < 0) {
      if (pair.from_env) {
        x.reason = "SLUICE_TEST_DEVICES: the plugin does not list " + pair.describe() +
                   " (excluded by NCCL_IB_HCA?)";
        x.lib_failed = true;
        return x;
      }
      x.dev_a = 0;  // e.g. NCCL_IB_HCA hides the first active ports: use what the plugin lists
      x.dev_b = x.ndev > 1 ? 1 : 0;
    }
    std::fprintf(stderr, "bed: %d device(s); test pair %s; dev_a %d (%s), dev_b %d (%s)\n", x.ndev,
                 pair.describe().c_str(), x.dev_a, x.props[x.dev_a].name.c_str(), x.dev_b,
                 x.props[x.dev_b].name.c_str());
    x.ready = true;
    return x;
  }();
  return b;
}

// rxe's sent_pkts (or a NIC's port_xmit_packets) of one verbs device's port ("rxe0" or "rxe0:1");
// -1 if not readable. ib_core caches hw_counters for their `lifespan` (10 ms by default), so the
// caller pauses past it first (bed_sent_packets does) or a short run reads 0 packets.
inline long long device_sent_packets(std::string name, int port = 1) {
  name = name.substr(0, name.find(':'));
  const std::string base = "/sys/class/infiniband/" + name + "/ports/" + std::to_string(port) + "/";
  for (const char* f : {"hw_counters/sent_pkts", "counters/port_xmit_packets"}) {
    long long v = -1;
    std::ifstream in(base + f);
    if (in >> v) return v;
  }
  return -1;
}

// The packets sent by the bed's devices (both of them, once when they are one), read after a
// 30 ms pause past the counters' cache lifespan; -1 if not readable.
inline long long bed_sent_packets() {
  usleep(30 * 1000);
  long long total = 0;
  const Bed& b = bed();
  for (int d : {b.dev_a, b.dev_b}) {
    const long long v = device_sent_packets(b.props[d].name);
    if (v < 0) return -1;
    total += v;
    if (b.dev_b == b.dev_a) break;
  }
  return total;
}

inline bool require_rdma() {
  return sluice::rdmatest::rdma_required();
}

#define REQUIRE_BED()                                           \
  do {                                                          \
    Bed& b_ = bed();                                            \
    if (!b_.ready) {                                            \
      if (b_.lib_failed || require_rdma()) FAIL() << b_.reason; \
      GTEST_SKIP() << b_.reason;                                \
    }                                                           \
  } while (0)

inline Net& net() {
  return *bed().net;
}

class BedEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    Bed& b = bed();
    if (b.net) {
      EXPECT_EQ(b.net->finalize(), ncclSuccess);
    }
  }
};

}  // namespace nettest
