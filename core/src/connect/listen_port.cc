// One listening socket per process and address, shared by every listen comm on it
// (listener_internal.h). It outlives its last listen while the process has a send or receive comm
// open, so NCCL's rounds (listen, accept, closeListen) keep one port for the job's life instead of
// taking a fresh ephemeral port per round; the count of open comms reaching 0 closes it. Every
// accept call services the shared socket: it takes what waits in the backlog and reads each new
// connection's metadata until the nonce in it names a listen, then hands the connection to that
// listen, whose own accept finishes the handshake. The work per call is bounded by the connections
// not yet named (kMaxUnnamed), never by the listens open.
//
// The nonce's key: the index is looked up with a 64-bit key of the nonce mixed with a per-process
// secret, so the lookup's time says nothing an attacker could use about any listen's nonce; the
// listen it finds is then checked against the whole 128-bit nonce in constant time
// (wire::validate_meta). A connection whose key names no open listen is dropped as a nonce
// mismatch, exactly as one listener dropped a foreign nonce before ports were shared.
#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_map>

#include "connect/fd_reserve.h"
#include "connect/listener_internal.h"
#include "connect/oob_socket.h"
#include "sluice/core/base/log.h"
#include "sluice/core/base/net_addr.h"

namespace sluice {

using Clock = ListenComm::Clock;
using Pending = ListenComm::Pending;

struct ListenPort {
  FdCount counted{FdKind::kListen};
  int fd = -1;
  sockaddr_storage bound{};  // with its port; the address alone is the port's identity
  std::string addr_text;
  size_t users = 0;                                  // listen comms joined
  std::unordered_map<uint64_t, ListenComm*> by_key;  // by ListenComm::key
  // Connections whose metadata has not yet named a listen, oldest first. At kMaxUnnamed, a new
  // connection takes the place of the oldest (after every one was given its chance to be named).
  std::vector<std::unique_ptr<Pending>> unnamed;
  Clock::time_point next_due = Clock::time_point::max();  // the earliest unnamed deadline
  bool resource_warned = false;  // accept4 ran out of memory; WARNed once until it works
  bool fd_warned = false;        // out of descriptors with no connection waiting; WARNed once
  ~ListenPort() {
    unnamed.clear();
    if (fd >= 0) close(fd);
  }
};

namespace {

constexpr size_t kMaxUnnamed = 64;

// Allocated once and never destroyed (no static destructor). The lock is a leaf below each listen's
// mu and the listens' registry lock, and above the reaper queue's q_mu (listener.cc).
struct PortRegistry {
  std::mutex mu;
  std::vector<std::unique_ptr<ListenPort>> ports;
  uint64_t secret[2] = {0, 0};
  bool keyed = false;
};

PortRegistry& ports() {
  static auto* r = new PortRegistry;  // NOLINT: deliberately never destroyed
  return *r;
}

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Caller holds ports().mu, which has keyed it.
uint64_t port_key(const wire::Nonce& n) {
  const PortRegistry& r = ports();
  uint64_t a = 0, b = 0;
  std::memcpy(&a, n.bytes, 8);
  std::memcpy(&b, n.bytes + 8, 8);
  return mix(mix(a ^ r.secret[0]) ^ b ^ r.secret[1]);
}

// The port's identity: the address without its port (compared as bytes: a text form can change
// with the process's state, if_indextoname needing a descriptor for the scope's name).
bool same_host(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in&>(a).sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in&>(b).sin_addr.s_addr;
  }
  const auto& x = reinterpret_cast<const sockaddr_in6&>(a);
  const auto& y = reinterpret_cast<const sockaddr_in6&>(b);
  return std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof x.sin6_addr) == 0 &&
         x.sin6_scope_id == y.sin6_scope_id;
}

Status open_port(const sockaddr_storage& addr, const std::string& dev, ListenPort* p) {
  sockaddr_storage sa = addr;
  p->fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (p->fd < 0) {
    const int err = errno;
    if (fd_exhausted(err)) return fd_exhausted_status("listen on " + dev + ": socket()", err);
    return errno_status(Code::kSystemError, "listen: socket()", err);
  }
  int one = 1;
  setsockopt(p->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  socklen_t len = sa.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  if (sa.ss_family == AF_INET)
    reinterpret_cast<sockaddr_in*>(&sa)->sin_port = 0;
  else
    reinterpret_cast<sockaddr_in6*>(&sa)->sin6_port = 0;
  if (bind(p->fd, reinterpret_cast<sockaddr*>(&sa), len) != 0)
    return errno_status(Code::kSystemError, "listen: bind to " + sockaddr_text(sa), errno);
  // The backlog holds a round of NCCL's connects (128 peers, several channels each) between calls.
  if (::listen(p->fd, SOMAXCONN) != 0) return errno_status(Code::kSystemError, "listen()", errno);
  SLUICE_RETURN_IF_ERROR(set_nonblocking(p->fd));
  len = sizeof sa;
  getsockname(p->fd, reinterpret_cast<sockaddr*>(&sa), &len);
  p->bound = sa;
  p->addr_text = sockaddr_text(sa);
  return Status::ok();
}

bool connection_level_error(int err) {
  // accept(2): Linux passes errors of the new connection to accept; the listener is fine.
  return err == ECONNABORTED || err == EPROTO || err == EPERM || err == ENETDOWN ||
         err == ENOPROTOOPT || err == EHOSTDOWN || err == ENONET || err == EHOSTUNREACH ||
         err == EOPNOTSUPP || err == ENETUNREACH || err == ETIMEDOUT || err == ECONNRESET;
}

// A socket with no listen (lingering: port_leave) is drained this often by the connect, listen and
// accept calls' reaping: a connection to it names a closed listen, and its connector learns it
// within this time of such a call rather than at its own bound.
constexpr auto kIdleDrainEvery = std::chrono::milliseconds(100);

// Closes what waits in an idle socket's backlog (at most kMaxUnnamed per call; caller holds
// ports().mu). Each was meant for a listen that has closed.
void drain_idle(ListenPort& port) {
  for (size_t n = 0; n < kMaxUnnamed; ++n) {
    sockaddr_storage sa{};
    socklen_t len = sizeof sa;
    const int fd =
        accept4(port.fd, reinterpret_cast<sockaddr*>(&sa), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // empty, or out of descriptors: the connector's own bound then applies
    SLUICE_INFO(kSubNet,
                "%s: dropping connection from %s: no listen is open on this address (its listen "
                "closed; the socket stays open for the next listen while comms are open)",
                port.addr_text.c_str(), sockaddr_text(sa).c_str());
    close(fd);
  }
}

enum class Named { kWait, kHanded, kDrop };

// Why a connection that never named a listen goes at its deadline.
Status unnamed_timeout(const Pending& h) {
  return Status(Code::kRemoteError, "no complete handshake within SLUICE_HANDSHAKE_TIMEOUT_MS=" +
                                        std::to_string(engine()->config().handshake_timeout_ms) +
                                        " ms (received " + std::to_string(h.io) + " of " +
                                        std::to_string(sizeof h.remote) + " metadata bytes)");
}

// Reads p's metadata; once whole, hands p to the listen its nonce names. Caller holds ports().mu.
Named name_one(ListenPort& port, std::unique_ptr<Pending>& p, Clock::time_point now, Status* why) {
  const Config& cfg = engine()->config();
  Pending& h = *p;
  Status st = recv_some(h.fd, &h.remote, sizeof h.remote, &h.io, h.peer);
  // Magic and version are checked on every byte that arrived, before anything else.
  Status header = wire::check_meta_prefix(&h.remote, h.io);
  if (!header.is_ok()) {
    *why = header;
    return Named::kDrop;
  }
  if (st.is_again()) {
    if (now <= h.deadline) return Named::kWait;
    *why = unnamed_timeout(h);
    return Named::kDrop;
  }
  if (!st.is_ok()) {
    *why = st;
    return Named::kDrop;
  }
  auto it = port.by_key.find(port_key(h.remote.nonce));
  if (it == port.by_key.end()) {
    *why = Status(Code::kRemoteError,
                  "peer metadata is for another listener (nonce mismatch: no listen open on " +
                      port.addr_text + " has its nonce; closed, or a handle of another process)");
    return Named::kDrop;
  }
  ListenComm& owner = *it->second;
  Status valid = wire::validate_meta(h.remote, 0, owner.nonce);  // the whole nonce, constant time
  if (!valid.is_ok()) {
    *why = valid;
    return Named::kDrop;
  }
  h.identified = true;
  h.deadline = h.accepted + std::chrono::milliseconds(
                                std::max(cfg.handshake_timeout_ms, cfg.connect_timeout_ms));
  h.io = 0;
  h.phase = (h.remote.features & wire::kMetaFeatureMembers) != 0 ? Pending::kRecvMembers
                                                                 : after_meta_parts(h);
  owner.inbox.push_back(std::move(p));
  queue_for_reaper(owner, now);
  return Named::kHanded;
}

// Gives every unnamed connection its chance to be named; drops the ones that failed. Recomputes
// next_due. Caller holds ports().mu.
void name_all(ListenPort& port, Clock::time_point now) {
  port.next_due = Clock::time_point::max();
  for (size_t i = 0; i < port.unnamed.size();) {
    Status why;
    switch (name_one(port, port.unnamed[i], now, &why)) {
      case Named::kWait:
        port.next_due = std::min(port.next_due, port.unnamed[i]->deadline);
        ++i;
        continue;
      case Named::kDrop:
        drop_handshake(port.addr_text, nullptr, *port.unnamed[i], why);
        [[fallthrough]];
      case Named::kHanded:
        port.unnamed.erase(port.unnamed.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
    }
  }
}

// Takes the connections waiting in the kernel's backlog, each read at once (a peer sends its
// metadata right after its TCP handshake, so most are named in the call that takes them). Fails
// only when the listening socket itself is broken. `l` is the calling listen (for messages).
Status accept_new(ListenPort& port, const ListenComm& l, Clock::time_point now) {
  const Config& cfg = engine()->config();
  for (size_t taken = 0; taken < kMaxUnnamed; ++taken) {
    if (port.unnamed.size() >= kMaxUnnamed) {
      name_all(port, now);
      if (port.unnamed.size() >= kMaxUnnamed) {
        drop_handshake(
            port.addr_text, nullptr, *port.unnamed.front(),
            Status(Code::kRemoteError, std::to_string(kMaxUnnamed) +
                                           " handshakes in progress at once: the oldest connection "
                                           "without a Sluice header makes room for a new one"));
        port.unnamed.erase(port.unnamed.begin());
      }
    }
    sockaddr_storage sa{};
    socklen_t len = sizeof sa;
    int fd = accept4(port.fd, reinterpret_cast<sockaddr*>(&sa), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      const int err = errno;
      if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR) return Status::ok();
      if (connection_level_error(err)) {
        SLUICE_INFO(kSubNet, "%s: a connection failed before it was accepted: %s",
                    port.addr_text.c_str(), std::strerror(err));
        continue;
      }
      if (fd_exhausted(err)) {
        // accept4 checks for a free descriptor before it looks at the backlog: with none waiting
        // there is nobody to refuse yet. Say so once; the first connection that comes is refused
        // and fails this accept (refuse_out_of_fds), so its connector learns why at once.
        pollfd w{port.fd, POLLIN, 0};
        if (poll(&w, 1, 0) == 1 && (w.revents & POLLIN) != 0)
          return refuse_out_of_fds(port.fd, l.dev->name, port.addr_text, err);
        if (!port.fd_warned) {
          port.fd_warned = true;
          SLUICE_WARN("%s; the next connection to it will be refused with this reason",
                      fd_exhausted_status(
                          "accept on " + l.dev->name + " (" + port.addr_text + "): accept4()", err)
                          .message()
                          .c_str());
        }
        return Status::ok();
      }
      if (err == ENOBUFS || err == ENOMEM) {
        // Kernel memory: the connection stays in the backlog; later calls take it once it is back.
        if (!port.resource_warned) {
          SLUICE_WARN(
              "accept on %s (%s): cannot take a new connection now: %s (the kernel is out of "
              "socket memory); retrying",
              l.dev->name.c_str(), port.addr_text.c_str(), std::strerror(err));
          port.resource_warned = true;
        }
        return Status::ok();
      }
      return errno_status(Code::kSystemError,
                          "accept on " + port.addr_text + " for " + l.dev->name +
                              " (the listening socket is broken)",
                          err);
    }
    port.resource_warned = false;
    port.fd_warned = false;
    auto p = std::make_unique<Pending>();
    p->fd = fd;
    p->peer = sockaddr_text(sa);
    p->peer_addr = sa;
    p->accepted = now;
    p->deadline = now + std::chrono::milliseconds(cfg.handshake_timeout_ms);
    Status why;
    switch (name_one(port, p, now, &why)) {
      case Named::kWait:
        port.next_due = std::min(port.next_due, p->deadline);
        port.unnamed.push_back(std::move(p));
        break;
      case Named::kDrop:
        drop_handshake(port.addr_text, nullptr, *p, why);
        break;
      case Named::kHanded:
        break;
    }
  }
  return Status::ok();
}

// The listen in this process whose key `n` names, on any port (caller holds ports().mu).
ListenComm* owner_of(const wire::Nonce& n) {
  const uint64_t key = port_key(n);
  for (auto& port : ports().ports) {
    auto it = port->by_key.find(key);
    if (it != port->by_key.end()) return it->second;
  }
  return nullptr;
}

// A hello's parts ([Meta][MetaMembers when fused][MetaLink offer]), read as name_one and the
// listener's kRecvMembers and kRecvLink read them from a socket, and its owner found. The answer:
// use the link it came on. Caller holds ports().mu.
Status read_hello(Pending& p, const std::vector<uint8_t>& b, ListenComm** owner) {
  const Config& cfg = engine()->config();
  wire::HsParts parts(b);
  auto take = [&](void* dst, size_t n, const char* what) -> Status {
    if (parts.take(dst, n)) return Status::ok();
    return Status(Code::kRemoteError, "the hello on the peer link ends inside its " +
                                          std::string(what) + " (" + std::to_string(b.size()) +
                                          " bytes)");
  };
  SLUICE_RETURN_IF_ERROR(take(&p.remote, sizeof p.remote, "metadata"));
  SLUICE_RETURN_IF_ERROR(wire::check_meta_prefix(&p.remote, sizeof p.remote));
  ListenComm* l = owner_of(p.remote.nonce);
  if (l == nullptr) {
    return Status(Code::kRemoteError,
                  "peer metadata is for another listener (nonce mismatch: no listen open in this "
                  "process has its nonce; closed, or a handle of another process)");
  }
  SLUICE_RETURN_IF_ERROR(wire::validate_meta(p.remote, 0, l->nonce));  // constant time
  *owner = l;
  p.identified = true;
  p.deadline = p.accepted + std::chrono::milliseconds(
                                std::max(cfg.handshake_timeout_ms, cfg.connect_timeout_ms));
  if ((p.remote.features & wire::kMetaFeatureMembers) != 0) {
    SLUICE_RETURN_IF_ERROR(take(&p.remote_x, sizeof p.remote_x, "members' metadata"));
    SLUICE_RETURN_IF_ERROR(wire::validate_members(p.remote, p.remote_x));
  }
  const uint32_t chan = p.remote_link.chan;  // the frame's: where a refusal goes
  if ((p.remote.features & wire::kMetaFeatureLink) == 0)
    return Status(Code::kRemoteError, "a hello on the peer link without a link offer");
  SLUICE_RETURN_IF_ERROR(take(&p.remote_link, sizeof p.remote_link, "link offer"));
  const wire::MetaLink offer = p.remote_link;
  p.remote_link.chan = chan;
  SLUICE_RETURN_IF_ERROR(wire::validate_link_offer(offer));
  if (offer.chan != chan || offer.link_id != p.link_hold.id()) {
    return Status(Code::kRemoteError,
                  "the hello's link offer names another channel or link than the one it came on");
  }
  if (!parts.done()) {
    return Status(Code::kRemoteError, "the hello on the peer link has " + std::to_string(b.size()) +
                                          " bytes, more than the parts its metadata names");
  }
  p.local_link =
      wire::make_meta_link(link_proc_id(), wire::kLinkUse, p.link_hold.id(), 0, p.link_hold.chan());
  p.link_on = true;
  return Status::ok();
}

// The hellos that arrived on this process's peer links (health/peer_link.h), each handed to the
// listen its nonce names, as name_one hands a TCP connection; a hello naming none, or malformed,
// is dropped, which tells its connector the reason on the link (~Pending). Caller holds ports().mu.
void name_hellos(Clock::time_point now) {
  for (LinkHello& h : link_take_hellos()) {
    auto p = std::make_unique<Pending>();
    p->via_link = true;
    p->peer = h.peer_text;
    p->peer_addr = h.peer_addr;
    p->accepted = now;
    p->deadline = now + std::chrono::milliseconds(engine()->config().handshake_timeout_ms);
    p->remote_link.chan = h.peer_chan;
    p->link_hold = std::move(h.hold);
    ListenComm* owner = nullptr;
    Status why = read_hello(*p, h.bytes, &owner);
    if (!why.is_ok()) {
      drop_handshake("the peer link to " + h.peer_text, owner ? owner->dev : nullptr, *p, why);
      p->drop_reason = why.message();
      continue;  // ~Pending tells the connector
    }
    p->phase = Pending::kGidRoute;
    link_count_hello_taken();
    owner->inbox.push_back(std::move(p));
    queue_for_reaper(*owner, now);
  }
}

}  // namespace

ListenComm::~ListenComm() {
  pending.clear();
  if (port != nullptr) port_leave(*this);
  if (holds_reserve) fd_reserve_give();
}

Status port_join(ListenComm& l, const sockaddr_storage& addr, sockaddr_storage* bound) {
  PortRegistry& r = ports();
  std::lock_guard<std::mutex> lk(r.mu);
  if (!r.keyed) {
    wire::Nonce s{};
    SLUICE_RETURN_IF_ERROR(wire::new_nonce(&s));
    std::memcpy(r.secret, s.bytes, sizeof r.secret);
    r.keyed = true;
  }
  ListenPort* port = nullptr;
  for (auto& p : r.ports) {
    if (same_host(p->bound, addr)) port = p.get();
  }
  if (port == nullptr) {
    auto fresh = std::make_unique<ListenPort>();
    SLUICE_RETURN_IF_ERROR(open_port(addr, l.dev->name, fresh.get()));
    SLUICE_INFO(kSubNet,
                "listening socket %s: shared by every listen of this process on its address",
                fresh->addr_text.c_str());
    port = fresh.get();
    r.ports.push_back(std::move(fresh));
  }
  for (int k = 0; port->by_key.count(port_key(l.nonce)) != 0; ++k) {
    if (k == 8) return Status(Code::kInternalError, "listen: no free nonce key after 8 draws");
    SLUICE_RETURN_IF_ERROR(wire::new_nonce(&l.nonce));
  }
  l.key = port_key(l.nonce);
  port->by_key.emplace(l.key, &l);
  ++port->users;
  l.port = port;
  l.addr_text = port->addr_text;
  *bound = port->bound;
  return Status::ok();
}

void port_leave(ListenComm& l) {
  PortRegistry& r = ports();
  std::vector<std::unique_ptr<Pending>> gone;  // closed with the lock released
  std::unique_ptr<ListenPort> closed;
  {
    std::lock_guard<std::mutex> lk(r.mu);
    ListenPort& port = *l.port;
    port.by_key.erase(l.key);
    gone.swap(l.inbox);
    // The last listen: the socket lingers while a send or receive comm is open (read under r.mu:
    // the close that takes the count to 0 then calls close_idle_listen_ports, which waits for it).
    Engine* e = engine();
    if (--port.users == 0 && e != nullptr && e->open_comms.load() > 0) {
      port.next_due = Clock::now();  // drained by the next reap
    } else if (port.users == 0) {
      for (auto it = r.ports.begin(); it != r.ports.end(); ++it) {
        if (it->get() == &port) {
          closed = std::move(*it);
          r.ports.erase(it);
          break;
        }
      }
    }
    l.port = nullptr;
  }
  if (closed && !closed->unnamed.empty()) {
    SLUICE_INFO(kSubNet, "%s: its last listen closed with %zu connection(s) not yet named; closing",
                closed->addr_text.c_str(), closed->unnamed.size());
  }
}

Status port_service(ListenComm& l, Clock::time_point now) {
  std::lock_guard<std::mutex> lk(ports().mu);
  ListenPort& port = *l.port;
  Status st = accept_new(port, l, now);
  if (!port.unnamed.empty()) name_all(port, now);
  name_hellos(now);
  for (auto& p : l.inbox) l.pending.push_back(std::move(p));
  l.inbox.clear();
  return st;
}

void port_take_inbox(ListenComm& l) {
  std::lock_guard<std::mutex> lk(ports().mu);
  for (auto& p : l.inbox) l.pending.push_back(std::move(p));
  l.inbox.clear();
}

size_t port_reap(bool all, Clock::time_point now) {
  PortRegistry& r = ports();
  std::unique_lock<std::mutex> lk(r.mu, std::defer_lock);
  if (all) {
    lk.lock();
  } else if (!lk.try_lock()) {
    return 0;
  }
  size_t n = 0;
  if (!all) name_hellos(now);  // hellos for a listen whose accept is not being called
  for (auto& port : r.ports) {
    if (!all && now <= port->next_due) continue;  // one comparison per port (one per address)
    port->next_due = Clock::time_point::max();
    if (port->users == 0 && !all) {
      drain_idle(*port);  // no listen to name: refused at once instead of at the connector's bound
      port->next_due = now + kIdleDrainEvery;
    }
    for (size_t i = 0; i < port->unnamed.size();) {
      Pending& p = *port->unnamed[i];
      if (!all && now <= p.deadline) {
        port->next_due = std::min(port->next_due, p.deadline);
        ++i;
        continue;
      }
      drop_handshake(port->addr_text, nullptr, p,
                     all ? Status(Code::kRemoteError, "finalize with the handshake in progress")
                         : unnamed_timeout(p));
      port->unnamed.erase(port->unnamed.begin() + static_cast<std::ptrdiff_t>(i));
      ++n;
    }
  }
  return n;
}

void close_idle_listen_ports() {
  PortRegistry& r = ports();
  std::vector<std::unique_ptr<ListenPort>> closed;  // closed with the lock released
  {
    std::lock_guard<std::mutex> lk(r.mu);
    Engine* e = engine();
    if (e != nullptr && e->open_comms.load() > 0) return;  // a comm opened since: they linger on
    for (auto it = r.ports.begin(); it != r.ports.end();) {
      if ((*it)->users == 0) {
        closed.push_back(std::move(*it));
        it = r.ports.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& p : closed) {
    if (!p->unnamed.empty()) {
      SLUICE_INFO(kSubNet, "%s: closing with %zu connection(s) not yet named (no listen open)",
                  p->addr_text.c_str(), p->unnamed.size());
    }
  }
}

size_t port_count() {
  std::lock_guard<std::mutex> lk(ports().mu);
  return ports().ports.size();
}

}  // namespace sluice
