#include "placement.h"

#include <memory>
#include <mutex>
#include <string>

#include "sluice/core/base/log.h"
#include "sluice/gpu/cuda_driver.h"
#include "sluice/topology/affinity.h"
#include "sluice/topology/fusion.h"
#include "sluice/topology/standby.h"
#include "sluice/topology/topology.h"

namespace sluice::plugin {
namespace {

// One topology per engine start, shared by both providers (they run during the same discovery).
struct SharedTopology {
  std::once_flag once;
  std::unique_ptr<topo::Topology> topo;
  const topo::Topology* get(const Config& cfg) {
    std::call_once(once, [&] {
      auto t = cfg.topo_file.empty() ? topo::Topology::load_live()
                                     : topo::Topology::load_xml_file(cfg.topo_file);
      if (t.is_ok()) {
        topo = std::make_unique<topo::Topology>(std::move(t).value());
      } else {
        SLUICE_INFO(kSubInit, "topology unavailable, device locality unknown: %s",
                    t.status().message().c_str());
      }
    });
    return topo.get();
  }
};

std::shared_ptr<SharedTopology> shared_topology() {
  // A fresh holder per engine start (providers are built for each engine_acquire that may
  // create the engine), so a changed machine or SLUICE_TOPO_FILE is seen after a full release.
  static std::mutex mu;
  static std::weak_ptr<SharedTopology> current;
  std::lock_guard<std::mutex> lk(mu);
  auto s = current.lock();
  if (!s) {
    s = std::make_shared<SharedTopology>();
    current = s;
  }
  return s;
}

}  // namespace

LocalityProvider make_locality_provider() {
  auto shared = shared_topology();
  return [shared](const Config& cfg, const std::string& ibdev) -> DeviceLocality {
    const topo::Topology* t = shared->get(cfg);
    if (t == nullptr) return DeviceLocality{};
    return t->locality_of_ibdev(ibdev);
  };
}

DeviceOrderProvider make_order_provider() {
  auto shared = shared_topology();
  return [shared](const Config& cfg, const std::vector<std::string>& names) -> Result<DeviceOrder> {
    auto mode = topo::parse_affinity_mode(cfg.nic_affinity);
    if (!mode.is_ok()) return mode.status().with_context("SLUICE_NIC_AFFINITY");
    if (mode.value() == topo::AffinityMode::kOff && cfg.gpu_nic_map.empty())
      return DeviceOrder{names, "discovery order (SLUICE_NIC_AFFINITY off)"};
    const topo::Topology* t = shared->get(cfg);
    if (t == nullptr) {
      return Status(Code::kInvalidUsage,
                    "SLUICE_NIC_AFFINITY / SLUICE_GPU_NIC_MAP need the machine topology, which "
                    "could not be loaded (see the INFO above)");
    }
    topo::GpuNicMap map;
    if (!cfg.gpu_nic_map.empty()) {
      auto m = topo::parse_gpu_nic_map(cfg.gpu_nic_map, *t, names);
      if (!m.is_ok()) return m.status().with_context("SLUICE_GPU_NIC_MAP");
      map = std::move(m).value();
      SLUICE_INFO(kSubInit, "GPU -> NIC override: %s", map.to_string().c_str());
    }
    topo::AffinityRequest req;
    req.gpu_bus_id = gpu::CudaDriver::instance(cfg.cuda_library.c_str()).current_device_bus_id();
    if (req.gpu_bus_id.empty()) req.cpu_binding = t->current_cpu_binding();
    auto o = topo::order_nics(*t, names, req, map.empty() ? nullptr : &map);
    return DeviceOrder{o.nics, o.reason};
  };
}

FusionWeightProvider make_weight_provider() {
  auto shared = shared_topology();
  return [shared](const Config& cfg,
                  const std::vector<FusionMemberInfo>& members) -> Result<FusionWeights> {
    const topo::Topology* t = shared->get(cfg);
    if (t == nullptr)
      return Status(Code::kInvalidUsage, "the machine topology could not be loaded");
    const std::string bus =
        gpu::CudaDriver::instance(cfg.cuda_library.c_str()).current_device_bus_id();
    const int gpu = bus.empty() ? -1 : t->find_gpu(bus);
    std::vector<topo::FusionPath> paths;
    for (const auto& m : members) paths.push_back({m.ibdev, m.speed_mbps});
    FusionWeights out;
    for (const auto& w : topo::weigh_members(*t, gpu, paths)) {
      out.weights.push_back(w.weight);
      out.reasons.push_back(gpu >= 0 ? "GPU " + bus + ": " + w.reason : w.reason);
    }
    return out;
  };
}

NearnessProvider make_nearness_provider() {
  auto shared = shared_topology();
  return [shared](const Config& cfg, const std::string& a, const std::string& b) {
    const topo::Topology* t = shared->get(cfg);
    return t == nullptr ? standby::Nearness::kUnknown : topo::nic_nearness(*t, a, b);
  };
}

}  // namespace sluice::plugin
