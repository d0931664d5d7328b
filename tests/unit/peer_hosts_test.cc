// Keepalive per peer host (core/src/health/peer_hosts.h): one sentinel per host, handed over when
// it goes, and a host that timed out takes every one of its comms with it.
#include "health/peer_hosts.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace sluice {
namespace {

int sentinels(const std::vector<PeerHostNode>& v) {
  return static_cast<int>(std::count_if(
      v.begin(), v.end(), [](const PeerHostNode& n) { return n.linked() && n.sentinel; }));
}

TEST(PeerHosts, FirstNodeOfAHostIsItsOnlySentinel) {
  PeerHosts h;
  std::vector<PeerHostNode> a(5), b(3);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(h.add(&a[i], "10.0.0.1"), i == 0) << i;
  for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(h.add(&b[i], "fe80::1%3"), i == 0) << i;
  EXPECT_EQ(h.hosts(), 2u);
  EXPECT_EQ(h.nodes(), 8u);
  EXPECT_EQ(sentinels(a), 1);
  EXPECT_EQ(sentinels(b), 1);
}

TEST(PeerHosts, SentinelThatGoesHandsOverToAnotherOfItsHost) {
  PeerHosts h;
  std::vector<PeerHostNode> a(3), b(1);
  for (auto& n : a) h.add(&n, "10.0.0.1");
  h.add(&b[0], "10.0.0.2");
  EXPECT_EQ(h.remove(&a[2]), nullptr) << "not the sentinel: nothing to hand over";
  PeerHostNode* next = h.remove(&a[0]);
  ASSERT_EQ(next, &a[1]);
  EXPECT_TRUE(a[1].sentinel);
  EXPECT_EQ(sentinels(a), 1);
  EXPECT_EQ(h.remove(&a[1]), nullptr) << "the host's last node: no one left to watch it";
  EXPECT_EQ(h.hosts(), 1u);
  EXPECT_EQ(h.remove(&a[1]), nullptr) << "removing twice is a no-op";
  EXPECT_TRUE(b[0].sentinel) << "another host is untouched";
  EXPECT_EQ(h.nodes(), 1u);
  // A host that was emptied gets a new sentinel with its next node.
  PeerHostNode again;
  EXPECT_TRUE(h.add(&again, "10.0.0.1"));
}

TEST(PeerHosts, HostDownTakesEveryNodeOfThatHostOnly) {
  PeerHosts h;
  std::vector<PeerHostNode> a(4), b(2);
  for (auto& n : a) h.add(&n, "10.0.0.1");
  for (auto& n : b) h.add(&n, "10.0.0.2");
  std::vector<PeerHostNode*> others = h.host_down(&a[0]);
  ASSERT_EQ(others.size(), 3u);
  for (int i = 1; i < 4; ++i)
    EXPECT_NE(std::find(others.begin(), others.end(), &a[i]), others.end()) << i;
  for (const auto& n : a) EXPECT_FALSE(n.linked());
  EXPECT_EQ(h.hosts(), 1u);
  EXPECT_EQ(h.nodes(), 2u);
  EXPECT_EQ(h.remove(&a[2]), nullptr) << "a comm of the downed host closing later";
  EXPECT_TRUE(h.host_down(&a[1]).empty()) << "already out";
  EXPECT_EQ(sentinels(b), 1);
}

// The host's other comms look at the sentinel's socket, at most once per period per host; the
// sentinel reads its own.
TEST(PeerHosts, SentinelIsCheckedOncePerPeriodPerHostByTheOthers) {
  PeerHosts h;
  std::vector<PeerHostNode> a(3), b(2);
  for (auto& n : a) h.add(&n, "10.0.0.1");
  for (auto& n : b) h.add(&n, "10.0.0.2");
  EXPECT_EQ(h.check_due(&a[0], 100, 50), nullptr) << "the sentinel itself";
  EXPECT_EQ(h.check_due(&a[1], 100, 50), &a[0]);
  EXPECT_EQ(h.check_due(&a[2], 120, 50), nullptr) << "the host was checked 20 ago";
  EXPECT_EQ(h.check_due(&b[1], 120, 50), &b[0]) << "another host has its own period";
  EXPECT_EQ(h.check_due(&a[2], 150, 50), &a[0]);
  // Handed over: the new sentinel is the one checked.
  EXPECT_EQ(h.remove(&a[0]), &a[1]);
  EXPECT_EQ(h.check_due(&a[2], 200, 50), &a[1]);
  EXPECT_EQ(h.check_due(&a[1], 300, 50), nullptr);
  PeerHostNode gone;
  EXPECT_EQ(h.check_due(&gone, 300, 50), nullptr) << "not linked";
}

// Thousands of comms to a few hosts: as many sentinels as hosts, and closing them in any order
// always leaves exactly one per host that still has comms.
TEST(PeerHosts, ManyCommsFewHostsOneSentinelEach) {
  PeerHosts h;
  constexpr int kHosts = 4, kPerHost = 2500;
  std::vector<PeerHostNode> n(kHosts * kPerHost);
  for (int i = 0; i < kHosts * kPerHost; ++i) h.add(&n[i], "10.0.0." + std::to_string(i % kHosts));
  EXPECT_EQ(sentinels(n), kHosts);
  for (int i = 0; i < kHosts * kPerHost; i += 3) h.remove(&n[i]);  // sentinels among them
  EXPECT_EQ(sentinels(n), kHosts);
  EXPECT_EQ(h.hosts(), static_cast<size_t>(kHosts));
}

}  // namespace
}  // namespace sluice
