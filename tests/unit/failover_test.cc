// The failover rules of one path (core/src/health/failover.h): every transition, the fence's two
// halves in either order, a failure during replay and during failback, crossing offers, the
// backoff schedule and its hysteresis, the ramp, the shares of a comm's paths and its report.
#include "../../core/src/health/failover.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace sluice::failover {
namespace {

Timing timing() {
  Timing t;
  t.retry_base_ms = 100;
  t.retry_cap_ms = 1600;
  t.fence_bound_ms = 5000;
  t.attempt_bound_ms = 3000;
  t.ramp_step_ms = 500;
  t.stable_ms = 4000;
  return t;
}

bool has(uint32_t actions, Action a) {
  return (actions & a) != 0;
}

// Drives p from kUp through a fault and both fences to kDown (at time now).
void fail_and_fence(Path& p, int64_t now) {
  ASSERT_EQ(p.on_fault(Cause::kLocalPort, "rxe1 port 1 down", now), kFenceLocal | kRestripe | kLog);
  ASSERT_EQ(p.on_local_fenced(now + 1), kSendFence);
  ASSERT_EQ(p.on_peer_fence(p.epoch(), now + 2), kReplay | kLog);
  ASSERT_EQ(p.state(), State::kDown);
}

// From kDown: the attempt this side offers, answered, connected, checked: kRamping.
void recover(Path& p, int64_t now) {
  const uint32_t a = p.on_tick(p.retry_at_ms());
  ASSERT_EQ(a, kOffer | kLog) << p.describe();
  ASSERT_EQ(p.state(), State::kRecovering);
  ASSERT_EQ(p.on_peer_answer(p.epoch(), now), kConnect);
  ASSERT_EQ(p.on_connected(now), kCheck);
  ASSERT_EQ(p.state(), State::kChecking);
  ASSERT_EQ(p.on_checked(now), kRestripe | kLog | kSendChecked);
  ASSERT_EQ(p.state(), State::kRamping);
}

TEST(Backoff, DoublesFromTheBaseUpToTheCapAndNeverStops) {
  const Timing t = timing();
  EXPECT_EQ(backoff_ms(t, 1), 100);
  EXPECT_EQ(backoff_ms(t, 2), 200);
  EXPECT_EQ(backoff_ms(t, 3), 400);
  EXPECT_EQ(backoff_ms(t, 5), 1600);
  EXPECT_EQ(backoff_ms(t, 6), 1600);
  EXPECT_EQ(backoff_ms(t, 1000000), 1600);  // no overflow, no giving up
  Timing z = t;
  z.retry_base_ms = 0;
  EXPECT_EQ(backoff_ms(z, 1), 1);
}

// Issue 31: what a path needs of the clock, so that a comm whose path is down for good (or whose
// receiver waits for an offer) pays no more per call than a healthy one, and one that is busy
// (fencing, an attempt) is driven at every call.
TEST(Path, NextDueIsWhatItsClockCanDoNext) {
  constexpr int64_t kNever = INT64_MAX;
  Path s(Role::kSender, timing()), r(Role::kReceiver, timing());
  EXPECT_EQ(s.next_due_ms(), kNever) << "up, settled";
  (void)s.on_fault(Cause::kLocalPort, "x", 100);
  EXPECT_EQ(s.next_due_ms(), 0) << "fencing: every call";
  EXPECT_TRUE(s.awaits_peer()) << "fencing waits for the peer's FENCE";
  (void)s.on_local_fenced(101);
  (void)s.on_peer_fence(s.epoch(), 102);
  ASSERT_EQ(s.state(), State::kDown);
  EXPECT_FALSE(s.awaits_peer());
  EXPECT_EQ(s.next_due_ms(), s.retry_at_ms()) << "the sender: its next attempt";
  fail_and_fence(r, 100);
  EXPECT_EQ(r.next_due_ms(), kNever) << "the receiver waits for the sender's offer";
  EXPECT_FALSE(r.awaits_peer()) << "its socket is read at the liveness cadence";
  recover(s, 500);
  EXPECT_EQ(s.next_due_ms(), 500 + timing().ramp_step_ms) << "ramping: the next step";
  (void)s.on_tick(1000);
  (void)s.on_tick(1500);
  ASSERT_EQ(s.state(), State::kUp);
  EXPECT_EQ(s.next_due_ms(), 1500 + timing().stable_ms) << "the backoff count's reset";
}

TEST(Path, StartsUpCarryingItsWholeShare) {
  Path p(Role::kSender, timing());
  EXPECT_EQ(p.state(), State::kUp);
  EXPECT_TRUE(p.carries());
  EXPECT_EQ(p.share_pct(), 100);
  EXPECT_EQ(p.epoch(), 0u);
  EXPECT_EQ(p.on_tick(1000000), kNoAction);
}

TEST(Path, FaultFencesLocallyAndCarriesNothing) {
  for (Cause c : {Cause::kLocalPort, Cause::kLocalDevice, Cause::kCompletion, Cause::kWatchdog}) {
    Path p(Role::kSender, timing());
    EXPECT_EQ(p.on_fault(c, "facts", 10), kFenceLocal | kRestripe | kLog);
    EXPECT_EQ(p.state(), State::kFencing);
    EXPECT_FALSE(p.carries());
    EXPECT_EQ(p.share_pct(), 0);
    EXPECT_EQ(p.cause(), c);
    EXPECT_EQ(p.failovers(), 1u);
    EXPECT_NE(p.describe().find("failed over"), std::string::npos) << p.describe();
    EXPECT_NE(p.describe().find("facts"), std::string::npos) << p.describe();
    // Later faults keep the first cause and ask for nothing more.
    EXPECT_EQ(p.on_fault(Cause::kCompletion, "flush errors", 11), kNoAction);
    EXPECT_EQ(p.cause(), c);
  }
}

TEST(Path, ReplayOnlyOnceBothSidesFencedLocalFirst) {
  Path p(Role::kSender, timing());
  p.on_fault(Cause::kCompletion, "retry exceeded", 0);
  const uint32_t a = p.on_local_fenced(5);
  EXPECT_EQ(a, kSendFence);
  EXPECT_FALSE(has(a, kReplay)) << "replay before the peer fenced";
  EXPECT_EQ(p.state(), State::kFencing);
  EXPECT_EQ(p.on_local_fenced(6), kNoAction) << "a second flush changes nothing";
  const uint32_t b = p.on_peer_fence(0, 7);
  EXPECT_TRUE(has(b, kReplay));
  EXPECT_FALSE(has(b, kSendFence));
  EXPECT_EQ(p.state(), State::kDown);
  EXPECT_EQ(p.retry_at_ms(), 7 + 100);
}

TEST(Path, ReplayOnlyOnceBothSidesFencedPeerFirst) {
  Path p(Role::kReceiver, timing());
  // The peer saw the fault first: its FENCE fences this side too.
  const uint32_t a = p.on_peer_fence(0, 3);
  EXPECT_EQ(a, kFenceLocal | kRestripe | kLog);
  EXPECT_EQ(p.cause(), Cause::kPeerFence);
  EXPECT_EQ(p.state(), State::kFencing);
  EXPECT_EQ(p.on_peer_fence(0, 4), kNoAction) << "a repeated FENCE";
  const uint32_t b = p.on_local_fenced(9);
  EXPECT_EQ(b, kSendFence | kReplay | kLog);
  EXPECT_EQ(p.state(), State::kDown);
}

TEST(Path, StaleFenceIsIgnored) {
  Path p(Role::kSender, timing());
  fail_and_fence(p, 0);
  recover(p, 200);
  ASSERT_EQ(p.epoch(), 1u);
  EXPECT_EQ(p.on_peer_fence(0, 300), kNoAction) << "a FENCE of epoch 0 on epoch 1";
  EXPECT_EQ(p.state(), State::kRamping);
}

TEST(Path, FenceThatNeverCompletesFailsTheCommAtItsBound) {
  Path p(Role::kSender, timing());
  p.on_fault(Cause::kLocalPort, "", 1000);
  p.on_local_fenced(1001);
  EXPECT_EQ(p.on_tick(1000 + 4999), kNoAction);
  EXPECT_EQ(p.on_tick(1000 + 5000), kCommFails);
  EXPECT_NE(p.describe().find("no FENCE from the peer"), std::string::npos) << p.describe();
  EXPECT_EQ(p.state(), State::kFencing) << "never replays after the bound";
  Path q(Role::kSender, timing());
  q.on_fault(Cause::kLocalPort, "", 0);
  q.on_peer_fence(0, 1);
  EXPECT_EQ(q.on_tick(5000), kCommFails);
  EXPECT_NE(q.describe().find("drain markers did not flush"), std::string::npos) << q.describe();
}

TEST(Path, DownRetriesOnTheBackoffScheduleWithANewEpoch) {
  Path p(Role::kSender, timing());
  fail_and_fence(p, 0);
  const int64_t due = p.retry_at_ms();
  EXPECT_EQ(p.on_tick(due - 1), kNoAction);
  EXPECT_EQ(p.on_tick(due), kOffer | kLog);
  EXPECT_EQ(p.state(), State::kRecovering);
  EXPECT_EQ(p.epoch(), 1u);
  EXPECT_EQ(p.attempts(), 1);
  // The attempt times out: back down, the fresh QPs dropped, the next one later.
  EXPECT_EQ(p.on_tick(due + 2999), kNoAction);
  const uint32_t a = p.on_tick(due + 3000);
  EXPECT_EQ(a, kDropFresh | kLog);
  EXPECT_FALSE(has(a, kFenceLocal)) << "a fresh path carried no data: no fence";
  EXPECT_EQ(p.state(), State::kDown);
  EXPECT_EQ(p.retry_at_ms(), due + 3000 + 200);
  // Attempts 2.. each fail at once: 400, 800, 1600, 1600, ... never given up.
  int64_t now = p.retry_at_ms();
  const int64_t expect[] = {400, 800, 1600, 1600, 1600};
  for (int64_t d : expect) {
    ASSERT_EQ(p.on_tick(now), kOffer | kLog);
    ASSERT_EQ(p.on_fault(Cause::kLocalPort, "still down", now + 1), kDropFresh | kLog);
    EXPECT_EQ(p.retry_at_ms() - (now + 1), d) << "attempt " << p.attempts();
    now = p.retry_at_ms();
  }
  EXPECT_EQ(p.epoch(), 6u);
  EXPECT_EQ(p.attempts(), 6);
}

TEST(Path, PortActiveMakesTheNextAttemptDueAtOnce) {
  Path p(Role::kSender, timing());
  fail_and_fence(p, 0);
  ASSERT_GT(p.retry_at_ms(), 50);
  EXPECT_EQ(p.on_port_active(50), kOffer | kLog);
  EXPECT_EQ(p.state(), State::kRecovering);
  Path q(Role::kSender, timing());
  EXPECT_EQ(q.on_port_active(5), kNoAction) << "a port event on a path that is up";
}

TEST(Path, RecoveryRampsBackInStepsThenUp) {
  Path p(Role::kSender, timing());
  fail_and_fence(p, 0);
  recover(p, 150);
  EXPECT_TRUE(p.carries());
  EXPECT_EQ(p.share_pct(), 25);
  EXPECT_EQ(p.on_tick(150 + 499), kNoAction);
  EXPECT_EQ(p.on_tick(150 + 500), kRestripe);
  EXPECT_EQ(p.share_pct(), 50);
  EXPECT_EQ(p.on_tick(150 + 1000), kRestripe | kLog);
  EXPECT_EQ(p.state(), State::kUp);
  EXPECT_EQ(p.share_pct(), 100);
  EXPECT_EQ(p.failbacks(), 1u);
  EXPECT_NE(p.describe().find("back in full"), std::string::npos) << p.describe();
}

TEST(Path, FailureDuringFailbackFencesAgain) {
  Path p(Role::kSender, timing());
  fail_and_fence(p, 0);
  recover(p, 150);
  ASSERT_EQ(p.state(), State::kRamping);
  // It carried data again: a fault fences it, with the same epoch on both sides.
  EXPECT_EQ(p.on_fault(Cause::kCompletion, "retry exceeded", 300), kFenceLocal | kRestripe | kLog);
  EXPECT_EQ(p.failovers(), 2u);
  EXPECT_EQ(p.epoch(), 1u);
  EXPECT_EQ(p.on_local_fenced(301), kSendFence);
  EXPECT_EQ(p.on_peer_fence(1, 302), kReplay | kLog);
  // A failure while checking (the check WRITE failed) needs no fence.
  Path q(Role::kSender, timing());
  fail_and_fence(q, 0);
  ASSERT_EQ(q.on_tick(q.retry_at_ms()), kOffer | kLog);
  ASSERT_EQ(q.on_peer_answer(q.epoch(), 200), kConnect);
  ASSERT_EQ(q.on_connected(201), kCheck);
  EXPECT_EQ(q.on_fault(Cause::kCompletion, "check WRITE: retry exceeded", 202), kDropFresh | kLog);
  EXPECT_EQ(q.state(), State::kDown);
  EXPECT_NE(q.describe().find("path check failed"), std::string::npos) << q.describe();
}

TEST(Path, BackoffCountResetsOnlyAfterStableUp) {
  Path p(Role::kSender, timing());
  fail_and_fence(p, 0);
  recover(p, 150);
  p.on_tick(650);
  p.on_tick(1150);
  ASSERT_EQ(p.state(), State::kUp);
  EXPECT_EQ(p.attempts(), 1);
  // A flap soon after: the next retry waits longer than the first did.
  Path flap = p;
  fail_and_fence(flap, 2000);
  EXPECT_EQ(flap.retry_at_ms() - 2002, 200) << "hysteresis: attempt 2's delay";
  // Up for stable_ms: the count is back to 0, the next failure retries at the base delay.
  EXPECT_EQ(p.on_tick(1150 + 3999), kNoAction);
  EXPECT_EQ(p.attempts(), 1);
  p.on_tick(1150 + 4000);
  EXPECT_EQ(p.attempts(), 0);
  fail_and_fence(p, 6000);
  EXPECT_EQ(p.retry_at_ms() - 6002, 100);
}

TEST(Path, PeerOfferStartsAnAnsweredAttempt) {
  Path p(Role::kReceiver, timing());
  fail_and_fence(p, 0);
  EXPECT_EQ(p.on_peer_offer(0, 10), kNoAction) << "an offer of the epoch that failed";
  EXPECT_EQ(p.on_peer_offer(1, 10), kAnswer | kLog);
  EXPECT_EQ(p.state(), State::kRecovering);
  EXPECT_EQ(p.epoch(), 1u);
  EXPECT_EQ(p.on_peer_answer(1, 11), kNoAction) << "an answer to an offer this side never made";
  EXPECT_EQ(p.on_connected(12), kCheck);
  EXPECT_EQ(p.on_checked(13), kLog) << "the check's immediates alone prove one direction";
  EXPECT_NE(p.describe().find("checked one way"), std::string::npos) << p.describe();
  EXPECT_EQ(p.state(), State::kChecking);
  EXPECT_EQ(p.on_peer_checked(1, 14), kRestripe | kLog);
  EXPECT_EQ(p.state(), State::kRamping);
  // An offer on a path that is up is not taken (the peer cannot be ahead without a fence).
  Path q(Role::kReceiver, timing());
  EXPECT_EQ(q.on_peer_offer(1, 5), kNoAction);
  EXPECT_EQ(q.state(), State::kUp);
}

TEST(Path, CrossingOffersTheSendersWins) {
  Path s(Role::kSender, timing()), r(Role::kReceiver, timing());
  fail_and_fence(s, 0);
  fail_and_fence(r, 0);
  ASSERT_EQ(s.on_tick(s.retry_at_ms()), kOffer | kLog);
  ASSERT_EQ(r.on_tick(r.retry_at_ms()), kOffer | kLog);
  ASSERT_EQ(s.epoch(), r.epoch());
  EXPECT_EQ(s.on_peer_offer(r.epoch(), 200), kNoAction) << "the sender keeps its own offer";
  EXPECT_EQ(r.on_peer_offer(s.epoch(), 200), kDropFresh | kAnswer)
      << "the receiver answers the sender's";
  EXPECT_EQ(r.on_peer_offer(s.epoch(), 201), kNoAction) << "only once";
  EXPECT_EQ(s.on_peer_answer(r.epoch(), 202), kConnect);
  EXPECT_EQ(r.on_peer_answer(s.epoch(), 202), kNoAction) << "the receiver no longer offers";
}

TEST(Path, EventsOutOfTurnDoNothing) {
  Path p(Role::kSender, timing());
  EXPECT_EQ(p.on_local_fenced(1), kNoAction);
  EXPECT_EQ(p.on_connected(1), kNoAction);
  EXPECT_EQ(p.on_checked(1), kNoAction);
  EXPECT_EQ(p.on_peer_answer(0, 1), kNoAction);
  EXPECT_EQ(p.state(), State::kUp);
  fail_and_fence(p, 10);
  EXPECT_EQ(p.on_fault(Cause::kLocalPort, "again", 20), kNoAction) << "a fault on a path down";
  EXPECT_EQ(p.on_checked(21), kNoAction);
  EXPECT_EQ(p.state(), State::kDown);
}

TEST(Path, PeerFenceDuringAnAttemptDropsTheFreshQpsAndAnswersIt) {
  // The sender's check passed and its path carried, then failed, while the receiver still checked.
  Path r(Role::kReceiver, timing());
  fail_and_fence(r, 0);
  ASSERT_EQ(r.on_peer_offer(1, 100), kAnswer | kLog);
  ASSERT_EQ(r.on_connected(101), kCheck);
  const uint32_t a = r.on_peer_fence(1, 102);
  EXPECT_EQ(a, kDropFresh | kLog | kSendFence);
  EXPECT_FALSE(has(a, kFenceLocal)) << "the fresh QPs carried nothing";
  EXPECT_EQ(r.state(), State::kDown);
  EXPECT_EQ(r.on_peer_fence(1, 103), kNoAction) << "once";
  // A stale epoch's FENCE during an attempt is ignored.
  Path q(Role::kReceiver, timing());
  fail_and_fence(q, 0);
  ASSERT_EQ(q.on_peer_offer(1, 100), kAnswer | kLog);
  EXPECT_EQ(q.on_peer_fence(0, 101), kNoAction);
  EXPECT_EQ(q.state(), State::kRecovering);
}

TEST(Path, AnAttemptThatFailsAtTheReceiverTellsTheSender) {
  Path r(Role::kReceiver, timing());
  fail_and_fence(r, 0);
  ASSERT_EQ(r.on_peer_offer(1, 100), kAnswer | kLog);
  // Its port is still down: the answer cannot be made.
  const uint32_t a = r.on_fault(Cause::kLocalPort, "rxe1 port 1 is down", 101);
  EXPECT_EQ(a, kDropFresh | kLog | kSendFence);
  EXPECT_EQ(r.state(), State::kDown);
  EXPECT_NE(r.describe().find("the sender is told"), std::string::npos) << r.describe();
  // The sender, still in its attempt, takes the FENCE of its epoch as the attempt's end.
  Path s(Role::kSender, timing());
  fail_and_fence(s, 0);
  ASSERT_EQ(s.on_tick(s.retry_at_ms()), kOffer | kLog);
  EXPECT_EQ(s.on_peer_fence(s.epoch(), 102) & kDropFresh, kDropFresh);
  EXPECT_EQ(s.state(), State::kDown);
  EXPECT_GT(s.retry_at_ms(), 102) << "the next attempt on the backoff schedule";
  // The receiver's own attempt bound ends it the same way.
  Path q(Role::kReceiver, timing());
  fail_and_fence(q, 0);
  ASSERT_EQ(q.on_peer_offer(1, 100), kAnswer | kLog);
  EXPECT_EQ(q.on_tick(100 + 3000), kDropFresh | kLog | kSendFence);
}

TEST(Path, ANewerOfferReplacesTheAttemptInProgress) {
  Path r(Role::kReceiver, timing());
  fail_and_fence(r, 0);
  ASSERT_EQ(r.on_peer_offer(1, 100), kAnswer | kLog);
  ASSERT_EQ(r.on_connected(101), kCheck);
  // The sender's attempt 1 ran out of its bound; it offers epoch 2.
  EXPECT_EQ(r.on_peer_offer(2, 5000), kDropFresh | kAnswer | kLog);
  EXPECT_EQ(r.state(), State::kRecovering);
  EXPECT_EQ(r.epoch(), 2u);
  EXPECT_EQ(r.attempts(), 2);
  EXPECT_EQ(r.on_peer_offer(2, 5001), kNoAction) << "the same offer twice";
  EXPECT_EQ(r.on_connected(5002), kCheck);
  EXPECT_EQ(r.on_peer_checked(1, 5003), kNoAction) << "the CHECKED of the attempt replaced";
  EXPECT_EQ(r.on_checked(5003), kLog);
  EXPECT_EQ(r.on_peer_checked(2, 5004), kRestripe | kLog);
}

// A one-way fault (the receiver's ACKs lost): the sender's check never completes, so it sends no
// CHECKED; the receiver, whose check immediates did arrive, stays out of its stripe until the
// attempt's bound ends the attempt or the sender's next offer replaces it. Either order of the
// immediates and the CHECKED admits the path; only the receiver takes a CHECKED, once.
TEST(Path, TheReceiverRampsInOnlyWithTheSendersChecked) {
  Path r(Role::kReceiver, timing());
  fail_and_fence(r, 0);
  ASSERT_EQ(r.on_peer_offer(1, 100), kAnswer | kLog);
  ASSERT_EQ(r.on_peer_checked(1, 100), kNoAction) << "not checking yet";
  ASSERT_EQ(r.on_connected(101), kCheck);
  EXPECT_EQ(r.on_checked(102), kLog);
  EXPECT_EQ(r.on_checked(103), kNoAction) << "polled again: still waiting, said once";
  EXPECT_FALSE(r.carries());
  EXPECT_EQ(r.share_pct(), 0);
  EXPECT_EQ(r.on_tick(101 + 2999), kNoAction);
  const uint32_t a = r.on_tick(101 + 3000);
  EXPECT_EQ(a, kDropFresh | kLog | kSendFence) << "no CHECKED within the attempt's bound";
  EXPECT_EQ(r.state(), State::kDown);
  EXPECT_EQ(r.cause(), Cause::kLocalPort) << "the failover's first cause stands";
  EXPECT_NE(r.describe().find("path check failed"), std::string::npos) << r.describe();
  EXPECT_EQ(r.on_peer_checked(1, 3200), kNoAction) << "a CHECKED after the attempt ended";

  // The CHECKED before the immediates: admitted on the last immediate.
  Path q(Role::kReceiver, timing());
  fail_and_fence(q, 0);
  ASSERT_EQ(q.on_peer_offer(1, 100), kAnswer | kLog);
  ASSERT_EQ(q.on_connected(101), kCheck);
  EXPECT_EQ(q.on_peer_checked(0, 102), kNoAction) << "another epoch's";
  EXPECT_EQ(q.on_peer_checked(1, 102), kNoAction);
  EXPECT_EQ(q.on_peer_checked(1, 102), kNoAction) << "once";
  EXPECT_EQ(q.on_checked(103), kRestripe | kLog);
  EXPECT_EQ(q.state(), State::kRamping);
  EXPECT_EQ(q.share_pct(), kRampPct[0]);

  // The sender ramps in on its completions and says so; it ignores a CHECKED.
  Path s(Role::kSender, timing());
  fail_and_fence(s, 0);
  ASSERT_EQ(s.on_tick(s.retry_at_ms()), kOffer | kLog);
  ASSERT_EQ(s.on_peer_answer(s.epoch(), 200), kConnect);
  ASSERT_EQ(s.on_connected(201), kCheck);
  EXPECT_EQ(s.on_peer_checked(s.epoch(), 202), kNoAction);
  EXPECT_EQ(s.state(), State::kChecking);
  EXPECT_EQ(s.on_checked(203), kRestripe | kLog | kSendChecked);
  EXPECT_EQ(s.on_checked(204), kNoAction) << "once";

  // The sender's check fails (its RC retries ran out: the ACKs do not come back): the attempt
  // ends at once, its fresh QPs dropped, the next on the backoff schedule; no fence (they carried
  // nothing), no CHECKED.
  Path t(Role::kSender, timing());
  fail_and_fence(t, 0);
  ASSERT_EQ(t.on_tick(t.retry_at_ms()), kOffer | kLog);
  ASSERT_EQ(t.on_peer_answer(t.epoch(), 200), kConnect);
  ASSERT_EQ(t.on_connected(201), kCheck);
  const uint32_t ta = t.on_fault(Cause::kCompletion, "retry exceeded on the check", 1541);
  EXPECT_EQ(ta, kDropFresh | kLog);
  EXPECT_EQ(t.state(), State::kDown);
  EXPECT_NE(t.describe().find("path check failed"), std::string::npos) << t.describe();
  EXPECT_EQ(t.retry_at_ms(), 1541 + backoff_ms(timing(), 2));
}

TEST(Paths, SharesFollowWeightsStatesAndFallback) {
  Path p[3] = {Path(Role::kSender, timing()), Path(Role::kSender, timing()),
               Path(Role::kSender, timing())};
  const uint16_t w[3] = {200, 100, 0};  // path 2: fallback only
  uint32_t out[3];
  EXPECT_EQ(effective_shares(p, w, 3, out), 2);
  EXPECT_EQ(out[0], 200u);
  EXPECT_EQ(out[1], 100u);
  EXPECT_EQ(out[2], 0u) << "a fallback path carries nothing while a weighted one is up";
  fail_and_fence(p[0], 0);
  EXPECT_EQ(effective_shares(p, w, 3, out), 1);
  EXPECT_EQ(out[0], 0u);
  EXPECT_EQ(out[1], 100u);
  fail_and_fence(p[1], 0);
  EXPECT_EQ(effective_shares(p, w, 3, out), 1);
  EXPECT_EQ(out[2], 1u) << "the fallback carries once no weighted path does";
  EXPECT_FALSE(none_left(p, 3));
  fail_and_fence(p[2], 0);
  EXPECT_TRUE(none_left(p, 3));
  EXPECT_EQ(effective_shares(p, w, 3, out), 0);
  recover(p[0], 100);  // ramping at 25 %
  EXPECT_EQ(effective_shares(p, w, 3, out), 1);
  EXPECT_EQ(out[0], 50u);
  const uint16_t tiny[3] = {1, 0, 0};
  EXPECT_EQ(effective_shares(p, tiny, 3, out), 1);
  EXPECT_EQ(out[0], 1u) << "a small weight ramping in still carries";
}

TEST(Paths, ReportNamesEveryPathAndWhatItSaw) {
  Path p[2] = {Path(Role::kSender, timing()), Path(Role::kSender, timing())};
  p[0].on_fault(Cause::kLocalPort, "rxe0 port 1 down", 0);
  p[1].on_fault(Cause::kCompletion, "qpn 17: transport retry counter exceeded", 0);
  const std::string r = paths_report(p, 2);
  EXPECT_NE(r.find("path 0: fencing, first cause port error"), std::string::npos) << r;
  EXPECT_NE(r.find("rxe0 port 1 down"), std::string::npos) << r;
  EXPECT_NE(r.find("path 1: fencing, first cause error completion"), std::string::npos) << r;
  EXPECT_NE(r.find("transport retry counter exceeded"), std::string::npos) << r;
  EXPECT_NE(r.find("1 failover(s)"), std::string::npos) << r;
}

}  // namespace
}  // namespace sluice::failover
