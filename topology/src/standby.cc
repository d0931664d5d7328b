#include "sluice/topology/standby.h"

namespace sluice::topo {

standby::Nearness nic_nearness(const Topology& t, std::string_view a, std::string_view b) {
  using standby::Nearness;
  const int ia = t.find_nic(a), ib = t.find_nic(b);
  if (ia < 0 || ib < 0) return Nearness::kUnknown;
  const Nic& na = t.nics()[ia];
  const Nic& nb = t.nics()[ib];
  if (na.bus_id.empty() || nb.bus_id.empty()) return Nearness::kUnknown;
  if (ia == ib || (na.adapter >= 0 && na.adapter == nb.adapter)) return Nearness::kSameNic;
  const PairInfo p = t.classify_nics(ia, ib);
  switch (p.cls) {
    case PathClass::kPIX:
    case PathClass::kPXB:
      return Nearness::kSwitch;
    case PathClass::kPHB:
      return Nearness::kHostBridge;
    case PathClass::kNODE:
      return Nearness::kNuma;
    case PathClass::kSYS:
      return p.same_package ? Nearness::kSocket : Nearness::kFar;
    case PathClass::kUnknown:
      break;
  }
  return Nearness::kUnknown;
}

}  // namespace sluice::topo
