// The failover ledger of one QP incarnation (comm/qp_life.h), and the one place its protocol's
// invariants are checked (issue 31). Every count failover's exactly-once argument rests on
// (health/path_failover.h, docs/failover.md "How a path's work is moved, exactly once") changes
// only through the functions below, each of which refuses a change that would break an invariant
// with a reason, instead of letting the comm go on with a count that lies:
//
//   receiver:  closes <= credits          a close consumes a receive WR posted (or owed) on the QP
//              no close once fence_told   after this side's FENCE stated the count, none may come
//   sender:    log_lo <= chains           a chain is settled only once, in post order
//              chains - log_lo <= window  the chain log holds every chain not yet settled
//              arrived <= chains          the receiver cannot have polled a chain never posted
//              closes complete in order   RC completes a QP's closes in post order
//
// The fence's own flags live here too, so that an incarnation's whole failover state is made and
// dropped with it. Pure: no verbs, unit-tested alone (tests/unit/qp_ledger_test.cc).
#pragma once

#include <cstdint>
#include <string>

#include "sluice/core/base/status.h"

namespace sluice::ledger {

struct QpLedger {
  // Receiver: receive WRs posted or owed for chains (credits), closes polled (closes).
  // Sender: chains posted (chains), the oldest not yet settled (log_lo, absolute index).
  uint64_t credits = 0;
  uint64_t closes = 0;
  uint64_t chains = 0;
  uint64_t log_lo = 0;
  // The fence of this incarnation (failover_dp.cc fence_local): moved to ERROR, its drain marker
  // posted and back, and (receiver) the FENCE that stated `closes` sent.
  bool fenced = false;
  bool marker_posted = false;
  bool marker_seen = false;
  bool fence_told = false;
};

// Receiver: a close polled on this QP. Refused after the FENCE (a close the FENCE did not count:
// the sender would replay its chain into a receive that completed) and beyond the credits.
Status on_close(QpLedger& l);
// Receiver: n receive WRs posted (or held back while the QP's path is fencing) for chains.
void on_credits(QpLedger& l, uint64_t n);
// Receiver: the fence of `from` is complete (fence_told not yet set): what it still owes
// (credits - closes) moves to `to`; from's credits then equal its closes. Returns the count moved.
Result<uint64_t> move_credits(QpLedger& from, QpLedger& to);

// Sender: a chain about to be posted needs a place in the log (`window` entries per QP).
Status may_post_chain(const QpLedger& l, uint64_t window);
// Sender: the chain was posted; its index in the QP's log is the value returned.
uint64_t on_chain_posted(QpLedger& l);
// Sender: the closing completion of the chain at log_lo came back; `matches`: it names the
// chain the log holds there (its group leader). Out of order, or with nothing outstanding, is a
// protocol error.
Status on_close_completed(QpLedger& l, bool matches);
// Sender: the receiver's FENCE says it polled `arrived` closes of this QP; checked once before
// the replay settles or sends anything.
Status check_arrived(const QpLedger& l, uint64_t arrived);
// Sender: the chain at log_lo is settled (arrived) or replayed elsewhere.
void on_chain_settled(QpLedger& l);

}  // namespace sluice::ledger
