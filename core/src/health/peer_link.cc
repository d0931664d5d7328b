#include "health/peer_link.h"

#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "comm/fd_census.h"
#include "sluice/core/base/log.h"
#include "sluice/core/base/socket_drain.h"

namespace sluice {

namespace {

using ProcKey = std::array<uint8_t, wire::kNonceBytes>;
ProcKey key_of(const wire::Nonce& n) {
  ProcKey k;
  std::memcpy(k.data(), n.bytes, k.size());
  return k;
}

// One end's record on a link: what the peer's end has sent it.
struct Chan {
  uint32_t peer_chan = 0;
  bool goodbye = false;
  bool notice = false;
  bool bad = false;
  std::string text;
  std::deque<wire::PathMsg> path;
};

// Bytes one poll reads at most (the rest waits for the next poll).
constexpr int kReadRounds = 16;

}  // namespace

struct PeerLink {
  std::mutex mu;  // after the registry's
  // Set at creation, then read-only.
  int fd = -1;
  ProcKey peer{};
  uint64_t id = 0;
  uint8_t role = 0;
  std::string peer_text;
  // Under the registry's mutex.
  bool in_table = false;
  // Under mu.
  bool dead = false;
  SocketSeen seen = SocketSeen::kNothing;
  int err = 0;
  std::string text;
  std::vector<uint8_t> rx, tx;
  std::unordered_map<uint32_t, Chan> chans;
  ~PeerLink() {
    if (fd >= 0) {
      close(fd);
      fd_count_add(FdKind::kLink, -1);
    }
  }
};

namespace {

struct LinkRegistry {
  std::mutex mu;
  std::map<ProcKey, std::vector<std::shared_ptr<PeerLink>>> by_peer;
  std::map<ProcKey, int> claims;  // connects making the first link to a process (LinkClaim)
  size_t open = 0;
};

LinkRegistry& registry() {
  static auto* r = new LinkRegistry;  // NOLINT: deliberately never destroyed
  return *r;
}

void mark_dead(PeerLink& l, SocketSeen seen, int err, std::string text) {
  if (l.dead) return;
  l.dead = true;
  l.seen = seen;
  l.err = err;
  l.text = std::move(text);
}

void flush_locked(PeerLink& l) {
  while (!l.tx.empty() && l.fd >= 0) {
    const ssize_t n = ::send(l.fd, l.tx.data(), l.tx.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      l.tx.erase(l.tx.begin(), l.tx.begin() + n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    mark_dead(l, SocketSeen::kError, n < 0 ? errno : EPIPE, {});
    l.tx.clear();
    return;
  }
}

void dispatch_locked(PeerLink& l, wire::LinkFrame& f) {
  auto it = l.chans.find(f.chan);
  if (it == l.chans.end()) return;  // an end closed here: what its peer still sent goes nowhere
  Chan& ch = it->second;
  if (f.bad) {
    if (!ch.bad) {
      ch.bad = true;
      ch.text = f.text;
    }
    return;
  }
  switch (f.type) {
    case wire::LinkFrameType::kGoodbye:
      ch.goodbye = true;
      break;
    case wire::LinkFrameType::kNotice:
      if (!ch.notice) {
        ch.notice = true;
        ch.text = f.text;
      }
      break;
    case wire::LinkFrameType::kPath:
      ch.path.push_back(f.path);
      break;
  }
}

void parse_locked(PeerLink& l) {
  size_t at = 0;
  while (at < l.rx.size()) {
    wire::LinkFrame f;
    std::string why;
    size_t used = 0;
    const wire::LinkParse r =
        wire::decode_link_frame(l.rx.data() + at, l.rx.size() - at, &f, &why, &used);
    if (r == wire::LinkParse::kIncomplete) break;
    if (r == wire::LinkParse::kBad) {
      mark_dead(l, SocketSeen::kGarbage, 0, why);
      l.rx.clear();
      return;
    }
    dispatch_locked(l, f);
    at += used;
  }
  l.rx.erase(l.rx.begin(), l.rx.begin() + static_cast<std::ptrdiff_t>(at));
}

// Writes what is queued, then reads what the socket has now and sorts it. Never blocks.
void pump_locked(PeerLink& l) {
  flush_locked(l);
  if (l.dead || l.fd < 0) return;
  for (int round = 0; round < kReadRounds; ++round) {
    uint8_t buf[4096];
    const ssize_t r = ::recv(l.fd, buf, sizeof buf, MSG_DONTWAIT);
    if (r > 0) {
      l.rx.insert(l.rx.end(), buf, buf + r);
      parse_locked(l);
      if (l.dead) return;
      continue;
    }
    if (r == 0) {
      if (l.rx.empty()) {
        mark_dead(l, SocketSeen::kEof, 0, {});
      } else {
        mark_dead(l, SocketSeen::kGarbage, 0, "the link closed inside a frame");
      }
      return;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return;
    mark_dead(l, SocketSeen::kError, errno, {});
    return;
  }
}

// The last end went: out of the table (caller holds the registry's mutex), the queued frames
// written as far as the socket takes them, what the peer sent read (closing a socket with unread
// bytes resets it, which the peer would read as a crash), and the socket closed.
void close_locked(LinkRegistry& g, const std::shared_ptr<PeerLink>& l) {
  if (l->in_table) {
    auto it = g.by_peer.find(l->peer);
    if (it != g.by_peer.end()) {
      auto& v = it->second;
      for (auto k = v.begin(); k != v.end(); ++k) {
        if (k->get() == l.get()) {
          v.erase(k);
          break;
        }
      }
      if (v.empty()) g.by_peer.erase(it);
    }
    l->in_table = false;
    --g.open;
  }
  flush_locked(*l);
  if (l->fd >= 0) {
    (void)drain_unread(l->fd);
    close(l->fd);
    l->fd = -1;
    fd_count_add(FdKind::kLink, -1);
  }
  mark_dead(*l, SocketSeen::kEof, 0, {});
}

// Unregisters `chan` (after queueing its goodbye), and closes the link when it was the last.
void detach(const std::shared_ptr<PeerLink>& l, uint32_t chan, bool goodbye, uint32_t peer_chan) {
  LinkRegistry& g = registry();
  std::lock_guard<std::mutex> gl(g.mu);
  std::lock_guard<std::mutex> lk(l->mu);
  if (goodbye && !l->dead && peer_chan != 0) {
    uint8_t f[wire::kLinkFrameHeaderBytes];
    const size_t n =
        wire::encode_link_frame(wire::LinkFrameType::kGoodbye, peer_chan, nullptr, 0, f);
    l->tx.insert(l->tx.end(), f, f + n);
    flush_locked(*l);
  }
  l->chans.erase(chan);
  if (l->chans.empty()) close_locked(g, l);
}

struct ProcId {
  wire::Nonce id{};
  bool ok = false;
  ProcId() {
    Status st = wire::new_nonce(&id);
    ok = st.is_ok();
    if (!ok) {
      SLUICE_WARN(
          "peer links are off in this process: no process id (%s); every comm keeps its "
          "own out-of-band socket",
          st.message().c_str());
    }
  }
};

const ProcId& proc() {
  static const ProcId p;
  return p;
}

}  // namespace

const wire::Nonce& link_proc_id() {
  return proc().id;
}

bool link_proc_id_ok() {
  return proc().ok;
}

uint32_t link_new_chan() {
  static std::atomic<uint32_t> next{1};
  uint32_t c = next.fetch_add(1, std::memory_order_relaxed);
  if (c == 0) c = next.fetch_add(1, std::memory_order_relaxed);  // 2^32 channels later
  return c;
}

uint64_t link_new_id() {
  wire::Nonce n;
  uint64_t id = 0;
  if (wire::new_nonce(&n).is_ok()) id = wire::nonce_fold(n);
  if (id == 0) {  // no random source (the process id failed too): unique within the process
    static std::atomic<uint64_t> next{1};
    id = next.fetch_add(1, std::memory_order_relaxed);
  }
  return id;
}

LinkHold& LinkHold::operator=(LinkHold&& o) noexcept {
  if (this != &o) {
    release();
    link_ = std::move(o.link_);
    chan_ = o.chan_;
    o.chan_ = 0;
  }
  return *this;
}

uint64_t LinkHold::id() const {
  return link_ ? link_->id : 0;
}

uint8_t LinkHold::role() const {
  return link_ ? link_->role : 0;
}

void LinkHold::release() {
  if (!link_) return;
  detach(link_, chan_, false, 0);
  link_.reset();
  chan_ = 0;
}

void LinkClaim::release() {
  if (!held_) return;
  LinkRegistry& g = registry();
  std::lock_guard<std::mutex> gl(g.mu);
  auto it = g.claims.find(key_of(peer_));
  if (it != g.claims.end() && --it->second <= 0) g.claims.erase(it);
  held_ = false;
}

bool link_first(const wire::Nonce& peer, LinkClaim* claim) {
  if (claim->held()) return true;
  LinkRegistry& g = registry();
  std::lock_guard<std::mutex> gl(g.mu);
  const ProcKey k = key_of(peer);
  auto it = g.by_peer.find(k);
  if (it != g.by_peer.end()) {
    for (const auto& l : it->second) {
      std::lock_guard<std::mutex> lk(l->mu);
      if (!l->dead) return true;
    }
  }
  if (g.claims.count(k) != 0) return false;
  g.claims[k] = 1;
  claim->peer_ = peer;
  claim->held_ = true;
  return true;
}

namespace {

LinkHold hold_where(const wire::Nonce& peer, uint32_t chan, uint64_t id, int role) {
  LinkRegistry& g = registry();
  std::lock_guard<std::mutex> gl(g.mu);
  auto it = g.by_peer.find(key_of(peer));
  if (it == g.by_peer.end()) return {};
  auto& v = it->second;
  for (auto k = v.rbegin(); k != v.rend(); ++k) {  // the newest first
    const std::shared_ptr<PeerLink>& l = *k;
    if (id != 0 && (l->id != id || l->role != role)) continue;
    std::lock_guard<std::mutex> lk(l->mu);
    if (l->dead) continue;
    l->chans[chan] = Chan{};
    return LinkHold(l, chan);
  }
  return {};
}

}  // namespace

LinkHold link_hold_newest(const wire::Nonce& peer, uint32_t chan) {
  return hold_where(peer, chan, 0, -1);
}

LinkHold link_hold_id(const wire::Nonce& peer, uint64_t id, uint8_t peer_role, uint32_t chan) {
  if (id == 0) return {};
  const int mine =
      peer_role == wire::kLinkEndConnector ? wire::kLinkEndAcceptor : wire::kLinkEndConnector;
  return hold_where(peer, chan, id, mine);
}

LinkEnd link_join(LinkHold&& h, uint32_t peer_chan) {
  LinkEnd e;
  if (!h.link_) return e;
  {
    std::lock_guard<std::mutex> lk(h.link_->mu);
    h.link_->chans[h.chan_].peer_chan = peer_chan;
  }
  e.link = std::move(h.link_);
  e.chan = h.chan_;
  e.peer_chan = peer_chan;
  h.chan_ = 0;
  return e;
}

bool link_send_notice(LinkEnd& e, const std::string& reason, std::string* why) {
  uint8_t msg[wire::kNoticeMaxBytes];
  const size_t n = wire::encode_notice(reason, msg);
  return link_send(e, wire::LinkFrameType::kNotice, msg, n, why);
}

void link_hold_fail(LinkHold&& h, uint32_t peer_chan, const std::string& reason) {
  if (!h.held()) return;
  LinkEnd e = link_join(std::move(h), peer_chan);
  std::string ignored;
  (void)link_send_notice(e, reason, &ignored);
  link_leave(e, false);
}

LinkEnd link_adopt(int fd, const wire::Nonce& peer, uint64_t id, uint8_t role, uint32_t chan,
                   uint32_t peer_chan, const std::string& peer_text) {
  auto l = std::make_shared<PeerLink>();
  l->fd = fd;
  fd_count_add(FdKind::kLink, 1);
  l->peer = key_of(peer);
  l->id = id;
  l->role = role;
  l->peer_text = peer_text;
  l->chans[chan].peer_chan = peer_chan;
  set_socket_keepalive(fd, peer_text);
  {
    LinkRegistry& g = registry();
    std::lock_guard<std::mutex> gl(g.mu);
    g.by_peer[l->peer].push_back(l);
    l->in_table = true;
    ++g.open;
  }
  SLUICE_INFO(kSubNet,
              "peer link to %s (process %016llx, link %016llx) opened: its comms' "
              "liveness, notices and path messages share this socket",
              peer_text.c_str(), static_cast<unsigned long long>(wire::nonce_fold(peer)),
              static_cast<unsigned long long>(id));
  LinkEnd e;
  e.link = std::move(l);
  e.chan = chan;
  e.peer_chan = peer_chan;
  return e;
}

bool link_poll(LinkEnd& e, PathMsgSink sink, void* ctx, int room, LinkSeen* out) {
  *out = LinkSeen{};
  PeerLink& l = *e.link;
  std::unique_lock<std::mutex> lk(l.mu, std::try_to_lock);
  if (!lk.owns_lock()) return false;
  pump_locked(l);
  auto it = l.chans.find(e.chan);
  if (it == l.chans.end()) {  // cannot happen while the end is open; say so rather than hide it
    out->seen = SocketSeen::kGarbage;
    return true;
  }
  Chan& ch = it->second;
  if (!ch.path.empty() && sink == nullptr && !ch.bad) {
    ch.bad = true;
    ch.text = "a path message for a comm without failover";
  }
  while (sink != nullptr && room > 0 && !ch.path.empty()) {
    sink(ctx, ch.path.front());
    ch.path.pop_front();
    --room;
  }
  if (ch.notice) {
    out->seen = SocketSeen::kNotice;
    out->text = ch.text;
  } else if (ch.bad) {
    out->seen = SocketSeen::kBadNotice;
    out->text = ch.text;
  } else if (ch.goodbye) {
    out->seen = SocketSeen::kEof;
    out->goodbye = true;
  } else if (l.dead && ch.path.empty()) {
    out->seen = l.seen;
    out->err = l.err;
    out->text = l.text;
  }
  return true;
}

bool link_send(LinkEnd& e, wire::LinkFrameType t, const uint8_t* payload, size_t n,
               std::string* why) {
  uint8_t f[wire::kLinkFrameMaxBytes];
  const size_t len = wire::encode_link_frame(t, e.peer_chan, payload, n, f);
  if (len == 0) {
    *why = "the frame did not encode (" + std::to_string(n) + " payload bytes)";
    return false;
  }
  PeerLink& l = *e.link;
  std::lock_guard<std::mutex> lk(l.mu);
  if (l.dead) {
    *why = "the link to the peer's process is gone";
    return false;
  }
  if (l.tx.size() + len > kLinkTxMaxBytes) {
    *why = "the link to the peer's process has " + std::to_string(l.tx.size()) +
           " bytes queued that its peer has not read";
    return false;
  }
  l.tx.insert(l.tx.end(), f, f + len);
  flush_locked(l);
  return true;
}

void link_leave(LinkEnd& e, bool goodbye) {
  if (!e.link) return;
  detach(e.link, e.chan, goodbye, e.peer_chan);
  e.link.reset();
  e.chan = e.peer_chan = 0;
}

size_t link_count() {
  LinkRegistry& g = registry();
  std::lock_guard<std::mutex> gl(g.mu);
  return g.open;
}

}  // namespace sluice
