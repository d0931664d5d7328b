// A failover comm's routing and live stripe (core/src/health/path_failover.h): where a chain of a
// path that failed goes (its substitute's same lane, followed while that is down too, none while
// it is fencing), and which paths new receives are striped over (the weighted ones that carry; the
// fallback ones only when no weighted one is left).
#include "../../core/src/health/path_failover.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

#include "comm/comm.h"
#include "health/liveness.h"

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

TEST(PathFailover, TheInboxHoldsWhatOnePollBringsAndSaysWhenItWasOverrun) {
  PathFailover f;
  EXPECT_EQ(fo_inbox_room(&f), 0) << "no inbox before connect: a path message is never read";
  fo_init(f, true, false, 2, failover::Timing{});
  wire::PathMsg m;
  m.type = wire::PathMsgType::kFence;
  for (int i = 0; i < kPathInbox; ++i) {
    EXPECT_EQ(fo_inbox_room(&f), kPathInbox - i);
    m.path = static_cast<uint8_t>(i % 4);
    fo_take_path_msg(&f, m);
  }
  EXPECT_EQ(f.inbox_n, kPathInbox);
  EXPECT_EQ(fo_inbox_room(&f), 0);
  EXPECT_FALSE(f.inbox_lost);
  EXPECT_EQ(f.inbox[5].path, 1);
  fo_take_path_msg(&f, m);  // a reader that ignored the room: the driver fails the comm
  EXPECT_TRUE(f.inbox_lost);
  EXPECT_EQ(f.inbox_n, kPathInbox);
}

// Issue 31: a burst of path messages larger than the inbox waits in the socket (backpressure)
// instead of failing the comm: each poll reads only what the inbox has room for.
TEST(PathFailover, ABurstOfPathMessagesWaitsInTheSocketWhileTheInboxIsFull) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  constexpr int kBurst = 2 * kPathInbox + 5;
  size_t sent = 0;
  for (int i = 0; i < kBurst; ++i) {
    wire::PathMsg m;
    m.type = i % 2 ? wire::PathMsgType::kChecked : wire::PathMsgType::kFence;
    m.path = 1;
    m.nqps = 1;
    m.epoch = static_cast<uint32_t>(i);
    m.sub = i % 2 ? 0 : 1;
    uint8_t buf[wire::kPathMsgMaxBytes];
    const size_t n = wire::encode_path_msg(m, buf);
    ASSERT_GT(n, 0u);
    ASSERT_EQ(::send(sv[1], buf, n, 0), static_cast<ssize_t>(n));
    sent += n;
  }
  {
    Conn c;
    c.fd = sv[0];
    fo_init(c.fo, true, false, 2, failover::Timing{});
    c.watch.started = true;
    std::vector<uint32_t> epochs;
    for (int polls = 0; polls < 10 && epochs.size() < static_cast<size_t>(kBurst); ++polls) {
      liveness_poll_now(c);
      EXPECT_LE(c.fo.inbox_n, kPathInbox);
      EXPECT_FALSE(c.fo.inbox_lost) << "poll " << polls;
      EXPECT_EQ(c.watch.state, PeerWatch::kAlive) << c.watch.gone;
      for (int i = 0; i < c.fo.inbox_n; ++i) epochs.push_back(c.fo.inbox[i].epoch);
      if (polls == 0) {
        EXPECT_EQ(c.fo.inbox_n, kPathInbox) << "the first poll fills the inbox";
      }
      c.fo.inbox_n = 0;  // the driver took them
    }
    ASSERT_EQ(epochs.size(), static_cast<size_t>(kBurst)) << sent << " bytes sent";
    for (int i = 0; i < kBurst; ++i) EXPECT_EQ(epochs[i], static_cast<uint32_t>(i));
    c.watch.started = false;  // no goodbye on a test socket
  }                           // ~Conn closes sv[0]
  close(sv[1]);
}

}  // namespace
}  // namespace sluice
