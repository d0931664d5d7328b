// SLUICE_CM=rdmacm: the queue pairs of a connection established through librdmacm (see
// cm_choice.h for when, docs/configuration.md "Connection manager" for the design).
//
// The comm's QPs are created on the device's own PD by create_qps (the comm owns them, as in oob
// mode). Each QP gets one rdma_cm_id that carries no QP: rdma_connect/rdma_accept name the QP by
// number, and the QP is moved to RTR/RTS with the attributes rdma_init_qp_attr returns for the id,
// so path, source GID, MTU and PSNs come from the resolved route and the CM exchange. librdmacm
// owns its own device contexts and ids; we own only the ids and channels made here.
//
// Everything is non-blocking: the ids of a connection (and of a listener) report to their own
// mailbox on the process's one rdma_cm event channel (cm_channel.h), whose fd is O_NONBLOCK, read
// from NCCL's polled connect/accept. Bounds are the callers' (SLUICE_CONNECT_TIMEOUT_MS,
// SLUICE_HANDSHAKE_TIMEOUT_MS). Liveness stays on the kept TCP socket (liveness.h); CM
// DISCONNECTED events of established connections are not read (they wait, a few per connection,
// in its mailbox until it closes).
#pragma once

#include <rdma/rdma_cma.h>
#include <sys/socket.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "comm/comm.h"
#include "connect/cm_channel.h"
#include "sluice/core/connect/cm_choice.h"
#include "sluice/core/wire/wire.h"

namespace sluice {

// "RDMA_CM_EVENT_REJECTED (status 28: rejected by the peer's application): <cause>; <fix>".
std::string cm_event_text(rdma_cm_event_type ev, int status);

// One connection's rdma_cm objects: a mailbox on the shared channel and one id per QP. Destroying
// it destroys the ids (a connected id sends a disconnect request), then the mailbox.
class CmLink {
 public:
  static Result<std::unique_ptr<CmLink>> create();
  CmLink() = default;
  CmLink(const CmLink&) = delete;
  CmLink& operator=(const CmLink&) = delete;
  ~CmLink();
  std::unique_ptr<CmMailbox> mailbox;
  rdma_cm_id* ids[wire::kMaxQps] = {};
  // Fusion: the member each id must resolve through (its QP's device); nullptr = the device given
  // to cm_resolve_poll.
  const Device* via[wire::kMaxQps] = {};
  int nqps = 0;
  int done = 0;                          // QPs through the current phase
  bool step_done[wire::kMaxQps] = {};    // per QP, in the current phase
  uint8_t tc = 0, sl = 0;                // overrides of the CM's address vector (NCCL_IB_TC/SL)
  std::string progress = "not started";  // for timeout messages
  Status failure;                        // accept side: a request for this link failed
  // Connect side, address resolution (cm_resolve_more): what each id resolves, so that an attempt
  // that timed out can be made again with a fresh id, until `resolve_until`.
  struct Resolve {
    sockaddr_storage src{}, dst{};
    bool has_src = false;
    int attempts = 0;
  };
  Resolve resolve[wire::kMaxQps] = {};
  std::chrono::steady_clock::time_point resolve_started{}, resolve_until{};
};

// ---- connect side ----
// Address and route resolution each end by this (or the connect deadline, if sooner): a listener
// address with no neighbour answer then fails as RDMA_CM_EVENT_ADDR_ERROR (ETIMEDOUT), named,
// instead of running into SLUICE_CONNECT_TIMEOUT_MS. rping uses 2 s.
inline constexpr int kCmResolveTimeoutMs = 5000;
// Within that bound, resolution goes in attempts of kCmResolveAttemptMs (cm_choice.h says why).

// The connect side's choice of connection manager and, in rdmacm mode, its rdma_cm ids.
struct CmConnector {
  CmFacts facts;
  bool rdmacm = false;
  std::unique_ptr<CmLink> link;
  // At the first connect call. true = resolve the listener's address first (decide), false = oob
  // (logged); an error when SLUICE_CM cannot be honoured.
  Result<bool> begin(const Device& d, bool peer_offers, const std::string& peer);
  // Resolves `listener` (its rdma_cm address, from the handle) with every QP's id, from `d`'s own
  // address of that family where it has one (so the route is checked from this device), and
  // chooses; ok() once chosen (logged with the reason), again while resolving.
  Status decide(const Device& d, const sockaddr_storage& listener, int timeout_ms);
};

// Creates `nqps` ids and starts rdma_resolve_addr of `dst` for each, from `src` (nullptr: the
// kernel picks the source by route).
Status cm_resolve_start(CmLink& l, const sockaddr_storage* src, const sockaddr_storage& dst,
                        int nqps, int timeout_ms);
// Fusion: creates ids first..first+count-1 (the QPs of the paths after path 0) and starts their
// rdma_resolve_addr of `dst` from `src`, each to be resolved through `via`; l.nqps grows to
// first+count and cm_resolve_poll decides once every id so far is resolved.
Status cm_resolve_more(CmLink& l, int first, int count, const sockaddr_storage* src,
                       const sockaddr_storage& dst, const Device* via, int timeout_ms);
// The source address for resolving `dst`'s family from device `d` (so that rdma_cm checks the
// route from `d`): nullptr = none fits (the kernel picks by route), *text says which / why.
const sockaddr_storage* cm_source_address(const Device& d, const sockaddr_storage& dst,
                                          sockaddr_storage* buf, std::string* text);
// Drives address and route resolution. ok() once decided: *route is kThisDevice (every id resolved
// through `d`'s port, routes resolved), kOtherDevice or kFailed (*detail says which / why).
Status cm_resolve_poll(CmLink& l, const Device& d, int timeout_ms, CmFacts::Route* route,
                       std::string* detail);
// After the TCP metadata exchange: one rdma_connect per QP, private data a wire::CmToken.
Status cm_connect_start(CmLink& l, Conn& c, const wire::Meta& local, const wire::Nonce& nonce);
// Drives CONNECT_RESPONSE -> RTR, RTS, rdma_establish per QP. ok() when every QP is at RTS.
Status cm_connect_poll(CmLink& l, Conn& c);

// ---- accept side ----
// The rdma_cm listener of a ListenComm, bound to an IP address of `d` (listen() picks it with
// choose_cm_address).
class CmListener {
 public:
  // nullptr with *why set when rdma_cm cannot serve this device at `addr` (no rdma_ucm, address
  // not on the device...): the handle then offers no rdma_cm port.
  static std::unique_ptr<CmListener> create(const Device& d, const sockaddr_storage& addr,
                                            std::string* why);
  ~CmListener();
  std::unique_ptr<CmMailbox> mailbox;
  rdma_cm_id* id = nullptr;
  uint16_t port = 0;  // network order
};
// Who a connect request belongs to: the comm being accepted and its link; conn == nullptr = none
// (*why says why).
struct CmAcceptTarget {
  Conn* conn = nullptr;
  CmLink* link = nullptr;
};
using CmFind =
    std::function<CmAcceptTarget(const wire::CmToken& t, uint32_t qp_num, std::string* why)>;
// Takes the pending connect requests: a matched one moves to its target's mailbox, its QP to RTR,
// and is accepted; any other is rejected (INFO). Fails only when the listener itself broke.
Status cm_listener_poll(CmListener& l, const wire::Nonce& nonce, const std::string& where,
                        const CmFind& find);
// Prepares a comm being accepted in rdmacm mode: its link (ids arrive with the requests).
Status cm_accept_prepare(std::unique_ptr<CmLink>* out, int nqps, uint8_t tc, uint8_t sl);
// Drives ESTABLISHED -> RTS per QP. ok() when every QP is at RTS, again before.
Status cm_accept_poll(CmLink& l, Conn& c);

}  // namespace sluice
