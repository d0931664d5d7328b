#include "sluice/core/base/config.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "sluice/core/base/qp.h"

namespace sluice {
namespace {

using Env = std::map<std::string, std::string, std::less<>>;

EnvLookup lookup(const Env& env) {
  return [&env](std::string_view name) -> std::optional<std::string> {
    const auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

Config load_ok(const Env& env, std::vector<ParamSource>* sources = nullptr) {
  auto c = load_config(lookup(env), sources);
  EXPECT_TRUE(c.is_ok()) << c.status().message();
  return c.is_ok() ? c.value() : Config{};
}

Status load_error(const Env& env) {
  auto c = load_config(lookup(env));
  EXPECT_FALSE(c.is_ok());
  if (!c.is_ok()) {
    EXPECT_EQ(c.status().code(), Code::kInvalidUsage);
  }
  return c.status();
}

TEST(Config, DefaultsWithEmptyEnvironment) {
  std::vector<ParamSource> sources = {{"stale", "x", "y"}};
  const Config c = load_ok({}, &sources);
  EXPECT_TRUE(sources.empty());
  EXPECT_EQ(c.ib_hca, "");
  EXPECT_EQ(c.gid_index, -1);
  EXPECT_EQ(c.addr_family, AF_INET);
  EXPECT_EQ(c.addr_range, "");
  EXPECT_EQ(c.roce_version, 2);
  EXPECT_EQ(c.socket_ifname, "");
  EXPECT_EQ(c.socket_family, 0);
  EXPECT_EQ(c.ib_timeout, 20);
  EXPECT_EQ(c.retry_cnt, 7);
  // The eager path is on: messages of up to 4 KiB.
  EXPECT_EQ(c.eager_max, 4096);
  EXPECT_TRUE(c.eager_hold);
  EXPECT_TRUE(c.eager_fused);
  EXPECT_EQ(c.rnr_retry, 7);
  EXPECT_EQ(c.min_rnr_timer, 12);
  EXPECT_EQ(c.traffic_class, -1);
  EXPECT_EQ(c.fifo_traffic_class, -1);
  EXPECT_EQ(c.service_level, -1);
  EXPECT_EQ(c.pkey_index, 0);
  EXPECT_TRUE(c.profiler_events);
  EXPECT_EQ(c.qps_per_connection, 1);
  EXPECT_EQ(c.split_data_on_qps, 0);
  EXPECT_TRUE(c.cts_inline);
  EXPECT_EQ(c.connect_timeout_ms, 120000);
  EXPECT_EQ(c.close_timeout_ms, 2000);
  EXPECT_FALSE(c.gdr_flush_disable);
  EXPECT_TRUE(c.dmabuf_enable);
  EXPECT_EQ(c.nic_affinity, "");
  EXPECT_EQ(c.gpu_nic_map, "");
  EXPECT_EQ(c.topo_file, "");
}

// Every parameter set to a non-default value at once: each lands in its own field and is
// reported in `sources`, in table order.
TEST(Config, EveryParameterReachesItsField) {
  const Env env = {
      {"NCCL_IB_HCA", "=mlx5_0:1,mlx5_1"},
      {"NCCL_IB_GID_INDEX", "3"},
      {"NCCL_IB_ADDR_FAMILY", "AF_INET6"},
      {"NCCL_IB_ADDR_RANGE", "fd00::/8"},
      {"NCCL_IB_ROCE_VERSION_NUM", "1"},
      {"NCCL_SOCKET_IFNAME", "^docker,lo"},
      {"NCCL_SOCKET_FAMILY", "AF_INET"},
      {"NCCL_IB_TIMEOUT", "22"},
      {"NCCL_IB_RETRY_CNT", "5"},
      {"SLUICE_RNR_RETRY", "4"},
      {"SLUICE_MIN_RNR_TIMER", "30"},
      {"NCCL_IB_TC", "106"},
      {"NCCL_IB_FIFO_TC", "184"},
      {"NCCL_IB_SL", "3"},
      {"NCCL_IB_PKEY", "2"},
      {"NCCL_IB_QPS_PER_CONNECTION", "4"},
      {"NCCL_IB_SPLIT_DATA_ON_QPS", "1"},
      {"NCCL_IB_USE_INLINE", "0"},
      {"NCCL_IB_ADAPTIVE_ROUTING", "1"},
      {"NCCL_IB_AR_THRESHOLD", "65536"},
      {"NCCL_IB_ECE_ENABLE", "0"},
      {"NCCL_IB_MQP_RETRY_ALL", "1"},
      {"NCCL_IB_MQP_RETRY_CNT", "3"},
      {"NCCL_IB_MQP_RETRY_SLEEP_MSEC", "7"},
      {"SLUICE_FLOW_LABEL", "0x2a"},
      {"SLUICE_CONNECT_TIMEOUT_MS", "5000"},
      {"SLUICE_CLOSE_TIMEOUT_MS", "0"},
      {"SLUICE_EAGER_MAX", "2048"},
      {"SLUICE_EAGER_SLOTS", "32"},
      {"SLUICE_EAGER_HOLD", "0"},
      {"SLUICE_EAGER_FUSED", "0"},
      {"SLUICE_EAGER_BATCH", "5"},
      {"SLUICE_EAGER_RINGS", "7"},
      {"SLUICE_HANDSHAKE_TIMEOUT_MS", "1500"},
      {"SLUICE_LIVENESS_POLL_MS", "250"},
      {"SLUICE_HEARTBEAT_MS", "0"},
      {"SLUICE_OOB_LINK", "0"},
      {"SLUICE_OOB_LINK_HANDSHAKE", "0"},
      {"SLUICE_PROGRESS_TIMEOUT_MS", "60000"},
      {"SLUICE_PROFILER_EVENTS", "0"},
      {"SLUICE_CM", "rdmacm"},
      {"NCCL_IB_PCI_RELAXED_ORDERING", "1"},
      {"NCCL_GDR_FLUSH_DISABLE", "1"},
      {"NCCL_DMABUF_ENABLE", "0"},
      {"SLUICE_GDR", "force"},
      {"NCCL_NET_FORCE_FLUSH", "1"},
      {"SLUICE_TEST_HIDE_VERBS", "ibv_query_ece"},
      {"SLUICE_CUDA_LIBRARY", "/opt/nvidia/libcuda.so.1"},
      {"SLUICE_NIC_AFFINITY", "auto"},
      {"SLUICE_GPU_NIC_MAP", "0:mlx5_0,1:mlx5_1"},
      {"SLUICE_TOPO_FILE", "/tmp/topo.xml"},
      {"NCCL_IB_MERGE_NICS", "0"},
      {"SLUICE_NIC_RAILS", "mlx5_0=0,mlx5_1:1=1/2"},
      {"SLUICE_FUSION_WEIGHTS", "mlx5_0=3,mlx5_1=0"},
      {"SLUICE_STRIPE_MIN", "4096"},
      {"SLUICE_FAILOVER", "0"},
      {"SLUICE_FAILOVER_FENCE_MS", "2500"},
      {"SLUICE_FAILBACK_RETRY_MS", "50"},
      {"SLUICE_FAILBACK_RETRY_CAP_MS", "800"},
      {"SLUICE_FAILBACK_RAMP_MS", "250"},
      {"SLUICE_TEST_HOLD_RQ", "1"},
      {"SLUICE_TEST_FAILBACK_CREATE_FAILS", "2"},
      {"SLUICE_TEST_FAULT_FILE", "/tmp/faults"},
      {"SLUICE_TEST_PATH_MSG_SET", "1"},
      {"SLUICE_STANDBY", "1"},
      {"SLUICE_STANDBY_MAP", "rxe1=rxe0,mlx5_0:1=none"},
      {"SLUICE_LOG", "info"},
  };
  std::vector<ParamSource> sources;
  const Config c = load_ok(env, &sources);
  EXPECT_EQ(c.ib_hca, "=mlx5_0:1,mlx5_1");
  EXPECT_EQ(c.gid_index, 3);
  EXPECT_EQ(c.addr_family, AF_INET6);
  EXPECT_EQ(c.addr_range, "fd00::/8");
  EXPECT_EQ(c.roce_version, 1);
  EXPECT_EQ(c.socket_ifname, "^docker,lo");
  EXPECT_EQ(c.socket_family, AF_INET);
  EXPECT_EQ(c.ib_timeout, 22);
  EXPECT_EQ(c.retry_cnt, 5);
  EXPECT_EQ(c.rnr_retry, 4);
  EXPECT_EQ(c.min_rnr_timer, 30);
  EXPECT_EQ(c.traffic_class, 106);
  EXPECT_EQ(c.fifo_traffic_class, 184);
  EXPECT_EQ(c.service_level, 3);
  EXPECT_EQ(c.pkey_index, 2);
  EXPECT_EQ(c.qps_per_connection, 4);
  EXPECT_EQ(c.split_data_on_qps, 1);
  EXPECT_FALSE(c.cts_inline);
  EXPECT_EQ(c.adaptive_routing, 1);
  EXPECT_EQ(c.ar_threshold, 65536);
  EXPECT_FALSE(c.ece_enable);
  EXPECT_TRUE(c.mqp_retry_all);
  EXPECT_EQ(c.mqp_retry_cnt, 3);
  EXPECT_EQ(c.mqp_retry_sleep_ms, 7);
  EXPECT_EQ(c.flow_label, "0x2a");
  EXPECT_EQ(c.pci_relaxed_ordering, 1);
  EXPECT_EQ(c.connect_timeout_ms, 5000);
  EXPECT_EQ(c.close_timeout_ms, 0);
  EXPECT_EQ(c.eager_max, 2048);
  EXPECT_EQ(c.eager_slots, 32);
  EXPECT_FALSE(c.eager_hold);
  EXPECT_FALSE(c.eager_fused);
  EXPECT_EQ(c.eager_batch, 5);
  EXPECT_EQ(c.eager_rings, 7);
  EXPECT_EQ(c.handshake_timeout_ms, 1500);
  EXPECT_EQ(c.liveness_poll_ms, 250);
  EXPECT_EQ(c.heartbeat_ms, 0);
  EXPECT_FALSE(c.oob_link);
  EXPECT_FALSE(c.oob_link_handshake);
  EXPECT_EQ(c.progress_timeout_ms, 60000);
  EXPECT_FALSE(c.profiler_events);
  EXPECT_EQ(c.cm_mode, 2);
  EXPECT_TRUE(c.gdr_flush_disable);
  EXPECT_FALSE(c.dmabuf_enable);
  EXPECT_EQ(c.gdr_mode, 2);
  EXPECT_TRUE(c.force_flush);
  EXPECT_EQ(c.test_hide_verbs, "ibv_query_ece");
  EXPECT_EQ(c.cuda_library, "/opt/nvidia/libcuda.so.1");
  EXPECT_EQ(c.nic_affinity, "auto");
  EXPECT_EQ(c.gpu_nic_map, "0:mlx5_0,1:mlx5_1");
  EXPECT_EQ(c.topo_file, "/tmp/topo.xml");
  EXPECT_FALSE(c.merge_nics);
  EXPECT_EQ(c.nic_rails, "mlx5_0=0,mlx5_1:1=1/2");
  EXPECT_EQ(c.fusion_weights, "mlx5_0=3,mlx5_1=0");
  EXPECT_EQ(c.stripe_min, 4096);
  EXPECT_FALSE(c.failover);
  EXPECT_EQ(c.failover_fence_ms, 2500);
  EXPECT_EQ(c.failback_retry_ms, 50);
  EXPECT_EQ(c.failback_retry_cap_ms, 800);
  EXPECT_EQ(c.failback_ramp_ms, 250);
  EXPECT_TRUE(c.test_hold_rq);
  EXPECT_EQ(c.test_failback_create_fails, 2);
  EXPECT_EQ(c.test_fault_file, "/tmp/faults");
  EXPECT_EQ(c.test_path_msg_set, 1);
  EXPECT_TRUE(c.standby);
  EXPECT_EQ(c.standby_map, "rxe1=rxe0,mlx5_0:1=none");
  EXPECT_EQ(c.log_level, 3);

  // One source per parameter, in table (= param_docs) order, each set by its canonical name.
  ASSERT_EQ(sources.size(), env.size());
  ASSERT_EQ(param_docs().size(), env.size());
  for (size_t i = 0; i < sources.size(); ++i) {
    EXPECT_EQ(sources[i].name, param_docs()[i].name);
    EXPECT_EQ(sources[i].set_by, sources[i].name);
    EXPECT_EQ(sources[i].value, env.at(sources[i].name)) << sources[i].name;
  }
}

TEST(Config, SourcesReportTheVariableAndTheNormalisedValue) {
  std::vector<ParamSource> sources;
  load_ok({{"NCCL_IB_TIMEOUT", " +18 "},
           {"SLUICE_CTS_INLINE", "off"},
           {"NCCL_IB_ADDR_FAMILY", "af_inet"},
           {"SLUICE_NIC_AFFINITY", "AUTO"}},
          &sources);
  ASSERT_EQ(sources.size(), 4u);
  // Table order: addr family, timeout, inline, affinity.
  EXPECT_EQ(sources[0].name, "NCCL_IB_ADDR_FAMILY");
  EXPECT_EQ(sources[0].set_by, "NCCL_IB_ADDR_FAMILY");
  EXPECT_EQ(sources[0].value, "AF_INET");  // set to its default: still reported
  EXPECT_EQ(sources[1].name, "NCCL_IB_TIMEOUT");
  EXPECT_EQ(sources[1].value, "18");
  EXPECT_EQ(sources[2].name, "NCCL_IB_USE_INLINE");
  EXPECT_EQ(sources[2].set_by, "SLUICE_CTS_INLINE");
  EXPECT_EQ(sources[2].value, "0");
  EXPECT_EQ(sources[3].name, "SLUICE_NIC_AFFINITY");
  EXPECT_EQ(sources[3].value, "auto");
}

TEST(Config, AliasSetsTheParameter) {
  EXPECT_FALSE(load_ok({{"SLUICE_CTS_INLINE", "0"}}).cts_inline);
  EXPECT_TRUE(load_ok({{"SLUICE_CTS_INLINE", "1"}}).cts_inline);
}

TEST(Config, CanonicalNameBeatsAlias) {
  std::vector<ParamSource> sources;
  const Config c = load_ok({{"NCCL_IB_USE_INLINE", "1"}, {"SLUICE_CTS_INLINE", "0"}}, &sources);
  EXPECT_TRUE(c.cts_inline);
  ASSERT_EQ(sources.size(), 1u);
  EXPECT_EQ(sources[0].set_by, "NCCL_IB_USE_INLINE");
  // The losing alias is not even parsed: garbage there is not an error.
  EXPECT_TRUE(load_ok({{"NCCL_IB_USE_INLINE", "0"}, {"SLUICE_CTS_INLINE", "junk"}}).cts_inline ==
              false);
  // An empty canonical value is unset, so the alias applies.
  EXPECT_FALSE(load_ok({{"NCCL_IB_USE_INLINE", ""}, {"SLUICE_CTS_INLINE", "no"}}).cts_inline);
}

struct IntCase {
  const char* name;
  int Config::*field;
  long long min, max;
};

const IntCase kIntCases[] = {
    {"NCCL_IB_GID_INDEX", &Config::gid_index, -1, 65535},
    {"NCCL_IB_ROCE_VERSION_NUM", &Config::roce_version, 1, 2},
    {"NCCL_IB_TIMEOUT", &Config::ib_timeout, 1, 31},
    {"NCCL_IB_RETRY_CNT", &Config::retry_cnt, 0, 7},
    {"SLUICE_RNR_RETRY", &Config::rnr_retry, 0, 7},
    {"SLUICE_MIN_RNR_TIMER", &Config::min_rnr_timer, 0, 31},
    {"NCCL_IB_TC", &Config::traffic_class, -1, 255},
    {"NCCL_IB_FIFO_TC", &Config::fifo_traffic_class, -1, 255},
    {"NCCL_IB_SL", &Config::service_level, -1, 15},
    {"NCCL_IB_PKEY", &Config::pkey_index, 0, 65535},
    {"NCCL_IB_QPS_PER_CONNECTION", &Config::qps_per_connection, 1, 16},
    {"NCCL_IB_SPLIT_DATA_ON_QPS", &Config::split_data_on_qps, 0, 1},
    {"SLUICE_CONNECT_TIMEOUT_MS", &Config::connect_timeout_ms, 100, 3600000},
    {"SLUICE_CLOSE_TIMEOUT_MS", &Config::close_timeout_ms, 0, 60000},
};

TEST(Config, IntegerBoundsAtBothEdgesAndOnePast) {
  for (const IntCase& k : kIntCases) {
    SCOPED_TRACE(k.name);
    EXPECT_EQ(load_ok({{k.name, std::to_string(k.min)}}).*k.field, k.min);
    EXPECT_EQ(load_ok({{k.name, std::to_string(k.max)}}).*k.field, k.max);
    const std::string expected =
        "expected an integer in " + std::to_string(k.min) + ".." + std::to_string(k.max);
    for (long long bad : {k.min - 1, k.max + 1}) {
      const Status st = load_error({{k.name, std::to_string(bad)}});
      EXPECT_EQ(st.message(),
                std::string(k.name) + "=\"" + std::to_string(bad) + "\" is not valid: " + expected);
    }
  }
}

TEST(Config, IntegerGarbage) {
  EXPECT_EQ(load_error({{"NCCL_IB_TIMEOUT", "abc"}}).message(),
            "NCCL_IB_TIMEOUT=\"abc\" is not valid: expected an integer in 1..31");
  for (const char* bad : {"1x", "0x10", "1.5", "1e1", "--1", "+-1", "++1", "+", "-", "1 2",
                          "99999999999999999999999", "２"}) {
    const Status st = load_error({{"NCCL_IB_TIMEOUT", bad}});
    EXPECT_NE(st.message().find("NCCL_IB_TIMEOUT"), std::string::npos) << bad;
  }
  EXPECT_EQ(load_ok({{"NCCL_IB_TIMEOUT", "\t 7 \n"}}).ib_timeout, 7);
  EXPECT_EQ(load_ok({{"NCCL_IB_TIMEOUT", "+7"}}).ib_timeout, 7);
  EXPECT_EQ(load_ok({{"NCCL_IB_TIMEOUT", "007"}}).ib_timeout, 7);
  EXPECT_EQ(load_ok({{"NCCL_IB_TC", "-1"}}).traffic_class, -1);
}

TEST(Config, Booleans) {
  for (const char* t : {"1", "true", "TRUE", "True", "yes", "YES", "on", "On", " on "}) {
    EXPECT_TRUE(load_ok({{"NCCL_GDR_FLUSH_DISABLE", t}}).gdr_flush_disable) << t;
  }
  for (const char* f : {"0", "false", "FALSE", "no", "No", "off", "OFF"}) {
    EXPECT_FALSE(load_ok({{"NCCL_DMABUF_ENABLE", f}}).dmabuf_enable) << f;
  }
  for (const char* bad : {"2", "-1", "y", "n", "enable", "truee", "01"}) {
    const Status st = load_error({{"NCCL_DMABUF_ENABLE", bad}});
    EXPECT_EQ(st.message(), std::string("NCCL_DMABUF_ENABLE=\"") + bad +
                                "\" is not valid: expected a boolean "
                                "(0|1|true|false|yes|no|on|off)");
  }
  // Error messages name the variable that was actually used.
  EXPECT_NE(load_error({{"SLUICE_CTS_INLINE", "maybe"}}).message().find("SLUICE_CTS_INLINE="),
            std::string::npos);
}

TEST(Config, Enums) {
  EXPECT_EQ(load_ok({{"NCCL_IB_ADDR_FAMILY", "AF_INET6"}}).addr_family, AF_INET6);
  EXPECT_EQ(load_ok({{"NCCL_IB_ADDR_FAMILY", "AF_INET"}}).addr_family, AF_INET);
  EXPECT_EQ(load_ok({{"NCCL_SOCKET_FAMILY", "AF_INET6"}}).socket_family, AF_INET6);
  EXPECT_EQ(load_ok({{"NCCL_SOCKET_FAMILY", "af_inet"}}).socket_family, AF_INET);
  EXPECT_EQ(load_ok({{"SLUICE_NIC_AFFINITY", "off"}}).nic_affinity, "off");
  EXPECT_EQ(load_ok({{"SLUICE_NIC_AFFINITY", "Auto"}}).nic_affinity, "auto");
  EXPECT_EQ(load_error({{"NCCL_IB_ADDR_FAMILY", "10"}}).message(),
            "NCCL_IB_ADDR_FAMILY=\"10\" is not valid: expected one of AF_INET|AF_INET6");
  EXPECT_EQ(load_error({{"NCCL_SOCKET_FAMILY", "AF_UNIX"}}).message(),
            "NCCL_SOCKET_FAMILY=\"AF_UNIX\" is not valid: expected one of AF_INET|AF_INET6");
  EXPECT_EQ(load_error({{"SLUICE_NIC_AFFINITY", "on"}}).message(),
            "SLUICE_NIC_AFFINITY=\"on\" is not valid: expected one of off|auto");
}

TEST(Config, GpuDirectKnobs) {
  const Config d = load_ok({});
  EXPECT_EQ(d.gdr_mode, 1);  // auto
  EXPECT_EQ(d.cm_mode, 0);   // auto
  EXPECT_FALSE(d.force_flush);
  EXPECT_FALSE(d.gdr_flush_disable);
  EXPECT_TRUE(d.dmabuf_enable);
  EXPECT_EQ(d.cuda_library, "libcuda.so.1");
  EXPECT_EQ(load_ok({{"SLUICE_GDR", "off"}}).gdr_mode, 0);
  EXPECT_EQ(load_ok({{"SLUICE_GDR", "FORCE"}}).gdr_mode, 2);
  EXPECT_TRUE(load_ok({{"NCCL_NET_FORCE_FLUSH", "1"}}).force_flush);
  EXPECT_EQ(load_ok({{"SLUICE_CUDA_LIBRARY", "/opt/x/libcuda.so.1"}}).cuda_library,
            "/opt/x/libcuda.so.1");
  EXPECT_EQ(load_error({{"SLUICE_GDR", "on"}}).message(),
            "SLUICE_GDR=\"on\" is not valid: expected one of off|auto|force");
}

// NCCL's defaults and ranges for the production-fabric knobs (issue 21).
TEST(Config, FabricKnobsHaveNcclDefaultsAndRanges) {
  const Config d = load_ok({});
  EXPECT_EQ(d.pci_relaxed_ordering, 2);
  EXPECT_EQ(d.adaptive_routing, -2);
  EXPECT_EQ(d.ar_threshold, 8192);
  EXPECT_TRUE(d.ece_enable);
  EXPECT_FALSE(d.mqp_retry_all);
  EXPECT_EQ(d.mqp_retry_cnt, 34);
  EXPECT_EQ(d.mqp_retry_sleep_ms, 100);
  EXPECT_EQ(load_ok({{"NCCL_IB_PCI_RELAXED_ORDERING", "0"}}).pci_relaxed_ordering, 0);
  EXPECT_EQ(load_error({{"NCCL_IB_PCI_RELAXED_ORDERING", "3"}}).message(),
            "NCCL_IB_PCI_RELAXED_ORDERING=\"3\" is not valid: expected an integer in 0..2");
  EXPECT_EQ(load_ok({{"NCCL_IB_ADAPTIVE_ROUTING", "0"}}).adaptive_routing, 0);
  EXPECT_FALSE(load_config(lookup({{"NCCL_IB_ADAPTIVE_ROUTING", "2"}})).is_ok());
  EXPECT_FALSE(load_config(lookup({{"NCCL_IB_AR_THRESHOLD", "-1"}})).is_ok());
  EXPECT_EQ(load_ok({{"NCCL_IB_AR_THRESHOLD", "0"}}).ar_threshold, 0);
  EXPECT_FALSE(load_ok({{"NCCL_IB_ECE_ENABLE", "off"}}).ece_enable);
  EXPECT_FALSE(load_config(lookup({{"NCCL_IB_MQP_RETRY_CNT", "101"}})).is_ok());
  EXPECT_FALSE(load_config(lookup({{"NCCL_IB_MQP_RETRY_SLEEP_MSEC", "-5"}})).is_ok());
  const MqpRetry r = mqp_retry_from(load_ok({{"NCCL_IB_MQP_RETRY_ALL", "yes"},
                                             {"NCCL_IB_MQP_RETRY_CNT", "2"},
                                             {"NCCL_IB_MQP_RETRY_SLEEP_MSEC", "0"}}));
  EXPECT_TRUE(r.all);
  EXPECT_EQ(r.count, 2);
  EXPECT_EQ(r.sleep_ms, 0);
}

TEST(Config, EmptyValuesAreUnset) {
  Env env;
  for (const ParamDoc& d : param_docs()) {
    env[d.name] = "";
    for (const std::string& a : d.aliases) env[a] = "  ";
  }
  std::vector<ParamSource> sources;
  const Config c = load_ok(env, &sources);
  EXPECT_TRUE(sources.empty());
  EXPECT_EQ(c.ib_timeout, 20);
  EXPECT_TRUE(c.cts_inline);
  EXPECT_EQ(c.addr_family, AF_INET);
}

TEST(Config, AddrRangeIsValidated) {
  EXPECT_EQ(load_ok({{"NCCL_IB_ADDR_RANGE", "10.1.0.0/16"}}).addr_range, "10.1.0.0/16");
  for (const char* bad : {"10.1.0.0/33", "10.1.0.0", "garbage", "fd00::/200"}) {
    const Status st = load_error({{"NCCL_IB_ADDR_RANGE", bad}});
    EXPECT_EQ(st.message().rfind(std::string("NCCL_IB_ADDR_RANGE=\"") + bad + "\" is not valid", 0),
              0u)
        << st.message();
  }
}

TEST(Config, AddrRangeFamilyMustMatchAddrFamily) {
  const Status st =
      load_error({{"NCCL_IB_ADDR_RANGE", "10.0.0.0/8"}, {"NCCL_IB_ADDR_FAMILY", "AF_INET6"}});
  EXPECT_NE(st.message().find("NCCL_IB_ADDR_FAMILY"), std::string::npos) << st.message();
  EXPECT_NE(load_error({{"NCCL_IB_ADDR_RANGE", "fd00::/8"}}).message().find("IPv6 range"),
            std::string::npos);  // the default family is AF_INET
  EXPECT_EQ(load_ok({{"NCCL_IB_ADDR_RANGE", "fd00::/8"}, {"NCCL_IB_ADDR_FAMILY", "AF_INET6"}})
                .addr_family,
            AF_INET6);
}

TEST(Config, HcaAndIfnameListsAreValidated) {
  EXPECT_EQ(load_ok({{"NCCL_IB_HCA", "^=mlx5_1,mlx5_4"}}).ib_hca, "^=mlx5_1,mlx5_4");
  std::string many;
  for (int i = 0; i < 33; ++i) many += "mlx5_" + std::to_string(i) + ",";
  EXPECT_EQ(load_error({{"NCCL_IB_HCA", many}}).message().rfind("NCCL_IB_HCA=\"", 0), 0u);
  EXPECT_EQ(load_error({{"NCCL_IB_HCA", "mlx5_0:x"}}).message().rfind("NCCL_IB_HCA=\"", 0), 0u);
  EXPECT_EQ(load_error({{"NCCL_SOCKET_IFNAME", "eth0,^eth1"}})
                .message()
                .rfind("NCCL_SOCKET_IFNAME=\"", 0),
            0u);
}

TEST(Config, FlowLabelIsAutoOffOrASeed) {
  EXPECT_EQ(Config{}.flow_label, "auto");
  EXPECT_EQ(load_ok({{"SLUICE_FLOW_LABEL", " off "}}).flow_label, "off");
  EXPECT_EQ(load_ok({{"SLUICE_FLOW_LABEL", "12345"}}).flow_label, "12345");
  const Status bad = load_error({{"SLUICE_FLOW_LABEL", "sometimes"}});
  EXPECT_EQ(bad.message().rfind("SLUICE_FLOW_LABEL=\"sometimes\" is not valid", 0), 0u)
      << bad.message();
  EXPECT_NE(bad.message().find("auto|off|<seed>"), std::string::npos) << bad.message();
}

TEST(Config, StandbyIsOffByDefaultAndItsMapIsValidated) {
  EXPECT_FALSE(Config{}.standby);
  EXPECT_TRUE(load_ok({{"SLUICE_STANDBY", "1"}}).standby);
  EXPECT_FALSE(load_ok({{"SLUICE_STANDBY", "0"}}).standby);
  EXPECT_EQ(load_ok({{"SLUICE_STANDBY_MAP", " rxe1 = rxe0 "}}).standby_map, "rxe1 = rxe0");
  for (const char* bad : {"rxe1", "rxe1=", "=rxe0", "rxe1=rxe1", "rxe1=rxe0,rxe1=none", "a=b=c"}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(load_error({{"SLUICE_STANDBY_MAP", bad}}).message().rfind("SLUICE_STANDBY_MAP=\"", 0),
              0u);
  }
}

TEST(Config, FreeStringsAreKeptTrimmed) {
  const Config c = load_ok({{"SLUICE_GPU_NIC_MAP", " anything goes "}, {"SLUICE_TOPO_FILE", "x"}});
  EXPECT_EQ(c.gpu_nic_map, "anything goes");
  EXPECT_EQ(c.topo_file, "x");
}

TEST(Config, LoadFromEnvironmentReadsTheProcessEnvironment) {
  ASSERT_EQ(setenv("SLUICE_CLOSE_TIMEOUT_MS", "1234", 1), 0);
  ASSERT_EQ(setenv("SLUICE_CTS_INLINE", "false", 1), 0);
  std::vector<ParamSource> sources;
  auto c = load_config_from_environment(&sources);
  unsetenv("SLUICE_CLOSE_TIMEOUT_MS");
  unsetenv("SLUICE_CTS_INLINE");
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c.value().close_timeout_ms, 1234);
  EXPECT_FALSE(c.value().cts_inline);
  bool found = false;
  for (const ParamSource& s : sources) {
    if (s.name == "SLUICE_CLOSE_TIMEOUT_MS") {
      found = true;
      EXPECT_EQ(s.set_by, "SLUICE_CLOSE_TIMEOUT_MS");
      EXPECT_EQ(s.value, "1234");
    }
  }
  EXPECT_TRUE(found);

  ASSERT_EQ(setenv("NCCL_IB_RETRY_CNT", "8", 1), 0);
  auto bad = load_config_from_environment();
  unsetenv("NCCL_IB_RETRY_CNT");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().message(),
            "NCCL_IB_RETRY_CNT=\"8\" is not valid: expected an integer in 0..7");
}

TEST(Config, LogLevelForTheLoggerUsesTheTableRow) {
  unsetenv("SLUICE_LOG");
  EXPECT_EQ(log_level_from_environment(), 2);
  setenv("SLUICE_LOG", " TRACE ", 1);
  EXPECT_EQ(log_level_from_environment(), 5);
  setenv("SLUICE_LOG", "none", 1);
  EXPECT_EQ(log_level_from_environment(), 0);
  setenv("SLUICE_LOG", "loud", 1);  // invalid: the logger keeps the default, init reports it
  EXPECT_EQ(log_level_from_environment(), 2);
  auto bad = load_config_from_environment();
  unsetenv("SLUICE_LOG");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("SLUICE_LOG"), std::string::npos);
}

TEST(ParamDocs, OneRowPerParameterWithEverythingFilledIn) {
  const auto& docs = param_docs();
  EXPECT_EQ(docs.size(), 67u);
  std::set<std::string> names;
  for (const ParamDoc& d : docs) {
    SCOPED_TRACE(d.name);
    EXPECT_TRUE(names.insert(d.name).second) << "duplicate";
    for (const std::string& a : d.aliases) EXPECT_TRUE(names.insert(a).second) << "duplicate " << a;
    EXPECT_TRUE(d.name.starts_with("NCCL_") || d.name.starts_with("SLUICE_"));
    EXPECT_TRUE(d.type == "int" || d.type == "bool" || d.type == "string" || d.type == "enum");
    EXPECT_FALSE(d.allowed.empty());
    EXPECT_FALSE(d.doc.empty());
    if (d.type != "string") {
      EXPECT_FALSE(d.default_value.empty());
    }
  }
  const auto find = [&](std::string_view n) {
    for (const ParamDoc& d : docs) {
      if (d.name == n) return d;
    }
    ADD_FAILURE() << n;
    return ParamDoc{};
  };
  EXPECT_EQ(find("NCCL_IB_TIMEOUT").default_value, "20");
  EXPECT_EQ(find("NCCL_IB_TIMEOUT").allowed, "1..31");
  EXPECT_EQ(find("NCCL_IB_SPLIT_DATA_ON_QPS").default_value, "0");
  EXPECT_EQ(find("NCCL_IB_ADDR_FAMILY").default_value, "AF_INET");
  EXPECT_EQ(find("NCCL_IB_ADDR_FAMILY").allowed, "AF_INET|AF_INET6");
  EXPECT_EQ(find("NCCL_IB_USE_INLINE").aliases, std::vector<std::string>{"SLUICE_CTS_INLINE"});
  EXPECT_EQ(find("NCCL_IB_USE_INLINE").default_value, "1");
  EXPECT_EQ(find("NCCL_DMABUF_ENABLE").default_value, "1");
  EXPECT_EQ(find("NCCL_GDR_FLUSH_DISABLE").default_value, "0");
  EXPECT_EQ(find("SLUICE_NIC_AFFINITY").default_value, "off");
  EXPECT_EQ(find("SLUICE_CONNECT_TIMEOUT_MS").default_value, "120000");
}

std::string read_source_file(const std::string& relpath) {
  std::ifstream in(std::string(SLUICE_SOURCE_DIR) + "/" + relpath);
  EXPECT_TRUE(in) << relpath << " not found";
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A Markdown document lists every parameter and alias, in the table's order, with its type and
// allowed values. The table lives in docs/configuration.md only.
void expect_table_in_sync(const std::string& relpath) {
  const std::string md = read_source_file(relpath);
  ASSERT_FALSE(md.empty()) << relpath << " is empty or missing";
  size_t last = 0;
  for (const ParamDoc& d : param_docs()) {
    const std::string cell = "| `" + d.name + "` |";
    const size_t at = md.find(cell);
    ASSERT_NE(at, std::string::npos) << d.name << " is missing from " << relpath;
    EXPECT_GT(at, last) << d.name << " is out of order in " << relpath;
    last = at;
    const size_t eol = md.find('\n', at);
    const std::string row = md.substr(at, eol - at);
    for (const std::string& a : d.aliases) {
      EXPECT_NE(row.find("`" + a + "`"), std::string::npos) << a << " missing from the row";
    }
    EXPECT_NE(row.find("| " + d.type + " |"), std::string::npos) << d.name << ": type";
    std::string allowed;  // a '|' inside a Markdown table cell is written "\|"
    for (char ch : d.allowed) allowed += ch == '|' ? std::string("\\|") : std::string(1, ch);
    std::string plain_row = row;  // code spans are formatting only
    std::erase(plain_row, '`');
    EXPECT_NE(plain_row.find(allowed), std::string::npos) << d.name << ": allowed " << allowed;
  }
}

TEST(ParamDocs, ConfigurationMarkdownIsInSync) {
  expect_table_in_sync("docs/configuration.md");
}

// The README links to docs/configuration.md instead of carrying a second copy that could drift.
TEST(ParamDocs, ReadmeHasNoCopyOfTheTable) {
  const std::string md = read_source_file("README.md");
  ASSERT_FALSE(md.empty());
  EXPECT_NE(md.find("docs/configuration.md"), std::string::npos)
      << "README does not link the table";
  for (const ParamDoc& d : param_docs()) {
    EXPECT_EQ(md.find("| `" + d.name + "` |"), std::string::npos)
        << d.name << " has a row in README.md: the table belongs in docs/configuration.md only";
  }
}

}  // namespace
}  // namespace sluice
