// Misconfiguration through the exported v11 table, on real devices: an unknown HCA name, a
// malformed value and a bad GPU -> NIC override each fail init with a WARN naming the culprit, and
// a later init with a good configuration still works (nothing is left behind). A wrong GID index
// fails the RoCE ports only: InfiniBand ports address by LID and ignore it. The WARNs a test
// provokes on purpose are printed with the "[expected] " prefix (rdma_env.h), any other WARN
// without it. Also: a child forked after init that finalizes leaves the parent's engine alone.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rdma_env.h"
#include "sluice/nccl_net_abi.h"

namespace {

std::mutex g_mu;
std::string g_warns;

void capture_logger(ncclDebugLogLevel level, unsigned long, const char*, int, const char* fmt,
                    ...) {
  if (level != NCCL_LOG_WARN) return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "%sWARN %s\n", sluice::rdmatest::warn_prefix(), msg);
  std::lock_guard<std::mutex> lk(g_mu);
  g_warns += msg;
  g_warns += "\n";
}

const ncclNet_v11_t* table() {
  static void* h = dlopen(SLUICE_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  return h ? static_cast<const ncclNet_v11_t*>(dlsym(h, "ncclNetPlugin_v11")) : nullptr;
}

class PluginConfig : public ::testing::Test {
 protected:
  void SetUp() override {
    auto devs = sluice::rdmatest::active_rdma_devices();
    SLUICE_REQUIRE_DEVICES(devs, 1);
    net_ = table();
    ASSERT_NE(net_, nullptr) << dlerror();
    g_warns.clear();
  }
  void TearDown() override {
    for (const char* v : {"NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_IB_TIMEOUT",
                          "SLUICE_GPU_NIC_MAP", "SLUICE_NIC_AFFINITY"})
      unsetenv(v);
  }
  // init; on success returns the device names and finalizes.
  ncclResult_t init_and_list(std::vector<std::string>* names) {
    void* ctx = nullptr;
    ncclNetCommConfig_v11_t cfg{NCCL_NET_TRAFFIC_CLASS_UNDEF};
    ncclResult_t r = net_->init(&ctx, 7, &cfg, capture_logger, nullptr);
    if (r != ncclSuccess) {
      EXPECT_EQ(net_->finalize(ctx), ncclSuccess);  // NCCL 2.28 finalizes after a failed init
      return r;
    }
    int n = 0;
    EXPECT_EQ(net_->devices(&n), ncclSuccess);
    for (int i = 0; i < n; ++i) {
      ncclNetProperties_v11_t p{};
      EXPECT_EQ(net_->getProperties(i, &p), ncclSuccess);
      names->push_back(p.name);
    }
    EXPECT_EQ(net_->finalize(ctx), ncclSuccess);
    return r;
  }
  void expect_init_fails_naming(const std::string& needle) {
    std::vector<std::string> names;
    sluice::rdmatest::ExpectWarns expected;
    EXPECT_NE(init_and_list(&names), ncclSuccess);
    EXPECT_NE(g_warns.find(needle), std::string::npos) << "WARNs were:\n" << g_warns;
  }
  void expect_clean_init_works() {
    TearDown();
    std::vector<std::string> names;
    EXPECT_EQ(init_and_list(&names), ncclSuccess) << g_warns;
    EXPECT_FALSE(names.empty());
  }
  const ncclNet_v11_t* net_ = nullptr;
};

TEST_F(PluginConfig, HcaExcludeHidesThatDevice) {
  std::vector<std::string> all;
  ASSERT_EQ(init_and_list(&all), ncclSuccess) << g_warns;
  setenv("NCCL_IB_HCA", ("^=" + all[0]).c_str(), 1);
  if (all.size() == 1) {  // one port (a real host with one NIC): nothing is left to use
    expect_init_fails_naming("excluded by NCCL_IB_HCA");
    return;
  }
  std::vector<std::string> rest;
  ASSERT_EQ(init_and_list(&rest), ncclSuccess) << g_warns;
  EXPECT_EQ(rest.size(), all.size() - 1);
  for (const auto& n : rest) EXPECT_NE(n, all[0]);
}

TEST_F(PluginConfig, UnknownHcaNameFailsInitNamingIt) {
  setenv("NCCL_IB_HCA", "=no_such_hca0", 1);
  expect_init_fails_naming("no_such_hca0");
  expect_clean_init_works();
}

// NCCL_IB_GID_INDEX=77 (no such GID) drops every RoCE port with a WARN naming the index; an
// InfiniBand port has no use for a GID index (LID addressing) and stays. So: RoCE only -> init
// fails naming 77; InfiniBand present -> init succeeds with exactly the InfiniBand ports.
TEST_F(PluginConfig, WrongGidIndexDropsRoceKeepsInfiniband) {
  std::vector<std::string> all;
  ASSERT_EQ(init_and_list(&all), ncclSuccess) << g_warns;
  auto ports = sluice::rdmatest::active_rdma_ports();
  std::vector<std::string> ib;  // the plugin's names of its InfiniBand ports
  for (const auto& name : all) {
    bool roce = false;
    for (const auto& p : ports)
      if (p.matches(name)) roce = p.roce();
    if (!roce) ib.push_back(name);
  }
  std::fprintf(stderr, "%zu port(s), %zu InfiniBand, %zu RoCE\n", all.size(), ib.size(),
               all.size() - ib.size());
  setenv("NCCL_IB_GID_INDEX", "77", 1);
  if (ib.empty()) {
    expect_init_fails_naming("77");
  } else {
    std::vector<std::string> kept;
    EXPECT_EQ(init_and_list(&kept), ncclSuccess) << g_warns;
    EXPECT_EQ(kept, ib) << "NCCL_IB_GID_INDEX must drop the RoCE ports and only them";
  }
  expect_clean_init_works();
}

TEST_F(PluginConfig, MalformedValueFailsInitNamingTheVariable) {
  setenv("NCCL_IB_TIMEOUT", "forty", 1);
  expect_init_fails_naming("NCCL_IB_TIMEOUT");
  expect_clean_init_works();
}

TEST_F(PluginConfig, GpuNicOverrideNamingUnknownNicFails) {
  setenv("SLUICE_GPU_NIC_MAP", "0=no_such_nic", 1);
  expect_init_fails_naming("no_such_nic");
  expect_clean_init_works();
}

TEST_F(PluginConfig, AffinityAutoKeepsEveryDevice) {
  std::vector<std::string> plain, ordered;
  ASSERT_EQ(init_and_list(&plain), ncclSuccess) << g_warns;
  setenv("SLUICE_NIC_AFFINITY", "auto", 1);
  ASSERT_EQ(init_and_list(&ordered), ncclSuccess) << g_warns;
  std::sort(plain.begin(), plain.end());
  std::sort(ordered.begin(), ordered.end());
  EXPECT_EQ(plain, ordered);
}

ncclResult_t noop_profiler(void** handle, int, void*, int64_t, void*) {
  if (handle != nullptr) *handle = nullptr;
  return ncclSuccess;
}

double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// A child forked after init (a data-loader worker, say) that finalizes its copy of the context
// must leave the parent's engine alone: its verbs objects (the child's copy shares the verbs
// context's open file: destroying its PD destroyed the parent's, whose own finalize then failed
// ibv_dealloc_pd) and its async-event threads, which share the wake-up eventfd and must neither
// stop nor spin: over a second of idling the parent's CPU stays near zero (each thread spinning in
// poll() would add a CPU second a second), and its own finalize works without a WARN.
TEST_F(PluginConfig, AChildsFinalizeAfterForkLeavesTheParentsThreadsAsleep) {
  void* ctx = nullptr;
  ncclNetCommConfig_v11_t cfg{NCCL_NET_TRAFFIC_CLASS_UNDEF};
  ASSERT_EQ(net_->init(&ctx, 9, &cfg, capture_logger, noop_profiler), ncclSuccess) << g_warns;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(net_->finalize(ctx) == ncclSuccess ? 0 : 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child's finalize failed";
  const double before = process_cpu_seconds();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const double used = process_cpu_seconds() - before;
  std::printf("parent CPU over 1 s idle after the child's finalize: %.3f s\n", used);
  EXPECT_LT(used, 0.5) << "the parent's async-event threads spin after the child's finalize";
  EXPECT_EQ(net_->finalize(ctx), ncclSuccess);
  EXPECT_EQ(g_warns, "") << "the parent's finalize after the child's";
}

}  // namespace
