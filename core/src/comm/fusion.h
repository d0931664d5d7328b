// NIC fusion's pure rules (makeVDevice; docs/fusion.md): which sets of devices may be fused, the
// fused device's properties merged from its members', the members' weights after
// SLUICE_FUSION_WEIGHTS, and the rail and plane a device reports (SLUICE_NIC_RAILS). No verbs:
// engine.cc gathers the facts and keeps the result; tests/unit/fusion_test.cc tests these alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sluice/core/api.h"
#include "sluice/core/base/fusion_spec.h"

namespace sluice {

// The facts of one candidate member, copied from its Device.
struct FusionMember {
  int index = -1;
  std::string name;     // NCCL's device name: "rxe0", "mlx5_0:1"
  std::string adapter;  // verbs device name
  int port = 1;
  bool roce = false;
  DeviceProperties props;
  int rail = kNetIdUndef;
  int plane = kNetIdUndef;
};

// The request itself, before any member is looked at: n within 2..max_members (4 before net v12,
// 8 from it: the caller passes the ABI's limit), every index a physical device (< n_physical; a
// fused device is refused: NCCL fuses physical devices only), none repeated, and fusion allowed
// (NCCL_IB_MERGE_NICS). A one-device request is accepted (NCCL does not send one; it names the
// device itself) only as a no-op the caller handles. The error names the reason.
Status check_fusion_request(const int* devs, int n, int n_physical, int n_devices, int max_members,
                            bool merge_nics);
// The members: one link layer (InfiniBand or RoCE, never both: one connection's QPs must all be
// addressed the same way).
Status check_fusion_members(const std::vector<FusionMember>& members);

// The merged properties (the pointers in `props` point into this struct: keep it where it stays).
struct FusedProps {
  std::string name;      // members' names joined by '+'
  std::string pci_path;  // the heaviest member's (first on a tie): where most bytes go
  std::string gdr_summary;
  std::string rail_reason;
  int rail = kNetIdUndef;
  int plane = kNetIdUndef;
  DeviceProperties props;
};
// Rules (docs/fusion.md): speed = sum over the members that carry stripes (weight > 0; all of them
// unless some are fallback-only); ptrSupport, regIsGlobal = what every member supports (AND);
// forceFlush = any member's (OR); maxComms, maxRecvs, maxP2pBytes, maxCollBytes = the minimum;
// latency = the largest (a striped message completes with its slowest part); guid and port =
// member 0's (NCCL groups devices by guid in its search; NCCL's transport does the same); pciPath
// = the heaviest member's; numa = the members' node if they share one, else -1; rail = the shared
// rail, else undefined; plane = one bit per member's plane when every member has one, else
// undefined.
void merge_properties(const std::vector<FusionMember>& members,
                      const std::vector<uint32_t>& weights, FusedProps* out);

// The weights a provider computed (or equal ones without), then SLUICE_FUSION_WEIGHTS: if the list
// names any member it must name all, and at least one weight must be non-zero. `reasons` gets one
// line per member saying where its weight came from.
Status apply_weight_override(const NamedList& override_list,
                             const std::vector<FusionMember>& members,
                             std::vector<uint32_t>* weights, std::vector<std::string>* reasons);
// Weights when no topology answers: each member's port speed in Gb/s (at least 1), which is equal
// shares for equal ports.
std::vector<uint32_t> speed_weights(const std::vector<FusionMember>& members);

// The rail/plane of one physical device from SLUICE_NIC_RAILS, with the reason.
struct RailChoice {
  int rail = kNetIdUndef;
  int plane = kNetIdUndef;
  std::string reason;
};
RailChoice rail_of(const NamedList& rails, const std::string& adapter, int port);

// One line for the INFO log and sluice-info: "rxe0=1 (...), rxe1=1 (...)".
std::string describe_weights(const std::vector<FusionMember>& members,
                             const std::vector<uint32_t>& weights,
                             const std::vector<std::string>& reasons);

}  // namespace sluice
