// A primary with a standby (issue 20, docs/standby.md): with SLUICE_STANDBY=1 a comm on one
// physical device also holds connected QPs on a second device, its standby, which carries nothing
// (weight 0: fallback only) until the primary fails. This is the pure rule that picks each
// device's standby, shared by the engine (comm/engine.cc) and sluice-info:
//
//  * Eligible: another device with the same link layer (a connection's QPs are all addressed one
//    way: GRH and GID on RoCE, LID on InfiniBand), whose port is ACTIVE, and that takes every kind
//    of memory the primary takes (ptrSupport: a registration on the primary is made on the
//    standby too, so a standby without GPUDirect would refuse the primary's CUDA buffers).
//  * Nearest first, by the topology (hwloc, through the plugin): another port or function of the
//    same NIC, then a NIC below the same PCIe switch (PIX/PXB), the same host bridge (PHB), the
//    same NUMA node (NODE), the same socket (SYS within one package), any other; a device the
//    topology does not place (a virtual device such as rxe) is of unknown nearness, after all of
//    those. Ties go to the lower device index.
//  * SLUICE_STANDBY_MAP=primary=standby,... names a pair instead (or `none`); an entry that names
//    a device that is absent or not eligible gives no standby, with the reason.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/core/base/status.h"

namespace sluice::standby {

enum class Nearness : int {
  kSameNic = 0,  // another port or PCI function of the same adapter
  kSwitch,       // below one PCIe switch (hwloc PIX / PXB)
  kHostBridge,   // below one host bridge (PHB)
  kNuma,         // the same NUMA node (NODE)
  kSocket,       // another NUMA node of the same socket (SYS within one package)
  kFar,          // another socket (SYS)
  kUnknown,      // not placed by the topology (virtual device, no topology)
};
// "same NIC", "same PCI switch", "same host bridge", "same NUMA node", "same socket", "another
// socket", "nearness unknown".
const char* nearness_text(Nearness n);

struct Candidate {
  std::string name;     // as the engine names the device: "rxe0", "mlx5_0:1"
  std::string adapter;  // the verbs device (ports of one adapter share it)
  std::string link;     // "RoCE", "InfiniBand"; "" unknown (an XML topology); must be equal
  bool active = true;   // port ACTIVE
  int ptr_support = 0;  // the memory kinds it registers (kPtrHost | kPtrCuda | kPtrDmabuf)
};

struct Choice {
  int standby = -1;  // index into the candidates; -1: none
  Nearness nearness = Nearness::kUnknown;
  std::string reason;  // one line: "rxe1: same PCI switch as rxe0 ...", "none: ..."
};

// How near device b is to device a (indexes into the candidates); empty: unknown for every pair.
using NearnessFn = std::function<Nearness(int a, int b)>;

// SLUICE_STANDBY_MAP: comma-separated `primary=standby` entries (device names as above, exact;
// `none` for no standby), a primary at most once, never its own standby. Empty text: empty map.
struct MapEntry {
  std::string primary, standby;  // standby "none": no standby
};
Result<std::vector<MapEntry>> parse_map(std::string_view text);

// Each candidate's standby (one Choice per candidate, in order). An inactive candidate gets none.
std::vector<Choice> choose(const std::vector<Candidate>& devs, const NearnessFn& near,
                           const std::vector<MapEntry>& map = {});

// Map entries whose primary names no candidate (a WARN at init, as NCCL_IB_HCA's unmatched names).
std::vector<std::string> unmatched_primaries(const std::vector<Candidate>& devs,
                                             const std::vector<MapEntry>& map);

}  // namespace sluice::standby
