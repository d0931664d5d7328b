// Topology: where every GPU, RDMA NIC and NUMA node sits, from hwloc (the live machine or an hwloc
// XML export), and which NIC is nearest to which GPU.
//
// Identity is by PCI bus id and hwloc's tree, never by names or indexes: `mlx5_k` need not be near
// GPU k, PCI domains may be non-zero and NUMA OS indexes need not be contiguous.
//
// Classes of a GPU -> NIC pair (see docs/topology.md):
//   PIX  lowest common ancestor (LCA) is a PCI-to-PCI bridge, both devices at most 1 bridge below
//   PXB  LCA is a PCI-to-PCI bridge, at least one device 2+ bridges below it
//   PHB  LCA is a host bridge
//   NODE LCA is a CPU-side object and both devices have the same local NUMA node(s)
//   SYS  different local NUMA nodes (same_package tells SNC/NPS apart from cross-socket)
// Common ancestors are found by walking parent pointers: hwloc_get_common_ancestor_obj() crashes on
// I/O objects at different PCI depths (hwloc 2.9).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/core/api.h"  // DeviceLocality
#include "sluice/core/base/status.h"

namespace sluice::topo {

enum class PathClass : int { kPIX = 0, kPXB, kPHB, kNODE, kSYS, kUnknown };
const char* path_class_name(PathClass c);  // "PIX", ..., "SYS", "unknown"

// "0000:4e:00.0" from "4e:00.0", "00000000:4E:00.0" (CUDA style), "0001:4e:00.0"; "" if malformed.
std::string normalize_pci_bus_id(std::string_view text);

struct Gpu {
  int index = 0;       // rank in PCI bus-id order (= CUDA index under CUDA_DEVICE_ORDER=PCI_BUS_ID)
  std::string bus_id;  // "0000:4e:00.0"
  uint16_t vendor_id = 0, device_id = 0, class_id = 0;
  std::string name;                     // GPUModel / PCIDevice info when present, else ""
  std::vector<std::string> os_devices;  // cudaN, nvmlN, opencl0dN (may be empty)
  int numa_node = -1;         // OS index (P#) of the single local NUMA node, -1 = none or several
  std::vector<int> cpus;      // OS indexes of the PUs local to the device (empty = unknown)
  float link_speed_gbps = 0;  // PCIe link speed in GB/s as hwloc reports it (0 = unknown)
};

struct Nic {
  int index = 0;       // position in nics() (PCI bus-id order, then name; non-PCI last)
  std::string name;    // OpenFabrics OS device name = verbs device name ("mlx5_0", "rdmap79s0")
  std::string bus_id;  // PCI function, "" = no PCI parent (virtual device: unknown locality)
  uint16_t vendor_id = 0, device_id = 0, class_id = 0;
  std::string model;  // PCIDevice info when present
  int numa_node = -1;
  std::vector<int> cpus;
  float link_speed_gbps = 0;
  int adapter = -1;  // functions/ports of one physical card share this id (index into adapters)
  std::string node_guid, sys_image_guid;  // hwloc infos when present
  std::vector<int> port_states;           // Port<N>State infos (index 0 = port 1), empty = unknown
  bool maybe_active() const;              // no port info, or some port ACTIVE (4)
};

struct NumaNode {
  int os_index = 0;  // P#
  int package = -1;  // logical index of the enclosing Package, -1 = none
  std::vector<int> cpus;
  uint64_t local_memory = 0;  // bytes
};

struct PairInfo {
  PathClass cls = PathClass::kUnknown;
  bool same_package = false;  // both devices inside the same Package object
  int lca_depth = -1;         // depth of the common ancestor from the root (deeper = closer)
  int gpu_bridges = 0;        // bridges strictly between the GPU and the LCA
  int nic_bridges = 0;
  std::string lca;  // "PCIBridge 0000:45:00.0 [1d0f:0200]", "Package L#1", "Machine L#0"
};

struct RankedNic {
  int nic = -1;
  PairInfo info;
};

struct GpuAssignment {
  int gpu = -1;
  std::vector<int> nics;  // NIC indexes, the GPU's own share of its nearest NICs, best first
  PathClass cls = PathClass::kUnknown;
};

struct RankOptions {
  bool active_only = false;  // skip NICs whose known port states are all down
};

class Topology {
 public:
  // Live machine, I/O discovery on. (hwloc honours HWLOC_XMLFILE here; load_xml_file does not
  // fall back to anything.)
  static Result<Topology> load_live();
  // An hwloc XML file (v1 or v2). A missing or unreadable file is an error, never a silent
  // fallback.
  static Result<Topology> load_xml_file(const std::string& path);
  static Result<Topology> load_xml_buffer(std::string_view xml, std::string source = "<buffer>");

  Topology(Topology&&) noexcept;
  Topology& operator=(Topology&&) noexcept;
  ~Topology();

  bool is_live() const;
  const std::string& source() const;  // "live" or the file name

  const std::vector<Gpu>& gpus() const;
  const std::vector<Nic>& nics() const;
  const std::vector<NumaNode>& numa_nodes() const;
  int package_count() const;
  int adapter_count() const;

  int find_gpu(std::string_view bus_id) const;  // any form normalize_pci_bus_id accepts; -1
  int find_nic(std::string_view name) const;    // -1

  PairInfo classify(int gpu, int nic) const;
  // The same classes between two NICs (gpu_bridges counts the first NIC's bridges): PIX or PXB =
  // below one PCIe switch, PHB = one host bridge (fusion candidates, fusion.h).
  PairInfo classify_nics(int a, int b) const;
  // Every NIC (known locality first), best first: class, deeper common ancestor, faster PCIe
  // link, bus id, name.
  std::vector<RankedNic> ranked_nics(int gpu, const RankOptions& opt = {}) const;
  // The NICs at the best class (the README's "nearest NIC(s)"), in ranked order.
  std::vector<RankedNic> nearest_nics(int gpu, const RankOptions& opt = {}) const;
  // Whole machine: each GPU gets one adapter of its nearest set, least-loaded first, then the
  // nearest adapters nobody got are shared out to the GPUs that have fewest. Deterministic.
  std::vector<GpuAssignment> assign(const RankOptions& opt = {}) const;

  // Locality of a verbs device for the plugin. pci_path = realpath of
  // <sysfs_root>/class/infiniband/<dev>/device when it is a PCI function, else "". NUMA node and
  // cpus come from hwloc (by OpenFabrics name, else by PCI bus id), else from sysfs. A virtual
  // device (rxe, siw) or an unknown name gives unknown locality (numa -1, no cpus).
  DeviceLocality locality_of_ibdev(const std::string& name,
                                   const std::string& sysfs_root = "/sys") const;
  // Locality of a NIC of this topology without sysfs (pci_path empty).
  DeviceLocality locality_of_nic(int nic) const;

  // This process's CPU binding (OS indexes of PUs); live topology only, else empty.
  std::vector<int> current_cpu_binding() const;

  // Graphviz DOT of packages, NUMA nodes, host bridges, switches, GPUs and NICs, with the
  // assignment as dashed edges.
  std::string to_dot() const;

 private:
  struct Impl;
  explicit Topology(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::topo
