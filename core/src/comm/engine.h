// The process-wide engine: configuration, devices (one per usable port), per-adapter verbs context,
// protection domain and registration cache, the async-event threads, and the out-of-band interface.
// Created by the first engine_acquire, destroyed by the last engine_release.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "sluice/core/api.h"
#include "sluice/core/base/config.h"
#include "sluice/core/base/fabric.h"
#include "sluice/core/base/net_addr.h"
#include "sluice/core/base/verbs.h"

namespace sluice {

struct Adapter;
struct Conn;

struct MrEntry;

// A registration: what regMr/regMrDmaBuf hand to NCCL, one per call. It names its own range and
// the MR that serves it; several registrations may share one MR (MrEntry).
struct MemHandle {
  static constexpr uint32_t kMagic = 0x534c4d52;     // "SLMR"
  static constexpr uint32_t kDeferred = 0x534c4446;  // "SLDF": deregistered, MR kept (mr.cc)
  uint32_t magic = kMagic;
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  uintptr_t base = 0;  // this registration's page-rounded start (dma-buf: the exact start)
  size_t len = 0;      // and length
  Adapter* adapter = nullptr;
  MemType type = MemType::kHost;
  unsigned access = 0;       // ibv access flags of the MR
  MrEntry* entry = nullptr;  // the MR that serves it
  // Deregistered while a request of this comm still used it (magic kDeferred): dead to the caller
  // and never reused, freed once the requests are done or the comm's queues are drained (mr.cc).
  uintptr_t deferred_on = 0;  // the comm, as a key
  // NIC fusion: a regMr on a comm of several members registers the range on every member adapter.
  // This handle (member 0's adapter) owns one extra registration per further distinct adapter, in
  // the comm's member order; each is a user of an MR in its own adapter's cache (magic kMember
  // while live, so that adapter's later regMr may share its MR; kMemberDeferred once this handle
  // is deferred: never shared again), never handed to the caller, freed with this handle under
  // its adapter's lock (mr.cc). Members on one adapter (one PD) share one registration.
  static constexpr uint32_t kMember = 0x534c4d4d;          // "SLMM"
  static constexpr uint32_t kMemberDeferred = 0x534c4d44;  // "SLMD"
  static constexpr int kMaxMore = kMaxMembers - 1;
  MemHandle* more[kMaxMore] = {};
  int nmore = 0;
  // The registration of this range on adapter `a`: this one, an extra, or null (not registered
  // there). At most kMaxMembers compares; no lock (the extras are fixed while the handle lives).
  const MemHandle* on(const Adapter* a) const {
    if (adapter == a) return this;
    for (int i = 0; i < nmore; ++i)
      if (more[i]->adapter == a) return more[i];
    return nullptr;
  }
  bool contains(const void* p, size_t n) const {
    auto a = reinterpret_cast<uintptr_t>(p);
    return a >= base && n <= len && a - base <= len - n;
  }
};

// One MR and the live registrations it serves. The MR covers exactly the range of the
// registration that created it (never a union); it is reused only for a request that lies inside
// the range of a registration still alive on it, i.e. inside memory a live user still holds, so a
// reused MR is always pinned to the pages the request names (mr.cc). Guarded by Adapter::mr_mu.
struct MrEntry {
  verbs::Mr mr;
  uintptr_t base = 0;
  size_t len = 0;
  MemType type = MemType::kHost;
  unsigned access = 0;
  std::vector<std::unique_ptr<MemHandle>> users;  // destroyed with the entry, after nothing uses it
};

// One verbs device (adapter): context, PD and registration cache shared by all of its ports and
// comms.
class EagerPool;  // comm/eager_pool.h
struct EagerPoolDeleter {
  void operator()(EagerPool* p) const;
};

struct Adapter {
  std::string name;  // ibv device name
  verbs::Context ctx;
  verbs::Pd pd;
  DeviceLocality locality;
  std::mutex mr_mu;
  std::vector<std::unique_ptr<MrEntry>> mrs;  // the registration cache (host and CUDA)
  // The eager path's rings (comm/eager_pool.h), made when a first comm negotiates it and freed
  // when the last such comm is torn down (eager_users, under eager_mu), or before the PD (member
  // order).
  std::mutex eager_mu;
  uint32_t eager_users = 0;
  // Why the pool could not be made (its registration failed): said once at WARN; the adapter's
  // comms then go by clear-to-send only, and no later comm tries the registration again.
  std::string eager_error;
  // Adapters whose PD refused this adapter's pool (a fused comm's other member, eager_pool_keys),
  // with the refusal: said once at WARN, given to every later comm that spans both without trying
  // again (each try pins the whole pool), for the adapter's life (a pool made again is as large).
  std::vector<std::pair<const Adapter*, Status>> eager_refused;
  std::unique_ptr<EagerPool, EagerPoolDeleter> eager;
  DmabufProbe dmabuf;             // the NIC's answer to ibv_reg_dmabuf_mr(fd -1)
  RoProbe ro_probe;               // a registration with IBV_ACCESS_RELAXED_ORDERING (fabric.h)
  bool relaxed_ordering = false;  // NCCL_IB_PCI_RELAXED_ORDERING's decision for this adapter
  std::atomic<bool> fatal{false};
  std::mutex fatal_mu;
  std::string fatal_reason;
  // Live send/receive comms on this adapter, for mapping async events to them (liveness.cc).
  std::mutex comms_mu;
  std::unordered_set<Conn*> comms;  // a comm joins and leaves in O(1) (issue 32)
  ~Adapter();
};

// One usable port: what NCCL calls a device.
struct Device {
  int index = 0;
  std::string name;  // unique
  Adapter* adapter = nullptr;
  uint8_t port = 1;
  ibv_port_attr attr{};
  bool roce = false;
  GidChoice gid;  // RoCE: the chosen GID; IB: index 0
  uint64_t guid = 0;
  int max_qp = 0;
  int speed_mbps = 0;
  DeviceProperties props;
  std::string pci_path;
  GdrDecision gdr;
  RelaxedOrdering ro;  // registrations on this device ask for relaxed ordering (fabric.h)
  AdaptiveRouting ar;  // sends above ar.threshold close with a separate WRITE_WITH_IMM
  std::atomic<bool> ece_said{false};  // the first connection's ECE outcome was logged
  std::string rail_reason;            // where props.rail_id came from (SLUICE_NIC_RAILS)
  // Its standby (base/standby.h), chosen at init whether SLUICE_STANDBY is on or not (the INFO
  // lines and sluice-info say it alike); used by a comm on this device only when it is on.
  Device* standby = nullptr;
  std::string standby_reason;  // "rxe0: the only other RoCE device (...)", "none: ..."
};

// The device's port as "name:port" for reasons and WARNs: a device of a multi-port adapter is
// named so already (engine.cc), any other gets its port appended.
inline std::string port_label(const Device& d) {
  return d.name.find(':') != std::string::npos ? d.name : d.name + ":" + std::to_string(d.port);
}

// A fused device (make_vdevice): index >= the physical devices' count. Created at NCCL's init,
// before any comm on it; never removed until the engine goes.
struct VDevice {
  int index = 0;
  std::string name;               // the members' names joined by '+', e.g. "rxe0+rxe1"
  std::vector<Device*> members;   // 2..kMaxFusedMembers physical devices, in NCCL's order
  std::vector<uint32_t> weights;  // each member's relative share of a message's bytes (0 = used
                                  // only as a fallback); same length as members
  DeviceProperties props;         // merged from the members (comm/fusion.h's rules)
  std::vector<std::string> weight_reasons;  // per member: where its weight came from
  // What props' pointers point at (the VDevice never moves).
  std::string pci_path, gdr_summary, rail_reason, weights_summary;
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> create(const LocalityProvider& locality,
                                                const DeviceOrderProvider& order,
                                                const GpuProvider& gpu,
                                                const FusionWeightProvider& weights = {},
                                                const NearnessProvider& nearness = {});
  ~Engine();

  const Config& config() const { return cfg_; }
  const std::vector<std::unique_ptr<Device>>& devices() const { return devices_; }
  const IfAddr& oob_interface() const { return oob_; }
  const GpuOps& gpu() const { return gpu_; }
  Device* device(int i) const {
    return i >= 0 && i < static_cast<int>(devices_.size()) ? devices_[i].get() : nullptr;
  }

  // The physical devices a comm on `dev` runs over, and their shares of the bytes (`weights`, if
  // not null): {device(dev)} and {1} for a physical device, {device(dev), its standby} and {1, 0}
  // for one with a standby in use (standby_of), the members and weights of a fused one; empty for
  // an index that names no device. Members and weights of one comm come from one call.
  std::vector<Device*> members_of(int dev, std::vector<uint32_t>* weights = nullptr) const;
  std::vector<uint32_t> weights_of(int dev) const;
  // SLUICE_STANDBY (with SLUICE_FAILOVER): d's standby when it has one and its port is ACTIVE now
  // (a standby that is down when a comm opens is left out of it, with an INFO line), else null.
  Device* standby_of(const Device& d) const;
  bool standby_on() const { return cfg_.standby && cfg_.failover; }
  // make_vdevice (api.h): appends a VDevice, or says why not.
  Status make_vdevice(const int* devs, int n, int max_members, int* out_dev);
  // Physical and fused devices together (device_count()), and either one's properties.
  int device_total() const;
  const DeviceProperties* properties(int dev) const;
  // The fused devices made so far (sluice-info, tests); entries stay valid while the engine lives.
  std::vector<const VDevice*> vdevices() const;
  // TEST ONLY: appends a fused device of `members` with exactly `weights` (no property merge, no
  // refusal rules beyond indices: make_vdevice's are tested on their own) and returns its index.
  // Used by the core rdma tests, which choose the weights; no production caller.
  Status test_add_vdevice(const std::vector<int>& members, const std::vector<uint32_t>& weights,
                          int* out);

  std::atomic<int> open_comms{0};
  // Stops and joins the async-event threads (idempotent). NCCL may dlclose us after the last
  // finalize, so no thread of ours may outlive it.
  void stop_threads();

 private:
  Engine() = default;
  Status discover(const LocalityProvider& locality);
  Status apply_order(const DeviceOrderProvider& order);
  void choose_standbys(const NearnessProvider& nearness);
  void async_loop(Adapter* a);
  friend void engine_release();

  Config cfg_;
  GpuOps gpu_;
  FusionWeightProvider weights_;  // may be empty: weights by port speed
  IfAddr oob_;
  std::vector<std::unique_ptr<Adapter>> adapters_;
  std::vector<std::unique_ptr<Device>> devices_;
  // Fused devices, appended by make_vdevice (guarded by vdev_mu_; entries never move or go).
  mutable std::mutex vdev_mu_;
  std::vector<std::unique_ptr<VDevice>> vdevices_;
  std::atomic<bool> stop_{false};
  // An eventfd that stop_threads makes readable, so an async-event thread sleeping in poll()
  // returns at once instead of at its next 100-ms tick (finalize joined each thread for up to
  // 100 ms). -1 where eventfd failed (at the fd limit): the threads then stop at that tick, as
  // before. Closed after the threads are joined. A child forked after init shares it, and never
  // writes it: its last finalize leaves the engine behind without stopping anything
  // (engine_release), so the parent's threads are not woken.
  int wake_fd_ = -1;
  // The process that made the engine. Its verbs objects, sockets and eventfd are open files that a
  // child forked after init shares: the child's last finalize leaves them alone (engine_release).
  pid_t owner_pid_ = 0;
  std::vector<std::thread> threads_;
};

// The live engine (valid between acquire and release). Callers hold a comm or are inside an
// acquire/release pair, so the pointer is stable for them.
Engine* engine();

}  // namespace sluice
