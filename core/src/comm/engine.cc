#include "comm/engine.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "comm/comm.h"
#include "comm/fusion.h"
#include "health/liveness.h"
#include "health/peer_link.h"
#include "sluice/core/base/hca_filter.h"
#include "sluice/core/base/log.h"
#include "sluice/core/base/verbs_ext.h"
#include "sluice/core/base/version.h"
#include "sluice/core/device/device_info.h"
#include "sluice/core/wire/wire.h"

namespace sluice {
namespace {

std::mutex g_engine_mu;
int g_refs = 0;
// A plain pointer: no static destructor may release verbs objects at exit (an engine still held
// then, with no finalize, is left to the process's end).
Engine* g_engine = nullptr;
std::atomic<Engine*> g_engine_ptr{nullptr};

// Largest single transfer we report (the data path refuses larger sends: send.cc).
constexpr size_t kMaxTransfer = wire::kMaxMessageBytes;

}  // namespace

Adapter::~Adapter() {
  // Registrations still held at shutdown are released here, before the PD (member order).
  std::lock_guard<std::mutex> lk(mr_mu);
  size_t held = 0;
  for (const auto& e : mrs) held += e->users.size();
  if (held > 0) {
    SLUICE_WARN("%s: %zu memory registration(s) still held at shutdown; releasing them",
                name.c_str(), held);
  }
  mrs.clear();
}

Engine* engine() {
  return g_engine_ptr.load(std::memory_order_acquire);
}

Result<std::unique_ptr<Engine>> Engine::create(const LocalityProvider& locality,
                                               const DeviceOrderProvider& order,
                                               const GpuProvider& gpu,
                                               const FusionWeightProvider& weights,
                                               const NearnessProvider& nearness) {
  SLUICE_INFO(kSubInit | kSubNet, "%s", version_line());  // first line: what is running
  std::unique_ptr<Engine> e(new Engine());
  std::vector<ParamSource> sources;
  auto cfg = load_config_from_environment(&sources);
  if (!cfg.is_ok()) return cfg.status();
  e->cfg_ = cfg.value();
  verbs::hide_for_test(e->cfg_.test_hide_verbs);  // tests: as on an older rdma-core
  for (const auto& s : sources)
    SLUICE_INFO(kSubInit | kSubEnv, "%s set by %s to %s", s.name.c_str(), s.set_by.c_str(),
                s.value.c_str());

  auto oob = choose_interface(list_interfaces(), e->cfg_.socket_ifname, e->cfg_.socket_family);
  if (!oob.is_ok())
    return oob.status().with_context("no IP interface for the out-of-band connection socket");
  e->oob_ = oob.value();

  e->weights_ = weights;
  SLUICE_RETURN_IF_ERROR(e->discover(locality));
  if (gpu) {
    e->gpu_ = gpu(e->cfg_);
  } else {
    e->gpu_.facts.driver_reason = "no GPU layer (core used without the plugin)";
  }
  SLUICE_INFO(kSubInit | kSubNet, "%s", verbs::ext_summary().c_str());
  for (auto& a : e->adapters_) {
    a->dmabuf = probe_dmabuf(a->pd.get(), a->name);
    if (a->dmabuf.warn) SLUICE_WARN("dma-buf probe: %s", a->dmabuf.text.c_str());
    if (e->cfg_.pci_relaxed_ordering != 0)
      a->ro_probe = probe_relaxed_ordering(a->pd.get(), a->name);
    a->relaxed_ordering = decide_relaxed_ordering(e->cfg_.pci_relaxed_ordering, a->ro_probe).on;
  }
  for (auto& d : e->devices_) {
    d->gdr = decide_gdr(e->cfg_, e->gpu_.facts, d->adapter->dmabuf, d->name);
    d->props.ptr_support = d->gdr.ptr_support;
    d->props.gdr_summary = d->gdr.summary.c_str();
    SLUICE_INFO(kSubInit | kSubNet, "%s", d->gdr.summary.c_str());
    d->ro = decide_relaxed_ordering(e->cfg_.pci_relaxed_ordering, d->adapter->ro_probe);
    d->ar =
        decide_adaptive_routing(e->cfg_.adaptive_routing, e->cfg_.ar_threshold, d->attr.link_layer);
    SLUICE_INFO(kSubInit | kSubNet, "%s: PCIe relaxed ordering %s", d->name.c_str(),
                d->ro.why.c_str());
    SLUICE_INFO(kSubInit | kSubNet, "%s: adaptive routing %s", d->name.c_str(), d->ar.why.c_str());
  }
  if (order) SLUICE_RETURN_IF_ERROR(e->apply_order(order));
  // v12 rails (SLUICE_NIC_RAILS; config.cc checked the syntax) and vProps {1, {index}}.
  auto rails = NamedList::parse(e->cfg_.nic_rails, NamedList::Kind::kRails);
  if (!rails.is_ok()) return rails.status().with_context("SLUICE_NIC_RAILS");
  for (auto& d : e->devices_) {
    const RailChoice rc = rail_of(rails.value(), d->adapter->name, d->port);
    d->props.rail_id = rc.rail;
    d->props.plane_id = rc.plane;
    d->rail_reason = d->name + ": " + rc.reason;
    d->props.rail_reason = d->rail_reason.c_str();
    d->props.n_members = 1;
    d->props.members[0] = d->index;
    if (rc.rail != kNetIdUndef) SLUICE_INFO(kSubInit | kSubNet, "%s", d->rail_reason.c_str());
  }
  e->choose_standbys(nearness);
  e->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);  // -1: stop at the 100-ms tick
  e->owner_pid_ = getpid();
  for (auto& a : e->adapters_) {
    Adapter* ap = a.get();
    e->threads_.emplace_back([eng = e.get(), ap] { eng->async_loop(ap); });
  }
  std::string list;
  for (const auto& d : e->devices_) {
    if (!list.empty()) list += " ";
    list += "[" + std::to_string(d->index) + "]" + port_label(*d) + "/" + (d->roce ? "RoCE" : "IB");
  }
  SLUICE_INFO(kSubInit | kSubNet, "Using %s; OOB %s:%s", list.c_str(), e->oob_.name.c_str(),
              sockaddr_to_string(e->oob_.addr).c_str());
  return e;
}

Status Engine::discover(const LocalityProvider& locality) {
  auto filter = HcaFilter::parse(cfg_.ib_hca);
  if (!filter.is_ok()) return filter.status().with_context("NCCL_IB_HCA");
  int n = 0;
  verbs::DeviceList list(ibv_get_device_list(&n));
  if (!list) {
    return errno_status(Code::kSystemError,
                        "ibv_get_device_list (is rdma-core installed and /dev/infiniband visible?)",
                        errno);
  }
  std::vector<std::string> dropped;  // why each port was not used
  std::vector<std::pair<std::string, int>> seen_ports;
  const GidPolicy policy = gid_policy(cfg_);

  for (int i = 0; i < n; ++i) {
    std::string dname = ibv_get_device_name(list.get()[i]);
    auto adapter = std::make_unique<Adapter>();
    adapter->name = dname;
    adapter->ctx.reset(ibv_open_device(list.get()[i]));
    if (!adapter->ctx) {
      dropped.push_back(dname + ": ibv_open_device failed: " + std::strerror(errno) +
                        " (check permissions on /dev/infiniband/uverbs*)");
      continue;
    }
    ibv_device_attr da{};
    if (int rc = ibv_query_device(adapter->ctx.get(), &da); rc != 0) {
      dropped.push_back(dname + ": ibv_query_device failed: " + std::strerror(rc));
      continue;
    }
    std::vector<std::unique_ptr<Device>> ports;
    const std::string blocker = unusable_transport_reason(list.get()[i]->transport_type, dname);
    bool blocker_said = false;
    for (int p = 1; p <= da.phys_port_cnt; ++p) {
      seen_ports.emplace_back(dname, p);
      std::string pname = dname + ":" + std::to_string(p);
      if (!filter.value().accepts(dname, p)) {
        dropped.push_back(pname + ": excluded by NCCL_IB_HCA=" + cfg_.ib_hca);
        continue;
      }
      if (!blocker.empty()) {  // said once per device, as a WARN: hardware Sluice leaves unused
        if (!blocker_said) SLUICE_WARN("%s", blocker.c_str());
        blocker_said = true;
        dropped.push_back(pname + ": " + blocker);
        continue;
      }
      auto d = std::make_unique<Device>();
      if (int rc = ibv_query_port(adapter->ctx.get(), p, &d->attr); rc != 0) {
        dropped.push_back(pname + ": ibv_query_port failed: " + std::strerror(rc));
        continue;
      }
      if (d->attr.state != IBV_PORT_ACTIVE) {
        dropped.push_back(pname + ": port state is not ACTIVE (" +
                          ibv_port_state_str(d->attr.state) + ")");
        continue;
      }
      if (d->attr.link_layer != IBV_LINK_LAYER_INFINIBAND &&
          d->attr.link_layer != IBV_LINK_LAYER_ETHERNET) {
        dropped.push_back(pname + ": unsupported link layer");
        continue;
      }
      d->port = static_cast<uint8_t>(p);
      d->roce = d->attr.link_layer == IBV_LINK_LAYER_ETHERNET;
      if (d->roce) {
        auto gids = read_gid_table(adapter->ctx.get(), dname, d->port, d->attr.gid_tbl_len);
        auto choice = choose_roce_gid(gids, policy);
        if (!choice.is_ok()) {
          dropped.push_back(pname + ": " + choice.status().message());
          continue;
        }
        d->gid = choice.value();
        SLUICE_INFO(kSubInit | kSubNet, "%s GID %s", pname.c_str(), d->gid.reason.c_str());
      } else {
        ibv_gid g{};
        if (ibv_query_gid(adapter->ctx.get(), d->port, 0, &g) == 0)
          std::copy(std::begin(g.raw), std::end(g.raw), d->gid.gid.begin());
        d->gid.index = 0;
        d->gid.reason = "InfiniBand: LID routing, GID index 0";
      }
      d->adapter = adapter.get();
      d->guid = da.sys_image_guid;
      d->max_qp = da.max_qp;
      d->speed_mbps = port_speed_mbps(d->attr.active_speed, d->attr.active_width);
      ports.push_back(std::move(d));
    }
    if (ports.empty()) continue;
    adapter->pd.reset(ibv_alloc_pd(adapter->ctx.get()));
    if (!adapter->pd) {
      dropped.push_back(dname + ": ibv_alloc_pd failed: " + std::strerror(errno));
      continue;
    }
    if (locality) adapter->locality = locality(cfg_, dname);
    bool multi = da.phys_port_cnt > 1;
    for (auto& d : ports) {
      d->index = static_cast<int>(devices_.size());
      d->name = multi ? dname + ":" + std::to_string(d->port) : dname;
      d->pci_path = adapter->locality.pci_path;
      DeviceProperties& pr = d->props;
      pr.name = d->name.c_str();
      pr.pci_path = d->pci_path.empty() ? nullptr : d->pci_path.c_str();
      pr.guid = d->guid;
      pr.ptr_support = kPtrHost;
      pr.reg_is_global = 1;
      pr.force_flush = 0;
      pr.speed_mbps = d->speed_mbps;
      pr.port = d->port;
      pr.latency_us = 0;
      pr.max_comms = d->max_qp;
      pr.max_recvs = kMaxRecvs;
      pr.max_p2p_bytes = kMaxTransfer;
      pr.max_coll_bytes = kMaxTransfer;
      pr.numa_node = adapter->locality.numa_node;
      devices_.push_back(std::move(d));
    }
    adapters_.push_back(std::move(adapter));
  }

  for (const auto& name : filter.value().unmatched(seen_ports))
    SLUICE_WARN("NCCL_IB_HCA=%s names '%s', which matches no RDMA device", cfg_.ib_hca.c_str(),
                name.c_str());
  for (const auto& why : dropped) SLUICE_INFO(kSubInit | kSubNet, "not using %s", why.c_str());
  if (devices_.empty()) {
    std::string m = n == 0 ? "no RDMA device found (ibv_get_device_list returned none: no NIC, "
                             "driver not loaded, or /dev/infiniband not visible in this container)"
                           : "no usable RDMA port among " + std::to_string(n) + " device(s)";
    for (const auto& why : dropped) m += "; " + why;
    return Status(Code::kSystemError, m);
  }
  return Status::ok();
}

Status Engine::apply_order(const DeviceOrderProvider& order) {
  std::vector<std::string> names;
  for (const auto& a : adapters_) names.push_back(a->name);
  auto o = order(cfg_, names);
  if (!o.is_ok()) return o.status();
  const std::vector<std::string>& want = o.value().names;
  auto rank = [&want](const Device& d) {
    auto it = std::find(want.begin(), want.end(), d.adapter->name);
    return it == want.end() ? want.size() : static_cast<size_t>(it - want.begin());
  };
  std::stable_sort(devices_.begin(), devices_.end(),
                   [&](const auto& x, const auto& y) { return rank(*x) < rank(*y); });
  std::string list;
  for (size_t i = 0; i < devices_.size(); ++i) {
    devices_[i]->index = static_cast<int>(i);
    list += (i ? " " : "") + devices_[i]->name;
  }
  SLUICE_INFO(kSubInit | kSubNet, "device order %s: %s", list.c_str(), o.value().reason.c_str());
  return Status::ok();
}

namespace {

// SLUICE_TEST_FAULT_FILE (tests only): the file names "device_fatal <adapter>" on a line.
bool test_fault_requested(const Config& cfg, const std::string& adapter) {
  FILE* f = std::fopen(cfg.test_fault_file.c_str(), "r");
  if (f == nullptr) return false;
  char line[256];
  bool hit = false;
  while (!hit && std::fgets(line, sizeof line, f) != nullptr) {
    char kind[64] = {}, name[128] = {};
    hit = std::sscanf(line, "%63s %127s", kind, name) == 2 && std::string(kind) == "device_fatal" &&
          adapter == name;
  }
  std::fclose(f);
  return hit;
}

}  // namespace

void Engine::async_loop(Adapter* a) {
  if (!a->locality.cpus.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : a->locality.cpus)
      if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);  // best effort
  }
  int fd = a->ctx->async_fd;
  // A device's fatal error: the adapter is marked, and every comm on it finds out at its next
  // call (datapath.cc check_device): a comm with another path fails over, any other fails.
  const auto device_fatal = [a](const char* what, const char* how) {
    std::lock_guard<std::mutex> lk(a->fatal_mu);
    const AsyncEventInfo info = async_event_info(IBV_EVENT_DEVICE_FATAL);
    a->fatal_reason =
        a->name + ": async event " + what + how + ": " + info.meaning +
        "; likely cause: " + info.cause +
        "; every comm on it fails, but a multi-path comm, which loses only that device's paths";
    a->fatal.store(true, std::memory_order_release);
    SLUICE_WARN("%s", a->fatal_reason.c_str());
  };
  bool injected = false;
  while (!stop_.load(std::memory_order_acquire)) {
    // The device's events, and stop_threads' wake-up (never read: once written it stays
    // readable, for every adapter's thread).
    pollfd fds[2] = {{fd, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    pollfd& pfd = fds[0];
    int rc = poll(fds, wake_fd_ >= 0 ? 2 : 1, 100);
    if (!injected && !cfg_.test_fault_file.empty() && test_fault_requested(cfg_, a->name)) {
      injected = true;  // SLUICE_TEST_FAULT_FILE: as the event would, once
      device_fatal(ibv_event_type_str(IBV_EVENT_DEVICE_FATAL),
                   " (injected by SLUICE_TEST_FAULT_FILE)");
    }
    if (rc <= 0 || !(pfd.revents & POLLIN)) continue;
    // The fd is blocking; poll said an event is ready.
    ibv_async_event ev{};
    if (ibv_get_async_event(a->ctx.get(), &ev) != 0) continue;
    const char* what = ibv_event_type_str(ev.event_type);
    switch (ev.event_type) {
      case IBV_EVENT_DEVICE_FATAL:
        device_fatal(what, "");
        break;
      case IBV_EVENT_COMM_EST:
      case IBV_EVENT_QP_LAST_WQE_REACHED:
        break;
      default:  // QP, CQ and port events fail the comms they concern
        liveness_async_event(*a, ev);
        break;
    }
    ibv_ack_async_event(&ev);
  }
}

void Engine::stop_threads() {
  stop_.store(true, std::memory_order_release);
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    if (write(wake_fd_, &one, sizeof one) < 0) {
      // Only EAGAIN (the counter full: already readable) can happen; the threads wake anyway.
    }
  }
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

Engine::~Engine() {
  stop_threads();
  if (wake_fd_ >= 0) close(wake_fd_);
  wake_fd_ = -1;
  devices_.clear();
  // Every eager pool before any adapter: a pool may hold a registration on another adapter's PD
  // (a fused comm's member, EagerPool::keys_on). No comm is left to use one.
  for (auto& a : adapters_) {
    std::lock_guard<std::mutex> lk(a->eager_mu);
    a->eager.reset();
  }
  adapters_.clear();
}

Status engine_acquire(LogSink sink, LocalityProvider locality, DeviceOrderProvider order,
                      GpuProvider gpu, FusionWeightProvider weights, NearnessProvider nearness) {
  std::lock_guard<std::mutex> lk(g_engine_mu);
  if (sink != nullptr) set_log_sink(sink);
  if (g_refs > 0) {
    ++g_refs;
    return Status::ok();
  }
  auto e = Engine::create(locality, order, gpu, weights, nearness);
  if (!e.is_ok()) return e.status();
  g_engine = std::move(e).value().release();
  g_engine_ptr.store(g_engine, std::memory_order_release);
  g_refs = 1;
  // Accept reads the handshakes that arrive on peer links through one epoll set (peer_link.h).
  if (g_engine->config().oob_link && g_engine->config().oob_link_handshake) link_service_open();
  return Status::ok();
}

void engine_release() {
  std::lock_guard<std::mutex> lk(g_engine_mu);
  if (g_refs == 0) return;
  if (--g_refs > 0) return;
  if (const pid_t me = getpid(); me != g_engine->owner_pid_) {
    // A child forked after init finalized its copy. Every verbs object, socket and eventfd in it is
    // an open file it shares with the parent: destroying a PD, QP or MR through the shared verbs
    // context destroys the parent's, and shutting a socket down shuts the parent's. Left behind,
    // as the peer link's registries are (peer_link.cc, on_fork_child), and kept reachable; the
    // child's next init makes an engine of its own.
    static Engine* left_behind = nullptr;  // NOLINT: deliberately never released
    left_behind = g_engine;
    g_engine = nullptr;
    g_engine_ptr.store(nullptr, std::memory_order_release);
    SLUICE_INFO(kSubInit | kSubNet,
                "finalize in process %d, forked from %d after init: the engine's verbs objects and "
                "sockets are the parent's too and are left as they are",
                static_cast<int>(me), static_cast<int>(left_behind->owner_pid_));
    return;
  }
  // What NCCL abandoned goes first, while the devices are alive: connects still in progress, and
  // listen comms' pending handshakes (comm.h).
  const size_t connects = reap_abandoned_connects(true);
  const size_t handshakes = reap_listens(true);
  link_service_close();  // hellos no listen took are refused: their connectors are told
  if (connects + handshakes > 0) {
    SLUICE_INFO(kSubInit | kSubNet,
                "finalize released %zu connect(s) and %zu accepted handshake(s) in progress",
                connects, handshakes);
  }
  // Comms NCCL left open: their verbs objects and sockets go now, while the devices are alive;
  // each fails every later call with the reason, and close frees what is left of it.
  std::vector<Conn*> open_comms;
  for (const auto& a : g_engine->adapters_) {
    std::lock_guard<std::mutex> lk(a->comms_mu);
    open_comms.insert(open_comms.end(), a->comms.begin(), a->comms.end());
  }
  if (!open_comms.empty()) {
    SLUICE_WARN(
        "finalize with %zu send/receive comm(s) still open: releasing their QPs, CQs, MRs and "
        "sockets now; later calls on them fail, and close frees them",
        open_comms.size());
    for (Conn* c : open_comms) {
      retire_comm(*c, "the plugin was finalized with this comm open; only close is valid now");
      g_engine->open_comms.fetch_sub(1);
    }
  }
  close_idle_listen_ports();  // listens NCCL left open keep theirs (reap_listens(true) above)
  if (int open = g_engine->open_comms.load(); open > 0) {
    SLUICE_WARN("last finalize with %d comm(s) still open: keeping devices alive for them", open);
    // Keep the engine (a leak) rather than free resources still in use; threads are stopped.
    g_engine->stop_threads();
    g_engine = nullptr;  // NOLINT: deliberately leaked
    g_engine_ptr.store(nullptr, std::memory_order_release);
    return;
  }
  g_engine_ptr.store(nullptr, std::memory_order_release);
  delete g_engine;
  g_engine = nullptr;
}

void Engine::choose_standbys(const NearnessProvider& nearness) {
  std::vector<standby::Candidate> cands;
  for (const auto& d : devices_)
    cands.push_back(
        {d->name, d->adapter->name, d->roce ? "RoCE" : "InfiniBand", true, d->gdr.ptr_support});
  standby::NearnessFn near;
  if (nearness) {
    near = [&](int a, int b) {
      return nearness(cfg_, devices_[a]->adapter->name, devices_[b]->adapter->name);
    };
  }
  auto map = standby::parse_map(cfg_.standby_map);  // config.cc checked the syntax
  if (!map.is_ok()) map = std::vector<standby::MapEntry>{};
  const auto choices = standby::choose(cands, near, map.value());
  for (size_t i = 0; i < devices_.size(); ++i) {
    Device& d = *devices_[i];
    d.standby = choices[i].standby >= 0 ? devices_[choices[i].standby].get() : nullptr;
    d.standby_reason = choices[i].reason;
  }
  if (!cfg_.standby) return;
  for (const auto& name : standby::unmatched_primaries(cands, map.value()))
    SLUICE_WARN("SLUICE_STANDBY_MAP=%s names '%s', which is no device Sluice uses",
                cfg_.standby_map.c_str(), name.c_str());
  for (const auto& d : devices_) {
    const bool refused = d->standby == nullptr &&
                         d->standby_reason.rfind("none: SLUICE_STANDBY_MAP", 0) == 0 &&
                         d->standby_reason.find("=none") == std::string::npos;
    if (refused) SLUICE_WARN("%s: standby %s", d->name.c_str(), d->standby_reason.c_str());
    SLUICE_INFO(kSubInit | kSubNet, "%s: standby %s%s", d->name.c_str(), d->standby_reason.c_str(),
                cfg_.failover ? "" : "; not used: SLUICE_STANDBY needs SLUICE_FAILOVER=1");
  }
}

Device* Engine::standby_of(const Device& d) const {
  if (!standby_on() || d.standby == nullptr) return nullptr;
  ibv_port_attr pa{};
  if (ibv_query_port(d.standby->adapter->ctx.get(), d.standby->port, &pa) != 0 ||
      pa.state != IBV_PORT_ACTIVE) {
    SLUICE_INFO(kSubNet, "%s: standby %s left out of this comm: its port is %s", d.name.c_str(),
                d.standby->name.c_str(), ibv_port_state_str(pa.state));
    return nullptr;
  }
  return d.standby;
}

std::vector<Device*> Engine::members_of(int dev, std::vector<uint32_t>* weights) const {
  if (Device* d = device(dev)) {
    if (Device* s = standby_of(*d)) {
      if (weights != nullptr) *weights = {1, 0};  // fallback only: it carries when d cannot
      return {d, s};
    }
    if (weights != nullptr) *weights = {1};
    return {d};
  }
  std::lock_guard<std::mutex> lk(vdev_mu_);
  const int v = dev - static_cast<int>(devices_.size());
  if (v < 0 || v >= static_cast<int>(vdevices_.size())) return {};
  if (weights != nullptr) *weights = vdevices_[v]->weights;
  return vdevices_[v]->members;
}

std::vector<uint32_t> Engine::weights_of(int dev) const {
  std::vector<uint32_t> w;
  (void)members_of(dev, &w);
  return w;
}

int Engine::device_total() const {
  std::lock_guard<std::mutex> lk(vdev_mu_);
  return static_cast<int>(devices_.size() + vdevices_.size());
}

const DeviceProperties* Engine::properties(int dev) const {
  if (Device* d = device(dev)) return &d->props;
  std::lock_guard<std::mutex> lk(vdev_mu_);
  const int v = dev - static_cast<int>(devices_.size());
  if (v < 0 || v >= static_cast<int>(vdevices_.size())) return nullptr;
  return &vdevices_[v]->props;
}

std::vector<const VDevice*> Engine::vdevices() const {
  std::lock_guard<std::mutex> lk(vdev_mu_);
  std::vector<const VDevice*> out;
  for (const auto& v : vdevices_) out.push_back(v.get());
  return out;
}

Status Engine::make_vdevice(const int* devs, int n, int max_members, int* out_dev) {
  // One request at a time (NCCL makes them under its own lock, at init): two identical requests
  // at once then still give one device. vdev_mu_ is taken only briefly inside, so readers of
  // vdevices_ (members_of, properties) never wait on the topology.
  static std::mutex make_mu;
  std::lock_guard<std::mutex> one(make_mu);
  const int n_phys = static_cast<int>(devices_.size());
  SLUICE_RETURN_IF_ERROR(check_fusion_request(
      devs, n, n_phys, device_total(), std::min(max_members, kMaxFusedMembers), cfg_.merge_nics));
  if (n == 1) {  // NCCL never asks for one; if it does, the device is its own one-member fusion
    *out_dev = devs[0];
    return Status::ok();
  }
  {
    // The same members in the same order again (a second communicator, or a second init of the
    // plugin): the device made the first time, so every caller sees one set of devices and names.
    std::lock_guard<std::mutex> lk(vdev_mu_);
    for (const auto& v : vdevices_) {
      bool same = static_cast<int>(v->members.size()) == n;
      for (int i = 0; same && i < n; ++i) same = v->members[i]->index == devs[i];
      if (same) {
        *out_dev = v->index;
        return Status::ok();
      }
    }
  }
  std::vector<FusionMember> members;
  std::vector<FusionMemberInfo> infos;
  for (int i = 0; i < n; ++i) {
    const Device& d = *devices_[devs[i]];
    FusionMember m;
    m.index = d.index;
    m.name = d.name;
    m.adapter = d.adapter->name;
    m.port = d.port;
    m.roce = d.roce;
    m.props = d.props;
    m.rail = d.props.rail_id;
    m.plane = d.props.plane_id;
    members.push_back(std::move(m));
    infos.push_back({d.adapter->name, d.port, d.speed_mbps});
  }
  SLUICE_RETURN_IF_ERROR(check_fusion_members(members));

  FusionWeights fw;
  if (weights_) {
    auto r = weights_(cfg_, infos);
    if (r.is_ok() && r.value().weights.size() == members.size()) {
      fw = std::move(r).value();
    } else {
      const std::string why =
          r.is_ok() ? "the topology weighed a different number of members" : r.status().message();
      fw.weights = speed_weights(members);
      fw.reasons.assign(members.size(), "port speed (topology: " + why + ")");
    }
  } else {
    fw.weights = speed_weights(members);
    fw.reasons.assign(members.size(), "port speed (no topology layer)");
  }
  fw.reasons.resize(members.size());
  auto override_list = NamedList::parse(cfg_.fusion_weights, NamedList::Kind::kWeights);
  if (!override_list.is_ok()) return override_list.status().with_context("SLUICE_FUSION_WEIGHTS");
  SLUICE_RETURN_IF_ERROR(
      apply_weight_override(override_list.value(), members, &fw.weights, &fw.reasons));

  auto v = std::make_unique<VDevice>();
  FusedProps fp;
  merge_properties(members, fw.weights, &fp);
  v->name = fp.name;
  v->pci_path = fp.pci_path;
  v->gdr_summary = fp.gdr_summary;
  v->rail_reason = fp.name + ": " + fp.rail_reason;
  v->weights = fw.weights;
  v->weight_reasons = fw.reasons;
  v->weights_summary = describe_weights(members, fw.weights, fw.reasons);
  for (int i = 0; i < n; ++i) v->members.push_back(devices_[devs[i]].get());
  v->props = fp.props;
  v->props.name = v->name.c_str();
  v->props.pci_path = v->pci_path.empty() ? nullptr : v->pci_path.c_str();
  v->props.gdr_summary = v->gdr_summary.c_str();
  v->props.rail_id = fp.rail;
  v->props.plane_id = fp.plane;
  v->props.rail_reason = v->rail_reason.c_str();
  v->props.weights_summary = v->weights_summary.c_str();
  v->props.n_members = n;
  for (int i = 0; i < n; ++i) v->props.members[i] = devs[i];
  {
    std::lock_guard<std::mutex> lk(vdev_mu_);
    v->index = n_phys + static_cast<int>(vdevices_.size());
    *out_dev = v->index;
    SLUICE_INFO(kSubInit | kSubNet,
                "fused device [%d] %s: %d Mb/s, ptrSupport 0x%x, maxComms %d; weights %s; %s",
                v->index, v->name.c_str(), v->props.speed_mbps, v->props.ptr_support,
                v->props.max_comms, v->weights_summary.c_str(), v->rail_reason.c_str());
    vdevices_.push_back(std::move(v));
  }
  return Status::ok();
}

Status make_vdevice(const int* devs, int n, int* out_dev, int max_members) {
  Engine* e = engine();
  if (e == nullptr) return Status(Code::kInvalidUsage, "makeVDevice called before init");
  if (out_dev == nullptr) return Status(Code::kInvalidArgument, "makeVDevice: d is NULL");
  return e->make_vdevice(devs, n, max_members, out_dev);
}

Status Engine::test_add_vdevice(const std::vector<int>& members,
                                const std::vector<uint32_t>& weights, int* out) {
  if (members.size() < 2 || members.size() > static_cast<size_t>(kMaxConnMembers) ||
      weights.size() != members.size())
    return Status(
        Code::kInvalidArgument,
        "test_add_vdevice: 2.." + std::to_string(kMaxConnMembers) + " members, one weight each");
  auto v = std::make_unique<VDevice>();
  for (size_t i = 0; i < members.size(); ++i) {
    Device* d = device(members[i]);
    if (d == nullptr) return Status(Code::kInvalidArgument, "test_add_vdevice: no such device");
    v->members.push_back(d);
    v->name += (i ? "+" : "") + d->name;
  }
  v->weights = weights;
  std::lock_guard<std::mutex> lk(vdev_mu_);
  v->index = static_cast<int>(devices_.size() + vdevices_.size());
  *out = v->index;
  vdevices_.push_back(std::move(v));
  return Status::ok();
}

int device_count() {
  Engine* e = engine();
  return e ? e->device_total() : 0;
}

Status device_properties(int dev, DeviceProperties* out) {
  Engine* e = engine();
  if (e == nullptr) return Status(Code::kInvalidUsage, "getProperties called before init");
  const DeviceProperties* p = e->properties(dev);
  if (p == nullptr) {
    return Status(Code::kInvalidArgument, "device index " + std::to_string(dev) +
                                              " out of range (have " +
                                              std::to_string(e->device_total()) + ")");
  }
  *out = *p;
  return Status::ok();
}

}  // namespace sluice
