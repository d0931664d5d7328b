// Internal to topology/: the hwloc-backed state behind Topology and the helpers its source files
// share (topology.cc loads and discovers, topology_rank.cc classifies and ranks, topology_dot.cc
// draws). Not installed; nothing outside topology/src includes it.
#pragma once

#include <hwloc.h>

#include <string>
#include <vector>

#include "sluice/topology/topology.h"

namespace sluice::topo {

namespace detail {

std::string format_bus_id(unsigned domain, unsigned bus, unsigned dev, unsigned func);
std::string pci_bus_id(hwloc_obj_t o);
bool is_host_bridge(hwloc_obj_t o);  // robust to out-of-range enum values from XML
int obj_depth_from_root(hwloc_obj_t o);
hwloc_obj_t package_of(hwloc_obj_t o);
hwloc_obj_t non_io_ancestor(hwloc_obj_t o);
std::string describe(hwloc_obj_t o);  // "HostBridge 0000:[00-0f]", "PCI 0000:4e:00.0 [10de:2330]"

}  // namespace detail

struct Topology::Impl {
  hwloc_topology_t topo = nullptr;
  bool live = false;
  std::string source;
  std::vector<Gpu> gpus;
  std::vector<Nic> nics;
  std::vector<NumaNode> numa;
  int packages = 0;
  int adapters = 0;
  std::vector<hwloc_obj_t> gpu_obj;  // PCI objects
  std::vector<hwloc_obj_t> nic_obj;  // OS devices
  std::vector<hwloc_obj_t> nic_pci;  // PCI parent or nullptr

  ~Impl() {
    if (topo) hwloc_topology_destroy(topo);
  }
  void discover();
};

}  // namespace sluice::topo
