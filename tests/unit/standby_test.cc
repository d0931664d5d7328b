// A primary with a standby (issue 20, docs/standby.md): the rule that picks each device's standby
// (sluice/core/base/standby.h) on made-up device lists, then with the nearness of the topology
// (sluice/topology/standby.h) on Sluice's fixtures (tests/fixtures) and the real machines in
// ../shared/topologies (skipped where that folder is absent).
#include "sluice/core/base/standby.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "sluice/topology/standby.h"
#include "sluice/topology/topology.h"

namespace {

using sluice::standby::Candidate;
using sluice::standby::Choice;
using sluice::standby::MapEntry;
using sluice::standby::Nearness;
using sluice::standby::NearnessFn;
using sluice::topo::Topology;

constexpr int kHost = 0x1, kCuda = 0x2;

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

Candidate dev(const std::string& name, const std::string& link = "RoCE", int ptr = kHost,
              bool active = true, std::string adapter = "") {
  if (adapter.empty()) adapter = name.substr(0, name.find(':'));
  return {name, adapter, link, active, ptr};
}

// Nearness from a table: near[a][b].
NearnessFn table(std::vector<std::vector<Nearness>> near) {
  return [near](int a, int b) { return near[a][b]; };
}

TEST(Standby, TheOnlyOtherDeviceOfUnknownNearness) {
  // The one-VM bed: two rxe devices, no topology places them.
  const auto c = sluice::standby::choose({dev("rxe0"), dev("rxe1")}, {});
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].standby, 1);
  EXPECT_EQ(c[1].standby, 0);
  EXPECT_EQ(c[0].nearness, Nearness::kUnknown);
  EXPECT_EQ(c[0].reason, "rxe1: the only other RoCE device (nearness unknown: no topology)");
  EXPECT_EQ(c[1].reason, "rxe0: the only other RoCE device (nearness unknown: no topology)");
  const auto t = sluice::standby::choose({dev("rxe0"), dev("rxe1")},
                                         [](int, int) { return Nearness::kUnknown; });
  EXPECT_TRUE(has(t[0].reason, "(nearness unknown: the topology does not place them)"))
      << t[0].reason;
}

TEST(Standby, OneDeviceOrNoneEligibleGivesNoStandbyAndSaysWhy) {
  EXPECT_EQ(sluice::standby::choose({dev("mlx5_0", "InfiniBand")}, {})[0].reason,
            "none: no other usable InfiniBand device");
  // Another link layer, a port that is down, a device without GPUDirect for a primary with it.
  const auto c = sluice::standby::choose(
      {dev("mlx5_0", "InfiniBand", kHost | kCuda), dev("mlx5_1", "RoCE", kHost | kCuda),
       dev("mlx5_2", "InfiniBand", kHost | kCuda, false), dev("mlx5_3", "InfiniBand", kHost)},
      {});
  EXPECT_EQ(c[0].standby, -1);
  EXPECT_EQ(c[0].reason,
            "none: no other usable InfiniBand device (mlx5_1: link layer RoCE, not InfiniBand; "
            "mlx5_2: port not ACTIVE; mlx5_3: does not take every kind of memory mlx5_0 takes "
            "(ptrSupport 0x1, mlx5_0 0x3))");
  EXPECT_EQ(c[1].standby, -1);  // the only RoCE device
  EXPECT_EQ(c[2].standby, -1);
  EXPECT_EQ(c[2].reason, "none: mlx5_2's port is not ACTIVE");
  // A host-only primary may have a standby that also takes CUDA memory.
  EXPECT_EQ(c[3].standby, 0);
}

TEST(Standby, NearestFirstThenLowestIndex) {
  using N = Nearness;
  // 0 is the primary; 1 is on another socket, 2 same socket, 3 same NUMA node, 4 same NUMA node.
  const N u = N::kUnknown;
  auto near = table({{u, N::kFar, N::kSocket, N::kNuma, N::kNuma},
                     {N::kFar, u, N::kFar, N::kFar, N::kFar},
                     {N::kSocket, N::kFar, u, N::kSocket, N::kSocket},
                     {N::kNuma, N::kFar, N::kSocket, u, N::kSwitch},
                     {N::kNuma, N::kFar, N::kSocket, N::kSwitch, u}});
  std::vector<Candidate> d;
  for (int i = 0; i < 5; ++i) d.push_back(dev("mlx5_" + std::to_string(i), "InfiniBand"));
  const auto c = sluice::standby::choose(d, near);
  EXPECT_EQ(c[0].standby, 3);
  EXPECT_EQ(c[0].nearness, N::kNuma);
  EXPECT_EQ(c[0].reason,
            "mlx5_3: same NUMA node as mlx5_0 (nearest of 4 other InfiniBand devices, first by "
            "index of 2 as near)");
  EXPECT_EQ(c[1].standby, 0);  // everything is far from 1: the lowest index
  EXPECT_EQ(c[1].reason,
            "mlx5_0: on another socket than mlx5_1 (nearest of 4 other InfiniBand devices, first "
            "by index of 4 as near)");
  EXPECT_EQ(c[2].standby, 0);
  EXPECT_EQ(c[2].nearness, N::kSocket);
  EXPECT_EQ(c[3].standby, 4);
  EXPECT_EQ(c[3].reason,
            "mlx5_4: same PCI switch as mlx5_3 (nearest of 4 other InfiniBand devices)");
  EXPECT_EQ(c[4].standby, 3);
  // A device the topology places wins over one it does not; unknown ones go by index.
  auto part = table({{u, u, N::kFar}, {u, u, u}, {N::kFar, u, u}});
  const auto p = sluice::standby::choose({dev("a"), dev("b"), dev("c")}, part);
  EXPECT_EQ(p[0].standby, 2);
  EXPECT_EQ(p[1].standby, 0);
  EXPECT_EQ(p[1].reason,
            "a: the first of 2 other RoCE devices by index (nearness unknown: the topology does "
            "not place them)");
}

TEST(Standby, AnotherPortOfTheSameNicIsNearest) {
  // Ports of one adapter, then a NIC below the same switch: the port wins without the topology.
  auto near = [](int, int) { return Nearness::kSwitch; };
  const auto c = sluice::standby::choose(
      {dev("mlx5_0:1", "InfiniBand"), dev("mlx5_1", "InfiniBand"), dev("mlx5_0:2", "InfiniBand")},
      near);
  EXPECT_EQ(c[0].standby, 2);
  EXPECT_EQ(c[0].nearness, Nearness::kSameNic);
  EXPECT_EQ(c[0].reason, "mlx5_0:2: same NIC as mlx5_0:1 (nearest of 2 other InfiniBand devices)");
  EXPECT_EQ(c[1].standby, 0);
  EXPECT_EQ(c[2].standby, 0);
}

TEST(Standby, MapNamesAPairOrNone) {
  auto map = sluice::standby::parse_map(" rxe0 = rxe2 , rxe1=none,rxe2=mlx5_0,nic9=rxe0");
  ASSERT_TRUE(map.is_ok()) << map.status().message();
  ASSERT_EQ(map.value().size(), 4u);
  EXPECT_EQ(map.value()[0].primary, "rxe0");
  EXPECT_EQ(map.value()[0].standby, "rxe2");
  const std::vector<Candidate> d = {dev("rxe0"), dev("rxe1"), dev("rxe2"),
                                    dev("mlx5_0", "InfiniBand")};
  const auto c = sluice::standby::choose(d, {}, map.value());
  EXPECT_EQ(c[0].standby, 2);
  EXPECT_EQ(c[0].reason, "rxe2: SLUICE_STANDBY_MAP rxe0=rxe2 (nearness unknown)");
  EXPECT_EQ(c[1].standby, -1);
  EXPECT_EQ(c[1].reason, "none: SLUICE_STANDBY_MAP rxe1=none");
  EXPECT_EQ(c[2].standby, -1);  // named, but another link layer
  EXPECT_EQ(c[2].reason,
            "none: SLUICE_STANDBY_MAP rxe2=mlx5_0, but mlx5_0 cannot stand by: link layer "
            "InfiniBand, not RoCE");
  EXPECT_EQ(c[3].standby, -1);  // not named: the rule (no other InfiniBand device)
  EXPECT_EQ(sluice::standby::unmatched_primaries(d, map.value()), std::vector<std::string>{"nic9"});
  const auto gone = sluice::standby::choose({dev("rxe0"), dev("rxe1")}, {},
                                            sluice::standby::parse_map("rxe0=rxe7").value());
  EXPECT_EQ(gone[0].reason, "none: SLUICE_STANDBY_MAP rxe0=rxe7 names no usable device");
  EXPECT_EQ(gone[1].standby, 0);
}

TEST(Standby, MapSyntax) {
  EXPECT_TRUE(sluice::standby::parse_map("").value().empty());
  EXPECT_TRUE(sluice::standby::parse_map("  ").value().empty());
  EXPECT_EQ(sluice::standby::parse_map("mlx5_0:1=mlx5_0:2").value()[0].standby, "mlx5_0:2");
  for (const char* bad : {"rxe0", "rxe0=", "=rxe1", "rxe0=rxe0", "a=b,a=c", "a=b=c", "a=b,,c=d"}) {
    SCOPED_TRACE(bad);
    EXPECT_FALSE(sluice::standby::parse_map(bad).is_ok());
  }
}

// ---- The topology's nearness, on fixtures and real machines ------------------------------------

std::string fixture(const std::string& f) {
  return std::string(SLUICE_FIXTURES_DIR) + "/" + f;
}
std::string shared(const std::string& f) {
  return std::string(SLUICE_SHARED_TOPOLOGIES_DIR) + "/" + f;
}

#define LOAD_OR_SKIP(var, path)                                          \
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent"; \
  auto var##_r = Topology::load_xml_file(path);                          \
  ASSERT_TRUE(var##_r.is_ok()) << var##_r.status().message();            \
  const Topology& var = var##_r.value()

// Every NIC of the topology, in its order, as an active device of the link layer `link_of` gives.
struct Machine {
  std::vector<Candidate> devs;
  std::vector<Choice> choices;
  std::string standby_of(const std::string& name) const {
    for (size_t i = 0; i < devs.size(); ++i)
      if (devs[i].name == name)
        return choices[i].standby < 0 ? "none" : devs[choices[i].standby].name;
    return "?";
  }
  const Choice& choice(const std::string& name) const {
    for (size_t i = 0; i < devs.size(); ++i)
      if (devs[i].name == name) return choices[i];
    static const Choice none;
    ADD_FAILURE() << name;
    return none;
  }
};
Machine machine(const Topology& t, std::string (*link_of)(const std::string&) = nullptr,
                const std::vector<std::string>& down = {}) {
  Machine m;
  for (const auto& n : t.nics()) {
    const bool active = std::find(down.begin(), down.end(), n.name) == down.end();
    m.devs.push_back(dev(n.name, link_of ? link_of(n.name) : "InfiniBand", kHost, active));
  }
  m.choices = sluice::standby::choose(m.devs, [&](int a, int b) {
    return sluice::topo::nic_nearness(t, m.devs[a].adapter, m.devs[b].adapter);
  });
  return m;
}

TEST(StandbyTopology, Hgx8GpuTwoSocketsTheOtherNicOfTheSocket) {
  LOAD_OR_SKIP(t, fixture("hgx-8gpu-2socket-switches.xml"));
  // One NIC per switch, two switches (two host bridges) per socket: the partner on the socket.
  EXPECT_EQ(sluice::topo::nic_nearness(t, "mlx5_2", "mlx5_3"), Nearness::kNuma);
  EXPECT_EQ(sluice::topo::nic_nearness(t, "mlx5_2", "mlx5_0"), Nearness::kFar);
  const Machine m = machine(t);
  EXPECT_EQ(m.standby_of("mlx5_0"), "mlx5_1");
  EXPECT_EQ(m.standby_of("mlx5_1"), "mlx5_0");
  EXPECT_EQ(m.standby_of("mlx5_2"), "mlx5_3");
  EXPECT_EQ(m.standby_of("mlx5_3"), "mlx5_2");
  EXPECT_EQ(m.choice("mlx5_2").reason,
            "mlx5_3: same NUMA node as mlx5_2 (nearest of 3 other InfiniBand devices)");
}

TEST(StandbyTopology, DualPortNicTheOtherFunctionUnlessItIsDown) {
  LOAD_OR_SKIP(t, fixture("dual-port-nic-pci-domains.xml"));
  EXPECT_EQ(sluice::topo::nic_nearness(t, "mlx5_4", "mlx5_9"), Nearness::kSameNic);
  Machine m = machine(t);
  EXPECT_EQ(m.standby_of("mlx5_4"), "mlx5_9");
  EXPECT_EQ(m.choice("mlx5_4").nearness, Nearness::kSameNic);
  EXPECT_EQ(m.standby_of("mlx5_0"), "mlx5_4");  // same NUMA node; mlx5_9 too, later by index
  EXPECT_EQ(m.choice("mlx5_0").nearness, Nearness::kNuma);
  // mlx5_9's port is down in the file: mlx5_4 falls back to mlx5_0.
  m = machine(t, nullptr, {"mlx5_9"});
  EXPECT_EQ(m.standby_of("mlx5_4"), "mlx5_0");
  EXPECT_EQ(m.standby_of("mlx5_9"), "none");
}

std::string rxe_is_roce(const std::string& n) {
  return n.rfind("rxe", 0) == 0 ? "RoCE" : "InfiniBand";
}

TEST(StandbyTopology, SpreadFourNicsBelowOneSwitchAndAVirtualDevice) {
  LOAD_OR_SKIP(t, fixture("spread-2gpu-4nic-rxe.xml"));
  EXPECT_EQ(sluice::topo::nic_nearness(t, "mlx5_0", "mlx5_3"), Nearness::kSwitch);
  EXPECT_EQ(sluice::topo::nic_nearness(t, "mlx5_0", "rxe0"), Nearness::kUnknown);
  const Machine m = machine(t, rxe_is_roce);
  // All four below one switch: the first other NIC in the topology's (bus-id) order.
  EXPECT_EQ(m.standby_of("mlx5_3"), "mlx5_2");
  EXPECT_EQ(m.standby_of("mlx5_0"), "mlx5_3");
  EXPECT_EQ(m.choice("mlx5_0").reason,
            "mlx5_3: same PCI switch as mlx5_0 (nearest of 3 other InfiniBand devices, first by "
            "index of 3 as near)");
  EXPECT_EQ(m.standby_of("rxe0"), "none");  // the only RoCE device
}

TEST(StandbyTopology, DellXe8640TheOtherPortOfTheConnectX6) {
  LOAD_OR_SKIP(t, shared("dell-xe8640-4xH100-4xmlx5.xml"));
  const Machine m = machine(t);  // every port taken as ACTIVE (the file has three down)
  EXPECT_EQ(m.standby_of("mlx5_0"), "mlx5_1");
  EXPECT_EQ(m.standby_of("mlx5_1"), "mlx5_0");
  EXPECT_EQ(m.choice("mlx5_0").nearness, Nearness::kSameNic);
  // The ConnectX-7s: each is alone on its NUMA node; the ConnectX-6 is on mlx5_2's socket.
  EXPECT_EQ(m.standby_of("mlx5_2"), "mlx5_0");
  EXPECT_EQ(m.choice("mlx5_2").nearness, Nearness::kSocket);
  EXPECT_EQ(m.choice("mlx5_3").nearness, Nearness::kFar);
  EXPECT_EQ(m.standby_of("mlx5_3"), "mlx5_0");
}

std::string efa_or_ib(const std::string& n) {
  return n.rfind("rdmap", 0) == 0 ? "EFA" : "InfiniBand";
}

TEST(StandbyTopology, AwsP6B200SwitchPartnersAndTheTwoConnectX7) {
  LOAD_OR_SKIP(t, shared("aws-p6-b200.48xlarge-8xB200-8xEFA-2xCX7.xml"));
  const Machine m = machine(t, efa_or_ib);
  // Two EFA per switch: each other's standby. The two ConnectX-7 (on one switch) likewise; an EFA
  // never stands by for a ConnectX-7 (another link layer).
  EXPECT_EQ(m.standby_of("rdmap79s0"), "rdmap80s0");
  EXPECT_EQ(m.standby_of("rdmap80s0"), "rdmap79s0");
  EXPECT_EQ(m.standby_of("rdmap132s0"), "rdmap133s0");
  EXPECT_EQ(m.choice("rdmap79s0").nearness, Nearness::kSwitch);
  EXPECT_EQ(m.standby_of("ibp115s0f0"), "ibp116s0f0");
  EXPECT_EQ(m.standby_of("ibp116s0f0"), "ibp115s0f0");
  EXPECT_EQ(m.choice("ibp115s0f0").nearness, Nearness::kSwitch);
  EXPECT_EQ(m.choice("ibp115s0f0").reason,
            "ibp116s0f0: same PCI switch as ibp115s0f0 (the only other InfiniBand device)");
}

TEST(StandbyTopology, AwsP4dFlatPciTheOtherNicOfTheNumaNode) {
  LOAD_OR_SKIP(t, shared("aws-p4d.24xlarge-8xA100-4xEFA.xml"));
  const Machine m = machine(t);
  EXPECT_EQ(m.standby_of("rdmap16s27"), "rdmap32s27");
  EXPECT_EQ(m.standby_of("rdmap32s27"), "rdmap16s27");
  EXPECT_EQ(m.standby_of("rdmap144s27"), "rdmap160s27");
  EXPECT_EQ(m.standby_of("rdmap160s27"), "rdmap144s27");
  EXPECT_EQ(m.choice("rdmap16s27").nearness, Nearness::kNuma);
}

TEST(StandbyTopology, OneNicMachinesHaveNone) {
  for (const char* f : {"aws-g4dn.metal-8xT4-1xEFA.xml", "deep-est-esb-1xV100-1xCX5.xml"}) {
    SCOPED_TRACE(f);
    if (!std::filesystem::exists(shared(f))) GTEST_SKIP() << f << " absent";
    auto t = Topology::load_xml_file(shared(f));
    ASSERT_TRUE(t.is_ok());
    const Machine m = machine(t.value());
    ASSERT_EQ(m.devs.size(), 1u);
    EXPECT_EQ(m.choices[0].reason, "none: no other usable InfiniBand device");
  }
}

}  // namespace
