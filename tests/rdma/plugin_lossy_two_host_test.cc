// Two hosts (scripts/rdma-bed --two-host; labels rdma, faults, bed), through the exported plugin
// tables (tests/rdma/faults.cmake). One run of the bed, three phases in two processes a VM
// (--phase stream: 1 and 2; --phase poweroff: 3, with its own NCCL_IB_TIMEOUT / NCCL_IB_RETRY_CNT),
// on the real link between the two kernels:
//  1. Stream: host1 sends host0 messages of 4 KiB .. 4 MiB (a window of kWindow in flight); host0
//     verifies every byte. Time and throughput.
//  2. The same stream (and a 16 MiB message last) with `tc qdisc ... netem loss 5% delay 5ms`
//     (SLUICE_TEST_NETEM) on eth0 of both VMs (sch_netem loaded in the VM), NCCL_IB_TIMEOUT=14
//     and the watchdog at its default: every message completes, every byte verifies, no comm
//     fails, and netem dropped packets (read back from `tc -s qdisc`). Time and throughput.
//  2b. Told: every RoCE packet dropped on both hosts (tc ingress filter) with host1's send in
//     flight; host1's watchdog fails its comm, and host0's pending receive fails within one
//     liveness poll of that, quoting host1's reason (the failure notice, issue 19); both close
//     in NCCL's order (deregMr, then close) with success.
//  3. Power-off, last because the bed cannot restart a VM: host1's VM is powered off at once
//     (scripts/bed/poweroff, sysrq 'o': no FIN, no RST) while host0 holds a published receive with
//     nothing in flight (comm 1) and a 16 MiB send in flight (comm 2). Comm 1 fails by TCP
//     keepalive within 5 x SLUICE_HEARTBEAT_MS + 1 s; comm 2 by RC retries within 4.096 us x
//     2^NCCL_IB_TIMEOUT x (NCCL_IB_RETRY_CNT + 1) + 2 s. Each WARN names the peer, the device, the
//     QP and what was seen; the failed comms keep failing with the same reason; both close within
//     10 s and every verbs object is released.
// Exit status = result (0 pass); each failure prints why on stderr.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cts_tail.h"
#include "ext_stats.h"
#include "plugin_bed.h"
#include "side_channel.h"

namespace nettest {
namespace {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

constexpr uint16_t kSidePort = 47124;
constexpr int kTag = 21;
constexpr int kWindow = 4;
constexpr size_t kMaxMsg = size_t{4} << 20;
// Phase 1's longest message, SLUICE_TEST_LOSSY_MAX_MIB (16; 4 = no longer message than the
// stream's own): a long message under loss is judged per 1 MiB run by the watchdog (progress WRs,
// core/src/health/progress.h), so it must complete at the default bound however long it takes.
size_t lossy_max() {
  return static_cast<size_t>(std::max(4L, env_long("SLUICE_TEST_LOSSY_MAX_MIB", 16))) << 20;
}
// Bytes of one window slot of the stream buffers.
size_t slot_bytes() {
  return std::max(kMaxMsg, lossy_max());
}
constexpr size_t kInFlight = size_t{16} << 20;  // phase 3's send: long enough to be cut mid-way

#define CHECK_OR(rc, cond, ...)                               \
  do {                                                        \
    if (!(cond)) {                                            \
      std::fprintf(stderr, "host%d: FAILED: ", g_host);       \
      std::fprintf(stderr, __VA_ARGS__);                      \
      std::fprintf(stderr, " [%s:%d]\n", __FILE__, __LINE__); \
      return rc;                                              \
    }                                                         \
  } while (0)

int g_host = -1;

struct Counts0 {
  int qp, cq, mr;
};

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// The stream: sizes in order, SLUICE_TEST_STREAM_ROUNDS (1) times 16 x 4 KiB, 8 x 64 KiB,
// 4 x 1 MiB and 2 x 4 MiB (12.6 MiB a round); under netem (phase 1) one 1 MiB message and then
// one of lossy_max() (16 MiB; 17.6 MiB in all; with SLUICE_TEST_LOSSY_MAX_MIB=4, the 4 x 1 MiB and
// one 4 MiB): at 5 % loss it runs ~30-45x slower (measured) and CI time counts (the 3 x 1 MiB and
// the 4 MiB message it no longer sends took 29 s of the 82 s phase in a CI rehearsal). Phase 1 runs
// at the watchdog's default bound (SLUICE_PROGRESS_TIMEOUT_MS unset): a slow link that moves bytes
// must not be failed by it. Its bound is per 1 MiB run (base 1.8 s + 10 s), the 16 MiB message
// completing a progress WR every MiB; measured: the 16 MiB message took 80 s under 5 % loss (before
// progress signals, one 16 MiB WRITE had not completed within 171 s).
//
// SLUICE_TEST_SMALL_SOAK=N (the eager path's loss soak, bench/eager-loss-soak; not CI: minutes):
// phase 1 is N small messages instead, 0 .. 8 KiB from a fixed sequence (both hosts compute the
// same), across SLUICE_EAGER_MAX: eager and rendezvous mixed in one stream under loss, then 1 MiB.
long small_soak() {
  return env_long("SLUICE_TEST_SMALL_SOAK", 0);
}

std::vector<size_t> stream_sizes(int phase) {
  std::vector<size_t> v;
  if (phase == 1 && small_soak() > 0) {
    uint64_t x = 0x5eed;
    for (long i = 0; i < small_soak(); ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      const uint64_t r = x >> 33;
      // A quarter of them 0 .. 64 B, the rest 0 .. 8 KiB; every 64th one exactly 4096 or 4097.
      v.push_back(i % 64 == 63 ? 4096 + (r & 1) : (r & 3) == 0 ? r % 65 : r % 8193);
    }
    // Last, 1 MiB by rendezvous, as the mixed stream ends: the receiver's traffic is no longer
    // eager, so the "told" phase's receives publish their clear-to-send at once, each in a write
    // of its own, whose tail prove_cts_tail (cts_tail.h) waits to see probed. After a run of
    // eager messages the receiver holds them back, and the first send's ask publishes both in one
    // write, which the first receive's completion proves: no probe ever comes.
    v.push_back(size_t{1} << 20);
    return v;
  }
  const long rounds = env_long("SLUICE_TEST_STREAM_ROUNDS", 1);
  for (long r = 0; r < rounds; ++r) {
    for (int i = 0; i < 16; ++i) v.push_back(4096);
    for (int i = 0; i < 8; ++i) v.push_back(65536);
    const bool lossy_long = phase == 1 && lossy_max() > kMaxMsg;
    for (int i = 0; i < (lossy_long ? 1 : 4); ++i) v.push_back(size_t{1} << 20);
    for (int i = 0; i < (lossy_long ? 0 : phase == 1 ? 1 : 2); ++i) v.push_back(kMaxMsg);
    if (lossy_long) v.push_back(lossy_max());
  }
  return v;
}

uint64_t seed_of(int phase, size_t i, size_t size) {
  return pattern_seed(size, 1000 * static_cast<uint64_t>(phase) + i, kTag);
}

// host0: receives the stream on `comm`, kWindow receives in flight, every byte checked.
int receive_stream(Net& n, void* comm, RegBuf& buf, int phase, double* ms, size_t* bytes) {
  const auto sizes = stream_sizes(phase);
  void* reqs[kWindow] = {};
  size_t posted = 0, done_n = 0;
  *bytes = 0;
  const auto t0 = Clock::now();
  while (done_n < sizes.size()) {
    CHECK_OR(20, ms_since(t0) < wait_limit().count(), "phase %d: message %zu of %zu not received",
             phase, done_n, sizes.size());
    while (posted < sizes.size() && posted - done_n < kWindow) {
      void* data = buf.data() + (posted % kWindow) * slot_bytes();
      std::memset(data, 0, sizes[posted]);
      void* mh = buf.mh();
      size_t cap = slot_bytes();
      int tag = kTag;
      void** r = &reqs[posted % kWindow];
      CHECK_OR(21,
               post_until("irecv", r,
                          [&](void** q) { return n.irecv(comm, 1, &data, &cap, &tag, &mh, q); }),
               "phase %d: irecv %zu", phase, posted);
      ++posted;
    }
    int done = 0, size = -1;
    ncclResult_t r = n.test(reqs[done_n % kWindow], &done, &size);
    CHECK_OR(22, r == ncclSuccess, "phase %d: test of receive %zu returned %d: %s", phase, done_n,
             r, last_warn().c_str());
    if (!done) continue;
    CHECK_OR(23, size == static_cast<int>(sizes[done_n]),
             "phase %d: message %zu: %d bytes, sent %zu", phase, done_n, size, sizes[done_n]);
    const std::string bad = check_pattern(buf.data() + (done_n % kWindow) * slot_bytes(),
                                          sizes[done_n], seed_of(phase, done_n, sizes[done_n]));
    CHECK_OR(24, bad.empty(), "phase %d: message %zu (%zu bytes) corrupt: %s", phase, done_n,
             sizes[done_n], bad.c_str());
    *bytes += sizes[done_n];
    if (phase == 1 && (small_soak() == 0 || (done_n + 1) % 1000 == 0))
      std::fprintf(stderr, "host0: netem: message %zu (%zu bytes) verified at %.0f ms\n", done_n,
                   sizes[done_n], ms_since(t0));
    ++done_n;
  }
  *ms = ms_since(t0);
  return 0;
}

// host1: sends the stream on `comm`, kWindow sends in flight.
int send_stream(Net& n, void* comm, RegBuf& buf, int phase) {
  const auto sizes = stream_sizes(phase);
  void* reqs[kWindow] = {};
  size_t posted = 0, done_n = 0;
  const auto t0 = Clock::now();
  while (done_n < sizes.size()) {
    CHECK_OR(30, ms_since(t0) < wait_limit().count(), "phase %d: send %zu of %zu not done", phase,
             done_n, sizes.size());
    while (posted < sizes.size() && posted - done_n < kWindow) {
      uint8_t* data = buf.data() + (posted % kWindow) * slot_bytes();
      fill_pattern(data, sizes[posted], seed_of(phase, posted, sizes[posted]));
      void** r = &reqs[posted % kWindow];
      CHECK_OR(31,
               post_until(
                   "isend", r,
                   [&](void** q) { return n.isend(comm, data, sizes[posted], kTag, buf.mh(), q); }),
               "phase %d: isend %zu: %s", phase, posted, last_warn().c_str());
      ++posted;
    }
    int done = 0;
    ncclResult_t r = n.test(reqs[done_n % kWindow], &done, nullptr);
    CHECK_OR(32, r == ncclSuccess, "phase %d: test of send %zu returned %d: %s", phase, done_n, r,
             last_warn().c_str());
    if (done) ++done_n;
  }
  return 0;
}

int shell(const std::string& cmd) {
  std::fprintf(stderr, "host%d: $ %s\n", g_host, cmd.c_str());
  return std::system(cmd.c_str());
}

std::string netem_spec() {
  const char* v = std::getenv("SLUICE_TEST_NETEM");
  return v != nullptr && *v != '\0' ? v : "loss 5% delay 5ms";
}

// Packets netem dropped on eth0 so far (`tc -s qdisc show dev eth0`: "dropped N"); -1 unreadable.
long netem_dropped() {
  FILE* p = popen("tc -s qdisc show dev eth0 2>/dev/null", "r");
  if (p == nullptr) return -1;
  long dropped = -1;
  char line[512];
  bool netem = false;
  while (std::fgets(line, sizeof line, p) != nullptr) {
    if (contains(line, "netem")) netem = true;
    const char* d = std::strstr(line, "dropped ");
    if (netem && d != nullptr && dropped < 0) dropped = std::strtol(d + 8, nullptr, 10);
  }
  pclose(p);
  return dropped;
}

bool sync_byte(int side, char send, char expect) {
  char b = 0;
  return write_full(side, &send, 1) && read_full(side, &b, 1, wait_limit()) && b == expect;
}

// Drops RoCE v2 (UDP 4791) arriving on eth0 (ingress: lost on the path, as in plugin_stall), or
// removes that filter.
bool roce_drop(bool on) {
  if (!on) return shell("tc qdisc del dev eth0 clsact") == 0;
  const std::string f = "tc filter add dev eth0 ingress ";
  return shell("modprobe sch_ingress && modprobe cls_u32 && modprobe act_gact") == 0 &&
         shell("tc qdisc add dev eth0 clsact") == 0 &&
         shell(f +
               "protocol ip prio 2 u32 match ip protocol 17 0xff match ip dport 4791 0xffff "
               "action drop") == 0 &&
         shell(f +
               "protocol ipv6 prio 1 u32 match ip6 protocol 17 0xff match ip6 dport 4791 "
               "0xffff action drop") == 0;
}

// Phase "told" (after the stream, same comm, NCCL_IB_RETRY_CNT=7: rxe retries forever): every
// RoCE packet is dropped on both hosts with host1's second send in flight, so host1's progress
// watchdog fails its comm; its failure notice reaches host0 over the comm's TCP socket, and
// host0's pending receive must fail within one SLUICE_LIVENESS_POLL_MS (+ 1 s of scheduling
// margin) of host1's failure, quoting host1's reason. host0 times it from the moment host1's
// 'F' (sent right after its test failed) arrives on the side channel.
constexpr size_t kToldMsg = 65536;
long long poll_ms() {
  return env_long("SLUICE_LIVENESS_POLL_MS", 1000);
}

int host0_told(Net& n, void* rc, RegBuf& buf, int side) {
  void* reqs[2] = {};
  for (int i = 0; i < 2; ++i) {
    void* data = buf.data() + i * kToldMsg;
    void* mh = buf.mh();
    size_t cap = kToldMsg;
    int tag = kTag;
    CHECK_OR(30,
             post_until("irecv", &reqs[i],
                        [&](void** q) { return n.irecv(rc, 1, &data, &cap, &tag, &mh, q); }),
             "told: irecv %d", i);
  }
  for (void* q : reqs) {
    int done = 0;
    CHECK_OR(30, n.test(q, &done, nullptr) == ncclSuccess && !done, "told: publish");
  }
  CHECK_OR(30, sync_byte(side, 'T', 't'), "told: host1 did not take the receives");
  CHECK_OR(31, wait_done(n, "told: recv 1", reqs[0], nullptr), "%s", last_warn().c_str());
  CHECK_OR(31, check_pattern(buf.data(), kToldMsg, seed_of(7, 0, kToldMsg)).empty(),
           "told: message 1 differs");
  // Receive 2's own clear-to-send write is proven before the cut (cts_tail.h): host0 then has
  // nothing outstanding, and only host1's watchdog sees the cut.
  CHECK_OR(31, prove_cts_tail(n, rc, reqs[1], 120000),
           "told: receive 2's clear-to-send was never probed: %s", last_warn().c_str());
  CHECK_OR(32, roce_drop(true), "told: RoCE drop on host0");
  CHECK_OR(32, sync_byte(side, 'D', 'd'), "told: host1 did not drop");
  const auto t0 = Clock::now();
  Clock::time_point told{}, failed{};
  ncclResult_t r = ncclSuccess;
  int done = 0;
  std::string w;
  while (Clock::now() - t0 < std::chrono::seconds(60) &&
         (r == ncclSuccess || told == Clock::time_point{})) {
    if (told == Clock::time_point{}) {
      char b = 0;
      if (::recv(side, &b, 1, MSG_DONTWAIT) == 1) {
        CHECK_OR(33, b == 'F', "told: host1 said %c", b);
        told = Clock::now();
      }
    }
    if (r == ncclSuccess) {
      r = n.test(reqs[1], &done, nullptr);
      CHECK_OR(33, !done, "told: receive 2 completed although every packet was dropped");
      if (r != ncclSuccess) {
        failed = Clock::now();
        w = last_warn();
      }
    }
    usleep(500);
  }
  CHECK_OR(33, told != Clock::time_point{}, "told: host1's comm did not fail");
  CHECK_OR(33, r == ncclRemoteError, "told: the receive did not fail (%d)", static_cast<int>(r));
  const long long ms = duration_cast<milliseconds>(failed - told).count();
  std::fprintf(stderr,
               "host0: told: receive failed %lld ms after host1's comm failed (%lld ms after the "
               "drop; one poll %lld ms): %s\n",
               ms, static_cast<long long>(duration_cast<milliseconds>(failed - t0).count()),
               poll_ms(), w.c_str());
  CHECK_OR(34, ms <= poll_ms() + 1000, "told: %lld ms, more than one poll + 1 s", ms);
  CHECK_OR(34,
           contains(w, "the peer's comm failed (peer ") &&
               contains(w, "its reason: \"no progress on qpn "),
           "told: the WARN does not quote host1's reason: %s", w.c_str());
  CHECK_OR(35, roce_drop(false), "told: drop not removed on host0");
  CHECK_OR(35, sync_byte(side, 'R', 'r'), "told: host1 did not remove its drop");
  return 0;
}

int host1_told(Net& n, void* sc, RegBuf& buf, int side) {
  char b = 0;
  CHECK_OR(30, read_full(side, &b, 1, wait_limit()) && b == 'T', "told: no start");
  b = 't';
  CHECK_OR(30, write_full(side, &b, 1), "side");
  fill_pattern(buf.data(), kToldMsg, seed_of(7, 0, kToldMsg));
  void* s1 = nullptr;
  CHECK_OR(
      31,
      post_until("isend", &s1,
                 [&](void** q) { return n.isend(sc, buf.data(), kToldMsg, kTag, buf.mh(), q); }),
      "told: isend 1");
  CHECK_OR(31, wait_done(n, "told: send 1", s1, nullptr), "%s", last_warn().c_str());
  CHECK_OR(32, read_full(side, &b, 1, wait_limit()) && b == 'D', "told: no drop request");
  CHECK_OR(32, roce_drop(true), "told: RoCE drop on host1");
  b = 'd';
  CHECK_OR(32, write_full(side, &b, 1), "side");
  void* s2 = nullptr;
  const auto t0 = Clock::now();
  CHECK_OR(33,
           post_until("isend", &s2,
                      [&](void** q) {
                        return n.isend(sc, buf.data() + kToldMsg, kToldMsg, kTag, buf.mh(), q);
                      }),
           "told: isend 2");
  ncclResult_t r = ncclSuccess;
  int done = 0;
  while (r == ncclSuccess && !done && Clock::now() - t0 < std::chrono::seconds(60)) {
    r = n.test(s2, &done, nullptr);
    usleep(500);
  }
  b = 'F';
  CHECK_OR(33, write_full(side, &b, 1), "side");
  const std::string w = last_warn();
  std::fprintf(stderr, "host1: told: send failed %lld ms after its isend: %s\n",
               static_cast<long long>(duration_cast<milliseconds>(Clock::now() - t0).count()),
               w.c_str());
  CHECK_OR(33, r == ncclRemoteError && !done, "told: the send did not fail (%d, done %d)",
           static_cast<int>(r), done);
  CHECK_OR(33, contains(w, "no progress on qpn "), "told: not the watchdog: %s", w.c_str());
  CHECK_OR(35, read_full(side, &b, 1, wait_limit()) && b == 'R', "told: no removal request");
  CHECK_OR(35, roce_drop(false), "told: drop not removed on host1");
  b = 'r';
  CHECK_OR(35, write_full(side, &b, 1), "side");
  return 0;
}

int host0_stream(int side) {
  Net n(12);
  CHECK_OR(3, n.init(0x2e70) == ncclSuccess, "init");
  Props props;
  CHECK_OR(3, n.properties(0, &props) == ncclSuccess, "properties");
  const Counts0 before{rdma_resource_count("qp"), rdma_resource_count("cq"),
                       rdma_resource_count("mr")};
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* lc = nullptr;
  CHECK_OR(4, n.listen(0, handle, &lc) == ncclSuccess && write_full(side, handle, sizeof handle),
           "listen");
  void* rc = nullptr;
  const auto deadline = Clock::now() + wait_limit();
  while (rc == nullptr && Clock::now() < deadline)
    CHECK_OR(4, n.accept(lc, &rc) == ncclSuccess, "accept: %s", last_warn().c_str());
  n.close_listen(lc);
  CHECK_OR(4, rc != nullptr, "no comm from host1");
  RegBuf buf;
  CHECK_OR(4, buf.allocate(&n, rc, kWindow * slot_bytes()), "regMr");

  // Phase 1 and 2: the stream without, then with, netem on both ends.
  double ms[2] = {};
  size_t bytes[2] = {};
  long dropped0 = -1;
  for (int phase = 0; phase < 2; ++phase) {
    if (phase == 1) {
      const std::string add =
          "modprobe sch_netem && tc qdisc replace dev eth0 root netem " + netem_spec();
      CHECK_OR(10, shell(add) == 0, "netem could not be set up on host0");
      CHECK_OR(10, sync_byte(side, 'N', 'n'), "host1 did not set up netem");
    }
    if (int r = receive_stream(n, rc, buf, phase, &ms[phase], &bytes[phase])) return r;
    std::fprintf(stderr, "host0: phase %d (%s): %zu messages, %.1f MiB in %.0f ms, %.2f MiB/s\n",
                 phase + 1, phase == 0 ? "no loss" : netem_spec().c_str(),
                 stream_sizes(phase).size(), bytes[phase] / 1048576.0, ms[phase],
                 bytes[phase] / 1048576.0 / (ms[phase] / 1e3));
    if (phase == 1) {
      sluiceCommStats_v1_t st{};
      if (comm_stats(rc, &st))
        std::fprintf(
            stderr,
            "host0: phase 2: the receive comm has taken %llu messages from the eager "
            "ring so far (SLUICE_EAGER_MAX=%s)\n",
            static_cast<unsigned long long>(st.eagerMessages),
            std::getenv("SLUICE_EAGER_MAX") != nullptr ? std::getenv("SLUICE_EAGER_MAX") : "unset");
      dropped0 = netem_dropped();
      CHECK_OR(11, shell("tc qdisc del dev eth0 root") == 0, "netem not removed on host0");
    }
  }
  char b = 'C';
  long dropped1 = -1;
  CHECK_OR(11, write_full(side, &b, 1) && read_full(side, &dropped1, sizeof dropped1, wait_limit()),
           "host1 did not remove netem");
  std::fprintf(stderr,
               "host0: netem (%s) dropped %ld packets on host0 (CTS, ACKs) and %ld on host1 "
               "(data); the stream took %.2fx as long as without loss\n",
               netem_spec().c_str(), dropped0, dropped1, ms[1] / ms[0]);
  CHECK_OR(12, dropped1 > 0, "netem dropped no data packet: the loss was not exercised");
  if (int r = host0_told(n, rc, buf, side)) return r;
  buf.reset();  // NCCL's order on the failed comm, receive 2 pending: deregMr, then close
  CHECK_OR(13, n.close_recv(rc) == ncclSuccess, "closeRecv: %s", last_warn().c_str());
  const Counts0 after{rdma_resource_count("qp"), rdma_resource_count("cq"),
                      rdma_resource_count("mr")};
  CHECK_OR(
      13,
      before.qp < 0 || (after.qp == before.qp && after.cq == before.cq && after.mr == before.mr),
      "verbs objects leaked: qp %d -> %d, cq %d -> %d, mr %d -> %d", before.qp, after.qp, before.cq,
      after.cq, before.mr, after.mr);
  CHECK_OR(13, n.finalize() == ncclSuccess, "finalize");
  return 0;
}

// Phase 3 (a process of its own: NCCL_IB_TIMEOUT / NCCL_IB_RETRY_CNT set for it): comm 1 (rc)
// holds a published receive with nothing in flight; comm 2 (sc) a send in flight. Then host1's VM
// is powered off.
int host0_poweroff(int side) {
  Net n(12);
  CHECK_OR(3, n.init(0x2e72) == ncclSuccess, "init");
  Props props;
  CHECK_OR(3, n.properties(0, &props) == ncclSuccess, "properties");
  const Counts0 before{rdma_resource_count("qp"), rdma_resource_count("cq"),
                       rdma_resource_count("mr")};
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* lc = nullptr;
  CHECK_OR(4, n.listen(0, handle, &lc) == ncclSuccess && write_full(side, handle, sizeof handle),
           "listen");
  void* rc = nullptr;
  const auto deadline = Clock::now() + wait_limit();
  while (rc == nullptr && Clock::now() < deadline)
    CHECK_OR(4, n.accept(lc, &rc) == ncclSuccess, "accept: %s", last_warn().c_str());
  n.close_listen(lc);
  CHECK_OR(4, rc != nullptr, "no comm from host1");
  RegBuf buf;
  CHECK_OR(4, buf.allocate(&n, rc, kMaxMsg), "regMr");
  char b = 0;
  void* data = buf.data();
  void* mh = buf.mh();
  size_t cap = kMaxMsg;
  int tag = kTag;
  void* req1 = nullptr;
  CHECK_OR(13,
           post_until("irecv", &req1,
                      [&](void** q) { return n.irecv(rc, 1, &data, &cap, &tag, &mh, q); }),
           "irecv");
  int done = 0;
  CHECK_OR(13, n.test(req1, &done, nullptr) == ncclSuccess && !done, "publish");
  char handle2[NCCL_NET_HANDLE_MAXSIZE];
  CHECK_OR(14, read_full(side, handle2, sizeof handle2, wait_limit()), "no handle from host1");
  void* sc = nullptr;
  while (sc == nullptr && Clock::now() < deadline)
    CHECK_OR(14, n.connect(0, handle2, &sc) == ncclSuccess, "connect: %s", last_warn().c_str());
  CHECK_OR(14, sc != nullptr, "no send comm to host1");
  RegBuf sbuf;
  CHECK_OR(14, sbuf.allocate(&n, sc, kInFlight), "regMr");
  fill_pattern(sbuf.data(), kInFlight, 99);
  CHECK_OR(14, read_full(side, &b, 1, wait_limit()) && b == 'R', "host1 not ready");
  void* req2 = nullptr;
  CHECK_OR(
      15,
      post_until("isend", &req2,
                 [&](void** q) { return n.isend(sc, sbuf.data(), kInFlight, kTag, sbuf.mh(), q); }),
      "isend");
  CHECK_OR(15, n.test(req2, &done, nullptr) == ncclSuccess && !done, "the send completed at once");
  const int warns0 = g_warns.load();
  sluice::rdmatest::ExpectWarns expect;
  b = 'G';
  CHECK_OR(15, write_full(side, &b, 1), "side");
  CHECK_OR(15, read_full(side, &b, 1, wait_limit()) && b == 'P', "host1 did not say 'power-off'");
  const auto off = Clock::now();  // host1 powers its VM off 50 ms after sending that byte
  // Keepalive: 5 x SLUICE_HEARTBEAT_MS rounded up to whole seconds (docs/failures.md: the kernel
  // gives up 4 idle intervals after the last answer, checked once an interval), then
  // one liveness poll (100 ms here); + 1 s slack.
  const long hb_s = (env_long("SLUICE_HEARTBEAT_MS", 0) + 999) / 1000;
  const double bound1 = 5.0 * hb_s * 1000 + 1000;
  const double rc_ms = 4.096e-3 * static_cast<double>(1L << env_long("NCCL_IB_TIMEOUT", 20)) *
                       static_cast<double>(env_long("NCCL_IB_RETRY_CNT", 7) + 1);
  const double bound2 = rc_ms + 2000;
  ncclResult_t r1 = ncclSuccess, r2 = ncclSuccess;
  double took1 = -1, took2 = -1;
  std::string w1, w2;
  int done1 = 0, done2 = 0;
  while ((took1 < 0 || took2 < 0) && ms_since(off) < 2 * std::max(bound1, bound2)) {
    if (took1 < 0) {
      r1 = n.test(req1, &done1, nullptr);
      if (r1 != ncclSuccess || done1) took1 = ms_since(off), w1 = last_warn();
    }
    if (took2 < 0) {
      r2 = n.test(req2, &done2, nullptr);
      if (r2 != ncclSuccess || done2) took2 = ms_since(off), w2 = last_warn();
    }
    usleep(200);
  }
  std::fprintf(stderr, "host0: idle receive failed after %.0f ms (bound %.0f ms): %s\n", took1,
               bound1, w1.c_str());
  std::fprintf(stderr, "host0: in-flight send failed after %.0f ms (bound %.0f ms): %s\n", took2,
               bound2, w2.c_str());
  const std::string peer = std::getenv("SLUICE_BED_PEER_ADDR");
  CHECK_OR(40, took1 >= 0 && r1 == ncclRemoteError && !done1, "idle receive: %d done %d", r1,
           done1);
  CHECK_OR(41, took1 <= bound1, "idle receive: %.0f ms > %.0f ms", took1, bound1);
  CHECK_OR(42,
           contains(w1, "stopped answering") && contains(w1, "SLUICE_HEARTBEAT_MS") &&
               contains(w1, "qpn ") && contains(w1, peer) && contains(w1, props.name),
           "idle receive WARN: %s", w1.c_str());
  CHECK_OR(43, took2 >= 0 && r2 != ncclSuccess && !done2, "in-flight send: %d done %d", r2, done2);
  CHECK_OR(44, took2 <= bound2, "in-flight send: %.0f ms > %.0f ms", took2, bound2);
  CHECK_OR(45,
           contains(w2, "retry counter exceeded") && contains(w2, "qpn ") && contains(w2, peer) &&
               contains(w2, props.name) && contains(w2, "likely cause"),
           "in-flight send WARN: %s", w2.c_str());
  CHECK_OR(46, g_warns.load() == warns0 + 2, "%d WARNs, expected one per comm",
           g_warns.load() - warns0);
  // Failed comms keep failing fast with the same reason: the same call again raises no new WARN;
  // another call fails with the same reason (the plugin WARNs it once under that call's name).
  auto reason = [](const std::string& w, const char* from) {
    const size_t p = w.find(from);
    return p == std::string::npos ? w : w.substr(p);
  };
  const auto again = Clock::now();
  CHECK_OR(47, n.test(req1, &done1, nullptr) == r1 && n.test(req2, &done2, nullptr) == r2,
           "test again: another result");
  CHECK_OR(47, g_warns.load() == warns0 + 2, "test again WARNed again: %s", last_warn().c_str());
  void* q = nullptr;
  CHECK_OR(47, n.irecv(rc, 1, &data, &cap, &tag, &mh, &q) != ncclSuccess, "irecv after failure");
  CHECK_OR(47, reason(last_warn(), "peer ") == reason(w1, "peer "), "irecv: another reason: %s",
           last_warn().c_str());
  CHECK_OR(47, n.isend(sc, sbuf.data(), 4096, kTag, sbuf.mh(), &q) != ncclSuccess,
           "isend after failure");
  CHECK_OR(47, reason(last_warn(), "send completion") == reason(w2, "send completion"),
           "isend: another reason: %s", last_warn().c_str());
  CHECK_OR(47, ms_since(again) < 100, "failing again took %.0f ms", ms_since(again));
  // Close, bounded; every verbs object released.
  const auto closing = Clock::now();
  buf.reset();
  sbuf.reset();
  const ncclResult_t c1 = n.close_recv(rc), c2 = n.close_send(sc);
  const double close_ms = ms_since(closing);
  std::fprintf(stderr, "host0: closed both comms in %.0f ms (closeRecv %d, closeSend %d)\n",
               close_ms, c1, c2);
  CHECK_OR(48, close_ms < 10000, "close took %.0f ms", close_ms);
  const Counts0 after{rdma_resource_count("qp"), rdma_resource_count("cq"),
                      rdma_resource_count("mr")};
  CHECK_OR(
      49,
      before.qp < 0 || (after.qp == before.qp && after.cq == before.cq && after.mr == before.mr),
      "verbs objects leaked: qp %d -> %d, cq %d -> %d, mr %d -> %d", before.qp, after.qp, before.cq,
      after.cq, before.mr, after.mr);
  CHECK_OR(50, n.finalize() == ncclSuccess, "finalize");
  return 0;
}

int host1_stream(int side) {
  Net n(12);
  CHECK_OR(3, n.init(0x2e71) == ncclSuccess, "init");
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  CHECK_OR(4, read_full(side, handle, sizeof handle, wait_limit()), "no handle from host0");
  void* sc = nullptr;
  const auto deadline = Clock::now() + wait_limit();
  while (sc == nullptr && Clock::now() < deadline)
    CHECK_OR(4, n.connect(0, handle, &sc) == ncclSuccess, "connect: %s", last_warn().c_str());
  CHECK_OR(4, sc != nullptr, "no comm to host0");
  RegBuf buf;
  CHECK_OR(4, buf.allocate(&n, sc, kWindow * slot_bytes()), "regMr");
  if (int r = send_stream(n, sc, buf, 0)) return r;
  char b = 0;
  CHECK_OR(10, read_full(side, &b, 1, wait_limit()) && b == 'N', "no netem request");
  const std::string add =
      "modprobe sch_netem && tc qdisc replace dev eth0 root netem " + netem_spec();
  CHECK_OR(10, shell(add) == 0, "netem could not be set up on host1");
  b = 'n';
  CHECK_OR(10, write_full(side, &b, 1), "side");
  if (int r = send_stream(n, sc, buf, 1)) return r;
  CHECK_OR(11, read_full(side, &b, 1, wait_limit()) && b == 'C', "no netem removal request");
  const long dropped = netem_dropped();
  CHECK_OR(11, shell("tc qdisc del dev eth0 root") == 0, "netem not removed on host1");
  CHECK_OR(11, write_full(side, &dropped, sizeof dropped), "side");
  if (int r = host1_told(n, sc, buf, side)) return r;
  buf.reset();
  CHECK_OR(12, n.close_send(sc) == ncclSuccess, "closeSend: %s", last_warn().c_str());
  CHECK_OR(12, n.finalize() == ncclSuccess, "finalize");
  return 0;
}

// Phase 3: host0's comm 1 (this side sends nothing on it) and a receive comm for host0's
// in-flight send, its clear-to-send published; then the VM powers off.
int host1_poweroff(int side) {
  Net n(12);
  CHECK_OR(3, n.init(0x2e73) == ncclSuccess, "init");
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  CHECK_OR(4, read_full(side, handle, sizeof handle, wait_limit()), "no handle from host0");
  void* sc = nullptr;
  const auto deadline = Clock::now() + wait_limit();
  while (sc == nullptr && Clock::now() < deadline)
    CHECK_OR(4, n.connect(0, handle, &sc) == ncclSuccess, "connect: %s", last_warn().c_str());
  CHECK_OR(4, sc != nullptr, "no comm to host0");
  char b = 0;
  char handle2[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* lc = nullptr;
  CHECK_OR(14,
           n.listen(0, handle2, &lc) == ncclSuccess && write_full(side, handle2, sizeof handle2),
           "listen");
  void* rc = nullptr;
  while (rc == nullptr && Clock::now() < deadline)
    CHECK_OR(14, n.accept(lc, &rc) == ncclSuccess, "accept: %s", last_warn().c_str());
  CHECK_OR(14, rc != nullptr, "no comm from host0");
  RegBuf rbuf;
  CHECK_OR(14, rbuf.allocate(&n, rc, kInFlight), "regMr");
  void* data = rbuf.data();
  void* mh = rbuf.mh();
  size_t cap = kInFlight;
  int tag = kTag;
  void* req = nullptr;
  CHECK_OR(14,
           post_until("irecv", &req,
                      [&](void** q) { return n.irecv(rc, 1, &data, &cap, &tag, &mh, q); }),
           "irecv");
  int done = 0;
  CHECK_OR(14, n.test(req, &done, nullptr) == ncclSuccess, "publish");
  // The bed's helper records this host's status now (slow: 9p syncs), before host0's send starts.
  std::fflush(nullptr);
  CHECK_OR(16, std::system(SLUICE_SOURCE_DIR "/scripts/bed/poweroff --record-only 0") == 0,
           "scripts/bed/poweroff --record-only failed");
  const int trigger = open("/proc/sysrq-trigger", O_WRONLY | O_CLOEXEC);
  CHECK_OR(16, trigger >= 0, "open /proc/sysrq-trigger: %s", std::strerror(errno));
  b = 'R';
  CHECK_OR(14, write_full(side, &b, 1), "side");
  CHECK_OR(15, read_full(side, &b, 1, wait_limit()) && b == 'G', "no go");
  // Gone, comms open and a receive being written: the VM powers off with no FIN; host0 is told
  // the moment first.
  b = 'P';
  CHECK_OR(16, write_full(side, &b, 1), "side");
  usleep(50 * 1000);  // let the byte leave
  std::fprintf(stderr, "host1: powering the VM off now (sysrq o)\n");
  std::fflush(nullptr);
  if (write(trigger, "o", 1) != 1) std::fprintf(stderr, "host1: sysrq: %s\n", std::strerror(errno));
  sleep(30);
  std::fprintf(stderr, "host1: the VM did not power off\n");
  std::_Exit(16);
}

}  // namespace
}  // namespace nettest

int main(int argc, char** argv) {
  const std::string phase = argc == 5 ? argv[4] : "";
  if (argc != 5 || std::string(argv[1]) != "--host" || std::string(argv[3]) != "--phase" ||
      (phase != "stream" && phase != "poweroff")) {
    std::fprintf(stderr,
                 "usage: %s --host 0|1 --phase stream|poweroff (run by scripts/rdma-bed "
                 "--two-host)\n",
                 argv[0]);
    return 2;
  }
  using namespace nettest;
  g_host = std::atoi(argv[2]);
  const bool stream = phase == "stream";
  const int side = side_socket(g_host, stream ? kSidePort : kSidePort + 1);
  if (side < 0) return std::fprintf(stderr, "host%d: no side connection\n", g_host), 2;
  if (g_host == 0) return stream ? host0_stream(side) : host0_poweroff(side);
  return stream ? host1_stream(side) : host1_poweroff(side);
}
