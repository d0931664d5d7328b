// Fusion weights and candidates from the topology (sluice/topology/fusion.h).
#include "sluice/topology/fusion.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace sluice::topo {
namespace {

std::string gbps(float v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.0f Gb/s", v);
  return b;
}

}  // namespace

PathTier tier_of(PathClass c) {
  switch (c) {
    case PathClass::kPIX:
    case PathClass::kPXB:
      return PathTier::kNear;
    case PathClass::kPHB:
    case PathClass::kNODE:
      return PathTier::kHost;
    case PathClass::kSYS:
      return PathTier::kFar;
    case PathClass::kUnknown:
      break;
  }
  return PathTier::kUnknown;
}

const char* tier_name(PathTier t) {
  switch (t) {
    case PathTier::kNear:
      return "near (PIX/PXB: below a PCIe switch with the GPU)";
    case PathTier::kHost:
      return "host (PHB/NODE: through the CPU's host bridge)";
    case PathTier::kFar:
      return "far (SYS: across sockets)";
    case PathTier::kUnknown:
      break;
  }
  return "unknown";
}

std::vector<MemberWeight> weigh_members(const Topology& t, int gpu,
                                        const std::vector<FusionPath>& members) {
  std::vector<MemberWeight> out(members.size());
  // Path bandwidth: the port's speed, bounded by the NIC's PCIe link (hwloc's GB/s x 8).
  std::vector<int> nic(members.size(), -1);
  bool all_known = gpu >= 0 && gpu < static_cast<int>(t.gpus().size());
  std::string unknown_why = all_known ? "" : "no GPU known to the topology for this process";
  for (size_t i = 0; i < members.size(); ++i) {
    nic[i] = t.find_nic(members[i].nic);
    float port = members[i].port_speed_mbps / 1000.0f;
    float pcie = nic[i] >= 0 ? t.nics()[nic[i]].link_speed_gbps * 8.0f : 0.0f;
    float path = port > 0 && pcie > 0 ? std::min(port, pcie) : std::max(port, pcie);
    out[i].path_gbps = path;
    std::string bw = path > 0 ? "path " + gbps(path) : "path bandwidth unknown";
    if (port > 0 && pcie > 0) bw += " = min(port " + gbps(port) + ", PCIe " + gbps(pcie) + ")";
    out[i].reason = bw;
    if (nic[i] < 0) {
      all_known = false;
      if (unknown_why.empty())
        unknown_why = members[i].nic + " is not in the topology (virtual device?)";
      continue;
    }
    if (gpu >= 0 && gpu < static_cast<int>(t.gpus().size())) {
      out[i].cls = t.classify(gpu, nic[i]).cls;
      if (out[i].cls == PathClass::kUnknown) {
        all_known = false;
        if (unknown_why.empty()) unknown_why = members[i].nic + " has no PCI locality";
      }
    }
  }
  auto weight_of = [](float path) {
    return static_cast<uint32_t>(std::max(1.0f, std::round(path)));
  };
  if (!all_known) {
    for (auto& m : out) {
      m.weight = weight_of(m.path_gbps);
      m.reason = std::string("class ") + path_class_name(m.cls) + ", " + m.reason +
                 "; by bandwidth only: " + unknown_why;
    }
    return out;
  }
  PathTier best = PathTier::kUnknown;
  size_t best_i = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (tier_of(out[i].cls) < best) {
      best = tier_of(out[i].cls);
      best_i = i;
    }
  }
  for (size_t i = 0; i < out.size(); ++i) {
    const PathTier ti = tier_of(out[i].cls);
    const std::string cls = path_class_name(out[i].cls);
    if (ti > best) {
      out[i].weight = 0;
      out[i].reason = cls + ", " + out[i].reason + "; fallback only: tier " + tier_name(ti) +
                      " is worse than " + members[best_i].nic + "'s " + tier_name(best) +
                      " (striping across them slows both: NCCL #2310)";
    } else {
      out[i].weight = weight_of(out[i].path_gbps);
      out[i].reason = cls + ", " + out[i].reason;
    }
  }
  return out;
}

std::vector<FusionCandidate> fusion_candidates(const Topology& t) {
  std::vector<FusionCandidate> out;
  const auto& nics = t.nics();
  std::map<int, std::vector<int>> by_adapter;
  for (const auto& n : nics)
    if (n.adapter >= 0) by_adapter[n.adapter].push_back(n.index);
  for (const auto& [a, list] : by_adapter) {
    if (list.size() < 2) continue;
    out.push_back({list,
                   "ports/functions of one adapter (NCCL fuses these at its default "
                   "NCCL_NET_MERGE_LEVEL=PORT)"});
  }
  // Below one PCIe switch: group NICs whose pairwise class is PIX/PXB with the group's first.
  std::vector<bool> placed(nics.size(), false);
  for (size_t i = 0; i < nics.size(); ++i) {
    if (placed[i]) continue;
    std::vector<int> group = {static_cast<int>(i)};
    std::string lca;
    for (size_t j = i + 1; j < nics.size(); ++j) {
      if (placed[j]) continue;
      const PairInfo p = t.classify_nics(static_cast<int>(i), static_cast<int>(j));
      if (p.cls != PathClass::kPIX && p.cls != PathClass::kPXB) continue;
      group.push_back(static_cast<int>(j));
      if (lca.empty()) lca = p.lca;
    }
    if (group.size() < 2) continue;
    for (int g : group) placed[g] = true;
    bool one_adapter = true;
    for (int g : group) one_adapter = one_adapter && nics[g].adapter == nics[group[0]].adapter;
    if (one_adapter) continue;  // already listed as one adapter's ports
    out.push_back({group, "below one PCIe switch (" + lca +
                              "; NCCL fuses these at NCCL_NET_MERGE_LEVEL=PIX or PXB)"});
  }
  return out;
}

}  // namespace sluice::topo
