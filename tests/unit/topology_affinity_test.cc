// SLUICE_NIC_AFFINITY ordering and the SLUICE_GPU_NIC_MAP override parser.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sluice/topology/affinity.h"

namespace {

using namespace sluice::topo;

Topology load(const std::string& name) {
  auto r = Topology::load_xml_file(std::string(SLUICE_FIXTURES_DIR) + "/" + name);
  if (!r.is_ok()) {
    ADD_FAILURE() << r.status().message();
    std::abort();
  }
  return std::move(r).value();
}

TEST(AffinityMode, Parse) {
  EXPECT_EQ(parse_affinity_mode("").value(), AffinityMode::kOff);
  EXPECT_EQ(parse_affinity_mode("off").value(), AffinityMode::kOff);
  EXPECT_EQ(parse_affinity_mode(" AUTO ").value(), AffinityMode::kAuto);
  auto bad = parse_affinity_mode("nearest");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("nearest"), std::string::npos);
}

TEST(GpuNicMap, ParsesBusIdsAndIndexes) {
  auto m = parse_gpu_nic_map(" 0000:1b:00.0 = mlx5_0, mlx5_1 ; 3d:00.0=mlx5_2;2=mlx5_3:1; ");
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  ASSERT_EQ(m.value().entries.size(), 3u);
  EXPECT_EQ(m.value().entries[0].gpu_bus_id, "0000:1b:00.0");
  EXPECT_EQ(m.value().entries[0].nics, (std::vector<std::string>{"mlx5_0", "mlx5_1"}));
  EXPECT_EQ(m.value().entries[1].gpu_bus_id, "0000:3d:00.0");
  EXPECT_EQ(m.value().entries[2].gpu_index, 2);
  EXPECT_EQ(m.value().entries[2].nics, std::vector<std::string>{"mlx5_3:1"});
  EXPECT_TRUE(parse_gpu_nic_map("0=mlx5_0:255,mlx5_1:01").is_ok());
  EXPECT_TRUE(parse_gpu_nic_map("").value().empty());
  EXPECT_TRUE(parse_gpu_nic_map("   ").value().empty());
}

TEST(GpuNicMap, SyntaxErrors) {
  for (const char* bad : {"mlx5_0", "0=", "=mlx5_0", "0=mlx5_0,,mlx5_1", "zz:00.0=mlx5_0",
                          "0=mlx5 0", "0=mlx5_0:x", "0=mlx5_0;0=mlx5_1", "1b:00.0=a;0000:1b:00.0=b",
                          "0=mlx5_0:0", "0=mlx5_0:00", "0=mlx5_0:256", "0=mlx5_0:1000"}) {
    auto m = parse_gpu_nic_map(bad);
    EXPECT_FALSE(m.is_ok()) << bad;
    if (!m.is_ok()) {
      EXPECT_NE(m.status().message().find("SLUICE_GPU_NIC_MAP"), std::string::npos);
    }
  }
}

TEST(GpuNicMap, ResolveNamesUnknownGpusAndNics) {
  Topology t = load("hgx-8gpu-2socket-switches.xml");
  std::vector<std::string> nics = {"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"};
  const std::string text = "0=mlx5_2;0000:94:00.0=mlx5_1:1";
  auto ok = parse_gpu_nic_map(text, t, nics);
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  const GpuNicMap& map = ok.value();
  ASSERT_EQ(map.entries.size(), 2u);
  EXPECT_EQ(map.entries[0].gpu_bus_id, std::string("0000:13:00.0"));
  EXPECT_EQ(map.entries[1].gpu_index, 7);
  EXPECT_EQ(map.to_string(), "0000:13:00.0=mlx5_2;0000:94:00.0=mlx5_1:1");

  auto bad = parse_gpu_nic_map("0=mlx5_9,mlx5_0;9=mlx5_1;0000:99:00.0=mlx5_7", t, nics);
  ASSERT_FALSE(bad.is_ok());
  const std::string msg = bad.status().message();
  EXPECT_NE(msg.find("mlx5_9"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mlx5_7"), std::string::npos) << msg;
  EXPECT_NE(msg.find("9"), std::string::npos) << msg;
  EXPECT_NE(msg.find("0000:99:00.0"), std::string::npos) << msg;

  auto dup = parse_gpu_nic_map("0=mlx5_2;0000:13:00.0=mlx5_3", t, nics);
  EXPECT_FALSE(dup.is_ok());
}

TEST(AffinityOrder, GpuGetsItsShareFirst) {
  Topology t = load("spread-2gpu-4nic-rxe.xml");
  std::vector<std::string> nics = {"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "rxe0"};
  AffinityRequest r0{"0000:43:00.0", {}};
  AffinityRequest r1{"43:00.0", {}};
  auto o0 = order_nics(t, nics, r0);
  EXPECT_EQ(o0.nics, (std::vector<std::string>{"mlx5_3", "mlx5_1", "mlx5_2", "mlx5_0", "rxe0"}));
  EXPECT_EQ(order_nics(t, nics, r1).nics, o0.nics);
  AffinityRequest g1{"0000:44:00.0", {}};
  EXPECT_EQ(order_nics(t, nics, g1).nics,
            (std::vector<std::string>{"mlx5_2", "mlx5_0", "mlx5_3", "mlx5_1", "rxe0"}));
  EXPECT_NE(o0.reason.find("GPU 0"), std::string::npos);
}

TEST(AffinityOrder, FarNicsAfterNearOnes) {
  Topology t = load("hgx-8gpu-2socket-switches.xml");
  std::vector<std::string> nics = {"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"};
  auto o = order_nics(t, nics, AffinityRequest{"0000:94:00.0", {}});
  // GPU7: mlx5_1 PIX, mlx5_0 NODE, then the other socket in bus order.
  EXPECT_EQ(o.nics, (std::vector<std::string>{"mlx5_1", "mlx5_0", "mlx5_2", "mlx5_3"}));
  // Port suffixes are kept.
  auto p = order_nics(t, {"mlx5_2:1", "mlx5_0:1"}, AffinityRequest{"0000:84:00.0", {}});
  EXPECT_EQ(p.nics, (std::vector<std::string>{"mlx5_0:1", "mlx5_2:1"}));
}

TEST(AffinityOrder, CpuBindingWithoutGpu) {
  Topology t = load("hgx-8gpu-2socket-switches.xml");
  std::vector<std::string> nics = {"mlx5_2", "mlx5_3", "mlx5_0", "mlx5_1", "rxe0"};
  // Bound to socket 1's CPUs (4-7): socket-1 NICs first, original order kept within a group.
  auto o = order_nics(t, nics, AffinityRequest{"", {5, 6}});
  EXPECT_EQ(o.nics, (std::vector<std::string>{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "rxe0"}));
  // Spanning both sockets: every NIC intersects, none contains it: order unchanged.
  auto s = order_nics(t, nics, AffinityRequest{"", {3, 4}});
  EXPECT_EQ(s.nics, nics);
  // Nothing known: unchanged.
  EXPECT_EQ(order_nics(t, nics, AffinityRequest{}).nics, nics);
  // A GPU the topology does not know falls back to the CPU binding.
  auto u = order_nics(t, nics, AffinityRequest{"0000:ff:00.0", {0}});
  EXPECT_EQ(u.nics, (std::vector<std::string>{"mlx5_2", "mlx5_3", "mlx5_0", "mlx5_1", "rxe0"}));
}

TEST(AffinityOrder, OverrideWins) {
  Topology t = load("hgx-8gpu-2socket-switches.xml");
  std::vector<std::string> nics = {"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"};
  auto m = parse_gpu_nic_map("0=mlx5_1,mlx5_0", t, nics);
  ASSERT_TRUE(m.is_ok());
  auto o = order_nics(t, nics, AffinityRequest{"0000:13:00.0", {}}, &m.value());
  EXPECT_EQ(o.nics, (std::vector<std::string>{"mlx5_1", "mlx5_0", "mlx5_2", "mlx5_3"}));
  EXPECT_NE(o.reason.find("SLUICE_GPU_NIC_MAP"), std::string::npos);
  // Another GPU without an entry: automatic order.
  auto a = order_nics(t, nics, AffinityRequest{"0000:23:00.0", {}}, &m.value());
  EXPECT_EQ(a.nics.front(), "mlx5_3");
}

}  // namespace
