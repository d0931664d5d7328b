// The connection-manager decision (cm_choice.h).
#include "sluice/core/connect/cm_choice.h"

#include <cerrno>

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
                            "on its device's network interface, or rdma_ucm not loaded there; its "
                            "log says why)";
    if (f.knob == CmMode::kRdmacm || f.iwarp) {
      return {CmDecision::kError,
              (f.iwarp ? dev + " is iWARP and needs rdma_cm, but "
                       : std::string("SLUICE_CM=rdmacm, but ")) +
                  why + "; load rdma_ucm and give the listener's device an IP address" +
                  (f.iwarp ? std::string() : std::string(", or set SLUICE_CM=oob"))};
    }
    return {CmDecision::kOob, "SLUICE_CM=auto: " + why};
  }
  // The address rdma_cm resolves, naming the listener's out-of-band address when it differs.
  const bool own_cm = !f.cm_peer.empty() && f.cm_peer != f.peer;
  const std::string target =
      own_cm ? f.cm_peer + " (the rdma_cm address of the listener at " + f.peer + ")" : f.peer;
  const std::string from = f.local_addr.empty() ? dev : dev + " (from " + f.local_addr + ")";
  switch (f.route) {
    case R::kNotTried:
      return {CmDecision::kResolveFirst, "resolving " + target + " with rdma_cm"};
    case R::kThisDevice:
      return {CmDecision::kRdmacm,
              std::string(f.knob == CmMode::kAuto ? "SLUICE_CM=auto" : "SLUICE_CM=rdmacm") + ": " +
                  target + " routes through " + from + (f.iwarp ? " (iWARP)" : "")};
    case R::kOtherDevice:
    case R::kFailed: {
      const std::string why =
          f.route == R::kOtherDevice
              ? target + " routes through " + f.route_detail + ", not " + dev
              : "rdma_cm cannot resolve " + target + " from " + from + ": " + f.route_detail;
      if (f.knob == CmMode::kRdmacm || f.iwarp) {
        return {CmDecision::kError,
                (f.iwarp ? dev + " is iWARP and needs rdma_cm, but " : std::string()) + why +
                    "; give " + dev + "'s network interface an address in the subnet of " +
                    (own_cm ? f.cm_peer : std::string("the listener")) +
                    " (or pick the device that routes there with NCCL_IB_HCA)" +
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

bool cm_resolve_again(int event_status, long long left_ms) {
  return event_status == -ETIMEDOUT && left_ms >= kCmResolveMinAttemptMs;
}

}  // namespace sluice
