// Link faults between two hosts, part of plugin_faults_test (run by scripts/rdma-bed --two-host,
// tests/rdma/faults.cmake): one process per VM, exit status = result (0 = pass), a side TCP socket
// (port kSidePort, over the same eth0) carries the listen handles and sync bytes.
//
//   plugin_faults_test --two-host-peer HOST [PHASE]
//
// PHASE idle (default): a quiet comm pair comes up first and is never called again (with
//   SLUICE_OOB_LINK=0 each side's keepalive sentinel for the other host,
//   core/src/health/peer_hosts.h; with the peer link, the default, both comms share its socket). On
//   a second pair host0 receives one message, publishes a second receive (its clear-to-send
//   acknowledged) and waits; host1 takes its eth0 down and stays alive. host0's pending test must
//   fail by TCP keepalive within 5 x SLUICE_HEARTBEAT_MS (rounded up to seconds) + 2 s, learnt from
//   the quiet comm's socket (its own runs no keepalive), with a WARN that says so. host1 then takes
//   eth0 up again and waits until its port and GIDs are back (the next phase needs them).
// PHASE before-connect (run with SLUICE_CM=oob and SLUICE_CM=rdmacm): each host listens once and
//   keeps that listener for the whole phase. After a verified warm-up exchange (the baseline for
//   the leak check is taken after it), host1 takes its eth0 down; then both connect to each other's
//   listener: host0 toward a peer whose link is down, host1 with its own link down. Each connect
//   must fail within SLUICE_CONNECT_TIMEOUT_MS + 2 s (scheduling margin) with a WARN naming the
//   peer's address and a likely cause; neither listener may return a comm or an error meanwhile.
//   host1 takes eth0 up, then new connections both ways through the same listeners carry a verified
//   message each way, and after closing them fds and the process's QP/CQ/MR counts are back to the
//   baseline.
// PHASE mid-stream: host0 sends 16 MiB to host1; host1 takes its eth0 down while the send is in
//   flight. host1's receive fails by the async event IBV_EVENT_PORT_ERR (bound: kPortBound);
//   host0's send fails by TCP keepalive (bound: 5 x SLUICE_HEARTBEAT_MS rounded up to seconds + 2
//   s, from the moment host1 took the link down; the RC bound, 4.096 us x 2^NCCL_IB_TIMEOUT x
//   (retry + 1) = 34 s at the defaults and infinite on rxe at NCCL_IB_RETRY_CNT=7, and the progress
//   watchdog's 52 s are both longer). After up: new connections carry verified bytes both ways, no
//   leak.
#include <poll.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "bed_link.h"
#include "bed_resources.h"
#include "plugin_bed.h"
#include "side_channel.h"

namespace nettest {
namespace {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

constexpr uint16_t kSidePort = 47123;
constexpr size_t kMsg = 65537;
constexpr size_t kStreamBytes = size_t{16} << 20;  // ~2 s on the bed's two-host link
constexpr int kTag = 7;
constexpr char kReady = 'R';
constexpr long kMarginMs = 2000;  // scheduling margin on every bound (a loaded 2-core TCG host)
// A port going down is an async event, read by the plugin's event thread and seen at the comm's
// next call: well under a second; the same ceiling as plugin_faults_port.
constexpr long kPortBound = 5000;

uint64_t seed_of(int msg) {
  return pattern_seed(kMsg, 500 + msg, kTag);
}

int fail(int host, int code, const std::string& what) {
  std::fprintf(stderr, "host%d: FAILED (%d): %s\n", host, code, what.c_str());
  return code;
}

long keepalive_bound_ms() {
  const long hb = env_long("SLUICE_HEARTBEAT_MS", 0);
  return 5 * ((hb + 999) / 1000) * 1000 + kMarginMs;  // the kernel counts keepalive in seconds
}

std::string peer_addr() {
  const char* p = std::getenv("SLUICE_BED_PEER_ADDR");
  return p != nullptr ? p : "";
}

ncclResult_t test_until_error(Net& n, void* req, Clock::time_point since, long bound_ms,
                              int* done) {
  ncclResult_t r = ncclSuccess;
  *done = 0;
  while (r == ncclSuccess && !*done && ms_since(since) < 2 * bound_ms) {
    r = n.test(req, done, nullptr);
    if (r == ncclSuccess && !*done) usleep(200);
  }
  return r;
}

// ---- The link -----------------------------------------------------------------------------------

// eth0 is taken down and up in-process by bed_link.h's set_link: no fork + exec, whose delay on a
// loaded TCG VM (over a second, seen) would blur when the link went down.

bool port_active(const sluice::rdmatest::TestPort& p) {
  for (const auto& a : sluice::rdmatest::active_rdma_ports())
    if (a.dev == p.dev && a.port == p.port) return true;
  return false;
}

// The GID of this host's bed address (IPv4-mapped) is in the port's table again (bed_link.h):
// rdma_cm and the route-checked GID of oob need it.
bool bed_gid_present(const sluice::rdmatest::TestPort& p) {
  const char* addr = std::getenv("SLUICE_BED_ADDR");
  return addr != nullptr && gid_listed(port_dir(p.dev, p.port), addr);
}

// Up again and usable: port ACTIVE and the bed address's GID back, bounded by wait_limit().
// `poll` runs meanwhile (a listener's accept), and may fail the wait.
template <typename F>
bool wait_link_back(const sluice::rdmatest::TestPort& p, F&& poll, long long* took_ms) {
  const auto t = Clock::now();
  while (!(port_active(p) && bed_gid_present(p))) {
    if (!poll() || Clock::now() - t > wait_limit()) return false;
    usleep(20 * 1000);
  }
  *took_ms = ms_since(t);
  return true;
}

// ---- Comms ------------------------------------------------------------------------------------

// Connects to the peer's listener (handle `theirs`) and accepts from our listener `lc`, both at
// once, bounded by wait_limit().
bool pair_up(Net& n, void* lc, const char* theirs, void** sc, void** rc) {
  char h[NCCL_NET_HANDLE_MAXSIZE];
  std::memcpy(h, theirs, sizeof h);
  *sc = *rc = nullptr;
  const auto deadline = Clock::now() + wait_limit();
  while (*sc == nullptr || *rc == nullptr) {
    if (*sc == nullptr && n.connect(0, h, sc) != ncclSuccess) return false;
    if (*rc == nullptr && n.accept(lc, rc) != ncclSuccess) return false;
    if (Clock::now() > deadline) return false;
    usleep(100);
  }
  return true;
}

// One message each way (send on sc, receive on rc), every byte and the guard after it checked.
std::string exchange(Net& n, int host, void* sc, void* rc, size_t size, int round) {
  RegBuf s, r;
  if (!s.allocate(&n, sc, size) || !r.allocate(&n, rc, size + kGuard)) return "regMr failed";
  fill_pattern(s.data(), size, pattern_seed(size, 100 * round + host, kTag));
  std::memset(r.data(), kGuardByte, size + kGuard);
  void* data = r.data();
  void* mh = r.mh();
  size_t cap = size + kGuard;
  int tag = kTag;
  void* rreq = nullptr;
  void* sreq = nullptr;
  if (!post_until("irecv", &rreq,
                  [&](void** q) { return n.irecv(rc, 1, &data, &cap, &tag, &mh, q); }))
    return "irecv failed";
  int rdone = 0, sdone = 0, got = -1;
  const auto deadline = Clock::now() + wait_limit();
  while (!rdone || !sdone) {
    if (sreq == nullptr && n.isend(sc, s.data(), size, kTag, s.mh(), &sreq) != ncclSuccess)
      return "isend failed: " + last_warn();
    if (sreq != nullptr && !sdone && n.test(sreq, &sdone, nullptr) != ncclSuccess)
      return "send failed: " + last_warn();
    if (!rdone && n.test(rreq, &rdone, &got) != ncclSuccess) return "recv failed: " + last_warn();
    if (Clock::now() > deadline) return "exchange not done within the test deadline";
  }
  if (got != static_cast<int>(size))
    return "received " + std::to_string(got) + " of " + std::to_string(size) + " bytes";
  std::string bad = check_pattern(r.data(), size, pattern_seed(size, 100 * round + 1 - host, kTag));
  if (bad.empty()) bad = check_fill(r.data() + size, kGuard, kGuardByte);
  return bad;
}

// What every phase but idle starts with: init, one listener, handles swapped over the side socket,
// a verified exchange both ways on fresh connections that are then closed (it opens whatever the
// plugin opens once per device), and the resource baseline.
struct Setup {
  int side = -1;
  Net n{12};
  void* lc = nullptr;
  char mine[NCCL_NET_HANDLE_MAXSIZE] = {};
  char theirs[NCCL_NET_HANDLE_MAXSIZE] = {};
  sluice::rdmatest::TestPort port;
  Resources base;
};

int set_up(int host, Setup* s) {
  s->side = side_socket(host, kSidePort);
  if (s->side < 0) return fail(host, 2, "no side connection");
  const auto ports = sluice::rdmatest::active_rdma_ports();
  if (ports.empty()) return fail(host, 3, "no active RDMA port");
  s->port = ports[0];
  if (s->n.init(0x2405 + host) != ncclSuccess) return fail(host, 3, "init");
  if (s->n.listen(0, s->mine, &s->lc) != ncclSuccess) return fail(host, 3, "listen");
  if (!write_full(s->side, s->mine, sizeof s->mine) ||
      !read_full(s->side, s->theirs, sizeof s->theirs, wait_limit()))
    return fail(host, 2, "handle exchange");
  void *sc = nullptr, *rc = nullptr;
  if (!pair_up(s->n, s->lc, s->theirs, &sc, &rc)) return fail(host, 4, "warm-up connections");
  const std::string bad = exchange(s->n, host, sc, rc, kMsg, 0);
  if (!bad.empty()) return fail(host, 5, "warm-up exchange: " + bad);
  if (s->n.close_send(sc) != ncclSuccess || s->n.close_recv(rc) != ncclSuccess)
    return fail(host, 5, "warm-up close");
  s->base = Resources::now();
  return 0;
}

// After the fault: new connections through the same listeners carry verified bytes both ways, and
// once closed, nothing is left beyond the baseline.
int after_up(int host, Setup& s) {
  void *sc = nullptr, *rc = nullptr;
  const auto t = Clock::now();
  if (!pair_up(s.n, s.lc, s.theirs, &sc, &rc))
    return fail(host, 20, "new connections after link up: " + last_warn());
  const long long connect_ms = ms_since(t);
  std::string bad = exchange(s.n, host, sc, rc, size_t{1} << 20, 1);
  if (!bad.empty()) return fail(host, 21, "exchange after link up: " + bad);
  if (s.n.close_send(sc) != ncclSuccess || s.n.close_recv(rc) != ncclSuccess)
    return fail(host, 22, "close after link up");
  const std::string leak = Resources::now().diff(s.base);
  if (!leak.empty()) return fail(host, 23, "not back to the baseline:" + leak);
  std::fprintf(stderr,
               "host%d: after link up: connected both ways in %lld ms, 1 MiB verified each way, "
               "fds/QP/CQ/MR back to the baseline\n",
               host, connect_ms);
  if (s.n.close_listen(s.lc) != ncclSuccess) return fail(host, 24, "close_listen");
  s.lc = nullptr;
  if (s.n.finalize() != ncclSuccess) return fail(host, 24, "finalize");
  return 0;
}

// Connects to `theirs` until the connect fails, calling accept on our listener `lc` each round:
// it must return neither a comm nor an error. Returns the connect's result; *took_ms from `since`.
ncclResult_t connect_until_error(int host, Setup& s, Clock::time_point since, long bound_ms,
                                 long long* took_ms, std::string* listener_problem) {
  char h[NCCL_NET_HANDLE_MAXSIZE];
  std::memcpy(h, s.theirs, sizeof h);
  void* sc = nullptr;
  ncclResult_t r = ncclSuccess;
  while (r == ncclSuccess && sc == nullptr && ms_since(since) < 2 * bound_ms) {
    r = s.n.connect(0, h, &sc);
    void* rc = nullptr;
    if (s.n.accept(s.lc, &rc) != ncclSuccess || rc != nullptr)
      *listener_problem = "host" + std::to_string(host) + "'s listener returned " +
                          (rc ? "a comm" : "an error: " + last_warn());
    usleep(1000);
  }
  *took_ms = ms_since(since);
  if (sc != nullptr) {
    s.n.close_send(sc);
    *listener_problem += " (the connect succeeded: the link was not down?)";
    return ncclSuccess;
  }
  return r;
}

// The connect's own WARN: the async event thread may WARN about the port right after it.
std::string connect_warn() {
  const std::string w = last_warn_with("NET/Sluice : connect:");
  return w.empty() ? last_warn() : w;
}

int before_connect(int host) {
  Setup s;
  if (int rc = set_up(host, &s)) return rc;
  const char* cm = std::getenv("SLUICE_CM");
  const std::string mode = cm ? cm : "auto";
  const long timeout = env_long("SLUICE_CONNECT_TIMEOUT_MS", 120000);
  const long bound = timeout + kMarginMs;  // the connect's own bound + scheduling margin
  std::string listener_problem;
  long long took = 0;
  ncclResult_t r = ncclSuccess;
  std::string w;
  std::optional<sluice::rdmatest::ExpectWarns> expect(std::in_place);
  if (host == 0) {
    char b = kReady;
    if (!write_full(s.side, &b, 1) || !read_full(s.side, &b, 1, wait_limit()) || b != 'D')
      return fail(host, 6, "sync before link down");
    usleep(1000 * 1000);  // host1 is taking its link down (a fork + exec in a TCG VM)
    const auto t = Clock::now();
    r = connect_until_error(host, s, t, bound, &took, &listener_problem);
    w = connect_warn();
    // Wait for host1's word that its link is back, our listener still polled meanwhile.
    for (b = 0; b != 'U';) {
      void* rc = nullptr;
      if (s.n.accept(s.lc, &rc) != ncclSuccess || rc != nullptr)
        listener_problem = "host0's listener returned " + std::string(rc ? "a comm" : "an error");
      pollfd p{s.side, POLLIN, 0};
      if (poll(&p, 1, 10) == 1 && !read_full(s.side, &b, 1, wait_limit()))
        return fail(host, 6, "side socket lost while host1's link was down");
      if (ms_since(t) > wait_limit().count()) return fail(host, 6, "host1 never came back");
    }
  } else {
    char b = 0;
    if (!read_full(s.side, &b, 1, wait_limit()) || b != kReady) return fail(host, 6, "sync");
    b = 'D';
    if (!write_full(s.side, &b, 1)) return fail(host, 6, "sync");
    usleep(100 * 1000);  // let the byte leave before the link goes
    if (!set_link(host, "eth0", false)) return fail(host, 7, "eth0 down");
    const auto t = Clock::now();
    r = connect_until_error(host, s, t, bound, &took, &listener_problem);
    w = connect_warn();
    // Down until host0's connect (started ~1 s after ours) has run into its own bound.
    while (ms_since(t) < 1000 + bound) {
      void* rc = nullptr;
      if (s.n.accept(s.lc, &rc) != ncclSuccess || rc != nullptr)
        listener_problem = "host1's listener returned " + std::string(rc ? "a comm" : "an error");
      usleep(10 * 1000);
    }
    if (!set_link(host, "eth0", true)) return fail(host, 7, "eth0 up");
    long long back = 0;
    auto poll_listener = [&] {
      void* rc = nullptr;
      if (s.n.accept(s.lc, &rc) != ncclSuccess || rc != nullptr)
        listener_problem = "host1's listener returned " + std::string(rc ? "a comm" : "an error");
      return true;
    };
    if (!wait_link_back(s.port, poll_listener, &back))
      return fail(host, 7, "port or GID not back after link up");
    std::fprintf(stderr, "host1: link up: port ACTIVE with the bed address's GID after %lld ms\n",
                 back);
    b = 'U';
    if (!write_full(s.side, &b, 1)) return fail(host, 6, "side write after link up");
  }
  std::fprintf(
      stderr, "host%d: SLUICE_CM=%s, %s: connect failed with %d after %lld ms (bound %ld ms): %s\n",
      host, mode.c_str(), host == 0 ? "peer's link down" : "own link down", static_cast<int>(r),
      took, bound, w.c_str());
  expect.reset();
  if (!listener_problem.empty()) return fail(host, 8, listener_problem);
  if (r != ncclRemoteError) return fail(host, 9, "the connect did not fail with ncclRemoteError");
  if (took > bound) return fail(host, 10, "the connect failed late");
  if (!contains(w, peer_addr())) return fail(host, 11, "the WARN does not name the peer");
  // The likely cause: toward a peer that does not answer, the timeout names it; with our own link
  // down, the WARN must say so.
  const bool own = host == 1;
  if (own ? !contains(w, "is DOWN") : !contains(w, "host down"))
    return fail(host, 12, "the WARN gives no likely cause");
  return after_up(host, s);
}

int mid_stream(int host) {
  Setup s;
  if (int rc = set_up(host, &s)) return rc;
  void *sc = nullptr, *rc = nullptr;
  if (!pair_up(s.n, s.lc, s.theirs, &sc, &rc)) return fail(host, 4, "connections");
  RegBuf buf;
  if (!buf.allocate(&s.n, host == 0 ? sc : rc, kStreamBytes)) return fail(host, 4, "regMr");
  void* req = nullptr;
  int done = 0;
  long long took = 0;
  ncclResult_t r = ncclSuccess;
  std::string w;
  long bound = 0;
  char b = 0;
  std::optional<sluice::rdmatest::ExpectWarns> expect(std::in_place);
  if (host == 1) {  // the receiver, whose link goes down
    void* data = buf.data();
    void* mh = buf.mh();
    size_t cap = kStreamBytes;
    int tag = kTag;
    if (!post_until("irecv", &req,
                    [&](void** q) { return s.n.irecv(rc, 1, &data, &cap, &tag, &mh, q); }) ||
        s.n.test(req, &done, nullptr) != ncclSuccess)  // publishes the clear-to-send
      return fail(host, 5, "irecv");
    b = 'P';
    if (!write_full(s.side, &b, 1) || !read_full(s.side, &b, 1, wait_limit()) || b != 'S')
      return fail(host, 6, "sync");
    usleep(300 * 1000);  // the send is under way
    if (s.n.test(req, &done, nullptr) != ncclSuccess || done)
      return fail(host, 5, "the 16 MiB arrived before the link went down: nothing was in flight");
    if (!set_link(host, "eth0", false)) return fail(host, 7, "eth0 down");
    const auto t = Clock::now();
    bound = kPortBound;
    r = test_until_error(s.n, req, t, bound, &done);
    took = ms_since(t);
    w = last_warn();
    // Down until host0 has seen it by keepalive, then up.
    while (ms_since(t) < keepalive_bound_ms()) usleep(10 * 1000);
    if (!set_link(host, "eth0", true)) return fail(host, 7, "eth0 up");
    long long back = 0;
    if (!wait_link_back(
            s.port, [] { return true; }, &back))
      return fail(host, 7, "port or GID not back after link up");
    b = 'U';
    if (!write_full(s.side, &b, 1)) return fail(host, 6, "side write after link up");
  } else {  // the sender, whose peer's link goes down
    fill_pattern(buf.data(), kStreamBytes, pattern_seed(kStreamBytes, 1, kTag));
    if (!read_full(s.side, &b, 1, wait_limit()) || b != 'P') return fail(host, 6, "sync");
    if (!post_until("isend", &req, [&](void** q) {
          return s.n.isend(sc, buf.data(), kStreamBytes, kTag, buf.mh(), q);
        }))
      return fail(host, 5, "isend");
    b = 'S';
    if (!write_full(s.side, &b, 1)) return fail(host, 6, "sync");
    const auto t = Clock::now();  // host1 takes its link down ~0.3 s from now
    bound = keepalive_bound_ms() + 300;
    r = test_until_error(s.n, req, t, bound, &done);
    took = ms_since(t);
    w = last_warn();
    if (!read_full(s.side, &b, 1, wait_limit()) || b != 'U')
      return fail(host, 6, "host1 never came back");
  }
  std::fprintf(stderr,
               "host%d: %s with its link down mid-stream: failed with %d after %lld ms (bound %ld "
               "ms): %s\n",
               host, host == 0 ? "16 MiB send to a peer" : "16 MiB receive", static_cast<int>(r),
               took, bound, w.c_str());
  if (r != ncclRemoteError || done) return fail(host, 9, "the request did not fail");
  if (took > bound) return fail(host, 10, "the request failed late");
  if (!contains(w, "qpn ") || !contains(w, peer_addr()))
    return fail(host, 11, "the WARN does not name the QP and the peer");
  if (host == 1 ? !contains(w, "port went down") || !contains(w, "likely cause")
                : !contains(w, "stopped answering") || !contains(w, "SLUICE_HEARTBEAT_MS"))
    return fail(host, 12, "the WARN does not give the expected reason");
  buf.reset();
  const auto c = Clock::now();
  if (s.n.close_send(sc) != ncclSuccess || s.n.close_recv(rc) != ncclSuccess)
    return fail(host, 13, "closing the failed comms");
  std::fprintf(stderr, "host%d: closed the failed comms in %lld ms\n", host, ms_since(c));
  expect.reset();
  return after_up(host, s);
}

int idle(int host) {
  const int side = side_socket(host, kSidePort);
  if (side < 0) return fail(host, 2, "no side connection");
  const auto ports = sluice::rdmatest::active_rdma_ports();
  if (ports.empty()) return fail(host, 3, "no active RDMA port");
  Net n(12);
  if (n.init(0x2405 + host) != ncclSuccess) return 3;
  RegBuf buf;
  void* comm = nullptr;
  const auto deadline = Clock::now() + wait_limit();
  // A quiet comm first (set up, never called again): it is its host's keepalive sentinel on each
  // side (core/src/health/peer_hosts.h), so the comm under test, whose own socket runs no
  // keepalive, must learn of the peer host through the quiet one's socket.
  void* quiet = nullptr;
  if (host == 0) {
    char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
    void* lc = nullptr;
    if (n.listen(0, handle, &lc) != ncclSuccess || !write_full(side, handle, sizeof handle))
      return 4;
    while (quiet == nullptr && Clock::now() < deadline)
      if (n.accept(lc, &quiet) != ncclSuccess) return 4;
    char q = 'Q';
    if (quiet == nullptr || !write_full(side, &q, 1)) return 4;
    while (comm == nullptr && Clock::now() < deadline)
      if (n.accept(lc, &comm) != ncclSuccess) return 4;
    n.close_listen(lc);
    if (comm == nullptr || !buf.allocate(&n, comm, 2 * kMsg)) return 4;
    void* data = buf.data();
    void* mh = buf.mh();
    size_t cap = kMsg;
    int tag = kTag;
    void* req = nullptr;
    if (!post_until("irecv", &req,
                    [&](void** r) { return n.irecv(comm, 1, &data, &cap, &tag, &mh, r); }) ||
        !wait_done(n, "recv", req, nullptr) || !check_pattern(buf.data(), kMsg, seed_of(1)).empty())
      return 5;
    data = buf.data() + kMsg;
    if (!post_until("irecv", &req,
                    [&](void** r) { return n.irecv(comm, 1, &data, &cap, &tag, &mh, r); }))
      return 5;
    int done = 0;
    if (n.test(req, &done, nullptr) != ncclSuccess || done) return 5;  // publishes
    char b = kReady;
    if (!write_full(side, &b, 1) || !read_full(side, &b, 1, wait_limit())) return 6;
    sluice::rdmatest::ExpectWarns expect;
    const auto down = Clock::now();  // host1 is taking its link down now
    const long bound = keepalive_bound_ms();
    ncclResult_t r = test_until_error(n, req, down, bound, &done);
    const auto took = duration_cast<milliseconds>(Clock::now() - down);
    const std::string w = last_warn();
    std::fprintf(stderr, "host0: link down seen after %lld ms (bound %ld ms): %s\n",
                 static_cast<long long>(took.count()), bound, w.c_str());
    int rc = 0;
    if (r != ncclRemoteError || done) rc = 7;
    if (took.count() > bound) rc = 8;
    if (!contains(w, "stopped answering") || !contains(w, "SLUICE_HEARTBEAT_MS") ||
        !contains(w, "qpn ") || !contains(w, peer_addr()))
      rc = 9;
    // With the peer link (the default) both comms are on the link, whose keepalive timed out;
    // with SLUICE_OOB_LINK=0 the comm under test learns it from the quiet comm's socket.
    if (!contains(w, "keepalive runs on one connection per peer host") &&
        !contains(w, "seen on the peer link")) {
      std::fprintf(stderr,
                   "host0: the comm under test learnt it neither from the sentinel nor the link\n");
      rc = rc ? rc : 11;
    }
    buf.reset();
    if (n.close_recv(comm) != ncclSuccess) rc = rc ? rc : 10;
    if (n.close_recv(quiet) != ncclSuccess) rc = rc ? rc : 10;
    return rc;
  }
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  if (!read_full(side, handle, sizeof handle, wait_limit())) return 4;
  while (quiet == nullptr && Clock::now() < deadline)
    if (n.connect(0, handle, &quiet) != ncclSuccess) return 4;
  char q = 0;  // host0 accepted the quiet comm: the next connection is the one under test
  if (quiet == nullptr || !read_full(side, &q, 1, wait_limit()) || q != 'Q') return 4;
  while (comm == nullptr && Clock::now() < deadline)
    if (n.connect(0, handle, &comm) != ncclSuccess) return 4;
  if (comm == nullptr || !buf.allocate(&n, comm, kMsg)) return 4;
  fill_pattern(buf.data(), kMsg, seed_of(1));
  void* req = nullptr;
  if (!post_until("isend", &req,
                  [&](void** r) { return n.isend(comm, buf.data(), kMsg, kTag, buf.mh(), r); }) ||
      !wait_done(n, "send", req, nullptr))
    return 5;
  char b = 0;
  if (!read_full(side, &b, 1, wait_limit()) || b != kReady) return 6;
  b = 'D';
  if (!write_full(side, &b, 1)) return 6;
  usleep(100 * 1000);                    // let the byte leave before the link goes
  sluice::rdmatest::ExpectWarns expect;  // the port event
  if (!set_link(host, "eth0", false)) return 7;
  // Alive, comm open, link down until host0's bound has passed: host0 must notice by keepalive.
  usleep(static_cast<useconds_t>(keepalive_bound_ms() + 1000) * 1000);
  if (!set_link(host, "eth0", true)) return 7;
  long long back = 0;
  if (!wait_link_back(
          ports[0], [] { return true; }, &back))
    return 7;
  std::_Exit(0);  // the comm is left as it is: what host0 saw is the test
}

}  // namespace

int two_host_main(int host, const std::string& phase) {
  const auto t = Clock::now();
  int rc = 2;
  if (phase == "idle") {
    rc = idle(host);
  } else if (phase == "before-connect") {
    rc = before_connect(host);
  } else if (phase == "mid-stream") {
    rc = mid_stream(host);
  } else {
    std::fprintf(stderr, "unknown phase '%s' (idle, before-connect, mid-stream)\n", phase.c_str());
  }
  std::fprintf(stderr, "host%d: phase %s: exit %d after %.1f s\n", host, phase.c_str(), rc,
               static_cast<double>(ms_since(t)) / 1000);
  return rc;
}

}  // namespace nettest
