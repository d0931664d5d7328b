// Liveness of a comm's peer and the device's asynchronous events (liveness.cc).
//
// A comm learns of its peer over its peer link (peer_link.h: one socket per peer process, frames
// per comm), or, without one (SLUICE_OOB_LINK=0, an older peer), over the out-of-band TCP socket of
// its handshake, which it then keeps (Conn::fd). Nothing is sent for a comm after the handshake
// except one goodbye when it is closed, and a failure notice (wire.h) when it fails on its own
// side (and a fused comm's path messages), so what arrives tells how the peer went (on a link:
// the goodbye and the notice as frames of the comm, EOF, reset and time-out as the link's):
//  * failure notice: the peer's comm failed (watchdog, completion error, async event); this comm
//    fails at its next call with a WARN quoting the peer's reason (within one liveness poll);
//  * goodbye byte, then EOF: the peer closed its comm (normal close);
//  * EOF without goodbye, or ECONNRESET: the peer's process exited or was killed;
//  * ETIMEDOUT: TCP keepalive (SLUICE_HEARTBEAT_MS) or TCP_USER_TIMEOUT gave up: host down, power
//    off or network cut. Keepalive runs on one comm's socket per peer host (peer_hosts.h); when it
//    times out, every comm to that host is gone with the same reason.
// The data path looks at the socket at most every SLUICE_LIVENESS_POLL_MS (one non-blocking recv;
// a steady_clock read per call otherwise). A peer that is gone fails new work (isend/irecv) at once
// and an outstanding request once a poll of the CQ did not complete it, so a normal close of both
// sides after all work completed raises no error anywhere.
//
// Asynchronous events (QP fatal/access/request errors, CQ errors, port errors) fail the comms they
// concern: each adapter keeps a registry of its comms (Adapter::comms, guarded by comms_mu).
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "health/peer_hosts.h"
#include "sluice/core/base/status.h"
#include "sluice/core/wire/path_msg.h"
#include "sluice/core/wire/wire.h"

namespace sluice {

struct Adapter;
struct Conn;

// Per-comm liveness state (a member of Conn). Driven by the comm's one driving thread (for a
// receive comm, under RecvComm::mu), except `async_*`, which the async-event thread sets.
struct PeerWatch {
  enum State : uint8_t { kAlive = 0, kGoodbye = 1, kGone = 2 };
  int64_t next_poll_ns = 0;  // steady_clock time of the next socket poll
  State state = kAlive;
  bool started = false;     // liveness_start ran: in the adapter's registry, keepalive set
  bool registered = false;  // in Adapter::comms
  bool told = false;        // this side's failure notice was sent (or is not to be sent)
  std::string gone;         // what was seen, once state != kAlive
  // Bytes of a failure notice read so far (a notice may arrive over several polls).
  uint16_t rx_len = 0;
  uint8_t rx[wire::kNoticeMaxBytes] = {};
  // Set once by the async-event thread (reason first, then the flag with release order).
  std::atomic<bool> async_failed{false};
  std::string async_reason;
  // Keepalive per peer host (peer_hosts.h), under liveness.cc's host registry lock. host.owner is
  // set by liveness_start, by this comm's thread, when keepalive is on.
  PeerHostNode host;
  // Set once, by the driver of the host's sentinel comm when its keepalive timed out (reason
  // first, then the flag with release order): this comm's peer is gone at its next poll.
  std::atomic<bool> host_down{false};
  std::string host_reason;
  // The pending error of this comm's socket (SO_ERROR, which reading clears), when another comm of
  // its host read it (liveness.cc check_host): this comm's own poll reports it instead of the EOF
  // its socket then shows.
  std::atomic<int> taken_err{0};
  // Counted among the comms with a socket of their own (fd_census.h) since liveness_start.
  bool fd_counted = false;
};

// ---- Pure logic (unit-tested without verbs) ----------------------------------------------------

inline constexpr uint8_t kGoodbyeByte = 0xb7;  // differs from connect.cc's ready byte (0x5a)
inline constexpr int kKeepaliveProbes = 3;

// TCP keepalive settings for SLUICE_HEARTBEAT_MS (0 = off). Keepalive counts whole seconds, so the
// heartbeat rounds up to seconds; TCP_USER_TIMEOUT (which also decides when keepalive gives up)
// is (probes + 1) heartbeats. A silent peer is noticed within bound_ms = (probes + 2) heartbeats
// (plus one liveness poll).
struct KeepaliveParams {
  bool enabled = false;
  int idle_s = 0;                // TCP_KEEPIDLE
  int intvl_s = 0;               // TCP_KEEPINTVL
  int count = 0;                 // TCP_KEEPCNT
  unsigned user_timeout_ms = 0;  // TCP_USER_TIMEOUT
  long long bound_ms = 0;
};
KeepaliveParams keepalive_params(int heartbeat_ms);

// True when a poll is due at now_ns; then schedules the next one period_ms later.
bool poll_due(int64_t now_ns, int64_t* next_poll_ns, int period_ms);

// What one non-blocking read of the socket saw: r = recv's return, err = errno when r < 0.
enum class SocketSeen { kNothing, kGoodbye, kEof, kError, kGarbage, kNotice, kBadNotice };
SocketSeen classify_read(long r, int err, const uint8_t* buf);

// Feeds bytes the peer sent (a read that returned n > 0) through the socket's grammar: goodbye
// bytes, or one failure notice. Returns kNothing (a notice still incomplete: its prefix is kept in
// rx/rx_len), kGoodbye (only goodbye bytes), kNotice (*text: the peer's reason), kBadNotice (*text:
// what is wrong with it) or kGarbage (neither goodbye nor a notice). Once it returned kNotice,
// kBadNotice or kGarbage the socket says nothing more that matters.
// With a sink (a failover comm, health/path_failover.h), path messages (path_msg.h) may come
// between them, any number: each complete one goes to sink(ctx, msg) and the reading goes on; a
// bad one is kBadNotice (*text says why). Without a sink a path message is kGarbage.
using PathMsgSink = void (*)(void* ctx, const wire::PathMsg& m);
SocketSeen feed_peer_bytes(uint8_t* rx, uint16_t* rx_len, const uint8_t* buf, size_t n,
                           std::string* text, PathMsgSink sink = nullptr, void* ctx = nullptr);

// The meaning of an asynchronous event, what it concerns and its likely cause. Unknown or benign
// events have scope kNone and are only logged at INFO.
struct AsyncEventInfo {
  enum Scope { kNone, kQp, kCq, kPort, kDevice } scope = kNone;
  const char* meaning = "";
  const char* cause = "";
};
AsyncEventInfo async_event_info(ibv_event_type t);

// The reason of a connection setup failure while the local port `port` (e.g. "rxe0:1") is in
// `state`: empty when ACTIVE (the failure has another cause), else what a port that is not ACTIVE
// means (link down) and that connections over it fail until it is up again. It explains whatever
// failed (a route that no longer exists, a TCP connect that timed out) better than that failure.
std::string local_port_hint(const std::string& port, ibv_port_state state);

// What follows a completion error's status in its reason: the likely cause. A port that goes down
// fails the work requests on its QPs, and their completions can be polled before the async
// thread has read the port's event (Soft-RoCE fails them at once, "local QP operation error"; a
// real NIC after its retries, "transport retry counter exceeded"); the status alone then names
// the wrong cause. So: the event's reason when the async thread already failed the comm with it
// (`async_reason`, else empty); else, when the QP's local port `port` (e.g. "rxe0:1") is not
// ACTIVE (`port_state`; IBV_PORT_NOP when it could not be read), that the port went down; else
// what the status says (verbs::wc_status_hint).
std::string completion_error_cause(ibv_wc_status status, const std::string& async_reason,
                                   const std::string& port, ibv_port_state port_state);

// The reason text for a peer that is gone; `seen` and `err` as from classify_read; `text` the
// notice's reason (kNotice) or what was wrong with it (kBadNotice).
std::string peer_gone_reason(SocketSeen seen, int err, bool said_goodbye, const std::string& peer,
                             int heartbeat_ms, const std::string& text = {});

// TCP keepalive and TCP_USER_TIMEOUT for SLUICE_HEARTBEAT_MS on `fd` (a comm's own socket, or a
// peer link's); a refused option is logged at INFO (`peer` names the socket).
void set_socket_keepalive(int fd, const std::string& peer);

// ---- On a comm ---------------------------------------------------------------------------------

// Once the handshake is complete (connect.cc): keepalive options on c.fd, registration for async
// events. Best effort: a refused socket option is logged at INFO.
void liveness_start(Conn& c);
// At close (Conn::~Conn), before the QPs go: unregisters and, for a started comm, says goodbye.
void liveness_stop(Conn& c);
// Once, when c.failure is first set by a cause on this side (dp::fail, an async event): sends the
// failure notice with the reason to a peer still alive. Best effort, never blocks.
void liveness_tell_peer(Conn& c);
// Closes the comm's own socket (after liveness_stop), uncounting it; nothing for a comm on a link.
void liveness_close_socket(Conn& c);
// At the start of isend/irecv (new_work) and of test on a pending request: an async failure fails
// the comm; a due socket poll updates the peer's state; new work fails when the peer is gone.
Status liveness_check(Conn& c, bool new_work);
// In test, after polling the CQ left the request pending: fails the comm when the peer is gone.
Status liveness_verdict(Conn& c);
// A socket poll now, whatever the cadence (failover: a FENCE is awaited). Never blocks.
void liveness_poll_now(Conn& c);

// The async-event thread's handler for QP, CQ and port events (engine.cc).
void liveness_async_event(Adapter& a, const ibv_async_event& ev);

}  // namespace sluice
