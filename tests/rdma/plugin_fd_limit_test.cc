// No fd wall (issue 32): the plugin's init raises the soft RLIMIT_NOFILE to the hard limit and says
// so at INFO, so a process started with a low soft limit (1,024 on many systems) opens more
// connections than that limit: here the soft limit is set to 128 before init, and 100 connections
// (200 comms, each with its socket) come up and each carries a verified message.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <string>
#include <vector>

#include "net_harness.h"

namespace nettest {
namespace {

constexpr rlim_t kSoft = 128;
constexpr int kPairs = 100;  // 200 comms: more sockets than the soft limit the process started with

TEST(FdLimit, InitRaisesTheSoftLimitAndConnectionsGoPastTheOldOne) {
  auto pair = sluice::rdmatest::test_pair();
  SLUICE_REQUIRE_PAIR(pair);
  rlimit r{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &r), 0);
  if (r.rlim_max != RLIM_INFINITY && r.rlim_max < 2 * kPairs + 256) {
    GTEST_SKIP() << "hard RLIMIT_NOFILE " << r.rlim_max << " leaves no room above " << kSoft;
  }
  rlimit low = r;
  low.rlim_cur = kSoft;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  std::printf("RLIMIT_NOFILE before init: soft %llu, hard %llu\n",
              static_cast<unsigned long long>(kSoft), static_cast<unsigned long long>(r.rlim_max));

  g_keep_info = true;
  Net net(12);
  ASSERT_EQ(net.init(), ncclSuccess) << last_warn();
  rlimit now{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &now), 0);
  std::printf("RLIMIT_NOFILE after init: soft %llu, hard %llu\n",
              static_cast<unsigned long long>(now.rlim_cur),
              static_cast<unsigned long long>(now.rlim_max));
  if (r.rlim_max != RLIM_INFINITY) {
    EXPECT_EQ(now.rlim_cur, r.rlim_max) << "not the hard limit";
  }
  EXPECT_GT(now.rlim_cur, kSoft);
  const std::vector<std::string> said =
      info_with(0, "RLIMIT_NOFILE: soft limit raised from 128 to");
  ASSERT_EQ(said.size(), 1u) << "init did not say at INFO that it raised the limit (old -> new)";
  std::printf("init said: %s\n", said[0].c_str());

  int ndev = 0;
  ASSERT_EQ(net.devices(&ndev), ncclSuccess);
  int dev_a = -1, dev_b = -1;
  for (int d = 0; d < ndev; ++d) {
    Props p;
    ASSERT_EQ(net.properties(d, &p), ncclSuccess);
    if (dev_a < 0 && pair.a().matches(p.name)) dev_a = d;
    if (dev_b < 0 && pair.b().matches(p.name)) dev_b = d;
  }
  ASSERT_GE(dev_a, 0);
  ASSERT_GE(dev_b, 0);

  // SLUICE_OOB_LINK=0: each comm keeps its own socket, so the comms pass the old soft limit; with
  // the peer link (the default) they share one socket per peer process: here, in one process, the
  // two ends of one link, however many connections.
  const char* link_env = std::getenv("SLUICE_OOB_LINK");
  const bool own_sockets = link_env != nullptr && std::string(link_env) == "0";
  // (The first connection also opens what the process keeps for all: rdma_cm's channel for the
  // route check of oob mode's GID; the count is taken after it.)
  int fds1 = -1;
  std::vector<Conn> conns(kPairs);
  const auto t0 = Clock::now();
  for (int i = 0; i < kPairs; ++i) {
    ASSERT_TRUE(open_conn(net, dev_a, dev_b, &conns[i]))
        << "connection " << i << ": " << last_warn();
    if (i == 0) fds1 = open_fd_count();
  }
  const int fds = open_fd_count();
  std::printf(
      "%d connections up in %lld ms; the process holds %d descriptors (soft limit at "
      "start: %llu)\n",
      kPairs, ms_since(t0), fds, static_cast<unsigned long long>(kSoft));
  if (own_sockets) {
    EXPECT_GT(fds, static_cast<int>(kSoft)) << "the test did not pass the old soft limit";
  } else {
    EXPECT_EQ(fds, fds1) << "connections 2.." << kPairs
                         << " took descriptors: they do not share the first one's peer link";
  }

  // Every connection carries its own message, verified byte for byte.
  for (int i = 0; i < kPairs; ++i) {
    RegBuf s, d;
    ASSERT_TRUE(s.allocate(&net, conns[i].send, 256));
    ASSERT_TRUE(d.allocate(&net, conns[i].recv, 256));
    const uint64_t seed = pattern_seed(256, static_cast<uint64_t>(i));
    fill_pattern(s.data(), 256, seed);
    int got = -1;
    ASSERT_TRUE(send_recv(net, conns[i], s, 256, d, 256, 1, &got)) << "connection " << i;
    EXPECT_EQ(got, 256);
    EXPECT_EQ(check_pattern(d.data(), 256, seed), "") << "connection " << i;
  }
  for (Conn& c : conns) EXPECT_TRUE(close_conn(net, &c));
  EXPECT_EQ(net.finalize(), ncclSuccess);
  EXPECT_EQ(g_warns.load(), 0) << last_warn();
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &r), 0);
}

}  // namespace
}  // namespace nettest
