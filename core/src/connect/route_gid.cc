// The GID of an oob-mode connection checked against the route to the peer (route_gid.h).
#include "connect/route_gid.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <infiniband/verbs.h>
#include <net/if.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <vector>

#include "connect/oob_socket.h"
#include "sluice/core/base/log.h"
#include "sluice/core/base/verbs_ext.h"
#include "sluice/core/device/device_info.h"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;

// The GID of an IP address (IPv4-mapped for IPv4); all zeros for another family.
GidBytes gid_of(const sockaddr_storage& sa) {
  GidBytes g{};
  if (sa.ss_family == AF_INET) {
    g[10] = 0xff;
    g[11] = 0xff;
    std::memcpy(g.data() + 12, &reinterpret_cast<const sockaddr_in*>(&sa)->sin_addr, 4);
  } else if (sa.ss_family == AF_INET6) {
    std::memcpy(g.data(), &reinterpret_cast<const sockaddr_in6*>(&sa)->sin6_addr, 16);
  }
  return g;
}

bool is_loopback(const sockaddr_storage& sa) {
  if (sa.ss_family == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(&sa)->sin_addr.s_addr) >> 24) == 127;
  return sa.ss_family == AF_INET6 &&
         IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(&sa)->sin6_addr);
}

std::string ip_text(const sockaddr_storage& sa) {
  std::string s = sockaddr_text(sa);  // "a.b.c.d:port" / "[v6]:port"
  const auto colon = s.rfind(':');
  if (colon != std::string::npos) s.resize(colon);
  if (s.size() >= 2 && s.front() == '[' && s.back() == ']') s = s.substr(1, s.size() - 2);
  return s;
}

// The interface holding the address of `gid`, and that address's prefix length (-1 unknown).
void local_interface_of(const GidBytes& gid, std::string* name, int* prefix) {
  *prefix = -1;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return;
  for (const ifaddrs* p = list; p != nullptr; p = p->ifa_next) {
    if (p->ifa_addr == nullptr) continue;
    const int fam = p->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    sockaddr_storage sa{};
    std::memcpy(&sa, p->ifa_addr, fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    if (gid_of(sa) != gid) continue;
    *name = p->ifa_name;
    if (p->ifa_netmask != nullptr) {
      sockaddr_storage m{};
      std::memcpy(&m, p->ifa_netmask, fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
      const GidBytes mg = gid_of(m);
      int bits = 0;
      for (size_t i = fam == AF_INET ? 12 : 0; i < 16; ++i) bits += std::popcount(mg[i]);
      *prefix = bits;
    }
    break;
  }
  freeifaddrs(list);
}

std::string event_text(const CmEvent& ev) {
  return std::string(rdma_event_str(ev.type)) + " (status " + std::to_string(ev.status) +
         (ev.status < 0 ? std::string(": ") + std::strerror(-ev.status) : std::string()) + ")";
}

}  // namespace

RouteGid::~RouteGid() {
  release();
}

void RouteGid::release() {
  if (id_ != nullptr) rdma_destroy_id(id_);
  id_ = nullptr;
  mailbox_.reset();  // after the id
}

void RouteGid::finish(const Device& d, const char* side) {
  release();
  decided_ = true;
  const Config& cfg = engine()->config();
  const GidPolicy policy = gid_policy(cfg);
  const std::vector<GidEntry> table = facts_.resolved ? port_gids(d) : std::vector<GidEntry>{};
  const RouteGidDecision dec = choose_gid_by_route(table, policy, d.gid, facts_);
  choice_ = dec.choice;
  by_route_ = dec.by_route;
  if (!dec.warn.empty())
    SLUICE_WARN("%s on %s to %s: %s", side, d.name.c_str(), facts_.peer.c_str(), dec.warn.c_str());
  SLUICE_INFO(kSubNet | kSubInit, "%s on %s to %s: %s", side, d.name.c_str(), facts_.peer.c_str(),
              choice_.reason.c_str());
}

Status RouteGid::step(const Device& d, const sockaddr_storage& peer, int budget_ms,
                      const char* side) {
  if (decided_) return Status::ok();
  if (!d.roce) {  // InfiniBand: LID routing, the port's GID index 0
    choice_ = d.gid;
    decided_ = true;
    return Status::ok();
  }
  if (!started_) {
    started_ = true;
    facts_.peer = ip_text(peer);
    if (is_loopback(peer)) {  // rdma_cm binds a loopback address to any device's first GID
      facts_.failure = "the peer's address is a loopback address";
      finish(d, side);
      return Status::ok();
    }
    timeout_ms_ = std::max(1, std::min(budget_ms, kRouteGidTimeoutMs));
    deadline_ = Clock::now() + std::chrono::milliseconds(timeout_ms_);
    auto m = CmMailbox::open();
    if (!m.is_ok()) {
      facts_.failure = "rdma_cm unavailable: " + m.status().message();
      finish(d, side);
      return Status::ok();
    }
    mailbox_ = std::move(m).value();
    if (!resolve_attempt(peer)) {
      finish(d, side);
      return Status::ok();
    }
  }
  for (;;) {
    CmEvent e;
    auto got = mailbox_->next(&e);
    if (!got.is_ok()) {
      facts_.failure = got.status().message();
      break;
    }
    if (!got.value()) {
      if (Clock::now() > deadline_) {
        facts_.failure = "no rdma_cm answer within " + std::to_string(timeout_ms_) + " ms";
        break;
      }
      return Status::again();
    }
    if (e.type == RDMA_CM_EVENT_ADDR_RESOLVED) {
      const char* name = id_->verbs ? ibv_get_device_name(id_->verbs->device) : "(no device)";
      if (id_->verbs == nullptr || d.adapter->name != name || id_->port_num != d.port) {
        facts_.failure = "it goes through " + std::string(name) + ":" +
                         std::to_string(id_->port_num) + ", not this port";
        break;
      }
      if (rdma_resolve_route(id_, timeout_ms_) != 0) {
        facts_.failure = std::string("rdma_resolve_route: ") + std::strerror(errno);
        break;
      }
      continue;
    }
    if (e.type == RDMA_CM_EVENT_ROUTE_RESOLVED) {
      GidBytes g{};
      if (id_->route.num_paths > 0 && id_->route.path_rec != nullptr)
        std::copy(std::begin(id_->route.path_rec[0].sgid.raw),
                  std::end(id_->route.path_rec[0].sgid.raw), g.begin());
      if (gid_is_zero(g))
        std::copy(std::begin(id_->route.addr.addr.ibaddr.sgid.raw),
                  std::end(id_->route.addr.addr.ibaddr.sgid.raw), g.begin());
      if (gid_is_zero(g)) {
        sockaddr_storage src{};
        const sockaddr* la = rdma_get_local_addr(id_);
        std::memcpy(&src, la,
                    la->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
        g = gid_of(src);
      }
      facts_.resolved = true;
      facts_.sgid = g;
      int prefix = -1;
      local_interface_of(g, &facts_.netdev, &prefix);
      break;
    }
    if (e.type == RDMA_CM_EVENT_ADDR_ERROR && cm_resolve_again(e.status, ms_left()) &&
        resolve_attempt(peer)) {
      continue;  // no neighbour answer yet: look again with a fresh id (cm_choice.h says why)
    }
    if (facts_.failure.empty()) facts_.failure = event_text(e);
    break;
  }
  finish(d, side);
  return Status::ok();
}

long long RouteGid::ms_left() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
}

bool RouteGid::resolve_attempt(const sockaddr_storage& peer) {
  const char* what = "";
  const int err = mailbox_->resolve_attempt(&id_, nullptr, peer, deadline_, &what);
  if (err == 0) return true;
  facts_.failure = std::string(what) + ": " + std::strerror(err);
  return false;
}

void RouteGid::reuse(const Device& d, const sockaddr_storage& peer, const CmFacts& cm,
                     const char* side) {
  if (decided_ || !d.roce) return;
  if (cm.route != CmFacts::Route::kOtherDevice && cm.route != CmFacts::Route::kFailed) return;
  started_ = true;
  facts_.peer = ip_text(peer);
  facts_.failure = cm.route == CmFacts::Route::kOtherDevice
                       ? "it goes through " + cm.route_detail + ", not this port"
                       : cm.route_detail;
  finish(d, side);
}

void RouteGid::apply(wire::Meta* m) const {
  if (!decided_) return;
  m->gid_index = static_cast<uint8_t>(choice_.index);
  std::memcpy(m->gid, choice_.gid.data(), 16);
}

void RouteGid::check_pair(const Device& d, const wire::Meta& local, const wire::Meta& remote,
                          const std::string& peer) const {
  if (!d.roce) return;
  GidBytes l{}, r{};
  std::memcpy(l.data(), local.gid, 16);
  std::memcpy(r.data(), remote.gid, 16);
  std::string ifname;
  int prefix = -1;
  local_interface_of(l, &ifname, &prefix);
  // Routed: our route check went to the peer's GID's own address and chose this GID.
  GidBytes target{};
  if (facts_.resolved) {
    sockaddr_storage sa{};
    const bool v6 = facts_.peer.find(':') != std::string::npos;
    sa.ss_family = v6 ? AF_INET6 : AF_INET;
    void* dst = v6 ? static_cast<void*>(&reinterpret_cast<sockaddr_in6*>(&sa)->sin6_addr)
                   : static_cast<void*>(&reinterpret_cast<sockaddr_in*>(&sa)->sin_addr);
    if (inet_pton(sa.ss_family, facts_.peer.c_str(), dst) == 1) target = gid_of(sa);
  }
  const bool routed = by_route_ && target == r;
  const std::string problem = gid_pair_problem(local.gid_index, l, prefix, r, routed);
  if (!problem.empty()) {
    SLUICE_WARN("connection %s (%s) <-> %s (%s): %s", d.name.c_str(),
                ifname.empty() ? "no local interface" : ifname.c_str(), remote.dev_name,
                peer.c_str(), problem.c_str());
  }
}

std::vector<GidEntry> port_gids(const Device& d) {
  std::vector<GidEntry> out;
  ibv_context* ctx = d.adapter->ctx.get();
  // The kernel fills only the valid entries of every port of the device, but the ioctl carries the
  // buffer's length in 16 bits: at most 65,535 bytes of entries (2,047). A larger request (4 x
  // rxe's 1,024-entry table) is refused with EINVAL, and the entry-by-entry fallback below cost
  // each connection ~3,000 ioctls in the bed (issue 32: most of its set-up time).
  constexpr size_t kMaxEntries = 65535 / sizeof(ibv_gid_entry);
  std::vector<ibv_gid_entry> raw(
      std::min(static_cast<size_t>(std::max(d.attr.gid_tbl_len, 1)) * 4, kMaxEntries));
  const auto query = verbs::ext().query_gid_table;  // rdma-core 32+; else sysfs
  const ssize_t n =
      query == nullptr ? -1 : query(ctx, raw.data(), raw.size(), 0, sizeof(ibv_gid_entry));
  if (n < 0) return read_gid_table(ctx, d.adapter->name, d.port, d.attr.gid_tbl_len);
  for (ssize_t i = 0; i < n; ++i) {
    const ibv_gid_entry& r = raw[static_cast<size_t>(i)];
    if (r.port_num != d.port) continue;
    GidEntry e;
    e.index = static_cast<int>(r.gid_index);
    std::copy(std::begin(r.gid.raw), std::end(r.gid.raw), e.gid.begin());
    e.roce_version = r.gid_type == IBV_GID_TYPE_ROCE_V2   ? 2
                     : r.gid_type == IBV_GID_TYPE_ROCE_V1 ? 1
                                                          : 0;
    if (!gid_is_zero(e.gid)) out.push_back(e);
  }
  return out;
}

std::vector<PortAddr> device_addresses(const Device& d) {
  const bool iwarp = d.adapter->ctx->device->transport_type == IBV_TRANSPORT_IWARP;
  return port_addresses(d.adapter->name, d.port, d.roce, iwarp,
                        d.roce ? port_gids(d) : std::vector<GidEntry>{});
}

sockaddr_storage route_target_of(const wire::Meta& remote, const sockaddr_storage& tcp_peer) {
  GidBytes g{};
  std::memcpy(g.data(), remote.gid, 16);
  if (gid_is_zero(g) || gid_is_link_local(g)) return tcp_peer;
  return gid_to_sockaddr(g);
}

}  // namespace sluice
