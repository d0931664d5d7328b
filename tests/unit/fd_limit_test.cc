// The file descriptor limit (issue 32): init raises the soft RLIMIT_NOFILE to the hard limit, and
// an EMFILE/ENFILE fails with a message that names the limit, what Sluice holds, and the fix.
#include "sluice/core/base/fd_limit.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cerrno>
#include <string>

namespace sluice {
namespace {

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(FdLimit, RaisesTheSoftLimitToTheHardOne) {
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max < 128) GTEST_SKIP() << "hard limit < 128";
  rlimit low = saved;
  low.rlim_cur = 64;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  const FdRaise r = raise_fd_limit(4096);  // 4096: the cap where the hard limit is infinite
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.before, 64u);
  const FdLimit now = read_fd_limit();
  ASSERT_TRUE(now.known);
  const uint64_t want = saved.rlim_max == RLIM_INFINITY ? 4096 : saved.rlim_max;
  EXPECT_EQ(now.soft, want);
  EXPECT_EQ(r.after, want);
  EXPECT_TRUE(has(r.text(), "raised from 64 to " + std::to_string(want))) << r.text();
  // Again: already there, nothing changes, and the text says so.
  const FdRaise again = raise_fd_limit(4096);
  EXPECT_EQ(again.before, want);
  EXPECT_EQ(again.after, want);
  EXPECT_TRUE(has(again.text(), "already at the hard limit")) << again.text();
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
}

TEST(FdLimit, TheMessageNamesTheLimitWhatSluiceHoldsAndTheFix) {
  SluiceFds held;
  held.comm_sockets = 1000;
  held.listen_sockets = 3;
  held.handshakes = 5;
  held.connects = 7;
  held.cm_channels = 1;
  EXPECT_EQ(held.total(), 1016u);
  const std::string m =
      fd_exhausted_text("listen on mlx5_0: socket()", EMFILE, {1024, 1024, true}, held);
  for (const char* part : {"listen on mlx5_0: socket() failed", "EMFILE", "soft 1024, hard 1024",
                           "hold 1016", "1000 comm sockets", "3 listening sockets", "5 handshakes",
                           "7 connects", "ulimit -n", "LimitNOFILE=", "raise the hard limit"}) {
    EXPECT_TRUE(has(m, part)) << "missing '" << part << "' in: " << m;
  }
  const std::string sys = fd_exhausted_text("accept4()", ENFILE, {1024, 4096, true}, held);
  EXPECT_TRUE(has(sys, "ENFILE")) << sys;
  EXPECT_TRUE(has(sys, "fs.file-max")) << sys;
  EXPECT_TRUE(has(sys, "soft 1024, hard 4096")) << sys;
  const std::string inf = fd_exhausted_text("x", EMFILE, {1024, UINT64_MAX, true}, held);
  EXPECT_TRUE(has(inf, "hard unlimited")) << inf;
  EXPECT_TRUE(fd_exhausted(EMFILE));
  EXPECT_TRUE(fd_exhausted(ENFILE));
  EXPECT_FALSE(fd_exhausted(ENOMEM));
}

}  // namespace
}  // namespace sluice
