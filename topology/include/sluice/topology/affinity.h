// SLUICE_NIC_AFFINITY and SLUICE_GPU_NIC_MAP: pure policy functions. The strings are passed in
// (core's config.cc is the only reader of the environment).
//
// SLUICE_GPU_NIC_MAP syntax (docs/topology.md):
//   map     := entry (';' entry)*            whitespace around tokens is ignored
//   entry   := gpu '=' nic (',' nic)*
//   gpu     := PCI bus id ("0000:1b:00.0", "1b:00.0", CUDA's "00000000:1B:00.0")
//            | decimal GPU index (rank in PCI bus-id order = CUDA index with PCI_BUS_ID order)
//   nic     := verbs device name, optionally ":port" ("mlx5_0", "mlx5_0:1")
// e.g. "0000:1b:00.0=mlx5_0,mlx5_1;0000:3d:00.0=mlx5_2" or "0=mlx5_0;1=mlx5_2".
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "sluice/core/base/status.h"
#include "sluice/topology/topology.h"

namespace sluice::topo {

enum class AffinityMode { kOff, kAuto };
// "" / "off" / "0" / "none" -> kOff, "auto" / "1" -> kAuto (case-insensitive); else an error.
Result<AffinityMode> parse_affinity_mode(std::string_view text);

struct GpuNicMapEntry {
  std::string gpu;         // as written
  int gpu_index = -1;      // filled by parse (index form) or resolve (bus-id form)
  std::string gpu_bus_id;  // normalized; filled by parse (bus-id form) or resolve (index form)
  std::vector<std::string> nics;  // as written (may carry ":port")
};

struct GpuNicMap {
  std::vector<GpuNicMapEntry> entries;
  bool empty() const { return entries.empty(); }
  const GpuNicMapEntry* find(int gpu_index, std::string_view gpu_bus_id) const;
  std::string to_string() const;  // canonical form, bus ids
};

// Syntax only. Empty text -> empty map. Errors name the offending entry.
Result<GpuNicMap> parse_gpu_nic_map(std::string_view text);

// Checks the map against the machine: every GPU must exist (by index or bus id) and every NIC name
// (the part before ':port') must be in `nic_names`; the error lists all unknown names at once.
// Fills gpu_index / gpu_bus_id.
Status resolve_gpu_nic_map(GpuNicMap* map, const std::vector<std::string>& gpu_bus_ids,
                           const std::vector<std::string>& nic_names);

// parse + resolve against a topology's GPUs and the given verbs device names.
Result<GpuNicMap> parse_gpu_nic_map(std::string_view text, const Topology& topo,
                                    const std::vector<std::string>& nic_names);

struct AffinityRequest {
  std::string gpu_bus_id;        // this process's GPU, "" = unknown / none
  std::vector<int> cpu_binding;  // OS indexes of this process's CPU binding (used without a GPU)
};

struct AffinityOrder {
  std::vector<std::string> nics;  // `nic_names` reordered, nearest first (same elements)
  std::string reason;             // one line: what decided the order
};

// Orders `nic_names` (verbs devices; may include ":port" suffixes and names unknown to the
// topology, e.g. rxe) for this process:
//  1. an override entry for the process's GPU: its NICs first, in the order written;
//  2. with a GPU known to the topology: the GPU's share of Topology::assign(), then the rest by
//     Topology::ranked_nics();
//  3. without a GPU but with a CPU binding: NICs whose local CPUs contain the binding, then NICs
//     whose local CPUs intersect it, then the others;
//  4. names the topology does not know (virtual devices) keep their relative order, last.
// The order is stable and deterministic. `override_map` may be null.
AffinityOrder order_nics(const Topology& topo, const std::vector<std::string>& nic_names,
                         const AffinityRequest& req, const GpuNicMap* override_map = nullptr);

}  // namespace sluice::topo
