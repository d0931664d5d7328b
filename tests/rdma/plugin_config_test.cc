// Misconfiguration through the exported v11 table, on real devices: a wrong GID index, an unknown
// HCA name, a malformed value and a bad GPU -> NIC override each fail init with a WARN naming the
// culprit, and a later init with a good configuration still works (nothing is left behind).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
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
  if (all.size() < 2) GTEST_SKIP() << "needs two devices";
  setenv("NCCL_IB_HCA", ("^=" + all[0]).c_str(), 1);
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

TEST_F(PluginConfig, WrongGidIndexFailsInitNamingIt) {
  setenv("NCCL_IB_GID_INDEX", "77", 1);
  expect_init_fails_naming("77");
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

}  // namespace
