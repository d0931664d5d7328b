// Failover of a multi-path comm, wired into the comm (issue 20): the per-comm state that the data
// path (send.cc, recv.cc), the async-event thread (liveness.cc) and the driver
// (datapath/failover_dp.cc) share. The rules of one path are health/failover.h; the messages on
// the kept socket are sluice/core/wire/path_msg.h; docs/failover.md tells the whole design.
//
// How a failed path's work reaches the other side exactly once, without a timer:
//  * Every close of a fused comm names its receive in its immediate (kImmRecord | slot, wire.h
//    kMembersVersion 3), so the receiver takes a close on whatever QP it arrives; a receive WR is
//    only a credit. The receiver counts, per QP, the credits it owes (`credits`: receive WRs it
//    posted, or holds back for a fenced QP) and the closes it polled (`closes`).
//  * The sender logs every chain it posts, per QP, in post order (`log`, ring of kChainLog), until
//    its close completes. RC completes a QP's closes in order, so "the receiver polled N closes on
//    QP x" means: the first N chains of x's log arrived, the others did not.
//  * When a path fails, each side moves its QPs of the path to ERROR and waits for each QP's drain
//    marker (posted behind everything else on it): from then on the path places nothing in this
//    side's memory (health/failover.h, the fence). The receiver then posts on a substitute path
//    the credits its QPs of the failed path still held (credits - closes), and sends FENCE with
//    its close counts and the substitute. The sender sends FENCE once its own markers are back.
//  * Once a side has both fences (failover::State::kDown): the sender settles the chains the
//    receiver counted (their receive has them) and replays the others on the substitute, and
//    sends every later chain of the failed path there too; the receiver re-publishes the
//    clear-to-send entries of every receive not yet complete (a CTS write on the failed path may
//    never have reached the sender), over a path that carries. New receives leave the path out.
// So no chain is lost (each is counted arrived or replayed) and none arrives twice (a counted one
// is never replayed, a replayed one was fenced off its first QP), and nothing lands in memory
// after both fences: the failed path's QPs are in ERROR on both ends.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "health/failover.h"
#include "rules/stripe.h"
#include "sluice/core/wire/path_msg.h"
#include "sluice/core/wire/wire.h"

namespace sluice {

// One chain the sender posted on a QP: the receive's seq, its group leader (pool index), the path
// and lane it belongs to in the receive's mask (not the QP's own path once redirected), and
// whether it carries the grouped receive's completion record.
struct ChainRec {
  uint64_t seq = 0;
  uint16_t leader = 0;
  uint8_t path = 0;
  uint8_t lane = 0;
  bool first = false;
};
// Chains outstanding on one QP: each of kFifoSlots receives in flight has at most one chain of
// each path routed to a QP.
inline constexpr int kChainLog = wire::kFifoSlots * stripe::kMaxPaths;
static_assert((kChainLog & (kChainLog - 1)) == 0, "the chain log is a power-of-two ring");

// Path messages read from the socket, waiting for the comm's driver. The socket is not read while
// it is full (liveness.cc: backpressure), so a burst of messages waits in the socket.
inline constexpr int kPathInbox = 8;

// PathFailover::events: what the async-event thread saw, per QP index or member.
inline constexpr int kEvQpShift = 0;           // bits 0..15: a QP event on QP q
inline constexpr int kEvPortDownShift = 16;    // bits 16..19: member m's port (or CQ) failed
inline constexpr int kEvPortUpShift = 24;      // bits 24..27: member m's port is ACTIVE again
inline constexpr int kEvDeviceDeadShift = 32;  // bits 32..35: member m's device is dead (fatal)
static_assert(wire::kMaxQps <= kEvPortDownShift - kEvQpShift, "a bit per QP");
static_assert(stripe::kMaxPaths <= 8, "a bit per member in each byte");

// PathFailover's part that only a failover comm uses (PathFailover::rec).
struct FoRecord {
  // The peer's FENCE per path: its counts (the receiver's closes, for the sender's replay).
  uint64_t peer_counts[stripe::kMaxPaths][wire::kMaxQps] = {};
  std::string pending_what[stripe::kMaxPaths];  // with PathFailover::pending_cause
  std::string dead_why[stripe::kMaxPaths];      // with PathFailover::dead_members
  int64_t down_ms[stripe::kMaxPaths] = {};      // when the path went down (steady clock, ms)
  int64_t fault_ms[stripe::kMaxPaths] = {};     // when the path's current failover began
  // Statistics (sluice-bench, the INFO lines).
  uint64_t path_chains_replayed[stripe::kMaxPaths] = {};
  uint64_t path_bytes_replayed[stripe::kMaxPaths] = {};
  int64_t path_stall_ms[stripe::kMaxPaths] = {-1, -1, -1, -1};
};

struct PathFailover {
  bool on = false;  // a fused comm whose both sides run failover
  bool sender = false;
  int path_set = 1;  // the path-message set both sides speak (wire.h kMetaFeaturePathSet2)
  failover::Timing timing;
  failover::Path path[stripe::kMaxPaths];
  // The substitute of a path that is down (the receiver's choice, told in its FENCE), -1: none.
  int8_t sub[stripe::kMaxPaths] = {-1, -1, -1, -1};
  // Per QP, the fence's flags and the counts (the receiver's closes and credits, the sender's
  // chains and the settled ones) are in the QP's incarnation (comm/qp_life.h, health/qp_ledger.h).
  // The sender's chain log: per QP index, kChainLog records of the incarnation's chains in post
  // order (ledger chains % kChainLog), allocated at connect.
  std::unique_ptr<ChainRec[]> log;  // sender: kMaxQps x kChainLog
  // The peer's FENCE per path (its counts: FoRecord::peer_counts).
  bool peer_fence_seen[stripe::kMaxPaths] = {};
  // Sender: a path whose chains are still to be settled or replayed (kDown reached).
  bool replay_pending[stripe::kMaxPaths] = {};
  // Faults seen inside a completion poll, applied by the driver (its next step).
  failover::Cause pending_cause[stripe::kMaxPaths] = {};
  bool any_pending = false;  // some pending_cause is set
  // SLUICE_TEST_HOLD_RQ (tests only): hold successful receive completions of a fenced QP until
  // its drain marker is back (failover_recv.cc), and how many were held and taken.
  bool hold_rq = false;
  uint64_t held_total = 0, held_taken = 0, held_said = 0;
  // Set by the async-event thread (fo_post_event), taken by the driver: one word, so that a
  // healthy comm's call reads one atomic (kEv* bits below) and nothing else.
  std::atomic<uint64_t> events{0};
  // Path messages read by a socket poll, for the driver: kPathInbox of them, allocated at
  // connect for a failover comm only (fo_init; 2.4 KiB a comm otherwise spent for nothing).
  std::unique_ptr<wire::PathMsg[]> inbox;
  int inbox_n = 0;
  bool inbox_lost = false;  // a message came with the inbox full: never, while the reader keeps
                            // to fo_inbox_room (an internal error if it does)
  // Receiver: the weights new receives are striped by (the comm's, less the paths that do not
  // carry; the fallback paths when no weighted one carries).
  stripe::Paths live;
  // Some path is not kUp (or its backoff count is not back to 0): the driver runs its clock at
  // every call. A path message is awaited (a FENCE, an answer, CHECKED: fo_restripe): the driver
  // reads the socket at every call; otherwise at the liveness cadence only.
  bool any_not_up = false;
  bool awaiting = false;
  // Nothing of the driver's is due before this time (steady clock, ms): no path is busy (fencing,
  // an attempt), no timer runs out earlier, nothing came from the peer or the async thread. A path
  // down for good (a dead device, an iWARP comm, the receiver's side waiting for an offer) then
  // costs a call a clock read (fo_drive). 0: drive at every call.
  int64_t quiet_until_ms = 0;
  // Recovery (failback; datapath/failback_dp.cc). Set at connect by either bring-up (oob's, or
  // rdma_cm's from its route): the paths' traffic class and service level and each local
  // member's GID (found again by value in the port's table after a flap: its index may have
  // moved). An iWARP comm (can_recover false: its QPs connect only through rdma_cm) fails over
  // but does not bring a path back.
  bool can_recover = false;
  uint8_t tc = 0, sl = 0;
  uint8_t member_gid[stripe::kMaxPaths][16] = {};
  // Receiver: its first receive whose paths leave each path out (from its fence on); sender: the
  // receiver's, from its FENCE. The sender offers a recovery once it consumed every receive before
  // it (none in flight names the path then), and its replay is done.
  uint64_t from_seq[stripe::kMaxPaths] = {};
  // The fresh QPs of an attempt: the GID index they use (their PSNs and checks are in their
  // incarnations), and when the path went down.
  uint8_t fresh_gid_index[stripe::kMaxPaths] = {};
  // Members whose port came back ACTIVE and whose paths have not taken it yet (an attempt at once,
  // kept until a path of the member may offer), and members whose device is dead (their paths
  // stay down; DEVICE_FATAL).
  uint32_t port_back = 0;
  uint32_t dead_members = 0;
  // Statistics (sluice-bench, the INFO lines).
  uint64_t chains_replayed = 0;
  uint64_t bytes_replayed = 0;
  uint32_t failbacks = 0;
  int64_t last_stall_ms = 0;  // fault to replayed/republished, the last failover
  // What only a failover comm reads (its counts, reasons, per-path times and statistics): made by
  // fo_init where `on` (0.9 KiB a comm otherwise spent for nothing, issue 32). Every reader runs
  // under `on`, save comm_stats, which checks for it.
  std::unique_ptr<FoRecord> rec;
};

// The QP that carries a chain meant for QP q now: q itself while its path carries, else the same
// lane of the path's substitute, followed while that is down too. -1: no substitute known yet (the
// path is fencing): its chains wait.
int fo_route(const PathFailover& f, int qpp, int q);

// At connect (comm_setup.cc set_paths): failover on when the comm has more than one path and both
// sides run it; the sender's chain log is allocated here (never on the data path).
void fo_init(PathFailover& f, bool on, bool sender, int npaths, const failover::Timing& t);

// Recomputes f.live from the comm's path weights and the paths' states; returns the mask of the
// paths that carry now.
uint32_t fo_restripe(PathFailover& f, const stripe::Paths& weights);

// The socket's sink for path messages (liveness.cc): queued for the comm's driver. The reader
// never feeds more than fo_inbox_room() messages' worth of bytes (backpressure).
void fo_take_path_msg(void* fo, const wire::PathMsg& m);
int fo_inbox_room(const void* fo);

// The async-event thread's word for the driver (kEv* bits), and the driver's take of it.
inline void fo_post_event(PathFailover& f, uint64_t bits) {
  f.events.fetch_or(bits, std::memory_order_release);
}

}  // namespace sluice
