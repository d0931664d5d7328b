#include "health/peer_hosts.h"

namespace sluice {

bool PeerHosts::add(PeerHostNode* n, const std::string& key) {
  if (n->linked) remove(n);
  Host& h = hosts_[key];
  n->key = key;
  n->sentinel = h.nodes.empty();
  n->it = h.nodes.insert(h.nodes.end(), n);
  n->linked = true;
  ++nodes_;
  return n->sentinel;
}

PeerHostNode* PeerHosts::remove(PeerHostNode* n) {
  if (!n->linked) return nullptr;
  auto at = hosts_.find(n->key);
  Host& h = at->second;
  const bool was_sentinel = n->sentinel;
  h.nodes.erase(n->it);
  n->linked = false;
  n->sentinel = false;
  --nodes_;
  if (h.nodes.empty()) {
    hosts_.erase(at);
    return nullptr;
  }
  if (!was_sentinel) return nullptr;
  PeerHostNode* next = h.nodes.front();
  next->sentinel = true;
  return next;
}

std::vector<PeerHostNode*> PeerHosts::host_down(PeerHostNode* n) {
  std::vector<PeerHostNode*> others;
  if (!n->linked) return others;
  auto at = hosts_.find(n->key);
  for (PeerHostNode* x : at->second.nodes) {
    x->linked = false;
    x->sentinel = false;
    --nodes_;
    if (x != n) others.push_back(x);
  }
  hosts_.erase(at);
  return others;
}

PeerHostNode* PeerHosts::check_due(PeerHostNode* n, int64_t now, int64_t period) {
  if (!n->linked || n->sentinel) return nullptr;
  Host& h = hosts_.find(n->key)->second;
  if (now < h.next_check) return nullptr;
  h.next_check = now + period;
  return h.nodes.front();
}

}  // namespace sluice
