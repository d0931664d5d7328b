// The connection-manager decision (cm_choice.h).
#include "sluice/core/cm_choice.h"

namespace sluice {

const char* cm_mode_name(CmMode m) {
  switch (m) {
    case CmMode::kAuto:
      return "auto";
    case CmMode::kOob:
      return "oob";
    case CmMode::kRdmacm:
      return "rdmacm";
  }
  return "?";
}

CmDecision choose_cm(const CmFacts& f) {
  using R = CmFacts::Route;
  const std::string dev = f.device.empty() ? std::string("this device") : f.device;
  if (f.knob == CmMode::kOob) {
    if (f.iwarp) {
      return {CmDecision::kError,
              dev +
                  " is an iWARP device, whose connections must go through rdma_cm: unset "
                  "SLUICE_CM or set SLUICE_CM=rdmacm"};
    }
    return {CmDecision::kOob, "SLUICE_CM=oob"};
  }
  if (!f.peer_offers) {
    const std::string why = "the listener at " + f.peer +
                            " offers no rdma_cm port (its rdma_cm listen failed: no IP address "
                            "on its device, or rdma_ucm not loaded there)";
    if (f.knob == CmMode::kRdmacm || f.iwarp) {
      return {CmDecision::kError,
              (f.iwarp ? dev + " is iWARP and needs rdma_cm, but "
                       : std::string("SLUICE_CM=rdmacm, but ")) +
                  why + "; load rdma_ucm and give the listener's device an IP address" +
                  (f.iwarp ? std::string() : std::string(", or set SLUICE_CM=oob"))};
    }
    return {CmDecision::kOob, "SLUICE_CM=auto: " + why};
  }
  switch (f.route) {
    case R::kNotTried:
      return {CmDecision::kResolveFirst, "resolving " + f.peer + " with rdma_cm"};
    case R::kThisDevice:
      return {CmDecision::kRdmacm,
              std::string(f.knob == CmMode::kAuto ? "SLUICE_CM=auto" : "SLUICE_CM=rdmacm") + ": " +
                  f.peer + " routes through " + dev + (f.iwarp ? " (iWARP)" : "")};
    case R::kOtherDevice:
    case R::kFailed: {
      const std::string why =
          f.route == R::kOtherDevice
              ? f.peer + " routes through " + f.route_detail + ", not " + dev
              : "rdma_cm cannot resolve " + f.peer + " from " + dev + ": " + f.route_detail;
      if (f.knob == CmMode::kRdmacm || f.iwarp) {
        return {CmDecision::kError,
                (f.iwarp ? dev + " is iWARP and needs rdma_cm, but " : std::string()) + why +
                    "; give " + dev +
                    "'s network interface an address in the listener's subnet (or pick the device "
                    "that routes there with NCCL_IB_HCA)" +
                    (f.iwarp ? std::string() : std::string(", or set SLUICE_CM=oob"))};
      }
      return {CmDecision::kOob, "SLUICE_CM=auto: " + why};
    }
  }
  return {CmDecision::kError, "unreachable"};
}

CmDecision cm_for_port(CmMode knob, bool iwarp, bool has_ip) {
  if (knob == CmMode::kOob)
    return iwarp ? CmDecision{CmDecision::kError, "SLUICE_CM=oob, but iWARP needs rdma_cm"}
                 : CmDecision{CmDecision::kOob, "SLUICE_CM=oob"};
  if (iwarp) return {CmDecision::kRdmacm, "iWARP: connections must go through rdma_cm"};
  if (has_ip) {
    return {CmDecision::kRdmacm,
            std::string(knob == CmMode::kAuto ? "SLUICE_CM=auto" : "SLUICE_CM=rdmacm") +
                ": toward peers whose address routes through this port's IP "
                "address" +
                (knob == CmMode::kAuto ? "; oob toward others" : "")};
  }
  if (knob == CmMode::kRdmacm)
    return {CmDecision::kError, "SLUICE_CM=rdmacm, but the port has no IP address: listen fails"};
  return {CmDecision::kOob,
          "SLUICE_CM=auto: no IP address on this port (InfiniBand without IPoIB?)"};
}

}  // namespace sluice
