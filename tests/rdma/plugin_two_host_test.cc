// Connection managers between two hosts (scripts/rdma-bed --two-host; tests/rdma/two_host.cmake),
// through the exported plugin tables. One process per VM, exit status = result (0 = pass), a side
// TCP socket carries the listen handles and sync bytes.
//
//   plugin_two_host_test HOST EXPECT
//
// host1 connects SLUICE_TEST_CONNS connections (default 16) to host0, all in progress at once, and
// reports the setup time; EXPECT (rdmacm|oob) is the connection manager the connections must have
// used, seen from outside the plugin: in rdmacm mode the process holds exactly one rdma_cm event
// channel (/dev/infiniband/rdma_cm) for all its comms, in oob mode none. Then the data-path matrix
// across the two hosts, every byte pattern-checked and the guard bytes after it untouched: every
// size of plugin_bed.h's kSizes into a larger posted buffer on connection 0 and one message on
// every other connection; grouped receives of 1..8 (two_host_matrix.h); 32 requests in flight on
// each side; a stream of SLUICE_TEST_STREAM_MESSAGES (1000) random-size messages (0..16 KiB), 32 in
// flight; and a message larger than the posted buffer, which must fail on both sides with a WARN
// and land nothing past the buffer. With EXPECT=rdmacm and SLUICE_CM=rdmacm also two failures, each
// within SLUICE_CONNECT_TIMEOUT_MS and with the rdma_cm event named in the WARN: a connect request
// to a port where nothing listens (REJECTED), and a listener address that does not answer. With
// SLUICE_TEST_ROUTE_GID=1 (oob, after tests/rdma/second_address.sh gave each host a second address
// whose GIDs come first in the table), every connection on both sides must log at INFO that the
// route to the peer chose the GID of the host's bed address (SLUICE_BED_ADDR), and that the table
// alone would have picked another; the data-path matrix then runs over those GIDs.
//
// SLUICE_TEST_FUSE=both (tests/rdma/fusion_two_host.cmake; the bed's two links each): both hosts
// fuse their two devices with makeVDevice in NCCL's order of calls and run everything above over
// the fused device (fused -> fused across the two hosts: path 0 on the first link, path 1 on the
// second). Then the members' shares: SLUICE_TEST_SHARE_MESSAGES (32) messages of 4 MiB on
// connection 0, every byte verified, with each member's port counters read before and after (the
// sender's sent packets on host1, the receiver's received packets on host0): each member's share
// must be its weight's share (the weights makeVDevice logged) within 10 % of it.
// SLUICE_TEST_FUSE_WEIGHTS=A:B sets SLUICE_FUSION_WEIGHTS to the first member A, the second B
// (the members by the names the plugin gives them), so that the shares are checked unequal too.
// init gets a profiler callback and every isend / irecv a step handle, as NCCL gives them with no
// profiler plugin loaded (nccl_profiler_default.h); the run ends with a check that the plugin
// called the callback.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "nccl_profiler_default.h"
#include "plugin_bed.h"
#include "side_channel.h"
#include "sluice/core/wire/wire.h"
#include "two_host_matrix.h"

namespace nettest {
namespace {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

constexpr uint16_t kSidePort = 47124;
constexpr int kTag = 11;
constexpr char kGo = 'G';

// Open rdma_cm event channels of this process.
int rdma_cm_fds() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (std::filesystem::read_symlink(e.path(), ec) == "/dev/infiniband/rdma_cm") ++n;
  }
  return n;
}

int fail(int host, int rc, const std::string& why) {
  std::fprintf(stderr, "host%d: FAIL (%d): %s\n", host, rc, why.c_str());
  return rc;
}

// Connects with `handle` until it fails; the time it took, or -1 when it connected.
long long connect_until_error(Net& n, int dev, char* handle, std::string* warn) {
  sluice::rdmatest::ExpectWarns expect;
  const auto t0 = Clock::now();
  void* comm = nullptr;
  while (Clock::now() - t0 < wait_limit()) {
    if (n.connect(dev, handle, &comm) != ncclSuccess) {
      *warn = last_warn();
      return duration_cast<milliseconds>(Clock::now() - t0).count();
    }
    if (comm != nullptr) {
      n.close_send(comm);
      return -1;
    }
    usleep(1000);
  }
  return -1;
}

// The bed's two physical devices fused as NCCL would (devices, getProperties of each, makeVDevice,
// devices again); *vdev is the new device, *a and *b the members' properties. "" or what failed.
std::string fuse_both(Net& n, int* vdev, Props* a, Props* b) {
  int nd = 0;
  if (n.devices(&nd) != ncclSuccess) return "devices";
  std::vector<int> phys;
  std::vector<Props> props(nd);
  for (int d = 0; d < nd; ++d) {
    if (n.properties(d, &props[d]) != ncclSuccess)
      return "getProperties(" + std::to_string(d) + ")";
    if (props[d].vndevs == 1 && props[d].vdevs == std::vector<int>{d}) phys.push_back(d);
  }
  if (phys.size() < 2) return std::to_string(phys.size()) + " physical devices (two links: want 2)";
  g_keep_info = true;
  const ncclResult_t r = n.make_vdevice({phys[0], phys[1]}, vdev);
  if (r != ncclSuccess) return "makeVDevice: " + last_warn();
  int after = 0;
  if (n.devices(&after) != ncclSuccess || after != nd + 1 || *vdev != nd)
    return "makeVDevice gave device " + std::to_string(*vdev) + " of " + std::to_string(after);
  *a = props[phys[0]];
  *b = props[phys[1]];
  return {};
}

// Sets SLUICE_FUSION_WEIGHTS from SLUICE_TEST_FUSE_WEIGHTS=A:B for the engine about to start: the
// members' names come from a first engine (v12 keeps one per ctx, so the next init reads the
// configuration anew).
std::string set_fusion_weights() {
  const char* w = std::getenv("SLUICE_TEST_FUSE_WEIGHTS");
  if (w == nullptr || *w == 0) return {};
  int wa = 0, wb = 0;
  if (std::sscanf(w, "%d:%d", &wa, &wb) != 2) return std::string("SLUICE_TEST_FUSE_WEIGHTS=") + w;
  Net probe(12);
  if (probe.init(0x2400) != ncclSuccess) return "init (to name the members)";
  int nd = 0;
  if (probe.devices(&nd) != ncclSuccess || nd < 2) return "fewer than two devices";
  Props a, b;
  if (probe.properties(0, &a) != ncclSuccess || probe.properties(1, &b) != ncclSuccess)
    return "getProperties";
  const std::string v = a.name + "=" + std::to_string(wa) + "," + b.name + "=" + std::to_string(wb);
  setenv("SLUICE_FUSION_WEIGHTS", v.c_str(), 1);
  std::fprintf(stderr, "SLUICE_FUSION_WEIGHTS=%s\n", v.c_str());
  return {};
}

// Member packet counters: the sender's sent packets, the receiver's received ones.
long long member_counter(const Props& p, bool sender) {
  const int port = p.port > 0 ? p.port : 1;
  return sender ? device_sent_packets(p.name, port) : device_rcvd_packets(p.name, port);
}

// One message of `size` bytes with pattern `seed` on `comm`: the sender fills and sends it from
// `b`; the receiver fills all of `b` with the guard byte, posts all of it, and checks the size
// received, every byte and the guard bytes after them. "" or what failed.
std::string one_message(Net& n, void* comm, bool sender, RegBuf& b, size_t size, uint64_t seed) {
  void* req = nullptr;
  if (sender) {
    fill_pattern(b.data(), size, seed);
    if (!post_until("isend", &req,
                    [&](void** r) { return n.isend(comm, b.data(), size, kTag, b.mh(), r); }))
      return "isend";
    if (!wait_done(n, "send", req, nullptr)) return "send";
    return {};
  }
  std::memset(b.data(), kGuardByte, b.size());
  void* data = b.data();
  void* mh = b.mh();
  size_t cap = b.size();
  int tag = kTag;
  int got = -1;
  if (!post_until("irecv", &req,
                  [&](void** r) { return n.irecv(comm, 1, &data, &cap, &tag, &mh, r); }))
    return "irecv";
  if (!wait_done(n, "recv", req, &got)) return "recv";
  if (got != static_cast<int>(size))
    return "received " + std::to_string(got) + " of " + std::to_string(size);
  std::string bad = check_pattern(b.data(), size, seed);
  if (bad.empty()) bad = check_fill(b.data() + size, kGuard, kGuardByte);
  if (!bad.empty()) return "size " + std::to_string(size) + ": " + bad;
  return {};
}

// The members' shares on a fused connection: `count` messages of 4 MiB, every byte verified, and
// each member's counter share against its weight share (within 10 % of it).
std::string check_shares(Net& n, void* comm, bool sender, RegBuf& buf, const Props& a,
                         const Props& b, const std::string& fused_name) {
  const std::vector<std::string> info = kept_info();
  const long wa = weight_logged(info, fused_name, a.name);
  const long wb = weight_logged(info, fused_name, b.name);
  if (wa < 0 || wb < 0 || wa + wb == 0)
    return "no weights logged for " + a.name + " and " + b.name + " of " + fused_name;
  const int count = static_cast<int>(env_long("SLUICE_TEST_SHARE_MESSAGES", 32));
  constexpr size_t kSize = size_t{4} << 20;
  usleep(30 * 1000);  // ib_core caches hw_counters for 10 ms
  const long long a0 = member_counter(a, sender), b0 = member_counter(b, sender);
  if (a0 < 0 || b0 < 0) return "cannot read the members' packet counters";
  for (int i = 0; i < count; ++i) {
    const uint64_t seed = pattern_seed(kSize, static_cast<uint64_t>(i), 0x5a);
    if (std::string bad = one_message(n, comm, sender, buf, kSize, seed); !bad.empty())
      return "message " + std::to_string(i) + ": " + bad;
  }
  usleep(30 * 1000);
  const long long da = member_counter(a, sender) - a0, db = member_counter(b, sender) - b0;
  if (da + db <= 0) return "no packets counted on either member";
  const double share = double(da) / double(da + db);
  const double want = double(wa) / double(wa + wb);
  std::fprintf(
      stderr,
      "[shares] host%d %s packets, %d x 4 MiB fused -> fused, weights %s=%ld %s=%ld: "
      "%s %lld (%.1f %%), %s %lld (%.1f %%); expected %.1f / %.1f %% within 10 %% of each\n",
      sender ? 1 : 0, sender ? "sent" : "received", count, a.name.c_str(), wa, b.name.c_str(), wb,
      a.name.c_str(), da, 100 * share, b.name.c_str(), db, 100 * (1 - share), 100 * want,
      100 * (1 - want));
  for (const auto& [got, exp, who] :
       {std::tuple{share, want, a.name}, std::tuple{1 - share, 1 - want, b.name}}) {
    if (std::abs(got - exp) > 0.10 * exp + 1e-9)
      return who + " carried " + std::to_string(100 * got) + " % of the packets, its weight " +
             std::to_string(100 * exp) + " %";
  }
  return {};
}

// The GID choices logged at INFO (route_gid.cc): one per connection on each side, each the route's
// GID for this host's bed address, unlike the table's guess. "" when so, else what is wrong.
std::string check_route_gids(int host, int nconn) {
  const char* self = std::getenv("SLUICE_BED_ADDR");
  const char* peer = std::getenv("SLUICE_BED_PEER_ADDR");
  if (self == nullptr || peer == nullptr) return "SLUICE_BED_ADDR/SLUICE_BED_PEER_ADDR not set";
  const std::string side = host == 1 ? "connect on " : "accept on ";
  const std::string want =
      "(::ffff:" + std::string(self) + ", RoCE v2) chosen by the route to " + peer;
  int good = 0;
  std::string seen;
  for (const std::string& line : kept_info()) {
    if (!contains(line, " GID index ") || !contains(line, side)) continue;
    if (seen.empty()) seen = line;
    if (contains(line, want) && contains(line, "the table alone would pick index")) ++good;
  }
  if (good == nconn) return {};
  return std::to_string(good) + " of " + std::to_string(nconn) + " connections logged \"" + want +
         "\" with another table guess; first GID line: " + (seen.empty() ? "none" : seen);
}

int run(int host, const std::string& expect) {
  const bool route_gid = env_long("SLUICE_TEST_ROUTE_GID", 0) == 1;
  g_keep_info = route_gid;
  const int side = side_socket(host, kSidePort);
  if (side < 0) return fail(host, 2, "no side connection");
  const int nconn = static_cast<int>(env_long("SLUICE_TEST_CONNS", 16));
  const bool faults = expect == "rdmacm" && std::getenv("SLUICE_CM") != nullptr &&
                      std::string(std::getenv("SLUICE_CM")) == "rdmacm";
  const char* fuse_env = std::getenv("SLUICE_TEST_FUSE");
  const bool fused = fuse_env != nullptr && std::string(fuse_env) == "both";
  if (fuse_env != nullptr && *fuse_env != 0 && !fused)
    return fail(host, 3, std::string("SLUICE_TEST_FUSE=") + fuse_env + ": only 'both' here");
  if (fused) {
    if (std::string bad = set_fusion_weights(); !bad.empty())
      return fail(host, 3, "fusion weights: " + bad);
  }
  Net n(12);
  // As NCCL calls it: a profiler callback at init (NCCL's own, no profiler plugin loaded) and a
  // step handle with every isend / irecv (nccl_profiler_default.h; SLUICE_TEST_PROFILER).
  nccl_profiler::attach(n, nccl_profiler::Mode::kDefault);
  if (n.init(0x2410 + host) != ncclSuccess) return fail(host, 3, "init");
  int dev = 0;
  Props ma, mb, mv;
  if (fused) {
    if (std::string bad = fuse_both(n, &dev, &ma, &mb); !bad.empty())
      return fail(host, 3, "fusion: " + bad);
    if (n.properties(dev, &mv) != ncclSuccess) return fail(host, 3, "getProperties of the fused");
    std::fprintf(stderr, "host%d: fused device %d %s of %s and %s\n", host, dev, mv.name.c_str(),
                 ma.name.c_str(), mb.name.c_str());
  }
  std::vector<void*> comms(nconn, nullptr);
  std::vector<void*> lcs(nconn, nullptr);
  const int nhandles = nconn + (faults ? 2 : 0);
  std::vector<char> handles(static_cast<size_t>(nhandles) * NCCL_NET_HANDLE_MAXSIZE, 0);
  const auto t0 = Clock::now();
  if (host == 0) {
    lcs.resize(nhandles, nullptr);
    for (int i = 0; i < nhandles; ++i)
      if (n.listen(dev, &handles[i * NCCL_NET_HANDLE_MAXSIZE], &lcs[i]) != ncclSuccess)
        return fail(host, 4, "listen");
    if (!write_full(side, handles.data(), handles.size())) return fail(host, 2, "side write");
    int left = nconn;
    while (left > 0) {
      for (int i = 0; i < nconn; ++i) {
        if (comms[i] != nullptr) continue;
        if (n.accept(lcs[i], &comms[i]) != ncclSuccess) return fail(host, 4, "accept");
        if (comms[i] != nullptr) --left;
      }
      if (Clock::now() - t0 > wait_limit()) return fail(host, 4, "accept timed out");
    }
    for (int i = 0; i < nconn; ++i) n.close_listen(lcs[i]);
  } else {
    if (!read_full(side, handles.data(), handles.size(), wait_limit()))
      return fail(host, 2, "side read");
    int left = nconn;
    while (left > 0) {
      for (int i = 0; i < nconn; ++i) {
        if (comms[i] != nullptr) continue;
        if (n.connect(dev, &handles[i * NCCL_NET_HANDLE_MAXSIZE], &comms[i]) != ncclSuccess)
          return fail(host, 4, "connect " + std::to_string(i) + ": " + last_warn());
        if (comms[i] != nullptr) --left;
      }
      if (Clock::now() - t0 > wait_limit()) return fail(host, 4, "connect timed out");
    }
    const auto ms = duration_cast<milliseconds>(Clock::now() - t0).count();
    std::fprintf(stderr, "host1: SLUICE_CM=%s: %d connections set up in %lld ms (%.1f ms each)\n",
                 std::getenv("SLUICE_CM") ? std::getenv("SLUICE_CM") : "auto", nconn,
                 static_cast<long long>(ms), static_cast<double>(ms) / nconn);
  }
  // Which connection manager: in rdmacm mode the comms share the process's one rdma_cm channel
  // (cm_channel.h; it was one per comm, which ran 256 connections out of `ulimit -n` 1024).
  const int cm_fds = rdma_cm_fds();
  if (expect == "rdmacm" && cm_fds != 1)
    return fail(host, 5,
                std::to_string(cm_fds) + " rdma_cm channels for " + std::to_string(nconn) +
                    " comms: " + (cm_fds == 0 ? "not rdmacm" : "want exactly one, shared"));
  std::fprintf(stderr, "host%d: %d comms hold %d rdma_cm event channel(s)\n", host, nconn, cm_fds);
  if (expect == "oob" && cm_fds != 0)
    return fail(host, 5, std::to_string(cm_fds) + " rdma_cm channels open in oob mode");
  if (route_gid) {
    const std::string bad = check_route_gids(host, nconn);
    if (!bad.empty()) return fail(host, 10, "route-checked GID: " + bad);
    std::fprintf(stderr, "host%d: every connection uses the GID of %s, chosen by the route\n", host,
                 std::getenv("SLUICE_BED_ADDR"));
  }

  // The data-path matrix on connection 0, one message on every other.
  RegBuf buf;
  if (!buf.allocate(&n, comms[0], kMaxSize + kGuard)) return fail(host, 6, "regMr");
  std::vector<std::pair<int, size_t>> plan;
  for (size_t s : kSizes) plan.push_back({0, s});
  for (int i = 1; i < nconn; ++i) plan.push_back({i, 4096 + static_cast<size_t>(i)});
  std::vector<RegBuf> other(nconn);
  for (int i = 1; i < nconn; ++i)
    if (!other[i].allocate(&n, comms[i], 8192)) return fail(host, 6, "regMr");
  uint64_t it = 0;
  for (auto [i, size] : plan) {
    RegBuf& b = i == 0 ? buf : other[i];
    const uint64_t seed = pattern_seed(size, ++it, kTag);
    if (std::string bad = one_message(n, comms[i], host == 1, b, size, seed); !bad.empty())
      return fail(host, 6, bad);
  }
  std::fprintf(stderr, "host%d: every size passed, into a larger posted buffer (%zu messages)\n",
               host, plan.size());

  // The rest of the matrix: grouped receives on connection 0, 32 in flight on connection 1, a
  // random-size stream on connection 0, and an oversize message on the last connection.
  const bool sender = host == 1;
  const int c1 = nconn > 1 ? 1 : 0;
  std::string bad = two_host::grouped(n, comms[0], sender);
  if (!bad.empty()) return fail(host, 6, "grouped receives: " + bad);
  std::fprintf(stderr, "host%d: grouped receives of 1..8 passed\n", host);
  if (bad = two_host::in_flight(n, comms[c1], sender); !bad.empty())
    return fail(host, 6, "32 in flight: " + bad);
  std::fprintf(stderr, "host%d: 32 requests in flight passed\n", host);
  const int count = static_cast<int>(env_long("SLUICE_TEST_STREAM_MESSAGES", 1000));
  size_t bytes = 0;
  const auto s0 = Clock::now();
  if (bad = two_host::stream(n, comms[0], sender, count, 0x5eed, &bytes); !bad.empty())
    return fail(host, 6, "random-size stream: " + bad);
  std::fprintf(stderr, "host%d: random-size stream passed: %d messages, %zu bytes in %lld ms\n",
               host, count, bytes,
               static_cast<long long>(duration_cast<milliseconds>(Clock::now() - s0).count()));
  const int last = nconn - 1;
  const bool oversize = nconn > 2;
  if (oversize) {
    if (bad = two_host::oversize(n, comms[last], sender); !bad.empty())
      return fail(host, 6, "message larger than the posted buffer: " + bad);
  }

  if (fused) {
    if (bad = check_shares(n, comms[0], sender, buf, ma, mb, mv.name); !bad.empty())
      return fail(host, 11, "members' shares: " + bad);
    std::fprintf(stderr, "host%d: members' shares passed\n", host);
  }

  if (host == 1 && faults) {
    const long bound = env_long("SLUICE_CONNECT_TIMEOUT_MS", 120000) + 2000;
    // A connect request to an rdma_cm port where nothing listens.
    auto* h = reinterpret_cast<sluice::wire::Handle*>(&handles[nconn * NCCL_NET_HANDLE_MAXSIZE]);
    h->cm_port = htons(1);
    h->checksum = sluice::wire::handle_checksum(*h);
    std::string w;
    long long took = connect_until_error(n, dev, reinterpret_cast<char*>(h), &w);
    std::fprintf(stderr, "host1: bad rdma_cm port failed after %lld ms: %s\n", took, w.c_str());
    if (took < 0 || took > bound || !contains(w, "RDMA_CM_EVENT_REJECTED"))
      return fail(host, 7, "rejected connect");
    // A listener address nobody answers for (same subnet, no such host).
    h = reinterpret_cast<sluice::wire::Handle*>(&handles[(nconn + 1) * NCCL_NET_HANDLE_MAXSIZE]);
    h->addr[3] = 99;
    if (h->cm_family == AF_INET) h->cm_addr[3] = 99;  // the rdma_cm listener has its own address
    h->checksum = sluice::wire::handle_checksum(*h);
    took = connect_until_error(n, dev, reinterpret_cast<char*>(h), &w);
    std::fprintf(stderr, "host1: unreachable listener failed after %lld ms: %s\n", took, w.c_str());
    // Resolved in attempts of kCmResolveAttemptMs within the 5 s bound ("(5 attempts in 5013 ms)"),
    // each a fresh look at the neighbour table (cm_choice.h says why).
    if (took < 0 || took > bound || !contains(w, "RDMA_CM_EVENT_ADDR_ERROR") ||
        !contains(w, " attempts in "))
      return fail(host, 8, "unreachable connect");
  }
  if (host == 1 && !write_full(side, &kGo, 1)) return fail(host, 2, "side write");
  if (host == 0) {  // serve the fault listeners' handshakes (they are dropped) until host1 is done
    sluice::rdmatest::ExpectWarns expect_drops;
    char go = 0;
    for (bool done = false; !done;) {
      for (int i = nconn; i < nhandles; ++i) {
        void* c = nullptr;
        if (n.accept(lcs[i], &c) != ncclSuccess) return fail(host, 4, "accept");
        if (c != nullptr) return fail(host, 4, "a fault connection was accepted");
      }
      pollfd q{side, POLLIN, 0};
      if (poll(&q, 1, 1) == 1) done = read_full(side, &go, 1, wait_limit()) && go == kGo;
      if (Clock::now() - t0 > 3 * wait_limit()) return fail(host, 4, "no word from host1");
    }
    for (int i = nconn; i < nhandles; ++i) n.close_listen(lcs[i]);
  }
  buf.reset();
  for (auto& b : other) b.reset();
  for (int i = 0; i < nconn; ++i) {
    const bool failed = oversize && i == last;  // may report its error again at close
    std::optional<sluice::rdmatest::ExpectWarns> expect_close;
    if (failed) expect_close.emplace();
    const ncclResult_t r = host == 1 ? n.close_send(comms[i]) : n.close_recv(comms[i]);
    if (r != ncclSuccess && !failed) return fail(host, 9, "close");
  }
  if (rdma_cm_fds() != 0) return fail(host, 9, "rdma_cm channels left after close");
  std::fprintf(stderr, "host%d: %s\n", host, nccl_profiler::summary().c_str());
  if (const std::string e = nccl_profiler::check(true); !e.empty()) return fail(host, 9, e);
  close(side);
  std::fprintf(stderr, "host%d: PASS\n", host);
  return 0;
}

}  // namespace
}  // namespace nettest

int main(int argc, char** argv) {
  if (argc != 3) return std::fprintf(stderr, "usage: %s HOST rdmacm|oob\n", argv[0]), 2;
  return nettest::run(std::atoi(argv[1]), argv[2]);
}
