#include "sluice/core/base/net_addr.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <net/if.h>

#include <cstring>
#include <string>
#include <vector>

namespace sluice {
namespace {

GidBytes gid(const char* text) {
  GidBytes g{};
  in_addr v4{};
  if (inet_pton(AF_INET, text, &v4) == 1) {  // "10.0.0.1" -> ::ffff:10.0.0.1
    g[10] = g[11] = 0xff;
    std::memcpy(g.data() + 12, &v4, 4);
  } else {
    EXPECT_EQ(inet_pton(AF_INET6, text, g.data()), 1) << text;
  }
  return g;
}

GidEntry entry(int index, const char* text, int version) {
  return GidEntry{index, text ? gid(text) : GidBytes{}, version};
}

bool contains(const char* cidr, const char* address) {
  auto c = Cidr::parse(cidr);
  EXPECT_TRUE(c.is_ok()) << cidr << ": " << c.status().message();
  return c.is_ok() && c.value().contains_gid(gid(address));
}

// ------------------------------------------------------------------------------------------------
// CIDR

TEST(Cidr, ParsesIpv4) {
  auto c = Cidr::parse(" 10.1.0.0/16 ");
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c.value().family, AF_INET);
  EXPECT_EQ(c.value().prefix_len, 16);
  EXPECT_EQ(c.value().addr[0], 10);
  EXPECT_EQ(c.value().addr[1], 1);
}

TEST(Cidr, ParsesIpv6AndClearsHostBits) {
  auto c = Cidr::parse("fd00:1::5/32");
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c.value().family, AF_INET6);
  EXPECT_EQ(c.value().prefix_len, 32);
  EXPECT_EQ(c.value().addr, gid("fd00:1::"));
}

TEST(Cidr, PrefixBoundsAndGarbage) {
  EXPECT_TRUE(Cidr::parse("10.0.0.0/0").is_ok());
  EXPECT_TRUE(Cidr::parse("10.0.0.1/32").is_ok());
  EXPECT_TRUE(Cidr::parse("::/0").is_ok());
  EXPECT_TRUE(Cidr::parse("fd00::1/128").is_ok());
  for (const char* bad :
       {"10.0.0.0/33", "fd00::/129", "10.0.0.0/-1", "10.0.0.0/", "10.0.0.0", "10.0.0.0/8x",
        "10.0.0/8", "10.0.0.256/8", "hello/8", "/8", "", "fd00::g/8", "10.0.0.0/ 8 8"}) {
    auto c = Cidr::parse(bad);
    EXPECT_FALSE(c.is_ok()) << bad;
    if (!c.is_ok()) {
      EXPECT_EQ(c.status().code(), Code::kInvalidUsage) << bad;
    }
  }
  auto c = Cidr::parse("10.0.0.0/33");
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("0..32"), std::string::npos) << c.status().message();
}

TEST(Cidr, Ipv4RangeContainsIpv4MappedGids) {
  EXPECT_TRUE(contains("10.1.0.0/16", "10.1.2.3"));
  EXPECT_TRUE(contains("10.1.0.0/16", "10.1.255.255"));
  EXPECT_FALSE(contains("10.1.0.0/16", "10.2.0.1"));
  EXPECT_TRUE(contains("10.1.2.3/32", "10.1.2.3"));
  EXPECT_FALSE(contains("10.1.2.3/32", "10.1.2.4"));
  EXPECT_TRUE(contains("10.1.2.0/25", "10.1.2.127"));
  EXPECT_FALSE(contains("10.1.2.0/25", "10.1.2.128"));
  EXPECT_TRUE(contains("0.0.0.0/0", "192.168.1.1"));
  // An IPv4 range never contains a real IPv6 GID, even one whose low bytes look right.
  EXPECT_FALSE(contains("0.0.0.0/0", "fe80::a01:203"));
  EXPECT_FALSE(contains("10.1.0.0/16", "::a01:203"));
}

TEST(Cidr, Ipv6RangeComparesAllBytes) {
  EXPECT_TRUE(contains("fd00::/8", "fd12:3456::1"));
  EXPECT_FALSE(contains("fd00::/8", "fe80::1"));
  EXPECT_TRUE(contains("fd00:1:2::/48", "fd00:1:2:ffff::1"));
  EXPECT_FALSE(contains("fd00:1:2::/48", "fd00:1:3::1"));
  EXPECT_FALSE(contains("fd00::/8", "10.0.0.1"));  // IPv4-mapped
}

// ------------------------------------------------------------------------------------------------
// GIDs

TEST(Gid, Classification) {
  EXPECT_TRUE(gid_is_zero(GidBytes{}));
  EXPECT_FALSE(gid_is_zero(gid("::1")));
  EXPECT_TRUE(gid_is_ipv4_mapped(gid("10.0.0.1")));
  EXPECT_FALSE(gid_is_ipv4_mapped(gid("fd00::1")));
  EXPECT_FALSE(gid_is_ipv4_mapped(gid("::a00:1")));  // IPv4-compatible, not mapped
  EXPECT_TRUE(gid_is_link_local(gid("fe80::1")));
  EXPECT_TRUE(gid_is_link_local(gid("febf::1")));
  EXPECT_FALSE(gid_is_link_local(gid("fec0::1")));
  EXPECT_FALSE(gid_is_link_local(gid("10.0.0.1")));
}

TEST(Gid, ToString) {
  EXPECT_EQ(gid_to_string(gid("10.1.2.3")), "10.1.2.3");
  EXPECT_EQ(gid_to_string(gid("fe80::1234:56ff:fe78:9abc")), "fe80::1234:56ff:fe78:9abc");
  EXPECT_EQ(gid_to_string(GidBytes{}), "::");
}

// A typical mlx5 RoCE table: v1/v2 pairs for link-local, IPv4 and IPv6 addresses.
std::vector<GidEntry> roce_table() {
  return {entry(0, "fe80::1", 1),  entry(1, "fe80::1", 2), entry(2, "10.1.2.3", 1),
          entry(3, "10.1.2.3", 2), entry(4, "fd00::7", 1), entry(5, "fd00::7", 2)};
}

GidChoice choose_ok(const std::vector<GidEntry>& gids, const GidPolicy& policy) {
  auto c = choose_roce_gid(gids, policy);
  EXPECT_TRUE(c.is_ok()) << c.status().message();
  return c.is_ok() ? c.value() : GidChoice{};
}

TEST(ChooseGid, DefaultsPickRoceV2Ipv4) {
  const GidChoice c = choose_ok(roce_table(), GidPolicy{});
  EXPECT_EQ(c.index, 3);
  EXPECT_EQ(c.gid, gid("10.1.2.3"));
  EXPECT_EQ(c.reason, "index 3: RoCE v2, IPv4 10.1.2.3");
}

TEST(ChooseGid, Ipv6FamilyPicksIpv6) {
  GidPolicy p;
  p.family = AF_INET6;
  const GidChoice c = choose_ok(roce_table(), p);
  EXPECT_EQ(c.index, 5);
  EXPECT_EQ(c.reason, "index 5: RoCE v2, IPv6 fd00::7");
}

TEST(ChooseGid, Ipv4PreferredOverIpv6ForAfInetRegardlessOfOrder) {
  const std::vector<GidEntry> gids = {entry(0, "fd00::7", 2), entry(1, "10.0.0.9", 2)};
  EXPECT_EQ(choose_ok(gids, GidPolicy{}).index, 1);
  GidPolicy v6;
  v6.family = AF_INET6;
  EXPECT_EQ(choose_ok(gids, v6).index, 0);
}

TEST(ChooseGid, RoceVersionPolicy) {
  GidPolicy p;
  p.roce_version = 1;
  const GidChoice c = choose_ok(roce_table(), p);
  EXPECT_EQ(c.index, 2);
  EXPECT_EQ(c.reason, "index 2: RoCE v1, IPv4 10.1.2.3");
}

TEST(ChooseGid, V2PreferredOverV1EvenAtHigherIndex) {
  const std::vector<GidEntry> gids = {entry(0, "10.0.0.1", 1), entry(7, "10.0.0.1", 2)};
  EXPECT_EQ(choose_ok(gids, GidPolicy{}).index, 7);
}

TEST(ChooseGid, FallsBackToV1WhenNoV2Exists) {
  const std::vector<GidEntry> gids = {entry(0, "fe80::1", 1), entry(1, "10.0.0.1", 1)};
  const GidChoice c = choose_ok(gids, GidPolicy{});
  EXPECT_EQ(c.index, 1);
  EXPECT_EQ(c.reason, "index 1: RoCE v1, IPv4 10.0.0.1 (no routable RoCE v2 GID)");
}

TEST(ChooseGid, FallsBackToOtherFamily) {
  const std::vector<GidEntry> gids = {entry(0, "fe80::1", 2), entry(1, "fd00::1", 2)};
  const GidChoice c = choose_ok(gids, GidPolicy{});
  EXPECT_EQ(c.index, 1);
  EXPECT_EQ(c.reason, "index 1: RoCE v2, IPv6 fd00::1 (no routable RoCE v2 GID of family AF_INET)");
}

TEST(ChooseGid, RangeFiltering) {
  std::vector<GidEntry> gids = {entry(0, "fe80::1", 2), entry(1, "10.0.0.5", 2),
                                entry(2, "10.1.2.3", 2), entry(3, "10.1.9.9", 2)};
  GidPolicy p;
  p.range = "10.1.0.0/16";
  GidChoice c = choose_ok(gids, p);
  EXPECT_EQ(c.index, 2);  // lowest index inside the range
  EXPECT_EQ(c.reason, "index 2: RoCE v2, IPv4 10.1.2.3 in NCCL_IB_ADDR_RANGE=10.1.0.0/16");

  p.range = "10.1.9.0/24";
  EXPECT_EQ(choose_ok(gids, p).index, 3);

  p.range = "192.168.0.0/16";  // nothing inside: the best outside, said so
  c = choose_ok(gids, p);
  EXPECT_EQ(c.index, 1);
  EXPECT_EQ(c.reason,
            "index 1: RoCE v2, IPv4 10.0.0.5 outside NCCL_IB_ADDR_RANGE=192.168.0.0/16 (no "
            "routable RoCE v2 AF_INET GID in NCCL_IB_ADDR_RANGE=192.168.0.0/16)");

  GidPolicy v6;
  v6.family = AF_INET6;
  v6.range = "fd00:2::/32";
  gids.push_back(entry(4, "fd00:1::1", 2));
  gids.push_back(entry(5, "fd00:2::1", 2));
  EXPECT_EQ(choose_ok(gids, v6).index, 5);
}

TEST(ChooseGid, BadRangeIsAnError) {
  GidPolicy p;
  p.range = "10.0.0.0/40";
  auto c = choose_roce_gid(roce_table(), p);
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("NCCL_IB_ADDR_RANGE"), std::string::npos);
}

TEST(ChooseGid, LinkLocalOnlyAsLastResort) {
  // A routable GID of the wrong version and family beats a link-local that matches both.
  std::vector<GidEntry> gids = {entry(0, "fe80::1", 2), entry(1, "fd00::1", 1)};
  EXPECT_EQ(choose_ok(gids, GidPolicy{}).index, 1);

  gids = {entry(0, "fe80::1", 1), entry(1, "fe80::1", 2), entry(2, nullptr, 2)};
  const GidChoice c = choose_ok(gids, GidPolicy{});
  EXPECT_EQ(c.index, 1);
  EXPECT_EQ(c.reason, "index 1: RoCE v2, link-local fe80::1 (only link-local GIDs are configured)");
}

TEST(ChooseGid, ZeroEntriesAreSkipped) {
  const std::vector<GidEntry> gids = {entry(0, "fe80::1", 2), entry(1, nullptr, 2),
                                      entry(2, "10.0.0.1", 2)};
  EXPECT_EQ(choose_ok(gids, GidPolicy{}).index, 2);
}

TEST(ChooseGid, UnknownRoceVersionRanksBelowKnownMatch) {
  std::vector<GidEntry> gids = {entry(0, "10.0.0.1", 0), entry(1, "10.0.0.1", 2)};
  EXPECT_EQ(choose_ok(gids, GidPolicy{}).index, 1);
  // Still usable when it is the only routable one.
  gids = {entry(0, "fe80::1", 2), entry(3, "10.0.0.1", 0)};
  const GidChoice c = choose_ok(gids, GidPolicy{});
  EXPECT_EQ(c.index, 3);
  EXPECT_EQ(c.reason, "index 3: RoCE version unknown, IPv4 10.0.0.1 (no routable RoCE v2 GID)");
}

TEST(ChooseGid, ForcedIndexWinsOutright) {
  GidPolicy p;
  p.forced_index = 0;  // link-local v1: worst by every rule, still taken
  const GidChoice c = choose_ok(roce_table(), p);
  EXPECT_EQ(c.index, 0);
  EXPECT_EQ(c.gid, gid("fe80::1"));
  EXPECT_NE(c.reason.find("forced by NCCL_IB_GID_INDEX=0"), std::string::npos) << c.reason;
}

TEST(ChooseGid, ForcedIndexMissingOrZeroIsAnError) {
  std::vector<GidEntry> gids = roce_table();
  gids.push_back(entry(6, nullptr, 2));
  GidPolicy p;
  p.forced_index = 9;
  auto c = choose_roce_gid(gids, p);
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), Code::kInvalidUsage);
  EXPECT_NE(c.status().message().find("NCCL_IB_GID_INDEX=9"), std::string::npos);
  EXPECT_NE(c.status().message().find("valid indexes: 0, 1, 2, 3, 4, 5"), std::string::npos)
      << c.status().message();

  p.forced_index = 6;
  c = choose_roce_gid(gids, p);
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("index 6 is all zeros"), std::string::npos)
      << c.status().message();
  EXPECT_NE(c.status().message().find("valid indexes: 0, 1, 2, 3, 4, 5"), std::string::npos);
}

TEST(ChooseGid, EmptyOrAllZeroTableIsAnError) {
  auto c = choose_roce_gid({}, GidPolicy{});
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("empty"), std::string::npos);
  c = choose_roce_gid({entry(0, nullptr, 2), entry(1, nullptr, 1)}, GidPolicy{});
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("all zeros"), std::string::npos) << c.status().message();
}

// ------------------------------------------------------------------------------------------------
// Interfaces

IfAddr v4(const char* name, const char* address, bool up = true) {
  IfAddr a;
  a.name = name;
  a.family = AF_INET;
  a.up = up;
  a.loopback = std::string_view(name) == "lo";
  auto* sin = reinterpret_cast<sockaddr_in*>(&a.addr);
  sin->sin_family = AF_INET;
  EXPECT_EQ(inet_pton(AF_INET, address, &sin->sin_addr), 1);
  return a;
}

IfAddr v6(const char* name, const char* address, uint32_t scope = 0) {
  IfAddr a;
  a.name = name;
  a.family = AF_INET6;
  a.loopback = std::string_view(name) == "lo";
  auto* sin6 = reinterpret_cast<sockaddr_in6*>(&a.addr);
  sin6->sin6_family = AF_INET6;
  sin6->sin6_scope_id = scope;
  EXPECT_EQ(inet_pton(AF_INET6, address, &sin6->sin6_addr), 1);
  return a;
}

std::string chosen(const std::vector<IfAddr>& addrs, std::string_view spec, int family = 0) {
  auto r = choose_interface(addrs, spec, family);
  if (!r.is_ok()) return "error: " + r.status().message();
  return r.value().name + " " + sockaddr_to_string(r.value().addr);
}

TEST(ChooseInterface, AutomaticOrder) {
  const std::vector<IfAddr> all = {v4("lo", "127.0.0.1"), v4("docker0", "172.17.0.1"),
                                   v4("virbr0", "192.168.122.1"), v4("eth0", "10.0.0.2"),
                                   v4("ib0", "10.10.0.2")};
  EXPECT_EQ(chosen(all, ""), "ib0 10.10.0.2:0");
  std::vector<IfAddr> no_ib(all.begin(), all.end() - 1);
  EXPECT_EQ(chosen(no_ib, ""), "eth0 10.0.0.2:0");
  EXPECT_EQ(
      chosen({v4("lo", "127.0.0.1"), v4("virbr0", "192.168.122.1"), v4("docker0", "172.17.0.1")},
             ""),
      "docker0 172.17.0.1:0");
  EXPECT_EQ(chosen({v4("virbr0", "192.168.122.1"), v4("lo", "127.0.0.1")}, ""), "lo 127.0.0.1:0");
  EXPECT_EQ(chosen({v4("virbr0", "192.168.122.1")}, ""), "virbr0 192.168.122.1:0");
}

TEST(ChooseInterface, DownInterfacesAreSkipped) {
  EXPECT_EQ(chosen({v4("ib0", "10.10.0.2", /*up=*/false), v4("eth0", "10.0.0.2")}, ""),
            "eth0 10.0.0.2:0");
}

TEST(ChooseInterface, FamilyOrderWithinAClass) {
  const std::vector<IfAddr> eth = {v6("eth0", "fe80::1", 2), v6("eth0", "fd00::2"),
                                   v4("eth0", "10.0.0.2")};
  EXPECT_EQ(chosen(eth, ""), "eth0 10.0.0.2:0");
  EXPECT_EQ(chosen(eth, "", AF_INET6), "eth0 [fd00::2]:0");
  EXPECT_EQ(chosen(eth, "", AF_INET), "eth0 10.0.0.2:0");
  // Class beats family: an IPv6-only ib0 wins over an IPv4 eth0.
  EXPECT_EQ(chosen({v4("eth0", "10.0.0.2"), v6("ib0", "fd00::9")}, ""), "ib0 [fd00::9]:0");
  // Link-local is last within the class.
  EXPECT_NE(chosen({v6("eth0", "fe80::1", 2), v6("eth1", "fd00::3")}, "").find("eth1"),
            std::string::npos);
}

TEST(ChooseInterface, IfnameIncludeExcludeExact) {
  const std::vector<IfAddr> all = {v4("ib0", "10.10.0.2"), v4("eth0", "10.0.0.2"),
                                   v4("eth10", "10.0.1.2"), v4("eth1", "10.0.2.2"),
                                   v4("docker0", "172.17.0.1")};
  EXPECT_EQ(chosen(all, "eth"), "eth0 10.0.0.2:0");
  EXPECT_EQ(chosen(all, "eth1"), "eth10 10.0.1.2:0");  // prefix: eth10 comes first in the list
  EXPECT_EQ(chosen(all, "=eth1"), "eth1 10.0.2.2:0");
  EXPECT_EQ(chosen(all, "^ib,eth"), "docker0 172.17.0.1:0");
  EXPECT_EQ(chosen(all, "^ib"), "eth0 10.0.0.2:0");
  EXPECT_EQ(chosen(all, "^=eth0,ib0"), "eth10 10.0.1.2:0");
  EXPECT_EQ(chosen(all, "docker"), "docker0 172.17.0.1:0");
}

TEST(ChooseInterface, NoMatchListsTheInterfacesSeen) {
  const std::vector<IfAddr> all = {v4("eth0", "10.0.0.2"), v4("lo", "127.0.0.1")};
  auto r = choose_interface(all, "ens", 0);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidUsage);
  EXPECT_NE(r.status().message().find("NCCL_SOCKET_IFNAME=\"ens\""), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("eth0 10.0.0.2, lo 127.0.0.1"), std::string::npos)
      << r.status().message();

  r = choose_interface(all, "", AF_INET6);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("NCCL_SOCKET_FAMILY=AF_INET6"), std::string::npos)
      << r.status().message();

  r = choose_interface({}, "", 0);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("interfaces seen: none"), std::string::npos);

  r = choose_interface(all, "eth0:x", 0);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("NCCL_SOCKET_IFNAME"), std::string::npos);
}

TEST(SockaddrToString, FormatsBothFamilies) {
  IfAddr a = v4("eth0", "10.0.0.1");
  reinterpret_cast<sockaddr_in*>(&a.addr)->sin_port = htons(4711);
  EXPECT_EQ(sockaddr_to_string(a.addr), "10.0.0.1:4711");

  IfAddr b = v6("eth0", "fd00::1");
  reinterpret_cast<sockaddr_in6*>(&b.addr)->sin6_port = htons(4711);
  EXPECT_EQ(sockaddr_to_string(b.addr), "[fd00::1]:4711");

  const unsigned lo_index = if_nametoindex("lo");
  ASSERT_NE(lo_index, 0u);
  IfAddr c = v6("lo", "fe80::1", lo_index);
  EXPECT_EQ(sockaddr_to_string(c.addr), "[fe80::1%lo]:0");
  // An index with no interface prints the number.
  IfAddr d = v6("x", "fe80::1", 99999);
  EXPECT_EQ(sockaddr_to_string(d.addr), "[fe80::1%99999]:0");
}

TEST(ListInterfaces, ReturnsUpIpInterfacesWithLoopback) {
  const std::vector<IfAddr> list = list_interfaces();
  bool saw_lo = false;
  for (const IfAddr& a : list) {
    EXPECT_TRUE(a.up);
    EXPECT_TRUE(a.family == AF_INET || a.family == AF_INET6) << a.name;
    EXPECT_EQ(a.addr.ss_family, a.family);
    if (a.family == AF_INET && a.name == "lo") {
      saw_lo = true;
      EXPECT_TRUE(a.loopback);
      EXPECT_EQ(sockaddr_to_string(a.addr), "127.0.0.1:0");
    }
  }
  EXPECT_TRUE(saw_lo) << "no IPv4 loopback found";
}

PortAddr port_addr(const char* text, int gid_index) {
  PortAddr p;
  p.addr = gid_to_sockaddr(gid(text));
  p.gid_index = gid_index;
  return p;
}

sockaddr_storage ip(const char* text) {
  return gid_to_sockaddr(gid(text));
}

TEST(GidToSockaddr, MappedIsIpv4OtherIsIpv6) {
  EXPECT_EQ(ip("10.0.0.1").ss_family, AF_INET);
  EXPECT_EQ(address_to_string(ip("10.0.0.1")), "10.0.0.1");
  EXPECT_EQ(ip("fd00::1").ss_family, AF_INET6);
  EXPECT_EQ(address_to_string(ip("fd00::1")), "fd00::1");
  EXPECT_TRUE(same_address(ip("10.0.0.1"), ip("10.0.0.1")));
  EXPECT_FALSE(same_address(ip("10.0.0.1"), ip("10.0.0.2")));
}

TEST(ChooseCmAddress, KeepsTheOutOfBandAddressWhenItIsOnThePort) {
  // Today's layout: the out-of-band interface is the device's own: nothing changes.
  const std::vector<PortAddr> addrs = {port_addr("10.77.0.1", 1), port_addr("169.254.0.1", 2)};
  const CmAddrChoice c = choose_cm_address(addrs, ip("169.254.0.1"), AF_INET, false, 1);
  EXPECT_EQ(c.index, 1);
  EXPECT_TRUE(c.kept);
  EXPECT_NE(c.reason.find("out-of-band address 169.254.0.1 is on this port"), std::string::npos)
      << c.reason;
}

TEST(ChooseCmAddress, ElseThePortsOwnAddressOfTheSameFamilyChosenGidFirst) {
  // Routed RoCE: the out-of-band address is on the management NIC, not on this port.
  const std::vector<PortAddr> addrs = {port_addr("fd00::5", 1), port_addr("10.77.0.1", 2),
                                       port_addr("10.78.0.1", 3)};
  CmAddrChoice c = choose_cm_address(addrs, ip("192.168.1.5"), AF_INET, false, 3);
  EXPECT_EQ(c.index, 2) << c.reason;
  EXPECT_EQ(address_to_string(c.addr), "10.78.0.1");  // what to bind: the port's own address
  EXPECT_NE(c.reason.find("GID index 3"), std::string::npos) << c.reason;
  c = choose_cm_address(addrs, ip("192.168.1.5"), AF_INET, false, 1);  // chosen GID is IPv6
  EXPECT_EQ(c.index, 1) << c.reason;
  EXPECT_NE(c.reason.find("first IPv4"), std::string::npos) << c.reason;
  c = choose_cm_address(addrs, ip("fd99::1"), AF_INET6, false, -1);
  EXPECT_EQ(c.index, 0) << c.reason;
}

TEST(ChooseCmAddress, AnotherFamilyOnlyWhenNotStrict) {
  const std::vector<PortAddr> addrs = {port_addr("fd00::5", 1)};
  CmAddrChoice c = choose_cm_address(addrs, ip("192.168.1.5"), AF_INET, false, 1);
  EXPECT_EQ(c.index, 0) << c.reason;
  EXPECT_NE(c.reason.find("no IPv4 address"), std::string::npos) << c.reason;
  // A connector's source must be of the listener's family.
  c = choose_cm_address(addrs, ip("192.168.1.5"), AF_INET, true, 1);
  EXPECT_EQ(c.index, -1);
  EXPECT_NE(c.reason.find("no IPv4 address"), std::string::npos) << c.reason;
}

TEST(ChooseCmAddress, LinkLocalOnlyWhenItIsTheOutOfBandAddress) {
  // The one-VM bed: the veths have only link-local IPv6 addresses, and the out-of-band socket is
  // pinned to the port's own netdev: its link-local address is kept (bound with its scope id).
  std::vector<PortAddr> addrs = {port_addr("fe80::1", 0)};
  addrs[0].link_local = true;
  sockaddr_storage oob = ip("fe80::1");
  reinterpret_cast<sockaddr_in6*>(&oob)->sin6_scope_id = 4;
  CmAddrChoice c = choose_cm_address(addrs, oob, AF_INET6, false, 0);
  EXPECT_EQ(c.index, 0) << c.reason;
  EXPECT_TRUE(c.kept);
  // What to bind is the out-of-band address itself, with its scope id (the GID has none).
  EXPECT_EQ(reinterpret_cast<const sockaddr_in6*>(&c.addr)->sin6_scope_id, 4u);
  // Another out-of-band address: a link-local GID has no scope and is never picked.
  c = choose_cm_address(addrs, ip("fe80::2"), AF_INET6, false, 0);
  EXPECT_EQ(c.index, -1) << c.reason;
  EXPECT_NE(c.reason.find("no IP address but link-local"), std::string::npos) << c.reason;
  // A connector's own out-of-band address of another family than the listener's is not kept.
  addrs = {port_addr("10.0.0.2", 1), port_addr("fd00::2", 2)};
  c = choose_cm_address(addrs, ip("10.0.0.2"), AF_INET6, true, 1);
  EXPECT_EQ(c.index, 1) << c.reason;
  EXPECT_FALSE(c.kept);
}

TEST(ChooseCmAddress, NoAddressSaysSo) {
  // InfiniBand without IPoIB.
  const CmAddrChoice c = choose_cm_address({}, ip("192.168.1.5"), AF_INET, false, 0);
  EXPECT_EQ(c.index, -1);
  EXPECT_NE(c.reason.find("no IP address"), std::string::npos) << c.reason;
}

}  // namespace
}  // namespace sluice
