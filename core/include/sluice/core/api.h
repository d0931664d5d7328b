// The core's whole surface as the plugin layer sees it. plugin/ maps NCCL's versioned tables onto
// these calls; nothing here knows NCCL's types. All functions are thread safe with respect to
// different comms; one comm is driven by one thread at a time (NCCL's rule).
//
// Return conventions:
//  * Status::ok()       - done; out-parameters are valid.
//  * Code::kAgain       - (isend/irecv only) cannot post yet; the plugin returns ncclSuccess with
//                         *request = NULL.
//  * anything else      - failure with a human-readable message; the plugin WARNs it once and maps
//                         the code to ncclResult_t.
// listen/connect/accept are non-blocking: connect/accept return ok() with *out == nullptr while the
// connection is still being established, and must be called again with the same arguments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sluice/core/base/config.h"
#include "sluice/core/base/log.h"
#include "sluice/core/base/standby.h"
#include "sluice/core/base/status.h"
#include "sluice/core/memory/gdr.h"

namespace sluice {

inline constexpr size_t kHandleSize = 128;  // NCCL_NET_HANDLE_MAXSIZE
inline constexpr int kMaxRecvs = 8;         // grouped receives per irecv
inline constexpr int kMaxRequests = 32;     // NCCL_NET_MAX_REQUESTS per comm

// ptrSupport bits (same values as NCCL_PTR_*).
inline constexpr int kPtrHost = 0x1;
inline constexpr int kPtrCuda = 0x2;
inline constexpr int kPtrDmabuf = 0x4;

class ListenComm;
class SendComm;
class RecvComm;
struct MemHandle;
struct Request;

// Where a verbs device sits, supplied by the plugin layer from topology/ (core never depends on
// topology). pci_path empty = virtual device / unknown; numa_node -1 = unknown.
struct DeviceLocality {
  std::string pci_path;
  int numa_node = -1;
  std::vector<int> cpus;  // OS indexes of the cores local to the device (empty = unknown)
};
using LocalityProvider =
    std::function<DeviceLocality(const Config& cfg, const std::string& ibdev_name)>;

// The order in which this process should see the devices (SLUICE_NIC_AFFINITY=auto,
// SLUICE_GPU_NIC_MAP), also from topology/. `names` holds the adapters' verbs names; the provider
// returns them reordered (nearest first) with a one-line reason, or an error for a bad override.
struct DeviceOrder {
  std::vector<std::string> names;
  std::string reason;
};
using DeviceOrderProvider =
    std::function<Result<DeviceOrder>(const Config& cfg, const std::vector<std::string>& names)>;

// The GPU side (gpu/, through the plugin): facts for the GPUDirect decision and the dma-buf export.
// Empty = core alone, no CUDA driver ("no GPU layer").
using GpuProvider = std::function<GpuOps(const Config& cfg)>;

// The weights of a fused device's members (make_vdevice), from topology/ through the plugin: each
// member's relative share of a message's bytes from the GPU's path to it (0 = fallback only), with
// a reason per member. An error or an empty provider: weights by port speed.
struct FusionMemberInfo {
  std::string ibdev;  // verbs device name
  int port = 1;
  int speed_mbps = 0;
};
struct FusionWeights {
  std::vector<uint32_t> weights;
  std::vector<std::string> reasons;
};
using FusionWeightProvider = std::function<Result<FusionWeights>(
    const Config& cfg, const std::vector<FusionMemberInfo>& members)>;

// How near the verbs device `b` is to `a` (PCIe switch, host bridge, NUMA node, socket), from
// topology/ through the plugin, for the choice of each device's standby (sluice/core/base/
// standby.h, SLUICE_STANDBY). Empty: nearness unknown, the standby is the first eligible device.
using NearnessProvider =
    std::function<standby::Nearness(const Config& cfg, const std::string& a, const std::string& b)>;

// Process-wide engine: refcounted. The first acquire reads the configuration and discovers devices;
// the last release stops and joins every thread Sluice started and frees everything.
// `sink` (may be NULL) becomes the log sink; `locality` (may be empty) places devices; `order`
// (may be empty) reorders them; `gpu` (may be empty) decides GPUDirect per device; `weights`
// (may be empty) weighs the members of fused devices; `nearness` (may be empty) places devices
// relative to each other for the standby choice.
Status engine_acquire(LogSink sink, LocalityProvider locality = {}, DeviceOrderProvider order = {},
                      GpuProvider gpu = {}, FusionWeightProvider weights = {},
                      NearnessProvider nearness = {});
void engine_release();

// Number of usable devices (one per active port that passes NCCL_IB_HCA). Requires the engine.
int device_count();

inline constexpr int kMaxFusedMembers = 8;    // NCCL_NET_MAX_DEVS_PER_NIC from net v12
inline constexpr int kMaxFusedMembersV9 = 4;  // net v9..v11

struct DeviceProperties {
  const char* name = nullptr;      // unique, e.g. "rxe0" or "mlx5_0:1"; valid until last release
  const char* pci_path = nullptr;  // sysfs PCI function path, or nullptr for virtual devices
  uint64_t guid = 0;
  int ptr_support = kPtrHost;
  int reg_is_global = 1;
  int force_flush = 0;
  int speed_mbps = 0;
  int port = 0;
  float latency_us = 0;
  int max_comms = 0;
  int max_recvs = kMaxRecvs;
  size_t max_p2p_bytes = 0;
  size_t max_coll_bytes = 0;
  int numa_node = -1;
  const char* gdr_summary = nullptr;  // the GPUDirect decision and every "no" with its reason
  // v12 railId/planeId (-1 = NCCL's undefined) and why (SLUICE_NIC_RAILS, docs/fusion.md).
  int rail_id = -1;
  int plane_id = -1;
  const char* rail_reason = nullptr;
  // vProps: the physical devices this one is made of ({index} for a physical device).
  int n_members = 1;
  int members[kMaxFusedMembers] = {};
  const char* weights_summary = nullptr;  // fused devices: each member's share and why
};
Status device_properties(int dev, DeviceProperties* out);
// How many comms `dev` can hold at this configuration (getProperties' maxComms): each adapter's
// max_qp and max_cq over the QPs and CQs one comm takes there (NCCL_IB_QPS_PER_CONNECTION on
// every path of a fused device or of a device with its standby, one CQ per member, and the flush
// QP and CQ a receive comm may create); sluice/core/base/comm_capacity.h. *why says how.
Status device_max_comms(int dev, int* out, std::string* why);

// NIC fusion (NCCL's makeVDevice, ABI v9+): a virtual device made of 2..max_members physical
// devices (kMaxFusedMembers from ABI v12, kMaxFusedMembersV9 before: the plugin passes its ABI's
// limit). It gets the next index after every physical and earlier virtual device; device_count()
// counts it from then on, and listen/connect on it connect over all of its members. The error
// names why a set cannot be fused (docs/fusion.md). The members' weights come from the engine's
// FusionWeightProvider, then SLUICE_FUSION_WEIGHTS; they are logged at INFO.
Status make_vdevice(const int* devs, int n, int* out_dev, int max_members = kMaxFusedMembers);

struct CommConfig {
  int traffic_class = -1;  // from ncclNetCommConfig (v10+); -1 = not set
};

// `handle` is NCCL's 128-byte opaque buffer. listen fills it; connect reads it (and keeps its
// in-progress state reachable from it, so the same pointer must be passed on every call).
Status listen(int dev, void* handle, ListenComm** out);
Status connect(int dev, void* handle, const CommConfig& cfg, SendComm** out);
Status accept(ListenComm* listen_comm, RecvComm** out);

enum class MemType { kHost, kCuda };
// `comm` is a SendComm* or RecvComm* (validated).
Status reg_mr(void* comm, void* data, size_t size, MemType type, MemHandle** out);
Status reg_mr_dmabuf(void* comm, void* data, size_t size, MemType type, uint64_t offset, int fd,
                     MemHandle** out);
Status dereg_mr(void* comm, MemHandle* mh);

// `parent` / `parents[i]`: the caller's per-message profiler handle (NCCL's phandle / phandles),
// passed back to ProfilerHook::start as the events' parent; NULL (or parents NULL) = no events for
// that message.
Status isend(SendComm* comm, void* data, size_t size, int tag, MemHandle* mh, Request** out,
             void* parent = nullptr);
Status irecv(RecvComm* comm, int n, void* const* data, const size_t* sizes, const int* tags,
             MemHandle* const* mhs, Request** out, void* const* parents = nullptr);
// *out = nullptr when nothing needs flushing: host memory (unless NCCL_NET_FORCE_FLUSH), all sizes
// 0, or NCCL_GDR_FLUSH_DISABLE. Otherwise a 1-byte loopback RDMA READ from the last non-empty
// buffer; test() reports the request done only once that READ's completion has been polled.
Status iflush(RecvComm* comm, int n, void* const* data, const int* sizes, MemHandle* const* mhs,
              Request** out);
// On done, fills sizes[0..n) (n = receives in the request, 1 for sends) when sizes != nullptr
// and releases the request.
Status test(Request* request, int* done, size_t* sizes);

// Cumulative counters of a live send or receive comm (`comm` as for reg_mr), for sluiceExt_v1.
struct CommStats {
  uint64_t messages = 0;       // sends posted (send comm) / receives completed (receive comm)
  uint64_t wrs = 0;            // work requests posted on the comm's QPs (send and receive queues)
  uint64_t doorbells = 0;      // ibv_post_send / ibv_post_recv calls
  uint64_t cts_writes = 0;     // clear-to-send RDMA WRITEs (receive comm)
  uint64_t cts_entries = 0;    // receives those writes published (receive comm)
  uint64_t cts_probes = 0;     // progress watchdog's zero-length CTS probes (receive comm; in wrs)
  uint64_t ar_imm_writes = 0;  // adaptive routing's separate closing WRITE_WITH_IMMs (in wrs)
  uint64_t eager = 0;          // eager messages sent (send comm) / copied out (receive comm)
  uint64_t eager_writes = 0;   // send comm: WRITEs that carried them (a batch is one; replays too)
};
Status comm_stats(void* comm, CommStats* out);

// Post-to-completion time histogram: bucket b counts work whose completion was polled between
// 2^b and 2^(b+1) - 1 ns after it was posted (bucket 0 also holds 0 ns, the last everything
// longer).
inline constexpr int kLatencyBuckets = 32;
// Counters of one member device of a comm (a rail): one member unless the device is fused.
struct MemberStats {
  int dev = -1;                // device index (device_count order)
  const char* name = nullptr;  // device name, valid until the last engine release
  uint64_t bytes = 0;          // payload bytes posted (send comm) / received (receive comm)
                               // over this member's paths (a striped message: its part here)
  uint64_t wrs = 0;            // work requests posted (the comm's, on member 0 only)
  uint64_t doorbells = 0;      // ibv_post_send / ibv_post_recv calls
  uint64_t completions = 0;    // completions polled from the comm's CQ
  uint64_t latency[kLatencyBuckets] = {};  // send: group posted -> its closing completion polled;
                                           // receive: clear-to-send posted -> receive completed
  int nqps = 0;                            // the member's data QPs and their numbers
  uint32_t qpn[16] = {};
};
inline constexpr int kMaxMembers = 4;
// Failover (docs/failover.md): one path of a multi-path comm, as its side sees it.
struct PathStats {
  int state = 0;           // failover::State: 0 up, 1 fencing, 2 down, 3 recovering, 4 checking,
                           // 5 ramping
  int local_member = 0;    // the members (index into CommStatsV2::members) it joins
  int remote_member = 0;   // the peer's member
  int share_pct = 100;     // of its weight it carries now (ramping: 25, 50)
  uint32_t epoch = 0;      // its incarnation: +1 per recovery attempt
  uint32_t failovers = 0;  // times it left the stripe
  uint32_t failbacks = 0;  // times it came back in full
  uint32_t attempts = 0;   // recovery attempts since it was last stable
  uint64_t bytes_replayed = 0;  // sender: bytes of its chains sent again on another path
  uint64_t chains_replayed = 0;
  int64_t last_stall_ms = -1;  // its last failover: fault to replay posted (sender) /
                               // receives republished (receiver); -1: none yet
};
// Where a comm stands with the eager path (docs/eager.md; sluice_ext.h SLUICE_EAGER_*).
enum class EagerState : int {
  kOff = 0,         // not negotiated: SLUICE_EAGER_MAX=0 or no pool on either end,
                    // SLUICE_EAGER_FUSED=0 on a comm of more than one path (fusion, standby), or a
                    // peer without the feature
  kNegotiated = 1,  // negotiated, nothing lent yet (before the first receive / first slot read)
  kOn = 2,          // a ring and its book (receive comm) or a book (send comm) lent
  kWithout = 3,     // negotiated, but without for good: no ring or book left in the pool, GPU
                    // memory (receive comm), or the receiver has no ring (send comm)
};
struct CommStatsV2 {
  CommStats base;
  EagerState eager = EagerState::kOff;
  int nmembers = 0;
  MemberStats members[kMaxMembers];
  uint32_t flush_qpn = 0;  // receive comm: the loopback flush QP (0 = none yet)
  bool failover = false;   // the comm fails over (more than one path, both sides run it)
  int npaths = 0;
  PathStats paths[kMaxMembers];
  uint64_t eager_replays = 0;  // send comm: eager WRITEs a failover posted again (eager.cc)
};
Status comm_stats_v2(void* comm, CommStatsV2* out);

// Work-request events for an attached profiler. core calls `start` just before it posts a work
// request that carries a message (a data RDMA WRITE, the closing WRITE_WITH_IMM, a clear-to-send
// WRITE, a flush READ) and `stop` once that work request is known complete, always before test()
// reports its request done, from the thread inside the Sluice call. A message whose parent is
// NULL gets no event; `start` returning NULL means no event (`stop` is not called for it). Every
// event started is stopped: at completion, or at close for work that never completed.
struct WrEvent {
  int member = 0;      // member device of the comm (0 until devices are fused)
  uint64_t wr_id = 0;  // the work request's wr_id
  int opcode = 0;      // enum ibv_wr_opcode
  uint32_t qpn = 0;    // local QP number
  size_t length = 0;   // bytes the work request carries (for a clear-to-send WRITE: the entries
                       // of this one receive buffer)
};
struct ProfilerHook {
  void* (*start)(void* ctx, void* parent, const WrEvent& ev) = nullptr;
  void (*stop)(void* ctx, void* event) = nullptr;
  void* ctx = nullptr;
};
// Attaches `hook` to a send or receive comm before its first isend/irecv (hook.start NULL
// detaches). A no-op with SLUICE_PROFILER_EVENTS=0.
Status set_profiler(void* comm, const ProfilerHook& hook);

Status close_send(SendComm* comm);
Status close_recv(RecvComm* comm);
Status close_listen(ListenComm* comm);

}  // namespace sluice
