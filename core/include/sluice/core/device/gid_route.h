// The GID of a connection chosen by the IP route to the peer (oob mode), as pure logic: unit-tested
// without verbs. The verbs and librdmacm side is core/src/connect/route_gid.h.
//
// The engine guesses one GID per RoCE port from its table (net_addr.h, choose_roce_gid). When the
// peer's IP address is known, librdmacm resolves the route to it and names the source GID that
// really reaches it; the connection then uses that GID's index instead of the guess (a port with
// two addresses, only one of which routes to the peer). NCCL_IB_GID_INDEX still wins (with a WARN
// when the route disagrees); without a route (no rdma_ucm, IB without IPoIB, another device, no
// answer) the table's guess stays, and the log says so.
#pragma once

#include <string>
#include <vector>

#include "sluice/core/base/net_addr.h"

namespace sluice {

// What resolving the route to the peer told.
struct RouteFacts {
  bool resolved = false;  // the route was resolved through our device and port
  std::string failure;    // !resolved: why ("rdma_cm unavailable: ...", "routes through mlx5_1:1")
  GidBytes sgid{};        // resolved: the route's source GID
  std::string peer;       // the peer's IP address, text ("169.254.0.2")
  std::string netdev;     // resolved: the interface that holds the source address ("" = unknown)
};

struct RouteGidDecision {
  GidChoice choice;       // what the connection uses; reason = the INFO text
  bool by_route = false;  // choice is the route's GID
  std::string warn;       // non-empty: also WARN this (user's NCCL_IB_GID_INDEX differs from route)
};

// "::ffff:169.254.0.1" for an IPv4-mapped GID, else the IPv6 text.
std::string gid_full_text(const GidBytes& gid);

// The indexes of `table` whose GID equals `sgid`, best first: RoCE version == `roce_version`, then
// the lowest index. Empty when the GID is not in the table.
std::vector<GidEntry> match_route_gid(const std::vector<GidEntry>& table, const GidBytes& sgid,
                                      int roce_version);

// The connection's GID from the route (`route`), the port's table and its table guess
// (`table_choice`, made with `policy`; forced when policy.forced_index >= 0).
RouteGidDecision choose_gid_by_route(const std::vector<GidEntry>& table, const GidPolicy& policy,
                                     const GidChoice& table_choice, const RouteFacts& route);

// Whether the GIDs the two sides exchanged can reach each other. `local_prefix` is the prefix
// length of our address (-1 unknown); `routed` = our route check resolved the peer's GID's own
// address through this device (then another subnet is a routed network, not a mistake). Returns ""
// when they fit, else a WARN text naming both GIDs and the fix.
std::string gid_pair_problem(int local_index, const GidBytes& local, int local_prefix,
                             const GidBytes& remote, bool routed);

}  // namespace sluice
