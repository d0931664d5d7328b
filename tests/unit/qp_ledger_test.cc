// The failover ledger of one QP incarnation (core/src/health/qp_ledger.h): every invariant the
// exactly-once argument rests on is refused, with a reason, when a change would break it.
#include "health/qp_ledger.h"

#include <gtest/gtest.h>

namespace sluice::ledger {
namespace {

TEST(QpLedger, TheReceiverCountsClosesOnlyWithinItsCreditsAndNeverAfterItsFence) {
  QpLedger l;
  on_credits(l, 2);
  EXPECT_TRUE(on_close(l).is_ok());
  EXPECT_TRUE(on_close(l).is_ok());
  Status over = on_close(l);
  ASSERT_FALSE(over.is_ok()) << "a third close with two credits";
  EXPECT_NE(over.message().find("holds 2 receive credits"), std::string::npos) << over.message();
  EXPECT_EQ(l.closes, 2u);

  on_credits(l, 3);
  l.fenced = l.marker_posted = l.marker_seen = true;
  l.fence_told = true;  // the FENCE stated 2
  Status late = on_close(l);
  ASSERT_FALSE(late.is_ok()) << "a close counted after the FENCE stated the count";
  EXPECT_NE(late.message().find("fence already stated its count (2 closes)"), std::string::npos)
      << late.message();
  EXPECT_EQ(l.closes, 2u) << "never counted";
}

TEST(QpLedger, CreditsMoveOnceAndOnlyOffACompletedFence) {
  QpLedger from, to;
  on_credits(from, 5);
  ASSERT_TRUE(on_close(from).is_ok());
  on_credits(to, 1);
  EXPECT_FALSE(move_credits(from, to).is_ok()) << "the fence is not complete: counts not final";
  from.fenced = from.marker_posted = from.marker_seen = true;
  Result<uint64_t> owed = move_credits(from, to);
  ASSERT_TRUE(owed.is_ok()) << owed.status().message();
  EXPECT_EQ(owed.value(), 4u);
  EXPECT_EQ(from.credits, from.closes);
  EXPECT_EQ(to.credits, 5u);
  from.fence_told = true;
  EXPECT_FALSE(move_credits(from, to).is_ok()) << "moved twice";
  EXPECT_EQ(to.credits, 5u);
}

TEST(QpLedger, TheSenderLogsChainsInOrderWithinItsWindow) {
  QpLedger l;
  for (uint64_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(may_post_chain(l, 4).is_ok()) << i;
    EXPECT_EQ(on_chain_posted(l), i);
  }
  Status full = may_post_chain(l, 4);
  ASSERT_FALSE(full.is_ok());
  EXPECT_NE(full.message().find("chain log of a QP is full"), std::string::npos);
  EXPECT_FALSE(on_close_completed(l, false).is_ok()) << "a close out of the log's order";
  EXPECT_EQ(l.log_lo, 0u);
  EXPECT_TRUE(on_close_completed(l, true).is_ok());
  EXPECT_EQ(l.log_lo, 1u);
  EXPECT_TRUE(may_post_chain(l, 4).is_ok()) << "a settled chain frees its place";
  l.fenced = true;
  EXPECT_FALSE(may_post_chain(l, 4).is_ok()) << "nothing is posted on a fenced QP";
}

TEST(QpLedger, ACloseWithNothingOutstandingIsRefused) {
  QpLedger l;
  Status st = on_close_completed(l, true);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("no chain outstanding"), std::string::npos);
}

TEST(QpLedger, TheReceiversCountMustLieBetweenWhatCompletedHereAndWhatWasPosted) {
  QpLedger l;
  for (int i = 0; i < 5; ++i) on_chain_posted(l);
  ASSERT_TRUE(on_close_completed(l, true).is_ok());
  ASSERT_TRUE(on_close_completed(l, true).is_ok());  // two closes proven arrived (their ACKs)
  EXPECT_TRUE(check_arrived(l, 2).is_ok());
  EXPECT_TRUE(check_arrived(l, 5).is_ok());
  Status low = check_arrived(l, 1);
  ASSERT_FALSE(low.is_ok()) << "a FENCE that did not count a close this side saw complete";
  EXPECT_NE(low.message().find("first 2 closes completed here"), std::string::npos);
  Status high = check_arrived(l, 6);
  ASSERT_FALSE(high.is_ok());
  EXPECT_NE(high.message().find("5 chains were posted"), std::string::npos);
  on_chain_settled(l);
  EXPECT_EQ(l.log_lo, 3u);
}

}  // namespace
}  // namespace sluice::ledger
