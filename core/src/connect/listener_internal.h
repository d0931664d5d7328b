// The accept side's shared types (listener.cc, listen_port.cc): the listen comm, a handshake in
// progress, and the listening port that every listen of this process on one address shares.
//
// One listening socket per process and address (issue 32): a listen takes no new port and no new
// descriptor once one listen is open on its address; the connector's metadata carries the nonce of
// the handle it was given, and the port hands each connection to the listen with that nonce. A
// connection naming no open listen is dropped as a stray (its connector sees the connection closed,
// as it would a listener that refused it).
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "comm/fd_census.h"
#include "connect/cm_rdmacm.h"
#include "connect/route_gid.h"
#include "health/peer_link.h"
#include "sluice/core/base/socket_drain.h"
#include "sluice/core/base/status.h"
#include "sluice/core/wire/wire.h"

namespace sluice {

struct ListenPort;

class ListenComm : public CommBase {
 public:
  using Clock = std::chrono::steady_clock;
  ListenComm() : CommBase(CommKind::kListen) {}
  ~ListenComm();
  bool holds_reserve = false;    // counted among the reserved descriptor's users (fd_reserve.h)
  Device* dev = nullptr;         // member 0's
  std::vector<Device*> members;  // the listened device's members (Engine::members_of)
  std::vector<uint32_t> weights;
  ListenPort* port = nullptr;  // the shared listening socket (port_join); null until joined
  uint64_t key = 0;            // the nonce's key in the port's index (port_key)
  wire::Nonce nonce{};         // 128 bits from getrandom(2) (wire::new_nonce)
  std::string addr_text;
  struct Pending;
  // Handshakes in progress that the port handed to this listen (their metadata named its nonce),
  // oldest first. A listen has one connector in NCCL's use, so this is short.
  std::vector<std::unique_ptr<Pending>> pending;
  // Handed over by another listen's accept, not yet taken into `pending` (guarded by the ports'
  // lock, port_lock(); taken by port_service and port_take_inbox).
  std::vector<std::unique_ptr<Pending>> inbox;
  Status failure;   // sticky: the listening socket itself failed, or finalize retired the comm
  uint64_t id = 0;  // its key in the registry (listens())
  // In the reaper's queue (guarded by the registry's q_mu): set when a handshake is handed to it,
  // cleared by the reaper when it finds none left.
  bool queued = false;
  // Held by accept (its one driver) and by the reaper (reap_listens), which only try_locks it
  // except at finalize.
  std::mutex mu;
  Clock::time_point last_accept;  // the last accept call (guarded by mu)
  // The rdma_cm listeners, one per member (index = member), each bound to an address of its
  // member's interface: all members' or none (SLUICE_CM=oob, or one could not bind). Their
  // addresses and ports as text (for messages) and as sent to a fused connector that chose rdmacm
  // (wire::MetaCmAddrs); cm[0]'s is the handle's.
  std::vector<std::unique_ptr<CmListener>> cm;
  std::vector<std::string> cm_text;
  wire::MetaCmAddrs cm_addrs{};
};

struct ListenComm::Pending {
  FdCount counted{FdKind::kHandshake};
  enum Phase {
    kRecvMeta,
    kRecvMembers,
    kRecvLink,
    kGidRoute,
    kSendMeta,
    kRecvReady
  } phase = kRecvMeta;
  bool identified =
      false;  // its metadata passed wire::validate_meta: a Sluice peer of this listener
  int fd = -1;
  std::string peer;
  sockaddr_storage peer_addr{};
  Clock::time_point accepted;  // taken from the backlog
  // accepted + SLUICE_HANDSHAKE_TIMEOUT_MS; once identified, accepted + the larger of it and
  // SLUICE_CONNECT_TIMEOUT_MS (the connector's bound: it may still complete until then).
  Clock::time_point deadline;
  std::unique_ptr<RecvComm> comm;
  wire::Meta local{}, remote{};
  wire::MetaMembers local_x{}, remote_x{};  // fusion: exchanged when the connector sent one
  size_t io = 0;
  uint8_t ready = 0;
  std::unique_ptr<CmLink> cm;  // the connector chose rdmacm: its QPs' ids (cm_rdmacm.h)
  RouteGid gid_route;          // oob: our GID as the route to the connector says (route_gid.h)
  // The peer link (health/peer_link.h): the connector's offer, our answer, and our hold on the
  // link we answered "use" with (our channel registered on it).
  bool link_on = false;
  wire::MetaLink remote_link{}, local_link{};
  LinkHold link_hold;
  // Crossed first connects (answer_link): this answer waits, until defer_until, for the link this
  // process's own first connect to the connector's process makes; `deferred` once it waited.
  bool deferred = false;
  Clock::time_point defer_until{};
  // The handshake runs on the link itself (a hello, listen_port.cc): no socket; our answer goes out
  // as a kHsReply frame and the connector's ready mark comes as kHsReady, on link_hold's channel.
  bool via_link = false;
  std::string drop_reason;  // why it was dropped, when it was (drop())
  ~Pending() {
    // Released after we answered "use" on a peer link: the connector may already be done and on the
    // link (it completes when it has sent its ready byte), and nothing else would tell it, since
    // this handshake's socket is all it would have watched. It gets the reason as a notice.
    if (link_hold.held()) {
      link_hold_fail(std::move(link_hold), remote_link.chan,
                     "the listener released the connection's handshake: " +
                         (drop_reason.empty() ? std::string("its listen was closed or finalized")
                                              : drop_reason));
    }
    if (fd < 0) return;
    // What the connector sent past the part this side read (its link offer behind a Meta whose
    // nonce named no listen), read before the close: the connector reads "closed", not a reset.
    (void)drain_unread(fd);
    close(fd);
  }
};

// The phase after the connector's Meta (and its members' extension): its link offer, when it made
// one, else the route check.
ListenComm::Pending::Phase after_meta_parts(const ListenComm::Pending& p);

// ---- listen_port.cc: the shared listening socket.

// Joins l to the listening port on `addr` (an address with port 0), making the socket when l is the
// first listen on it; indexes l's nonce (drawing a fresh one in the 2^-64 case that its key is
// taken). Sets l.port, l.key, l.addr_text and *bound (the address with its port, for the handle).
Status port_join(ListenComm& l, const sockaddr_storage& addr, sockaddr_storage* bound);
// Undoes port_join: l's index entry and its inbox go. The last listen closes the socket, dropping
// the connections whose metadata had not yet named a listen, unless a send or receive comm is open:
// then the socket lingers for the next listen (close_idle_listen_ports). No lock may be held.
void port_leave(ListenComm& l);
// accept's work on the shared socket (caller holds l.mu): takes the connections waiting in the
// backlog, reads each one's metadata until it names a listen, hands each named one to its listen
// (queued for the reaper), drops strays at their first bad byte or at SLUICE_HANDSHAKE_TIMEOUT_MS,
// and moves l's own into l.pending. Fails only when the listening socket itself is broken, or (with
// its reason told to the connector) when the process is out of descriptors.
Status port_service(ListenComm& l, ListenComm::Clock::time_point now);
// Moves what other listens' accepts handed l into l.pending (caller holds l.mu).
void port_take_inbox(ListenComm& l);
// The reaper's share: drops the not-yet-named connections past their deadline (all of them with
// `all`, at finalize). Without `all` it only try_locks, and costs one comparison when none is due.
size_t port_reap(bool all, ListenComm::Clock::time_point now);
// The listening ports open now (for tests and the fd census's cross-check).
size_t port_count();

// ---- listener.cc, used by the port.

// Drops a handshake: INFO while the connection has not shown itself a Sluice peer of this listener
// (a stray is not an error), WARN once it has (a real peer's connection failed). `where` names the
// listening address, `dev` the listen's device when known.
void drop_handshake(const std::string& where, const Device* dev, const ListenComm::Pending& p,
                    const Status& why);
// Puts a listen with handshakes in progress in the reaper's queue (once).
void queue_for_reaper(ListenComm& l, ListenComm::Clock::time_point now);

}  // namespace sluice
