// Failover rules of one path (health/failover.h).
#include "health/failover.h"

#include <algorithm>
#include <cstdint>
#include <string>

namespace sluice::failover {

const char* state_name(State s) {
  switch (s) {
    case State::kUp:
      return "up";
    case State::kFencing:
      return "fencing";
    case State::kDown:
      return "down";
    case State::kRecovering:
      return "recovering";
    case State::kChecking:
      return "checking";
    case State::kRamping:
      return "ramping";
  }
  return "?";
}

const char* cause_name(Cause c) {
  switch (c) {
    case Cause::kNone:
      return "none";
    case Cause::kLocalPort:
      return "port error";
    case Cause::kLocalDevice:
      return "device fatal";
    case Cause::kPeerFence:
      return "the peer fenced it";
    case Cause::kCompletion:
      return "error completion";
    case Cause::kWatchdog:
      return "no progress (watchdog)";
    case Cause::kAttemptFailed:
      return "recovery attempt failed";
    case Cause::kCheckFailed:
      return "path check failed";
  }
  return "?";
}

namespace {
// "error completion: qpn 17 ..." (the cause, and the facts when there are any).
std::string with_facts(Cause c, const std::string& what) {
  return std::string(cause_name(c)) + (what.empty() ? "" : ": " + what);
}
}  // namespace

int64_t backoff_ms(const Timing& t, int attempt) {
  int64_t d = std::max<int64_t>(1, t.retry_base_ms);
  for (int k = 1; k < attempt && d < t.retry_cap_ms; ++k) d *= 2;
  return std::min(d, t.retry_cap_ms);
}

bool Path::awaits_peer() const {
  switch (state_) {
    case State::kFencing:
      return !peer_fenced_;
    case State::kRecovering:
    case State::kChecking:
      return true;
    case State::kUp:
    case State::kDown:
    case State::kRamping:
      return false;
  }
  return false;
}

int64_t Path::next_due_ms() const {
  constexpr int64_t kNever = INT64_MAX;
  switch (state_) {
    case State::kUp:
      return attempts_ > 0 ? since_ + t_.stable_ms : kNever;
    case State::kDown:
      return role_ == Role::kSender ? retry_at_ : kNever;
    case State::kRamping:
      return step_at_ + t_.ramp_step_ms;
    case State::kFencing:
    case State::kRecovering:
    case State::kChecking:
      return 0;
  }
  return 0;
}

int Path::share_pct() const {
  if (state_ == State::kUp) return 100;
  if (state_ == State::kRamping) return kRampPct[ramp_step_];
  return 0;
}

uint32_t Path::enter_fencing(Cause c, const std::string& what, int64_t now_ms) {
  const State was = state_;
  state_ = State::kFencing;
  since_ = now_ms;
  cause_ = c;
  local_fenced_ = peer_fenced_ = false;
  ++failovers_;
  say(std::string("failed over (") + with_facts(c, what) + ") from " + state_name(was) +
      ", epoch " + std::to_string(epoch_) + "; fencing its QPs on both sides");
  return kFenceLocal | kRestripe | kLog;
}

uint32_t Path::enter_down_after_fence(int64_t now_ms) {
  const int64_t took = now_ms - since_;
  state_ = State::kDown;
  since_ = now_ms;
  retry_at_ = now_ms + backoff_ms(t_, attempts_ + 1);
  say("fenced on both sides after " + std::to_string(took) +
      " ms; replaying what did not arrive; " +
      (role_ == Role::kSender ? "next attempt in " + std::to_string(retry_at_ - now_ms) + " ms"
                              : std::string("the sender offers its recovery")));
  return kReplay | kLog;
}

uint32_t Path::attempt_failed(Cause c, const std::string& what, int64_t now_ms) {
  const State was = state_;
  state_ = State::kDown;
  since_ = now_ms;
  offered_ = false;
  retry_at_ = now_ms + backoff_ms(t_, attempts_ + 1);
  if (role_ == Role::kSender) {
    say(std::string("recovery attempt ") + std::to_string(attempts_) + " failed in " +
        state_name(was) + " (" + with_facts(c, what) + "); next in " +
        std::to_string(retry_at_ - now_ms) + " ms");
    return kDropFresh | kLog;
  }
  // The receiver answers, the sender offers: a FENCE of the attempt's epoch tells the sender at
  // once that this one failed here (else it would wait out its attempt's bound).
  say(std::string("recovery attempt of epoch ") + std::to_string(epoch_) + " failed in " +
      state_name(was) + " (" + with_facts(c, what) + "); the sender is told and offers again");
  return kDropFresh | kLog | kSendFence;
}

uint32_t Path::on_fault(Cause c, const std::string& what, int64_t now_ms) {
  switch (state_) {
    case State::kUp:
    case State::kRamping:
      return enter_fencing(c, what, now_ms);
    case State::kRecovering:
      return attempt_failed(Cause::kAttemptFailed,
                            c == Cause::kAttemptFailed ? what : with_facts(c, what), now_ms);
    case State::kChecking:
      return attempt_failed(Cause::kCheckFailed, with_facts(c, what), now_ms);
    case State::kFencing:
    case State::kDown:
      return kNoAction;  // already out of the stripe; the first cause stands
  }
  return kNoAction;
}

uint32_t Path::on_local_fenced(int64_t now_ms) {
  if (state_ != State::kFencing || local_fenced_) return kNoAction;
  local_fenced_ = true;
  uint32_t a = kSendFence;
  if (peer_fenced_) a |= enter_down_after_fence(now_ms);
  return a;
}

Path::PeerFence Path::classify_peer_fence(uint32_t epoch) const {
  if (epoch != epoch_) return PeerFence::kStale;
  switch (state_) {
    case State::kUp:
    case State::kRamping:
    case State::kFencing:
      return PeerFence::kFences;
    case State::kRecovering:
    case State::kChecking:
      return PeerFence::kEndsAttempt;
    case State::kDown:
      return PeerFence::kStale;  // both fences are in: a repeat changes nothing
  }
  return PeerFence::kStale;
}

uint32_t Path::on_peer_fence(uint32_t epoch, int64_t now_ms) {
  if (classify_peer_fence(epoch) == PeerFence::kStale) return kNoAction;
  uint32_t a = kNoAction;
  if (state_ == State::kUp || state_ == State::kRamping) {
    a |= enter_fencing(Cause::kPeerFence, "", now_ms);
  } else if (state_ == State::kRecovering || state_ == State::kChecking) {
    // The peer's fresh path already carried (its check passed) and failed before this side's
    // check completed: this side's fresh QPs carried nothing, so dropping them fences them; the
    // FENCE answers the peer's, whose own fence waits for it.
    return attempt_failed(Cause::kPeerFence, "the peer fenced the fresh path", now_ms) | kSendFence;
  }
  if (state_ != State::kFencing || peer_fenced_) return a;
  peer_fenced_ = true;
  if (local_fenced_) a |= enter_down_after_fence(now_ms);
  return a;
}

uint32_t Path::on_port_active(int64_t now_ms) {
  if (state_ != State::kDown) return kNoAction;
  retry_at_ = std::min(retry_at_, now_ms);
  return on_tick(now_ms);
}

uint32_t Path::on_peer_offer(uint32_t epoch, int64_t now_ms) {
  if (epoch <= epoch_ && !(state_ == State::kRecovering && epoch == epoch_)) return kNoAction;
  if (epoch > epoch_ && (state_ == State::kRecovering || state_ == State::kChecking)) {
    // The peer gave its attempt up (its bound) and offers the next: this side's fresh QPs of the
    // old one carried nothing; they go, and the new offer is answered.
    state_ = State::kRecovering;
    since_ = now_ms;
    epoch_ = epoch;
    offered_ = false;
    ++attempts_;
    say("recovering: the peer gave attempt " + std::to_string(epoch - 1) +
        " up and offered epoch " + std::to_string(epoch) + " (attempt " +
        std::to_string(attempts_) + ")");
    return kDropFresh | kAnswer | kLog;
  }
  if (state_ == State::kRecovering && epoch == epoch_) {
    // Two offers crossed: the sender's stands. The receiver drops its own fresh QPs and
    // answers; the sender ignores the receiver's offer and waits for its answer.
    if (role_ == Role::kSender || !offered_) return kNoAction;
    offered_ = false;
    since_ = now_ms;
    say("recovery offers of epoch " + std::to_string(epoch) + " crossed; answering the sender's");
    return kDropFresh | kAnswer;
  }
  if (state_ != State::kDown) return kNoAction;  // not fenced yet: it cannot be the peer's next
  state_ = State::kRecovering;
  since_ = now_ms;
  epoch_ = epoch;
  offered_ = false;
  ++attempts_;
  say("recovering: the peer offered epoch " + std::to_string(epoch) + " (attempt " +
      std::to_string(attempts_) + ")");
  return kAnswer | kLog;
}

uint32_t Path::on_peer_answer(uint32_t epoch, int64_t now_ms) {
  if (state_ != State::kRecovering || !offered_ || epoch != epoch_) return kNoAction;
  since_ = now_ms;
  return kConnect;
}

uint32_t Path::on_connected(int64_t now_ms) {
  if (state_ != State::kRecovering) return kNoAction;
  state_ = State::kChecking;
  since_ = now_ms;
  local_checked_ = peer_checked_ = false;
  return kCheck;
}

uint32_t Path::enter_ramping(int64_t now_ms) {
  state_ = State::kRamping;
  since_ = step_at_ = now_ms;
  ramp_step_ = 0;
  say("back (epoch " + std::to_string(epoch_) + ", attempt " + std::to_string(attempts_) +
      "): ramping in at " + std::to_string(kRampPct[0]) + "% of its share");
  return kRestripe | kLog;
}

uint32_t Path::on_checked(int64_t now_ms) {
  if (state_ != State::kChecking || local_checked_) return kNoAction;
  local_checked_ = true;
  // The sender's completions prove both directions: it ramps in and tells the receiver, whose
  // immediates prove only the sender's direction.
  if (role_ == Role::kSender)
    return enter_ramping(now_ms) | (t_.checked_word ? uint32_t{kSendChecked} : uint32_t{0});
  if (peer_checked_ || !t_.checked_word) return enter_ramping(now_ms);
  say("checked one way (epoch " + std::to_string(epoch_) +
      "): the sender's checks arrived; waiting for its CHECKED (its ACKs must get back)");
  return kLog;
}

uint32_t Path::on_peer_checked(uint32_t epoch, int64_t now_ms) {
  if (role_ != Role::kReceiver || state_ != State::kChecking || epoch != epoch_ || peer_checked_)
    return kNoAction;
  peer_checked_ = true;
  return local_checked_ ? enter_ramping(now_ms) : kNoAction;
}

uint32_t Path::on_tick(int64_t now_ms) {
  switch (state_) {
    case State::kUp:
      if (attempts_ > 0 && now_ms - since_ >= t_.stable_ms) attempts_ = 0;
      return kNoAction;
    case State::kFencing:
      // No bound of its own (0): the peer answers at its next call; one that is gone is the
      // liveness watch's (SLUICE_HEARTBEAT_MS).
      if (t_.fence_bound_ms <= 0 || now_ms - since_ < t_.fence_bound_ms) return kNoAction;
      say(std::string("the fence did not complete within ") + std::to_string(t_.fence_bound_ms) +
          " ms (" + (local_fenced_ ? "" : "this side's drain markers did not flush; ") +
          (peer_fenced_ ? "" : "no FENCE from the peer") + "); cause: " + cause_name(cause_));
      return kCommFails;
    case State::kDown:
      if (now_ms < retry_at_) return kNoAction;
      state_ = State::kRecovering;
      since_ = now_ms;
      ++epoch_;
      ++attempts_;
      offered_ = true;
      say("recovering: attempt " + std::to_string(attempts_) + ", epoch " + std::to_string(epoch_));
      return kOffer | kLog;
    case State::kRecovering:
    case State::kChecking:
      if (now_ms - since_ < t_.attempt_bound_ms) return kNoAction;
      return attempt_failed(
          state_ == State::kChecking ? Cause::kCheckFailed : Cause::kAttemptFailed,
          "no progress within " + std::to_string(t_.attempt_bound_ms) + " ms", now_ms);
    case State::kRamping:
      if (now_ms - step_at_ < t_.ramp_step_ms) return kNoAction;
      step_at_ = now_ms;
      if (++ramp_step_ < kRampSteps - 1) return kRestripe;
      state_ = State::kUp;
      since_ = now_ms;
      ramp_step_ = 0;
      ++failbacks_;
      say("back in full (epoch " + std::to_string(epoch_) + ")");
      return kRestripe | kLog;
  }
  return kNoAction;
}

int effective_shares(const Path* paths, const uint16_t* weights, int n, uint32_t* out) {
  bool weighted = false;
  for (int i = 0; i < n; ++i) {
    out[i] = paths[i].carries() ? static_cast<uint32_t>(weights[i]) *
                                      static_cast<uint32_t>(paths[i].share_pct()) / 100u
                                : 0u;
    if (paths[i].carries() && weights[i] > 0) {
      weighted = true;
      if (out[i] == 0) out[i] = 1;  // a small weight ramping in still carries
    }
  }
  if (!weighted) {
    for (int i = 0; i < n; ++i) out[i] = paths[i].carries() ? 1u : 0u;
  } else {
    for (int i = 0; i < n; ++i)
      if (weights[i] == 0) out[i] = 0;  // fallback only while a weighted path carries
  }
  int carrying = 0;
  for (int i = 0; i < n; ++i) carrying += out[i] > 0 ? 1 : 0;
  return carrying;
}

bool none_left(const Path* paths, int n) {
  for (int i = 0; i < n; ++i)
    if (paths[i].carries()) return false;
  return true;
}

std::string paths_report(const Path* paths, int n) {
  std::string r;
  for (int i = 0; i < n; ++i) {
    const Path& p = paths[i];
    if (!r.empty()) r += "; ";
    r += "path " + std::to_string(i) + ": " + state_name(p.state());
    if (p.cause() != Cause::kNone) r += std::string(", first cause ") + cause_name(p.cause());
    if (!p.describe().empty()) r += " (" + p.describe() + ")";
    r += ", " + std::to_string(p.failovers()) + " failover(s), " + std::to_string(p.failbacks()) +
         " failback(s)";
  }
  return r;
}

}  // namespace sluice::failover
