// The one table of every Sluice knob, and the only place Sluice reads the environment for
// configuration. Each Config field has exactly one row; docs/configuration.md lists the rows in
// the same order (a unit test keeps the two in sync).
#include "sluice/core/base/config.h"

#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "base/text.h"
#include "sluice/core/base/flow_label.h"
#include "sluice/core/base/fusion_spec.h"
#include "sluice/core/base/hca_filter.h"
#include "sluice/core/base/log.h"
#include "sluice/core/base/net_addr.h"
#include "sluice/core/base/standby.h"

namespace sluice {
namespace {

enum class Type { kInt, kBool, kString, kEnum };

// One accepted spelling of an enum parameter and the value it stores (int fields store `value`,
// string fields store `text`).
struct Choice {
  std::string_view text;
  int value;
};

using Field = std::variant<int Config::*, bool Config::*, std::string Config::*>;
// Extra validation of a string value; returns a reason on failure.
using Check = Status (*)(std::string_view value);

struct Param {
  std::string_view name{};                  // canonical
  std::vector<std::string_view> aliases{};  // earlier wins; the canonical name beats them all
  Type type = Type::kString;
  Field field{};
  long long min = 0;  // kInt bounds, inclusive
  long long max = 0;
  std::vector<Choice> choices{};    // kEnum
  Check check = nullptr;            // kString
  std::string_view allowed_text{};  // kString: what the docs say is accepted
  std::string_view default_text{};  // overrides the formatted default ("" = format it)
  std::string_view doc{};
};

Status check_hca_list(std::string_view v) {
  return HcaFilter::parse(v).status();
}
Status check_rails(std::string_view v) {
  return NamedList::parse(v, NamedList::Kind::kRails).status();
}
Status check_weights(std::string_view v) {
  return NamedList::parse(v, NamedList::Kind::kWeights).status();
}
Status check_standby_map(std::string_view v) {
  return standby::parse_map(v).status();
}
Status check_cidr(std::string_view v) {
  return Cidr::parse(v).status();
}
Status check_flow_label(std::string_view v) {
  return flow::parse_policy(v).status();
}

const std::vector<Choice> kFamilies = {{"AF_INET", AF_INET}, {"AF_INET6", AF_INET6}};

// clang-format off
const std::vector<Param>& table() {
  static const std::vector<Param> params = {
    // Devices and addressing
    {.name = "NCCL_IB_HCA", .type = Type::kString, .field = &Config::ib_hca,
     .check = check_hca_list, .allowed_text = "[^][=]name[:port],... (at most 32 entries)",
     .doc = "RDMA devices/ports to use: prefix match, '=' exact names, '^' exclude; empty = every active port"},
    {.name = "NCCL_IB_GID_INDEX", .type = Type::kInt, .field = &Config::gid_index,
     .min = -1, .max = 65535,
     .doc = "RoCE GID index to use; -1 = choose automatically (ignored on InfiniBand)"},
    {.name = "NCCL_IB_ADDR_FAMILY", .type = Type::kEnum, .field = &Config::addr_family,
     .choices = kFamilies,
     .doc = "Address family of the automatically chosen RoCE GID (IPv4-mapped GIDs are AF_INET)"},
    {.name = "NCCL_IB_ADDR_RANGE", .type = Type::kString, .field = &Config::addr_range,
     .check = check_cidr, .allowed_text = "CIDR, e.g. 10.0.0.0/16 or fd00::/8",
     .doc = "Range the automatically chosen RoCE GID should lie in; empty = any"},
    {.name = "NCCL_IB_ROCE_VERSION_NUM", .type = Type::kInt, .field = &Config::roce_version,
     .min = 1, .max = 2,
     .doc = "Preferred RoCE version for automatic GID choice"},
    {.name = "NCCL_SOCKET_IFNAME", .type = Type::kString, .field = &Config::socket_ifname,
     .check = check_hca_list, .allowed_text = "[^][=]prefix,... (NCCL_IB_HCA syntax, ports ignored)",
     .doc = "IP interface(s) for the out-of-band TCP socket; empty = ib*, then others, then docker*, lo, virbr*"},
    {.name = "NCCL_SOCKET_FAMILY", .type = Type::kEnum, .field = &Config::socket_family,
     .choices = kFamilies, .default_text = "any",
     .doc = "Address family of the out-of-band socket interface; unset = either"},
    // Queue pairs
    {.name = "NCCL_IB_TIMEOUT", .type = Type::kInt, .field = &Config::ib_timeout,
     .min = 1, .max = 31,
     .doc = "QP local ACK timeout exponent: 4.096 us * 2^value"},
    {.name = "NCCL_IB_RETRY_CNT", .type = Type::kInt, .field = &Config::retry_cnt,
     .min = 0, .max = 7,
     .doc = "QP transport retry count"},
    {.name = "SLUICE_RNR_RETRY", .type = Type::kInt, .field = &Config::rnr_retry,
     .min = 0, .max = 7,
     .doc = "QP receiver-not-ready retry count (7 = retry forever)"},
    {.name = "SLUICE_MIN_RNR_TIMER", .type = Type::kInt, .field = &Config::min_rnr_timer,
     .min = 0, .max = 31,
     .doc = "QP minimum RNR NAK timer code (IB spec table; 12 = 0.64 ms)"},
    {.name = "NCCL_IB_TC", .type = Type::kInt, .field = &Config::traffic_class,
     .min = -1, .max = 255,
     .doc = "GRH traffic class; -1 = the communicator's traffic class, else 0"},
    {.name = "NCCL_IB_FIFO_TC", .type = Type::kInt, .field = &Config::fifo_traffic_class,
     .min = -1, .max = 255,
     .doc = "Traffic class of clear-to-send writes; -1 = same as NCCL_IB_TC"},
    {.name = "NCCL_IB_SL", .type = Type::kInt, .field = &Config::service_level,
     .min = -1, .max = 15,
     .doc = "InfiniBand service level; -1 = the communicator's traffic class, else 0"},
    {.name = "NCCL_IB_PKEY", .type = Type::kInt, .field = &Config::pkey_index,
     .min = 0, .max = 65535,
     .doc = "Partition key index used when moving QPs to INIT"},
    {.name = "NCCL_IB_QPS_PER_CONNECTION", .type = Type::kInt, .field = &Config::qps_per_connection,
     .min = 1, .max = 16,
     .doc = "Data QPs per connection"},
    {.name = "NCCL_IB_SPLIT_DATA_ON_QPS", .type = Type::kInt, .field = &Config::split_data_on_qps,
     .min = 0, .max = 1,
     .doc = "0 = each message travels whole on one QP, round-robin; 1 = split every message over all QPs"},
    {.name = "NCCL_IB_USE_INLINE", .aliases = {"SLUICE_CTS_INLINE"}, .type = Type::kBool,
     .field = &Config::cts_inline,
     .doc = "Post clear-to-send entries inline (Sluice default on; NCCL's is off)"},
    {.name = "NCCL_IB_ADAPTIVE_ROUTING", .type = Type::kInt, .field = &Config::adaptive_routing,
     .min = -2, .max = 1,
     .doc = "Adaptive-routing-safe sends: 1 = messages above NCCL_IB_AR_THRESHOLD close with a "
            "separate WRITE_WITH_IMM; 0 = off; -2 (or -1) = NCCL's default: on for InfiniBand, "
            "off for RoCE"},
    {.name = "NCCL_IB_AR_THRESHOLD", .type = Type::kInt, .field = &Config::ar_threshold,
     .min = 0, .max = 1073741824,
     .doc = "Message size in bytes above which adaptive-routing mode sends the immediate separately"},
    {.name = "NCCL_IB_ECE_ENABLE", .type = Type::kBool, .field = &Config::ece_enable,
     .doc = "Enhanced Connection Establishment: query each QP's ECE, exchange it and set what both "
            "ends offer before RTR (skipped where the provider has none)"},
    {.name = "NCCL_IB_MQP_RETRY_ALL", .type = Type::kBool, .field = &Config::mqp_retry_all,
     .doc = "Retry a failed ibv_modify_qp on every error, not only ETIMEDOUT"},
    {.name = "NCCL_IB_MQP_RETRY_CNT", .type = Type::kInt, .field = &Config::mqp_retry_cnt,
     .min = 0, .max = 100,
     .doc = "Retries of a failed ibv_modify_qp (ETIMEDOUT, or every error with NCCL_IB_MQP_RETRY_ALL)"},
    {.name = "NCCL_IB_MQP_RETRY_SLEEP_MSEC", .type = Type::kInt, .field = &Config::mqp_retry_sleep_ms,
     .min = 0, .max = 10000,
     .doc = "Sleep before modify-QP retry k: k times this many milliseconds (linear backoff)"},
    {.name = "SLUICE_FLOW_LABEL", .type = Type::kString, .field = &Config::flow_label,
     .check = check_flow_label, .allowed_text = "auto|off|<seed> (decimal or 0x hex, 64 bits; 0 = off)",
     .doc = "RoCE v2 flow labels per QP: auto or a seed = the QPs of a connection get a spread set "
            "of labels, hence evenly spread UDP source ports for ECMP; off = the provider's own "
            "(the kernel hashes the QP numbers; rdma_cm's route hashes its ports). Not on InfiniBand"},
    // Connections
    {.name = "SLUICE_CONNECT_TIMEOUT_MS", .type = Type::kInt, .field = &Config::connect_timeout_ms,
     .min = 100, .max = 3600000,
     .doc = "Bound on connection setup on the connect side in milliseconds; the accepting side "
            "keeps a peer's handshake (its metadata valid) as long, from its accept"},
    {.name = "SLUICE_CLOSE_TIMEOUT_MS", .type = Type::kInt, .field = &Config::close_timeout_ms,
     .min = 0, .max = 60000,
     .doc = "Bound on draining outstanding work at close in milliseconds"},
    {.name = "SLUICE_EAGER_MAX", .type = Type::kInt, .field = &Config::eager_max, .min = 0,
     .max = 65536,
     .doc = "Largest message in bytes sent eagerly (without waiting for the receiver's "
            "clear-to-send) on a comm whose peer also has it; 0 = off (docs/eager.md)"},
    {.name = "SLUICE_EAGER_SLOTS", .type = Type::kInt, .field = &Config::eager_slots,
     .min = kEagerSlotsMin, .max = kEagerSlotsMax,
     .doc = "Eager ring slots per comm (rounded down to a power of two): eager messages a sender "
            "may have ahead of the receiver's copies"},
    {.name = "SLUICE_EAGER_HOLD", .type = Type::kBool, .field = &Config::eager_hold,
     .doc = "With eager on, a receiver whose traffic is eager holds each receive's clear-to-send "
            "back until its message lands in the ring or the sender asks for it (1 message, 1 "
            "WRITE); needs the receiver's requests tested while a send waits, as NCCL's proxy does"},
    {.name = "SLUICE_EAGER_FUSED", .type = Type::kBool, .field = &Config::eager_fused,
     .doc = "The eager path on fused comms too (NIC fusion, a standby), where both ends offer "
            "it: eager WRITEs follow failover's routes and a failover replays those it did not "
            "see complete; 0 = fused comms use clear-to-send only"},
    {.name = "SLUICE_EAGER_BATCH", .type = Type::kInt, .field = &Config::eager_batch, .min = 1,
     .max = 64,
     .doc = "Most eager messages one WRITE carries: an eager send made while an earlier eager "
            "WRITE of its comm is not seen complete joins a batch that goes at the comm's next "
            "test (or sooner: full, or a send that cannot join); 1 = one WRITE per message"},
    {.name = "SLUICE_EAGER_RINGS", .type = Type::kInt, .field = &Config::eager_rings, .min = 0,
     .max = 4096,
     .doc = "Eager rings per adapter, shared by its comms: a comm that finds none free sends "
            "with clear-to-send only; bounds the eager memory whatever the comms open"},
    {.name = "SLUICE_HANDSHAKE_TIMEOUT_MS", .type = Type::kInt,
     .field = &Config::handshake_timeout_ms, .min = 100, .max = 3600000,
     .doc = "Bound in milliseconds on each accepted connection until its metadata shows it a "
            "peer of this listener: a connection that has not sent valid metadata by then is "
            "dropped (the listener keeps serving others); a peer's is then bounded by "
            "SLUICE_CONNECT_TIMEOUT_MS"},
    {.name = "SLUICE_LIVENESS_POLL_MS", .type = Type::kInt, .field = &Config::liveness_poll_ms,
     .min = 1, .max = 60000,
     .doc = "How often a comm in use checks its peer's connection socket (EOF, reset, "
            "keepalive timeout), in milliseconds"},
    {.name = "SLUICE_HEARTBEAT_MS", .type = Type::kInt, .field = &Config::heartbeat_ms,
     .min = 0, .max = 3600000,
     .doc = "TCP keepalive on one connection socket per peer host (when it times out, every "
            "comm to that host fails with it): probe after this much silence (whole "
            "seconds, rounded up), give up 4x after the last answer (TCP_USER_TIMEOUT): a "
            "silent peer host is noticed within 5x; 0 = off"},
    {.name = "SLUICE_OOB_LINK", .type = Type::kBool, .field = &Config::oob_link,
     .doc = "One out-of-band TCP socket per peer process (a peer link), shared by every comm "
            "to it for liveness, failure notices and failover's path messages; each connection's "
            "own socket is closed once it is set up. 0: each comm keeps its own socket (as an "
            "older Sluice peer does; a link is used only when both sides have it on)"},
    {.name = "SLUICE_OOB_LINK_HANDSHAKE", .type = Type::kBool,
     .field = &Config::oob_link_handshake,
     .doc = "With SLUICE_OOB_LINK: a connect to a process this one already has a peer link with "
            "runs its handshake as frames on that link, so it makes no TCP connection (no "
            "handshake, port or descriptor). 0: every connect makes its own TCP connection to the "
            "listener's port, closed once the comm is on the link (as an older Sluice does; the "
            "link carries handshakes only when both sides have it on)"},
    {.name = "SLUICE_PROGRESS_TIMEOUT_MS", .type = Type::kInt,
     .field = &Config::progress_timeout_ms, .min = 0, .max = 86400000,
     .doc = "Progress watchdog: a comm whose posted send-side work has had no completion on a "
            "QP for this long fails; 0 = derive from NCCL_IB_TIMEOUT and NCCL_IB_RETRY_CNT"},
    {.name = "SLUICE_PROFILER_EVENTS", .type = Type::kBool, .field = &Config::profiler_events,
     .doc = "Start and stop a NET/IB-style profiler event for each work request that carries a "
            "message, whenever NCCL passes a profiler callback to init (v10+); 0 = never call it"},
    {.name = "SLUICE_CM", .type = Type::kEnum, .field = &Config::cm_mode,
     .choices = {{"auto", 0}, {"oob", 1}, {"rdmacm", 2}}, .default_text = "auto",
     .doc = "Connection manager: oob = TCP handshake and manual QP bring-up; rdmacm = QPs "
            "established through librdmacm (route-resolved GID); auto = rdmacm where the listener's "
            "address routes through the device, else oob"},
    // GPU
    {.name = "NCCL_IB_PCI_RELAXED_ORDERING", .type = Type::kInt,
     .field = &Config::pci_relaxed_ordering, .min = 0, .max = 2,
     .doc = "Register memory with IBV_ACCESS_RELAXED_ORDERING: 0 = never, 1 = always, 2 = where a "
            "registration with it works on the device"},
    {.name = "NCCL_GDR_FLUSH_DISABLE", .type = Type::kBool, .field = &Config::gdr_flush_disable,
     .doc = "Never flush receives (iflush completes at once, even with NCCL_NET_FORCE_FLUSH)"},
    {.name = "NCCL_DMABUF_ENABLE", .type = Type::kBool, .field = &Config::dmabuf_enable,
     .doc = "Register GPU memory through DMA-BUF when GPU, driver and NIC support it; 0 = peermem only"},
    {.name = "SLUICE_GDR", .type = Type::kEnum, .field = &Config::gdr_mode,
     .choices = {{"off", 0}, {"auto", 1}, {"force", 2}}, .default_text = "auto",
     .doc = "GPUDirect RDMA: auto = when detection says it works; off = host staging; force = offer CUDA memory whenever a CUDA driver is present"},
    {.name = "NCCL_NET_FORCE_FLUSH", .type = Type::kBool, .field = &Config::force_flush,
     .doc = "Flush with a loopback RDMA READ every non-empty receive that iflush is called for. NCCL calls iflush only for GPUDirect receives (never for host buffers) and reads this variable too: set, it flushes them on Hopper and later, where it otherwise skips the flush"},
    {.name = "SLUICE_TEST_HIDE_VERBS", .type = Type::kString, .field = &Config::test_hide_verbs,
     .allowed_text = "entry point names, e.g. ibv_reg_dmabuf_mr,ibv_query_ece",
     .doc = "Tests only: verbs entry points newer than rdma-core 28 to treat as missing"},
    {.name = "SLUICE_CUDA_LIBRARY", .type = Type::kString, .field = &Config::cuda_library,
     .allowed_text = "library name or path", .default_text = "libcuda.so.1",
     .doc = "CUDA driver library to dlopen (tests point it at a stand-in driver)"},
    // Topology
    {.name = "SLUICE_NIC_AFFINITY", .type = Type::kEnum, .field = &Config::nic_affinity,
     .choices = {{"off", 0}, {"auto", 1}}, .default_text = "off",
     .doc = "auto = derive GPU/NIC affinity from the topology; off = leave the NIC choice to NCCL"},
    {.name = "SLUICE_GPU_NIC_MAP", .type = Type::kString, .field = &Config::gpu_nic_map,
     .allowed_text = "GPU -> NIC map (validated by topology)",
     .doc = "Explicit GPU -> NIC override; empty = derived from the topology"},
    {.name = "SLUICE_TOPO_FILE", .type = Type::kString, .field = &Config::topo_file,
     .allowed_text = "path",
     .doc = "hwloc XML file to use instead of the live machine's topology"},
    // NIC fusion (makeVDevice, docs/fusion.md)
    {.name = "NCCL_IB_MERGE_NICS", .type = Type::kBool, .field = &Config::merge_nics,
     .doc = "Let NCCL fuse several devices into one (makeVDevice); 0 = refuse every fusion of more than one device"},
    {.name = "SLUICE_NIC_RAILS", .type = Type::kString, .field = &Config::nic_rails,
     .check = check_rails, .allowed_text = "name[:port]=rail[/plane],... (rail 0..32767, plane 0..14)",
     .doc = "Rail and plane of each device, reported to NCCL 2.30+ (v12 railId/planeId); unset = NCCL's undefined (-1)"},
    {.name = "SLUICE_FUSION_WEIGHTS", .type = Type::kString, .field = &Config::fusion_weights,
     .check = check_weights, .allowed_text = "name[:port]=weight,... (0..10000, 0 = fallback only)",
     .doc = "Share of each member of a fused device, instead of the weights derived from the topology"},
    {.name = "SLUICE_STRIPE_MIN", .type = Type::kInt, .field = &Config::stripe_min,
     .min = 0, .max = 1LL << 30,
     .doc = "A receive over a fused device whose buffers hold at least this many bytes is striped over every member by weight; a smaller one travels whole over one member, the members taken in turn"},
    {.name = "SLUICE_FAILOVER", .type = Type::kBool, .field = &Config::failover,
     .doc = "A comm over a fused device survives the loss of a path: its traffic moves to the paths left, what was in flight is replayed after both sides fenced the failed path (docs/failover.md); 0 = the comm fails with the path, as before. Both sides must run it"},
    {.name = "SLUICE_FAILOVER_FENCE_MS", .type = Type::kInt, .field = &Config::failover_fence_ms,
     .min = 0, .max = 86400000,
     .doc = "Bound on the peer's FENCE once a path failed: past it the comm fails. 0 = no bound of its own: the peer answers at its next call, and a peer that is gone is caught by SLUICE_HEARTBEAT_MS"},
    {.name = "SLUICE_FAILBACK_RETRY_MS", .type = Type::kInt, .field = &Config::failback_retry_ms,
     .min = 1, .max = 3600000,
     .doc = "Delay of the first attempt to bring a failed path back (fresh QPs over the connection socket); each failed attempt doubles it, up to SLUICE_FAILBACK_RETRY_CAP_MS, for as long as the comm lives"},
    {.name = "SLUICE_FAILBACK_RETRY_CAP_MS", .type = Type::kInt, .field = &Config::failback_retry_cap_ms,
     .min = 1, .max = 3600000,
     .doc = "The longest delay between two attempts to bring a failed path back; a path is never given up while its comm lives"},
    {.name = "SLUICE_FAILBACK_RAMP_MS", .type = Type::kInt, .field = &Config::failback_ramp_ms,
     .min = 0, .max = 3600000,
     .doc = "A path that is back carries 25 %, then 50 %, then all of its share, one step per this many milliseconds without a fault"},
    {.name = "SLUICE_TEST_HOLD_RQ", .type = Type::kBool, .field = &Config::test_hold_rq,
     .doc = "Tests only: a fenced QP's successful receive completions are held until its drain marker is back, as if the receive queue's completions came after the send queue's (the fence must wait for them)"},
    {.name = "SLUICE_TEST_FAILBACK_CREATE_FAILS", .type = Type::kInt, .field = &Config::test_failback_create_fails,
     .min = 0, .max = 1000000,
     .doc = "Tests only: the first N QPs failback creates in this process fail, as ibv_create_qp out of memory would"},
    {.name = "SLUICE_TEST_FAULT_FILE", .type = Type::kString, .field = &Config::test_fault_file,
     .allowed_text = "a file path",
     .doc = "Tests only: the async-event threads read this file every 100 ms; a line 'device_fatal <device>' makes that adapter's thread take an IBV_EVENT_DEVICE_FATAL, once (rxe never raises one)"},
    {.name = "SLUICE_TEST_PATH_MSG_SET", .type = Type::kInt, .field = &Config::test_path_msg_set,
     .min = 0, .max = 2,
     .doc = "Tests only: the failover path-message set this side offers at connect (1: FENCE, OFFER, ANSWER, as Sluice before CHECKED; 2: with CHECKED and ramp shares); 0 = this build's"},
    {.name = "SLUICE_STANDBY", .type = Type::kBool, .field = &Config::standby,
     .doc = "A comm on one physical device also holds connected QPs on a standby device, the nearest other NIC by the topology (docs/standby.md): it carries nothing (no data, no clear-to-send) until the primary fails, then the comm fails over to it and back. Off by default: it doubles every registration (each buffer on both adapters) and the comm's QPs. Needs SLUICE_FAILOVER"},
    {.name = "SLUICE_STANDBY_MAP", .type = Type::kString, .field = &Config::standby_map,
     .check = check_standby_map, .allowed_text = "primary=standby,... (device names; standby none = no standby)",
     .doc = "Each named device's standby, instead of the topology's choice; a device not named keeps the topology's"},
    // Logging
    {.name = "SLUICE_LOG", .type = Type::kEnum, .field = &Config::log_level,
     .choices = {{"none", 0}, {"warn", 2}, {"info", 3}, {"trace", 5}},
     .doc = "Level of Sluice's own stderr log, used only where NCCL's logger is not installed "
            "(sluice-info, tests); inside NCCL, NCCL_DEBUG decides"},
  };
  return params;
}
// clang-format on

using text::trim;

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

constexpr std::string_view kBoolAllowed = "0|1|true|false|yes|no|on|off";

std::optional<bool> parse_bool(std::string_view v) {
  for (std::string_view t : {"1", "true", "yes", "on"}) {
    if (iequals(v, t)) return true;
  }
  for (std::string_view t : {"0", "false", "no", "off"}) {
    if (iequals(v, t)) return false;
  }
  return std::nullopt;
}

// Whole string, base 10, optional sign.
std::optional<long long> parse_int(std::string_view v) {
  if (!v.empty() && v.front() == '+') {
    v.remove_prefix(1);
    if (!v.empty() && v.front() == '-') return std::nullopt;  // "+-1"
  }
  if (v.empty()) return std::nullopt;
  long long out = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || end != v.data() + v.size()) return std::nullopt;
  return out;
}

std::string choices_text(const Param& p) {
  std::string s;
  for (const Choice& c : p.choices) {
    if (!s.empty()) s += '|';
    s += c.text;
  }
  return s;
}

std::string allowed_text(const Param& p) {
  switch (p.type) {
    case Type::kInt:
      return std::to_string(p.min) + ".." + std::to_string(p.max);
    case Type::kBool:
      return std::string(kBoolAllowed);
    case Type::kEnum:
      return choices_text(p);
    case Type::kString:
      return std::string(p.allowed_text);
  }
  return {};
}

std::string_view type_name(Type t) {
  switch (t) {
    case Type::kInt:
      return "int";
    case Type::kBool:
      return "bool";
    case Type::kEnum:
      return "enum";
    case Type::kString:
      return "string";
  }
  return "?";
}

// The field's current value as text (the spelling a user would write).
std::string format_value(const Param& p, const Config& c) {
  return std::visit(
      [&](auto member) -> std::string {
        const auto& v = c.*member;
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, bool>) {
          return v ? "1" : "0";
        } else if constexpr (std::is_same_v<V, int>) {
          for (const Choice& ch : p.choices) {
            if (ch.value == v) return std::string(ch.text);
          }
          return std::to_string(v);
        } else {
          return v;
        }
      },
      p.field);
}

Status invalid(std::string_view var, std::string_view value, std::string_view expected) {
  return Status(Code::kInvalidUsage, std::string(var) + "=\"" + std::string(value) +
                                         "\" is not valid: expected " + std::string(expected));
}

// Parses `value` (already trimmed, non-empty) for `p` into `c`. `var` is the variable that set it.
Status apply(const Param& p, std::string_view var, std::string_view value, Config& c) {
  switch (p.type) {
    case Type::kInt: {
      const auto v = parse_int(value);
      if (!v || *v < p.min || *v > p.max) {
        return invalid(var, value, "an integer in " + allowed_text(p));
      }
      c.*std::get<int Config::*>(p.field) = static_cast<int>(*v);
      return Status::ok();
    }
    case Type::kBool: {
      const auto v = parse_bool(value);
      if (!v) return invalid(var, value, "a boolean (" + std::string(kBoolAllowed) + ")");
      c.*std::get<bool Config::*>(p.field) = *v;
      return Status::ok();
    }
    case Type::kEnum: {
      for (const Choice& ch : p.choices) {
        if (!iequals(value, ch.text)) continue;
        if (const auto* f = std::get_if<int Config::*>(&p.field)) {
          c.*(*f) = ch.value;
        } else {
          c.*std::get<std::string Config::*>(p.field) = std::string(ch.text);
        }
        return Status::ok();
      }
      return invalid(var, value, "one of " + choices_text(p));
    }
    case Type::kString: {
      if (p.check != nullptr) {
        const Status st = p.check(value);
        if (!st.is_ok()) {
          return Status(Code::kInvalidUsage, std::string(var) + "=\"" + std::string(value) +
                                                 "\" is not valid: " + st.message() +
                                                 "; expected " + allowed_text(p));
        }
      }
      c.*std::get<std::string Config::*>(p.field) = std::string(value);
      return Status::ok();
    }
  }
  return Status(Code::kInternalError, "unknown parameter type");
}

// Rules that involve more than one parameter.
Status check_combination(const Config& c) {
  if (!c.addr_range.empty()) {
    const auto r = Cidr::parse(c.addr_range);
    if (r.is_ok() && r.value().family != c.addr_family) {
      return Status(Code::kInvalidUsage, "NCCL_IB_ADDR_RANGE=\"" + c.addr_range + "\" is an " +
                                             (r.value().family == AF_INET ? "IPv4" : "IPv6") +
                                             " range but NCCL_IB_ADDR_FAMILY is " +
                                             (c.addr_family == AF_INET ? "AF_INET" : "AF_INET6") +
                                             ": no GID could match; set both to the same family");
    }
  }
  return Status::ok();
}

}  // namespace

Result<Config> load_config(const EnvLookup& env, std::vector<ParamSource>* sources) {
  Config c;
  if (sources != nullptr) sources->clear();
  for (const Param& p : table()) {
    // The canonical name first, then the aliases in order; the first non-empty value wins.
    std::string_view set_by;
    std::string value;
    auto consider = [&](std::string_view var) {
      const std::optional<std::string> raw = env(var);
      if (!raw) return;
      const std::string_view v = trim(*raw);
      if (v.empty()) return;  // as NCCL: an empty value means unset
      if (set_by.empty()) {
        set_by = var;
        value = std::string(v);
      } else if (v != value) {
        SLUICE_WARN("%.*s=\"%.*s\" ignored: %.*s=\"%s\" takes precedence",
                    static_cast<int>(var.size()), var.data(), static_cast<int>(v.size()), v.data(),
                    static_cast<int>(set_by.size()), set_by.data(), value.c_str());
      }
    };
    consider(p.name);
    for (std::string_view alias : p.aliases) consider(alias);
    if (set_by.empty()) continue;

    SLUICE_RETURN_IF_ERROR(apply(p, set_by, value, c));
    if (sources != nullptr) {
      sources->push_back(ParamSource{std::string(p.name), std::string(set_by), format_value(p, c)});
    }
  }
  SLUICE_RETURN_IF_ERROR(check_combination(c));
  return c;
}

Result<Config> load_config_from_environment(std::vector<ParamSource>* sources) {
  return load_config(
      [](std::string_view name) -> std::optional<std::string> {
        const char* v = std::getenv(std::string(name).c_str());  // NOLINT(concurrency-mt-unsafe)
        if (v == nullptr) return std::nullopt;
        return std::string(v);
      },
      sources);
}

int log_level_from_environment() {
  const char* v = std::getenv("SLUICE_LOG");  // NOLINT(concurrency-mt-unsafe)
  const Config defaults;
  if (v == nullptr) return defaults.log_level;
  for (const Param& p : table()) {
    if (p.name != "SLUICE_LOG") continue;
    for (const Choice& ch : p.choices)
      if (iequals(trim(v), ch.text)) return ch.value;
  }
  return defaults.log_level;
}

const std::vector<ParamDoc>& param_docs() {
  static const std::vector<ParamDoc> docs = [] {
    const Config defaults;
    std::vector<ParamDoc> out;
    for (const Param& p : table()) {
      ParamDoc d;
      d.name = std::string(p.name);
      for (std::string_view a : p.aliases) d.aliases.emplace_back(a);
      d.type = std::string(type_name(p.type));
      d.default_value =
          p.default_text.empty() ? format_value(p, defaults) : std::string(p.default_text);
      d.allowed = allowed_text(p);
      d.doc = std::string(p.doc);
      out.push_back(std::move(d));
    }
    return out;
  }();
  return docs;
}

}  // namespace sluice
