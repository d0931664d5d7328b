// NIC fusion and the topology (docs/fusion.md, docs/topology.md "Weights and rails"): how much of
// a fused device's traffic each member should carry, from the GPU's path to it, and which devices
// NCCL would fuse or could be fused (ports of one NIC, NICs under one PCIe switch).
//
// Weights. Each member's path from the GPU falls in a tier:
//   near  PIX or PXB: GPU and NIC below a common PCIe switch; the traffic never crosses the CPU
//   host  PHB or NODE: through the host bridge / CPU of the GPU's own NUMA node
//   far   SYS: across the inter-socket (or inter-die) link
// A member in a worse tier than the best member's is fallback only (weight 0): NCCL issue #2310
// measured a PIX NIC plus a PHB NIC striped equally drop *both* to 70 Gb/s from 400 and 234. The
// members in the best tier share by path bandwidth, the narrower of the port's speed and the
// NIC's PCIe link (hwloc), in Gb/s (the GPU's own link is common to every member, so it does not
// change their shares). Without a GPU, or with a member the topology does not know (a virtual
// device such as rxe), every member weighs its port speed and the reason says why.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sluice/topology/topology.h"

namespace sluice::topo {

struct FusionPath {
  std::string nic;          // verbs device name
  int port_speed_mbps = 0;  // 0 = unknown
};

struct MemberWeight {
  uint32_t weight = 0;  // relative share; 0 = fallback only
  PathClass cls = PathClass::kUnknown;
  float path_gbps = 0;  // the bandwidth the weight came from (0 = unknown)
  std::string reason;   // one line: class, path bandwidth, fallback and why
};

enum class PathTier : int { kNear = 0, kHost, kFar, kUnknown };
PathTier tier_of(PathClass c);
const char* tier_name(PathTier t);  // "near (PIX/PXB)", ...

// `gpu` is an index into t.gpus(), -1 = this process has no GPU the topology knows.
std::vector<MemberWeight> weigh_members(const Topology& t, int gpu,
                                        const std::vector<FusionPath>& members);

// Devices that could be fused, with why: the functions/ports of one adapter (what NCCL fuses at
// its default NCCL_NET_MERGE_LEVEL=PORT), and NICs below one PCIe switch (NCCL would fuse them at
// PIX/PXB). Each group lists NIC indexes into t.nics(), in that order; a set of ports of one
// adapter is not listed again as a switch group when it is the whole switch group.
struct FusionCandidate {
  std::vector<int> nics;
  std::string why;
};
std::vector<FusionCandidate> fusion_candidates(const Topology& t);

}  // namespace sluice::topo
