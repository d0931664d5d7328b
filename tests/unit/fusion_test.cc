// NIC fusion's pure rules (core/src/comm/fusion.cc): what makeVDevice refuses and why, the merged
// properties, the weight override and the rail lists (core/src/base/fusion_spec.cc).
#include "../../core/src/comm/fusion.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sluice {
namespace {

FusionMember member(int index, const std::string& adapter, int port, bool roce, int speed) {
  FusionMember m;
  m.index = index;
  m.adapter = adapter;
  m.port = port;
  m.name = adapter + ":" + std::to_string(port);
  m.roce = roce;
  m.props.speed_mbps = speed;
  m.props.ptr_support = kPtrHost | kPtrCuda | kPtrDmabuf;
  m.props.reg_is_global = 1;
  m.props.max_comms = 1000;
  m.props.max_recvs = kMaxRecvs;
  m.props.max_p2p_bytes = size_t{1} << 30;
  m.props.max_coll_bytes = size_t{1} << 30;
  m.props.guid = 0x1000 + index;
  m.props.port = port;
  m.props.numa_node = 0;
  return m;
}

std::string refusal(const int* devs, int n, int n_phys, int n_all, int max, bool merge) {
  Status st = check_fusion_request(devs, n, n_phys, n_all, max, merge);
  EXPECT_FALSE(st.is_ok());
  return st.message();
}

TEST(FusionRequest, AcceptsTwoToTheLimit) {
  const int devs[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_TRUE(check_fusion_request(devs, 2, 8, 8, 4, true).is_ok());
  EXPECT_TRUE(check_fusion_request(devs, 4, 8, 8, 4, true).is_ok());
  EXPECT_TRUE(check_fusion_request(devs, 4, 8, 8, 8, true).is_ok());
}

// Issue 31: net v12 lets NCCL ask for up to 8 members, but a comm connects over at most 4; a
// fused device that connect would refuse (fatal to NCCL) is refused at makeVDevice instead (NCCL
// then uses the devices unfused).
TEST(FusionRequest, RefusesMoreMembersThanACommConnectsOverEvenWhereTheAbiAllowsEight) {
  const int devs[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  for (int n = 5; n <= 8; ++n) {
    const std::string m = refusal(devs, n, 8, 8, 8, true);
    EXPECT_NE(m.find("a Sluice comm runs over at most 4 member devices"), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(n) + " devices"), std::string::npos) << m;
  }
}

TEST(FusionRequest, RefusesTooManyWithTheVersionLimit) {
  const int devs[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  const std::string m = refusal(devs, 5, 8, 8, 4, true);
  EXPECT_NE(m.find("5 devices"), std::string::npos) << m;
  EXPECT_NE(m.find("at most 4"), std::string::npos) << m;
  // ndevs above the ABI's array (NCCL's devs[] holds max_members entries): refused without reading
  // past the array (the sanitizer pass caught the read of devs[8] here).
  EXPECT_FALSE(check_fusion_request(devs, 9, 9, 9, 8, true).is_ok());
  const std::string big = refusal(devs, 9, 9, 9, 8, true);
  EXPECT_NE(big.find("9 devices (0,1,2,3,4,5,6,7,...)"), std::string::npos) << big;
}

TEST(FusionRequest, RefusesWhenMergeNicsIsOff) {
  const int devs[2] = {0, 1};
  const std::string m = refusal(devs, 2, 2, 2, 4, false);
  EXPECT_NE(m.find("NCCL_IB_MERGE_NICS=0"), std::string::npos) << m;
  // One device is not a fusion: MERGE_NICS=0 does not forbid it (NCCL's transport agrees).
  EXPECT_TRUE(check_fusion_request(devs, 1, 2, 2, 4, false).is_ok());
}

TEST(FusionRequest, RefusesUnknownRepeatedAndFusedMembers) {
  const int unknown[2] = {0, 7};
  std::string m = refusal(unknown, 2, 2, 2, 4, true);
  EXPECT_NE(m.find("device 7 is unknown"), std::string::npos) << m;
  const int negative[2] = {-1, 0};
  EXPECT_NE(refusal(negative, 2, 2, 2, 4, true).find("unknown"), std::string::npos);
  const int twice[3] = {0, 1, 0};
  m = refusal(twice, 3, 2, 2, 4, true);
  EXPECT_NE(m.find("named twice"), std::string::npos) << m;
  const int fused[2] = {0, 2};  // index 2 = a fused device (2 physical, 1 virtual)
  m = refusal(fused, 2, 2, 3, 4, true);
  EXPECT_NE(m.find("itself a fused device"), std::string::npos) << m;
  EXPECT_NE(refusal(nullptr, 2, 2, 2, 4, true).find("NULL"), std::string::npos);
  EXPECT_NE(refusal(twice, 0, 2, 2, 4, true).find("no device"), std::string::npos);
}

TEST(FusionMembers, RefusesMixedLinkLayers) {
  std::vector<FusionMember> ms = {member(0, "mlx5_0", 1, false, 400000),
                                  member(1, "mlx5_1", 1, true, 400000)};
  Status st = check_fusion_members(ms);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("mixed link layers"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("mlx5_1:1 is RoCE"), std::string::npos) << st.message();
  ms[1].roce = false;
  EXPECT_TRUE(check_fusion_members(ms).is_ok());
}

TEST(FusionProps, MergesEveryFieldByItsRule) {
  std::vector<FusionMember> ms = {member(0, "mlx5_0", 1, true, 200000),
                                  member(1, "mlx5_1", 1, true, 400000)};
  ms[0].props.pci_path = "/sys/devices/pci0000:00/0000:00:01.0/0000:4e:00.0";
  ms[1].props.pci_path = "/sys/devices/pci0000:00/0000:00:02.0/0000:5e:00.0";
  ms[1].props.ptr_support = kPtrHost | kPtrCuda;  // no dma-buf on member 1
  ms[1].props.reg_is_global = 0;
  ms[1].props.force_flush = 1;
  ms[0].props.max_comms = 500;
  ms[1].props.max_recvs = 4;
  ms[1].props.max_p2p_bytes = size_t{1} << 20;
  ms[0].props.latency_us = 1.5f;
  ms[1].props.latency_us = 2.5f;
  ms[1].props.numa_node = 1;
  FusedProps fp;
  merge_properties(ms, {1, 2}, &fp);
  EXPECT_EQ(fp.name, "mlx5_0:1+mlx5_1:1");
  EXPECT_STREQ(fp.props.name, "mlx5_0:1+mlx5_1:1");
  EXPECT_EQ(fp.props.speed_mbps, 600000);
  EXPECT_EQ(fp.props.ptr_support, kPtrHost | kPtrCuda);  // every member's, not member 0's
  EXPECT_EQ(fp.props.reg_is_global, 0);
  EXPECT_EQ(fp.props.force_flush, 1);
  EXPECT_EQ(fp.props.max_comms, 500);
  EXPECT_EQ(fp.props.max_recvs, 4);
  EXPECT_EQ(fp.props.max_p2p_bytes, size_t{1} << 20);
  EXPECT_EQ(fp.props.max_coll_bytes, size_t{1} << 30);
  EXPECT_FLOAT_EQ(fp.props.latency_us, 2.5f);
  EXPECT_EQ(fp.props.numa_node, -1);
  EXPECT_EQ(fp.props.guid, 0x1000u);  // member 0's
  EXPECT_EQ(fp.props.port, 1);
  ASSERT_NE(fp.props.pci_path, nullptr);
  EXPECT_STREQ(fp.props.pci_path, ms[1].props.pci_path);  // the heaviest member's
  EXPECT_EQ(fp.rail, kNetIdUndef);
  EXPECT_EQ(fp.plane, kNetIdUndef);
  EXPECT_NE(fp.rail_reason.find("no member has a rail"), std::string::npos) << fp.rail_reason;
}

TEST(FusionProps, FallbackMembersAddNoSpeedAndEqualWeightsKeepMemberZerosPath) {
  std::vector<FusionMember> ms = {member(0, "a", 1, false, 100000),
                                  member(1, "b", 1, false, 100000)};
  ms[0].props.pci_path = "/p/a";
  ms[1].props.pci_path = "/p/b";
  FusedProps fp;
  merge_properties(ms, {1, 0}, &fp);
  EXPECT_EQ(fp.props.speed_mbps, 100000);
  merge_properties(ms, {5, 5}, &fp);
  EXPECT_EQ(fp.props.speed_mbps, 200000);
  EXPECT_STREQ(fp.props.pci_path, "/p/a");
  ms[0].props.pci_path = nullptr;  // virtual devices (rxe) have none
  merge_properties(ms, {1, 1}, &fp);
  EXPECT_EQ(fp.props.pci_path, nullptr);
}

TEST(FusionProps, RailIsTheSharedOnePlanesABitmask) {
  std::vector<FusionMember> ms = {member(0, "a", 1, false, 1), member(1, "b", 1, false, 1)};
  ms[0].rail = 3;
  ms[1].rail = 3;
  ms[0].plane = 0;
  ms[1].plane = 2;
  FusedProps fp;
  merge_properties(ms, {1, 1}, &fp);
  EXPECT_EQ(fp.rail, 3);
  EXPECT_EQ(fp.plane, 0b101);
  ms[1].rail = 4;
  ms[1].plane = kNetIdUndef;
  merge_properties(ms, {1, 1}, &fp);
  EXPECT_EQ(fp.rail, kNetIdUndef);
  EXPECT_EQ(fp.plane, kNetIdUndef);
  EXPECT_NE(fp.rail_reason.find("differ"), std::string::npos) << fp.rail_reason;
}

NamedList weights_list(const char* spec) {
  auto l = NamedList::parse(spec, NamedList::Kind::kWeights);
  EXPECT_TRUE(l.is_ok()) << l.status().message();
  return l.is_ok() ? l.value() : NamedList{};
}

TEST(FusionWeights, OverrideMustNameEveryMemberAndLeaveOneCarrier) {
  std::vector<FusionMember> ms = {member(0, "mlx5_0", 1, false, 400000),
                                  member(1, "mlx5_1", 1, false, 400000)};
  std::vector<uint32_t> w = {7, 7};
  std::vector<std::string> why = {"topology", "topology"};
  ASSERT_TRUE(apply_weight_override(weights_list(""), ms, &w, &why).is_ok());
  EXPECT_EQ(w, (std::vector<uint32_t>{7, 7}));
  EXPECT_EQ(why[0], "topology");

  ASSERT_TRUE(apply_weight_override(weights_list("mlx5_0=3, mlx5_1:1=0"), ms, &w, &why).is_ok());
  EXPECT_EQ(w, (std::vector<uint32_t>{3, 0}));
  EXPECT_EQ(why[1], "SLUICE_FUSION_WEIGHTS");

  Status st = apply_weight_override(weights_list("mlx5_0=3"), ms, &w, &why);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("but not mlx5_1:1"), std::string::npos) << st.message();
  st = apply_weight_override(weights_list("mlx5_0=0,mlx5_1=0"), ms, &w, &why);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("weight 0"), std::string::npos) << st.message();
  // Another port of the same adapter is not named by "mlx5_1:2".
  st = apply_weight_override(weights_list("mlx5_0=1,mlx5_1:2=1"), ms, &w, &why);
  EXPECT_FALSE(st.is_ok());
}

TEST(FusionWeights, AllFallbackFromTheProviderBecomesPortSpeed) {
  std::vector<FusionMember> ms = {member(0, "a", 1, false, 200000),
                                  member(1, "b", 1, false, 100000)};
  std::vector<uint32_t> w = {0, 0};
  std::vector<std::string> why(2);
  ASSERT_TRUE(apply_weight_override(weights_list(""), ms, &w, &why).is_ok());
  EXPECT_EQ(w, (std::vector<uint32_t>{200, 100}));
  const std::string line = describe_weights(ms, {3, 1, 0}, {"x", "y"});
  EXPECT_NE(line.find("a:1=3 (75%: x)"), std::string::npos) << line;
  EXPECT_NE(line.find("b:1=1 (25%: y)"), std::string::npos) << line;
  EXPECT_EQ(speed_weights({member(0, "z", 1, false, 10)}), (std::vector<uint32_t>{1}));
}

TEST(FusionSpec, RailsParseAndMatchPortFirst) {
  auto l = NamedList::parse(" mlx5_0=0, mlx5_1 = 1/2 ,mlx5_1:2=5", NamedList::Kind::kRails);
  ASSERT_TRUE(l.is_ok()) << l.status().message();
  EXPECT_EQ(l.value().to_string(), "mlx5_0=0,mlx5_1=1/2,mlx5_1:2=5");
  RailChoice c = rail_of(l.value(), "mlx5_1", 1);
  EXPECT_EQ(c.rail, 1);
  EXPECT_EQ(c.plane, 2);
  c = rail_of(l.value(), "mlx5_1", 2);
  EXPECT_EQ(c.rail, 5);
  EXPECT_EQ(c.plane, kNetIdUndef);
  c = rail_of(l.value(), "mlx5_10", 1);  // exact names: no prefix match
  EXPECT_EQ(c.rail, kNetIdUndef);
  EXPECT_NE(c.reason.find("does not name mlx5_10"), std::string::npos) << c.reason;
  c = rail_of(NamedList{}, "mlx5_0", 1);
  EXPECT_NE(c.reason.find("SLUICE_NIC_RAILS unset"), std::string::npos) << c.reason;
}

TEST(FusionSpec, MalformedListsNameTheEntry) {
  for (const char* bad : {"mlx5_0", "=1", "mlx5_0=x", "mlx5_0=1/15", "mlx5_0=40000", "mlx5_0:0=1",
                          "mlx5_0=1,,mlx5_1=2", "mlx5_0=1,mlx5_0=2", "a=-1"}) {
    auto l = NamedList::parse(bad, NamedList::Kind::kRails);
    EXPECT_FALSE(l.is_ok()) << bad;
  }
  auto w = NamedList::parse("a=10001", NamedList::Kind::kWeights);
  ASSERT_FALSE(w.is_ok());
  EXPECT_NE(w.status().message().find("'a=10001'"), std::string::npos) << w.status().message();
  EXPECT_FALSE(NamedList::parse("a=1/2", NamedList::Kind::kWeights).is_ok());
  EXPECT_TRUE(NamedList::parse("a=1,a:1=2", NamedList::Kind::kWeights).is_ok());
}

}  // namespace
}  // namespace sluice
