// The GID of a connection chosen by the route to the peer: pure logic (gid_route.h).
#include "sluice/core/device/gid_route.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

namespace sluice {
namespace {

std::string version_text(int v) {
  return v == 0 ? std::string("RoCE version unknown") : "RoCE v" + std::to_string(v);
}

std::string entry_text(const GidEntry& e) {
  return "GID index " + std::to_string(e.index) + " (" + gid_full_text(e.gid) + ", " +
         version_text(e.roce_version) + ")";
}

const char* kListFix = "`sluice-info` lists each port's GIDs";

}  // namespace

std::string gid_full_text(const GidBytes& gid) {
  char buf[INET6_ADDRSTRLEN];
  if (gid_is_ipv4_mapped(gid)) {
    inet_ntop(AF_INET, gid.data() + 12, buf, sizeof buf);
    return std::string("::ffff:") + buf;
  }
  inet_ntop(AF_INET6, gid.data(), buf, sizeof buf);
  return buf;
}

std::vector<GidEntry> match_route_gid(const std::vector<GidEntry>& table, const GidBytes& sgid,
                                      int roce_version) {
  std::vector<GidEntry> out;
  for (const GidEntry& e : table)
    if (e.gid == sgid && !gid_is_zero(sgid)) out.push_back(e);
  std::stable_sort(out.begin(), out.end(), [&](const GidEntry& a, const GidEntry& b) {
    const bool av = a.roce_version == roce_version, bv = b.roce_version == roce_version;
    if (av != bv) return av;
    return a.index < b.index;
  });
  return out;
}

RouteGidDecision choose_gid_by_route(const std::vector<GidEntry>& table, const GidPolicy& policy,
                                     const GidChoice& table_choice, const RouteFacts& route) {
  RouteGidDecision d;
  d.choice = table_choice;
  const bool forced = policy.forced_index >= 0;
  std::vector<GidEntry> matches;
  std::string why_not;
  if (!route.resolved) {
    why_not = route.failure;
  } else {
    matches = match_route_gid(table, route.sgid, policy.roce_version);
    if (matches.empty())
      why_not = "its source GID " + gid_full_text(route.sgid) + " is not in the port's GID table";
  }
  if (matches.empty()) {
    d.choice.reason = table_choice.reason + "; the route to " + route.peer + " was not checked (" +
                      why_not + "), so the " + (forced ? "user's choice" : "table's guess") +
                      " stands";
    return d;
  }
  const GidEntry& best = matches.front();
  std::string via = "the route to " + route.peer;
  if (!route.netdev.empty()) via += " via " + route.netdev;
  if (forced) {
    if (table_choice.gid == best.gid) {
      d.choice.reason = table_choice.reason + "; " + via + " agrees";
    } else {
      d.warn = "NCCL_IB_GID_INDEX=" + std::to_string(policy.forced_index) + " (" +
               gid_full_text(table_choice.gid) + ") is not the GID " + via + " uses (" +
               entry_text(best) +
               "); keeping the user's choice, which may not reach the peer: unset "
               "NCCL_IB_GID_INDEX to follow the route, or set it to " +
               std::to_string(best.index);
      d.choice.reason = table_choice.reason + "; " + via + " would use " + entry_text(best);
    }
    return d;
  }
  d.by_route = true;
  d.choice.index = best.index;
  d.choice.gid = best.gid;
  d.choice.reason = entry_text(best) + " chosen by " + via;
  if (table_choice.index != best.index) {
    d.choice.reason += " (the table alone would pick index " + std::to_string(table_choice.index) +
                       ", " + gid_full_text(table_choice.gid) + ")";
  }
  return d;
}

std::string gid_pair_problem(int local_index, const GidBytes& local, int local_prefix,
                             const GidBytes& remote, bool routed) {
  if (gid_is_zero(local) || gid_is_zero(remote)) return {};
  const std::string both = "ours is GID index " + std::to_string(local_index) + " " +
                           gid_full_text(local) + ", the peer's is " + gid_full_text(remote);
  const bool v4l = gid_is_ipv4_mapped(local), v4r = gid_is_ipv4_mapped(remote);
  if (v4l != v4r) {
    return "the two sides' GIDs are of different address families (" + both +
           "): RoCE cannot connect an IPv4 GID to an IPv6 one. Fix: set the same "
           "NCCL_IB_ADDR_FAMILY on both hosts, or NCCL_IB_GID_INDEX to GIDs of one family (" +
           kListFix + ")";
  }
  const bool ll = gid_is_link_local(local), lr = gid_is_link_local(remote);
  if (ll && lr) return {};  // both on the link: nothing to route
  if (ll != lr) {
    return "one side's GID is link-local and the other's is not (" + both +
           "): they cannot reach each other. Fix: give both ports a routable address of one "
           "family, or set NCCL_IB_GID_INDEX to routable GIDs on both hosts (" +
           kListFix + ")";
  }
  if (routed) return {};  // another subnet, but the route to it was checked: a routed network
  int bits = local_prefix;
  if (bits < 0) bits = v4l ? -1 : 64;
  if (bits < 0) return {};  // IPv4 netmask unknown: nothing to compare
  const uint8_t* a = v4l ? local.data() + 12 : local.data();
  const uint8_t* b = v4l ? remote.data() + 12 : remote.data();
  bits = std::min(bits, v4l ? 32 : 128);
  if (prefix_equal(a, b, bits)) return {};
  return "the two sides' GIDs are in different subnets (" + both + "; our prefix is /" +
         std::to_string(bits) +
         ") and no route to the peer's address was checked through this device, so RoCE packets "
         "may not reach it. Fix: choose GIDs of one subnet with NCCL_IB_ADDR_RANGE on both hosts "
         "or NCCL_IB_GID_INDEX (" +
         kListFix + "), or add an IP route between the two subnets";
}

}  // namespace sluice
