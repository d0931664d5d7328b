// The connect side of connection setup: a non-blocking state machine over an out-of-band TCP socket
// that exchanges wire::Meta with the listener (listener.cc) and brings the send comm's QPs to RTS.
// NCCL polls connect until it returns a comm; nothing here blocks but the first wait for the TCP
// handshake (at most kTcpHandshakeWaitMs, below), and every phase is bounded by
// SLUICE_CONNECT_TIMEOUT_MS.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "base/deadline_queue.h"
#include "comm/comm.h"
#include "comm/fd_census.h"
#include "connect/cm_rdmacm.h"
#include "connect/comm_setup.h"
#include "connect/oob_socket.h"
#include "connect/route_gid.h"
#include "health/liveness.h"
#include "health/peer_link.h"
#include "sluice/core/base/log.h"
#include "sluice/core/base/net_addr.h"
#include "sluice/core/base/qp.h"

namespace sluice {

namespace {

using Clock = std::chrono::steady_clock;

// How long one connect call waits for its TCP handshake to complete before it leaves it to later
// calls. The metadata then goes out in the call that opened the socket: the listener drops a
// connection that has sent nothing within SLUICE_HANDSHAKE_TIMEOUT_MS (its guard against port
// scanners), and NCCL may poll a connect less often than that under load (issue 32), so a gap of a
// poll interval between the TCP handshake and the metadata would get a real peer dropped. A
// handshake on a datacenter network takes well under a millisecond; a slower one goes on without
// waiting (kTcpWait).
constexpr int kTcpHandshakeWaitMs = 20;

// ---- connect side -------------------------------------------------------------------------------

struct ConnectState {
  // rdmacm mode (cm_rdmacm.h) adds kCmResolve before kStart and kCmConnect after kRecvMeta (a
  // fused connection also kCmResolveMore: the ids of the paths after path 0, from each path's own
  // member to the listener member's rdma_cm address); oob mode checks its GID against the route
  // to the listener in kGidRoute (route_gid.h).
  enum Phase {
    kCmResolve,
    kGidRoute,
    kStart,
    kTcpWait,
    kSendMeta,
    kRecvMeta,
    kCmResolveMore,
    kCmConnect,
    kSendReady,
    kRecvRefusal,  // the listener answered with a failure notice (wire.h) instead of its metadata
    kLinkReply,    // the handshake runs on the peer link: waiting for the listener's answer
    kLinkTheirs    // crossed first connects: waiting for our end of the link the listener named
  } phase = kStart;
  FdCount counted{FdKind::kConnect};
  int dev = 0;
  CommConfig cfg;
  wire::Handle handle{};
  sockaddr_storage addr{};
  socklen_t addr_len = 0;
  std::string peer;
  Clock::time_point deadline;
  Clock::time_point next_retry;
  std::unique_ptr<SendComm> comm;
  wire::Meta local{}, remote{};
  size_t io = 0;
  int attempts = 0;
  bool tcp_first_wait = false;  // kTcpWait's first poll of this attempt may wait (see above)
  bool busy = false;  // a connect call is driving it right now (guarded by the registry's mu)
  Clock::time_point last_poll;  // the last connect call on it (guarded by the registry's mu)
  uint8_t tc = 0, sl = 0;
  CmConnector cm;      // SLUICE_CM's choice, and the rdma_cm ids in rdmacm mode (cm_rdmacm.h)
  RouteGid gid_route;  // oob: our GID as the route to the listener says (route_gid.h)
  // Fusion (wire.h): our members and weights (Engine::members_of: a fused device's, or a device
  // and its standby), and whether the member extensions are exchanged (either side has more than
  // one member, the listener knows them).
  std::vector<Device*> members;
  std::vector<uint32_t> weights;
  bool ext = false;
  int npaths = 1;
  wire::MetaMembers local_x{}, remote_x{};
  wire::MetaCmAddrs remote_cm{};  // fused over rdma_cm: the listener members' rdma_cm addresses
  std::vector<uint8_t> refusal;   // kRecvRefusal: the notice's bytes so far
  // The peer link (health/peer_link.h): the listener's process (from the handle), whether we offer
  // the link, our offer and the listener's answer, and our hold on the link we proposed.
  wire::Nonce listener_proc{};
  bool listener_has_link = false;
  bool link_offer = false;
  wire::MetaLink local_link{}, remote_link{};
  LinkHold link_hold;
  LinkClaim link_claim;  // this connect makes the first link to the listener's process
  bool link_checked = false;
  // The listener's process takes handshakes on a link (wire::kHandleLinkHello); this one runs on
  // the held link (no TCP connection); it fell back to TCP (the link ended before the answer).
  bool listener_hello = false;
  bool via_link = false;
  bool no_hello = false;
  // Its end of the link the listener named did not come in time (kLinkTheirs): the new handshake's
  // offer no longer takes the listener's choice, which would name that link again.
  bool no_theirs = false;
  Clock::time_point link_wait_until;  // how long it waits for another connect's first link
  Clock::time_point theirs_until;     // kLinkTheirs: how long it waits for its end of that link
};

int remaining_ms(const ConnectState& s) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(s.deadline - Clock::now());
  return static_cast<int>(std::max<long long>(1, left.count()));
}

// Connections in progress, found again from NCCL's handle. Allocated once and never destroyed: no
// static destructor may release verbs objects after their context is gone, so every state is
// released by a plugin call (its own completion, reap_abandoned_connects, or finalize).
struct ConnectRegistry {
  std::mutex mu;
  std::unordered_map<uint64_t, std::unique_ptr<ConnectState>> states;
  uint64_t next_id = 1;
  // When each state may next be abandoned (its deadline, then its last poll plus the bound), so the
  // reaper that every connect, accept and listen call runs looks only at what is due.
  DeadlineQueue due;
};

// States the reaper looks at per call at most (what is due beyond them waits for the next call).
constexpr size_t kReapBatch = 8;
ConnectRegistry& connects() {
  static auto* r = new ConnectRegistry;  // NOLINT: deliberately never destroyed (see above)
  return *r;
}

bool retryable(int err) {
  return err == ECONNREFUSED || err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH ||
         err == ECONNRESET || err == EAGAIN;
}

// Drops the failed TCP attempt and schedules the next one from kStart, backing off 20 ms per
// attempt up to 500 ms; connect_step's deadline bounds the whole.
void schedule_retry(ConnectState& s) {
  close(s.comm->c.fd);
  s.comm->c.fd = -1;
  s.phase = ConnectState::kStart;
  s.next_retry = Clock::now() + std::chrono::milliseconds(std::min(20 * s.attempts, 500));
}

Status start_tcp(ConnectState& s) {
  int fd = socket(s.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    const int err = errno;
    if (fd_exhausted(err)) return fd_exhausted_status("connect to " + s.peer + ": socket()", err);
    return errno_status(Code::kSystemError, "socket()", err);
  }
  s.comm->c.fd = fd;
  SLUICE_RETURN_IF_ERROR(set_nonblocking(fd));
  ++s.attempts;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&s.addr), s.addr_len) == 0) return Status::ok();
  if (errno == EINPROGRESS) return Status::again();
  int err = errno;
  if (retryable(err)) {  // try again from kStart after a short back-off, until the deadline
    schedule_retry(s);
    return Status(Code::kAgain, "retry");
  }
  return errno_status(Code::kRemoteError, "connect to " + s.peer, err);
}

// Before the offer: whether to go on now. Another connect of this process making the first link to
// the listener's process (its handshake in flight) makes this one wait for that link, up to
// kLinkFirstWaitMs, so that a burst of connects to one peer (NCCL's rounds) shares one link
// instead of each adopting its own socket; past the wait (that handshake is slow or was left
// unpolled) it goes on, and at worst makes a second link.
bool link_ready(ConnectState& s) {
  if (s.link_checked || !engine()->config().oob_link || !s.listener_has_link) return true;
  if (s.link_wait_until == Clock::time_point{})
    s.link_wait_until = Clock::now() + std::chrono::milliseconds(kLinkFirstWaitMs);
  if (!link_first(s.listener_proc, &s.link_claim) && Clock::now() < s.link_wait_until &&
      Clock::now() < s.deadline)
    return false;
  s.link_checked = true;
  return true;
}

// The peer link's offer (health/peer_link.h), when both sides have the link on: our channel for
// the comm, held on the newest live link to the listener's process if we have one.
void offer_link(ConnectState& s) {
  if (!engine()->config().oob_link || !s.listener_has_link || !link_proc_id_ok()) return;
  const uint32_t chan = link_new_chan();
  s.link_hold = link_hold_newest(s.listener_proc, chan);
  s.local_link = wire::make_meta_link(link_proc_id(), wire::kLinkOffer, s.link_hold.id(),
                                      s.link_hold.role(), chan);
  if (!s.no_theirs) s.local_link.flags = wire::kLinkOfferTakesTheirs;  // kLinkTheirs below
  s.local.features |= wire::kMetaFeatureLink;
  s.link_offer = true;
}

// What the connector sends the listener: Meta, then (fusion) the members' extension right behind
// it, then (peer link) our offer, as one byte stream (TCP) or one frame (a hello on the link).
constexpr size_t kMetaOutMax =
    sizeof(wire::Meta) + sizeof(wire::MetaMembers) + sizeof(wire::MetaLink);
size_t meta_bytes(const ConnectState& s, uint8_t* out) {
  size_t n = 0;
  auto put = [&](const void* src, size_t len) {
    std::memcpy(out + n, src, len);
    n += len;
  };
  put(&s.local, sizeof s.local);
  if (s.ext) put(&s.local_x, sizeof s.local_x);
  if (s.link_offer) put(&s.local_link, sizeof s.local_link);
  return n;
}

// Whether this connect's handshake runs on the link it offers: the listener's process takes
// handshakes there, we have a live link to it (held), and both sides have it on.
bool hello_ok(const ConnectState& s) {
  return s.link_offer && s.link_hold.held() && s.listener_hello && !s.no_hello &&
         engine()->config().oob_link_handshake;
}

// The handshake goes back to a TCP connection of its own (the link ended before the listener's
// answer, or would not take the hello), with a fresh offer: the newest link still alive, if any.
void fall_back_to_tcp(ConnectState& s, const std::string& why) {
  SLUICE_INFO(kSubNet, "connect to %s: %s; making the handshake over TCP instead", s.peer.c_str(),
              why.c_str());
  link_count_fallback();
  s.no_hello = true;
  s.via_link = false;
  s.link_hold.release();
  offer_link(s);
  s.phase = ConnectState::kStart;
}

// The listener's answer on the link: [Meta][MetaMembers][MetaCmAddrs][MetaLink], the parts its
// features and ours name, exactly.
Status read_reply(ConnectState& s, const std::vector<uint8_t>& b) {
  wire::HsParts parts(b);
  auto take = [&](void* dst, size_t n) { return parts.take(dst, n); };
  bool whole = take(&s.remote, sizeof s.remote);
  if (whole) {
    SLUICE_RETURN_IF_ERROR(wire::check_meta_prefix(&s.remote, sizeof s.remote)
                               .with_context("accept reply from " + s.peer));
  }
  if (whole && s.ext) whole = take(&s.remote_x, sizeof s.remote_x);
  if (whole && s.ext && s.cm.rdmacm) whole = take(&s.remote_cm, sizeof s.remote_cm);
  if (whole && (s.remote.features & wire::kMetaFeatureLink) != 0)
    whole = take(&s.remote_link, sizeof s.remote_link);
  if (!whole || !parts.done()) {
    return Status(Code::kRemoteError, "the listener at " + s.peer + " answered on the peer link " +
                                          "with " + std::to_string(b.size()) +
                                          " bytes, not the parts its metadata names");
  }
  return Status::ok();
}

// After the ready byte: the comm's end on the link the listener chose. "use": the held link, and
// this connection's socket closes (the listener has read all we sent; it sends nothing more here).
// "adopt": the socket becomes the link.
void join_link(ConnectState& s) {
  Conn& c = s.comm->c;
  if (s.remote_link.verdict == wire::kLinkUse) {
    c.link = link_join(std::move(s.link_hold), s.remote_link.chan);
    if (c.fd >= 0) close(c.fd);
    c.fd = -1;
    return;
  }
  s.link_hold.release();
  c.link = link_adopt(c.fd, s.listener_proc, s.remote_link.link_id, wire::kLinkEndConnector,
                      s.local_link.chan, s.remote_link.chan, s.peer);
  c.fd = -1;
}

Status build_send_comm(ConnectState& s) {
  Engine* e = engine();
  Device* d = s.members[0];
  auto comm = std::move(s.comm);
  comm->c.dev = d;
  const int qpp = e->config().qps_per_connection;
  SLUICE_RETURN_IF_ERROR(set_members(comm->c, s.members, s.npaths, qpp));
  comm->c.peer = s.peer;
  comm->c.local_desc = port_label(*d);
  const Config& cfg = e->config();
  // FIFO + local completion records, one registration. A fused comm's entries are cell pairs.
  size_t fifo_bytes = sizeof(wire::CtsEntry) * wire::kFifoSlots * wire::kEntriesPerSlot *
                      static_cast<size_t>(wire::cts_cells(comm->c.npaths));
  size_t rec_bytes = sizeof(wire::DoneRecord) * wire::kFifoSlots;
  // The eager path's grant block (wire/eager.h), written by the receiver: after the records, at an
  // address the receiver derives from the FIFO's (eager_grant_offset).
  // Then a 64-byte cell: the source of the eager head report (16 bytes) and of an ask (32 bytes).
  const size_t grant_bytes = sizeof(wire::EagerGrant) + 64;
  size_t pool_bytes = sizeof(SendReq) * SendComm::kPool;
  size_t free_bytes = sizeof(uint16_t) * SendComm::kPool;
  const size_t reg_bytes = fifo_bytes + rec_bytes + grant_bytes;
  auto mem = NumaBuffer::allocate(reg_bytes + pool_bytes + free_bytes, numa_of(*d));
  if (!mem.is_ok()) return mem.status();
  comm->mem = std::move(mem).value();
  char* base = static_cast<char*>(comm->mem.data());
  comm->fifo = reinterpret_cast<wire::CtsEntry*>(base);
  comm->records = reinterpret_cast<wire::DoneRecord*>(base + fifo_bytes);
  comm->eg.block = reinterpret_cast<wire::EagerGrant*>(base + fifo_bytes + rec_bytes);
  comm->eg.head_src = reinterpret_cast<uint64_t*>(comm->eg.block + 1);
  comm->eg.ask_src = reinterpret_cast<char*>(comm->eg.head_src + 2);  // 32 bytes of the cell's 48
  // The free list right after the registered part, in its last page (which registration has
  // already made resident), then the pool: an idle comm touches no page for its free list.
  comm->free_list = reinterpret_cast<uint16_t*>(base + reg_bytes);
  comm->pool = reinterpret_cast<SendReq*>(base + reg_bytes + free_bytes);
  static_assert(std::is_trivially_destructible_v<SendReq>, "lives in raw comm memory");
  static_assert(sizeof(wire::DoneRecord) % alignof(SendReq) == 0);
  static_assert(sizeof(wire::EagerGrant) % alignof(SendReq) == 0);
  static_assert(sizeof(uint16_t) * SendComm::kPool % alignof(SendReq) == 0);
  SLUICE_RETURN_IF_ERROR(register_comm_memory(*d, comm->mem, reg_bytes, &comm->mem_mr));
  SLUICE_RETURN_IF_ERROR(register_member_memory(comm->c, comm->mem, reg_bytes, comm->mem_mr));
  // Requests are constructed when first handed out (datapath.cc), so pool pages a connection
  // never uses are never touched.
  for (int i = 0; i < SendComm::kPool; ++i)
    comm->free_list[i] = static_cast<uint16_t>(SendComm::kPool - 1 - i);
  comm->free_top = SendComm::kPool;

  fill_local_meta(*d, 0, s.handle.nonce, &s.local);
  int nqps = s.npaths * qpp;
  QpCaps caps{kSendSqDepth, 1, 1, 1, 0};
  // Every WR can complete into the CQ when a QP is flushed in error.
  int cqe = nqps * static_cast<int>(kSendSqDepth + 1) - 1;
  SLUICE_RETURN_IF_ERROR(create_qps(comm->c, nqps, caps, cqe, &s.local));
  s.tc = static_cast<uint8_t>(cfg.traffic_class >= 0     ? cfg.traffic_class
                              : s.cfg.traffic_class >= 0 ? s.cfg.traffic_class
                                                         : 0);
  // As NCCL's: NCCL_IB_SL, else the communicator's traffic class (when it is a valid SL), else 0.
  s.sl = static_cast<uint8_t>(cfg.service_level >= 0 ? cfg.service_level
                              : s.cfg.traffic_class >= 0 && s.cfg.traffic_class <= 15
                                  ? s.cfg.traffic_class
                                  : 0);
  s.local.traffic_class = s.tc;
  s.local.service_level = s.sl;
  s.local.buf_addr = reinterpret_cast<uintptr_t>(comm->fifo);
  s.local.buf_rkey = comm->mem_mr->rkey;
  s.local.split_data = static_cast<uint8_t>(cfg.split_data_on_qps);
  comm->c.split = cfg.split_data_on_qps != 0;
  comm->ar_threshold = d->ar.on ? d->ar.threshold : SIZE_MAX;
  s.comm = std::move(comm);
  return Status::ok();
}

std::string timeout_cause(const ConnectState& s) {
  if (s.phase == ConnectState::kCmResolve || s.phase == ConnectState::kCmResolveMore) {
    return "rdma_cm got no answer for the listener's address (no ARP/neighbour reply: host down "
           "or not on this subnet); check `ip neigh` and that both sides can `rping` each other, "
           "or set SLUICE_CM=oob";
  }
  if (s.phase == ConnectState::kCmConnect) {
    return "the listener did not answer the rdma_cm connect requests (its process stalled, or "
           "rdma_cm traffic is filtered); check that both sides can `rping` each other";
  }
  if (s.phase == ConnectState::kSendMeta || s.phase == ConnectState::kRecvMeta ||
      s.phase == ConnectState::kRecvRefusal) {
    // The TCP connection is up: the network and NCCL_SOCKET_IFNAME are not the problem.
    return "the listener's host took the TCP connection, but the listening process never "
           "answered it: it does not call accept (stalled, or busy elsewhere), or cannot take the "
           "connection (out of file descriptors: look for the RLIMIT_NOFILE message in its log)";
  }
  if (s.phase == ConnectState::kSendReady) {
    return "the listener stopped reading before the last byte of the handshake";
  }
  if (s.phase == ConnectState::kLinkReply) {
    return "the listener's process did not answer the handshake sent on the peer link: it does not "
           "call accept (stalled, or busy elsewhere)";
  }
  if (s.phase == ConnectState::kLinkTheirs) {
    return "this process's end of the peer link the listener named did not come: this process "
           "does not call accept for the listener's own connect to it";
  }
  return "the peer is not reachable on that address (host down, its link down, or packets "
         "filtered) or did not accept; check NCCL_SOCKET_IFNAME and firewalls";
}

static_assert((wire::kMetaMagic & 0xff) != wire::kNoticeMagic,
              "a refusal's first byte is never metadata's");

// kRecvRefusal: reads the listener's failure notice (its process could not take the connection:
// out of file descriptors, listener.cc) and fails with its text. again() while it is incomplete.
Status recv_refusal(ConnectState& s) {
  const int fd = s.comm->c.fd;
  Status end = Status::again();
  while (s.refusal.size() < wire::kNoticeMaxBytes) {
    uint8_t buf[wire::kNoticeMaxBytes];
    const ssize_t r = ::recv(fd, buf, wire::kNoticeMaxBytes - s.refusal.size(), 0);
    if (r > 0) {
      s.refusal.insert(s.refusal.end(), buf, buf + r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    end = Status(Code::kRemoteError, r == 0 ? std::string("closed") : std::strerror(errno));
    break;
  }
  std::string text;
  size_t used = 0;
  switch (wire::decode_notice(s.refusal.data(), s.refusal.size(), &text, &used)) {
    case wire::NoticeParse::kOk:
      return Status(Code::kRemoteError,
                    "the listener at " + s.peer + " refused the connection: " + text);
    case wire::NoticeParse::kBad:
      return Status(Code::kRemoteError,
                    "the listener at " + s.peer + " answered with a malformed refusal: " + text);
    case wire::NoticeParse::kIncomplete:
      break;
  }
  if (end.is_again()) return end;
  return Status(Code::kRemoteError, "the listener at " + s.peer +
                                        " refused the connection, but its "
                                        "reason was cut short (" +
                                        std::to_string(s.refusal.size()) + " bytes, then " +
                                        end.message() + ")");
}

// Fused over rdma_cm: starts resolving the ids of every path after path 0 (kCmResolve resolved path
// 0's, member 0 to the handle's address), each from its own member's address to the listener
// member it faces (wire.h: path p joins members p % ns and p % nr), so rdma_cm checks every route.
Status resolve_more_paths(ConnectState& s) {
  CmLink& l = *s.cm.link;
  const int qpp = s.local_x.qps_per_path;
  const int ns = static_cast<int>(s.members.size());
  const int nr = s.remote_x.nmembers;
  std::string paths;
  for (int p = 1; p < s.npaths; ++p) {
    const Device& d = *s.members[wire::path_member(p, ns)];
    const int rm = wire::path_member(p, nr);
    const sockaddr_storage dst = wire::cm_member_address(s.remote_cm, rm);
    sockaddr_storage buf{};
    std::string from;
    const sockaddr_storage* src = cm_source_address(d, dst, &buf, &from);
    if (src == nullptr) {
      return Status(Code::kInvalidUsage,
                    "SLUICE_CM=rdmacm over a fused connection: " + d.name +
                        " has no address to resolve the listener's member " + std::to_string(rm) +
                        " at " + sockaddr_text(dst) + " from (" + from +
                        "); give its network interface one, or set SLUICE_CM=oob");
    }
    SLUICE_RETURN_IF_ERROR(cm_resolve_more(l, p * qpp, qpp, src, dst, &d,
                                           std::min(remaining_ms(s), kCmResolveTimeoutMs)));
    paths += (p > 1 ? ", " : "") + std::string("path ") + std::to_string(p) + " " + d.name + " (" +
             from + ") -> " + sockaddr_text(dst);
  }
  l.progress = "resolving the listener members' addresses: " + paths;
  SLUICE_INFO(kSubNet, "connect to %s over rdma_cm, fused: %s", s.peer.c_str(), paths.c_str());
  return Status::ok();
}

// The listener's answer is in (s.remote and the parts its features name, from the socket or the
// link): checked, and the QPs brought up; sets the next phase.
Status after_reply(ConnectState& s) {
  SLUICE_RETURN_IF_ERROR(
      wire::validate_meta(s.remote, 1, s.handle.nonce).with_context("accept reply from " + s.peer));
  const bool link = s.link_offer && (s.remote.features & wire::kMetaFeatureLink) != 0;
  if (s.via_link && (!link || s.remote_link.verdict != wire::kLinkUse)) {
    return Status(Code::kRemoteError, "the listener at " + s.peer +
                                          " answered a handshake on the peer link with no link "
                                          "or another link than the one it came on");
  }
  if (link) {
    SLUICE_RETURN_IF_ERROR(
        wire::validate_link_answer(s.remote_link, s.link_hold.id(), s.listener_proc,
                                   (s.local_link.flags & wire::kLinkOfferTakesTheirs) != 0)
            .with_context("accept reply from " + s.peer));
    if (s.remote_link.verdict == wire::kLinkUse && !s.link_hold.held()) {
      // Crossed first connects (listener.cc answer_waits): the listener named the link its own
      // connect to this process made. Our end of it is made by our accept of that connect (its
      // ready byte read): wait for it before anything of this reply is used (kLinkTheirs).
      s.theirs_until = Clock::now() + std::chrono::milliseconds(kLinkFirstWaitMs);
      s.phase = ConnectState::kLinkTheirs;
      return Status::ok();
    }
  } else if (s.link_offer) {  // the listener keeps a socket per comm: so do we
    s.link_offer = false;
    s.link_hold.release();
  }
  if (s.ext) {
    if ((s.remote.features & wire::kMetaFeatureMembers) == 0)
      return Status(Code::kRemoteError,
                    "the listener at " + s.peer + " answered without its members' metadata");
    SLUICE_RETURN_IF_ERROR(
        wire::validate_members(s.remote, s.remote_x).with_context("accept reply from " + s.peer));
    SLUICE_RETURN_IF_ERROR(wire::check_peer_members(s.local_x, s.remote_x));
  } else {
    s.local_x = wire::members_of_meta(s.local);
    s.remote_x = wire::members_of_meta(s.remote);
  }
  SendComm& c = *s.comm;
  c.remote_records = s.remote.buf_addr;
  SLUICE_RETURN_IF_ERROR(setup_send_eager(c, s.local.features, s.remote.features));
  s.io = 0;
  if (s.cm.rdmacm) {
    if (s.remote.cm != wire::kMetaCmRdmacm)
      return Status(Code::kRemoteError, "the listener at " + s.peer + " answered for oob");
    SLUICE_RETURN_IF_ERROR(accept_peer_meta(c.c, s.local, s.remote));
    if (s.npaths > 1) {
      SLUICE_RETURN_IF_ERROR(wire::validate_cm_addrs(s.remote_x, s.remote_cm)
                                 .with_context("accept reply from " + s.peer));
      SLUICE_RETURN_IF_ERROR(resolve_more_paths(s));
      s.phase = ConnectState::kCmResolveMore;
      return Status::ok();
    }
    SLUICE_RETURN_IF_ERROR(cm_connect_start(*s.cm.link, c.c, s.local, s.handle.nonce));
    set_paths(c.c, s.local_x, s.remote_x, true, s.remote.features);
    s.phase = ConnectState::kCmConnect;
    return Status::ok();
  }
  s.gid_route.check_pair(*c.c.dev, s.local, s.remote, s.peer);
  SLUICE_RETURN_IF_ERROR(connect_qps(c.c, s.local, s.remote, s.local_x, s.remote_x, s.tc, s.sl));
  set_paths(c.c, s.local_x, s.remote_x, true, s.remote.features);
  s.phase = ConnectState::kSendReady;
  return Status::ok();
}

// One step of the connector. ok() with *out set = connected; again = call later.
Status connect_step(ConnectState& s, SendComm** out) {
  Engine* e = engine();
  if (Clock::now() > s.deadline) {
    return Status(Code::kRemoteError,
                  "connection to " + s.peer + " not established within SLUICE_CONNECT_TIMEOUT_MS=" +
                      std::to_string(e->config().connect_timeout_ms) + " ms (" +
                      std::to_string(s.attempts) + " TCP attempts" +
                      (s.cm.link ? "; rdma_cm: " + s.cm.link->progress : std::string()) +
                      "): " + timeout_cause(s));
  }
  for (;;) {
    switch (s.phase) {
      case ConnectState::kCmResolve: {
        sockaddr_storage cm_addr{};  // the listener's rdma_cm address (begin: it offers one)
        wire::handle_cm_address(s.handle, &cm_addr);
        SLUICE_RETURN_IF_ERROR(s.cm.decide(*s.members[0], cm_addr, remaining_ms(s)));
        // What rdma_cm found for the out-of-band address serves oob's GID check only when it
        // resolved that very address; otherwise kGidRoute resolves it.
        if (same_address(cm_addr, s.addr))
          s.gid_route.reuse(*s.members[0], s.addr, s.cm.facts, "connect");
        s.phase = s.cm.rdmacm ? ConnectState::kStart : ConnectState::kGidRoute;
        continue;
      }
      case ConnectState::kGidRoute:
        SLUICE_RETURN_IF_ERROR(s.gid_route.step(*s.members[0], s.addr, remaining_ms(s), "connect"));
        s.phase = ConnectState::kStart;
        continue;
      case ConnectState::kStart: {
        if (Clock::now() < s.next_retry) return Status::again();
        if (!s.comm->c.dev && !link_ready(s)) return Status::again();
        if (!s.comm->c.dev) {
          SLUICE_RETURN_IF_ERROR(build_send_comm(s));
          s.gid_route.apply(&s.local);
          if (s.ext) {  // after the route's GID choice: member 0 is Meta's own
            s.local.features |= wire::kMetaFeatureMembers;
            fill_local_members(s.comm->c, s.local, s.weights, &s.local_x);
          }
          if (s.cm.rdmacm) {
            s.local.cm = wire::kMetaCmRdmacm;
            s.cm.link->tc = s.tc;
            s.cm.link->sl = s.sl;
          }
          offer_link(s);
        }
        if (!s.via_link && hello_ok(s)) {  // a known peer: the handshake on the link, no TCP
          uint8_t out[kMetaOutMax];
          const size_t n = meta_bytes(s, out);
          std::string why;
          if (s.link_hold.send(wire::LinkFrameType::kHello, 0, out, n, &why)) {
            s.via_link = true;
            s.phase = ConnectState::kLinkReply;
            continue;
          }
          fall_back_to_tcp(s, "the peer link would not take the handshake (" + why + ")");
        }
        Status st = start_tcp(s);
        if (st.is_ok()) {
          s.phase = ConnectState::kSendMeta;
          s.io = 0;
          continue;
        }
        if (st.is_again()) {
          // message "retry" = refused at once: stay in kStart; otherwise wait for the handshake,
          // briefly in this call.
          if (st.message().empty()) {
            s.phase = ConnectState::kTcpWait;
            s.tcp_first_wait = true;
            continue;
          }
          return Status::again();
        }
        return st;
      }
      case ConnectState::kTcpWait: {
        pollfd p{s.comm->c.fd, POLLOUT, 0};
        const int wait = s.tcp_first_wait ? std::min(remaining_ms(s), kTcpHandshakeWaitMs) : 0;
        s.tcp_first_wait = false;
        int r = poll(&p, 1, wait);
        if (r == 0) return Status::again();
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(s.comm->c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
          if (retryable(err)) {
            schedule_retry(s);
            return Status::again();
          }
          return errno_status(Code::kRemoteError, "connect to " + s.peer, err);
        }
        s.phase = ConnectState::kSendMeta;
        s.io = 0;
        continue;
      }
      case ConnectState::kSendMeta: {
        uint8_t out[kMetaOutMax];
        const size_t n = meta_bytes(s, out);
        Status st = send_some(s.comm->c.fd, out, n, &s.io, s.peer);
        if (!st.is_ok()) return st;
        s.phase = ConnectState::kRecvMeta;
        s.io = 0;
        continue;
      }
      case ConnectState::kRecvMeta: {
        if (s.io == 0) {
          // The first byte tells the listener's metadata from a refusal (a failure notice: its
          // process is out of file descriptors, listener.cc).
          Status st = recv_some(s.comm->c.fd, &s.remote, 1, &s.io, s.peer);
          if (!st.is_ok()) return st;
          if (reinterpret_cast<const uint8_t*>(&s.remote)[0] == wire::kNoticeMagic) {
            s.refusal.assign(1, wire::kNoticeMagic);
            s.phase = ConnectState::kRecvRefusal;
            continue;
          }
        }
        // Meta, then (fusion) the members' extension, then (fused over rdma_cm) the members'
        // rdma_cm addresses; s.io counts the bytes of all of them.
        struct Part {
          void* p;
          size_t n;
        };
        const Part parts[] = {{&s.remote, sizeof s.remote},
                              {&s.remote_x, s.ext ? sizeof s.remote_x : 0},
                              {&s.remote_cm, s.ext && s.cm.rdmacm ? sizeof s.remote_cm : 0}};
        Status st = Status::ok();
        size_t at = 0;
        for (const Part& part : parts) {
          if (st.is_ok() && part.n > 0 && s.io < at + part.n) {
            size_t io = s.io - at;
            st = recv_some(s.comm->c.fd, part.p, part.n, &io, s.peer);
            s.io = at + io;
          }
          at += part.n;
        }
        if (!st.is_ok()) return st;
        // Then (peer link) the listener's answer to our offer: its Meta says whether it follows.
        const bool link = s.link_offer && (s.remote.features & wire::kMetaFeatureLink) != 0;
        if (link && s.io < at + sizeof s.remote_link) {
          size_t io = s.io - at;
          st = recv_some(s.comm->c.fd, &s.remote_link, sizeof s.remote_link, &io, s.peer);
          s.io = at + io;
          if (!st.is_ok()) return st;
        }
        SLUICE_RETURN_IF_ERROR(after_reply(s));
        continue;
      }
      case ConnectState::kCmResolveMore: {
        CmFacts::Route route = CmFacts::Route::kNotTried;
        std::string detail;
        Status st = cm_resolve_poll(*s.cm.link, *s.members[0], remaining_ms(s), &route, &detail);
        if (!st.is_ok()) return st;
        if (route != CmFacts::Route::kThisDevice) {
          return Status(
              Code::kRemoteError,
              "SLUICE_CM=rdmacm over a fused connection: a path's rdma_cm route to the "
              "listener's member does not go through its own member (" +
                  s.cm.link->progress + "): " +
                  (route == CmFacts::Route::kOtherDevice ? "it routes through " + detail : detail) +
                  "; give each member's network interface an address in the subnet of "
                  "the peer member it faces, or set SLUICE_CM=oob");
        }
        SendComm& c = *s.comm;
        SLUICE_RETURN_IF_ERROR(cm_connect_start(*s.cm.link, c.c, s.local, s.handle.nonce));
        set_paths(c.c, s.local_x, s.remote_x, true, s.remote.features);
        s.phase = ConnectState::kCmConnect;
        continue;
      }
      case ConnectState::kCmConnect: {
        Status st = cm_connect_poll(*s.cm.link, s.comm->c);
        if (!st.is_ok()) return st;
        s.phase = ConnectState::kSendReady;
        continue;
      }
      case ConnectState::kRecvRefusal:
        return recv_refusal(s);
      case ConnectState::kLinkReply: {
        LinkHold::Seen r;
        if (!s.link_hold.poll(&r)) return Status::again();  // another thread reads the link
        if (r.reply) {
          SLUICE_RETURN_IF_ERROR(read_reply(s, r.bytes));
          SLUICE_RETURN_IF_ERROR(after_reply(s));
          continue;
        }
        if (r.seen == SocketSeen::kNothing) return Status::again();
        if (r.seen == SocketSeen::kNotice) {
          return Status(Code::kRemoteError,
                        "the listener at " + s.peer + " refused the connection: " + r.text);
        }
        if (r.seen == SocketSeen::kBadNotice) {
          return Status(Code::kRemoteError,
                        "the listener at " + s.peer +
                            " answered on the peer link with a bad frame: " + r.text);
        }
        // The link ended first: the listener's process closed its last comm to us meanwhile (its
        // end went with it), or it is gone, which the TCP attempts will tell.
        fall_back_to_tcp(s, "the peer link ended before the listener answered");
        continue;
      }
      case ConnectState::kLinkTheirs: {
        s.link_hold = link_hold_id(s.listener_proc, s.remote_link.link_id, s.remote_link.end_role,
                                   s.local_link.chan);
        if (s.link_hold.held()) {
          SLUICE_INFO(kSubNet,
                      "connect to %s: the listener named its process's peer link to this one "
                      "(made by a connect of either): one link for the pair",
                      s.peer.c_str());
          SLUICE_RETURN_IF_ERROR(after_reply(s));  // now the use of the offered (held) link
          continue;
        }
        if (Clock::now() < s.theirs_until) return Status::again();
        // Our accept of the listener's connect is not done (not polled beside this connect, or
        // dropped): a handshake of our own over a new TCP connection, as if the link had ended.
        // The listener's side of this one sees the socket close before the ready byte and drops it.
        // Its offer takes no choice of the listener's this time: "use" would name that link again
        // and wait again, for as long as our accept is not polled (to the connect's deadline).
        if (s.comm->c.fd >= 0) close(s.comm->c.fd);
        s.comm->c.fd = -1;
        s.no_theirs = true;
        fall_back_to_tcp(s,
                         "this process's end of the peer link the listener named (its own "
                         "connect's) did not come within " +
                             std::to_string(kLinkFirstWaitMs) + " ms");
        continue;
      }
      case ConnectState::kSendReady: {
        if (s.via_link) {
          std::string why;
          if (!s.link_hold.send(wire::LinkFrameType::kHsReady, s.remote_link.chan, nullptr, 0,
                                &why)) {
            return Status(
                Code::kRemoteError,
                "the peer link to " + s.peer + " failed before the handshake's last step: " + why);
          }
        } else {
          Status st = send_some(s.comm->c.fd, &kReadyByte, 1, &s.io, s.peer);
          if (!st.is_ok()) return st;
        }
        SLUICE_INFO(kSubNet, "connected %s -> %s (%s), %d QP(s), %s", s.comm->c.local_desc.c_str(),
                    s.comm->c.remote_dev.c_str(), s.peer.c_str(), s.comm->c.nqps,
                    s.comm->c.describe_qp(0).c_str());
        s.comm->c.cm.reset(s.cm.link.release());
        if (s.link_offer) join_link(s);
        liveness_start(s.comm->c);
        e->open_comms.fetch_add(1);
        *out = s.comm.release();
        return Status::ok();
      }
    }
  }
}

}  // namespace

Status connect(int dev, void* handle, const CommConfig& cfg, SendComm** out) {
  *out = nullptr;
  Engine* e = engine();
  if (e == nullptr) return Status(Code::kInvalidUsage, "connect called before init");
  if (dev < 0 || dev >= e->device_total())  // every call of a connect: no port query here
    return Status(Code::kInvalidArgument, "connect: no device " + std::to_string(dev));
  wire::Handle h;
  std::memcpy(&h, handle, sizeof h);
  SLUICE_RETURN_IF_ERROR(wire::validate_handle(h));

  reap_abandoned_connects(false);
  reap_listens(false);
  ConnectRegistry& g = connects();
  ConnectState* s = nullptr;
  std::unique_lock<std::mutex> lk(g.mu);
  if (h.connect_state != 0) {
    auto it = g.states.find(h.connect_state);
    if (it == g.states.end() || it->second->busy ||
        h.connect_check != (h.connect_state ^ wire::nonce_fold(h.nonce) ^ wire::kHandleMagic)) {
      return Status(Code::kInvalidArgument,
                    "connect: the handle refers to no connection in progress (corrupt handle, a "
                    "handle reused after its connection completed or failed, or a connection "
                    "left unpolled past SLUICE_CONNECT_TIMEOUT_MS and released)");
    }
    s = it->second.get();
  } else {
    auto st = std::make_unique<ConnectState>();
    st->dev = dev;
    st->cfg = cfg;
    st->handle = h;
    uint8_t link_flags = 0;
    st->listener_has_link = wire::handle_link(handle, &st->listener_proc, &link_flags);
    st->listener_hello = (link_flags & wire::kHandleLinkHello) != 0;
    wire::handle_address(h, &st->addr, &st->addr_len);
    st->peer = sockaddr_text(st->addr);
    st->deadline = Clock::now() + std::chrono::milliseconds(e->config().connect_timeout_ms);
    st->comm = std::make_unique<SendComm>();
    st->members = e->members_of(dev, &st->weights);
    if (st->members.size() > 1 && h.members == 0) {  // a Sluice before fusion: one member
      SLUICE_INFO(kSubNet,
                  "connect to %s: the listener runs a Sluice without fused devices; using %s only",
                  st->peer.c_str(), st->members[0]->name.c_str());
      st->members.resize(1);
      st->weights.resize(1);
    }
    st->ext = st->members.size() > 1 || h.members > 1;
    st->npaths = std::max<int>(static_cast<int>(st->members.size()), h.members);
    // A fused connection uses rdma_cm when it is asked for (SLUICE_CM=rdmacm, or iWARP, which
    // needs it): each path's route is checked only after the metadata exchange, which carries the
    // listener members' addresses, past the point where auto could still fall back to oob; so auto
    // keeps fused connections on oob.
    const bool iwarp = st->members[0]->adapter->ctx->device->transport_type == IBV_TRANSPORT_IWARP;
    if (st->ext && !iwarp && static_cast<CmMode>(e->config().cm_mode) == CmMode::kAuto) {
      SLUICE_INFO(kSubNet,
                  "connection manager for %s -> %s: oob (SLUICE_CM=auto: a fused connection "
                  "checks its members' rdma_cm routes only after the metadata exchange, too late "
                  "to fall back; SLUICE_CM=rdmacm connects every member through rdma_cm)",
                  st->members[0]->name.c_str(), st->peer.c_str());
      st->phase = ConnectState::kGidRoute;
    } else {
      auto resolve = st->cm.begin(*st->members[0], h.cm_port != 0, st->peer);
      if (!resolve.is_ok()) return resolve.status().with_context("connect to " + st->peer);
      st->phase = resolve.value() ? ConnectState::kCmResolve : ConnectState::kGidRoute;
    }
    uint64_t id = g.next_id++;
    g.due.push(st->deadline, id);  // not abandoned before its deadline
    h.connect_state = id;
    h.connect_check = id ^ wire::nonce_fold(h.nonce) ^ wire::kHandleMagic;
    std::memcpy(handle, &h, sizeof h);
    s = st.get();
    g.states.emplace(id, std::move(st));
  }
  uint64_t id = h.connect_state;
  s->busy = true;  // the reaper leaves it alone while this call drives it
  s->last_poll = Clock::now();
  lk.unlock();

  Status st = connect_step(*s, out);
  lk.lock();
  s->busy = false;
  s->last_poll = Clock::now();  // polled until now (a QP bring-up may take a while)
  if (st.is_again()) return Status::ok();
  // Finished, either way: forget the state (a failed partial comm is released with it).
  auto node = g.states.extract(id);
  lk.unlock();
  h.connect_state = 0;
  h.connect_check = 0;
  std::memcpy(handle, &h, sizeof h);
  if (!st.is_ok()) {
    *out = nullptr;
    const Device& d = *s->members[0];  // the state lives on in `node` until we return
    ibv_port_attr pa{};                // a port that went down explains any failure above best
    std::string down;
    if (ibv_query_port(d.adapter->ctx.get(), d.port, &pa) == 0)
      down = local_port_hint(port_label(d), pa.state);
    if (!down.empty())
      st = Status(Code::kRemoteError, down + " (what failed: " + st.message() + ")");
    return st.with_context("connect to " + s->peer + " from " + d.name);
  }
  return st;
}

size_t reap_abandoned_connects(bool all) {
  ConnectRegistry& g = connects();
  std::vector<std::unique_ptr<ConnectState>> dead;
  {
    std::unique_lock<std::mutex> lk(g.mu, std::defer_lock);
    if (all) {
      lk.lock();
    } else if (!lk.try_lock()) {
      return 0;  // another thread is in connect: it reaps
    }
    const Clock::time_point now = Clock::now();
    if (all) {
      for (auto it = g.states.begin(); it != g.states.end();) {
        if (it->second->busy) {
          ++it;
          continue;
        }
        dead.push_back(std::move(it->second));
        it = g.states.erase(it);
      }
      g.due.clear();
      for (const auto& [id, s] : g.states) g.due.push(now, id);  // busy ones: look again later
    } else {
      const Engine* e = engine();
      const auto bound = std::chrono::milliseconds(e ? e->config().connect_timeout_ms : 0);
      // Abandoned: past its deadline and not polled for a whole bound (one still polled fails at
      // its own next call, with the reason). Only states whose time has come are looked at.
      reap_due(g.due, now, kReapBatch, [&](uint64_t id) -> ReapDecision {
        auto it = g.states.find(id);
        if (it == g.states.end()) return {ReapDecision::kGone, {}};  // completed or failed
        ConnectState& s = *it->second;
        if (s.busy) return {ReapDecision::kLater, now + bound};
        if (now > s.deadline && now - s.last_poll > bound) {
          dead.push_back(std::move(it->second));
          g.states.erase(it);
          return {ReapDecision::kReap, {}};
        }
        return {ReapDecision::kLater, std::max(s.deadline, s.last_poll + bound)};
      });
    }
  }
  // Released outside the lock: each comm's teardown drains its QPs (bounded).
  for (auto& s : dead) {
    SLUICE_INFO(
        kSubNet, "releasing a connect to %s that was %s (its QPs, CQ, memory and socket)",
        s->peer.c_str(),
        all ? "still in progress at finalize" : "no longer polled past SLUICE_CONNECT_TIMEOUT_MS");
  }
  const size_t n = dead.size();
  dead.clear();
  return n;
}

}  // namespace sluice
