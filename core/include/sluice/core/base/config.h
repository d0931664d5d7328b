// Configuration: one typed table of every knob (config.cc), parsed once at engine start into an
// immutable Config. config.cc is the only place in Sluice that reads the environment.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/core/base/status.h"

namespace sluice {

// SLUICE_EAGER_SLOTS' bounds: wire::kEagerMinSlots and kEagerMaxSlots (comm/eager_pool.cc ties
// them; base sees no wire header).
inline constexpr int kEagerSlotsMin = 4;
inline constexpr int kEagerSlotsMax = 32;

struct Config {
  // Devices and addressing
  std::string ib_hca;         // NCCL_IB_HCA: device filter ("" = every active port)
  int gid_index = -1;         // NCCL_IB_GID_INDEX: RoCE GID index, -1 = automatic
  int addr_family = 2;        // NCCL_IB_ADDR_FAMILY: AF_INET (2) or AF_INET6 (10)
  std::string addr_range;     // NCCL_IB_ADDR_RANGE: CIDR the GID must be in ("" = any)
  int roce_version = 2;       // NCCL_IB_ROCE_VERSION_NUM: preferred RoCE version (1 or 2)
  std::string socket_ifname;  // NCCL_SOCKET_IFNAME: interface(s) for the out-of-band TCP socket
  int socket_family = 0;      // NCCL_SOCKET_FAMILY: 0 = any, AF_INET or AF_INET6
  // Queue pairs
  int ib_timeout = 20;           // NCCL_IB_TIMEOUT: ACK timeout exponent, 4.096us * 2^x (1..31)
  int retry_cnt = 7;             // NCCL_IB_RETRY_CNT: transport retries (0..7)
  int rnr_retry = 7;             // SLUICE_RNR_RETRY: RNR retries (0..7, 7 = infinite)
  int min_rnr_timer = 12;        // SLUICE_MIN_RNR_TIMER: RNR NAK timer code (0..31)
  int traffic_class = -1;        // NCCL_IB_TC: GRH traffic class (-1 = comm config or 0)
  int fifo_traffic_class = -1;   // NCCL_IB_FIFO_TC: traffic class of clear-to-send writes (-1 = TC)
  int service_level = -1;        // NCCL_IB_SL: IB service level (-1 = 0)
  int pkey_index = 0;            // NCCL_IB_PKEY: partition key index
  int qps_per_connection = 1;    // NCCL_IB_QPS_PER_CONNECTION: data QPs per connection (1..16)
  int split_data_on_qps = 0;     // NCCL_IB_SPLIT_DATA_ON_QPS: 0 = whole messages round-robin
  bool cts_inline = true;        // NCCL_IB_USE_INLINE / SLUICE_CTS_INLINE: inline clear-to-send
  int adaptive_routing = -2;     // NCCL_IB_ADAPTIVE_ROUTING: 1 on, 0 off, <0 on for IB only
  int ar_threshold = 8192;       // NCCL_IB_AR_THRESHOLD: bytes above which AR mode applies
  bool ece_enable = true;        // NCCL_IB_ECE_ENABLE: exchange and set ECE before RTR
  bool mqp_retry_all = false;    // NCCL_IB_MQP_RETRY_ALL: retry ibv_modify_qp on every error
  int mqp_retry_cnt = 34;        // NCCL_IB_MQP_RETRY_CNT: retries of ibv_modify_qp
  int mqp_retry_sleep_ms = 100;  // NCCL_IB_MQP_RETRY_SLEEP_MSEC: backoff unit (retry k sleeps k x)
  std::string flow_label = "auto";  // SLUICE_FLOW_LABEL: auto | off | seed (flow_label.h)
  // Connections
  int connect_timeout_ms = 120000;  // SLUICE_CONNECT_TIMEOUT_MS: bound on connection setup
  int close_timeout_ms = 2000;      // SLUICE_CLOSE_TIMEOUT_MS: bound on draining at close
  // The eager path (docs/eager.md): messages up to eager_max bytes go without waiting for a
  // clear-to-send, into a ring of eager_slots slots lent from a pool of eager_rings per adapter.
  int eager_max = 4096;              // SLUICE_EAGER_MAX: 0 = off
  int eager_slots = 32;              // SLUICE_EAGER_SLOTS (a power of two, 4..32)
  int eager_rings = 64;              // SLUICE_EAGER_RINGS: rings per adapter
  bool eager_hold = true;            // SLUICE_EAGER_HOLD: hold clear-to-send back (docs/eager.md)
  bool eager_fused = true;           // SLUICE_EAGER_FUSED: the eager path on fused comms too
  int eager_batch = 64;              // SLUICE_EAGER_BATCH: eager messages per WRITE, at most
  int handshake_timeout_ms = 10000;  // SLUICE_HANDSHAKE_TIMEOUT_MS: bound on one accepted socket
  int liveness_poll_ms = 1000;       // SLUICE_LIVENESS_POLL_MS: period of the peer socket check
  int heartbeat_ms = 10000;          // SLUICE_HEARTBEAT_MS: TCP keepalive period (0 = off)
  bool oob_link = true;              // SLUICE_OOB_LINK: one out-of-band socket per peer process
  bool oob_link_handshake = true;  // SLUICE_OOB_LINK_HANDSHAKE: a known peer's connect on the link
  int progress_timeout_ms = 0;     // SLUICE_PROGRESS_TIMEOUT_MS: watchdog bound (0 = derive)
  int cm_mode = 0;                 // SLUICE_CM: CmMode (cm_choice.h): 0 auto, 1 oob, 2 rdmacm
  bool profiler_events = true;     // SLUICE_PROFILER_EVENTS: per-WR events to NCCL's profiler
  // GPU
  int pci_relaxed_ordering = 2;               // NCCL_IB_PCI_RELAXED_ORDERING: 0 / 1 / 2 = if works
  bool gdr_flush_disable = false;             // NCCL_GDR_FLUSH_DISABLE
  bool dmabuf_enable = true;                  // NCCL_DMABUF_ENABLE
  int gdr_mode = 1;                           // SLUICE_GDR: 0 off, 1 auto, 2 force
  bool force_flush = false;                   // NCCL_NET_FORCE_FLUSH
  std::string test_hide_verbs;                // SLUICE_TEST_HIDE_VERBS (tests only)
  std::string cuda_library = "libcuda.so.1";  // SLUICE_CUDA_LIBRARY
  // Topology
  std::string nic_affinity;  // SLUICE_NIC_AFFINITY: "" / "off" / "auto"
  std::string gpu_nic_map;   // SLUICE_GPU_NIC_MAP: explicit GPU -> NIC override
  std::string topo_file;     // SLUICE_TOPO_FILE: hwloc XML instead of the live machine
  // NIC fusion
  bool merge_nics = true;      // NCCL_IB_MERGE_NICS: 0 refuses every fusion
  std::string nic_rails;       // SLUICE_NIC_RAILS: name[:port]=rail[/plane],...
  std::string fusion_weights;  // SLUICE_FUSION_WEIGHTS: name[:port]=weight,...
  int stripe_min = 65536;      // SLUICE_STRIPE_MIN: posted bytes from which a receive is striped
  bool failover = true;        // SLUICE_FAILOVER: a multi-path comm survives the loss of a path
  int failover_fence_ms = 0;   // SLUICE_FAILOVER_FENCE_MS: bound on the peer's FENCE (0 = liveness)
  int failback_retry_ms = 200;         // SLUICE_FAILBACK_RETRY_MS: first recovery attempt's delay
  int failback_retry_cap_ms = 30000;   // SLUICE_FAILBACK_RETRY_CAP_MS: the backoff's cap
  int failback_ramp_ms = 1000;         // SLUICE_FAILBACK_RAMP_MS: per ramp step (25, 50, 100 %)
  bool test_hold_rq = false;           // SLUICE_TEST_HOLD_RQ (tests only)
  int test_failback_create_fails = 0;  // SLUICE_TEST_FAILBACK_CREATE_FAILS (tests only)
  std::string test_fault_file;         // SLUICE_TEST_FAULT_FILE (tests only)
  int test_path_msg_set = 0;           // SLUICE_TEST_PATH_MSG_SET (tests only; 0 = this build's)
  bool standby = false;     // SLUICE_STANDBY: a comm on one device also holds QPs on its standby
  std::string standby_map;  // SLUICE_STANDBY_MAP: primary=standby,... instead of the topology
  // Logging
  int log_level = 2;  // SLUICE_LOG: level of the stderr log where NCCL's logger is absent
};

// How a parameter got its value, for the INFO dump.
struct ParamSource {
  std::string name;    // canonical name (the one documented)
  std::string set_by;  // the environment variable that set it, "" = default
  std::string value;   // final value as text
};

// One row of the table, for documentation and `sluice-info --config`.
struct ParamDoc {
  std::string name;                  // canonical variable name
  std::vector<std::string> aliases;  // other accepted names (earlier in list wins)
  std::string type;                  // "int", "bool", "string", "enum"
  std::string default_value;
  std::string allowed;  // "1..31", "AF_INET|AF_INET6", ...
  std::string doc;      // one line
};

using EnvLookup = std::function<std::optional<std::string>(std::string_view name)>;

// Parses every parameter from `env` (defaults to getenv). A malformed or out-of-range value is an
// error naming the variable, the value and the accepted values. `sources` (optional) receives
// one entry per parameter set by the environment (even when set to its default value).
Result<Config> load_config(const EnvLookup& env, std::vector<ParamSource>* sources = nullptr);
Result<Config> load_config_from_environment(std::vector<ParamSource>* sources = nullptr);

const std::vector<ParamDoc>& param_docs();

// SLUICE_LOG alone, parsed with its table row and without logging (the logger itself needs it
// before any configuration is loaded). An unset or invalid value gives the default (WARN = 2).
int log_level_from_environment();

}  // namespace sluice
