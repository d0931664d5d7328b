#include "info_fusion.h"

#include <algorithm>
#include <map>

#include "sluice/core/base/fusion_spec.h"
#include "sluice/topology/fusion.h"

namespace sluice::info {
namespace {

// The GPU the weights of a group are shown for: this process's, else the first GPU whose nearest
// NICs hold the group's first member, else none.
int gpu_for(const topo::Topology& t, const std::string& first_nic, const std::string& own_bus) {
  if (!own_bus.empty()) {
    if (int g = t.find_gpu(own_bus); g >= 0) return g;
  }
  const int nic = t.find_nic(first_nic);
  if (nic < 0) return -1;
  for (const auto& g : t.gpus())
    for (const auto& r : t.nearest_nics(g.index))
      if (r.nic == nic) return g.index;
  return -1;
}

}  // namespace

FusionReport fusion_report(const topo::Topology& t, const Config& cfg,
                           const std::vector<PortFact>& ports, const std::string& gpu_bus_id) {
  FusionReport r;
  auto weights = NamedList::parse(cfg.fusion_weights, NamedList::Kind::kWeights);
  auto rails = NamedList::parse(cfg.nic_rails, NamedList::Kind::kRails);
  r.policy = std::string("NCCL_IB_MERGE_NICS=") + (cfg.merge_nics ? "1" : "0") +
             (cfg.fusion_weights.empty()
                  ? ", weights from the topology"
                  : ", SLUICE_FUSION_WEIGHTS=" +
                        (weights.is_ok() ? weights.value().to_string() : cfg.fusion_weights));

  auto speed_of = [&](const std::string& dev, int port) {
    for (const auto& p : ports)
      if (p.device == dev && (port < 0 || p.port == port) && p.active) return p.speed_mbps;
    return 0;
  };
  // Members as (verbs device, port; -1 = the device's first active port).
  auto add_group = [&](std::vector<std::pair<std::string, int>> members, std::string why,
                       bool nccl_default) {
    GroupRow g;
    g.why = std::move(why);
    g.nccl_default = nccl_default;
    std::vector<topo::FusionPath> paths;
    for (const auto& [dev, port] : members) {
      g.members.push_back(port > 0 ? dev + ":" + std::to_string(port) : dev);
      paths.push_back({dev, speed_of(dev, port)});
    }
    const int gpu = gpu_for(t, members.front().first, gpu_bus_id);
    if (gpu >= 0) g.gpu = "GPU" + std::to_string(gpu) + " " + t.gpus()[gpu].bus_id;
    const auto w = topo::weigh_members(t, gpu, paths);
    size_t named = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      MemberRow m{g.members[i], w[i].weight, w[i].reason};
      if (weights.is_ok()) {
        const int port = members[i].second;
        if (const NamedEntry* e = weights.value().find(members[i].first, port)) {
          m.weight = static_cast<uint32_t>(e->value);
          m.reason = "SLUICE_FUSION_WEIGHTS (topology: " + m.reason + ")";
          ++named;
        }
      }
      g.weights.push_back(std::move(m));
    }
    if (!cfg.merge_nics) {
      g.refusal = "NCCL_IB_MERGE_NICS=0: makeVDevice refuses every fusion";
    } else if (named > 0 && named < g.weights.size()) {
      g.refusal = "SLUICE_FUSION_WEIGHTS names some members but not all: makeVDevice refuses";
    } else if (g.members.size() > 8) {
      g.refusal = "more than 8 members: NCCL (v12) fuses at most 8, 4 before 2.30";
    }
    bool carrier = false;
    for (const auto& m : g.weights) carrier = carrier || m.weight > 0;
    if (!carrier && g.refusal.empty()) {
      if (named > 0) {
        g.refusal = "SLUICE_FUSION_WEIGHTS gives every member weight 0: makeVDevice refuses";
      } else {
        for (auto& m : g.weights) m.reason += "; no member carries, so all carry by port speed";
      }
    }
    r.groups.push_back(std::move(g));
  };

  // Ports of one verbs device (what NCCL fuses by default).
  std::map<std::string, std::vector<int>> active_ports;
  for (const auto& p : ports)
    if (p.active) active_ports[p.device].push_back(p.port);
  for (const auto& [dev, list] : active_ports) {
    if (list.size() < 2) continue;
    std::vector<std::pair<std::string, int>> m;
    for (int p : list) m.emplace_back(dev, p);
    add_group(m, "ports of one NIC (NCCL fuses these at its default NCCL_NET_MERGE_LEVEL=PORT)",
              true);
  }
  // Functions of one adapter and NICs below one switch, from the topology.
  for (const auto& c : topo::fusion_candidates(t)) {
    std::vector<std::pair<std::string, int>> m;
    for (int n : c.nics) m.emplace_back(t.nics()[n].name, -1);
    add_group(m, c.why, c.why.find("one adapter") != std::string::npos);
  }

  for (const auto& p : ports) {
    RailRow row;
    row.device = p.device;
    row.port = p.port;
    const NamedEntry* e = rails.is_ok() ? rails.value().find(p.device, p.port) : nullptr;
    if (e != nullptr) {
      row.rail = e->value;
      row.plane = e->plane;
      row.reason = "from SLUICE_NIC_RAILS";
    } else if (!rails.is_ok()) {
      row.reason =
          "undefined (-1): SLUICE_NIC_RAILS is malformed (" + rails.status().message() + ")";
    } else {
      row.reason = std::string("undefined (-1), NCCL's NCCL_NET_ID_UNDEF: ") +
                   (cfg.nic_rails.empty() ? "SLUICE_NIC_RAILS is unset"
                                          : "SLUICE_NIC_RAILS does not name this port") +
                   ", and the topology (hwloc) has no rails; NCCL_NET_MERGE_POLICY=RAIL then "
                   "fuses nothing";
    }
    r.rails.push_back(std::move(row));
  }
  return r;
}

}  // namespace sluice::info
