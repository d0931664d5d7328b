// Pure logic of the progress watchdog (core/src/health/progress.cc): the bound derived from
// NCCL_IB_TIMEOUT and NCCL_IB_RETRY_CNT, the per-QP clock (starts at the first check that sees
// work outstanding, stops on progress, fires only past the bound), the receiver's unsignaled
// clear-to-send tail and its probe, and the reason text.
#include "../../core/src/health/progress.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace sluice {
namespace {

constexpr int64_t kMs = 1000000;

TEST(ProgressBound, DerivedFromTimeoutAndRetries) {
  // NCCL's defaults: 4.096 us x 2^20 = 4294.967 ms per try, 8 tries = 34359.7 ms; x 1.5 + 1 s.
  EXPECT_NEAR(rc_retry_bound_ms(20, 7), 34359.74, 0.01);
  EXPECT_EQ(progress_bound_ms(20, 7), 52540);
  // The bed's short timer: 16.777 ms per try, 8 tries = 134.2 ms; x 1.5 = 201.3 -> 202 + 1000.
  EXPECT_NEAR(rc_retry_bound_ms(12, 7), 134.22, 0.01);
  EXPECT_EQ(progress_bound_ms(12, 7), 1202);
  // No retry at all still waits one timer and the margin.
  EXPECT_EQ(progress_bound_ms(1, 0), 1001);
  // The largest exponent does not overflow.
  EXPECT_GT(progress_bound_ms(31, 7), 100000000LL);
}

TEST(ProgressCheck, ClockStartsAtFirstCheckAndFiresOnlyPastTheBound) {
  int64_t since[2] = {};
  bool out[2] = {true, false};
  long long waited = -1;
  const int64_t t0 = 5000 * kMs;
  EXPECT_EQ(progress_check(since, out, 2, t0, 1000, &waited), -1);
  EXPECT_EQ(since[0], t0);
  EXPECT_EQ(since[1], 0);
  EXPECT_EQ(progress_check(since, out, 2, t0 + 999 * kMs, 1000, &waited), -1);
  EXPECT_EQ(progress_check(since, out, 2, t0 + 1000 * kMs, 1000, &waited), -1);  // at the bound
  EXPECT_EQ(progress_check(since, out, 2, t0 + 1001 * kMs, 1000, &waited), 0);
  EXPECT_EQ(waited, 1001);
}

TEST(ProgressCheck, ACompletionRestartsTheClock) {
  // A slow but healthy link: work is always outstanding, but completions keep coming.
  int64_t since[1] = {};
  bool out[1] = {true};
  long long waited = 0;
  int64_t t = 1 * kMs;
  for (int i = 0; i < 100; ++i, t += 600 * kMs) {  // 60 s in all, bound 1 s
    EXPECT_EQ(progress_check(since, out, 1, t, 1000, &waited), -1) << "check " << i;
    since[0] = 0;  // poll_send/poll_recv saw a completion on the QP before the next check
  }
}

TEST(ProgressCheck, IdleQpStopsItsClock) {
  int64_t since[1] = {};
  bool out[1] = {true};
  long long waited = 0;
  EXPECT_EQ(progress_check(since, out, 1, 10 * kMs, 1000, &waited), -1);
  out[0] = false;  // everything completed
  EXPECT_EQ(progress_check(since, out, 1, 500 * kMs, 1000, &waited), -1);
  EXPECT_EQ(since[0], 0);
  out[0] = true;  // new work after a long idle time: its clock starts now, not at 10 ms
  EXPECT_EQ(progress_check(since, out, 1, 60000 * kMs, 1000, &waited), -1);
  EXPECT_EQ(progress_check(since, out, 1, 60900 * kMs, 1000, &waited), -1);
  EXPECT_EQ(progress_check(since, out, 1, 61100 * kMs, 1000, &waited), 0);
  EXPECT_EQ(waited, 1100);
}

TEST(ProgressCheck, NamesTheQpThatWaitedLongest) {
  int64_t since[3] = {};
  bool out[3] = {true, true, true};
  long long waited = 0;
  EXPECT_EQ(progress_check(since, out, 3, 100 * kMs, 1000, &waited), -1);
  since[0] = 0;  // QP 0 made progress; QPs 1 and 2 did not
  since[2] = 50 * kMs;
  EXPECT_EQ(progress_check(since, out, 3, 1200 * kMs, 1000, &waited), 2);
  EXPECT_EQ(waited, 1150);
  EXPECT_EQ(since[0], 1200 * kMs);
}

// ---- The receiver's unsignaled clear-to-send tail ----------------------------------------------

// One receive QP driven through checks as check_progress does: cts_tail_check, a probe when due
// (counted as a signaled CTS write covering the tail, as post_cts_probe does), progress_check.
struct RecvQp {
  CtsTail t;
  uint64_t completed_hi = 0;
  int64_t since = 0;
  int probes = 0;
  // Returns progress_check's verdict (0: this QP fired).
  int check(int64_t now, long long bound, bool received = false, long long* waited = nullptr) {
    bool watched = false;
    if (cts_tail_check(t, completed_hi, received, now, bound, &since, &watched)) {
      ++probes;
      t.outstanding += 1;
      t.unsignaled = 0;
      since = cts_probe_posted(since, now, bound);
    }
    long long w = 0;
    const int q = progress_check(&since, &watched, 1, now, bound, &w);
    if (waited) *waited = w;
    return q;
  }
  void cts_write(uint64_t from) {  // an unsignaled CTS write publishing receives from `from`
    ++t.outstanding;
    ++t.unsignaled;
    t.from = from;
  }
  void signaled_completion() {  // the probe's (or a signaled write's) completion was polled
    t.outstanding -= t.outstanding - t.unsignaled;
    since = 0;
  }
};

TEST(CtsTail, UnprovenOnlyWithUnsignaledWritesNoSignaledAfterAndNoReceiveDone) {
  EXPECT_FALSE(cts_tail_unproven({0, 0, 0}, 0));  // nothing written
  EXPECT_TRUE(cts_tail_unproven({1, 1, 0}, 0));   // one write, nothing received
  EXPECT_FALSE(cts_tail_unproven({2, 1, 0}, 0));  // a signaled write is out: watched
  EXPECT_TRUE(cts_tail_unproven({3, 3, 4}, 4));   // receives 0..3 done, write from 4
  EXPECT_FALSE(cts_tail_unproven({3, 3, 4}, 5));  // receive 4 done: that write landed
  EXPECT_FALSE(cts_tail_unproven({1, 1, 0}, 1));  // the receive it published is done
}

TEST(CtsTail, LostClearToSendProbedOnceThenFailsAtTheBound) {
  const long long bound = 1000;
  RecvQp qp;
  qp.cts_write(0);  // the receive's clear-to-send, lost for good
  int64_t t = 7 * kMs;
  EXPECT_EQ(qp.check(t, bound), -1);  // the clock starts
  EXPECT_EQ(qp.since, t);
  for (int i = 1; i < 5; ++i) EXPECT_EQ(qp.check(t + i * 100 * kMs, bound), -1);  // < bound/2
  EXPECT_EQ(qp.probes, 0);
  EXPECT_EQ(qp.check(t + 500 * kMs, bound), -1);  // bound/2: the probe, behind the lost write
  EXPECT_EQ(qp.probes, 1);
  EXPECT_EQ(qp.t.outstanding, 2u);
  EXPECT_EQ(qp.t.unsignaled, 0u);
  EXPECT_EQ(qp.since, t) << "the clock keeps the tail's start";
  for (int i = 6; i <= 10; ++i) EXPECT_EQ(qp.check(t + i * 100 * kMs, bound), -1);
  long long waited = 0;
  EXPECT_EQ(qp.check(t + 1100 * kMs, bound, false, &waited), 0);  // past the bound: fails
  EXPECT_EQ(waited, 1100);
  EXPECT_EQ(qp.probes, 1) << "at most one probe outstanding per QP";
}

TEST(CtsTail, DeliveredClearToSendSlowSenderProbesOnceAndNeverFails) {
  const long long bound = 1000;
  RecvQp qp;
  qp.cts_write(0);
  int64_t t = 1 * kMs;
  for (int i = 0; i < 600; ++i, t += 100 * kMs) {  // a minute of waiting for a slow sender
    EXPECT_EQ(qp.check(t, bound), -1) << "check " << i;
    if (qp.t.outstanding > qp.t.unsignaled) qp.signaled_completion();  // the probe's ACK came
  }
  EXPECT_EQ(qp.probes, 1);
  EXPECT_EQ(qp.t.outstanding, 0u);
}

TEST(CtsTail, BusyHealthyStreamNeverProbes) {
  // Receives complete between checks while new clear-to-send writes keep the tail unproven (a
  // message may take several checks, but less than half the bound).
  const long long bound = 1000;
  RecvQp qp;
  int64_t t = 1 * kMs;
  uint64_t seq = 0;
  for (int i = 0; i < 600; ++i, t += 100 * kMs) {
    qp.cts_write(seq);  // four receives published together, unproven until the first completes
    seq += 4;
    if (qp.t.unsignaled == 7) qp.t.unsignaled = 0;  // every 8th write is signaled...
    if (qp.t.outstanding > qp.t.unsignaled) qp.signaled_completion();  // ...and completes
    const bool received = i % 4 == 3;         // a completion every 400 ms: each restarts the clock
    if (received) qp.completed_hi = seq - 4;  // not yet the latest write's receives
    EXPECT_EQ(qp.check(t, bound, received), -1) << "check " << i;
  }
  EXPECT_EQ(qp.probes, 0);
}

TEST(CtsTail, ProvenTailIsNotWatched) {
  // The sender's data for a receive of the latest write arrived: its clear-to-send landed, and
  // the receiver then waits for the rest with nothing of its own in doubt (the path may be cut).
  RecvQp qp;
  qp.cts_write(0);
  qp.completed_hi = 1;  // receive 0 done; receive 1 (same write) still waits
  for (int64_t t = 1; t < 60000; t += 100) EXPECT_EQ(qp.check(t * kMs, 1000), -1);
  EXPECT_EQ(qp.probes, 0);
  EXPECT_EQ(qp.since, 0);
}

TEST(CtsTail, SignaledWorkOutstandingIsWatchedWithoutProbe) {
  RecvQp qp;
  qp.t = {8, 0, 0};  // the 8th write is signaled and out
  EXPECT_EQ(qp.check(1 * kMs, 1000), -1);
  EXPECT_EQ(qp.check(900 * kMs, 1000), -1);
  EXPECT_EQ(qp.check(1002 * kMs, 1000), 0);
  EXPECT_EQ(qp.probes, 0);
}

TEST(CtsTail, ALateCheckGivesTheProbeHalfTheBound) {
  const long long bound = 1000;
  RecvQp qp;
  qp.cts_write(0);
  EXPECT_EQ(qp.check(1 * kMs, bound), -1);
  EXPECT_EQ(qp.check(10001 * kMs, bound), -1);  // nobody called for 10 s: probe now, no failure
  EXPECT_EQ(qp.probes, 1);
  EXPECT_EQ(qp.since, 9501 * kMs);
  EXPECT_EQ(qp.check(10400 * kMs, bound), -1);
  EXPECT_EQ(qp.check(10502 * kMs, bound), 0);  // the probe did not complete in half the bound
  EXPECT_EQ(cts_probe_posted(5 * kMs, 100 * kMs, bound), 5 * kMs);  // on time: unchanged
}

TEST(ProgressReason, NamesWhatWaitedTheBoundAndTheCause) {
  const std::string m = progress_reason("qpn 17 (rxe0:1) -> qpn 18 (rxe1) at 10.0.0.2:4711",
                                        "isend RDMA WRITE / WRITE_WITH_IMM", 1300, 1202, 12, 7);
  EXPECT_NE(m.find("no progress on qpn 17 (rxe0:1) -> qpn 18 (rxe1) at 10.0.0.2:4711"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("waited 1300 ms with no completion, bound 1202 ms"), std::string::npos) << m;
  EXPECT_NE(m.find("RC retry bound 134.2 ms = 4.096 us x 2^12 (NCCL_IB_TIMEOUT) x 8"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("no completion within the RC retry bound: packets lost on the path and the "
                   "NIC/driver keeps retrying (Soft-RoCE retries forever at NCCL_IB_RETRY_CNT=7), "
                   "or the peer's NIC is stuck"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("x 1.5 + 1 s)"), std::string::npos) << m;
  EXPECT_EQ(m.find("SLUICE_PROGRESS_TIMEOUT_MS"), std::string::npos) << m;
  const std::string k = progress_reason("qpn 17", "clear-to-send RDMA WRITE", 61000, 60000, 20, 7,
                                        /*from_knob=*/true);
  EXPECT_NE(k.find("posted clear-to-send RDMA WRITE waited 61000 ms with no completion, bound "
                   "60000 ms (SLUICE_PROGRESS_TIMEOUT_MS; RC retry bound 34359.7 ms"),
            std::string::npos)
      << k;
  EXPECT_EQ(k.find("x 1.5"), std::string::npos) << k;
}

// The bound grows with the data outstanding on the QP: a live transfer of a large message (up to
// maxP2pBytes) is never judged by a per-packet bound; no data, no extra.
TEST(ProgressBound, GrowsTenSecondsPerOutstandingMiB) {
  EXPECT_EQ(progress_bytes_ms(0), 0);
  EXPECT_EQ(progress_bytes_ms(1), 1);        // rounded up
  EXPECT_EQ(progress_bytes_ms(65537), 626);  // 625.01 rounded up
  EXPECT_EQ(progress_bytes_ms(uint64_t{1} << 20), 10000);
  EXPECT_EQ(progress_bytes_ms(uint64_t{16} << 20), 160000);
  EXPECT_EQ(progress_bytes_ms(uint64_t{1} << 30), 10240000);  // maxP2pBytes
  // The whole send queue of the largest sends on every QP does not overflow.
  EXPECT_EQ(progress_bytes_ms(uint64_t{16} * 256 << 30), 16LL * 256 * 10240000);
}

TEST(ProgressCheck, EachQpGetsItsBytesTerm) {
  int64_t since[2] = {};
  const bool out[2] = {true, true};
  const long long extra[2] = {0, progress_bytes_ms(uint64_t{16} << 20)};  // QP 1: a 16 MiB send
  long long waited = 0;
  EXPECT_EQ(progress_check(since, out, 2, 1 * kMs, 1806, &waited, extra), -1);  // clocks start
  // Past the base: the idle-data QP 0 fires, QP 1 (data in flight) does not.
  EXPECT_EQ(progress_check(since, out, 2, 1900 * kMs, 1806, &waited, extra), 0);
  const bool only1[2] = {false, true};
  EXPECT_EQ(progress_check(since, only1, 2, 150000 * kMs, 1806, &waited, extra), -1);
  EXPECT_EQ(progress_check(since, only1, 2, 1 * kMs + (1806 + 160000) * kMs, 1806, &waited, extra),
            -1);  // exactly at its bound: not past it
  EXPECT_EQ(progress_check(since, only1, 2, 2 * kMs + (1806 + 160000) * kMs, 1806, &waited, extra),
            1);
  EXPECT_EQ(waited, 1806 + 160001);
  // A completion restarted the clock (progress): a slow stream is judged by its progress.
  since[1] = 0;
  EXPECT_EQ(progress_check(since, only1, 2, 170000 * kMs, 1806, &waited, extra), -1);
  EXPECT_EQ(progress_check(since, only1, 2, 320000 * kMs, 1806, &waited, extra), -1);
}

TEST(ProgressReason, NamesTheBytesTerm) {
  // A 16 MiB send waits for one 1 MiB run at a time (progress WRs, cts::plan_lane): check_progress
  // passes min(bytes outstanding, largest run) = 1 MiB.
  const std::string m = progress_reason("qpn 17", "isend RDMA WRITE / WRITE_WITH_IMM", 12000, 1806,
                                        14, 7, false, uint64_t{1} << 20);
  EXPECT_NE(m.find("waited 12000 ms with no completion, bound 11806 ms (1806 ms + 10000 ms for "
                   "up to 1048576 bytes before the QP's next signaled completion at 10000 ms per "
                   "MiB; RC retry bound"),
            std::string::npos)
      << m;
}

}  // namespace
}  // namespace sluice
