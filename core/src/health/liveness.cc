// Peer liveness on the kept out-of-band socket, TCP keepalive, and asynchronous events mapped to
// the comms they concern. See liveness.h for the rules.
#include "health/liveness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <vector>

#include "comm/comm.h"
#include "comm/engine.h"
#include "comm/fd_census.h"
#include "health/peer_link.h"
#include "sluice/core/base/log.h"
#include "sluice/core/base/socket_drain.h"
#include "sluice/core/base/verbs.h"

namespace sluice {

// ---- Pure logic ---------------------------------------------------------------------------------

KeepaliveParams keepalive_params(int heartbeat_ms) {
  KeepaliveParams k;
  if (heartbeat_ms <= 0) return k;
  k.enabled = true;
  k.idle_s = std::max(1, (heartbeat_ms + 999) / 1000);
  k.intvl_s = k.idle_s;
  k.count = kKeepaliveProbes;
  k.user_timeout_ms = static_cast<unsigned>(k.idle_s) * 1000u * (kKeepaliveProbes + 1);
  // The kernel gives up at the first probe tick at least user_timeout after the last answer, and
  // the last answer may be up to one interval before the peer went silent.
  k.bound_ms = static_cast<long long>(k.user_timeout_ms) + k.intvl_s * 1000ll;
  return k;
}

bool poll_due(int64_t now_ns, int64_t* next_poll_ns, int period_ms) {
  if (now_ns < *next_poll_ns) return false;
  *next_poll_ns = now_ns + static_cast<int64_t>(period_ms) * 1000000;
  return true;
}

SocketSeen classify_read(long r, int err, const uint8_t* buf) {
  if (r == 0) return SocketSeen::kEof;
  if (r < 0) {
    if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR) return SocketSeen::kNothing;
    return SocketSeen::kError;
  }
  for (long i = 0; i < r; ++i)
    if (buf[i] != kGoodbyeByte) return SocketSeen::kGarbage;
  return SocketSeen::kGoodbye;
}

SocketSeen feed_peer_bytes(uint8_t* rx, uint16_t* rx_len, const uint8_t* buf, size_t n,
                           std::string* text, PathMsgSink sink, void* ctx) {
  static_assert(wire::kPathMsgMaxBytes <= wire::kNoticeMaxBytes, "rx holds a path message");
  bool goodbye = false;
  for (size_t i = 0; i < n; ++i) {
    if (*rx_len == 0) {
      if (buf[i] == kGoodbyeByte) {
        goodbye = true;
        continue;
      }
      const bool path_msg = buf[i] == wire::kPathMsgMagic && sink != nullptr;
      if (buf[i] != wire::kNoticeMagic && !path_msg) return SocketSeen::kGarbage;
    }
    // A notice after the goodbye cannot come from a Sluice peer (it says goodbye last).
    if (goodbye && *rx_len == 0) return SocketSeen::kGarbage;
    if (*rx_len >= wire::kNoticeMaxBytes) return SocketSeen::kBadNotice;
    rx[(*rx_len)++] = buf[i];
    size_t used = 0;
    if (rx[0] == wire::kPathMsgMagic) {
      wire::PathMsg m;
      switch (wire::decode_path_msg(rx, *rx_len, &m, text, &used)) {
        case wire::PathMsgParse::kIncomplete:
          continue;
        case wire::PathMsgParse::kBad:
          return SocketSeen::kBadNotice;
        case wire::PathMsgParse::kOk:
          sink(ctx, m);
          *rx_len = 0;
          continue;
      }
    }
    switch (wire::decode_notice(rx, *rx_len, text, &used)) {
      case wire::NoticeParse::kIncomplete:
        continue;
      case wire::NoticeParse::kBad:
        return SocketSeen::kBadNotice;
      case wire::NoticeParse::kOk:
        return SocketSeen::kNotice;
    }
  }
  return goodbye ? SocketSeen::kGoodbye : SocketSeen::kNothing;
}

AsyncEventInfo async_event_info(ibv_event_type t) {
  using S = AsyncEventInfo::Scope;
  switch (t) {
    case IBV_EVENT_QP_FATAL:
      return {S::kQp, "the QP entered the error state (local work queue catastrophic error)",
              "a NIC or driver fault, or a work request the NIC could not execute"};
    case IBV_EVENT_QP_REQ_ERR:
      return {S::kQp, "the peer's NIC reported an invalid request on this QP",
              "mismatched QP setup between the two sides or a remote protocol violation"};
    case IBV_EVENT_QP_ACCESS_ERR:
      return {S::kQp, "remote access error on this QP (bad rkey, address or permissions)",
              "the peer deregistered or never registered the buffer it published"};
    case IBV_EVENT_CQ_ERR:
      return {S::kCq, "the completion queue overran or failed",
              "more completions than the CQ holds (a Sluice bug) or a NIC fault"};
    case IBV_EVENT_PORT_ERR:
      return {S::kPort, "the port went down",
              "link lost: cable pulled, switch port down, or the netdev set down (ip link)"};
    case IBV_EVENT_DEVICE_FATAL:
      return {S::kDevice, "the device hit a fatal error",
              "device reset, firmware fault or removal"};
    default:
      return {};
  }
}

namespace {

// "DOWN", or "not ACTIVE (<state>)": a port that is not ACTIVE, in the reasons below.
std::string not_active(ibv_port_state state) {
  return state == IBV_PORT_DOWN ? "DOWN"
                                : "not ACTIVE (" + std::string(ibv_port_state_str(state)) + ")";
}

}  // namespace

std::string local_port_hint(const std::string& port, ibv_port_state state) {
  if (state == IBV_PORT_ACTIVE) return {};
  return "the local port " + port + " is " + not_active(state) +
         ": likely cause: its link is down (cable pulled, switch port down, or its netdev set down "
         "with `ip link`); connections over it fail until the port is ACTIVE again";
}

std::string completion_error_cause(ibv_wc_status status, const std::string& async_reason,
                                   const std::string& port, ibv_port_state port_state) {
  if (!async_reason.empty()) return "it follows an async event: " + async_reason;
  if (port_state != IBV_PORT_NOP && port_state != IBV_PORT_ACTIVE) {
    const AsyncEventInfo down = async_event_info(IBV_EVENT_PORT_ERR);  // the event's own words
    return std::string("likely cause: ") + down.meaning + " (the local port " + port + " is " +
           not_active(port_state) + "): " + down.cause;
  }
  return std::string("likely cause: ") + verbs::wc_status_hint(status);
}

std::string peer_gone_reason(SocketSeen seen, int err, bool said_goodbye, const std::string& peer,
                             int heartbeat_ms, const std::string& text) {
  if (said_goodbye) {
    return "peer " + peer +
           " closed its comm normally (goodbye on the connection socket) while this comm still "
           "had work: its side finished or was torn down first";
  }
  switch (seen) {
    case SocketSeen::kEof:
      return "peer " + peer +
             " closed the connection (EOF on the connection socket, no goodbye): process exited "
             "or was killed?";
    case SocketSeen::kGarbage:
      return "unexpected bytes from peer " + peer +
             " on the connection socket (not a Sluice peer, or a protocol mismatch)";
    case SocketSeen::kNotice:
      return "the peer's comm failed (peer " + peer + ", its reason: \"" + text +
             "\"); this side is fine but cannot go on without it";
    case SocketSeen::kBadNotice:
      return "peer " + peer + " sent a malformed failure notice on the connection socket (" + text +
             "): its comm failed or it is not a Sluice peer";
    case SocketSeen::kError:
      if (err == ECONNRESET || err == EPIPE) {
        return "peer " + peer + " reset the connection (" + std::strerror(err) +
               "): process exited or was killed?";
      }
      if (err == ETIMEDOUT) {
        return "peer " + peer + " stopped answering on the connection socket (" +
               std::strerror(err) + " after SLUICE_HEARTBEAT_MS=" + std::to_string(heartbeat_ms) +
               " keepalive): host down, powered off, or the network between us cut?";
      }
      return "connection socket to peer " + peer + " failed (" + std::strerror(err) +
             "): network or host problem?";
    case SocketSeen::kNothing:
    case SocketSeen::kGoodbye:
      break;
  }
  return "peer " + peer + " is gone";
}

// ---- On a comm ----------------------------------------------------------------------------------

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int heartbeat_ms() {
  const Engine* e = engine();
  return e ? e->config().heartbeat_ms : 0;
}

// Keepalive options on c's socket. Called by c's own thread (liveness_start) or, for a sentinel
// handed over, by another comm's thread under the host registry's lock, while c is registered (so
// its socket is open): it reads only what never changes after set-up (fd, peer).
void set_keepalive(const Conn& c) {
  if (c.fd >= 0) set_socket_keepalive(c.fd, c.peer);
}

}  // namespace

void set_socket_keepalive(int fd, const std::string& peer) {
  const KeepaliveParams k = keepalive_params(heartbeat_ms());
  if (!k.enabled || fd < 0) return;
  const int on = 1;
  const int opts[][3] = {{SOL_SOCKET, SO_KEEPALIVE, on},
                         {IPPROTO_TCP, TCP_KEEPIDLE, k.idle_s},
                         {IPPROTO_TCP, TCP_KEEPINTVL, k.intvl_s},
                         {IPPROTO_TCP, TCP_KEEPCNT, k.count},
                         {IPPROTO_TCP, TCP_USER_TIMEOUT, static_cast<int>(k.user_timeout_ms)}};
  for (const auto& o : opts) {
    if (setsockopt(fd, o[0], o[1], &o[2], sizeof o[2]) != 0) {
      SLUICE_INFO(kSubNet,
                  "socket to peer %s: option %d/%d refused (%s): a silent peer may go unnoticed",
                  peer.c_str(), o[0], o[1], std::strerror(errno));
    }
  }
}

namespace {

// ---- Keepalive per peer host (peer_hosts.h) ----

struct HostRegistry {
  std::mutex mu;  // a leaf: nothing else is locked under it
  PeerHosts hosts;
};

HostRegistry& host_registry() {
  static auto* r = new HostRegistry;  // NOLINT: deliberately never destroyed
  return *r;
}

// The peer's address without its port (with the scope of a link-local IPv6 address); empty when
// the socket cannot say.
std::string peer_host_key(int fd) {
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) return {};
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&sa)->sin_addr, buf, sizeof buf);
    return buf;
  }
  if (sa.ss_family != AF_INET6) return {};
  const auto* a6 = reinterpret_cast<sockaddr_in6*>(&sa);
  inet_ntop(AF_INET6, &a6->sin6_addr, buf, sizeof buf);
  return std::string(buf) + "%" + std::to_string(a6->sin6_scope_id);
}

// Keepalive on c when it is the first comm to its peer's host; otherwise the host's sentinel
// watches for it.
void join_host(Conn& c) {
  if (!keepalive_params(heartbeat_ms()).enabled || c.fd < 0) return;
  const std::string key = peer_host_key(c.fd);
  if (key.empty()) {  // cannot tell the host: a keepalive of its own
    set_keepalive(c);
    return;
  }
  c.watch.host.owner = &c;
  HostRegistry& reg = host_registry();
  std::lock_guard<std::mutex> lk(reg.mu);
  if (reg.hosts.add(&c.watch.host, key)) set_keepalive(c);
}

// c leaves its host (closed, or its socket no longer answers for the host): when it was the
// sentinel, the host's next comm takes keepalive over.
void leave_host(Conn& c) {
  if (c.watch.host.owner == nullptr) return;
  HostRegistry& reg = host_registry();
  std::lock_guard<std::mutex> lk(reg.mu);
  if (PeerHostNode* next = reg.hosts.remove(&c.watch.host))
    set_keepalive(*static_cast<const Conn*>(next->owner));
}

// The host of c (c's socket timed out, keepalive or TCP_USER_TIMEOUT) is down for every comm to it:
// each of the others is gone at its next poll. Under reg.mu.
void host_down_locked(HostRegistry& reg, Conn& c) {
  const std::vector<PeerHostNode*> others = reg.hosts.host_down(&c.watch.host);
  if (others.empty()) return;
  const std::string seen_on =
      " (keepalive runs on one connection per peer host: comm to " + c.peer + " saw it)";
  for (PeerHostNode* x : others) {
    Conn& o = *static_cast<Conn*>(x->owner);
    o.watch.host_reason =
        peer_gone_reason(SocketSeen::kError, ETIMEDOUT, false, o.peer, heartbeat_ms()) + seen_on;
    o.watch.host_down.store(true, std::memory_order_release);
  }
  SLUICE_INFO(kSubNet, "peer host of %s stopped answering: %zu more comms to it fail with it",
              c.peer.c_str(), others.size());
}

void host_timed_out(Conn& c) {
  if (c.watch.host.owner == nullptr) return;
  HostRegistry& reg = host_registry();
  std::lock_guard<std::mutex> lk(reg.mu);
  host_down_locked(reg, c);
}

// At c's liveness poll: once per poll period per host, c looks at its host's sentinel socket, whose
// own comm may never be called. Still established: nothing to do. Closed by a time-out: the host is
// down (every comm of it, c too, is gone). Closed otherwise (the peer process reset or closed it):
// the sentinel no longer watches the host, and the next comm takes keepalive over. A pending error
// read here is handed to the sentinel's comm (taken_err), whose own poll reports it.
void check_host(Conn& c) {
  if (c.watch.host.owner == nullptr) return;
  const Engine* e = engine();
  const int64_t period = static_cast<int64_t>(e ? e->config().liveness_poll_ms : 1000) * 1000000;
  HostRegistry& reg = host_registry();
  // At the poll cadence only, and never waiting: when another comm holds the registry (it checks
  // the host now, or joins or leaves), this poll leaves the check to the next one.
  std::unique_lock<std::mutex> lk(reg.mu, std::try_to_lock);
  if (!lk.owns_lock()) return;
  PeerHostNode* s = reg.hosts.check_due(&c.watch.host, now_ns(), period);
  if (s == nullptr) return;
  Conn& sc = *static_cast<Conn*>(s->owner);  // registered, so its socket is open
  tcp_info ti{};
  socklen_t len = sizeof ti;
  if (getsockopt(sc.fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 || ti.tcpi_state == TCP_ESTABLISHED)
    return;
  int err = 0;
  if (ti.tcpi_state == TCP_CLOSE) {
    len = sizeof err;
    if (getsockopt(sc.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = 0;
    if (err != 0) sc.watch.taken_err.store(err, std::memory_order_release);
  }
  if (err == ETIMEDOUT) {
    host_down_locked(reg, sc);
    return;
  }
  if (PeerHostNode* next = reg.hosts.remove(s))
    set_keepalive(*static_cast<const Conn*>(next->owner));
}

// A comm on a peer link (peer_link.h): what the link says of the peer's end. Never blocks.
void poll_link(Conn& c) {
  PeerWatch& w = c.watch;
  LinkSeen s;
  const int room = c.fo.on ? fo_inbox_room(&c.fo) : 0;
  if (!link_poll(c.link, c.fo.on ? fo_take_path_msg : nullptr, &c.fo, room, &s)) return;
  if (s.seen == SocketSeen::kNothing) return;
  w.state = PeerWatch::kGone;
  w.gone =
      peer_gone_reason(s.seen, s.err, s.goodbye, c.peer, heartbeat_ms(), s.text) +
      (s.goodbye ? "" : " (seen on the peer link to its process, which every comm to it shares)");
}

// Reads what the socket has (non-blocking) and updates c.watch. Never blocks.
void poll_socket(Conn& c) {
  PeerWatch& w = c.watch;
  if (w.state == PeerWatch::kGone) return;
  if (c.link.on()) {
    poll_link(c);
    return;
  }
  if (c.fd < 0) return;
  check_host(c);
  if (w.host_down.load(std::memory_order_acquire)) {  // the host's sentinel timed out
    w.state = PeerWatch::kGone;
    w.gone = w.host_reason;
    return;
  }
  for (;;) {
    uint8_t buf[64];
    // Backpressure: a failover comm's path messages wait in the socket while the driver's inbox
    // is full. At most `room` messages can complete in room x kPathMsgMinBytes bytes (each needs
    // that many, the first one at least one byte more than what rx already holds).
    size_t want = sizeof buf;
    if (c.fo.on) {
      const int room = fo_inbox_room(&c.fo);
      if (room <= 0) return;  // the driver takes the inbox at this call; read on at the next
      want = std::min(want, static_cast<size_t>(room) * wire::kPathMsgMinBytes);
    }
    ssize_t r = ::recv(c.fd, buf, want, MSG_DONTWAIT);
    int err = r < 0 ? errno : 0;
    SocketSeen seen = classify_read(r, err, buf);
    // Another comm of the host read this socket's pending error (check_host): the socket then
    // shows EOF, but that error is what happened.
    if (seen == SocketSeen::kEof || seen == SocketSeen::kError) {
      if (const int taken = w.taken_err.load(std::memory_order_acquire); taken != 0) {
        seen = SocketSeen::kError;
        err = taken;
      }
    }
    if (seen == SocketSeen::kNothing) {
      if (err == EINTR) continue;
      return;
    }
    std::string text;
    if (r > 0) {
      seen = feed_peer_bytes(w.rx, &w.rx_len, buf, static_cast<size_t>(r), &text,
                             c.fo.on ? fo_take_path_msg : nullptr, &c.fo);
    }
    if (seen == SocketSeen::kNothing) continue;  // a notice in part: read on
    if (seen == SocketSeen::kGoodbye) {
      w.state = PeerWatch::kGoodbye;
      w.gone = peer_gone_reason(seen, 0, true, c.peer, heartbeat_ms());
      continue;  // EOF follows
    }
    const bool goodbye = w.state == PeerWatch::kGoodbye && seen == SocketSeen::kEof;
    if (seen == SocketSeen::kEof && w.rx_len > 0) {  // EOF inside a notice
      seen = SocketSeen::kBadNotice;
      text = "cut short after " + std::to_string(w.rx_len) + " bytes";
    }
    w.state = PeerWatch::kGone;
    w.gone = peer_gone_reason(seen, err, goodbye, c.peer, heartbeat_ms(), text);
    if (seen == SocketSeen::kError && err == ETIMEDOUT) {
      host_timed_out(c);
    } else {
      leave_host(c);  // the socket no longer watches the host: another comm's does
    }
    return;
  }
}

Status gone_status(Conn& c) {
  return Status(
      Code::kRemoteError,
      c.watch.gone + "; comm " + c.describe_qp(0) +
          (c.nqps > 1 ? " (+" + std::to_string(c.nqps - 1) + " more QPs)" : std::string()));
}

Status fail_with(Conn& c, Status st, bool tell) {
  if (!c.failed()) {
    c.failure = std::move(st);
    if (tell) liveness_tell_peer(c);
  }
  return c.failure;
}

}  // namespace

void liveness_start(Conn& c) {
  if (c.fd >= 0 && !c.watch.fd_counted) {  // a socket of its own (no peer link)
    fd_count_add(FdKind::kCommSocket, 1);
    c.watch.fd_counted = true;
  }
  join_host(c);
  // On every adapter the comm's members use, once each (members may share one).
  for (int m = 0; m < c.nmembers; ++m) {
    Adapter* a = c.members[m].dev ? c.members[m].dev->adapter : nullptr;
    bool seen = a == nullptr;
    for (int k = 0; k < m && !seen; ++k) seen = c.members[k].dev->adapter == a;
    if (seen) continue;
    std::lock_guard<std::mutex> lk(a->comms_mu);
    a->comms.insert(&c);
    c.watch.registered = true;
  }
  const Engine* e = engine();
  if (e != nullptr) c.watch.next_poll_ns = now_ns() + e->config().liveness_poll_ms * 1000000ll;
  c.watch.started = true;
}

void liveness_stop(Conn& c) {
  leave_host(c);
  if (c.watch.registered) {
    for (int m = 0; m < c.nmembers; ++m) {  // erasing twice from a shared adapter is harmless
      Adapter* a = c.members[m].dev->adapter;
      std::lock_guard<std::mutex> lk(a->comms_mu);
      a->comms.erase(&c);
    }
    c.watch.registered = false;
  }
  if (c.link.on()) {  // the goodbye as a frame; the last end closes the link
    link_leave(c.link, c.watch.started && c.watch.state == PeerWatch::kAlive);
    return;
  }
  if (c.watch.started && c.fd >= 0 && c.watch.state == PeerWatch::kAlive) {
    // Best effort, never blocks: a full socket buffer or a dead peer just loses the goodbye.
    (void)::send(c.fd, &kGoodbyeByte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  // What the peer sent (its goodbye, when both close at once), read before the close.
  if (c.watch.started) (void)drain_unread(c.fd);
}

void liveness_close_socket(Conn& c) {
  if (c.fd >= 0) close(c.fd);
  c.fd = -1;
  if (c.watch.fd_counted) {
    fd_count_add(FdKind::kCommSocket, -1);
    c.watch.fd_counted = false;
  }
}

Status liveness_check(Conn& c, bool new_work) {
  if (c.failed()) return c.failure;
  if (c.watch.async_failed.load(std::memory_order_acquire))
    return fail_with(c, Status(Code::kRemoteError, c.watch.async_reason), true);
  if (!c.watch.started) return Status::ok();
  const Engine* e = engine();
  const int period = e ? e->config().liveness_poll_ms : 1000;
  const int64_t now = now_ns();
  if (poll_due(now, &c.watch.next_poll_ns, period)) {
    poll_socket(c);
    c.progress.due = true;  // the data path's progress watchdog (progress.h) runs at this cadence
    c.progress.now_ns = now;
  }
  if (new_work && c.watch.state != PeerWatch::kAlive) return fail_with(c, gone_status(c), false);
  return Status::ok();
}

void liveness_poll_now(Conn& c) {
  if (c.watch.started) poll_socket(c);
}

Status liveness_verdict(Conn& c) {
  if (c.watch.state == PeerWatch::kAlive) return Status::ok();
  return fail_with(c, gone_status(c), false);
}

void liveness_tell_peer(Conn& c) {
  PeerWatch& w = c.watch;
  if (w.told || !w.started || (c.fd < 0 && !c.link.on()) || w.state != PeerWatch::kAlive) return;
  w.told = true;
  if (c.link.on()) {
    std::string why;
    if (!link_send_notice(c.link, c.failure.message(), &why)) {
      SLUICE_INFO(kSubNet, "%s: the failure notice to peer %s was not sent (%s)",
                  c.describe_qp(0).c_str(), c.peer.c_str(), why.c_str());
    } else {
      SLUICE_INFO(kSubNet, "%s: told peer %s this comm failed (peer link)",
                  c.describe_qp(0).c_str(), c.peer.c_str());
    }
    return;
  }
  uint8_t msg[wire::kNoticeMaxBytes];
  const size_t n = wire::encode_notice(c.failure.message(), msg);
  // Best effort, never blocks: the socket is idle (nothing else is sent on it), so a few hundred
  // bytes fit its buffer; a peer that is gone fails by its own bounds.
  const ssize_t sent = ::send(c.fd, msg, n, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (sent != static_cast<ssize_t>(n)) {
    SLUICE_INFO(kSubNet, "%s: the failure notice to peer %s was not sent (%s)",
                c.describe_qp(0).c_str(), c.peer.c_str(),
                sent < 0 ? std::strerror(errno) : "short write");
  } else {
    SLUICE_INFO(kSubNet, "%s: told peer %s this comm failed", c.describe_qp(0).c_str(),
                c.peer.c_str());
  }
}

// ---- Asynchronous events ------------------------------------------------------------------------

void liveness_async_event(Adapter& a, const ibv_async_event& ev) {
  const AsyncEventInfo info = async_event_info(ev.event_type);
  const char* what = ibv_event_type_str(ev.event_type);
  std::string subject;
  switch (info.scope) {
    case AsyncEventInfo::kQp:
      subject = "qpn " + std::to_string(ev.element.qp ? ev.element.qp->qp_num : 0);
      break;
    case AsyncEventInfo::kCq:
      subject = "a completion queue";
      break;
    case AsyncEventInfo::kPort:
      subject = "port " + std::to_string(ev.element.port_num);
      break;
    case AsyncEventInfo::kDevice:
      subject = "the device";
      break;
    case AsyncEventInfo::kNone:
      if (ev.event_type == IBV_EVENT_PORT_ACTIVE) {
        SLUICE_INFO(kSubNet, "%s: port %d is up (%s); new comms can be opened on it",
                    a.name.c_str(), ev.element.port_num, what);
        // Failover comms with a member on it: their paths there may come back at once.
        std::lock_guard<std::mutex> lk(a.comms_mu);
        for (Conn* c : a.comms) {
          if (!c->fo.on) continue;
          for (int m = 0; m < c->nmembers; ++m)
            if (c->members[m].dev->adapter == &a && c->members[m].dev->port == ev.element.port_num)
              fo_post_event(c->fo, uint64_t{1} << (kEvPortUpShift + m));
        }
      } else {
        SLUICE_INFO(kSubNet, "%s: async event %s", a.name.c_str(), what);
      }
      return;
  }
  const std::string reason = a.name + ": async event " + what + " on " + subject + ": " +
                             info.meaning + "; likely cause: " + info.cause;
  std::vector<std::string> hit;
  size_t total = 0;
  size_t already = 0;       // comms this event matches that an earlier event already failed
  size_t failing_over = 0;  // failover comms that lose a path, not the comm
  {
    std::lock_guard<std::mutex> lk(a.comms_mu);
    for (Conn* c : a.comms) {
      bool match = false;
      switch (info.scope) {
        case AsyncEventInfo::kQp:
          for (int q = 0; q < c->nqps; ++q) match = match || c->qp[q].get() == ev.element.qp;
          break;
        case AsyncEventInfo::kCq:
          for (int m = 0; m < c->nmembers; ++m)
            match = match || c->members[m].cq.get() == ev.element.cq;
          break;
        case AsyncEventInfo::kPort:  // a member on this adapter's port (the event's adapter)
          for (int m = 0; m < c->nmembers; ++m)
            match = match || (c->members[m].dev->adapter == &a &&
                              c->members[m].dev->port == ev.element.port_num);
          break;
        case AsyncEventInfo::kDevice:
          match = true;
          break;
        case AsyncEventInfo::kNone:
          break;
      }
      if (!match) continue;
      // A failover comm loses the paths of that member (port, CQ) or of that QP, not the comm:
      // its driver takes the bits at its next call (datapath/failover_dp.cc) and fails the comm
      // itself when no path is left.
      if (c->fo.on && info.scope != AsyncEventInfo::kDevice) {
        uint32_t bits = 0;
        for (int m = 0; m < c->nmembers; ++m) {
          const bool hit = info.scope == AsyncEventInfo::kCq
                               ? c->members[m].cq.get() == ev.element.cq
                               : info.scope == AsyncEventInfo::kPort &&
                                     c->members[m].dev->adapter == &a &&
                                     c->members[m].dev->port == ev.element.port_num;
          if (hit) bits |= 1u << m;
        }
        uint64_t word = uint64_t{bits} << kEvPortDownShift;
        if (info.scope == AsyncEventInfo::kQp) {
          for (int q = 0; q < c->nqps; ++q)
            if (c->qp[q].get() == ev.element.qp) word |= uint64_t{1} << (kEvQpShift + q);
        }
        if (word != 0) fo_post_event(c->fo, word);
        ++failing_over;
        continue;
      }
      if (c->watch.async_failed.load(std::memory_order_relaxed)) {
        ++already;
        continue;
      }
      c->watch.async_reason = reason + "; comm " + c->describe_qp(0);
      c->watch.async_failed.store(true, std::memory_order_release);
      if (hit.size() < 4) hit.push_back(c->describe_qp(0));
      ++total;
    }
  }
  if (failing_over > 0) {
    SLUICE_INFO(kSubNet, "%s; %zu multi-path comm(s) fail over to their other paths",
                reason.c_str(), failing_over);
  }
  if (total == 0 && failing_over > 0) return;
  if (total == 0 && already > 0) {  // logged once: the comms it hits already failed (and WARNed)
    SLUICE_INFO(kSubNet, "%s; the %zu comm(s) it affects already failed", reason.c_str(), already);
    return;
  }
  if (total == 0 &&
      (info.scope == AsyncEventInfo::kQp || info.scope == AsyncEventInfo::kCq)) {  // a comm closing
    SLUICE_INFO(kSubNet, "%s; no open comm uses it (its comm is being closed)", reason.c_str());
    return;
  }
  std::string list;
  for (const auto& h : hit) list += (list.empty() ? "" : "; ") + h;
  if (total > hit.size()) list += "; and " + std::to_string(total - hit.size()) + " more";
  SLUICE_WARN("%s; failing %zu comm(s)%s%s", reason.c_str(), total, total ? ": " : "",
              list.c_str());
}

}  // namespace sluice
