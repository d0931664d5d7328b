// TCP keepalive on one connection per peer host, not per comm (issue 32).
//
// A comm's out-of-band socket says how its peer went (liveness.h). A process that exits or is
// killed resets or closes every one of its sockets, so each comm sees that on its own; only a host
// that stops answering (power off, kernel hang, the network between us cut) needs keepalive, and it
// silences every socket to that host at once: the oob sockets of all comms to one peer address take
// the same route. So one socket per peer address runs keepalive (the host's sentinel), and when it
// times out every comm to that host fails with the same reason. At 10,000 comms to a few hosts that
// is a few keepalive flows, not 10,000.
//
// The sentinel's own comm may be idle (NCCL calls only comms with work), so every comm of the host,
// at its own liveness poll, looks at the sentinel's socket at most once per poll period per host
// (check_due; liveness.cc reads its TCP state, and its pending error once it is closed).
//
// PeerHosts is the bookkeeping only (unit-tested without sockets): nodes are added under a peer
// address, the first of a host is its sentinel, a sentinel that goes hands over to the host's next
// node, and a sentinel that timed out takes its host's nodes out with it. O(1) per call except the
// time-out, which visits that host's nodes once. Callers hold their own lock (liveness.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

namespace sluice {

struct PeerHostEntry;  // PeerHosts' entry of one host

struct PeerHostNode {
  void* owner = nullptr;          // the comm (liveness.cc: a Conn)
  bool sentinel = false;          // runs keepalive for its host
  PeerHostEntry* host = nullptr;  // its host's entry while linked (stable: a map node)
  std::list<PeerHostNode*>::iterator it;
  bool linked() const { return host != nullptr; }
};

class PeerHosts {
 public:
  // Adds n under key; true when n became its host's sentinel (the host had none).
  bool add(PeerHostNode* n, const std::string& key);
  // Takes n out (no-op when not linked). When n was its host's sentinel and another node is left,
  // returns that node, now the sentinel (its keepalive is to be switched on); else nullptr.
  PeerHostNode* remove(PeerHostNode* n);
  // n's socket timed out: its host is down. Takes every node of the host out, n too, and returns
  // the others (each fails with n's reason). n must be linked.
  std::vector<PeerHostNode*> host_down(PeerHostNode* n);
  // The sentinel's socket is looked at by the host's other comms, since the sentinel's own comm
  // may be idle (never called, so never polled): returns n's host's sentinel when n is linked, is
  // not the sentinel, and no node of the host asked within `period` before `now` (then the next
  // check is due at now + period); else nullptr.
  PeerHostNode* check_due(PeerHostNode* n, int64_t now, int64_t period);
  size_t hosts() const { return hosts_.size(); }
  size_t nodes() const { return nodes_; }

 private:
  // Its nodes find it through their `host` pointer (a map node's address does not change on
  // rehash), so only add and a host's last removal look the key up.
  std::unordered_map<std::string, PeerHostEntry> hosts_;
  size_t nodes_ = 0;
};

struct PeerHostEntry {
  std::list<PeerHostNode*> nodes;    // the sentinel first
  int64_t next_check = 0;            // PeerHosts::check_due
  const std::string* key = nullptr;  // the map's own key (the peer's address, without port)
};

}  // namespace sluice
