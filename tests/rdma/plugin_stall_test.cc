// The progress watchdog through the exported plugin tables (labels rdma, faults and bed; run inside
// scripts/rdma-bed's single VM). Soft-RoCE treats NCCL_IB_RETRY_CNT=7 as "retry forever", so a
// send whose packets are all lost never completes nor errors, and the peer host (and the TCP
// liveness socket) stays fine: the "unexplained stall" of docs/benchmarks.md. The test drops every
// RoCE v2 packet (UDP port 4791) with a `tc` u32 filter on the ingress of `lo` and of the test
// ports' netdevs (rxe sends between two local addresses through `lo`) while a send is in flight.
// Ingress, not egress: a packet dropped at egress fails rxe's transmit, and rxe then reschedules
// its send at once, a busy loop in the kernel (~100,000 drops a second in the bed) that starved
// the test process for minutes on a loaded host (CI rehearsal: timeout at 300 s); a packet
// dropped at ingress is lost on the path, and rxe retries after its ACK timeout, as on a wire.
//  * the sender's comm fails within the watchdog's bound, derived from the test's environment:
//    4.096 us x 2^NCCL_IB_TIMEOUT x (NCCL_IB_RETRY_CNT + 1) x 1.5 + 1 s, plus two
//    SLUICE_LIVENESS_POLL_MS and a scheduling margin, and not before the bound;
//  * the WARN names the peer, the device, the QP, how long the work waited, the bound and the
//    likely cause; the comm keeps failing with the same reason;
//  * the receiver, waiting for data with nothing of its own on the wire, fails within one
//    liveness poll of the sender, told by the sender's failure notice, quoting its reason;
//  * after the filter is gone another comm works, and closing releases every verbs object.
// The receiver's blind spot: the filter is in place before a receive is posted, so only its
// clear-to-send WRITE (unsignaled) is lost and the sender never learns of the receive: the
// receiver's test() fails within the same bound, after one zero-length probe WRITE behind the lost
// clear-to-send did not complete, with a WARN that the clear-to-send never completed.
// The control: a healthy link under load (a stream of 1 MiB messages, several in flight, and an
// idle receive) for several bounds raises nothing; the busy receive comm posts no probe (its WRs
// counted), the idle one exactly one, which completes.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bed_tc.h"
#include "cts_tail.h"
#include "ext_stats.h"
#include "plugin_bed.h"
#include "sluice/sluice_ext.h"

namespace nettest {
namespace {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

constexpr size_t kMsg = 65537;
constexpr int kTag = 9;

// The watchdog's bound as documented (core/src/health/progress.h), from this process's environment.
long long watchdog_bound_ms() {
  const long t = env_long("NCCL_IB_TIMEOUT", 20);
  const long r = env_long("NCCL_IB_RETRY_CNT", 7);
  return static_cast<long long>(std::ceil(4.096e-3 * std::ldexp(1.0, static_cast<int>(t)) *
                                          static_cast<double>(r + 1) * 1.5)) +
         1000;
}
long long poll_ms() {
  return env_long("SLUICE_LIVENESS_POLL_MS", 1000);
}
// Margin for a loaded 2-core host running TCG (the check runs at the sender's next test after
// a poll came due).
constexpr long long kSlackMs = 3000;
// Margin on top of one liveness poll for the peer to learn of a failure (scheduling on TCG).
constexpr long long kPollSlackMs = 1000;
// The sender's bound also grows by 10 s per MiB outstanding on the QP (progress.h): one message.
long long sender_bound_ms(size_t bytes) {
  return watchdog_bound_ms() + static_cast<long long>((bytes * 10000 + (1u << 20) - 1) >> 20);
}

using sluice::rdmatest::RoceDrop;
using sluice::rdmatest::RoceNetem;
using sluice::rdmatest::run;

void* post_recv(void* rc, RegBuf& buf, size_t off) {
  void* data = buf.data() + off;
  void* mh = buf.mh();
  size_t cap = kMsg;
  int tag = kTag;
  void* req = nullptr;
  EXPECT_TRUE(post_until("irecv", &req,
                         [&](void** r) { return net().irecv(rc, 1, &data, &cap, &tag, &mh, r); }));
  return req;
}

void* post_send(void* sc, RegBuf& buf, size_t off) {
  void* req = nullptr;
  EXPECT_TRUE(post_until("isend", &req, [&](void** r) {
    return net().isend(sc, buf.data() + off, kMsg, kTag, buf.mh(), r);
  }));
  return req;
}

sluiceCommStats_v1_t stats(void* comm) {
  EXPECT_NE(ext_v1(), nullptr) << "sluiceExt_v1 not exported";
  sluiceCommStats_v1_t s;
  EXPECT_TRUE(comm_stats(comm, &s));
  return s;
}

void require_root_in_bed() {
  if (geteuid() != 0) GTEST_FAIL() << "needs root inside scripts/rdma-bed (tc filters)";
}

// ---- The stall: every RoCE packet lost with a send in flight
// ----------------------------------------------------------------------------------------------

TEST(Stall, SenderFailsWithinTheRcBoundReceiverToldOtherCommsWork) {
  REQUIRE_BED();
  require_root_in_bed();
  if (HasFatalFailure()) return;
  const long long bound = sender_bound_ms(kMsg);
  std::fprintf(stderr, "watchdog bound %lld ms (NCCL_IB_TIMEOUT=%ld NCCL_IB_RETRY_CNT=%ld)\n",
               bound, env_long("NCCL_IB_TIMEOUT", 20), env_long("NCCL_IB_RETRY_CNT", 7));
  const Counts before = Counts::now();
  Conn a, other;
  ASSERT_TRUE(open_conn(net(), bed().dev_a, bed().dev_b, &a));
  ASSERT_TRUE(open_conn(net(), bed().dev_a, bed().dev_b, &other));
  {
    RegBuf s, r;
    ASSERT_TRUE(s.allocate(&net(), a.send, 2 * kMsg));
    ASSERT_TRUE(r.allocate(&net(), a.recv, 2 * kMsg));
    fill_pattern(s.data(), 2 * kMsg, 31);
    // Two receives, each published at once by a clear-to-send write of its own; the first send
    // completes, so the sender holds the second receive's entry before the path goes away, and
    // the receiver's probe proved that second write (cts_tail.h): the receiver has nothing of
    // its own outstanding when the path goes.
    void* r1 = post_recv(a.recv, r, 0);
    void* r2 = post_recv(a.recv, r, kMsg);
    void* s1 = post_send(a.send, s, 0);
    ASSERT_TRUE(wait_done(net(), "send 1", s1, nullptr));
    ASSERT_TRUE(wait_done(net(), "recv 1", r1, nullptr));
    ASSERT_TRUE(prove_cts_tail(net(), a.recv, r2, 2 * watchdog_bound_ms()))
        << "the second receive's clear-to-send was never probed: " << last_warn();
    RoceDrop drop;
    ASSERT_TRUE(drop.install());
    sluice::rdmatest::ExpectWarns expect;
    const auto posted = Clock::now();
    void* s2 = post_send(a.send, s, kMsg);  // on the wire at once: its entry is already here
    ncclResult_t res = ncclSuccess;
    int sdone = 0, rdone = 0;
    ncclResult_t rres = ncclSuccess;
    std::string w, rw;
    Clock::time_point sender_failed{}, receiver_failed{};
    const auto limit = milliseconds(2 * (bound + 2 * poll_ms() + kSlackMs));
    while (!sdone && !rdone && (res == ncclSuccess || rres == ncclSuccess) &&
           Clock::now() - posted < limit) {
      if (res == ncclSuccess) {
        res = net().test(s2, &sdone, nullptr);
        if (res != ncclSuccess) {
          sender_failed = Clock::now();
          w = last_warn();
        }
      }
      if (rres == ncclSuccess) {
        rres = net().test(r2, &rdone, nullptr);
        if (rres != ncclSuccess) {
          receiver_failed = Clock::now();
          rw = last_warn();
        }
      }
      usleep(500);
    }
    const long long took = duration_cast<milliseconds>(sender_failed - posted).count();
    const long dropped = drop.dropped();
    std::fprintf(stderr, "sender failed after %lld ms (bound %lld ms), %ld packets dropped: %s\n",
                 took, bound, dropped, w.c_str());
    EXPECT_GT(dropped, 0) << "the filter dropped nothing: the test did not cut the path";
    EXPECT_EQ(sdone, 0) << "the send completed although its packets were dropped";
    EXPECT_EQ(res, ncclRemoteError);
    EXPECT_GE(took, bound) << "fired before the bound";
    EXPECT_LE(took, bound + 2 * poll_ms() + kSlackMs);
    EXPECT_TRUE(contains(w, "no progress on qpn ")) << w;
    EXPECT_TRUE(contains(w, bed().props[bed().dev_a].name)) << w;
    EXPECT_TRUE(contains(w, " at ")) << w;  // the peer's address
    EXPECT_TRUE(contains(w, "with no completion, bound " + std::to_string(bound) + " ms")) << w;
    EXPECT_TRUE(contains(w, "Soft-RoCE retries forever at NCCL_IB_RETRY_CNT=7")) << w;
    // The receiver waited for data with nothing of its own outstanding: the sender's failure
    // notice fails it within one liveness poll, quoting the sender's reason (issue 19).
    EXPECT_EQ(rdone, 0);
    EXPECT_EQ(rres, ncclRemoteError) << "the receiver did not learn of its peer's failure";
    const long long told = duration_cast<milliseconds>(receiver_failed - sender_failed).count();
    std::fprintf(stderr, "receiver failed %lld ms after the sender (one poll %lld ms): %s\n", told,
                 poll_ms(), rw.c_str());
    EXPECT_GE(receiver_failed, sender_failed) << "the receiver failed first: " << rw;
    EXPECT_LE(told, poll_ms() + kPollSlackMs);
    EXPECT_TRUE(contains(rw, "the peer's comm failed (peer ")) << rw;
    EXPECT_TRUE(contains(rw, "its reason: \"no progress on qpn ")) << rw;
    // The failed comms keep failing fast with the same reason.
    const auto again = Clock::now();
    int d = 0;
    EXPECT_EQ(net().test(s2, &d, nullptr), ncclRemoteError);
    EXPECT_EQ(net().test(r2, &d, nullptr), ncclRemoteError);
    void* s3 = nullptr;
    EXPECT_EQ(net().isend(a.send, s.data(), kMsg, kTag, s.mh(), &s3), ncclRemoteError);
    EXPECT_LT(duration_cast<milliseconds>(Clock::now() - again).count(), 100);
    EXPECT_TRUE(drop.remove());
    EXPECT_EQ(std::memcmp(r.data(), s.data(), kMsg), 0) << "received bytes of message 1 differ";
    // NCCL's teardown order on failed comms with work pending (deregMr before close): RegBuf's
    // deregMr at the end of this scope succeeds (deferred), and close releases everything.
  }
  // The path is back: another comm moves bytes and verifies.
  {
    RegBuf s, r;
    ASSERT_TRUE(s.allocate(&net(), other.send, 4096));
    ASSERT_TRUE(r.allocate(&net(), other.recv, 4096));
    fill_pattern(s.data(), 4096, 77);
    int got = -1;
    ASSERT_TRUE(send_recv(net(), other, s, 4096, r, 4096, 3, &got));
    EXPECT_EQ(got, 4096);
    EXPECT_EQ(check_pattern(r.data(), 4096, 77), "");
  }
  {
    sluice::rdmatest::ExpectWarns expect;  // the failed comm's close may name what it left
    EXPECT_TRUE(close_conn(net(), &a));
  }
  EXPECT_TRUE(close_conn(net(), &other));
  expect_released(before);
}

// ---- The receiver's blind spot: its clear-to-send lost before the sender heard of the receive
// ----------------------------------------------------------------------------------------------

// Whether the receive comm took an eager ring at its first receive (and wrote its grant): as the
// plugin says (sluiceCommStats_v2_t::eager). plugin_stall runs this test both ways (faults.cmake).
bool eager_ring(void* recv_comm) {
  const int st = eager_state(recv_comm);
  EXPECT_GE(st, 0) << "sluiceCommStats_v2_t::eager not readable";
  return st == SLUICE_EAGER_ON;
}

TEST(Stall, LostClearToSendFailsTheReceiverWithinTheBound) {
  REQUIRE_BED();
  require_root_in_bed();
  if (HasFatalFailure()) return;
  const long long bound = watchdog_bound_ms();
  const Counts before = Counts::now();
  Conn a;
  ASSERT_TRUE(open_conn(net(), bed().dev_a, bed().dev_b, &a));
  {
    RegBuf r;
    ASSERT_TRUE(r.allocate(&net(), a.recv, kMsg));
    RoceDrop drop;
    ASSERT_TRUE(drop.install());
    sluice::rdmatest::ExpectWarns expect;
    const sluiceCommStats_v1_t st0 = stats(a.recv);
    const auto posted = Clock::now();
    void* rq = post_recv(a.recv, r, 0);  // its clear-to-send goes out at the first test: lost
    ncclResult_t res = ncclSuccess;
    int done = 0;
    const auto limit = milliseconds(2 * (bound + 2 * poll_ms() + kSlackMs));
    while (res == ncclSuccess && !done && Clock::now() - posted < limit) {
      res = net().test(rq, &done, nullptr);
      usleep(500);
    }
    const long long took = duration_cast<milliseconds>(Clock::now() - posted).count();
    const sluiceCommStats_v1_t st1 = stats(a.recv);
    const long dropped = drop.dropped();
    const std::string w = last_warn();
    std::fprintf(stderr,
                 "receiver failed after %lld ms (bound %lld ms), %ld packets dropped, %llu CTS "
                 "write(s), %llu probe(s): %s\n",
                 took, bound, dropped,
                 static_cast<unsigned long long>(st1.ctsWrites - st0.ctsWrites),
                 static_cast<unsigned long long>(st1.ctsProbes - st0.ctsProbes), w.c_str());
    EXPECT_GT(dropped, 0) << "the filter dropped nothing: the test did not cut the path";
    EXPECT_EQ(done, 0) << "the receive completed although no packet got through";
    EXPECT_EQ(res, ncclRemoteError) << "the receiver waited " << took << " ms without failing";
    EXPECT_GE(took, bound) << "fired before the bound";
    EXPECT_LE(took, bound + 2 * poll_ms() + kSlackMs);
    EXPECT_EQ(st1.ctsWrites - st0.ctsWrites, 1u);
    if (eager_ring(a.recv)) {
      // The comm's first publication writes its eager grant (docs/eager.md) before the entry, and
      // signaled: that WRITE's completion is the one that does not come; no probe is needed.
      EXPECT_EQ(st1.ctsProbes - st0.ctsProbes, 0u) << "a probe behind a signaled WRITE";
    } else {
      EXPECT_EQ(st1.ctsProbes - st0.ctsProbes, 1u) << "one probe behind the lost clear-to-send";
      EXPECT_TRUE(contains(w, "the clear-to-send never completed")) << w;
    }
    EXPECT_TRUE(contains(w, "no progress on qpn ")) << w;
    EXPECT_TRUE(contains(w, bed().props[bed().dev_b].name)) << w;  // the receiver's device
    EXPECT_TRUE(contains(w, " at ")) << w;                         // the peer's address
    EXPECT_TRUE(contains(w, "clear-to-send RDMA WRITE")) << w;
    EXPECT_TRUE(contains(w, "with no completion, bound " + std::to_string(bound) + " ms")) << w;
    // The failed comm keeps failing fast with the same reason.
    const auto again = Clock::now();
    int d = 0;
    EXPECT_EQ(net().test(rq, &d, nullptr), ncclRemoteError);
    void* data = r.data();
    void* mh = r.mh();
    size_t cap = kMsg;
    int tag = kTag;
    void* rq2 = nullptr;
    EXPECT_EQ(net().irecv(a.recv, 1, &data, &cap, &tag, &mh, &rq2), ncclRemoteError);
    const auto reason = [](const std::string& m) {  // past the call's name ("test: ", "irecv: ")
      const size_t at = m.find("no progress on");
      return at == std::string::npos ? m : m.substr(at);
    };
    EXPECT_EQ(reason(last_warn()), reason(w)) << "the same reason";
    EXPECT_LT(duration_cast<milliseconds>(Clock::now() - again).count(), 100);
    EXPECT_TRUE(drop.remove());
  }
  {
    sluice::rdmatest::ExpectWarns expect;  // the failed comm's close may name what it left
    EXPECT_TRUE(close_conn(net(), &a));
  }
  expect_released(before);
}

// ---- A long send that moves nothing: failed within one run's bound, not its size's
// ----------------------------------------------------------------------------------------------
// A 7 MiB send goes as 7 WRITEs of 1 MiB with a progress WR signaled every MiB
// (cts::plan_lane), so the watchdog waits for one 1 MiB run: base + 10 s, not base + 70 s (the
// bound before progress signals, when the bytes term counted every byte outstanding).

TEST(Stall, LongSendThatMovesNothingFailsWithinOneRunsBound) {
  REQUIRE_BED();
  require_root_in_bed();
  if (HasFatalFailure()) return;
  // 7 MiB: the longest message one lane still cuts into WRITEs of 1 MiB, a signal after each
  // (cts::kMaxPieces; a longer one keeps 7 WRITEs of whole MiB: 16 MiB signals every 3 MiB, its
  // bound base + 30 s, progress.h).
  constexpr size_t kLong = size_t{7} << 20;
  const long long bound = sender_bound_ms(size_t{1} << 20);  // one 1 MiB run
  const Counts before = Counts::now();
  Conn a;
  ASSERT_TRUE(open_conn(net(), bed().dev_a, bed().dev_b, &a));
  {
    RegBuf s, r;
    ASSERT_TRUE(s.allocate(&net(), a.send, kLong));
    ASSERT_TRUE(r.allocate(&net(), a.recv, 2 * kLong));
    fill_pattern(s.data(), kLong, 41);
    // Two receives; a small send completes the first, so the second's clear-to-send is at the
    // sender before the path goes away, proven on the receiver's side (as in the first test).
    void* data[2] = {r.data(), r.data() + kLong};
    void* rq[2] = {};
    for (int i = 0; i < 2; ++i) {
      void* mh = r.mh();
      size_t cap = kLong;
      int tag = kTag;
      ASSERT_TRUE(post_until("irecv", &rq[i], [&](void** q) {
        return net().irecv(a.recv, 1, &data[i], &cap, &tag, &mh, q);
      }));
    }
    void* s1 = nullptr;
    ASSERT_TRUE(post_until("isend", &s1, [&](void** q) {
      return net().isend(a.send, s.data(), 4096, kTag, s.mh(), q);
    }));
    ASSERT_TRUE(wait_done(net(), "send 1", s1, nullptr));
    ASSERT_TRUE(wait_done(net(), "recv 1", rq[0], nullptr));
    ASSERT_TRUE(prove_cts_tail(net(), a.recv, rq[1], 2 * watchdog_bound_ms()))
        << "the second receive's clear-to-send was never probed: " << last_warn();
    RoceDrop drop;
    ASSERT_TRUE(drop.install());
    sluice::rdmatest::ExpectWarns expect;
    const auto posted = Clock::now();
    void* s2 = nullptr;
    ASSERT_TRUE(post_until("isend", &s2, [&](void** q) {
      return net().isend(a.send, s.data(), kLong, kTag, s.mh(), q);
    }));
    ncclResult_t res = ncclSuccess;
    int done = 0;
    const auto limit = milliseconds(2 * (bound + 2 * poll_ms() + kSlackMs));
    while (res == ncclSuccess && !done && Clock::now() - posted < limit) {
      res = net().test(s2, &done, nullptr);
      usleep(500);
    }
    const long long took = duration_cast<milliseconds>(Clock::now() - posted).count();
    const std::string w = last_warn();
    std::fprintf(stderr,
                 "7 MiB send with every packet dropped failed after %lld ms (bound %lld ms; "
                 "before progress signals: %lld ms): %s\n",
                 took, bound, sender_bound_ms(kLong), w.c_str());
    EXPECT_GT(drop.dropped(), 0) << "the filter dropped nothing: the test did not cut the path";
    EXPECT_EQ(done, 0) << "the send completed although its packets were dropped";
    EXPECT_EQ(res, ncclRemoteError) << "not failed within " << took << " ms";
    EXPECT_GE(took, bound) << "fired before the bound";
    EXPECT_LE(took, bound + 2 * poll_ms() + kSlackMs);
    EXPECT_TRUE(contains(w, "no progress on qpn ")) << w;
    EXPECT_TRUE(contains(w, "with no completion, bound " + std::to_string(bound) + " ms")) << w;
    EXPECT_TRUE(contains(w, "for up to 1048576 bytes before the QP's next signaled completion"))
        << w;
    EXPECT_TRUE(drop.remove());
    int d = 0;
    (void)net().test(rq[1], &d, nullptr);  // fails (the peer's notice) or still pending
  }
  {
    sluice::rdmatest::ExpectWarns expect;
    EXPECT_TRUE(close_conn(net(), &a));
  }
  expect_released(before);
}

// ---- A slow link that moves bytes: never failed, however long the message takes
// ----------------------------------------------------------------------------------------------
// Run on its own (plugin_stall's second pass, faults.cmake) with a short base bound
// (SLUICE_PROGRESS_TIMEOUT_MS) and a long RC timer (NCCL_IB_TIMEOUT: netem's queue makes packets
// late, and a timer shorter than that would resend them): `tc netem rate` makes a 7 MiB message
// (the longest one a lane cuts into WRITEs of 1 MiB, cts::kMaxPieces) take several times one
// run's bound (base + 10 s). It completes and verifies, nothing fails, and the sender polled a
// completion per MiB (the progress WRs that kept the watchdog's clock fresh).

TEST(Slow, SevenMiBOnARateLimitedLinkCompletes) {
  REQUIRE_BED();
  require_root_in_bed();
  if (HasFatalFailure()) return;
  const long long base = env_long("SLUICE_PROGRESS_TIMEOUT_MS", 0);
  if (base <= 0) GTEST_SKIP() << "run with SLUICE_PROGRESS_TIMEOUT_MS set (faults.cmake)";
  constexpr size_t kLong = size_t{7} << 20;
  const long long run_bound = base + 10000;  // one 1 MiB run (progress.h)
  const int warns0 = g_warns.load();
  const Counts before = Counts::now();
  Conn a;
  ASSERT_TRUE(open_conn(net(), bed().dev_a, bed().dev_b, &a));
  {
    RegBuf s, r;
    ASSERT_TRUE(s.allocate(&net(), a.send, kLong));
    ASSERT_TRUE(r.allocate(&net(), a.recv, kLong));
    fill_pattern(s.data(), kLong, 43);
    const sluiceExt_v2_t* ext2 = ext_v2();
    ASSERT_NE(ext2, nullptr);
    sluiceCommStats_v2_t st0{}, st1{};
    st0.size = st1.size = sizeof st0;
    ASSERT_EQ(ext2->commStatsV2(a.send, &st0), 0);
    RoceNetem rate;
    const char* r_env = std::getenv("SLUICE_TEST_SLOW_RATE");
    ASSERT_TRUE(rate.install(std::string("rate ") + (r_env != nullptr ? r_env : "2mbit")));
    const auto start = Clock::now();
    int got = -1;
    ASSERT_TRUE(send_recv(net(), a, s, kLong, r, kLong, kTag, &got)) << last_warn();
    const long long took = duration_cast<milliseconds>(Clock::now() - start).count();
    EXPECT_TRUE(rate.remove());
    ASSERT_EQ(ext2->commStatsV2(a.send, &st1), 0);
    const uint64_t cqes = st1.members[0].completions - st0.members[0].completions;
    std::fprintf(stderr,
                 "7 MiB at a limited rate: %lld ms (%.2f MiB/s), %llu sender completions; one "
                 "run's bound %lld ms, base %lld ms; before progress signals a 7 MiB message "
                 "was allowed %lld ms\n",
                 took, 7000.0 / static_cast<double>(took), static_cast<unsigned long long>(cqes),
                 run_bound, base, base + 70000);
    EXPECT_EQ(got, static_cast<int>(kLong));
    EXPECT_EQ(check_pattern(r.data(), kLong, 43), "");
    EXPECT_EQ(cqes, 7u) << "one completion per MiB: 6 progress WRs and the close";
    EXPECT_GE(took, 2 * run_bound)
        << "the rate limit did not slow the message past two runs' bounds: the test shows nothing";
    EXPECT_EQ(g_warns.load(), warns0) << last_warn();
  }
  EXPECT_TRUE(close_conn(net(), &a));
  expect_released(before);
}

// ---- Control: a healthy link under load never fires
// ----------------------------------------------------------------------------------------------

TEST(Stall, HealthyLinkUnderLoadNeverFires) {
  REQUIRE_BED();
  const long long bound = watchdog_bound_ms();
  const auto run_for = milliseconds(3 * bound);
  const int warns0 = g_warns.load();
  const Counts before = Counts::now();
  Conn c, idle;
  ASSERT_TRUE(open_conn(net(), bed().dev_a, bed().dev_b, &c));
  ASSERT_TRUE(open_conn(net(), bed().dev_a, bed().dev_b, &idle));
  {
    constexpr size_t kBig = size_t{1} << 20;
    constexpr int kInFlight = 4;
    RegBuf s, r, is, ir;
    ASSERT_TRUE(s.allocate(&net(), c.send, kInFlight * kBig));
    ASSERT_TRUE(r.allocate(&net(), c.recv, kInFlight * kBig));
    ASSERT_TRUE(is.allocate(&net(), idle.send, 4096));
    ASSERT_TRUE(ir.allocate(&net(), idle.recv, 4096));
    // An idle receive for the whole run: its peer sends only at the end.
    void* idata = ir.data();
    void* imh = ir.mh();
    size_t icap = 4096;
    int itag = 5;
    void* ireq = nullptr;
    ASSERT_TRUE(post_until("irecv", &ireq, [&](void** q) {
      return net().irecv(idle.recv, 1, &idata, &icap, &itag, &imh, q);
    }));
    const auto start = Clock::now();
    long messages = 0;
    uint64_t it = 0;
    while (Clock::now() - start < run_for) {
      void* rq[kInFlight] = {};
      void* sq[kInFlight] = {};
      for (int i = 0; i < kInFlight; ++i) {
        void* data = r.data() + i * kBig;
        void* mh = r.mh();
        size_t cap = kBig;
        int tag = i;
        ASSERT_TRUE(post_until("irecv", &rq[i], [&](void** q) {
          return net().irecv(c.recv, 1, &data, &cap, &tag, &mh, q);
        }));
      }
      for (int i = 0; i < kInFlight; ++i) {
        fill_pattern(s.data() + i * kBig, kBig, pattern_seed(kBig, it, i));
        ASSERT_TRUE(post_until("isend", &sq[i], [&](void** q) {
          return net().isend(c.send, s.data() + i * kBig, kBig, i, s.mh(), q);
        }));
      }
      for (int i = 0; i < kInFlight; ++i) {
        ASSERT_TRUE(wait_done(net(), "send", sq[i], nullptr)) << last_warn();
        ASSERT_TRUE(wait_done(net(), "recv", rq[i], nullptr)) << last_warn();
        ASSERT_EQ(check_pattern(r.data() + i * kBig, kBig, pattern_seed(kBig, it, i)), "");
      }
      int d = 0;
      ASSERT_EQ(net().test(ireq, &d, nullptr), ncclSuccess) << last_warn();
      ASSERT_EQ(d, 0);
      messages += kInFlight;
      ++it;
    }
    void* isq = nullptr;
    fill_pattern(is.data(), 4096, 5);
    ASSERT_TRUE(post_until("isend", &isq, [&](void** q) {
      return net().isend(idle.send, is.data(), 4096, 5, is.mh(), q);
    }));
    ASSERT_TRUE(wait_done(net(), "idle send", isq, nullptr)) << last_warn();
    ASSERT_TRUE(wait_done(net(), "idle recv", ireq, nullptr)) << last_warn();
    const long long took = duration_cast<milliseconds>(Clock::now() - start).count();
    std::fprintf(stderr, "healthy: %ld x 1 MiB in %lld ms (%d in flight), bound %lld ms\n",
                 messages, took, kInFlight, bound);
    // WRs of the busy receive comm: receive WRs (one per receive per lane) and clear-to-send
    // WRITEs, and no probe; the idle one, waiting 3 bounds behind a delivered clear-to-send,
    // probed exactly once (the probe completed: no failure).
    const sluiceCommStats_v1_t busy = stats(c.recv), quiet = stats(idle.recv);
    std::fprintf(
        stderr,
        "busy receive comm: %llu receives, %llu WRs = %llu receive WRs + %llu CTS "
        "writes + %llu probes; idle receive comm: %llu WRs, %llu probe(s)\n",
        static_cast<unsigned long long>(busy.messages), static_cast<unsigned long long>(busy.wrs),
        static_cast<unsigned long long>(busy.wrs - busy.ctsWrites - busy.ctsProbes),
        static_cast<unsigned long long>(busy.ctsWrites),
        static_cast<unsigned long long>(busy.ctsProbes), static_cast<unsigned long long>(quiet.wrs),
        static_cast<unsigned long long>(quiet.ctsProbes));
    EXPECT_EQ(busy.messages, static_cast<uint64_t>(messages));
    EXPECT_EQ(busy.ctsProbes, 0u) << "a probe on a healthy busy stream";
    // Every receive posts `lanes` WRs; with the eager path on, the comm's ring was lent once and
    // its grant written once (one WRITE, docs/eager.md).
    const uint64_t grant = eager_ring(c.recv) ? 1 : 0;
    const uint64_t rq_wrs = busy.wrs - busy.ctsWrites - grant;
    EXPECT_EQ(rq_wrs % busy.messages, 0u) << "WRs other than receive WRs, CTS writes and the grant";
    EXPECT_EQ(quiet.ctsProbes, 1u) << "the idle receive's delivered clear-to-send: one probe";
  }
  EXPECT_EQ(g_warns.load(), warns0) << last_warn();
  EXPECT_TRUE(close_conn(net(), &c));
  EXPECT_TRUE(close_conn(net(), &idle));
  expect_released(before);
}

}  // namespace
}  // namespace nettest

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new nettest::BedEnvironment);
  return RUN_ALL_TESTS();
}
