// The fused members' weights (sluice/topology/fusion.h) on every real machine in
// ../shared/topologies/, and the would-be fusions each shows. The classes come from that folder's
// README; the weights follow from them: best tier carries by path bandwidth, worse tiers are
// fallback only. Skipped, with the reason, where the folder is absent.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "sluice/topology/fusion.h"
#include "sluice/topology/topology.h"

namespace {

using sluice::topo::FusionPath;
using sluice::topo::MemberWeight;
using sluice::topo::PathClass;
using sluice::topo::Topology;

std::string path_of(const std::string& file) {
  return std::string(SLUICE_SHARED_TOPOLOGIES_DIR) + "/" + file;
}

#define LOAD_OR_SKIP(var, file)                                                   \
  if (!std::filesystem::exists(path_of(file))) GTEST_SKIP() << file << " absent"; \
  auto var##_r = Topology::load_xml_file(path_of(file));                          \
  ASSERT_TRUE(var##_r.is_ok()) << var##_r.status().message();                     \
  const Topology& var = var##_r.value()

int gpu(const Topology& t, const char* bus) {
  const int g = t.find_gpu(bus);
  EXPECT_GE(g, 0) << bus;
  return g;
}

std::vector<uint32_t> weights(const std::vector<MemberWeight>& w) {
  std::vector<uint32_t> out;
  for (const auto& m : w) out.push_back(m.weight);
  return out;
}

std::vector<std::string> names(const Topology& t, const std::vector<int>& nics) {
  std::vector<std::string> out;
  for (int n : nics) out.push_back(t.nics()[n].name);
  return out;
}

TEST(FusionWeights, DellXe8640PortsOfOneAdapterShareSysMemberIsFallback) {
  LOAD_OR_SKIP(t, "dell-xe8640-4xH100-4xmlx5.xml");
  const int g0 = gpu(t, "0000:4e:00.0");
  // G0: mlx5_0 and mlx5_1, the two functions of one ConnectX-6, both PIX: equal shares.
  auto w = sluice::topo::weigh_members(t, g0, {{"mlx5_0", 200000}, {"mlx5_1", 200000}});
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].cls, PathClass::kPIX);
  EXPECT_EQ(w[1].cls, PathClass::kPIX);
  EXPECT_EQ(w[0].weight, w[1].weight);
  EXPECT_GT(w[0].weight, 0u);
  // G0 fusing its PIX port with mlx5_3 (SYS, other socket): mlx5_3 is fallback only.
  w = sluice::topo::weigh_members(t, g0, {{"mlx5_0", 200000}, {"mlx5_3", 400000}});
  EXPECT_GT(w[0].weight, 0u);
  EXPECT_EQ(w[1].weight, 0u);
  EXPECT_EQ(w[1].cls, PathClass::kSYS);
  EXPECT_NE(w[1].reason.find("fallback only"), std::string::npos) << w[1].reason;
  EXPECT_NE(w[1].reason.find("mlx5_0"), std::string::npos) << w[1].reason;
  // G1: mlx5_2 PIX, mlx5_0 SYS (same package): SYS still loses.
  w = sluice::topo::weigh_members(t, gpu(t, "0000:5f:00.0"),
                                  {{"mlx5_0", 200000}, {"mlx5_2", 400000}});
  EXPECT_EQ(weights(w)[0], 0u);
  EXPECT_GT(weights(w)[1], 0u);
  // G2 reaches every NIC at SYS: one tier, so all carry, by path bandwidth (port speeds here).
  w = sluice::topo::weigh_members(t, gpu(t, "0000:cb:00.0"),
                                  {{"mlx5_2", 400000}, {"mlx5_3", 200000}});
  EXPECT_GT(w[0].weight, 0u);
  EXPECT_GT(w[1].weight, 0u);
  EXPECT_GE(w[0].weight, w[1].weight);
  // Would-be fusions: the two functions of the ConnectX-6 only (mlx5_2, mlx5_3 are alone).
  auto c = sluice::topo::fusion_candidates(t);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(names(t, c[0].nics), (std::vector<std::string>{"mlx5_0", "mlx5_1"}));
  EXPECT_NE(c[0].why.find("one adapter"), std::string::npos) << c[0].why;
}

TEST(FusionWeights, AwsP6B200SwitchLocalEfaShareTheLinkBoundsTheConnectX7) {
  LOAD_OR_SKIP(t, "aws-p6-b200.48xlarge-8xB200-8xEFA-2xCX7.xml");
  const int g4 = gpu(t, "0000:75:00.0");
  // G4 has four PIX NICs: two EFA (PCIe 63 GB/s) and two ConnectX-7 whose PCIe link reads
  // 3.94 GB/s (31.5 Gb/s), which bounds them whatever their port speed.
  auto w = sluice::topo::weigh_members(
      t, g4, {{"rdmap113s0", 200000}, {"rdmap114s0", 200000}, {"ibp115s0f0", 400000}});
  ASSERT_EQ(w.size(), 3u);
  for (const auto& m : w) EXPECT_EQ(m.cls, PathClass::kPIX) << m.reason;
  EXPECT_EQ(w[0].weight, 200u);
  EXPECT_EQ(w[1].weight, 200u);
  EXPECT_EQ(w[2].weight, 32u);  // round(3.94 x 8)
  EXPECT_NE(w[2].reason.find("PCIe 32 Gb/s"), std::string::npos) << w[2].reason;
  // G0: its own switch's EFA (PIX) with the next switch's (NODE): NODE is fallback only.
  w = sluice::topo::weigh_members(t, gpu(t, "0000:51:00.0"),
                                  {{"rdmap79s0", 200000}, {"rdmap96s0", 200000}});
  EXPECT_EQ(weights(w), (std::vector<uint32_t>{200, 0}));
  EXPECT_EQ(w[1].cls, PathClass::kNODE);
  // Would-be fusions: the NICs below each of the four switches.
  auto c = sluice::topo::fusion_candidates(t);
  ASSERT_EQ(c.size(), 4u);
  EXPECT_EQ(names(t, c[0].nics), (std::vector<std::string>{"rdmap79s0", "rdmap80s0"}));
  EXPECT_EQ(names(t, c[2].nics),
            (std::vector<std::string>{"rdmap113s0", "rdmap114s0", "ibp115s0f0", "ibp116s0f0"}));
  for (const auto& g : c) EXPECT_NE(g.why.find("PCIe switch"), std::string::npos) << g.why;
}

TEST(FusionWeights, AwsP4dPhbAndNodeAreOneTierSysIsFallback) {
  LOAD_OR_SKIP(t, "aws-p4d.24xlarge-8xA100-4xEFA.xml");
  const int g0 = gpu(t, "0000:10:1c.0");
  auto w = sluice::topo::weigh_members(
      t, g0, {{"rdmap16s27", 100000}, {"rdmap32s27", 100000}, {"rdmap144s27", 100000}});
  EXPECT_EQ(w[0].cls, PathClass::kPHB);
  EXPECT_EQ(w[1].cls, PathClass::kNODE);
  EXPECT_EQ(w[2].cls, PathClass::kSYS);
  EXPECT_GT(w[0].weight, 0u);
  EXPECT_EQ(w[0].weight, w[1].weight);  // NCCL counts both as PHB: through the CPU
  EXPECT_EQ(w[2].weight, 0u);
  EXPECT_TRUE(sluice::topo::fusion_candidates(t).empty());  // every NIC on its own host bridge
}

TEST(FusionWeights, AwsG4dnOneNicCarriesEverythingEvenAtSys) {
  LOAD_OR_SKIP(t, "aws-g4dn.metal-8xT4-1xEFA.xml");
  auto w = sluice::topo::weigh_members(t, gpu(t, "0000:18:00.0"), {{"rdmap197s0", 100000}});
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].cls, PathClass::kSYS);
  EXPECT_EQ(w[0].weight, 100u);
  EXPECT_TRUE(sluice::topo::fusion_candidates(t).empty());
}

TEST(FusionWeights, DeepEstOneNicAndAnUnknownMemberFallBackToBandwidth) {
  LOAD_OR_SKIP(t, "deep-est-esb-1xV100-1xCX5.xml");
  ASSERT_EQ(t.nics().size(), 1u);
  const std::string nic = t.nics()[0].name;
  // A member the topology does not know (rxe) turns the whole set to bandwidth-only weights.
  auto w = sluice::topo::weigh_members(t, 0, {{nic, 100000}, {"rxe0", 100000}});
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].weight, 100u);
  EXPECT_EQ(w[1].weight, 100u);
  EXPECT_NE(w[1].reason.find("rxe0 is not in the topology"), std::string::npos) << w[1].reason;
  EXPECT_TRUE(sluice::topo::fusion_candidates(t).empty());
}

TEST(FusionWeights, Dgx2WithoutNicsAndWithoutAGpuWeighsByPortSpeed) {
  LOAD_OR_SKIP(t, "nvidia-dgx2-16xV100-no-rdma-nic.xml");
  auto w = sluice::topo::weigh_members(t, 0, {{"mlx5_0", 100000}, {"mlx5_1", 200000}});
  EXPECT_EQ(weights(w), (std::vector<uint32_t>{100, 200}));
  w = sluice::topo::weigh_members(t, -1, {{"mlx5_0", 100000}});
  EXPECT_NE(w[0].reason.find("no GPU known"), std::string::npos) << w[0].reason;
  EXPECT_TRUE(sluice::topo::fusion_candidates(t).empty());
}

}  // namespace
