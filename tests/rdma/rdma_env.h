// Shared by rdma-labelled tests: which RDMA ports to use, skip-or-fail when there are none, and the
// marking of WARN lines that a negative test provokes on purpose.
//
// The device pair: SLUICE_TEST_DEVICES=dev[:port][,dev[:port]] (e.g. mlx5_0:1,mlx5_1:1; the port
// defaults to 1; one entry means loopback on that port) when set, else the first two ACTIVE ports
// found (device names sorted, ports ascending), else one ACTIVE port twice (loopback). No
// test names a device: the bed's Soft-RoCE devices and a cluster's mlx5_N are treated alike.
// tests/rdma/test_devices.sh resolves the same pair for the shell-based tests.
//
// Without a device a test skips with the reason, unless SLUICE_REQUIRE_RDMA=1 (CI), where it fails.
// A SLUICE_TEST_DEVICES that names a missing or inactive port always fails.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace sluice::rdmatest {

// The first line of a (sysfs) file without its trailing newline and spaces; "" if unreadable.
inline std::string read_line(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return {};
  char buf[256] = {};
  if (std::fgets(buf, sizeof buf, f) == nullptr) buf[0] = '\0';
  std::fclose(f);
  std::string s = buf;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

inline constexpr const char kTestDevicesEnv[] = "SLUICE_TEST_DEVICES";

struct TestPort {
  std::string dev;
  int port = 1;
  ibv_port_attr attr{};  // as queried when the pair was resolved
  bool roce() const { return attr.link_layer == IBV_LINK_LAYER_ETHERNET; }
  bool infiniband() const { return attr.link_layer == IBV_LINK_LAYER_INFINIBAND; }
  std::string label() const { return dev + ":" + std::to_string(port); }
  // The name the plugin (and core) give this port: "dev" or, on a multi-port device, "dev:port".
  bool matches(const std::string& plugin_name) const {
    return plugin_name == dev || plugin_name == label();
  }
};

// Every ACTIVE port, device names sorted (as test_devices.sh lists sysfs), ports ascending.
inline std::vector<TestPort> active_rdma_ports() {
  std::vector<TestPort> out;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return out;
  for (int i = 0; i < n; ++i) {
    ibv_context* ctx = ibv_open_device(list[i]);
    if (ctx == nullptr) continue;
    ibv_device_attr da{};
    if (ibv_query_device(ctx, &da) == 0) {
      for (int p = 1; p <= da.phys_port_cnt; ++p) {
        TestPort tp;
        if (ibv_query_port(ctx, static_cast<uint8_t>(p), &tp.attr) == 0 &&
            tp.attr.state == IBV_PORT_ACTIVE) {
          tp.dev = ibv_get_device_name(list[i]);
          tp.port = p;
          out.push_back(tp);
        }
      }
    }
    ibv_close_device(ctx);
  }
  ibv_free_device_list(list);
  std::stable_sort(out.begin(), out.end(),
                   [](const TestPort& x, const TestPort& y) { return x.dev < y.dev; });
  return out;
}

// Names of devices with at least one ACTIVE port, sorted.
inline std::vector<std::string> active_rdma_devices() {
  std::vector<std::string> out;
  for (const auto& p : active_rdma_ports())
    if (out.empty() || out.back() != p.dev) out.push_back(p.dev);
  return out;
}

struct TestPair {
  std::vector<TestPort> ports;  // [a, b]; b == a for loopback; empty when none
  std::string error;            // set when SLUICE_TEST_DEVICES cannot be honoured
  bool from_env = false;
  bool loopback() const { return ports.size() == 2 && ports[0].label() == ports[1].label(); }
  const TestPort& a() const { return ports.at(0); }
  const TestPort& b() const { return ports.at(1); }
  std::string describe() const {
    if (ports.empty()) return "none";
    return a().label() + " -> " + b().label() + (from_env ? " (SLUICE_TEST_DEVICES)" : "") +
           (loopback() ? " (loopback)" : "");
  }
};

// The pair of ports the tests use (see the top of this file).
inline TestPair test_pair() {
  TestPair tp;
  std::vector<TestPort> active = active_rdma_ports();
  const char* env = std::getenv(kTestDevicesEnv);
  if (env == nullptr || *env == '\0') {
    if (active.empty()) return tp;
    tp.ports = {active[0], active.size() > 1 ? active[1] : active[0]};
    return tp;
  }
  tp.from_env = true;
  std::string spec = env;
  std::vector<std::string> items;
  for (size_t start = 0;;) {
    size_t comma = spec.find(',', start);
    items.push_back(spec.substr(start, comma == std::string::npos ? comma : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (items.size() > 2) {
    tp.error = std::string(kTestDevicesEnv) + "=" + spec + ": at most two dev[:port] entries";
    return tp;
  }
  for (const std::string& item : items) {
    TestPort want;
    size_t colon = item.rfind(':');
    want.dev = item.substr(0, colon);
    if (colon != std::string::npos) {
      char* end = nullptr;
      long p = std::strtol(item.c_str() + colon + 1, &end, 10);
      if (end == item.c_str() + colon + 1 || *end != '\0' || p < 1 || p > 255) {
        tp.error = std::string(kTestDevicesEnv) + "=" + spec + ": bad port in '" + item + "'";
        return tp;
      }
      want.port = static_cast<int>(p);
    }
    bool found = false;
    for (const auto& a : active) {
      if (a.dev == want.dev && a.port == want.port) {
        tp.ports.push_back(a);
        found = true;
      }
    }
    if (!found) {
      std::string have;
      for (const auto& a : active) have += (have.empty() ? "" : " ") + a.label();
      tp.error = std::string(kTestDevicesEnv) + "=" + spec + ": " + want.label() +
                 " is not an ACTIVE RDMA port here (active: " + (have.empty() ? "none" : have) +
                 ")";
      return tp;
    }
  }
  if (tp.ports.size() == 1) tp.ports.push_back(tp.ports[0]);
  return tp;
}

inline bool rdma_required() {
  const char* v = std::getenv("SLUICE_REQUIRE_RDMA");
  return v != nullptr && std::string(v) == "1";
}

// ---- Expected WARN lines
// A negative test wraps the calls that must WARN in an ExpectWarns scope; the tests' log sinks then
// print those lines with kExpectedPrefix, so that a passing log does not read as a failure.
inline constexpr const char kExpectedPrefix[] = "[expected] ";
inline std::atomic<int> g_expecting_warns{0};

class ExpectWarns {
 public:
  ExpectWarns() { g_expecting_warns.fetch_add(1); }
  ~ExpectWarns() { g_expecting_warns.fetch_sub(1); }
  ExpectWarns(const ExpectWarns&) = delete;
  ExpectWarns& operator=(const ExpectWarns&) = delete;
};

// The prefix for a WARN line logged now: kExpectedPrefix inside an ExpectWarns scope, else "".
inline const char* warn_prefix() {
  return g_expecting_warns.load() > 0 ? kExpectedPrefix : "";
}

// Verbs objects of `what` (qp, cq, mr, pd) that this process owns per `rdma resource show`; -1 when
// the tool fails.
inline long count_own(const char* what) {
  const std::string cmd = std::string("rdma resource show ") + what + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  const std::string me = std::to_string(getpid());
  long n = 0;
  char line[1024];
  while (std::fgets(line, sizeof line, p) != nullptr) {
    std::istringstream in(line);
    std::string prev, tok;
    while (in >> tok) {
      if (prev == "pid" && tok == me) ++n;
      prev = tok;
    }
  }
  return pclose(p) == 0 ? n : -1;
}

// ---- Which connection manager a connection used, seen from outside
// Every connect logs its choice at INFO: "connection manager for DEV -> PEER: rdmacm (why)" or
// ": oob (why)". The tests' log sinks pass every INFO line to count_cm_choice, at any log level.
inline std::atomic<int> g_cm_rdmacm{0};
inline std::atomic<int> g_cm_oob{0};

inline void count_cm_choice(const char* msg) {
  const char* p = std::strstr(msg, "connection manager for ");
  if (p == nullptr) return;
  const char* r = std::strstr(p, ": rdmacm (");
  const char* o = std::strstr(p, ": oob (");
  if (r != nullptr && (o == nullptr || r < o)) {
    g_cm_rdmacm.fetch_add(1);
  } else if (o != nullptr) {
    g_cm_oob.fetch_add(1);
  }
}

struct CmCounts {
  int rdmacm = 0, oob = 0;
};
inline CmCounts cm_counts() {
  return {g_cm_rdmacm.load(), g_cm_oob.load()};
}

// Descriptors this process has open (/proc/self/fd); -1 when unknown.
inline int open_fd_count() {
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  int n = 0;
  while (readdir(d) != nullptr) ++n;
  closedir(d);
  return n - 3;  // ".", ".." and the directory's own descriptor
}

// Open rdma_cm event channels (/dev/infiniband/rdma_cm) of this process; -1 when unknown.
inline int rdma_cm_fd_count() {
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  int n = 0;
  char target[64];
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const ssize_t len = readlinkat(dirfd(d), e->d_name, target, sizeof target - 1);
    if (len <= 0) continue;
    target[len] = '\0';
    if (std::strcmp(target, "/dev/infiniband/rdma_cm") == 0) ++n;
  }
  closedir(d);
  return n;
}

// With SLUICE_CM=rdmacm or oob, a connection just set up (one connect, `before`: the counts taken
// before it) must have used that connection manager: its connect logged that choice once, and with
// the connection open the process holds its one shared rdma_cm event channel (rdmacm) or none
// (oob).
// "" when it did, or when SLUICE_CM is unset or auto (the choice then depends on the host's
// addresses); else what went wrong.
inline std::string check_cm_used(const CmCounts& before) {
  const char* v = std::getenv("SLUICE_CM");
  const std::string mode = v != nullptr ? v : "";
  if (mode != "rdmacm" && mode != "oob") return "";
  const bool want_rdmacm = mode == "rdmacm";
  const CmCounts now = cm_counts();
  const int rdmacm = now.rdmacm - before.rdmacm, oob = now.oob - before.oob;
  if (rdmacm != (want_rdmacm ? 1 : 0) || oob != (want_rdmacm ? 0 : 1)) {
    return "SLUICE_CM=" + mode + ", but the connect logged " + std::to_string(rdmacm) +
           " rdmacm and " + std::to_string(oob) + " oob choice(s) of its connection manager";
  }
  const int fds = rdma_cm_fd_count();
  if (want_rdmacm ? fds != 1 : fds != 0) {
    return "SLUICE_CM=" + mode + ", but " + std::to_string(fds) +
           " rdma_cm event channel(s) are open with the connection up";
  }
  return "";
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

// Use at the top of a test body with a TestPair: fails on a bad SLUICE_TEST_DEVICES, else as
// SLUICE_REQUIRE_DEVICES when no port is active.
#define SLUICE_REQUIRE_PAIR(pair)                      \
  do {                                                 \
    if (!(pair).error.empty()) FAIL() << (pair).error; \
    SLUICE_REQUIRE_DEVICES((pair).ports, 2);           \
  } while (0)
