// sluice-info's standby section (docs/standby.md): each usable device's standby, the nearest other
// NIC by the topology (sluice/core/base/standby.h's rule, the engine's), with the reason, and
// whether SLUICE_STANDBY puts it to use.
#pragma once

#include <string>
#include <vector>

#include "sluice/core/base/config.h"
#include "sluice/topology/topology.h"

namespace sluice::info {

struct StandbyPort {   // one port as the engine would see it
  std::string device;  // verbs device
  int port = 1;
  bool multi_port = false;  // the engine names it "device:port"
  bool active = false;
  std::string link;  // "RoCE", "InfiniBand", "" unknown (an XML topology)
  int ptr_support = 0;
};

struct StandbyRow {
  std::string name;     // the device, as the engine names it
  std::string standby;  // "" none
  std::string nearness;
  std::string reason;  // "rxe1: the only other RoCE device (...)", "none: ..."
};

struct StandbyReport {
  bool on = false;
  std::string state;  // "on (SLUICE_STANDBY=1)", "off (SLUICE_STANDBY=0)", ...
  std::vector<StandbyRow> rows;
};

StandbyReport standby_report(const topo::Topology& t, const Config& cfg,
                             const std::vector<StandbyPort>& ports);

}  // namespace sluice::info
