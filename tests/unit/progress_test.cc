// Pure logic of the progress watchdog (core/src/progress.cc): the bound derived from
// NCCL_IB_TIMEOUT and NCCL_IB_RETRY_CNT, the per-QP clock (starts at the first check that sees
// work outstanding, stops on progress, fires only past the bound) and the reason text.
#include "../../core/src/progress.h"

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

}  // namespace
}  // namespace sluice
