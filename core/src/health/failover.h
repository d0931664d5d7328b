// Failover of a multi-path comm (issue 20): the life of each path as pure rules, which the comm
// drives with what it sees (faults, its drain markers, the peer's path messages, its port, the
// clock) and which answer with what the comm must do next. No verbs here: unit-tested alone
// (tests/unit/failover_test.cc). The messages are sluice/core/wire/path_msg.h.
//
// States of one path (a pair of members and their QPs):
//   kUp         carries its share of the stripe (weight 0: stands by, carries only when no path of
//               positive weight is left).
//   kFencing    a fault was seen: this side moves its QPs of the path to ERROR and posts a drain
//               marker on each, then waits for (a) its markers' flush completions and (b) the
//               peer's FENCE for the path's epoch. It carries nothing new.
//   kDown       fenced on both sides: what was in flight on it and did not arrive is replayed on
//               the paths left; a recovery attempt is due at retry_at().
//   kRecovering an attempt: fresh QPs, offer and answer over the kept socket, RTR and RTS.
//   kChecking   the fresh QPs are connected; a zero-byte signaled RDMA WRITE on each (it moves no
//               byte, so it touches no memory, and its ACK proves the path end to end) is in
//               flight. The sender leaves it when every check completed (the receiver's ACKs
//               came back: both directions work) and says so (CHECKED); the receiver leaves it
//               only with both its check immediates (sender to receiver) and that word, so a path
//               whose ACKs are lost (a one-way fault) never returns to either side's stripe.
//   kRamping    back in the stripe at a part of its share, one step more per ramp interval
//               without a fault, then kUp.
//
// The fence (no late write, ever). A byte reaches this side's memory over a path only through
// this side's QPs of that path: an RC responder places only packets addressed to it. A QP in
// ERROR places none: it drops every packet that arrives for it (IB spec, QP state ERROR), so
// packets of the failed path still in the network (queued in a switch, delayed) are lost, never
// placed. Each side moves its own QPs of the path to ERROR and then posts a drain marker on each;
// a work queue completes in order, so the marker's flush completion comes after every WR posted
// before it (the kernel's ib_drain_qp rests on the same rule): only then is the side's FENCE
// sent. Replay, and the reuse of any buffer or clear-to-send slot that the failed path could
// have written, wait for the peer's FENCE: kReplay is emitted only on entering kDown, which
// needs both. So nothing the failed path still carries can land in memory that was completed,
// re-posted or re-published, whatever the timing; the only bound involved (fence_bound_ms) fails
// the comm when the peer's FENCE does not come, it never lets replay start early.
// A fresh path (kRecovering, kChecking) carries only the zero-byte check, so an attempt that fails
// needs no fence: its QPs are destroyed, and a new attempt uses new QP numbers and random PSNs.
// A path that has carried data again (kRamping, kUp) is fenced on any fault.
//
// Recovery: the sender offers (its clock, its port back), the receiver answers; an attempt that
// fails on the receiver's side is told to the sender by a FENCE of the attempt's epoch, which
// ends the sender's attempt at once.
// Backoff: attempt k (1, 2, ...) starts retry_base_ms x 2^(k-1) after the fence or the last
// failed attempt, capped at retry_cap_ms; never given up while the comm lives. A port that comes
// back ACTIVE makes the next attempt due at once. The count returns to 0 only after the path has
// been kUp for stable_ms, so a flapping link backs off (hysteresis).
#pragma once

#include <cstdint>
#include <string>

namespace sluice::failover {

enum class State : uint8_t { kUp, kFencing, kDown, kRecovering, kChecking, kRamping };
const char* state_name(State s);

// What was seen (the first fault of a failover is its cause; later ones are kept as context).
enum class Cause : uint8_t {
  kNone,
  kLocalPort,      // IBV_EVENT_PORT_ERR on this side's member
  kLocalDevice,    // IBV_EVENT_DEVICE_FATAL
  kPeerFence,      // the peer's FENCE for this path: it saw the fault first
  kCompletion,     // an error completion on one of the path's QPs (RC retries exhausted, ...)
  kWatchdog,       // the progress watchdog fired on one of the path's QPs
  kAttemptFailed,  // a recovery attempt failed or timed out
  kCheckFailed,    // the zero-byte check of a fresh path failed or timed out
};
const char* cause_name(Cause c);

// Bits of what the comm must do after an event (several may be set).
enum Action : uint32_t {
  kNoAction = 0,
  kFenceLocal = 1u << 0,  // move this side's QPs of the path to ERROR, post a drain marker on each
  kSendFence = 1u << 1,   // send FENCE (path, epoch, last sequence seen per QP) on the socket
  kReplay = 1u << 2,      // both sides fenced: resend what did not arrive, on the paths left
  kOffer = 1u << 3,       // start an attempt: fresh QPs, send an offer with the new epoch
  kAnswer = 1u << 4,      // the peer's offer accepted: fresh QPs to RTR/RTS, send the answer
  kConnect = 1u << 5,     // the peer's answer: bring this side's fresh QPs to RTR/RTS with it
  kCheck = 1u << 6,       // post the zero-byte signaled WRITE on each fresh QP
  kDropFresh = 1u << 7,   // destroy the fresh QPs of a failed attempt
  kRestripe = 1u << 8,    // the path's share changed: recompute the stripe
  kLog = 1u << 9,         // a transition worth its one INFO line (describe() has it)
  kCommFails = 1u << 10,  // give the comm up (describe() says why)
  kSendChecked = 1u << 11,  // the sender: send CHECKED (path, epoch): its checks completed
};

struct Timing {
  int64_t retry_base_ms = 200;
  int64_t retry_cap_ms = 30000;
  int64_t fence_bound_ms = 10000;    // the peer's FENCE must come within this, else the comm fails
                                     // (0: no bound of its own, SLUICE_FAILOVER_FENCE_MS)
  int64_t attempt_bound_ms = 10000;  // one attempt (offer to checked)
  int64_t ramp_step_ms = 1000;       // per ramp step without a fault
  int64_t stable_ms = 10000;         // kUp this long: the backoff count returns to 0
  // Both ends speak CHECKED (path-message set 2, agreed at connect: wire.h kMetaFeaturePathSet2).
  // Without it (a peer of set 1) the sender sends no CHECKED and the receiver ramps in on its
  // check immediates alone, as set 1 did: a one-way path may then come back and fail again.
  bool checked_word = true;
};
inline constexpr int kRampSteps = 3;
inline constexpr int kRampPct[kRampSteps] = {25, 50, 100};  // share while ramping, per step
static_assert(kRampPct[kRampSteps - 1] == 100, "the last ramp step is the whole share");

// The delay before attempt `attempt` (1-based): base x 2^(attempt-1), at most cap.
int64_t backoff_ms(const Timing& t, int attempt);

// Which side of the comm this path machine runs on: decides a crossing of two offers (the
// sender's wins: the receiver answers it and drops its own).
enum class Role : uint8_t { kSender, kReceiver };

class Path {
 public:
  Path() = default;
  Path(Role role, Timing t) : role_(role), t_(t) {}

  State state() const { return state_; }
  uint32_t epoch() const { return epoch_; }
  // Carries user bytes now (its share: share_pct() of its weight).
  bool carries() const { return state_ == State::kUp || state_ == State::kRamping; }
  int share_pct() const;
  int64_t retry_at_ms() const { return retry_at_; }
  // A message from the peer is awaited now: its FENCE (fencing), its answer or offer (an attempt),
  // its CHECKED (the receiver, checked one way). The comm reads its socket at every call then.
  bool awaits_peer() const;
  // The earliest time on_tick could do something (a due attempt, a ramp step, the stable reset, a
  // bound): INT64_MAX when nothing is timed (up and settled, or a receiver's path down, which
  // waits for the sender's offer); 0 while the path is busy (fencing, an attempt), which the comm
  // drives at every call.
  int64_t next_due_ms() const;
  int attempts() const { return attempts_; }
  uint32_t failovers() const { return failovers_; }
  uint32_t failbacks() const { return failbacks_; }
  Cause cause() const { return cause_; }
  // The last transition and its context, for the INFO line or the comm's WARN.
  const std::string& describe() const { return text_; }

  // A fault seen on this side (what: the facts, for the logs).
  uint32_t on_fault(Cause c, const std::string& what, int64_t now_ms);
  // This side's drain markers of the path all flushed (its QPs are in ERROR and drained).
  uint32_t on_local_fenced(int64_t now_ms);
  // What a FENCE of `epoch` from the peer means here, decided before any of its fields is used
  // (the one place a FENCE's epoch is checked): kStale, of an incarnation already gone (a late
  // FENCE of a failed attempt), changes nothing; kFences fences the carrying path (or completes
  // this side's fence) and brings the receiver's substitute, first receive without the path and
  // close counts; kEndsAttempt (recovering, checking) ends the attempt and carries nothing the
  // fields are used for.
  enum class PeerFence : uint8_t { kStale, kFences, kEndsAttempt };
  PeerFence classify_peer_fence(uint32_t epoch) const;
  // The peer's FENCE for this path and `epoch` (a stale epoch is ignored).
  uint32_t on_peer_fence(uint32_t epoch, int64_t now_ms);
  // This side's member port is ACTIVE again (after its GID table was re-read).
  uint32_t on_port_active(int64_t now_ms);
  // The peer's offer of a new incarnation `epoch`, and its answer to ours.
  uint32_t on_peer_offer(uint32_t epoch, int64_t now_ms);
  uint32_t on_peer_answer(uint32_t epoch, int64_t now_ms);
  // This side's fresh QPs are at RTS (after kAnswer or kConnect).
  uint32_t on_connected(int64_t now_ms);
  // Every zero-byte check of the fresh path completed well: on the sender, its WRITEs' completions
  // (it ramps in and sends CHECKED); on the receiver, their immediates (it ramps in once the
  // sender's CHECKED came too; before it, one INFO: "checked one way").
  uint32_t on_checked(int64_t now_ms);
  // The receiver: the sender's CHECKED for `epoch` (another epoch's is ignored).
  uint32_t on_peer_checked(uint32_t epoch, int64_t now_ms);
  // The clock: due attempts, ramp steps, the fence's and an attempt's bounds, the stable reset.
  uint32_t on_tick(int64_t now_ms);

 private:
  uint32_t enter_fencing(Cause c, const std::string& what, int64_t now_ms);
  uint32_t enter_down_after_fence(int64_t now_ms);
  uint32_t attempt_failed(Cause c, const std::string& what, int64_t now_ms);
  uint32_t enter_ramping(int64_t now_ms);
  void say(std::string s) { text_ = std::move(s); }

  Role role_ = Role::kSender;
  Timing t_{};
  State state_ = State::kUp;
  uint32_t epoch_ = 0;
  Cause cause_ = Cause::kNone;
  bool local_fenced_ = false;
  bool peer_fenced_ = false;
  bool offered_ = false;        // kRecovering: this side sent the offer of epoch_
  bool local_checked_ = false;  // kChecking: this side's checks completed (receiver: arrived)
  bool peer_checked_ = false;   // kChecking, receiver: the sender's CHECKED of epoch_ came
  int attempts_ = 0;
  int ramp_step_ = 0;
  int64_t since_ = 0;     // when the current state began
  int64_t retry_at_ = 0;  // kDown: the next attempt
  int64_t step_at_ = 0;   // kRamping: the current step began
  uint32_t failovers_ = 0;
  uint32_t failbacks_ = 0;
  std::string text_;
};

// ---- The comm's view over its paths ---------------------------------------------------------
// The bytes each path carries, as relative weights: weight x share_pct / 100 for every path that
// carries; when no path of positive weight carries, the carrying fallback paths (weight 0) share
// equally (1 each). out[i] = 0: path i carries nothing new. Returns how many paths get bytes.
int effective_shares(const Path* paths, const uint16_t* weights, int n, uint32_t* out);
// No path carries: the comm has none left and fails (with paths_report() in its WARN).
bool none_left(const Path* paths, int n);
// "path 0: down since a port error (...); path 1: up, 2 failovers", for the comm's WARN and logs.
std::string paths_report(const Path* paths, int n);

}  // namespace sluice::failover
