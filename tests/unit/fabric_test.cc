// What production fabrics turn on (issue 21), as pure decisions: relaxed ordering
// (NCCL_IB_PCI_RELAXED_ORDERING), adaptive routing (NCCL_IB_ADAPTIVE_ROUTING, NCCL_IB_AR_THRESHOLD)
// with the extra WR it costs, the ECE intersection and its place in the connection metadata, the
// modify-QP retry policy (NCCL_IB_MQP_RETRY_*) with an injected ibv_modify_qp, and the run-time
// verbs entry points ("no dma-buf (rdma-core too old)").
#include "sluice/core/base/fabric.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "../../core/src/rules/cts_match.h"
#include "sluice/core/base/config.h"
#include "sluice/core/base/qp.h"
#include "sluice/core/base/verbs_ext.h"
#include "sluice/core/memory/gdr.h"
#include "sluice/core/wire/wire.h"

namespace sluice {
namespace {

bool has(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

TEST(RelaxedOrdering, ModeAndProbeDecide) {
  const RoProbe ok{true, "ibv_reg_mr_iova2 with IBV_ACCESS_RELAXED_ORDERING on mlx5_0 registered"};
  const RoProbe bad{false, "ibv_reg_mr_iova2 with IBV_ACCESS_RELAXED_ORDERING on x failed: EINVAL"};
  EXPECT_FALSE(decide_relaxed_ordering(0, ok).on);
  EXPECT_TRUE(has(decide_relaxed_ordering(0, ok).why, "off: NCCL_IB_PCI_RELAXED_ORDERING=0"));
  EXPECT_TRUE(decide_relaxed_ordering(1, bad).on) << "1 = always requested";
  EXPECT_TRUE(decide_relaxed_ordering(2, ok).on);
  const RelaxedOrdering no = decide_relaxed_ordering(2, bad);
  EXPECT_FALSE(no.on);
  EXPECT_TRUE(has(no.why, "off: NCCL_IB_PCI_RELAXED_ORDERING=2 but")) << no.why;
  EXPECT_TRUE(has(no.why, "EINVAL")) << no.why;
  const unsigned a = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  EXPECT_EQ(with_relaxed_ordering(a, true), a | IBV_ACCESS_RELAXED_ORDERING);
  EXPECT_EQ(with_relaxed_ordering(a, false), a);
  // It is one of rdma-core's optional flags: a provider without it ignores it.
  EXPECT_NE(static_cast<unsigned>(IBV_ACCESS_RELAXED_ORDERING) &
                static_cast<unsigned>(IBV_ACCESS_OPTIONAL_RANGE),
            0u);
}

TEST(AdaptiveRouting, NcclDefaultsPerLinkLayer) {
  const AdaptiveRouting ib = decide_adaptive_routing(-2, 8192, IBV_LINK_LAYER_INFINIBAND);
  EXPECT_TRUE(ib.on);
  EXPECT_EQ(ib.threshold, 8192u);
  EXPECT_TRUE(has(ib.why, "on for InfiniBand")) << ib.why;
  const AdaptiveRouting roce = decide_adaptive_routing(-2, 8192, IBV_LINK_LAYER_ETHERNET);
  EXPECT_FALSE(roce.on);
  EXPECT_EQ(roce.threshold, SIZE_MAX);
  EXPECT_TRUE(has(roce.why, "off for RoCE")) << roce.why;
  EXPECT_TRUE(decide_adaptive_routing(-1, 8192, IBV_LINK_LAYER_INFINIBAND).on);
  EXPECT_TRUE(decide_adaptive_routing(1, 100, IBV_LINK_LAYER_ETHERNET).on);
  EXPECT_EQ(decide_adaptive_routing(1, 100, IBV_LINK_LAYER_ETHERNET).threshold, 100u);
  EXPECT_FALSE(decide_adaptive_routing(0, 8192, IBV_LINK_LAYER_INFINIBAND).on);
  EXPECT_FALSE(ar_separate_imm(8192, 8192)) << "at the threshold: not above it";
  EXPECT_TRUE(ar_separate_imm(8193, 8192));
}

// The send queue accounting counts the extra zero-length WRITE_WITH_IMM: exactly one more WR per
// lane that carries data, only above the threshold, none for grouped sends (already separate).
TEST(AdaptiveRouting, OneMoreWrPerDataLaneAboveTheThresholdOnly) {
  const size_t small[1] = {8192}, big[1] = {8193};
  EXPECT_EQ(cts::group_wrs(small, 1, 0, 1, 8192), 1u);
  EXPECT_EQ(cts::group_wrs(big, 1, 0, 1, 8192), 2u);
  EXPECT_EQ(cts::group_wrs(big, 1, 0, 1), 1u) << "off: the data WRITE carries the immediate";
  // Split over 4 lanes: every lane has data of a 64 KiB message; an 8-byte one only on lane 0.
  const size_t m64k[1] = {65536}, tiny[1] = {8};
  for (int lane = 0; lane < 4; ++lane) {
    EXPECT_EQ(cts::group_wrs(m64k, 1, lane, 4, 8192), 2u) << lane;
    EXPECT_EQ(cts::group_wrs(m64k, 1, lane, 4), 1u) << lane;
    EXPECT_EQ(cts::group_wrs(tiny, 1, lane, 4, 0), lane == 0 ? 2u : 1u) << lane;
  }
  const size_t group[2] = {100000, 100000};
  EXPECT_EQ(cts::group_wrs(group, 2, 0, 1, 8192), cts::group_wrs(group, 2, 0, 1));
}

TEST(Ece, IntersectionNeedsBothAndTheSameVendor) {
  const Ece a{true, 0x15b3, 0x30000003, 0x1};
  const Ece b{true, 0x15b3, 0x10000005, 0x3};
  const Ece x = ece_intersection(a, b);
  EXPECT_TRUE(x.supported);
  EXPECT_EQ(x.vendor_id, 0x15b3u);
  EXPECT_EQ(x.options, 0x10000001u);
  EXPECT_EQ(x.comp_mask, 0x1u);
  EXPECT_EQ(ece_intersection(b, a).options, x.options) << "symmetric: both ends agree";
  EXPECT_FALSE(ece_intersection(a, Ece{}).supported) << "a peer without ECE";
  EXPECT_FALSE(ece_intersection(Ece{}, b).supported);
  EXPECT_FALSE(ece_intersection(a, Ece{true, 0x1234, 0x30000003, 0x1}).supported);
  EXPECT_EQ(ece_text(Ece{}), "none");
  EXPECT_EQ(ece_text(x), "vendor 0x15b3 options 0x10000001 comp_mask 0x1");
  EXPECT_TRUE(has(query_ece(nullptr, false).text, "NCCL_IB_ECE_ENABLE=0"));
}

wire::Meta meta_with_name(const char* name) {
  wire::Meta m{};
  m.magic = wire::kMetaMagic;
  m.version = wire::kVersion;
  m.nqps = 1;
  m.mtu = 3;
  m.fifo_slots = wire::kFifoSlots;
  m.nonce = wire::Nonce{{9}};
  std::snprintf(m.dev_name, sizeof m.dev_name, "%s", name);
  return m;
}

// ECE travels in wire version 2's metadata without changing its size: an older peer (features 0,
// a 31-character device name) still validates and simply has no ECE.
TEST(Ece, MetadataCarriesItAndOldPeersStillConnect) {
  wire::Meta old = meta_with_name("a_device_name_of_31_characters_");
  ASSERT_EQ(std::strlen(old.dev_name), 31u);
  EXPECT_TRUE(wire::validate_meta(old, 0, wire::Nonce{{9}}).is_ok());
  wire::MetaEce e;
  EXPECT_FALSE(wire::meta_ece(old, &e));

  wire::Meta m = meta_with_name("mlx5_bond_0_with_a_long_name");
  ASSERT_TRUE(wire::put_meta_ece(&m, {0x15b3, 0x30000000, 0x7}));
  EXPECT_EQ(m.features & wire::kMetaFeatureEce, wire::kMetaFeatureEce);
  EXPECT_EQ(std::string(m.dev_name), "mlx5_bond_0_with_a_") << "name shortened to 19";
  EXPECT_TRUE(wire::validate_meta(m, 0, wire::Nonce{{9}}).is_ok());
  ASSERT_TRUE(wire::meta_ece(m, &e));
  EXPECT_EQ(e.vendor_id, 0x15b3u);
  EXPECT_EQ(e.options, 0x30000000u);
  EXPECT_EQ(e.comp_mask, 0x7u);
  // What an older Sluice checks of our metadata: the last name byte is 0.
  EXPECT_EQ(m.dev_name[sizeof m.dev_name - 1], '\0');
  wire::Meta wide = meta_with_name("rxe0");
  EXPECT_FALSE(wire::put_meta_ece(&wide, {1, 2, 0x1000000})) << "comp_mask beyond 24 bits";
  EXPECT_EQ(wide.features, 0);
  // A peer claiming ECE with a name running into the ECE bytes is refused.
  wire::Meta bad = meta_with_name("a_device_name_of_31_characters_");
  bad.features = wire::kMetaFeatureEce;
  EXPECT_TRUE(has(wire::validate_meta(bad, 0, wire::Nonce{{9}}).message(), "ECE"))
      << "name not terminated";
}

TEST(MqpRetry, RetriesEtimedoutOnlyUnlessAll) {
  const MqpRetry def;
  EXPECT_EQ(def.count, 34);
  EXPECT_EQ(def.sleep_ms, 100);
  EXPECT_TRUE(mqp_retryable(def, ETIMEDOUT));
  EXPECT_TRUE(mqp_retryable(def, -ETIMEDOUT)) << "some providers negate it";
  EXPECT_FALSE(mqp_retryable(def, EINVAL));
  EXPECT_FALSE(mqp_retryable(def, 0));
  const MqpRetry all{true, 34, 100};
  EXPECT_TRUE(mqp_retryable(all, EINVAL));
  EXPECT_FALSE(mqp_retryable(all, 0));
}

struct Fake {
  explicit Fake(std::vector<int> a) : answers(std::move(a)) {}
  std::vector<int> answers;  // what each call returns; the last repeats
  int calls = 0;
  std::vector<int> sleeps;
  ModifyQpFn modify() {
    return [this](ibv_qp*, ibv_qp_attr*, int) {
      const int i = calls++;
      return answers[std::min<size_t>(static_cast<size_t>(i), answers.size() - 1)];
    };
  }
  SleepMsFn sleep() {
    return [this](int ms) { sleeps.push_back(ms); };
  }
};

TEST(MqpRetry, TransientTimeoutsRetriedWithLinearBackoff) {
  Fake f{{ETIMEDOUT, -ETIMEDOUT, 0}};
  ibv_qp_attr a{};
  int attempts = 0;
  EXPECT_EQ(
      modify_qp_retrying(nullptr, &a, 0, MqpRetry{}, "test", f.modify(), f.sleep(), &attempts), 0);
  EXPECT_EQ(attempts, 3);
  EXPECT_EQ(f.sleeps, (std::vector<int>{100, 200}));
}

TEST(MqpRetry, OtherErrorsFailAtOnceUnlessAll) {
  Fake f{{EINVAL, 0}};
  ibv_qp_attr a{};
  int attempts = 0;
  EXPECT_EQ(
      modify_qp_retrying(nullptr, &a, 0, MqpRetry{}, "test", f.modify(), f.sleep(), &attempts),
      EINVAL);
  EXPECT_EQ(attempts, 1);
  EXPECT_TRUE(f.sleeps.empty());
  Fake g{{EINVAL, 0}};
  EXPECT_EQ(modify_qp_retrying(nullptr, &a, 0, MqpRetry{true, 34, 5}, "test", g.modify(), g.sleep(),
                               &attempts),
            0);
  EXPECT_EQ(attempts, 2);
  EXPECT_EQ(g.sleeps, (std::vector<int>{5}));
}

TEST(MqpRetry, BoundedByTheCount) {
  Fake f{{ETIMEDOUT}};
  ibv_qp_attr a{};
  int attempts = 0;
  EXPECT_EQ(modify_qp_retrying(nullptr, &a, 0, MqpRetry{false, 3, 10}, "test", f.modify(),
                               f.sleep(), &attempts),
            ETIMEDOUT);
  EXPECT_EQ(attempts, 4) << "the first attempt and 3 retries";
  EXPECT_EQ(f.sleeps, (std::vector<int>{10, 20, 30}));
  Fake g{{-ETIMEDOUT}};
  EXPECT_EQ(modify_qp_retrying(nullptr, &a, 0, MqpRetry{false, 0, 10}, "test", g.modify(),
                               g.sleep(), &attempts),
            ETIMEDOUT)
      << "returned as a positive errno";
  EXPECT_EQ(attempts, 1);
}

// Before rdma-core 34 there is no ibv_reg_dmabuf_mr: the GPUDirect decision says so.
TEST(VerbsExt, NoDmabufEntryPointIsReportedInTheGpuDirectDecision) {
  const DmabufProbe p = probe_dmabuf_with(nullptr, "mlx5_0", nullptr);
  EXPECT_FALSE(p.supported);
  EXPECT_TRUE(has(p.text, "no dma-buf (rdma-core too old)")) << p.text;
  EXPECT_TRUE(has(p.text, "IBVERBS_1.12, rdma-core 34")) << p.text;
  GpuFacts f;
  f.driver = f.gpu_rdma = f.gpu_dmabuf = true;
  const GdrDecision d = decide_gdr(Config{}, f, p, "mlx5_0");
  EXPECT_FALSE(d.dmabuf);
  EXPECT_TRUE(has(d.summary, "no dma-buf (rdma-core too old)")) << d.summary;
}

// This machine's rdma-core is far above the floor: every entry point resolves, by its version.
TEST(VerbsExt, ResolvesEveryEntryPointOnThisRdmaCore) {
  const verbs::Ext& x = verbs::ext();
  EXPECT_NE(x.reg_dmabuf_mr, nullptr);
  EXPECT_NE(x.query_ece, nullptr);
  EXPECT_NE(x.set_ece, nullptr);
  EXPECT_NE(x.query_gid_table, nullptr);
  EXPECT_TRUE(has(verbs::ext_summary(), "ibv_reg_dmabuf_mr yes")) << verbs::ext_summary();
  EXPECT_EQ(verbs::ext_origin("ibv_query_ece"), "ibv_query_ece (IBVERBS_1.10, rdma-core 31)");
}

// SLUICE_TEST_HIDE_VERBS: the named entry points are then missing as on an older rdma-core, and
// what needs them says so. Last in this file: it changes the process's entry points for good.
TEST(VerbsExt, HiddenEntryPointsAreMissingAsOnAnOlderRdmaCore) {
  verbs::hide_for_test("ibv_query_ece,ibv_reg_dmabuf_mr");
  EXPECT_EQ(verbs::ext().query_ece, nullptr);
  EXPECT_EQ(verbs::ext().reg_dmabuf_mr, nullptr);
  EXPECT_NE(verbs::ext().set_ece, nullptr) << "only the named ones";
  const EceQuery q = query_ece(nullptr, true);
  EXPECT_EQ(q.err, ENOSYS);
  EXPECT_TRUE(has(q.text, "rdma-core too old")) << q.text;
  EXPECT_TRUE(has(probe_dmabuf(nullptr, "mlx5_0").text, "no dma-buf (rdma-core too old)"));
  EXPECT_TRUE(has(verbs::ext_summary(), "ibv_reg_dmabuf_mr no")) << verbs::ext_summary();
}

}  // namespace
}  // namespace sluice
