// The process-wide test bed of the plugin's rdma tests: one v12 ctx, the devices to use, and the
// skip-or-fail rule. Shared by plugin_rdma_test.cc and plugin_rdma_stress_test.cc (one binary);
// everything is inline so both translation units see one instance.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
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

// SLUICE_TEST_FUSE runs the same tests over a fused device (docs/fusion.md): after devices(), the
// bed's Net fuses the test pair's two ports with makeVDevice({a, b}) and
//   fused: dev_a and dev_b are both the fused device (every connection fused -> fused);
//   send:  dev_a is the fused device, dev_b the physical b (fused -> one port);
//   recv:  dev_b is the fused device, dev_a the physical a (one port -> fused).
// Unset or empty: the physical ports, as always. Any other value, a loopback pair, or a refused
// makeVDevice fails the bed (lib_failed), never skips.
enum class Fuse { kNone, kFused, kSend, kRecv };

struct Bed {
  bool ready = false;
  bool lib_failed = false;
  std::string reason;
  int ndev = 0;   // the bed's Net's devices (the fused one included)
  int nphys = 0;  // devices() before any fusion: the physical devices, as a fresh Net lists them
  int dev_a = 0;  // the test pair's first port (rdma_env.h: SLUICE_TEST_DEVICES, else the first
  int dev_b = 0;  // two active ports); dev_b == dev_a for loopback; either may be fused (above)
  Fuse fuse = Fuse::kNone;
  int phys_a = 0, phys_b = 0;  // the test pair's physical ports (== dev_a, dev_b without fusion)
  int vdev = -1;               // the fused device's index on the bed's Net, -1 without fusion
  std::unique_ptr<Net> net;
  std::vector<Props> props;  // of every device of the bed's Net (the fused one included)
};

// SLUICE_TEST_FUSE parsed; false (and *error) for a value that is none of the above.
inline bool parse_fuse(Fuse* out, std::string* error) {
  const char* v = std::getenv("SLUICE_TEST_FUSE");
  const std::string s = v != nullptr ? v : "";
  if (s.empty()) {
    *out = Fuse::kNone;
  } else if (s == "fused") {
    *out = Fuse::kFused;
  } else if (s == "send") {
    *out = Fuse::kSend;
  } else if (s == "recv") {
    *out = Fuse::kRecv;
  } else {
    *error = "SLUICE_TEST_FUSE=" + s + ": expected fused, send or recv (or unset)";
    return false;
  }
  return true;
}

inline const char* fuse_name(Fuse f) {
  switch (f) {
    case Fuse::kFused:
      return "fused";
    case Fuse::kSend:
      return "send";
    case Fuse::kRecv:
      return "recv";
    default:
      return "unset";
  }
}

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
    x.nphys = x.ndev;
    x.phys_a = x.dev_a;
    x.phys_b = x.dev_b;
    std::string fuse_error;
    if (!parse_fuse(&x.fuse, &fuse_error)) {
      x.reason = fuse_error;
      x.lib_failed = true;
      return x;
    }
    std::string fuse_text = "SLUICE_TEST_FUSE unset: physical ports";
    if (x.fuse != Fuse::kNone) {
      const std::string what = std::string("SLUICE_TEST_FUSE=") + fuse_name(x.fuse);
      if (x.phys_a == x.phys_b) {
        x.reason = what + ": the test pair " + pair.describe() + " is one port; fusion needs two";
        x.lib_failed = true;
        return x;
      }
      const std::string members =
          "makeVDevice({" + std::to_string(x.phys_a) + ", " + std::to_string(x.phys_b) + "})";
      if (ncclResult_t r = x.net->make_vdevice({x.phys_a, x.phys_b}, &x.vdev); r != ncclSuccess) {
        x.reason = what + ": " + members + " returned " + std::to_string(r) + ": " + last_warn();
        x.lib_failed = true;
        return x;
      }
      if (x.net->devices(&x.ndev) != ncclSuccess || x.vdev < 0 || x.vdev >= x.ndev) {
        x.reason = what + ": " + members + " gave device " + std::to_string(x.vdev) +
                   ", devices() now " + std::to_string(x.ndev);
        x.lib_failed = true;
        return x;
      }
      x.props.resize(x.ndev);
      if (x.net->properties(x.vdev, &x.props[x.vdev]) != ncclSuccess ||
          x.props[x.vdev].vdevs != std::vector<int>{x.phys_a, x.phys_b}) {
        x.reason = what + ": getProperties of the fused device " + std::to_string(x.vdev) +
                   " failed or does not list the members " + std::to_string(x.phys_a) + ", " +
                   std::to_string(x.phys_b);
        x.lib_failed = true;
        return x;
      }
      if (x.fuse != Fuse::kRecv) x.dev_a = x.vdev;
      if (x.fuse != Fuse::kSend) x.dev_b = x.vdev;
      fuse_text = what + ": device " + std::to_string(x.vdev) + " (" + x.props[x.vdev].name +
                  ") = " + members + "; dev_a " + (x.dev_a == x.vdev ? "fused" : "physical") +
                  ", dev_b " + (x.dev_b == x.vdev ? "fused" : "physical");
    }
    std::fprintf(stderr, "bed: %d device(s); test pair %s; dev_a %d (%s), dev_b %d (%s); %s\n",
                 x.ndev, pair.describe().c_str(), x.dev_a, x.props[x.dev_a].name.c_str(), x.dev_b,
                 x.props[x.dev_b].name.c_str(), fuse_text.c_str());
    x.ready = true;
    return x;
  }();
  return b;
}

// The test pair (send device, receive device) on a Net other than the bed's (a test's own ctx or
// table version; each v11/v12 ctx and the v9/v10 process engine has its own device list): the
// physical ports, or the fusion SLUICE_TEST_FUSE asked for, made on that Net with the same
// members. On the bed's own Net: dev_a, dev_b.
inline ::testing::AssertionResult bed_pair(Net& n, int* send_dev, int* recv_dev) {
  const Bed& b = bed();
  if (&n == b.net.get() || b.fuse == Fuse::kNone) {
    *send_dev = b.dev_a;
    *recv_dev = b.dev_b;
    return ::testing::AssertionSuccess();
  }
  if (n.version() < 9) {
    return ::testing::AssertionFailure() << "SLUICE_TEST_FUSE=" << fuse_name(b.fuse) << ": the v"
                                         << n.version() << " table has no makeVDevice";
  }
  int v = -1;
  if (ncclResult_t r = n.make_vdevice({b.phys_a, b.phys_b}, &v); r != ncclSuccess) {
    return ::testing::AssertionFailure()
           << "v" << n.version() << ": makeVDevice({" << b.phys_a << ", " << b.phys_b
           << "}) returned " << r << ": " << last_warn();
  }
  *send_dev = b.fuse != Fuse::kRecv ? v : b.phys_a;
  *recv_dev = b.fuse != Fuse::kSend ? v : b.phys_b;
  return ::testing::AssertionSuccess();
}

// open_conn over bed_pair(n): the test pair, dev_a -> dev_b, on any Net.
inline ::testing::AssertionResult open_bed_conn(Net& n, Conn* c) {
  int s = -1, r = -1;
  if (auto ok = bed_pair(n, &s, &r); !ok) return ok;
  return open_conn(n, s, r, c);
}

// A port counter of one verbs device's port, by the plugin's name ("rxe0", or "mlx5_0:1" ->
// mlx5_0): the first of `files` (under the port's sysfs folder) that reads; -1 if none. ib_core
// caches hw_counters for their `lifespan` (10 ms by default), so the caller pauses past it first
// (bed_sent_packets does) or a short run reads 0 packets.
inline long long device_port_counter(std::string name, int port,
                                     std::initializer_list<const char*> files) {
  name = name.substr(0, name.find(':'));
  const std::string base = "/sys/class/infiniband/" + name + "/ports/" + std::to_string(port) + "/";
  for (const char* f : files) {
    long long v = -1;
    std::ifstream in(base + f);
    if (in >> v) return v;
  }
  return -1;
}
// rxe's sent_pkts (or a NIC's port_xmit_packets).
inline long long device_sent_packets(const std::string& name, int port = 1) {
  return device_port_counter(name, port, {"hw_counters/sent_pkts", "counters/port_xmit_packets"});
}
// The packets a device's port received (rxe: hw_counters/rcvd_pkts).
inline long long device_rcvd_packets(const std::string& name, int port = 1) {
  return device_port_counter(name, port, {"hw_counters/rcvd_pkts", "counters/port_rcv_packets"});
}

// The weight of `member` in the INFO line makeVDevice logs ("fused device [2] rxe0+rxe1: ...;
// weights rxe0=10 (50%: ...), rxe1=10 (50%: ...); ..."); -1 if no kept line has it.
inline long weight_logged(const std::vector<std::string>& info, const std::string& fused,
                          const std::string& member) {
  for (auto it = info.rbegin(); it != info.rend(); ++it) {  // the latest first
    const std::string& line = *it;
    if (line.find("fused device [") == std::string::npos ||
        line.find("] " + fused + ":") == std::string::npos)
      continue;
    const size_t w = line.find("; weights ");
    if (w == std::string::npos) continue;
    const size_t at = line.find(member + "=", w);
    if (at == std::string::npos) continue;
    char* end = nullptr;
    const char* digits = line.c_str() + at + member.size() + 1;
    const long v = std::strtol(digits, &end, 10);
    if (end != digits && *end == ' ') return v;
  }
  return -1;
}

// The packets sent by the bed's physical devices: every member of dev_a and dev_b, each once (the
// two ports, or one for loopback; a fused device counts its members), read after a 30 ms pause
// past the counters' cache lifespan; -1 if not readable.
inline long long bed_sent_packets() {
  usleep(30 * 1000);
  const Bed& b = bed();
  std::vector<int> phys;
  for (int d : {b.dev_a, b.dev_b}) {
    for (int m : b.props[d].vdevs) {
      if (std::find(phys.begin(), phys.end(), m) == phys.end()) phys.push_back(m);
    }
  }
  long long total = 0;
  for (int m : phys) {
    const long long v = device_sent_packets(b.props[m].name);
    if (v < 0) return -1;
    total += v;
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
