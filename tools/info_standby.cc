#include "info_standby.h"

#include "sluice/core/base/hca_filter.h"
#include "sluice/core/base/standby.h"
#include "sluice/topology/standby.h"

namespace sluice::info {

StandbyReport standby_report(const topo::Topology& t, const Config& cfg,
                             const std::vector<StandbyPort>& ports) {
  StandbyReport r;
  r.on = cfg.standby && cfg.failover;
  r.state = !cfg.standby   ? "off (SLUICE_STANDBY=0)"
            : cfg.failover ? "on (SLUICE_STANDBY=1)"
                           : "off (SLUICE_STANDBY=1, but it needs SLUICE_FAILOVER=1)";
  // The engine's devices: the ports NCCL_IB_HCA accepts, in discovery order.
  auto filter = HcaFilter::parse(cfg.ib_hca);
  std::vector<standby::Candidate> cands;
  for (const auto& p : ports) {
    if (filter.is_ok() && !filter.value().accepts(p.device, p.port)) continue;
    cands.push_back({p.multi_port ? p.device + ":" + std::to_string(p.port) : p.device, p.device,
                     p.link, p.active, p.ptr_support});
  }
  const standby::NearnessFn near = [&](int a, int b) {
    return topo::nic_nearness(t, cands[a].adapter, cands[b].adapter);
  };
  auto map = standby::parse_map(cfg.standby_map);
  const auto choices =
      standby::choose(cands, near, map.is_ok() ? map.value() : std::vector<standby::MapEntry>{});
  for (size_t i = 0; i < cands.size(); ++i) {
    const standby::Choice& c = choices[i];
    r.rows.push_back({cands[i].name, c.standby >= 0 ? cands[c.standby].name : std::string(),
                      c.standby >= 0 ? standby::nearness_text(c.nearness) : "", c.reason});
  }
  return r;
}

}  // namespace sluice::info
