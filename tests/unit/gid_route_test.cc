// The GID chosen by the route to the peer (gid_route.h): matching the route's source GID in the
// port's table, NCCL_IB_GID_INDEX winning with a WARN, the fallback to the table's guess, and the
// check of the two sides' GIDs (families, link-local, subnets).
#include "sluice/core/device/gid_route.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

namespace sluice {
namespace {

GidBytes v4(const char* ip) {
  GidBytes g{};
  g[10] = 0xff;
  g[11] = 0xff;
  inet_pton(AF_INET, ip, g.data() + 12);
  return g;
}

GidBytes v6(const char* ip) {
  GidBytes g{};
  inet_pton(AF_INET6, ip, g.data());
  return g;
}

// A RoCE port with a link-local GID and two IPv4 addresses, v1 and v2 each; the 10.99 address
// came first, so it has the lower indexes.
std::vector<GidEntry> table() {
  return {{0, v6("fe80::1"), 1},   {1, v6("fe80::1"), 2},     {2, v4("10.99.1.1"), 1},
          {3, v4("10.99.1.1"), 2}, {4, v4("169.254.0.1"), 1}, {5, v4("169.254.0.1"), 2}};
}

RouteFacts routed_to(const GidBytes& sgid) {
  RouteFacts r;
  r.resolved = true;
  r.sgid = sgid;
  r.peer = "169.254.0.2";
  r.netdev = "eth0";
  return r;
}

GidChoice table_guess(const GidPolicy& p) {
  auto c = choose_roce_gid(table(), p);
  EXPECT_TRUE(c.is_ok());
  return c.value();
}

TEST(GidRoute, GidFullTextWritesIpv4MappedGidsInFull) {
  EXPECT_EQ(gid_full_text(v4("169.254.0.1")), "::ffff:169.254.0.1");
  EXPECT_EQ(gid_full_text(v6("fd00::7")), "fd00::7");
}

TEST(GidRoute, MatchPrefersThePolicysRoceVersionThenTheLowestIndex) {
  auto m = match_route_gid(table(), v4("169.254.0.1"), 2);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].index, 5);
  EXPECT_EQ(m[1].index, 4);
  m = match_route_gid(table(), v4("169.254.0.1"), 1);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].index, 4);
  EXPECT_TRUE(match_route_gid(table(), v4("192.168.0.1"), 2).empty());
  EXPECT_TRUE(match_route_gid(table(), GidBytes{}, 2).empty());
}

TEST(GidRoute, TheRoutesGidWinsOverTheTablesGuessAndTheReasonSaysWhy) {
  GidPolicy p;
  const GidChoice guess = table_guess(p);
  ASSERT_EQ(guess.index, 3);  // the table alone picks the first routable v2 IPv4 GID: 10.99.1.1
  RouteGidDecision d = choose_gid_by_route(table(), p, guess, routed_to(v4("169.254.0.1")));
  EXPECT_TRUE(d.by_route);
  EXPECT_EQ(d.choice.index, 5);
  EXPECT_EQ(d.choice.gid, v4("169.254.0.1"));
  EXPECT_TRUE(d.warn.empty());
  EXPECT_EQ(d.choice.reason,
            "GID index 5 (::ffff:169.254.0.1, RoCE v2) chosen by the route to 169.254.0.2 via eth0 "
            "(the table alone would pick index 3, ::ffff:10.99.1.1)");
}

TEST(GidRoute, WhenRouteAndTableAgreeTheReasonHasNoAside) {
  GidPolicy p;
  RouteGidDecision d = choose_gid_by_route(table(), p, table_guess(p), routed_to(v4("10.99.1.1")));
  EXPECT_EQ(d.choice.index, 3);
  EXPECT_EQ(d.choice.reason.find("table alone"), std::string::npos);
}

TEST(GidRoute, WithoutARouteTheTablesGuessStandsAndTheReasonSaysSo) {
  GidPolicy p;
  const GidChoice guess = table_guess(p);
  RouteFacts r;
  r.peer = "169.254.0.2";
  r.failure = "rdma_cm unavailable (`modprobe rdma_ucm`?): No such file or directory";
  RouteGidDecision d = choose_gid_by_route(table(), p, guess, r);
  EXPECT_FALSE(d.by_route);
  EXPECT_EQ(d.choice.index, guess.index);
  EXPECT_NE(d.choice.reason.find("the route to 169.254.0.2 was not checked (rdma_cm unavailable"),
            std::string::npos);
  EXPECT_NE(d.choice.reason.find("the table's guess stands"), std::string::npos);
}

TEST(GidRoute, ARouteGidMissingFromTheTableFallsBackToTheGuess) {
  GidPolicy p;
  RouteGidDecision d =
      choose_gid_by_route(table(), p, table_guess(p), routed_to(v4("192.168.7.7")));
  EXPECT_FALSE(d.by_route);
  EXPECT_EQ(d.choice.index, 3);
  EXPECT_NE(d.choice.reason.find("::ffff:192.168.7.7 is not in the port's GID table"),
            std::string::npos);
}

TEST(GidRoute, TheUsersGidIndexWinsWithAWarnWhenTheRouteDisagrees) {
  GidPolicy p;
  p.forced_index = 3;
  const GidChoice forced = table_guess(p);
  RouteGidDecision d = choose_gid_by_route(table(), p, forced, routed_to(v4("169.254.0.1")));
  EXPECT_FALSE(d.by_route);
  EXPECT_EQ(d.choice.index, 3);
  EXPECT_NE(d.warn.find("NCCL_IB_GID_INDEX=3 (::ffff:10.99.1.1) is not the GID the route to "
                        "169.254.0.2 via eth0 uses (GID index 5"),
            std::string::npos);
  EXPECT_NE(d.warn.find("set it to 5"), std::string::npos);
  // Agreeing: no WARN.
  p.forced_index = 5;
  d = choose_gid_by_route(table(), p, table_guess(p), routed_to(v4("169.254.0.1")));
  EXPECT_TRUE(d.warn.empty());
  EXPECT_EQ(d.choice.index, 5);
  EXPECT_NE(d.choice.reason.find("agrees"), std::string::npos);
}

TEST(GidRoute, PairOfOneFamilyInOneSubnetIsFine) {
  EXPECT_EQ(gid_pair_problem(5, v4("169.254.0.1"), 16, v4("169.254.0.2"), false), "");
  EXPECT_EQ(gid_pair_problem(1, v6("fe80::1"), 64, v6("fe80::2"), false), "");
  EXPECT_EQ(gid_pair_problem(0, GidBytes{}, -1, v4("1.2.3.4"), false), "");  // IB: nothing to say
}

TEST(GidRoute, PairOfDifferentFamiliesWarnsWithBothGidsAndTheFix) {
  const std::string w = gid_pair_problem(5, v4("169.254.0.1"), 16, v6("fd00::2"), true);
  EXPECT_NE(w.find("different address families"), std::string::npos);
  EXPECT_NE(w.find("GID index 5 ::ffff:169.254.0.1"), std::string::npos);
  EXPECT_NE(w.find("fd00::2"), std::string::npos);
  EXPECT_NE(w.find("NCCL_IB_ADDR_FAMILY"), std::string::npos);
}

TEST(GidRoute, LinkLocalAgainstRoutableWarns) {
  const std::string w = gid_pair_problem(1, v6("fe80::1"), 64, v6("fd00::2"), false);
  EXPECT_NE(w.find("link-local"), std::string::npos);
  EXPECT_NE(w.find("NCCL_IB_GID_INDEX"), std::string::npos);
}

TEST(GidRoute, PairInDifferentSubnetsWarnsUnlessTheRouteWasChecked) {
  const std::string w = gid_pair_problem(3, v4("10.99.1.1"), 24, v4("10.99.2.1"), false);
  EXPECT_NE(w.find("different subnets"), std::string::npos);
  EXPECT_NE(w.find("::ffff:10.99.1.1"), std::string::npos);
  EXPECT_NE(w.find("::ffff:10.99.2.1"), std::string::npos);
  EXPECT_NE(w.find("/24"), std::string::npos);
  EXPECT_NE(w.find("NCCL_IB_ADDR_RANGE"), std::string::npos);
  EXPECT_EQ(gid_pair_problem(3, v4("10.99.1.1"), 24, v4("10.99.2.1"), true), "");   // routed
  EXPECT_EQ(gid_pair_problem(3, v4("10.99.1.1"), 16, v4("10.99.2.1"), false), "");  // one /16
  EXPECT_EQ(gid_pair_problem(3, v4("10.99.1.1"), -1, v4("10.99.2.1"), false), "");  // unknown
  // IPv6 with an unknown prefix compares /64.
  EXPECT_NE(gid_pair_problem(3, v6("fd00:0:0:1::1"), -1, v6("fd00:0:0:2::1"), false), "");
  EXPECT_EQ(gid_pair_problem(3, v6("fd00:0:0:1::1"), -1, v6("fd00:0:0:1::2"), false), "");
}

}  // namespace
}  // namespace sluice
