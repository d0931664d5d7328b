// A failover comm's routing and live stripe (core/src/health/path_failover.h): where a chain of a
// path that failed goes (its substitute's same lane, followed while that is down too, none while
// it is fencing), and which paths new receives are striped over (the weighted ones that carry; the
// fallback ones only when no weighted one is left).
#include "../../core/src/health/path_failover.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

failover::Timing timing() {
  failover::Timing t;
  t.fence_bound_ms = 0;
  return t;
}

// Takes path p of f down through a fault and both fences, with substitute `sub`.
void take_down(PathFailover& f, int p, int sub) {
  f.path[p].on_fault(failover::Cause::kLocalPort, "test", 0);
  f.path[p].on_local_fenced(1);
  f.path[p].on_peer_fence(f.path[p].epoch(), 2);
  ASSERT_EQ(f.path[p].state(), failover::State::kDown);
  f.sub[p] = static_cast<int8_t>(sub);
}

TEST(PathFailover, OffOrHealthyEveryChainStaysOnItsQp) {
  PathFailover f;
  fo_init(f, false, true, 2, timing());
  EXPECT_FALSE(f.on);
  EXPECT_EQ(f.log, nullptr);
  for (int q = 0; q < 4; ++q) EXPECT_EQ(fo_route(f, 2, q), q);
  fo_init(f, true, true, 1, timing());  // one path: nothing to fail over to
  EXPECT_FALSE(f.on);
  fo_init(f, true, true, 2, timing());
  EXPECT_TRUE(f.on);
  ASSERT_NE(f.log, nullptr);
  for (int q = 0; q < 4; ++q) EXPECT_EQ(fo_route(f, 2, q), q);
  PathFailover r;
  fo_init(r, true, false, 2, timing());
  EXPECT_EQ(r.log, nullptr) << "only the sender logs chains";
}

TEST(PathFailover, AFencingPathWaitsThenGoesToItsSubstitutesSameLane) {
  PathFailover f;
  fo_init(f, true, true, 3, timing());
  constexpr int qpp = 2;
  f.path[1].on_fault(failover::Cause::kCompletion, "retry exceeded", 0);
  EXPECT_EQ(fo_route(f, qpp, 2), -1) << "no substitute yet: its chains wait";
  EXPECT_EQ(fo_route(f, qpp, 3), -1);
  EXPECT_EQ(fo_route(f, qpp, 0), 0);
  EXPECT_EQ(fo_route(f, qpp, 5), 5);
  f.path[1].on_local_fenced(1);
  f.path[1].on_peer_fence(0, 2);
  f.sub[1] = 2;
  EXPECT_EQ(fo_route(f, qpp, 2), 4);
  EXPECT_EQ(fo_route(f, qpp, 3), 5);
}

TEST(PathFailover, ASecondFailureFollowsTheChainOfSubstitutes) {
  PathFailover f;
  fo_init(f, true, true, 3, timing());
  take_down(f, 0, 1);
  EXPECT_EQ(fo_route(f, 1, 0), 1);
  // Its substitute fails during the replay: fencing, its chains and path 0's wait ...
  f.path[1].on_fault(failover::Cause::kWatchdog, "no progress", 3);
  EXPECT_EQ(fo_route(f, 1, 0), -1);
  EXPECT_EQ(fo_route(f, 1, 1), -1);
  // ... until its own fence names the next one: both go there.
  f.path[1].on_local_fenced(4);
  f.path[1].on_peer_fence(f.path[1].epoch(), 5);
  f.sub[1] = 2;
  EXPECT_EQ(fo_route(f, 1, 0), 2);
  EXPECT_EQ(fo_route(f, 1, 1), 2);
  EXPECT_EQ(fo_route(f, 1, 2), 2);
  // A cycle of paths that are all down routes nowhere, and ends.
  take_down(f, 2, 0);
  EXPECT_EQ(fo_route(f, 1, 0), -1);
  EXPECT_EQ(fo_route(f, 1, 2), -1);
}

TEST(PathFailover, NewReceivesLeaveOutWhatDoesNotCarryFallbackOnlyWhenNoWeightedIsLeft) {
  PathFailover f;
  fo_init(f, true, false, 3, timing());
  stripe::Paths w;
  w.npaths = 3;
  w.weight[0] = 300;
  w.weight[1] = 100;
  w.weight[2] = 0;  // fallback only
  EXPECT_EQ(fo_restripe(f, w), 0b011u);
  EXPECT_FALSE(f.any_not_up);
  EXPECT_EQ(f.live.weight[0], 300u);
  EXPECT_EQ(f.live.weight[2], 0u);
  take_down(f, 0, 1);
  EXPECT_EQ(fo_restripe(f, w), 0b010u);
  EXPECT_TRUE(f.any_not_up);
  EXPECT_EQ(f.live.weight[0], 0u);
  EXPECT_EQ(f.live.weight[1], 100u);
  take_down(f, 1, 2);
  EXPECT_EQ(fo_restripe(f, w), 0b100u) << "the fallback path carries once no weighted one does";
  EXPECT_EQ(f.live.weight[2], 1u);
  take_down(f, 2, 0);
  EXPECT_EQ(fo_restripe(f, w), 0u);
}

TEST(PathFailover, TheInboxHoldsWhatOnePollBringsAndSaysWhenItOverflowed) {
  PathFailover f;
  wire::PathMsg m;
  m.type = wire::PathMsgType::kFence;
  for (int i = 0; i < kPathInbox; ++i) {
    m.path = static_cast<uint8_t>(i % 4);
    fo_take_path_msg(&f, m);
  }
  EXPECT_EQ(f.inbox_n, kPathInbox);
  EXPECT_FALSE(f.inbox_overflow);
  EXPECT_EQ(f.inbox[5].path, 1);
  fo_take_path_msg(&f, m);
  EXPECT_TRUE(f.inbox_overflow);
  EXPECT_EQ(f.inbox_n, kPathInbox);
}

}  // namespace
}  // namespace sluice
