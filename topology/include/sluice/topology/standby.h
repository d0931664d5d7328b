// The nearness of two RDMA NICs for the choice of a device's standby (sluice/core/base/standby.h,
// docs/standby.md), from the topology's NIC-to-NIC classes (Topology::classify_nics): the same
// adapter (hwloc's ports and functions of one card), a common PCIe switch (PIX/PXB), host bridge
// (PHB), NUMA node (NODE), socket (SYS within one package), or none of those (SYS).
#pragma once

#include <string_view>

#include "sluice/core/base/standby.h"
#include "sluice/topology/topology.h"

namespace sluice::topo {

// Unknown when either verbs device name is not a NIC of `t` or has no PCI parent (rxe, siw).
standby::Nearness nic_nearness(const Topology& t, std::string_view a, std::string_view b);

}  // namespace sluice::topo
