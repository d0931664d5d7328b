// GPU-to-NIC path classes (PIX..SYS, as NCCL names them), NIC rankings and the per-GPU assignment.
#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <tuple>
#include <utility>

#include "topology_internal.h"

namespace sluice::topo {

using namespace detail;

namespace {

// The class of the path between two PCI objects `g` (a GPU, or a first NIC) and `n`.
PairInfo classify_objects(hwloc_obj_t g, hwloc_obj_t n) {
  PairInfo info;
  // Lowest common ancestor by walking parents (never hwloc_get_common_ancestor_obj, see header).
  std::vector<hwloc_obj_t> gchain;
  for (hwloc_obj_t p = g; p != nullptr; p = p->parent) gchain.push_back(p);
  hwloc_obj_t lca = nullptr;
  int nic_steps = 0;
  for (hwloc_obj_t p = n; p != nullptr; p = p->parent, ++nic_steps) {
    if (std::find(gchain.begin(), gchain.end(), p) != gchain.end()) {
      lca = p;
      break;
    }
  }
  if (lca == nullptr) return info;
  auto bridges_between = [](hwloc_obj_t dev, hwloc_obj_t anc) {
    int k = 0;
    for (hwloc_obj_t p = dev->parent; p != nullptr && p != anc; p = p->parent)
      if (p->type == HWLOC_OBJ_BRIDGE) ++k;
    return k;
  };
  info.gpu_bridges = bridges_between(g, lca);
  info.nic_bridges = bridges_between(n, lca);
  info.lca_depth = obj_depth_from_root(lca);
  info.lca = describe(lca);
  hwloc_obj_t gp = package_of(g), np = package_of(n);
  info.same_package = gp != nullptr && gp == np;

  if (lca->type == HWLOC_OBJ_PCI_DEVICE) {
    info.cls = PathClass::kPIX;  // same function (or one device below the other)
  } else if (lca->type == HWLOC_OBJ_BRIDGE) {
    if (is_host_bridge(lca))
      info.cls = PathClass::kPHB;
    else
      info.cls =
          (info.gpu_bridges <= 1 && info.nic_bridges <= 1) ? PathClass::kPIX : PathClass::kPXB;
  } else {
    hwloc_obj_t gl = non_io_ancestor(g), nl = non_io_ancestor(n);
    bool same_numa = gl && nl && gl->nodeset && nl->nodeset && !hwloc_bitmap_iszero(gl->nodeset) &&
                     hwloc_bitmap_isequal(gl->nodeset, nl->nodeset);
    info.cls = same_numa ? PathClass::kNODE : PathClass::kSYS;
  }
  return info;
}

}  // namespace

PairInfo Topology::classify(int gpu, int nic) const {
  if (gpu < 0 || gpu >= static_cast<int>(impl_->gpus.size()) || nic < 0 ||
      nic >= static_cast<int>(impl_->nics.size()))
    return PairInfo{};
  hwloc_obj_t n = impl_->nic_pci[nic];
  if (n == nullptr) return PairInfo{};  // virtual NIC: unknown locality
  return classify_objects(impl_->gpu_obj[gpu], n);
}

PairInfo Topology::classify_nics(int a, int b) const {
  const int n = static_cast<int>(impl_->nics.size());
  if (a < 0 || a >= n || b < 0 || b >= n) return PairInfo{};
  if (impl_->nic_pci[a] == nullptr || impl_->nic_pci[b] == nullptr) return PairInfo{};
  return classify_objects(impl_->nic_pci[a], impl_->nic_pci[b]);
}

std::vector<RankedNic> Topology::ranked_nics(int gpu, const RankOptions& opt) const {
  std::vector<RankedNic> out;
  if (gpu < 0 || gpu >= static_cast<int>(impl_->gpus.size())) return out;
  for (const auto& n : impl_->nics) {
    if (opt.active_only && !n.maybe_active()) continue;
    out.push_back({n.index, classify(gpu, n.index)});
  }
  const auto& nics = impl_->nics;
  std::stable_sort(out.begin(), out.end(), [&](const RankedNic& a, const RankedNic& b) {
    if (a.info.cls != b.info.cls) return a.info.cls < b.info.cls;
    if (a.info.lca_depth != b.info.lca_depth) return a.info.lca_depth > b.info.lca_depth;
    const Nic& na = nics[a.nic];
    const Nic& nb = nics[b.nic];
    if (na.link_speed_gbps != nb.link_speed_gbps) return na.link_speed_gbps > nb.link_speed_gbps;
    return a.nic < b.nic;  // nics() is in bus-id order
  });
  return out;
}

std::vector<RankedNic> Topology::nearest_nics(int gpu, const RankOptions& opt) const {
  auto all = ranked_nics(gpu, opt);
  if (all.empty() || all.front().info.cls == PathClass::kUnknown) return {};
  PathClass best = all.front().info.cls;
  std::vector<RankedNic> out;
  for (auto& r : all)
    if (r.info.cls == best) out.push_back(r);
  return out;
}

std::vector<GpuAssignment> Topology::assign(const RankOptions& opt) const {
  const int ng = static_cast<int>(impl_->gpus.size());
  std::vector<std::vector<RankedNic>> cand(ng);
  std::vector<std::vector<int>> cand_adapters(ng);
  for (int g = 0; g < ng; ++g) {
    cand[g] = nearest_nics(g, opt);
    for (const auto& r : cand[g]) {
      int a = impl_->nics[r.nic].adapter;
      if (std::find(cand_adapters[g].begin(), cand_adapters[g].end(), a) == cand_adapters[g].end())
        cand_adapters[g].push_back(a);
    }
  }
  std::vector<int> load(impl_->adapters, 0);
  std::vector<std::vector<int>> got(ng);  // adapters per GPU, in assignment order
  // Round 1: most constrained GPUs first, each takes its least-loaded nearest adapter.
  std::vector<int> order(ng);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return cand_adapters[a].size() < cand_adapters[b].size(); });
  for (int g : order) {
    int best = -1;
    for (int a : cand_adapters[g])
      if (best < 0 || load[a] < load[best]) best = a;
    if (best < 0) continue;
    ++load[best];
    got[g].push_back(best);
  }
  // Round 2: nearest adapters nobody took go to the GPU (among those having them nearest) that
  // holds the fewest adapters so far; ties by GPU index.
  for (int a = 0; a < impl_->adapters; ++a) {
    if (load[a] != 0) continue;
    int best = -1;
    for (int g = 0; g < ng; ++g) {
      if (std::find(cand_adapters[g].begin(), cand_adapters[g].end(), a) == cand_adapters[g].end())
        continue;
      if (best < 0 || got[g].size() < got[best].size()) best = g;
    }
    if (best < 0) continue;
    ++load[a];
    got[best].push_back(a);
  }
  std::vector<GpuAssignment> out;
  for (int g = 0; g < ng; ++g) {
    GpuAssignment ga;
    ga.gpu = g;
    if (!cand[g].empty()) ga.cls = cand[g].front().info.cls;
    for (int a : got[g])
      for (const auto& r : cand[g])
        if (impl_->nics[r.nic].adapter == a) ga.nics.push_back(r.nic);
    out.push_back(std::move(ga));
  }
  return out;
}

}  // namespace sluice::topo
