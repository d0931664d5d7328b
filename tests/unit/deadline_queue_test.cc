// The reapers' queue (base/deadline_queue.h): every connect, accept and listen call runs the
// reapers of abandoned connects and listens; their cost per call must not grow with the connects
// and listens open (issue 32). Counted in the queue's own steps (comparisons and moves), not time.
#include "base/deadline_queue.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

namespace sluice {
namespace {

using Clock = DeadlineQueue::Clock;
using std::chrono::milliseconds;

TEST(DeadlineQueue, PopsOnlyWhatIsDueEarliestFirst) {
  DeadlineQueue q;
  const Clock::time_point t0{};
  std::mt19937 rng(7);
  std::vector<int> dues;
  for (uint64_t id = 0; id < 500; ++id) {
    const int ms = static_cast<int>(rng() % 1000);
    dues.push_back(ms);
    q.push(t0 + milliseconds(ms), id);
  }
  EXPECT_EQ(q.size(), 500u);
  uint64_t id = 0;
  EXPECT_FALSE(q.pop_due(t0 - milliseconds(1), &id)) << "nothing is due before the earliest";
  int last = -1;
  size_t popped = 0;
  for (int now = 0; now < 1000; now += 50) {
    while (q.pop_due(t0 + milliseconds(now), &id)) {
      ASSERT_LE(dues[id], now) << "popped before it was due";
      ASSERT_GE(dues[id], last) << "not earliest first";
      last = dues[id];
      ++popped;
    }
    // Everything left is due later.
    EXPECT_FALSE(q.due(t0 + milliseconds(now)));
  }
  while (q.pop_due(t0 + milliseconds(1000), &id)) ++popped;
  EXPECT_EQ(popped, 500u);
  EXPECT_EQ(q.size(), 0u);
}

// A call with nothing due costs one step at any size; a push or a pop costs O(log n).
TEST(DeadlineQueue, StepsPerCallDoNotGrowWithWhatIsQueued) {
  for (const size_t n : {10u, 1000u, 100000u}) {
    DeadlineQueue q;
    const Clock::time_point t0{};
    std::mt19937 rng(11);
    uint64_t worst_push = 0;
    for (uint64_t id = 0; id < n; ++id) {
      const uint64_t before = q.steps();
      q.push(t0 + milliseconds(1000 + rng() % 100000), id);
      worst_push = std::max(worst_push, q.steps() - before);
    }
    const double lg = std::log2(static_cast<double>(n));
    EXPECT_LE(worst_push, 2 * lg + 2) << n << " queued";
    const uint64_t before = q.steps();
    for (int call = 0; call < 1000; ++call) EXPECT_FALSE(q.due(t0 + milliseconds(999)));
    EXPECT_EQ(q.steps() - before, 1000u) << "one comparison per call with nothing due, n = " << n;
    uint64_t id = 0, worst_pop = 0;
    for (size_t k = 0; k < std::min<size_t>(n, 100); ++k) {
      const uint64_t b = q.steps();
      ASSERT_TRUE(q.pop_due(t0 + milliseconds(200000), &id));
      worst_pop = std::max(worst_pop, q.steps() - b);
    }
    EXPECT_LE(worst_pop, 3 * lg + 3) << n << " queued";
    std::printf("n = %zu: worst push %llu steps, worst pop %llu, log2 n = %.1f\n", n,
                static_cast<unsigned long long>(worst_push),
                static_cast<unsigned long long>(worst_pop), lg);
  }
}

// The reaper as connect.cc runs it on every call: 10,000 connects in progress, polled by their
// callers, none abandoned. Whatever comes due is looked at once per call at most `batch` times;
// the total work over many calls is O(calls + due events * log n), not O(calls * n).
TEST(ReapDue, TenThousandPendingCostAboutLogNPerCall) {
  constexpr uint64_t kPending = 10000;
  constexpr size_t kBatch = 8;
  DeadlineQueue q;
  const Clock::time_point t0{};
  const auto bound = milliseconds(120000);
  std::vector<Clock::time_point> deadline(kPending), last_poll(kPending);
  std::set<uint64_t> alive;
  for (uint64_t id = 0; id < kPending; ++id) {
    deadline[id] = t0 + milliseconds(static_cast<int>(id)) + bound;  // started 1 ms apart
    last_poll[id] = t0;
    q.push(deadline[id], id);
    alive.insert(id);
  }
  const uint64_t setup = q.steps();
  // 200,000 calls over 400 s: each one polls one connect (its caller), then runs the reaper.
  constexpr int kCalls = 200000;
  size_t reaped = 0, looked = 0;
  uint64_t worst_call = 0;
  for (int call = 0; call < kCalls; ++call) {
    const Clock::time_point now = t0 + milliseconds(call * 2);
    const uint64_t polled = static_cast<uint64_t>(call) % kPending;
    if (polled % 10 != 0) last_poll[polled] = now;  // a tenth of them are abandoned
    const uint64_t before = q.steps();
    reaped += reap_due(q, now, kBatch, [&](uint64_t id) -> ReapDecision {
      ++looked;
      if (alive.count(id) == 0) return {ReapDecision::kGone, {}};
      if (now > deadline[id] && now - last_poll[id] > bound) {
        alive.erase(id);
        return {ReapDecision::kReap, {}};
      }
      return {ReapDecision::kLater, std::max(deadline[id], last_poll[id] + bound)};
    });
    worst_call = std::max(worst_call, q.steps() - before);
  }
  const double lg = std::log2(static_cast<double>(kPending));
  const uint64_t per_calls = (q.steps() - setup) / kCalls;
  std::printf(
      "%d calls over %llu pending: %zu looked at, %zu reaped, %llu steps per call on "
      "average, %llu at worst (log2 n = %.1f; a scan would take %llu)\n",
      kCalls, static_cast<unsigned long long>(kPending), looked, reaped,
      static_cast<unsigned long long>(per_calls), static_cast<unsigned long long>(worst_call), lg,
      static_cast<unsigned long long>(kPending));
  EXPECT_EQ(reaped, kPending / 10) << "every abandoned connect is reaped, and only those";
  for (uint64_t id = 0; id < kPending; ++id)
    EXPECT_EQ(alive.count(id) == 0, id % 10 == 0) << "connect " << id;
  EXPECT_LE(worst_call, kBatch * (5 * lg + 6)) << "one call is bounded by its batch";
  EXPECT_LE(per_calls, 2 * lg) << "on average a call costs O(log n), not O(n)";
}

}  // namespace
}  // namespace sluice
