// The peer link (issue 32, SLUICE_OOB_LINK): one out-of-band TCP socket per peer process, kept for
// as long as a comm to that process is open, instead of one socket per comm. Every comm's
// liveness (EOF, reset, keepalive time-out of the link), goodbye, failure notice and failover path
// messages travel on it as frames naming the receiver's channel (wire/link.h).
//
// How a comm gets onto a link: when the connector's process already has a live link to the
// listener's process and the listener's handle says it takes them (wire::kHandleLinkHello), the
// handshake runs on that link as frames (kHello, kHsReply, kHsReady): no TCP connection at all.
// The listener's process reads a hello whenever any of its calls services the links
// (link_take_hellos: accept's, through an epoll set over the links' sockets, so a call costs the
// links that have bytes, not every link) and hands it to the listen its nonce names
// (listen_port.cc). Otherwise the handshake runs on a TCP connection of its own to the listener's
// shared port (listener_internal.h). The connector offers the newest live
// link it has to the listener's process (named in the handle) with its channel registered on it
// (a LinkHold); the acceptor answers "use" when it has its end of that link alive (holding it in
// turn), else "adopt": the handshake's socket becomes a new link. Once the handshake is done, a
// "use" closes the handshake's socket on both sides (each has read everything the other sent: the
// ready byte is the last); an "adopt" keeps it as the link.
//
// Lifetime: a link closes when its last end (comm or hold) on this side is gone, after the goodbye
// of that end is flushed; the peer's ends then read EOF after their goodbyes, which is a normal
// close. An end that a handshake is about to use holds the link open, so a link is never closed
// under a handshake that this side answered "use" or offered; a link the peer closed meanwhile is
// answered "adopt" by it (it no longer has that link), and both sides go on with a new one.
//
// Threads: the comms on one link are driven by different threads. The link's state is under its
// mutex; a comm's poll only try-locks it (a poll that finds it busy is left to the next period),
// reads what the socket has and sorts the frames into the channels' records, its own and the
// others'. Sends queue the frame and write what the socket takes now; the rest goes out at the
// next poll or send, from whichever comm. Lock order: the registry's mutex, then a link's.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "health/liveness.h"
#include "sluice/core/wire/link.h"

namespace sluice {

struct PeerLink;

// The bound of every wait for a first link to a process (connect.cc, listener.cc): a connect's
// wait for another connect's first link to the same process, a connector's wait for its end of the
// link the listener named (kLinkTheirs), and a listener's deferred answer to crossed first
// connects. Past it each goes on without that link (at worst a second link, or a TCP handshake).
inline constexpr int kLinkFirstWaitMs = 2000;

// This process's id (16 bytes from getrandom, drawn once): the handle's HandleLink and MetaLink.
// A zero id when the kernel's random source failed (then no link is offered: a WARN said why).
const wire::Nonce& link_proc_id();
bool link_proc_id_ok();
uint32_t link_new_chan();
uint64_t link_new_id();

// A comm's end on a link (Conn::link).
struct LinkEnd {
  std::shared_ptr<PeerLink> link;
  uint32_t chan = 0;       // ours: the peer's frames for this comm carry it
  uint32_t peer_chan = 0;  // the peer's: our frames for this comm carry it
  bool on() const { return link != nullptr; }
};

// A handshake's hold on a link with its channel registered on it (frames for the channel that
// arrive before the handshake completes are kept). Released (the channel unregistered, the link
// closed when nothing else holds it) unless it became a comm's end (link_join).
class LinkHold {
 public:
  LinkHold() = default;
  LinkHold(std::shared_ptr<PeerLink> l, uint32_t chan) : link_(std::move(l)), chan_(chan) {}
  LinkHold(LinkHold&& o) noexcept : link_(std::move(o.link_)), chan_(o.chan_) { o.chan_ = 0; }
  LinkHold& operator=(LinkHold&& o) noexcept;
  LinkHold(const LinkHold&) = delete;
  LinkHold& operator=(const LinkHold&) = delete;
  ~LinkHold() { release(); }
  bool held() const { return link_ != nullptr; }
  uint64_t id() const;
  uint8_t role() const;  // wire::kLinkEnd*: which side of its first handshake made this end
  uint32_t chan() const { return chan_; }
  void release();
  // A handshake's frame to the peer's channel `peer_chan` (kHello names our own channel instead).
  // Never blocks; false, with *why, when the link is gone or its queue is full.
  bool send(wire::LinkFrameType t, uint32_t peer_chan, const uint8_t* payload, size_t n,
            std::string* why);
  // What the peer's end has sent this handshake (its reply, its ready mark) or what ended it (a
  // notice, the link gone). Reads the link (never blocks); false when another thread holds it.
  struct Seen {
    bool reply = false;  // the listener's answer arrived: `bytes`
    std::vector<uint8_t> bytes;
    bool ready = false;                      // the connector's ready mark arrived
    SocketSeen seen = SocketSeen::kNothing;  // kNotice / kBadNotice (text), or the link's end
    int err = 0;
    std::string text;
  };
  bool poll(Seen* out);

 private:
  friend LinkEnd link_join(LinkHold&& h, uint32_t peer_chan);
  std::shared_ptr<PeerLink> link_;
  uint32_t chan_ = 0;
};

// A connector's claim to make the first link to a process (link_first): while it is held, other
// connects of this process to that process wait for the link instead of each making its own.
class LinkClaim {
 public:
  LinkClaim() = default;
  LinkClaim(const LinkClaim&) = delete;
  LinkClaim& operator=(const LinkClaim&) = delete;
  ~LinkClaim() { release(); }
  bool held() const { return held_; }
  void release();

 private:
  friend bool link_first(const wire::Nonce& peer, LinkClaim* claim);
  wire::Nonce peer_{};
  bool held_ = false;
};
// Connector, before its offer: true to go on: a live link to `peer` exists (offer it), or none
// does and nobody else is making one (*claim now holds the claim: this connect's handshake makes
// it); false to wait: another connect of this process is making the first link to `peer`.
bool link_first(const wire::Nonce& peer, LinkClaim* claim);
// Acceptor: one of this process's connects is making its first link to `peer` (holds the claim)
// and no live link to `peer` exists yet. Crossed first connects (wire::kLinkOfferTakesTheirs).
bool link_making(const wire::Nonce& peer);

// Connector: the newest live link to process `peer`, `chan` registered on it; !held() when none.
LinkHold link_hold_newest(const wire::Nonce& peer, uint32_t chan);
// Acceptor: this side's end of link `id` to process `peer` whose other end has role `peer_role`,
// when alive, `chan` registered on it; !held() when there is none (the peer then adopts).
LinkHold link_hold_id(const wire::Nonce& peer, uint64_t id, uint8_t peer_role, uint32_t chan);
// The handshake over a held link failed on this side after the peer may have finished with it: the
// peer's end `peer_chan` gets a failure notice with `reason` (best effort), then the hold goes.
void link_hold_fail(LinkHold&& h, uint32_t peer_chan, const std::string& reason);
// The handshake over a held link is done: its channel becomes the comm's end.
LinkEnd link_join(LinkHold&& h, uint32_t peer_chan);
// The handshake is done and its socket `fd` becomes a new link (our end made with `role`), with
// the comm's channel on it. Takes fd. Keepalive (SLUICE_HEARTBEAT_MS) runs on it.
LinkEnd link_adopt(int fd, const wire::Nonce& peer, uint64_t id, uint8_t role, uint32_t chan,
                   uint32_t peer_chan, const std::string& peer_text);

// What a poll found for one end. kNothing: the peer's end is alive as far as the link says.
struct LinkSeen {
  SocketSeen seen = SocketSeen::kNothing;
  int err = 0;
  bool goodbye = false;  // the peer closed its end (normal close)
  std::string text;      // kNotice: the reason; kBadNotice: what was wrong
};
// Reads what the link has (never blocks) and sorts its frames; hands this end's path messages to
// sink(ctx, m), at most `room` of them (the rest wait in the end's record; without a sink a path
// message is refused as kBadNotice). False when another thread holds the link (poll again later).
bool link_poll(LinkEnd& e, PathMsgSink sink, void* ctx, int room, LinkSeen* out);
// Queues a frame for the peer's end and writes what the socket takes (never blocks). False, with
// *why, when the link is gone or its queue is full (the peer has stopped reading).
bool link_send(LinkEnd& e, wire::LinkFrameType t, const uint8_t* payload, size_t n,
               std::string* why);
// The bound on what a link queues past its socket's buffer: a peer process that stops reading
// (stopped, wedged) fails the sends of every comm on the link rather than growing this process's
// memory. 4 MiB is some 16,000 notices or path messages, far more than failover and liveness send.
inline constexpr size_t kLinkTxMaxBytes = size_t{4} << 20;
// link_send of a failure notice carrying `reason` (wire::encode_notice): a comm's failure told to
// its peer, or a handshake the listener released after answering "use".
bool link_send_notice(LinkEnd& e, const std::string& reason, std::string* why);
// At the comm's close: the goodbye frame first when `goodbye`, then the end goes; the last end
// closes the link.
void link_leave(LinkEnd& e, bool goodbye);

// Links open in this process (tests, the fd census).
size_t link_count();

// What the handshakes on links did in this process (counts since it started; tests, benchmarks):
// hellos sent, hellos this side's listens took, and connects that went back to TCP because the
// link ended (or would not take the hello) before the listener answered.
struct LinkHandshakeCounts {
  uint64_t hellos_sent = 0;
  uint64_t hellos_taken = 0;
  uint64_t fell_back = 0;
};
LinkHandshakeCounts link_handshake_counts();
void link_count_hello_taken();
void link_count_fallback();

// ---- Handshakes on the link (the listener's process)

// A connector's hello that arrived on a link: the listener's channel for the new comm is
// registered on the link (`hold`); the listen its metadata names takes it (listen_port.cc), or it
// is dropped, which tells the connector (link_hold_fail to `peer_chan`).
struct LinkHello {
  LinkHold hold;
  uint32_t peer_chan = 0;      // the connector's channel for the comm
  std::vector<uint8_t> bytes;  // [Meta][MetaMembers][MetaLink offer], as the connector sent them
  std::string peer_text;       // the link's peer address, for messages
  sockaddr_storage peer_addr{};
};
// Reads the links that have bytes (the epoll set, when open) and returns the hellos that have
// arrived since the last call, oldest first. O(1) when nothing has arrived.
std::vector<LinkHello> link_take_hellos();
// The epoll set over the links' sockets that link_take_hellos reads: opened at the engine's
// creation (one descriptor for the process, so a comm's set-up takes none) and closed at its
// release. Without it (unit tests) hellos are read when a comm polls its link.
void link_service_open();
void link_service_close();

}  // namespace sluice
