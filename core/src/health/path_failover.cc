// The per-comm failover state's pure parts (health/path_failover.h): routing, the live stripe.
#include "health/path_failover.h"

#include <algorithm>

namespace sluice {

int fo_route(const PathFailover& f, int qpp, int q) {
  if (!f.on || qpp <= 0) return q;
  int p = q / qpp;
  // A substitute is always a path that carried when it was chosen; following at most kMaxPaths
  // links reaches one that carries now, or none (a cycle cannot carry).
  for (int hop = 0; hop <= stripe::kMaxPaths; ++hop) {
    if (f.path[p].carries()) return p * qpp + q % qpp;
    if (f.sub[p] < 0) return -1;
    p = f.sub[p];
  }
  return -1;
}

void fo_init(PathFailover& f, bool on, bool sender, int npaths, const failover::Timing& t) {
  f.on = on && npaths > 1;
  f.sender = sender;
  f.timing = t;
  for (int p = 0; p < stripe::kMaxPaths; ++p) {
    f.path[p] = failover::Path(sender ? failover::Role::kSender : failover::Role::kReceiver, t);
    f.sub[p] = -1;
  }
  if (f.on && sender) f.log = std::make_unique<ChainRec[]>(wire::kMaxQps * kChainLog);
  if (f.on) f.inbox = std::make_unique<wire::PathMsg[]>(kPathInbox);
  if (f.on) f.rec = std::make_unique<FoRecord>();
}

uint32_t fo_restripe(PathFailover& f, const stripe::Paths& weights) {
  f.live = weights;
  bool weighted = false;
  f.any_not_up = false;
  f.awaiting = false;
  for (int p = 0; p < weights.npaths; ++p) {
    // A path ramping back in carries its step's part of its weight (at least 1 when weighted).
    const uint64_t w = uint64_t{weights.weight[p]} * static_cast<uint64_t>(f.path[p].share_pct());
    f.live.weight[p] =
        weights.weight[p] == 0 ? 0 : std::max<uint32_t>(1, static_cast<uint32_t>(w / 100));
    if (!f.path[p].carries()) f.live.weight[p] = 0;
    weighted = weighted || f.live.weight[p] > 0;
    // Ticks go on until every path is up and its backoff count back to 0 (hysteresis).
    f.any_not_up =
        f.any_not_up || f.path[p].state() != failover::State::kUp || f.path[p].attempts() > 0;
    f.awaiting = f.awaiting || f.path[p].awaits_peer();
  }
  uint32_t mask = 0;
  for (int p = 0; p < weights.npaths; ++p) {
    if (!weighted && f.path[p].carries()) f.live.weight[p] = 1;  // fallback paths, equally
    if (f.live.weight[p] > 0) mask |= 1u << p;
  }
  return mask;
}

void fo_take_path_msg(void* fo, const wire::PathMsg& m) {
  auto& f = *static_cast<PathFailover*>(fo);
  if (!f.inbox || f.inbox_n >= kPathInbox) {
    f.inbox_lost = true;
    return;
  }
  f.inbox[f.inbox_n++] = m;
}

int fo_inbox_room(const void* fo) {
  const auto& f = *static_cast<const PathFailover*>(fo);
  return f.inbox ? kPathInbox - f.inbox_n : 0;
}

}  // namespace sluice
