#include "health/peer_link.h"

#include <sys/epoll.h>
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
  // A handshake on the link: the listener's reply (connector's side), the ready mark (listener's).
  bool hs_reply = false;
  std::vector<uint8_t> hs;
  bool hs_ready = false;
};

// Bytes one poll reads at most (the rest waits for the next poll).
constexpr int kReadRounds = 16;

}  // namespace

struct PeerLink : std::enable_shared_from_this<PeerLink> {
  std::mutex mu;  // after the registry's
  // Set at creation, then read-only.
  int fd = -1;
  ProcKey peer{};
  uint64_t id = 0;
  uint8_t role = 0;
  std::string peer_text;
  sockaddr_storage peer_addr{};  // the socket's peer (the listener's route check for a hello)
  uint64_t serial = 0;           // its key in the epoll set (LinkRegistry::by_serial)
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
  // The epoll set over the links' sockets (link_service_open), each keyed by its serial.
  int ep = -1;
  uint64_t next_serial = 1;
  std::unordered_map<uint64_t, std::weak_ptr<PeerLink>> by_serial;
};

// Hellos read from the links, not yet taken by a listen (link_take_hellos). A leaf lock: taken
// under a link's mutex when a hello is sorted. `count` lets a call with none skip the lock.
struct HelloBox {
  std::mutex mu;
  std::vector<LinkHello> q;
  std::atomic<size_t> count{0};
};

// fork(2): the child holds copies of the parent's links, whose sockets and epoll set are the
// parent's open files too (a frame the child wrote, or a socket it removed from the set, would be
// the parent's), and the parent's process id, so a peer would take the child for the parent. The
// child's handler (pthread_atfork, installed with the first registry or id) leaves the copies
// behind unreleased (their locks may be held by parent threads that do not exist in the child),
// gives the child empty registries and a fresh id, and turns peer links off in it: each comm the
// child makes keeps its own socket. Only the forking thread runs in the child when the handler
// does.
void install_fork_handler();

HelloBox*& hellos_ptr() {
  static HelloBox* b = (install_fork_handler(), new HelloBox);  // NOLINT: never destroyed
  return b;
}

LinkRegistry*& registry_ptr() {
  static LinkRegistry* r = (install_fork_handler(), new LinkRegistry);  // NOLINT: never destroyed
  return r;
}

HelloBox& hellos() {
  return *hellos_ptr();
}

LinkRegistry& registry() {
  return *registry_ptr();
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

// A connector's hello (f.chan is its channel): a channel of ours registered for the comm, held by
// the hello until a listen takes it.
void hello_locked(PeerLink& l, wire::LinkFrame& f) {
  if (f.bad) return;  // cannot happen: a hello's payload is not interpreted here
  const uint32_t chan = link_new_chan();
  l.chans[chan] = Chan{};
  LinkHello h;
  h.hold = LinkHold(l.shared_from_this(), chan);
  h.peer_chan = f.chan;
  h.bytes = std::move(f.bytes);
  h.peer_text = l.peer_text;
  h.peer_addr = l.peer_addr;
  HelloBox& b = hellos();
  std::lock_guard<std::mutex> bl(b.mu);
  b.q.push_back(std::move(h));
  b.count.store(b.q.size(), std::memory_order_release);
}

void dispatch_locked(PeerLink& l, wire::LinkFrame& f) {
  if (f.type == wire::LinkFrameType::kHello) {
    hello_locked(l, f);
    return;
  }
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
    case wire::LinkFrameType::kHsReply:
      ch.hs_reply = true;
      ch.hs = std::move(f.bytes);
      break;
    case wire::LinkFrameType::kHsReady:
      ch.hs_ready = true;
      break;
    case wire::LinkFrameType::kHello:  // sorted above
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

// Adds l's socket to the epoll set (caller holds the registry's mutex, g.ep is open).
void watch_locked(LinkRegistry& g, PeerLink& l) {
  if (l.fd < 0) return;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = l.serial;
  if (epoll_ctl(g.ep, EPOLL_CTL_ADD, l.fd, &ev) != 0 && errno != EEXIST) {
    SLUICE_WARN(
        "peer link to %s: epoll_ctl failed (%s): its handshakes are read only when a comm "
        "polls it",
        l.peer_text.c_str(), std::strerror(errno));
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
  if (l->serial != 0) {
    if (g.ep >= 0 && l->fd >= 0) (void)epoll_ctl(g.ep, EPOLL_CTL_DEL, l->fd, nullptr);
    g.by_serial.erase(l->serial);
    l->serial = 0;
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
    install_fork_handler();
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

ProcId& proc() {
  static ProcId p;  // the child of a fork draws another (on_fork_child)
  return p;
}

void on_fork_child() {
  registry_ptr() = new LinkRegistry;  // NOLINT: the parent's copy is left behind, never released
  hellos_ptr() = new HelloBox;        // NOLINT: likewise
  ProcId& p = proc();
  (void)wire::new_nonce(&p.id);  // a fresh id (getrandom: a system call, safe here)
  p.ok = false;                  // and no links (above)
}

void install_fork_handler() {
  static const bool installed = pthread_atfork(nullptr, nullptr, on_fork_child) == 0;
  (void)installed;
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

namespace {

// Whether this process has a live link to process k (caller holds g.mu; each link's mu is taken).
bool has_live_link_locked(LinkRegistry& g, const ProcKey& k) {
  auto it = g.by_peer.find(k);
  if (it == g.by_peer.end()) return false;
  for (const auto& l : it->second) {
    std::lock_guard<std::mutex> lk(l->mu);
    if (!l->dead) return true;
  }
  return false;
}

}  // namespace

bool link_first(const wire::Nonce& peer, LinkClaim* claim) {
  if (claim->held()) return true;
  LinkRegistry& g = registry();
  std::lock_guard<std::mutex> gl(g.mu);
  const ProcKey k = key_of(peer);
  if (has_live_link_locked(g, k)) return true;
  if (g.claims.count(k) != 0) return false;
  g.claims[k] = 1;
  claim->peer_ = peer;
  claim->held_ = true;
  return true;
}

bool link_making(const wire::Nonce& peer) {
  LinkRegistry& g = registry();
  std::lock_guard<std::mutex> gl(g.mu);
  const ProcKey k = key_of(peer);
  return g.claims.count(k) != 0 && !has_live_link_locked(g, k);
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
  socklen_t alen = sizeof l->peer_addr;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&l->peer_addr), &alen) != 0) l->peer_addr = {};
  l->chans[chan].peer_chan = peer_chan;
  set_socket_keepalive(fd, peer_text);
  {
    LinkRegistry& g = registry();
    std::lock_guard<std::mutex> gl(g.mu);
    g.by_peer[l->peer].push_back(l);
    l->in_table = true;
    ++g.open;
    l->serial = g.next_serial++;
    g.by_serial[l->serial] = l;
    if (g.ep >= 0) watch_locked(g, *l);
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

namespace {

// The verdict on one channel, for a comm's end (link_poll) and a handshake's hold
// (LinkHold::poll) alike: the peer's notice first, then a bad frame, then the peer's goodbye,
// then the link's own end, once the channel's path messages are handed out (a handshake's channel
// never holds any).
LinkSeen channel_seen(const PeerLink& l, const Chan& ch) {
  LinkSeen v;
  if (ch.notice) {
    v.seen = SocketSeen::kNotice;
    v.text = ch.text;
  } else if (ch.bad) {
    v.seen = SocketSeen::kBadNotice;
    v.text = ch.text;
  } else if (ch.goodbye) {
    v.seen = SocketSeen::kEof;
    v.goodbye = true;
  } else if (l.dead && ch.path.empty()) {
    v.seen = l.seen;
    v.err = l.err;
    v.text = l.text;
  }
  return v;
}

}  // namespace

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
  *out = channel_seen(l, ch);
  return true;
}

namespace {

bool send_frame(PeerLink& l, wire::LinkFrameType t, uint32_t chan, const uint8_t* payload, size_t n,
                std::string* why) {
  uint8_t f[wire::kLinkFrameMaxBytes];
  const size_t len = wire::encode_link_frame(t, chan, payload, n, f);
  if (len == 0) {
    *why = "the frame did not encode (" + std::to_string(n) + " payload bytes)";
    return false;
  }
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

}  // namespace

bool link_send(LinkEnd& e, wire::LinkFrameType t, const uint8_t* payload, size_t n,
               std::string* why) {
  return send_frame(*e.link, t, e.peer_chan, payload, n, why);
}

namespace {

struct HsCounts {
  std::atomic<uint64_t> sent{0}, taken{0}, fell_back{0};
};
HsCounts& hs_counts() {
  static auto* c = new HsCounts;  // NOLINT: deliberately never destroyed
  return *c;
}

}  // namespace

LinkHandshakeCounts link_handshake_counts() {
  const HsCounts& c = hs_counts();
  return {c.sent.load(std::memory_order_relaxed), c.taken.load(std::memory_order_relaxed),
          c.fell_back.load(std::memory_order_relaxed)};
}

void link_count_hello_taken() {
  hs_counts().taken.fetch_add(1, std::memory_order_relaxed);
}

void link_count_fallback() {
  hs_counts().fell_back.fetch_add(1, std::memory_order_relaxed);
}

bool LinkHold::send(wire::LinkFrameType t, uint32_t peer_chan, const uint8_t* payload, size_t n,
                    std::string* why) {
  if (!link_) {
    *why = "no link held";
    return false;
  }
  const bool hello = t == wire::LinkFrameType::kHello;
  if (!send_frame(*link_, t, hello ? chan_ : peer_chan, payload, n, why)) return false;
  if (hello) hs_counts().sent.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool LinkHold::poll(Seen* out) {
  *out = Seen{};
  if (!link_) {
    out->seen = SocketSeen::kEof;
    return true;
  }
  PeerLink& l = *link_;
  std::unique_lock<std::mutex> lk(l.mu, std::try_to_lock);
  if (!lk.owns_lock()) return false;
  pump_locked(l);
  auto it = l.chans.find(chan_);
  if (it == l.chans.end()) {
    out->seen = SocketSeen::kGarbage;
    return true;
  }
  Chan& ch = it->second;
  if (ch.hs_reply) {
    out->reply = true;
    out->bytes = std::move(ch.hs);
    ch.hs.clear();
    ch.hs_reply = false;
  }
  out->ready = ch.hs_ready;
  LinkSeen v = channel_seen(l, ch);
  out->seen = v.seen;
  out->err = v.err;
  out->text = std::move(v.text);
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

namespace {

// Reads the links whose sockets have bytes (level-triggered: a link another thread is reading is
// looked at again next time). A dead link leaves the set: it has nothing more to sort.
void service_links() {
  LinkRegistry& g = registry();
  int ep;
  {
    std::lock_guard<std::mutex> gl(g.mu);
    ep = g.ep;
  }
  if (ep < 0) return;
  epoll_event ev[32];
  const int n = epoll_wait(ep, ev, 32, 0);
  for (int i = 0; i < n; ++i) {
    std::shared_ptr<PeerLink> l;
    {
      std::lock_guard<std::mutex> gl(g.mu);
      auto it = g.by_serial.find(ev[i].data.u64);
      if (it != g.by_serial.end()) l = it->second.lock();
    }
    if (!l) continue;
    std::unique_lock<std::mutex> lk(l->mu, std::try_to_lock);
    if (!lk.owns_lock()) continue;
    pump_locked(*l);
    if (l->dead && l->fd >= 0) (void)epoll_ctl(ep, EPOLL_CTL_DEL, l->fd, nullptr);
  }
}

}  // namespace

std::vector<LinkHello> link_take_hellos() {
  service_links();
  HelloBox& b = hellos();
  std::vector<LinkHello> out;
  if (b.count.load(std::memory_order_acquire) == 0) return out;
  std::lock_guard<std::mutex> bl(b.mu);
  out.swap(b.q);
  b.count.store(0, std::memory_order_release);
  return out;
}

void link_service_open() {
  LinkRegistry& g = registry();
  std::lock_guard<std::mutex> gl(g.mu);
  if (g.ep >= 0) return;
  g.ep = epoll_create1(EPOLL_CLOEXEC);
  if (g.ep < 0) {
    SLUICE_WARN(
        "peer links: epoll_create1 failed (%s): handshakes on a link are read only when a comm "
        "polls it",
        std::strerror(errno));
    return;
  }
  for (auto& [serial, w] : g.by_serial) {
    if (auto l = w.lock()) watch_locked(g, *l);
  }
}

void link_service_close() {
  std::vector<LinkHello> left;
  {
    LinkRegistry& g = registry();
    std::lock_guard<std::mutex> gl(g.mu);
    if (g.ep >= 0) close(g.ep);
    g.ep = -1;
    HelloBox& b = hellos();
    std::lock_guard<std::mutex> bl(b.mu);
    left.swap(b.q);
    b.count.store(0, std::memory_order_release);
  }
  for (LinkHello& h : left)  // outside the locks: each tells its connector
    link_hold_fail(std::move(h.hold), h.peer_chan, "the listener's process finalized");
}

}  // namespace sluice
