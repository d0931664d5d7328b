// The failover ledger of one QP incarnation (qp_ledger.h).
#include "health/qp_ledger.h"

namespace sluice::ledger {
namespace {

Status broken(const std::string& what) {
  return Status(Code::kInternalError, "failover protocol: " + what);
}

}  // namespace

Status on_close(QpLedger& l) {
  if (l.fence_told) {
    return broken("a close arrived on a QP whose fence already stated its count (" +
                  std::to_string(l.closes) +
                  " closes): its chain would be replayed into a completed receive");
  }
  if (l.closes >= l.credits) {
    return broken("close " + std::to_string(l.closes + 1) + " on a QP that holds " +
                  std::to_string(l.credits) + " receive credits");
  }
  ++l.closes;
  return Status::ok();
}

void on_credits(QpLedger& l, uint64_t n) {
  l.credits += n;
}

Result<uint64_t> move_credits(QpLedger& from, QpLedger& to) {
  if (!from.marker_seen || from.fence_told)
    return broken("credits moved off a QP whose fence is not complete, or moved twice");
  if (from.closes > from.credits) return broken("a fenced QP counted more closes than its credits");
  const uint64_t owed = from.credits - from.closes;
  from.credits = from.closes;
  to.credits += owed;
  return owed;
}

Status may_post_chain(const QpLedger& l, uint64_t window) {
  if (l.fenced) return broken("a chain posted on a fenced QP");
  if (l.chains - l.log_lo >= window) return broken("the chain log of a QP is full");
  return Status::ok();
}

uint64_t on_chain_posted(QpLedger& l) {
  return l.chains++;
}

Status on_close_completed(QpLedger& l, bool matches) {
  if (l.log_lo == l.chains) return broken("a close completed on a QP with no chain outstanding");
  if (!matches) return broken("a close completed out of the chain log's order");
  ++l.log_lo;
  return Status::ok();
}

Status check_arrived(const QpLedger& l, uint64_t arrived) {
  if (arrived > l.chains) {
    return broken("the receiver counted " + std::to_string(arrived) + " closes on a QP that " +
                  std::to_string(l.chains) + " chains were posted on");
  }
  if (arrived < l.log_lo) {
    // Completions this side polled prove arrival: the receiver's count cannot be lower.
    return broken("the receiver counted " + std::to_string(arrived) +
                  " closes on a QP whose first " + std::to_string(l.log_lo) +
                  " closes completed here");
  }
  return Status::ok();
}

void on_chain_settled(QpLedger& l) {
  ++l.log_lo;
}

}  // namespace sluice::ledger
