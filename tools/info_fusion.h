// sluice-info's NIC-fusion section (docs/fusion.md): the devices NCCL fuses at its default merge
// level (ports of one NIC), the would-be fusions of a wider level (NICs below one PCIe switch),
// each member's weight with the reason (from the GPU nearest to the group, or this process's GPU),
// and the v12 rail/plane of every port with where it came from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sluice/core/base/config.h"
#include "sluice/topology/topology.h"

namespace sluice::info {

struct PortFact {  // one port of a verbs device (or of an XML NIC, speed unknown)
  std::string device;
  int port = 1;
  bool active = false;
  int speed_mbps = 0;
};

struct MemberRow {
  std::string name;
  uint32_t weight = 0;
  std::string reason;
};

struct GroupRow {
  std::vector<std::string> members;
  std::string why;
  bool nccl_default = false;  // NCCL fuses it at NCCL_NET_MERGE_LEVEL=PORT (its default)
  std::string gpu;            // the GPU the weights are for ("" = none)
  std::vector<MemberRow> weights;
  std::string refusal;  // what makeVDevice would answer instead ("" = it fuses)
};

struct RailRow {
  std::string device;
  int port = 1;
  int rail = -1, plane = -1;
  std::string reason;
};

struct FusionReport {
  std::vector<GroupRow> groups;
  std::vector<RailRow> rails;
  std::string policy;  // NCCL_IB_MERGE_NICS and SLUICE_FUSION_WEIGHTS in effect
};

FusionReport fusion_report(const topo::Topology& t, const Config& cfg,
                           const std::vector<PortFact>& ports, const std::string& gpu_bus_id);

}  // namespace sluice::info
