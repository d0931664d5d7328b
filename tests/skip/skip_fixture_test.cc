// A GoogleTest binary for tests/skip/check.sh: one test that passes, one that fails and one that
// skips, chosen with --gtest_filter, so that the mapping of skip_status.sh is checked on the real
// output of GoogleTest (a skip must never mask a failure in the same binary).
#include <gtest/gtest.h>

TEST(SkipFixture, Passes) {
  EXPECT_EQ(1 + 1, 2);
}

TEST(SkipFixture, Fails) {
  ADD_FAILURE() << "this test fails on purpose (tests/skip/check.sh)";
}

TEST(SkipFixture, Skips) {
  GTEST_SKIP() << "this test skips on purpose (tests/skip/check.sh)";
}
