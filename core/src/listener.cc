// The accept side of connection setup: listen, and accept as a non-blocking state machine over the
// out-of-band TCP socket that receives the connector's wire::Meta, brings the receive comm's QPs to
// RTS and answers with its own. NCCL polls accept until it returns a comm; nothing here blocks, and
// every phase is bounded by SLUICE_CONNECT_TIMEOUT_MS.
#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <type_traits>

#include "comm.h"
#include "comm_setup.h"
#include "oob_socket.h"
#include "sluice/core/log.h"

namespace sluice {

class ListenComm : public CommBase {
 public:
  ListenComm() : CommBase(CommKind::kListen) {}
  ~ListenComm();
  Device* dev = nullptr;
  int fd = -1;
  uint64_t nonce = 0;
  std::string addr_text;
  struct Pending;
  std::unique_ptr<Pending> pending;
};

namespace {

using Clock = std::chrono::steady_clock;

uint64_t random_u64() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

}  // namespace

struct ListenComm::Pending {
  enum Phase { kRecvMeta, kSendMeta, kRecvReady } phase = kRecvMeta;
  int fd = -1;
  std::string peer;
  Clock::time_point deadline;
  std::unique_ptr<RecvComm> comm;
  wire::Meta local{}, remote{};
  size_t io = 0;
  uint8_t ready = 0;
  ~Pending() {
    if (fd >= 0) close(fd);
  }
};

ListenComm::~ListenComm() {
  pending.reset();
  if (fd >= 0) close(fd);
}

namespace {

Status build_recv_comm(ListenComm& l, ListenComm::Pending& p) {
  Engine* e = engine();
  Device* d = l.dev;
  const Config& cfg = e->config();
  auto comm = std::make_unique<RecvComm>();
  comm->c.dev = d;
  comm->c.peer = p.peer;
  comm->c.local_desc = d->name + ":" + std::to_string(d->port);
  size_t stage_bytes = sizeof(wire::CtsEntry) * wire::kFifoSlots * wire::kEntriesPerSlot;
  size_t rec_bytes = sizeof(wire::DoneRecord) * wire::kFifoSlots;
  size_t pool_bytes = sizeof(RecvReq) * wire::kFifoSlots;
  auto mem = NumaBuffer::allocate(stage_bytes + rec_bytes + pool_bytes, numa_of(*d));
  if (!mem.is_ok()) return mem.status();
  comm->mem = std::move(mem).value();
  char* base = static_cast<char*>(comm->mem.data());
  comm->stage = reinterpret_cast<wire::CtsEntry*>(base);
  comm->records = reinterpret_cast<wire::DoneRecord*>(base + stage_bytes);
  comm->pool = reinterpret_cast<RecvReq*>(base + stage_bytes + rec_bytes);
  static_assert(std::is_trivially_destructible_v<RecvReq>, "lives in raw comm memory");
  SLUICE_RETURN_IF_ERROR(
      register_comm_memory(*d, comm->mem, stage_bytes + rec_bytes, &comm->mem_mr));
  // Requests are constructed on first use (datapath.cc).
  fill_local_meta(*d, 1, l.nonce, &p.local);
  int nqps = p.remote.nqps;  // the connector decides; both sides must agree
  uint32_t inline_bytes = cfg.cts_inline ? kCtsInlineBytes : 0;
  QpCaps caps{kRecvSqDepth, kRecvRqDepth, 1, 1, inline_bytes};
  // Receive completions, signaled CTS writes, and every WR when flushed in error.
  int cqe = nqps * static_cast<int>(kRecvSqDepth + kRecvRqDepth + 1) - 1;
  SLUICE_RETURN_IF_ERROR(create_qps(comm->c, nqps, caps, cqe, &p.local));
  uint8_t tc = cfg.fifo_traffic_class >= 0 ? static_cast<uint8_t>(cfg.fifo_traffic_class)
                                           : p.remote.traffic_class;
  p.local.traffic_class = p.remote.traffic_class;
  p.local.service_level = p.remote.service_level;
  p.local.buf_addr = reinterpret_cast<uintptr_t>(comm->records);
  p.local.buf_rkey = comm->mem_mr->rkey;
  p.local.split_data = p.remote.split_data;  // the connector decides, as for nqps
  comm->c.split = p.remote.split_data != 0;
  SLUICE_RETURN_IF_ERROR(connect_qps(comm->c, p.local, p.remote, tc, p.remote.service_level));
  comm->remote_fifo = p.remote.buf_addr;
  comm->remote_fifo_rkey = p.remote.buf_rkey;
  p.comm = std::move(comm);
  return Status::ok();
}

}  // namespace

Status listen(int dev, void* handle, ListenComm** out) {
  Engine* e = engine();
  if (e == nullptr) return Status(Code::kInvalidUsage, "listen called before init");
  Device* d = e->device(dev);
  if (d == nullptr)
    return Status(Code::kInvalidArgument, "listen: no device " + std::to_string(dev));
  auto l = std::make_unique<ListenComm>();
  l->dev = d;
  l->nonce = random_u64() | 1;
  sockaddr_storage sa = e->oob_interface().addr;
  l->fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (l->fd < 0) return errno_status(Code::kSystemError, "listen: socket()", errno);
  int one = 1;
  setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  socklen_t len = sa.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  if (sa.ss_family == AF_INET)
    reinterpret_cast<sockaddr_in*>(&sa)->sin_port = 0;
  else
    reinterpret_cast<sockaddr_in6*>(&sa)->sin6_port = 0;
  if (bind(l->fd, reinterpret_cast<sockaddr*>(&sa), len) != 0)
    return errno_status(Code::kSystemError, "listen: bind to " + sockaddr_text(sa), errno);
  if (::listen(l->fd, 128) != 0) return errno_status(Code::kSystemError, "listen()", errno);
  SLUICE_RETURN_IF_ERROR(set_nonblocking(l->fd));
  len = sizeof sa;
  getsockname(l->fd, reinterpret_cast<sockaddr*>(&sa), &len);
  l->addr_text = sockaddr_text(sa);

  const wire::Handle h = wire::encode_handle(sa, static_cast<uint32_t>(dev), l->nonce);
  std::memset(handle, 0, kHandleSize);
  std::memcpy(handle, &h, sizeof h);
  SLUICE_INFO(kSubNet, "listening on %s for %s", l->addr_text.c_str(), d->name.c_str());
  *out = l.release();
  return Status::ok();
}

Status accept(ListenComm* l, RecvComm** out) {
  *out = nullptr;
  Engine* e = engine();
  if (e == nullptr) return Status(Code::kInvalidUsage, "accept called before init");
  if (l == nullptr || l->kind != CommKind::kListen)
    return Status(Code::kInvalidArgument, "accept: not a listen comm");
  for (;;) {
    if (!l->pending) {
      sockaddr_storage sa{};
      socklen_t len = sizeof sa;
      int fd = accept4(l->fd, reinterpret_cast<sockaddr*>(&sa), &len, SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return Status::ok();
        return errno_status(Code::kSystemError, "accept on " + l->addr_text, errno);
      }
      l->pending = std::make_unique<ListenComm::Pending>();
      l->pending->fd = fd;
      l->pending->peer = sockaddr_text(sa);
      l->pending->deadline =
          Clock::now() + std::chrono::milliseconds(e->config().connect_timeout_ms);
      SLUICE_RETURN_IF_ERROR(set_nonblocking(fd));
    }
    ListenComm::Pending& p = *l->pending;
    if (Clock::now() > p.deadline) {
      std::string peer = p.peer;
      l->pending.reset();
      return Status(Code::kRemoteError, "peer " + peer + " did not complete the handshake on " +
                                            l->addr_text + " within SLUICE_CONNECT_TIMEOUT_MS");
    }
    switch (p.phase) {
      case ListenComm::Pending::kRecvMeta: {
        Status st = recv_some(p.fd, &p.remote, sizeof p.remote, &p.io, p.peer);
        if (st.is_again()) return Status::ok();
        Status valid = st.is_ok() ? wire::validate_meta(p.remote, 0, l->nonce) : st;
        if (!valid.is_ok()) {
          // A stray or foreign connection must not wedge the listener: drop it, keep listening.
          SLUICE_INFO(kSubNet, "%s: dropping connection from %s: %s", l->addr_text.c_str(),
                      p.peer.c_str(), valid.message().c_str());
          l->pending.reset();
          continue;
        }
        Status b = build_recv_comm(*l, p);
        if (!b.is_ok()) {
          std::string peer = p.peer;
          l->pending.reset();
          return b.with_context("accept from " + peer + " on " + l->dev->name);
        }
        p.phase = ListenComm::Pending::kSendMeta;
        p.io = 0;
        continue;
      }
      case ListenComm::Pending::kSendMeta: {
        Status st = send_some(p.fd, &p.local, sizeof p.local, &p.io, p.peer);
        if (st.is_again()) return Status::ok();
        if (!st.is_ok()) {
          l->pending.reset();
          return st;
        }
        p.phase = ListenComm::Pending::kRecvReady;
        p.io = 0;
        continue;
      }
      case ListenComm::Pending::kRecvReady: {
        Status st = recv_some(p.fd, &p.ready, 1, &p.io, p.peer);
        if (st.is_again()) return Status::ok();
        if (st.is_ok() && p.ready != kReadyByte)
          st = Status(Code::kRemoteError, "peer " + p.peer + " sent a bad ready byte");
        if (!st.is_ok()) {
          l->pending.reset();
          return st.with_context("accept on " + l->dev->name);
        }
        RecvComm* c = p.comm.release();
        c->c.fd = p.fd;
        p.fd = -1;
        l->pending.reset();
        SLUICE_INFO(kSubNet, "accepted %s <- %s (%s), %d QP(s)", c->c.local_desc.c_str(),
                    c->c.remote_dev.c_str(), c->c.peer.c_str(), c->c.nqps);
        e->open_comms.fetch_add(1);
        *out = c;
        return Status::ok();
      }
    }
  }
}

Status close_listen(ListenComm* l) {
  if (l == nullptr || l->kind != CommKind::kListen)
    return Status(Code::kInvalidArgument, "closeListen: not a listen comm");
  l->kind = CommKind::kDead;
  delete l;
  return Status::ok();
}

}  // namespace sluice
