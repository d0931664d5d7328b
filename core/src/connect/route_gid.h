// SLUICE_CM=oob: the GID of a connection checked against the IP route to the peer (the choice is
// pure logic in sluice/core/device/gid_route.h). Resolving runs on a mailbox of the process's
// rdma_cm event channel (cm_channel.h), whose fd is O_NONBLOCK, stepped from NCCL's polled
// connect/accept: no thread blocks, and it ends within kRouteGidTimeoutMs or the caller's own
// bound, whichever is sooner. Whatever goes wrong only falls back to the table's guess (logged); it
// never fails the connection.
#pragma once

#include <rdma/rdma_cma.h>
#include <sys/socket.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "connect/cm_channel.h"
#include "sluice/core/base/net_addr.h"
#include "sluice/core/base/status.h"
#include "sluice/core/connect/cm_choice.h"
#include "sluice/core/device/gid_route.h"
#include "sluice/core/wire/wire.h"

namespace sluice {

// Address and route resolution together end by this: a peer address with no neighbour answer then
// falls back to the table's guess instead of eating the connect bound. Address resolution goes in
// attempts of kCmResolveAttemptMs within it (cm_choice.h says why).
inline constexpr int kRouteGidTimeoutMs = 2000;

class RouteGid {
 public:
  RouteGid() = default;
  RouteGid(const RouteGid&) = delete;
  RouteGid& operator=(const RouteGid&) = delete;
  ~RouteGid();

  // Resolves the route to `peer` (its port is ignored) through `d` and chooses the connection's
  // GID. ok() once decided (logged at INFO, with a WARN where the user's NCCL_IB_GID_INDEX
  // disagrees), again while resolving. `budget_ms` is what is left of the caller's bound. An
  // InfiniBand port decides at once (LID routing: nothing to check).
  Status step(const Device& d, const sockaddr_storage& peer, int budget_ms, const char* side);
  // Connect side, auto mode: rdma_cm has just resolved the listener's address for the choice of
  // connection manager (cm_choice.h). When that found no route through `d`, decides at once with
  // the table's guess (the same resolution would fail again); otherwise step() resolves.
  void reuse(const Device& d, const sockaddr_storage& peer, const CmFacts& cm, const char* side);
  // Writes the chosen GID into our metadata (after fill_local_meta). Needs step() ok.
  void apply(wire::Meta* m) const;
  // After the metadata exchange: WARN (naming both GIDs and the fix) when the two sides' GIDs
  // cannot reach each other (gid_pair_problem).
  void check_pair(const Device& d, const wire::Meta& local, const wire::Meta& remote,
                  const std::string& peer) const;
  bool decided() const { return decided_; }

 private:
  void finish(const Device& d, const char* side);
  void release();
  // One address resolution of `peer` with a fresh id, in an attempt of at most kCmResolveAttemptMs
  // (cm_choice.h) and what is left of the bound; false with facts_.failure set if it cannot start.
  bool resolve_attempt(const sockaddr_storage& peer);
  long long ms_left() const;

  std::unique_ptr<CmMailbox> mailbox_;
  rdma_cm_id* id_ = nullptr;
  bool started_ = false, decided_ = false;
  std::chrono::steady_clock::time_point deadline_;
  int timeout_ms_ = 0;
  RouteFacts facts_;
  GidChoice choice_;
  bool by_route_ = false;
};

// The port's non-zero GIDs with their RoCE versions, read now (one ibv_query_gid_table call where
// the kernel has it, else the per-index scan the engine uses).
std::vector<GidEntry> port_gids(const Device& d);
// The IP addresses of `d`'s port now (device_info.h, port_addresses): where rdma_cm can bind for
// it.
std::vector<PortAddr> device_addresses(const Device& d);

// The peer address an acceptor resolves: the address of the connector's GID when it is an IP
// address that may route (IPv4-mapped or a routable IPv6), else the TCP peer address `tcp_peer`.
sockaddr_storage route_target_of(const wire::Meta& remote, const sockaddr_storage& tcp_peer);

}  // namespace sluice
