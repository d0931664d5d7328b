// Failover of a multi-path comm, wired into the comm (issue 20): the per-comm state that the data
// path (send.cc, recv.cc), the async-event thread (liveness.cc) and the driver
// (datapath/failover_dp.cc) share. The rules of one path are health/failover.h; the messages on
// the kept socket are sluice/core/base/path_msg.h; docs/failover.md tells the whole design.
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

#include "base/stripe.h"
#include "health/failover.h"
#include "sluice/core/base/path_msg.h"
#include "sluice/core/base/wire.h"

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

// Path messages read from the socket, waiting for the comm's driver.
inline constexpr int kPathInbox = 8;

struct PathFailover {
  bool on = false;  // a fused comm whose both sides run failover
  bool sender = false;
  failover::Timing timing;
  failover::Path path[stripe::kMaxPaths];
  // The substitute of a path that is down (the receiver's choice, told in its FENCE), -1: none.
  int8_t sub[stripe::kMaxPaths] = {-1, -1, -1, -1};
  // Per QP: moved to ERROR by a fence; its drain marker posted; the marker's completion seen.
  bool qp_fenced[wire::kMaxQps] = {};
  bool marker_posted[wire::kMaxQps] = {};
  bool marker_seen[wire::kMaxQps] = {};
  // Receiver: closes polled and credits owed per QP since connect. Sender: chains posted per QP
  // (`closes`), and the absolute index of the oldest chain not yet settled (`log_lo`).
  uint64_t closes[wire::kMaxQps] = {};
  uint64_t credits[wire::kMaxQps] = {};
  uint64_t log_lo[wire::kMaxQps] = {};
  std::unique_ptr<ChainRec[]> log;  // sender: kMaxQps x kChainLog
  // The peer's FENCE per path: its counts (the receiver's closes, for the sender's replay).
  bool peer_fence_seen[stripe::kMaxPaths] = {};
  uint64_t peer_counts[stripe::kMaxPaths][wire::kMaxQps] = {};
  // Sender: a path whose chains are still to be settled or replayed (kDown reached).
  bool replay_pending[stripe::kMaxPaths] = {};
  // Faults seen inside a completion poll, applied by the driver (its next step).
  failover::Cause pending_cause[stripe::kMaxPaths] = {};
  std::string pending_what[stripe::kMaxPaths];
  // Set by the async-event thread: members whose port (or CQ) failed, QPs with a QP event.
  std::atomic<uint32_t> port_down{0};
  std::atomic<uint32_t> qp_event{0};
  // Path messages read by a socket poll, for the driver.
  wire::PathMsg inbox[kPathInbox];
  int inbox_n = 0;
  bool inbox_overflow = false;
  // Receiver: the weights new receives are striped by (the comm's, less the paths that do not
  // carry; the fallback paths when no weighted one carries).
  stripe::Paths live;
  bool any_not_up = false;  // some path is not kUp: the driver polls the socket every call
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
  // The fresh QPs of an attempt: this side's PSNs and the GID index they use, which of them passed
  // the check (sender: the check's completion; receiver: its immediate), and when the path went
  // down (the answerer waits a little for the old QPs' receive WRs to flush before it replaces
  // them).
  uint32_t fresh_psn[wire::kMaxQps] = {};
  uint8_t fresh_gid_index[stripe::kMaxPaths] = {};
  bool checked[wire::kMaxQps] = {};
  int64_t down_ms[stripe::kMaxPaths] = {};
  // Ports of members that came back ACTIVE (the async-event thread): the next attempt at once.
  std::atomic<uint32_t> port_up{0};
  // Statistics (sluice-bench, the INFO lines).
  uint64_t chains_replayed = 0;
  uint64_t bytes_replayed = 0;
  uint32_t failbacks = 0;
  uint64_t path_chains_replayed[stripe::kMaxPaths] = {};
  uint64_t path_bytes_replayed[stripe::kMaxPaths] = {};
  int64_t path_stall_ms[stripe::kMaxPaths] = {-1, -1, -1, -1};
  int64_t fault_ms[stripe::kMaxPaths] = {};  // when the path's current failover began
  int64_t last_stall_ms = 0;                 // fault to replayed/republished, the last failover
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

// The socket's sink for path messages (liveness.cc): queued for the comm's driver.
void fo_take_path_msg(void* fo, const wire::PathMsg& m);

}  // namespace sluice
