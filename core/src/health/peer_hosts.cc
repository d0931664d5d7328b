#include "health/peer_hosts.h"

namespace sluice {

bool PeerHosts::add(PeerHostNode* n, const std::string& key) {
  if (n->linked()) remove(n);
  auto [at, fresh] = hosts_.try_emplace(key);
  PeerHostEntry& h = at->second;
  if (fresh) h.key = &at->first;
  n->host = &h;
  n->sentinel = h.nodes.empty();
  n->it = h.nodes.insert(h.nodes.end(), n);
  ++nodes_;
  return n->sentinel;
}

PeerHostNode* PeerHosts::remove(PeerHostNode* n) {
  if (!n->linked()) return nullptr;
  PeerHostEntry& h = *n->host;
  const bool was_sentinel = n->sentinel;
  h.nodes.erase(n->it);
  n->host = nullptr;
  n->sentinel = false;
  --nodes_;
  if (h.nodes.empty()) {
    hosts_.erase(hosts_.find(*h.key));
    return nullptr;
  }
  if (!was_sentinel) return nullptr;
  PeerHostNode* next = h.nodes.front();
  next->sentinel = true;
  return next;
}

std::vector<PeerHostNode*> PeerHosts::host_down(PeerHostNode* n) {
  std::vector<PeerHostNode*> others;
  if (!n->linked()) return others;
  PeerHostEntry& h = *n->host;
  for (PeerHostNode* x : h.nodes) {
    x->host = nullptr;
    x->sentinel = false;
    --nodes_;
    if (x != n) others.push_back(x);
  }
  hosts_.erase(hosts_.find(*h.key));
  return others;
}

PeerHostNode* PeerHosts::check_due(PeerHostNode* n, int64_t now, int64_t period) {
  if (!n->linked() || n->sentinel) return nullptr;
  PeerHostEntry& h = *n->host;
  if (now < h.next_check) return nullptr;
  h.next_check = now + period;
  return h.nodes.front();
}

}  // namespace sluice
