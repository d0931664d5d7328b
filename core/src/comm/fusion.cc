#include "comm/fusion.h"

#include <algorithm>
#include <limits>

#include "sluice/core/wire/wire.h"

namespace sluice {
namespace {

Status refuse(const std::string& why) {
  return Status(Code::kInvalidArgument, "makeVDevice: refused: " + why);
}

std::string list(const int* devs, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += (i ? "," : "") + std::to_string(devs[i]);
  return s;
}

}  // namespace

Status check_fusion_request(const int* devs, int n, int n_physical, int n_devices, int max_members,
                            bool merge_nics) {
  if (devs == nullptr) return refuse("the device list is NULL");
  if (n < 1) return refuse("no device to fuse (ndevs = " + std::to_string(n) + ")");
  if (n > max_members) {
    // NCCL's devs[] holds max_members entries at this ABI version: a larger ndevs is read no
    // further.
    return refuse(std::to_string(n) + " devices (" + list(devs, max_members) +
                  ",...) but at most " + std::to_string(max_members) +
                  " may be fused at this net ABI version");
  }
  if (n > wire::kMaxMetaMembers) {
    // Net v12 lets NCCL ask for 8, but a comm runs over at most kMaxMetaMembers members (the
    // connection metadata's MetaMembers, CommStatsV2): refused here, where NCCL takes a refusal
    // gracefully (it uses the devices unfused), not at connect, where it would be fatal.
    return refuse(std::to_string(n) + " devices (" + list(devs, n) +
                  "): a Sluice comm runs over at most " + std::to_string(wire::kMaxMetaMembers) +
                  " member devices (its connection metadata holds that many), so at most " +
                  std::to_string(wire::kMaxMetaMembers) + " are fused");
  }
  if (n > 1 && !merge_nics) {
    return refuse("NCCL_IB_MERGE_NICS=0 forbids fusing devices " + list(devs, n) +
                  "; unset it (or set 1) to allow fusion, or set NCCL_NET_MERGE_LEVEL=LOC so NCCL "
                  "does not ask");
  }
  for (int i = 0; i < n; ++i) {
    if (devs[i] < 0 || devs[i] >= n_devices) {
      return refuse("device " + std::to_string(devs[i]) + " is unknown (have " +
                    std::to_string(n_physical) + " physical device(s), indexes 0.." +
                    std::to_string(n_physical - 1) + ")");
    }
    if (devs[i] >= n_physical) {
      return refuse("device " + std::to_string(devs[i]) +
                    " is itself a fused device; only physical devices (0.." +
                    std::to_string(n_physical - 1) + ") can be members");
    }
    for (int j = 0; j < i; ++j) {
      if (devs[j] == devs[i])
        return refuse("device " + std::to_string(devs[i]) + " is named twice in " + list(devs, n));
    }
  }
  return Status::ok();
}

Status check_fusion_members(const std::vector<FusionMember>& members) {
  for (const auto& m : members) {
    if (m.roce != members.front().roce) {
      return refuse("mixed link layers: " + members.front().name + " is " +
                    (members.front().roce ? "RoCE (Ethernet)" : "InfiniBand") + " but " + m.name +
                    " is " + (m.roce ? "RoCE (Ethernet)" : "InfiniBand") +
                    "; one connection's QPs are all addressed one way");
    }
  }
  return Status::ok();
}

void merge_properties(const std::vector<FusionMember>& members,
                      const std::vector<uint32_t>& weights, FusedProps* out) {
  *out = FusedProps{};
  DeviceProperties& p = out->props;
  const DeviceProperties& first = members.front().props;
  p = first;
  size_t heaviest = 0;
  long long speed = 0, speed_all = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    const DeviceProperties& m = members[i].props;
    if (i) out->name += "+";
    out->name += members[i].name;
    if (weights[i] > weights[heaviest]) heaviest = i;
    speed_all += m.speed_mbps;
    if (weights[i] > 0) speed += m.speed_mbps;
    p.ptr_support &= m.ptr_support;
    p.reg_is_global = p.reg_is_global && m.reg_is_global ? 1 : 0;
    p.force_flush = p.force_flush || m.force_flush ? 1 : 0;
    p.max_comms = std::min(p.max_comms, m.max_comms);
    p.max_recvs = std::min(p.max_recvs, m.max_recvs);
    p.max_p2p_bytes = std::min(p.max_p2p_bytes, m.max_p2p_bytes);
    p.max_coll_bytes = std::min(p.max_coll_bytes, m.max_coll_bytes);
    p.latency_us = std::max(p.latency_us, m.latency_us);
    if (m.numa_node != first.numa_node) p.numa_node = -1;
  }
  if (speed == 0) speed = speed_all;  // unreachable after apply_weight_override; never report 0
  p.speed_mbps = static_cast<int>(std::min<long long>(speed, std::numeric_limits<int>::max()));
  if (const char* pp = members[heaviest].props.pci_path) out->pci_path = pp;
  out->gdr_summary = out->name + ":";
  for (const auto& m : members)
    out->gdr_summary +=
        std::string(" [") + (m.props.gdr_summary ? m.props.gdr_summary : m.name) + "]";
  // Rail: the shared one. Plane: one bit per member's plane (NCCL's transport does the same).
  bool same_rail = true, all_planes = true;
  int planes = 0;
  for (const auto& m : members) {
    same_rail = same_rail && m.rail != kNetIdUndef && m.rail == members.front().rail;
    all_planes = all_planes && m.plane != kNetIdUndef;
    if (m.plane != kNetIdUndef) planes |= 1 << m.plane;
  }
  out->rail = same_rail ? members.front().rail : kNetIdUndef;
  out->plane = all_planes ? planes : kNetIdUndef;
  if (same_rail) {
    out->rail_reason = "rail " + std::to_string(out->rail) + ": every member's (SLUICE_NIC_RAILS)";
  } else {
    bool any = false;
    for (const auto& m : members) any = any || m.rail != kNetIdUndef;
    out->rail_reason = any ? "rail undefined (-1): the members' rails differ or some are unnamed "
                             "in SLUICE_NIC_RAILS"
                           : "rail undefined (-1): no member has a rail (SLUICE_NIC_RAILS unset "
                             "for them; the hwloc topology has none)";
  }
  if (all_planes) out->rail_reason += "; planes bitmask " + std::to_string(planes);
  p.name = out->name.c_str();
  p.pci_path = out->pci_path.empty() ? nullptr : out->pci_path.c_str();
  p.gdr_summary = out->gdr_summary.c_str();
}

Status apply_weight_override(const NamedList& override_list,
                             const std::vector<FusionMember>& members,
                             std::vector<uint32_t>* weights, std::vector<std::string>* reasons) {
  reasons->resize(members.size());
  if (weights->size() != members.size()) {
    *weights = speed_weights(members);
    for (size_t i = 0; i < members.size(); ++i) (*reasons)[i] = "port speed (no topology weights)";
  }
  std::vector<const NamedEntry*> named(members.size(), nullptr);
  std::string missing;
  bool any = false;
  for (size_t i = 0; i < members.size(); ++i) {
    named[i] = override_list.find(members[i].adapter, members[i].port);
    if (named[i] == nullptr) named[i] = override_list.find(members[i].name, -1);
    any = any || named[i] != nullptr;
    if (named[i] == nullptr) missing += (missing.empty() ? "" : ", ") + members[i].name;
  }
  if (any) {
    if (!missing.empty()) {
      return refuse("SLUICE_FUSION_WEIGHTS=" + override_list.to_string() +
                    " names some members but not " + missing +
                    "; name every member of a fused device, or none");
    }
    for (size_t i = 0; i < members.size(); ++i) {
      (*weights)[i] = static_cast<uint32_t>(named[i]->value);
      (*reasons)[i] = "SLUICE_FUSION_WEIGHTS";
    }
  }
  bool carrier = false;
  for (uint32_t w : *weights) carrier = carrier || w > 0;
  if (!carrier) {
    if (any) {
      return refuse(
          "SLUICE_FUSION_WEIGHTS gives every member weight 0; at least one must carry "
          "data");
    }
    *weights = speed_weights(members);  // a provider that found no usable path: equal by speed
    for (auto& r : *reasons) r += "; every member was fallback-only, so all carry by port speed";
  }
  return Status::ok();
}

std::vector<uint32_t> speed_weights(const std::vector<FusionMember>& members) {
  std::vector<uint32_t> w;
  for (const auto& m : members)
    w.push_back(static_cast<uint32_t>(std::max(1, m.props.speed_mbps / 1000)));
  return w;
}

RailChoice rail_of(const NamedList& rails, const std::string& adapter, int port) {
  RailChoice c;
  const NamedEntry* e = rails.find(adapter, port);
  if (e == nullptr) {
    c.reason = rails.empty() ? "rail undefined (-1): SLUICE_NIC_RAILS unset, and the hwloc "
                               "topology has no rails"
                             : "rail undefined (-1): SLUICE_NIC_RAILS does not name " + adapter;
    return c;
  }
  c.rail = e->value;
  c.plane = e->plane;
  c.reason = "rail " + std::to_string(c.rail) +
             (c.plane != kNetIdUndef ? " plane " + std::to_string(c.plane) : "") +
             " from SLUICE_NIC_RAILS";
  return c;
}

std::string describe_weights(const std::vector<FusionMember>& members,
                             const std::vector<uint32_t>& weights,
                             const std::vector<std::string>& reasons) {
  uint64_t total = 0;
  for (uint32_t w : weights) total += w;
  std::string s;
  for (size_t i = 0; i < members.size(); ++i) {
    if (i) s += ", ";
    s += members[i].name + "=" + std::to_string(weights[i]);
    if (weights[i] == 0) {
      s += " (fallback only";
    } else {
      s += " (" + std::to_string(total ? (weights[i] * 100 + total / 2) / total : 0) + "%";
    }
    if (i < reasons.size() && !reasons[i].empty()) s += ": " + reasons[i];
    s += ")";
  }
  return s;
}

}  // namespace sluice
