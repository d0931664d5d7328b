// listen / connect / accept: non-blocking state machines over an out-of-band TCP socket that
// exchange wire::Meta and bring the QPs of both sides to RTS. NCCL polls connect and accept until
// they return a comm; nothing here blocks, and every phase is bounded by SLUICE_CONNECT_TIMEOUT_MS.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <new>
#include <random>
#include <type_traits>
#include <unordered_map>

#include "comm.h"
#include "sluice/core/log.h"
#include "sluice/core/qp.h"

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
constexpr uint8_t kReadyByte = 0x5a;

// Queue depths. The sender's send queue holds, per QP, at most one group per FIFO slot of up to
// kEntriesPerSlot data WRITEs plus the closing WRITE_WITH_IMM.

uint64_t random_u64() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

std::string sockaddr_text(const sockaddr_storage& sa) {
  return sockaddr_to_string(sa);
}

Status set_nonblocking(int fd) {
  int fl = fcntl(fd, F_GETFL, 0);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
    return errno_status(Code::kSystemError, "fcntl(O_NONBLOCK)", errno);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return Status::ok();
}

// Sends/receives what the socket takes now. ok() = all bytes done; kAgain = call again.
Status send_some(int fd, const void* buf, size_t n, size_t* done, const std::string& peer) {
  while (*done < n) {
    ssize_t r = ::send(fd, static_cast<const char*>(buf) + *done, n - *done, MSG_NOSIGNAL);
    if (r > 0) {
      *done += static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Status::again();
    if (r < 0 && errno == EINTR) continue;
    return errno_status(Code::kRemoteError, "send to " + peer + " during connection setup", errno);
  }
  return Status::ok();
}

Status recv_some(int fd, void* buf, size_t n, size_t* done, const std::string& peer) {
  while (*done < n) {
    ssize_t r = ::recv(fd, static_cast<char*>(buf) + *done, n - *done, 0);
    if (r > 0) {
      *done += static_cast<size_t>(r);
      continue;
    }
    if (r == 0) {
      return Status(Code::kRemoteError, "peer " + peer +
                                            " closed the connection during setup (peer process "
                                            "exited or failed its side of the handshake)");
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::again();
    if (errno == EINTR) continue;
    return errno_status(Code::kRemoteError, "recv from " + peer + " during connection setup",
                        errno);
  }
  return Status::ok();
}

void fill_local_meta(const Device& d, uint8_t role, uint64_t nonce, wire::Meta* m) {
  std::memset(m, 0, sizeof *m);
  m->magic = wire::kMetaMagic;
  m->version = wire::kVersion;
  m->role = role;
  m->link_layer = d.attr.link_layer;
  m->port = d.port;
  m->mtu = static_cast<uint8_t>(d.attr.active_mtu);
  m->gid_index = static_cast<uint8_t>(d.gid.index);
  m->lid = d.attr.lid;
  m->fifo_slots = wire::kFifoSlots;
  m->nonce = nonce;
  std::memcpy(m->gid, d.gid.gid.data(), 16);
  std::snprintf(m->dev_name, sizeof m->dev_name, "%s", d.name.c_str());
}

// Creates the CQ and `nqps` RC QPs at INIT and records their QPN/PSN in `m`.
Status create_qps(Conn& c, int nqps, const QpCaps& caps, int cqe, wire::Meta* m) {
  Device& d = *c.dev;
  const Config& cfg = engine()->config();
  c.cq.reset(ibv_create_cq(d.adapter->ctx.get(), cqe, nullptr, nullptr, 0));
  if (!c.cq) {
    return errno_status(Code::kSystemError,
                        "ibv_create_cq(" + std::to_string(cqe) + " entries) on " + d.name, errno);
  }
  c.nqps = nqps;
  m->nqps = static_cast<uint8_t>(nqps);
  for (int q = 0; q < nqps; ++q) {
    QpCaps k = caps;
    auto qp = create_rc_qp(d.adapter->pd.get(), c.cq.get(), k);
    if (!qp.is_ok() && k.max_inline_data > 0) {
      k.max_inline_data = 0;  // the device takes no inline data of that size: post from memory
      qp = create_rc_qp(d.adapter->pd.get(), c.cq.get(), k);
    }
    if (!qp.is_ok()) return qp.status().with_context(d.name);
    c.qps[q] = std::move(qp).value();
    c.max_inline = k.max_inline_data;
    InitParams ip;
    ip.port = d.port;
    ip.pkey_index = static_cast<uint16_t>(cfg.pkey_index);
    ip.access = IBV_ACCESS_REMOTE_WRITE;
    SLUICE_RETURN_IF_ERROR(qp_to_init(c.qps[q].get(), ip).with_context(d.name));
    m->qps[q].qpn = c.qps[q]->qp_num;
    m->qps[q].psn = random_psn();
  }
  return Status::ok();
}

// RTR and RTS for every QP against the peer's metadata.
Status connect_qps(Conn& c, const wire::Meta& local, const wire::Meta& remote, uint8_t tc,
                   uint8_t sl) {
  Device& d = *c.dev;
  const Config& cfg = engine()->config();
  SLUICE_RETURN_IF_ERROR(wire::check_peer_meta(local, remote, d.name));
  GidBytes rg;
  std::memcpy(rg.data(), remote.gid, 16);
  c.remote_gid = gid_to_string(rg);
  c.remote_dev = remote.dev_name;
  for (int q = 0; q < c.nqps; ++q) {
    RtrParams r;
    r.path_mtu = static_cast<ibv_mtu>(std::min(local.mtu, remote.mtu));
    r.dest_qpn = remote.qps[q].qpn;
    r.rq_psn = remote.qps[q].psn;
    r.max_dest_rd_atomic = 1;
    r.min_rnr_timer = static_cast<uint8_t>(cfg.min_rnr_timer);
    r.port = d.port;
    r.is_global = d.roce;
    std::memcpy(r.dgid.raw, remote.gid, 16);
    r.sgid_index = local.gid_index;
    r.hop_limit = 255;
    r.traffic_class = tc;
    r.dlid = remote.lid;
    r.sl = sl;
    c.remote_qpn[q] = remote.qps[q].qpn;
    Status st = qp_to_rtr(c.qps[q].get(), r);
    if (!st.is_ok()) return st.with_context(c.describe_qp(q));
    RtsParams s;
    s.sq_psn = local.qps[q].psn;
    s.timeout = static_cast<uint8_t>(cfg.ib_timeout);
    s.retry_cnt = static_cast<uint8_t>(cfg.retry_cnt);
    s.rnr_retry = static_cast<uint8_t>(cfg.rnr_retry);
    s.max_rd_atomic = 1;
    st = qp_to_rts(c.qps[q].get(), s);
    if (!st.is_ok()) return st.with_context(c.describe_qp(q));
  }
  return Status::ok();
}

int numa_of(const Device& d) {
  return d.adapter->locality.numa_node;
}

// Registers the first `bytes` of the comm's own memory (FIFO / records / staging) with the device.
Status register_comm_memory(Device& d, NumaBuffer& mem, size_t bytes, verbs::Mr* out) {
  out->reset(ibv_reg_mr(d.adapter->pd.get(), mem.data(), bytes,
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
  if (!*out)
    return errno_status(Code::kSystemError, "ibv_reg_mr of comm memory on " + d.name, errno);
  return Status::ok();
}

// ---- connect side -------------------------------------------------------------------------------

struct ConnectState {
  enum Phase { kStart, kTcpWait, kSendMeta, kRecvMeta, kSendReady } phase = kStart;
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
  uint8_t tc = 0, sl = 0;
};

std::mutex g_connect_mu;
std::unordered_map<uint64_t, std::unique_ptr<ConnectState>> g_connects;
uint64_t g_next_connect_id = 1;

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
  if (fd < 0) return errno_status(Code::kSystemError, "socket()", errno);
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

Status build_send_comm(ConnectState& s) {
  Engine* e = engine();
  Device* d = e->device(s.dev);
  auto comm = std::move(s.comm);
  comm->c.dev = d;
  comm->c.peer = s.peer;
  comm->c.local_desc = d->name + ":" + std::to_string(d->port);
  const Config& cfg = e->config();
  // FIFO + local completion records, one registration.
  size_t fifo_bytes = sizeof(wire::CtsEntry) * wire::kFifoSlots * wire::kEntriesPerSlot;
  size_t rec_bytes = sizeof(wire::DoneRecord) * wire::kFifoSlots;
  size_t pool_bytes = sizeof(SendReq) * SendComm::kPool;
  size_t free_bytes = sizeof(uint16_t) * SendComm::kPool;
  auto mem = NumaBuffer::allocate(fifo_bytes + rec_bytes + pool_bytes + free_bytes, numa_of(*d));
  if (!mem.is_ok()) return mem.status();
  comm->mem = std::move(mem).value();
  char* base = static_cast<char*>(comm->mem.data());
  comm->fifo = reinterpret_cast<wire::CtsEntry*>(base);
  comm->records = reinterpret_cast<wire::DoneRecord*>(base + fifo_bytes);
  comm->pool = reinterpret_cast<SendReq*>(base + fifo_bytes + rec_bytes);
  comm->free_list = reinterpret_cast<uint16_t*>(base + fifo_bytes + rec_bytes + pool_bytes);
  static_assert(std::is_trivially_destructible_v<SendReq>, "lives in raw comm memory");
  static_assert(sizeof(wire::DoneRecord) % alignof(SendReq) == 0);
  SLUICE_RETURN_IF_ERROR(
      register_comm_memory(*d, comm->mem, fifo_bytes + rec_bytes, &comm->mem_mr));
  // Requests are constructed when first handed out (datapath.cc), so pool pages a connection
  // never uses are never touched.
  for (int i = 0; i < SendComm::kPool; ++i)
    comm->free_list[i] = static_cast<uint16_t>(SendComm::kPool - 1 - i);
  comm->free_top = SendComm::kPool;

  fill_local_meta(*d, 0, s.handle.nonce, &s.local);
  int nqps = cfg.qps_per_connection;
  QpCaps caps{kSendSqDepth, 1, 1, 1, 0};
  // Every WR can complete into the CQ when a QP is flushed in error.
  int cqe = nqps * static_cast<int>(kSendSqDepth + 1) - 1;
  SLUICE_RETURN_IF_ERROR(create_qps(comm->c, nqps, caps, cqe, &s.local));
  s.tc = static_cast<uint8_t>(cfg.traffic_class >= 0     ? cfg.traffic_class
                              : s.cfg.traffic_class >= 0 ? s.cfg.traffic_class
                                                         : 0);
  s.sl = static_cast<uint8_t>(cfg.service_level >= 0 ? cfg.service_level : 0);
  s.local.traffic_class = s.tc;
  s.local.service_level = s.sl;
  s.local.buf_addr = reinterpret_cast<uintptr_t>(comm->fifo);
  s.local.buf_rkey = comm->mem_mr->rkey;
  s.local.split_data = static_cast<uint8_t>(cfg.split_data_on_qps);
  comm->c.split = cfg.split_data_on_qps != 0;
  s.comm = std::move(comm);
  return Status::ok();
}

// One step of the connector. ok() with *out set = connected; again = call later.
Status connect_step(ConnectState& s, SendComm** out) {
  Engine* e = engine();
  if (Clock::now() > s.deadline) {
    return Status(Code::kRemoteError,
                  "connection to " + s.peer + " not established within SLUICE_CONNECT_TIMEOUT_MS=" +
                      std::to_string(e->config().connect_timeout_ms) + " ms (" +
                      std::to_string(s.attempts) +
                      " TCP attempts): the peer is not reachable on that address or did not "
                      "accept; check NCCL_SOCKET_IFNAME and firewalls");
  }
  for (;;) {
    switch (s.phase) {
      case ConnectState::kStart: {
        if (Clock::now() < s.next_retry) return Status::again();
        if (!s.comm->c.dev) SLUICE_RETURN_IF_ERROR(build_send_comm(s));
        Status st = start_tcp(s);
        if (st.is_ok()) {
          s.phase = ConnectState::kSendMeta;
          s.io = 0;
          continue;
        }
        if (st.is_again()) {
          // message "retry" = refused at once: stay in kStart; otherwise wait for the handshake.
          if (st.message().empty()) s.phase = ConnectState::kTcpWait;
          return Status::again();
        }
        return st;
      }
      case ConnectState::kTcpWait: {
        pollfd p{s.comm->c.fd, POLLOUT, 0};
        int r = poll(&p, 1, 0);
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
        Status st = send_some(s.comm->c.fd, &s.local, sizeof s.local, &s.io, s.peer);
        if (!st.is_ok()) return st;
        s.phase = ConnectState::kRecvMeta;
        s.io = 0;
        continue;
      }
      case ConnectState::kRecvMeta: {
        Status st = recv_some(s.comm->c.fd, &s.remote, sizeof s.remote, &s.io, s.peer);
        if (!st.is_ok()) return st;
        SLUICE_RETURN_IF_ERROR(wire::validate_meta(s.remote, 1, s.handle.nonce)
                                   .with_context("accept reply from " + s.peer));
        SendComm& c = *s.comm;
        SLUICE_RETURN_IF_ERROR(connect_qps(c.c, s.local, s.remote, s.tc, s.sl));
        c.remote_records = s.remote.buf_addr;
        c.remote_records_rkey = s.remote.buf_rkey;
        s.phase = ConnectState::kSendReady;
        s.io = 0;
        continue;
      }
      case ConnectState::kSendReady: {
        Status st = send_some(s.comm->c.fd, &kReadyByte, 1, &s.io, s.peer);
        if (!st.is_ok()) return st;
        SLUICE_INFO(kSubNet, "connected %s -> %s (%s), %d QP(s), %s", s.comm->c.local_desc.c_str(),
                    s.comm->c.remote_dev.c_str(), s.peer.c_str(), s.comm->c.nqps,
                    s.comm->c.describe_qp(0).c_str());
        liveness_start(s.comm->c);
        e->open_comms.fetch_add(1);
        *out = s.comm.release();
        return Status::ok();
      }
    }
  }
}

// ---- accept side --------------------------------------------------------------------------------

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

Status connect(int dev, void* handle, const CommConfig& cfg, SendComm** out) {
  *out = nullptr;
  Engine* e = engine();
  if (e == nullptr) return Status(Code::kInvalidUsage, "connect called before init");
  if (e->device(dev) == nullptr)
    return Status(Code::kInvalidArgument, "connect: no device " + std::to_string(dev));
  wire::Handle h;
  std::memcpy(&h, handle, sizeof h);
  SLUICE_RETURN_IF_ERROR(wire::validate_handle(h));

  ConnectState* s = nullptr;
  std::unique_lock<std::mutex> lk(g_connect_mu);
  if (h.connect_state != 0) {
    auto it = g_connects.find(h.connect_state);
    if (it == g_connects.end() ||
        h.connect_check != (h.connect_state ^ h.nonce ^ wire::kHandleMagic)) {
      return Status(Code::kInvalidArgument,
                    "connect: the handle refers to no connection in progress (corrupt handle, or "
                    "a handle reused after its connection completed or failed)");
    }
    s = it->second.get();
  } else {
    auto st = std::make_unique<ConnectState>();
    st->dev = dev;
    st->cfg = cfg;
    st->handle = h;
    wire::handle_address(h, &st->addr, &st->addr_len);
    st->peer = sockaddr_text(st->addr);
    st->deadline = Clock::now() + std::chrono::milliseconds(e->config().connect_timeout_ms);
    st->comm = std::make_unique<SendComm>();
    uint64_t id = g_next_connect_id++;
    h.connect_state = id;
    h.connect_check = id ^ h.nonce ^ wire::kHandleMagic;
    std::memcpy(handle, &h, sizeof h);
    s = st.get();
    g_connects.emplace(id, std::move(st));
  }
  uint64_t id = h.connect_state;
  lk.unlock();  // a state machine is driven by one thread (NCCL reuses the handle per connection)

  Status st = connect_step(*s, out);
  if (st.is_again()) return Status::ok();
  // Finished, either way: forget the state (a failed partial comm is released by its owners).
  lk.lock();
  auto node = g_connects.extract(id);
  lk.unlock();
  h.connect_state = 0;
  h.connect_check = 0;
  std::memcpy(handle, &h, sizeof h);
  if (!st.is_ok()) {
    *out = nullptr;
    return st.with_context("connect to " + s->peer + " from " + e->device(dev)->name);
  }
  return st;
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
        liveness_start(c->c);
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
