// The accept side of connection setup: listen, and accept as a set of non-blocking state machines,
// one per accepted out-of-band TCP socket, that receive the connector's wire::Meta, bring the
// receive comm's QPs to RTS and answer with our own. NCCL polls accept until it returns a comm;
// nothing here blocks.
//
// Every listen of the process on one address shares one listening socket (listen_port.cc): a new
// connection is read there until its metadata's nonce names a listen, and is then that listen's.
// Up to 64 connections not yet named are in progress at once, each bounded by its own
// SLUICE_HANDSHAKE_TIMEOUT_MS, so a stray connection (port scanner, health probe, half-open socket,
// a peer of another program) never delays a real peer: it is dropped at its deadline or at its
// first byte that is not Sluice's, with an INFO. A connection whose metadata passed (the listener's
// nonce: a real peer) is then bounded by the connector's own SLUICE_CONNECT_TIMEOUT_MS from its
// accept: the connector may complete as late as that (NCCL polls it when it can), and a handshake
// dropped while the connector can still complete would leave a send comm whose receive comm never
// comes. A connection that fails after its metadata was accepted is dropped with a WARN and its
// resources released; only a broken listening socket fails accept.
#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

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
#include "connect/fd_reserve.h"
#include "connect/listener_internal.h"
#include "connect/oob_socket.h"
#include "connect/route_gid.h"
#include "health/peer_link.h"
#include "sluice/core/base/log.h"
#include "sluice/core/base/net_addr.h"

namespace sluice {

namespace {

using Clock = std::chrono::steady_clock;

// Live listen comms, for the reaper. Allocated once and never destroyed (no static destructor).
// Lock order: mu, then a listen's own mu, then q_mu (a leaf: accept takes it under its listen's
// mu to queue the listen when it takes a handshake in).
struct ListenRegistry {
  std::mutex mu;
  std::unordered_map<uint64_t, ListenComm*> comms;  // by ListenComm::id
  uint64_t next_id = 1;
  std::mutex q_mu;
  // Listens with handshakes in progress, by when the reaper should next look at them (the handshake
  // bound after their last accept call): every connect, accept and listen call runs the reaper,
  // which looks only at what is due (base/deadline_queue.h).
  DeadlineQueue due;
};

// Listens the reaper looks at per call at most.
constexpr size_t kReapBatch = 8;
ListenRegistry& listens() {
  static auto* r = new ListenRegistry;  // NOLINT: deliberately never destroyed
  return *r;
}

}  // namespace

namespace {

Status build_recv_comm(ListenComm& l, ListenComm::Pending& p) {
  Engine* e = engine();
  Device* d = l.dev;
  const Config& cfg = e->config();
  auto comm = std::make_unique<RecvComm>();
  comm->c.dev = d;
  // Fusion: the connector sent its members (it knew ours from the handle) and laid out the paths;
  // without an extension the peer is one member (or a Sluice before fusion): member 0 only.
  const bool ext = (p.remote.features & wire::kMetaFeatureMembers) != 0;
  std::vector<Device*> members = l.members;
  if (!ext && members.size() > 1) {
    SLUICE_INFO(kSubNet,
                "accept from %s: the connector sent no members' metadata (a Sluice "
                "without fused devices); using %s only",
                p.peer.c_str(), d->name.c_str());
    members.resize(1);
  }
  const int npaths = ext ? p.remote_x.npaths : 1;
  SLUICE_RETURN_IF_ERROR(
      set_members(comm->c, members, npaths, ext ? p.remote_x.qps_per_path : p.remote.nqps));
  comm->c.peer = p.peer;
  comm->c.local_desc = port_label(*d);
  size_t stage_bytes = sizeof(wire::CtsEntry) * wire::kFifoSlots * wire::kEntriesPerSlot *
                       static_cast<size_t>(wire::cts_cells(comm->c.npaths));
  size_t rec_bytes = sizeof(wire::DoneRecord) * wire::kFifoSlots;
  // The eager path's grant, the source of its one WRITE into the sender's grant block.
  // Then a 64-byte cell whose first 16 bytes the sender writes: its FIFO head, twice (eager.cc).
  const size_t grant_bytes = sizeof(wire::EagerGrant) + 64;
  size_t pool_bytes = sizeof(RecvReq) * wire::kFifoSlots;
  const size_t reg_bytes = stage_bytes + rec_bytes + grant_bytes;
  auto mem = NumaBuffer::allocate(reg_bytes + pool_bytes, numa_of(*d));
  if (!mem.is_ok()) return mem.status();
  comm->mem = std::move(mem).value();
  char* base = static_cast<char*>(comm->mem.data());
  comm->stage = reinterpret_cast<wire::CtsEntry*>(base);
  comm->records = reinterpret_cast<wire::DoneRecord*>(base + stage_bytes);
  comm->eg.src = reinterpret_cast<wire::EagerGrant*>(base + stage_bytes + rec_bytes);
  comm->eg.head_cell = reinterpret_cast<uint64_t*>(comm->eg.src + 1);
  comm->pool = reinterpret_cast<RecvReq*>(base + reg_bytes);
  static_assert(std::is_trivially_destructible_v<RecvReq>, "lives in raw comm memory");
  static_assert(sizeof(wire::EagerGrant) % alignof(RecvReq) == 0);
  SLUICE_RETURN_IF_ERROR(register_comm_memory(*d, comm->mem, reg_bytes, &comm->mem_mr));
  SLUICE_RETURN_IF_ERROR(register_member_memory(comm->c, comm->mem, reg_bytes, comm->mem_mr));
  // Requests are constructed on first use (datapath.cc).
  fill_local_meta(*d, 1, l.nonce, &p.local);
  p.gid_route.apply(&p.local);
  int nqps = p.remote.nqps;  // the connector decides; both sides must agree
  uint32_t inline_bytes = cfg.cts_inline ? kCtsInlineBytes : 0;
  // A fused comm's receive queues hold a credit per path (kRecvRqMaxDepth: failover routes).
  const uint32_t rq = kRecvRqDepth * static_cast<uint32_t>(comm->c.npaths);
  QpCaps caps{kRecvSqDepth, rq, 1, 1, inline_bytes};
  // Receive completions, signaled CTS writes, and every WR when flushed in error.
  int cqe = nqps * static_cast<int>(kRecvSqDepth + rq + 1) - 1;
  SLUICE_RETURN_IF_ERROR(create_qps(comm->c, nqps, caps, cqe, &p.local));
  uint8_t tc = cfg.fifo_traffic_class >= 0 ? static_cast<uint8_t>(cfg.fifo_traffic_class)
                                           : p.remote.traffic_class;
  p.local.traffic_class = p.remote.traffic_class;
  p.local.service_level = p.remote.service_level;
  p.local.buf_addr = reinterpret_cast<uintptr_t>(comm->records);
  p.local.buf_rkey = comm->mem_mr->rkey;
  p.local.split_data = p.remote.split_data;  // the connector decides, as for nqps
  comm->c.split = p.remote.split_data != 0;
  if (ext) {
    p.local.features |= wire::kMetaFeatureMembers;
    fill_local_members(comm->c, p.local, l.weights, &p.local_x);
    SLUICE_RETURN_IF_ERROR(wire::check_peer_members(p.local_x, p.remote_x));
  } else {
    p.local_x = wire::members_of_meta(p.local);
    p.remote_x = wire::members_of_meta(p.remote);
  }
  if (p.remote.cm == wire::kMetaCmRdmacm) {  // QPs to RTR/RTS as the CM requests arrive
    if (l.cm.empty())
      return Status(Code::kRemoteError, "the connector chose rdmacm; no rdma_cm here");
    SLUICE_RETURN_IF_ERROR(accept_peer_meta(comm->c, p.local, p.remote));
    SLUICE_RETURN_IF_ERROR(cm_accept_prepare(&p.cm, nqps, tc, p.remote.service_level));
    p.local.cm = wire::kMetaCmRdmacm;
  } else {
    p.gid_route.check_pair(*d, p.local, p.remote, p.peer);
    SLUICE_RETURN_IF_ERROR(
        connect_qps(comm->c, p.local, p.remote, p.local_x, p.remote_x, tc, p.remote.service_level));
  }
  set_paths(comm->c, p.remote_x, p.local_x, false, p.remote.features);
  comm->remote_fifo = p.remote.buf_addr;
  SLUICE_RETURN_IF_ERROR(setup_recv_eager(*comm, p.local.features, p.remote.features));
  p.comm = std::move(comm);
  return Status::ok();
}

}  // namespace

Status listen(int dev, void* handle, ListenComm** out) {
  Engine* e = engine();
  if (e == nullptr) return Status(Code::kInvalidUsage, "listen called before init");
  std::vector<uint32_t> weights;
  const std::vector<Device*> members = e->members_of(dev, &weights);
  Device* d = members.empty() ? nullptr : members[0];
  if (d == nullptr)
    return Status(Code::kInvalidArgument, "listen: no device " + std::to_string(dev));
  reap_abandoned_connects(false);
  reap_listens(false);
  auto l = std::make_unique<ListenComm>();
  l->dev = d;
  l->members = members;
  l->weights = weights;
  SLUICE_RETURN_IF_ERROR(wire::new_nonce(&l->nonce));
  sockaddr_storage sa = e->oob_interface().addr;
  SLUICE_RETURN_IF_ERROR(fd_reserve_take("listen on " + d->name));
  l->holds_reserve = true;
  {
    const sockaddr_storage want = sa;
    SLUICE_RETURN_IF_ERROR(port_join(*l, want, &sa));
  }

  const auto knob = static_cast<CmMode>(e->config().cm_mode);
  sockaddr_storage cm_sa{};
  if (knob != CmMode::kOob) {
    // The rdma_cm listener binds an IP address of the device's own interface: the out-of-band
    // address where that is on the device, else one of its family (choose_cm_address). A fused
    // device gets one per member, each on its own member's interface; all of them or none.
    std::string why;
    sockaddr_storage bound[wire::kMaxMetaMembers]{};
    for (size_t m = 0; m < members.size() && why.empty(); ++m) {
      const Device& md = *members[m];
      const std::vector<PortAddr> addrs = device_addresses(md);
      const CmAddrChoice pick = choose_cm_address(addrs, sa, sa.ss_family, false, md.gid.index);
      std::unique_ptr<CmListener> one;
      if (pick.index < 0) {
        why = pick.reason;
      } else {
        one = CmListener::create(md, pick.addr, &why);
      }
      if (!one) {
        if (m > 0) why = "member " + md.name + ": " + why;
        break;
      }
      bound[m] = pick.addr;
      reinterpret_cast<sockaddr_in*>(&bound[m])->sin_port = one->port;  // same offset in v4/v6
      l->cm.push_back(std::move(one));
      l->cm_text.push_back(sockaddr_text(bound[m]));
      SLUICE_INFO(kSubNet, "%s: rdma_cm listener on %s: %s", md.name.c_str(),
                  l->cm_text.back().c_str(), pick.reason.c_str());
    }
    if (!why.empty()) {
      l->cm.clear();
      l->cm_text.clear();
      if (knob == CmMode::kRdmacm)
        return Status(Code::kSystemError, "listen on " + d->name + ": SLUICE_CM=rdmacm: " + why);
      SLUICE_INFO(kSubNet, "%s: no rdma_cm listener (%s): connectors use oob", d->name.c_str(),
                  why.c_str());
    } else {
      cm_sa = bound[0];
      wire::encode_cm_addrs(bound, static_cast<int>(members.size()), &l->cm_addrs);
    }
  }
  const wire::Handle h = wire::encode_handle(sa, static_cast<uint32_t>(dev), l->nonce,
                                             l->cm.empty() ? uint16_t{0} : l->cm[0]->port, &cm_sa,
                                             static_cast<uint16_t>(members.size()));
  static_assert(kHandleSize == wire::kNcclHandleMaxSize && sizeof h <= kHandleSize,
                "the handle fits NCCL_NET_HANDLE_MAXSIZE");
  std::memset(handle, 0, kHandleSize);
  std::memcpy(handle, &h, sizeof h);
  // The listener's process, for a connector that may offer a peer link (health/peer_link.h), and
  // whether this process takes handshakes on a link it has (listen_port.cc, name_hellos).
  if (e->config().oob_link && link_proc_id_ok()) {
    wire::put_handle_link(handle, link_proc_id(),
                          e->config().oob_link_handshake ? wire::kHandleLinkHello : 0);
  }
  SLUICE_INFO(kSubNet, "listening on %s for %s", l->addr_text.c_str(), d->name.c_str());
  {
    std::lock_guard<std::mutex> lk(listens().mu);
    l->id = listens().next_id++;
    listens().comms.emplace(l->id, l.get());
  }
  *out = l.release();
  return Status::ok();
}

void drop_handshake(const std::string& where, const Device* dev, const ListenComm::Pending& p,
                    const Status& why) {
  if (!p.identified) {
    SLUICE_INFO(kSubNet, "%s: dropping connection from %s (no Sluice handshake): %s", where.c_str(),
                p.peer.c_str(), why.message().c_str());
    return;
  }
  const std::string qp = p.comm ? p.comm->c.describe_qp(0) : std::string("comm not built");
  SLUICE_WARN(
      "accept on %s (%s): dropping the connection from %s (peer device %s, %s) after the "
      "metadata exchange: %s; the listener keeps serving other peers",
      dev != nullptr ? dev->name.c_str() : "?", where.c_str(), p.peer.c_str(), p.remote.dev_name,
      qp.c_str(), why.message().c_str());
}

ListenComm::Pending::Phase after_meta_parts(const ListenComm::Pending& p) {
  return (p.remote.features & wire::kMetaFeatureLink) != 0 ? ListenComm::Pending::kRecvLink
                                                           : ListenComm::Pending::kGidRoute;
}

void queue_for_reaper(ListenComm& l, Clock::time_point now) {
  ListenRegistry& g = listens();
  std::lock_guard<std::mutex> q(g.q_mu);
  if (l.queued) return;
  l.queued = true;
  g.due.push(now + std::chrono::milliseconds(engine()->config().handshake_timeout_ms), l.id);
}

namespace {

void drop(const ListenComm& l, ListenComm::Pending& p, const Status& why) {
  drop_handshake(l.addr_text, l.dev, p, why);
  p.drop_reason = why.message();  // for the connector on the link, if we answered "use" (~Pending)
}

// Crossed first connects: this process and the connector's each connect to the other with no link
// yet, so each offers none, and each answer would adopt its own connection's socket: two links
// for one pair of processes. The process with the larger id lets its answer wait while its own
// first connect to the connector's process is in flight (its claim held, no live link yet), then
// names the link that connect made (answer_link); the other process never waits, so that connect
// is answered and nothing waits in a circle. The wait ends at kLinkFirstWaitMs whatever happens
// (that connect stalls, say, because the peer calls accept only once its own connect is done): the
// answer then adopts, and the peer's later answer to that connect names the link so made; only
// two answers given while neither connect is done leave two links. Only for a connector that takes
// such an answer (wire::kLinkOfferTakesTheirs); an older one is answered at once.
bool proc_above(const wire::Nonce& a, const wire::Nonce& b) {
  return std::memcmp(a.bytes, b.bytes, sizeof a.bytes) > 0;
}
// The offer was validated when read (kRecvLink).
bool answer_waits(ListenComm::Pending& p, Clock::time_point now) {
  const wire::MetaLink& o = p.remote_link;
  if (o.link_id != 0 || (o.flags & wire::kLinkOfferTakesTheirs) == 0) return false;
  if (!p.deferred) {
    if (!proc_above(link_proc_id(), o.proc) || !link_making(o.proc)) return false;
    p.deferred = true;
    p.defer_until = now + std::chrono::milliseconds(kLinkFirstWaitMs);
    SLUICE_INFO(kSubNet,
                "accept from %s: its process and this one connect to each other with no peer link "
                "yet; the answer waits (at most %d ms) for the link this process's own connect "
                "makes, so that both share one",
                p.peer.c_str(), kLinkFirstWaitMs);
  }
  return now < p.defer_until && link_making(o.proc);
}

// The connector's link offer (health/peer_link.h): "use" the link it named when we have our end of
// it alive (held, our channel on it), else "adopt" this connection's socket as a new link. An
// offer of none from a connector that takes our choice (wire::kLinkOfferTakesTheirs) is answered
// "use" with the newest live link to its process, with our end's role, when we have one: its end
// of that link is made (or was) by its accept of our own connect, so crossed first connects end
// with one link whichever answer comes first (answer_waits orders the simultaneous ones). The
// offer was validated when read (kRecvLink).
Status answer_link(ListenComm::Pending& p) {
  const uint32_t chan = link_new_chan();
  p.link_hold =
      link_hold_id(p.remote_link.proc, p.remote_link.link_id, p.remote_link.end_role, chan);
  const bool theirs = !p.link_hold.held() && p.remote_link.link_id == 0 &&
                      (p.remote_link.flags & wire::kLinkOfferTakesTheirs) != 0;
  if (theirs) p.link_hold = link_hold_newest(p.remote_link.proc, chan);
  const bool use = p.link_hold.held();
  p.local_link = wire::make_meta_link(link_proc_id(), use ? wire::kLinkUse : wire::kLinkAdopt,
                                      use ? p.link_hold.id() : link_new_id(),
                                      use && theirs ? p.link_hold.role() : 0, chan);
  if (theirs && use) {
    SLUICE_INFO(kSubNet,
                "accept from %s: it offered no peer link; naming this process's link to it "
                "(link %016llx), which its accept of this process's connect makes on its side",
                p.peer.c_str(), static_cast<unsigned long long>(p.link_hold.id()));
  } else if (p.deferred) {
    SLUICE_INFO(kSubNet,
                "accept from %s: no link from this process's own connect within %d ms; adopting "
                "this connection's socket as a new link",
                p.peer.c_str(), kLinkFirstWaitMs);
  }
  p.link_on = true;
  return Status::ok();
}

enum class Step { kWait, kDone, kDrop };

// kRecvReady on the link: the connector's ready mark (kHsReady) on our channel, as the ready byte
// (p.io = 1 once it came, for cm_accept_poll's message); a notice or the link's end fails it.
Status recv_ready_on_link(ListenComm::Pending& p) {
  if (p.io == 1) return Status::ok();
  LinkHold::Seen s;
  if (!p.link_hold.poll(&s)) return Status::again();  // another thread is reading the link
  if (s.ready) {
    p.ready = kReadyByte;
    p.io = 1;
    return Status::ok();
  }
  if (s.seen == SocketSeen::kNothing) return Status::again();
  return Status(Code::kRemoteError,
                "the peer link to " + p.peer + " ended the handshake before its ready mark (" +
                    (s.seen == SocketSeen::kNotice      ? "the connector's notice: " + s.text
                     : s.seen == SocketSeen::kBadNotice ? "bad frame: " + s.text
                     : s.text.empty()                   ? "the link closed or failed"
                                                        : s.text) +
                    ")");
}

// Advances one handshake as far as its socket allows. kDone: *out is the new comm. kDrop: *why says
// why the connection must go.
Step step(ListenComm& l, ListenComm::Pending& p, Clock::time_point now, RecvComm** out,
          Status* why) {
  const Config& cfg = engine()->config();
  for (;;) {
    switch (p.phase) {
      case ListenComm::Pending::kRecvMeta:  // named by the port (listen_port.cc) before it came
        *why = Status(Code::kInternalError, "a handshake reached its listen without metadata");
        return Step::kDrop;
      case ListenComm::Pending::kRecvMembers: {  // fusion: the extension right behind Meta
        Status st = recv_some(p.fd, &p.remote_x, sizeof p.remote_x, &p.io, p.peer);
        if (st.is_again()) break;
        if (st.is_ok()) st = wire::validate_members(p.remote, p.remote_x);
        if (!st.is_ok()) {
          *why = st;
          return Step::kDrop;
        }
        p.phase = after_meta_parts(p);
        p.io = 0;
        continue;
      }
      case ListenComm::Pending::kRecvLink: {  // the connector's peer-link offer
        Status st = cfg.oob_link && link_proc_id_ok()
                        ? recv_some(p.fd, &p.remote_link, sizeof p.remote_link, &p.io, p.peer)
                        : Status(Code::kRemoteError,
                                 "the connector offered a peer link this listener did not "
                                 "advertise (SLUICE_OOB_LINK=0 here)");
        if (st.is_again()) break;
        // Checked once, when read (a deferred answer comes back here with it read and checked).
        if (st.is_ok() && !p.deferred) st = wire::validate_link_offer(p.remote_link);
        if (st.is_ok() && answer_waits(p, now)) break;  // the offer read; its answer waits
        if (st.is_ok()) st = answer_link(p);
        if (!st.is_ok()) {
          *why = st;
          return Step::kDrop;
        }
        p.phase = ListenComm::Pending::kGidRoute;
        p.io = 0;
        continue;
      }
      case ListenComm::Pending::kGidRoute: {
        if (p.remote.cm != wire::kMetaCmRdmacm) {
          const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(p.deadline - now);
          Status r =
              p.gid_route.step(*l.dev, route_target_of(p.remote, p.peer_addr),
                               static_cast<int>(std::max<long long>(1, left.count())), "accept");
          if (r.is_again()) break;
        }
        Status b = build_recv_comm(l, p);
        if (!b.is_ok()) {
          *why = b;
          return Step::kDrop;
        }
        if (p.link_on) p.local.features |= wire::kMetaFeatureLink;
        p.phase = ListenComm::Pending::kSendMeta;
        p.io = 0;
        continue;
      }
      case ListenComm::Pending::kSendMeta: {
        // Meta, then (fusion) our members' extension right behind it, then (fused over rdma_cm)
        // our members' rdma_cm addresses, as one byte stream.
        const bool ext = (p.local.features & wire::kMetaFeatureMembers) != 0;
        const bool cm_addrs = ext && p.local.cm == wire::kMetaCmRdmacm;
        // Then (peer link) our answer to the connector's offer.
        uint8_t out[sizeof p.local + sizeof p.local_x + sizeof l.cm_addrs + sizeof p.local_link];
        size_t n = 0;
        auto put = [&](const void* src, size_t len) {
          std::memcpy(out + n, src, len);
          n += len;
        };
        put(&p.local, sizeof p.local);
        if (ext) put(&p.local_x, sizeof p.local_x);
        if (cm_addrs) put(&l.cm_addrs, sizeof l.cm_addrs);
        if (p.link_on) put(&p.local_link, sizeof p.local_link);
        Status st = Status::ok();
        if (p.via_link) {  // one frame, queued whole
          std::string w;
          if (!p.link_hold.send(wire::LinkFrameType::kHsReply, p.remote_link.chan, out, n, &w))
            st = Status(Code::kRemoteError, "the answer on the peer link to " + p.peer + ": " + w);
        } else {
          st = send_some(p.fd, out, n, &p.io, p.peer);
        }
        if (st.is_again()) break;
        if (!st.is_ok()) {
          *why = st;
          return Step::kDrop;
        }
        p.phase = ListenComm::Pending::kRecvReady;
        p.io = 0;
        continue;
      }
      case ListenComm::Pending::kRecvReady: {
        Status st =
            p.via_link ? recv_ready_on_link(p) : recv_some(p.fd, &p.ready, 1, &p.io, p.peer);
        if (st.is_again()) break;
        if (st.is_ok() && p.ready != kReadyByte)
          st = Status(Code::kRemoteError, "peer " + p.peer + " sent a bad ready byte");
        if (st.is_ok() && p.cm) st = cm_accept_poll(*p.cm, p.comm->c);  // every QP at RTS
        if (st.is_again()) break;
        if (!st.is_ok()) {
          *why = st;
          return Step::kDrop;
        }
        RecvComm* c = p.comm.release();
        c->c.cm.reset(p.cm.release());
        c->c.fd = p.fd;
        p.fd = -1;
        if (p.link_on) {  // the ready byte was the connector's last on this socket
          if (p.local_link.verdict == wire::kLinkUse) {
            c->c.link = link_join(std::move(p.link_hold), p.remote_link.chan);
            if (c->c.fd >= 0) close(c->c.fd);
          } else {
            c->c.link =
                link_adopt(c->c.fd, p.remote_link.proc, p.local_link.link_id,
                           wire::kLinkEndAcceptor, p.local_link.chan, p.remote_link.chan, p.peer);
          }
          c->c.fd = -1;
        }
        liveness_start(c->c);
        *out = c;
        return Step::kDone;
      }
    }
    break;  // the socket has nothing more now
  }
  if (now > p.deadline) {
    std::string got = p.phase == ListenComm::Pending::kRecvMeta
                          ? "received " + std::to_string(p.io) + " of " +
                                std::to_string(sizeof p.remote) + " metadata bytes"
                      : p.phase == ListenComm::Pending::kRecvMembers
                          ? "received " + std::to_string(p.io) + " of " +
                                std::to_string(sizeof p.remote_x) + " members' metadata bytes"
                      : p.phase == ListenComm::Pending::kRecvLink
                          ? "received " + std::to_string(p.io) + " of " +
                                std::to_string(sizeof p.remote_link) + " peer-link offer bytes"
                      : p.phase == ListenComm::Pending::kGidRoute
                          ? "checking the route to the peer for our GID"
                      : p.phase == ListenComm::Pending::kSendMeta
                          ? "our metadata is not sent yet (peer not reading)"
                      : p.cm && p.io == 1 ? "rdma_cm: " + p.cm->progress
                      : p.via_link        ? "the peer's ready mark did not arrive on the peer link"
                                          : "the peer's ready byte did not arrive";
    const std::string bound =
        p.identified
            ? "SLUICE_CONNECT_TIMEOUT_MS=" +
                  std::to_string(std::max(cfg.handshake_timeout_ms, cfg.connect_timeout_ms)) +
                  " ms (the connector's bound; its metadata was valid)"
            : "SLUICE_HANDSHAKE_TIMEOUT_MS=" + std::to_string(cfg.handshake_timeout_ms) + " ms";
    *why = Status(Code::kRemoteError, "no complete handshake within " + bound + " (" + got + ")");
    return Step::kDrop;
  }
  return Step::kWait;
}

// The handshake an rdma_cm connect request belongs to: its metadata named the same FIFO and rkey,
// and the request names the QP number the metadata gave for that QP index. Fused: it arrived at
// the listener of `member`, which must be the member that QP lives on here (wire.h's path layout),
// since the QP is moved to RTR with the attributes of the request's id, on that member's port.
CmFind cm_finder(ListenComm& l, int member) {
  return [&l, member](const wire::CmToken& t, uint32_t qp_num, std::string* why) -> CmAcceptTarget {
    for (auto& p : l.pending) {
      if (p->cm && p->comm && p->remote.buf_addr == t.fifo_addr &&
          p->remote.buf_rkey == t.fifo_rkey && p->remote.nqps == t.nqps &&
          p->remote.qps[t.qp_index].qpn == qp_num) {
        const int on = p->comm->c.qp_member[t.qp_index];
        if (on != member) {
          *why = "the request for QP " + std::to_string(t.qp_index) + " arrived at member " +
                 std::to_string(member) + "'s rdma_cm listener, but that QP is on member " +
                 std::to_string(on) + " (" + p->comm->c.members[on].dev->name + ")";
          return {};
        }
        return {&p->comm->c, p->cm.get()};
      }
    }
    *why = "no handshake in progress matches it (QP " + std::to_string(t.qp_index) + " number " +
           std::to_string(qp_num) + "; dropped or timed out?)";
    return {};
  };
}

}  // namespace

Status accept(ListenComm* l, RecvComm** out) {
  *out = nullptr;
  Engine* e = engine();
  if (e == nullptr) return Status(Code::kInvalidUsage, "accept called before init");
  if (l == nullptr || l->kind != CommKind::kListen)
    return Status(Code::kInvalidArgument, "accept: not a listen comm");
  reap_abandoned_connects(false);
  reap_listens(false);
  std::lock_guard<std::mutex> lk(l->mu);
  if (!l->failure.is_ok()) return l->failure;
  const Clock::time_point now = Clock::now();
  struct Touch {  // accept was called until it returned (a QP bring-up may take a while)
    ListenComm* l;
    ~Touch() { l->last_accept = Clock::now(); }
  } touch{l};
  Status st = port_service(*l, now);
  for (size_t m = 0; st.is_ok() && m < l->cm.size(); ++m)
    st = cm_listener_poll(*l->cm[m], l->nonce, l->cm_text[m], cm_finder(*l, static_cast<int>(m)));
  if (!st.is_ok()) {
    l->failure = st;
    return st;
  }
  for (size_t i = 0; i < l->pending.size();) {
    ListenComm::Pending& p = *l->pending[i];
    RecvComm* c = nullptr;
    Status why;
    switch (step(*l, p, now, &c, &why)) {
      case Step::kWait:
        ++i;
        continue;
      case Step::kDrop:
        drop(*l, p, why);
        l->pending.erase(l->pending.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      case Step::kDone:
        l->pending.erase(l->pending.begin() + static_cast<std::ptrdiff_t>(i));
        SLUICE_INFO(kSubNet, "accepted %s <- %s (%s), %d QP(s)", c->c.local_desc.c_str(),
                    c->c.remote_dev.c_str(), c->c.peer.c_str(), c->c.nqps);
        e->open_comms.fetch_add(1);
        *out = c;
        return Status::ok();
    }
  }
  return Status::ok();
}

Status close_listen(ListenComm* l) {
  if (l == nullptr || l->kind != CommKind::kListen)
    return Status(Code::kInvalidArgument, "closeListen: not a listen comm");
  {
    std::lock_guard<std::mutex> lk(listens().mu);
    listens().comms.erase(l->id);  // its queue entry, if any, is dropped when it comes due
  }
  l->kind = CommKind::kDead;
  if (!l->pending.empty()) {
    SLUICE_INFO(kSubNet, "%s: closing with %zu handshake(s) in progress; releasing them",
                l->addr_text.c_str(), l->pending.size());
  }
  delete l;  // pending handshakes' comms (QPs, CQ, memory) and sockets, then the listening socket
  return Status::ok();
}

namespace {

// Drops l's handshakes that are past their deadline (all of them at finalize); caller holds l.mu.
size_t reap_pending(ListenComm& l, bool all, Clock::time_point now) {
  port_take_inbox(l);  // what other listens' accepts handed it counts as its own
  size_t n = 0;
  for (size_t i = 0; i < l.pending.size();) {
    ListenComm::Pending& p = *l.pending[i];
    if (!all && now <= p.deadline) {
      ++i;
      continue;
    }
    drop(l, p,
         Status(Code::kRemoteError,
                all ? "finalize with the handshake in progress"
                : p.identified
                    ? "no complete handshake within SLUICE_CONNECT_TIMEOUT_MS (accept no "
                      "longer called)"
                    : "no complete handshake within SLUICE_HANDSHAKE_TIMEOUT_MS (accept no "
                      "longer called)"));
    l.pending.erase(l.pending.begin() + static_cast<std::ptrdiff_t>(i));
    ++n;
  }
  return n;
}

}  // namespace

size_t reap_listens(bool all) {
  ListenRegistry& g = listens();
  std::unique_lock<std::mutex> lk(g.mu, std::defer_lock);
  if (all) {
    lk.lock();
  } else if (!lk.try_lock()) {
    return 0;
  }
  const Clock::time_point now = Clock::now();
  size_t n = port_reap(all, now);  // connections no listen was named for yet
  if (all) {
    for (auto& [id, l] : g.comms) {
      std::lock_guard<std::mutex> ll(l->mu);
      n += reap_pending(*l, true, now);
      l->cm.clear();  // their rdma_cm ids and event channels go with the devices
      if (l->failure.is_ok()) {
        l->failure = Status(Code::kInvalidUsage, "accept on " + l->addr_text +
                                                     ": the listen comm outlived the plugin's "
                                                     "finalize; only closeListen is valid now");
      }
    }
    return n;
  }
  const Engine* e = engine();
  const auto bound = std::chrono::milliseconds(e ? e->config().handshake_timeout_ms : 0);
  // Pops under q_mu, a leaf: each listen is then locked with q_mu released (lock order above).
  std::vector<uint64_t> ids;
  {
    std::lock_guard<std::mutex> q(g.q_mu);
    if (!g.due.due(now)) return n;  // the common case: one comparison
    reap_due(g.due, now, kReapBatch, [&](uint64_t id) {
      ids.push_back(id);
      return ReapDecision{ReapDecision::kGone, {}};  // re-queued below if still needed
    });
  }
  for (const uint64_t id : ids) {
    auto it = g.comms.find(id);
    if (it == g.comms.end()) continue;  // closed
    ListenComm* l = it->second;
    std::unique_lock<std::mutex> ll(l->mu, std::try_to_lock);
    Clock::time_point next = now + bound;
    bool keep = true;
    if (ll.owns_lock()) {
      port_take_inbox(*l);
      if (now - l->last_accept > bound)
        n += reap_pending(*l, false, now);  // accept abandoned it
      else
        next = l->last_accept + bound;  // accept is still polled: it decides
      keep = !l->pending.empty();
    }  // else its accept is running and reaps its own: look again later
    std::lock_guard<std::mutex> q(g.q_mu);
    l->queued = keep;
    if (keep) g.due.push(next > now ? next : now + std::chrono::milliseconds(1), id);
  }
  return n;
}

}  // namespace sluice
