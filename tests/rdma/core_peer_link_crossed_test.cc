// Crossed first connects over real verbs, two processes (issue 32: one out-of-band socket per peer
// process). Each process listens, and each connects to the other before either accepts, as NCCL's
// ranks do at init: both offers carry no link. The process with the larger id lets its answer wait
// for the link its own connect makes (listener.cc answer_waits), and an answer names the link its
// process has to the connector's (answer_link), so:
//  * with both processes polling connect and accept together (NCCL's proxy): one link for the
//    pair, one socket each, and both comms carry verified data;
//  * with the smaller process calling accept only after 3 s (the larger one's own connect stalls):
//    the wait ends at 2 s and the answer adopts; the smaller one's answer, later, names that link:
//    still one link, both comms carry data, and no connect waited longer than the bound.
//  * with a connector whose own accept is not polled after it answered (its end of the link the
//    listener names cannot come): it waits its 2 s bound, then goes over TCP once, and both comms
//    carry data (connect_theirs_late).
// A process's id is made once per process image, so each side is this binary exec'd afresh
// (SLUICE_TEST_CROSSED_SIDE), run from a gtest environment before any test, and reports one line.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core_pair.h"
#include "health/peer_link.h"
#include "rdma_env.h"
#include "sluice/core/api.h"

namespace {

using namespace sluice;
using Clock = std::chrono::steady_clock;

constexpr const char kSideEnv[] = "SLUICE_TEST_CROSSED_SIDE";  // "0" or "1"
constexpr const char kFdEnv[] = "SLUICE_TEST_CROSSED_FD";      // the socket to the other side
constexpr const char kOutEnv[] = "SLUICE_TEST_CROSSED_OUT";    // where the side writes its line
constexpr const char kModeEnv[] = "SLUICE_TEST_CROSSED_MODE";  // one of kMode*
constexpr int kModeCrossed = 0;     // both poll connect and accept together
constexpr int kModeLate = 1;        // the smaller id accepts only after kLateAcceptMs
constexpr int kModeTheirsLate = 2;  // connect_theirs_late
constexpr int kLateAcceptMs = 3000;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

bool send_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool recv_all(int fd, void* p, size_t n) {  // within 60 s
  char* c = static_cast<char*>(p);
  const auto t0 = Clock::now();
  while (n > 0) {
    pollfd q{fd, POLLIN, 0};
    if (ms_since(t0) > 60000.0 || ::poll(&q, 1, 1000) < 0) return false;
    if ((q.revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
    const ssize_t r = ::recv(fd, c, n, 0);
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// Crossed first connects: both connects first, for 200 ms with no accept anywhere (each offer is
// out, no link yet, before either listener reads it), then connect and accept polled together,
// accept only from kLateAcceptMs when `accept_late`. "" when both comms are up, else "FAIL ...".
std::string connect_crossed(int fd, int send_dev, std::vector<char>& theirs, ListenComm* l,
                            bool accept_late, SendComm** s, RecvComm** r, double* connect_ms) {
  const auto t0 = Clock::now();
  auto poll_connect = [&]() -> bool {
    if (*s != nullptr) return true;
    if (!connect(send_dev, theirs.data(), CommConfig{}, s).is_ok()) return false;
    if (*s != nullptr) *connect_ms = ms_since(t0);
    return true;
  };
  while (ms_since(t0) < 200.0) {
    if (!poll_connect()) return "FAIL connect";
  }
  char sync = 'x';
  if (!send_all(fd, &sync, 1) || !recv_all(fd, &sync, 1)) return "FAIL sync";
  while (*s == nullptr || *r == nullptr) {
    if (ms_since(t0) > 30000.0) return "FAIL no pair within 30 s";
    if (!poll_connect()) return "FAIL connect";
    if (*r == nullptr && (!accept_late || ms_since(t0) >= kLateAcceptMs)) {
      if (!accept(l, r).is_ok()) return "FAIL accept";
      if (*r != nullptr && !close_listen(l).is_ok()) return "FAIL closeListen";
    }
  }
  return "";
}

// The connector's wait for its end of the link the listener names, past its bound (kLinkTheirs).
// Side 1 (P) connects to side 0 (C), whose accept answers and then is not called again: P's
// connect completes with the link (its end); C's end would come with C's next accept (the ready
// byte). C then connects to P, polling only connect: P's listener names that link, C waits
// kLinkFirstWaitMs for its end, then makes its handshake over TCP (its offer no longer takes the
// listener's choice, or the answer would name the same link again, for as long as C's accept is
// not polled). Only with C's comm up does C accept. "" when both comms are up.
// P's connect and C's accept take turns in windows, never at once (so C's accept cannot read P's
// ready byte): C accepts for a window, then P polls its connect for one; if the answer has not come
// (a loaded host: P's metadata went out late, or C's window ended before it answered), C accepts
// for another window, and so on.
std::string connect_theirs_late(int side, int fd, int send_dev, std::vector<char>& theirs,
                                ListenComm* l, SendComm** s, RecvComm** r, double* connect_ms) {
  char sync = 'x';
  auto step = [&]() { return send_all(fd, &sync, 1) && recv_all(fd, &sync, 1); };
  auto tell = [&](char c) { return send_all(fd, &c, 1); };
  auto hear = [&](char* c) { return recv_all(fd, c, 1); };
  constexpr double kWindowMs = 300.0;
  const auto t0 = Clock::now();
  if (side == 1) {                  // P
    while (ms_since(t0) < 200.0) {  // its metadata out
      if (!connect(send_dev, theirs.data(), CommConfig{}, s).is_ok()) return "FAIL connect";
    }
    if (!step()) return "FAIL sync 1";
    for (;;) {
      char w = 0;
      if (!hear(&w) || w != 'w') return "FAIL sync 2";  // C's accept window is over
      const auto t1 = Clock::now();
      while (*s == nullptr && ms_since(t1) < kWindowMs) {  // the answer read, the ready byte
        if (!connect(send_dev, theirs.data(), CommConfig{}, s).is_ok()) return "FAIL connect";
      }
      if (*s != nullptr) break;  // P's end of the link
      if (ms_since(t0) > 30000.0) return "FAIL P's connect within 30 s";
      if (!tell('a')) return "FAIL sync 3";  // not yet: C accepts for another window
    }
    *connect_ms = ms_since(t0);
    if (link_count() != 1) return "FAIL P has no link after its connect";
    if (!tell('d')) return "FAIL sync 3";
    while (*r == nullptr) {  // C's connect: answered "use" with that link, then over TCP
      if (ms_since(t0) > 60000.0) return "FAIL P's accept within 60 s";
      if (!accept(l, r).is_ok()) return "FAIL accept";
    }
    if (!close_listen(l).is_ok()) return "FAIL closeListen";
    return "";
  }
  // C
  if (!step()) return "FAIL sync 1";
  for (char verdict = 'a'; verdict != 'd';) {
    const auto w = Clock::now();
    while (ms_since(w) < kWindowMs) {  // P's metadata read and answered; no ready byte yet
      if (!accept(l, r).is_ok()) return "FAIL accept";
      if (*r != nullptr) return "FAIL C's accept done before P's connect read the answer";
    }
    if (!tell('w')) return "FAIL sync 2";
    if (!hear(&verdict)) return "FAIL sync 3";  // 'd': P's connect is done, its link live there
    if (verdict != 'a' && verdict != 'd') return "FAIL sync 3 (a bad verdict)";
  }
  const auto t1 = Clock::now();
  while (*s == nullptr) {
    if (ms_since(t1) > 30000.0) return "FAIL C's connect within 30 s (its accept not polled)";
    if (!connect(send_dev, theirs.data(), CommConfig{}, s).is_ok()) return "FAIL connect";
  }
  *connect_ms = ms_since(t1);
  while (*r == nullptr) {  // the ready byte P sent long ago: C's end of the link
    if (ms_since(t0) > 60000.0) return "FAIL C's accept within 60 s";
    if (!accept(l, r).is_ok()) return "FAIL accept";
  }
  if (!close_listen(l).is_ok()) return "FAIL closeListen";
  return "";
}

// What one side saw, as "ok links=N connect_ms=T above=A" or "FAIL <why>".
std::string run_side(int side, int fd, int mode) {
  const auto pair = rdmatest::test_pair();
  if (!pair.error.empty() || pair.ports.size() != 2) return "FAIL no device pair: " + pair.error;
  if (!engine_acquire(nullptr).is_ok()) return "FAIL engine_acquire";
  struct Release {
    ~Release() { engine_release(); }
  } release;
  int a = -1, b = -1;
  if (!rdmatest::core_pair_devices(pair, &a, &b)) return "FAIL the pair's devices not in core";
  const int listen_dev = side == 0 ? b : a, send_dev = side == 0 ? a : b;
  std::vector<char> mine(kHandleSize, 0), theirs(kHandleSize, 0);
  ListenComm* l = nullptr;
  if (!listen(listen_dev, mine.data(), &l).is_ok()) return "FAIL listen";
  const wire::Nonce me = link_proc_id();
  wire::Nonce them{};
  if (!send_all(fd, mine.data(), mine.size()) || !send_all(fd, &me, sizeof me) ||
      !recv_all(fd, theirs.data(), theirs.size()) || !recv_all(fd, &them, sizeof them))
    return "FAIL exchanging handles";
  if (std::memcmp(&me, &them, sizeof me) == 0) return "FAIL both sides have one process id";
  const bool above = std::memcmp(me.bytes, them.bytes, sizeof me.bytes) > 0;
  SendComm* s = nullptr;
  RecvComm* r = nullptr;
  double connect_ms = -1;
  const std::string why =
      mode == kModeTheirsLate
          ? connect_theirs_late(side, fd, send_dev, theirs, l, &s, &r, &connect_ms)
          : connect_crossed(fd, send_dev, theirs, l, mode == kModeLate && !above, &s, &r,
                            &connect_ms);
  if (!why.empty()) return why;
  const size_t links = link_count();
  const uint64_t fell_back = link_handshake_counts().fell_back;
  char sync = 'x';
  // One verified message each way, both processes at once.
  std::vector<uint8_t> src(4099), dst(8192, 0xab);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 131 + side);
  MemHandle *ms = nullptr, *mr = nullptr;
  if (!reg_mr(s, src.data(), src.size(), MemType::kHost, &ms).is_ok() ||
      !reg_mr(r, dst.data(), dst.size(), MemType::kHost, &mr).is_ok())
    return "FAIL reg_mr";
  Request *rq = nullptr, *sq = nullptr;
  void* d = dst.data();
  size_t cap = dst.size();
  int tag = 3;
  if (!irecv(r, 1, &d, &cap, &tag, &mr, &rq).is_ok()) return "FAIL irecv";
  int rdone = 0, sdone = 0;
  size_t got = 0;
  const auto t1 = Clock::now();
  while (sq == nullptr || !rdone || !sdone) {
    if (ms_since(t1) > 30000.0) return "FAIL no message within 30 s";
    if (sq == nullptr) {
      const Status st = isend(s, src.data(), src.size(), tag, ms, &sq);
      if (!st.is_ok() && !st.is_again()) return "FAIL isend: " + st.message();
    }
    if (!rdone && !test(rq, &rdone, &got).is_ok()) return "FAIL test (receive)";
    if (sq != nullptr && !sdone && !test(sq, &sdone, nullptr).is_ok()) return "FAIL test (send)";
  }
  if (got != src.size()) return "FAIL received " + std::to_string(got) + " bytes";
  for (size_t i = 0; i < got; ++i) {
    if (dst[i] != static_cast<uint8_t>(i * 131 + (1 - side))) {
      return "FAIL byte " + std::to_string(i) + " wrong";
    }
  }
  if (dst[got] != 0xab) return "FAIL a byte past the message written";
  if (!dereg_mr(s, ms).is_ok() || !dereg_mr(r, mr).is_ok()) return "FAIL dereg_mr";
  // Both processes are done with the data before either closes (a close ends the comm's peer).
  if (!send_all(fd, &sync, 1) || !recv_all(fd, &sync, 1)) return "FAIL sync";
  if (!close_send(s).is_ok() || !close_recv(r).is_ok()) return "FAIL close";
  return "ok links=" + std::to_string(links) + " connect_ms=" + std::to_string(connect_ms) +
         " above=" + std::to_string(above ? 1 : 0) + " fell_back=" + std::to_string(fell_back);
}

// Runs a side when this process was exec'd as one, before any test, and exits.
class SideEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* side = std::getenv(kSideEnv);
    if (side == nullptr) return;
    const int fd = std::atoi(std::getenv(kFdEnv));
    const int out = std::atoi(std::getenv(kOutEnv));
    const char* mode = std::getenv(kModeEnv);
    const std::string line =
        run_side(std::atoi(side), fd, mode != nullptr ? std::atoi(mode) : kModeCrossed) + "\n";
    (void)!::write(out, line.data(), line.size());
    _exit(line.rfind("ok", 0) == 0 ? 0 : 1);
  }
};
[[maybe_unused]] const auto* const kSide = ::testing::AddGlobalTestEnvironment(new SideEnvironment);

struct SideResult {
  std::string line;
  bool ok = false;
  int links = -1;
  double connect_ms = -1;
  bool above = false;
  int fell_back = -1;  // handshakes this process redid over TCP
};

// Runs both sides (this binary, exec'd twice), each with its own process id; their lines.
std::vector<SideResult> run_both(int mode) {
  int sv[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  std::vector<SideResult> res(2);
  pid_t pid[2] = {-1, -1};
  int out[2] = {-1, -1};
  for (int side = 0; side < 2; ++side) {
    int p[2];
    EXPECT_EQ(::pipe(p), 0);
    out[side] = p[0];
    pid[side] = ::fork();
    if (pid[side] == 0) {
      ::close(p[0]);
      ::close(sv[1 - side]);
      setenv(kSideEnv, std::to_string(side).c_str(), 1);
      setenv(kFdEnv, std::to_string(sv[side]).c_str(), 1);
      setenv(kOutEnv, std::to_string(p[1]).c_str(), 1);
      setenv(kModeEnv, std::to_string(mode).c_str(), 1);
      // rdma_cm's connect completes only with the listener's accept polled (its events): P's
      // connect could not, with C's accept left alone. The out-of-band exchange does not need it.
      if (mode == kModeTheirsLate) setenv("SLUICE_CM", "oob", 1);
      char self[] = "/proc/self/exe";
      char* argv[] = {self, nullptr};
      ::execv(self, argv);
      _exit(127);
    }
    ::close(p[1]);
  }
  ::close(sv[0]);
  ::close(sv[1]);
  for (int side = 0; side < 2; ++side) {
    std::string line;
    char buf[512];
    ssize_t n;
    while ((n = ::read(out[side], buf, sizeof buf)) > 0) line.append(buf, static_cast<size_t>(n));
    ::close(out[side]);
    int status = 0;
    ::waitpid(pid[side], &status, 0);
    SideResult& r = res[side];
    r.line = line;
    r.ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && line.rfind("ok", 0) == 0;
    int above = 0;
    if (r.ok && std::sscanf(line.c_str(), "ok links=%d connect_ms=%lf above=%d fell_back=%d",
                            &r.links, &r.connect_ms, &above, &r.fell_back) != 4)
      r.ok = false;
    r.above = above != 0;
  }
  return res;
}

TEST(CorePeerLinkCrossed, FirstConnectsBothWaysShareOneLink) {
  auto pair = rdmatest::test_pair();
  SLUICE_REQUIRE_PAIR(pair);
  for (int round = 0; round < 3; ++round) {  // each round a fresh pair of processes
    const std::vector<SideResult> res = run_both(kModeCrossed);
    for (int side = 0; side < 2; ++side) {
      ASSERT_TRUE(res[side].ok) << "round " << round << ", side " << side << ": " << res[side].line;
      EXPECT_EQ(res[side].links, 1)
          << "round " << round << ", side " << side << ": one link for the pair, its end here ("
          << res[side].line << ")";
      EXPECT_LT(res[side].connect_ms, 2000.0)
          << "round " << round << ", side " << side << ": no connect waits out the bound";
    }
    EXPECT_NE(res[0].above, res[1].above) << "one process id is the larger";
  }
}

TEST(CorePeerLinkCrossed, AnAnswerWaitsForItsOwnConnectsLinkAtMostTwoSeconds) {
  auto pair = rdmatest::test_pair();
  SLUICE_REQUIRE_PAIR(pair);
  // The smaller process accepts only after 3 s: the larger one's own connect cannot finish
  // before then, so its answer to the smaller one's connect stops waiting at 2 s and adopts; the
  // smaller one's answer to the larger one's connect, at 3 s, names that link.
  const std::vector<SideResult> res = run_both(kModeLate);
  for (int side = 0; side < 2; ++side) ASSERT_TRUE(res[side].ok) << side << ": " << res[side].line;
  const SideResult& lower = res[0].above ? res[1] : res[0];
  const SideResult& upper = res[0].above ? res[0] : res[1];
  EXPECT_GE(lower.connect_ms, 1900.0) << "the answer waited for the larger one's own connect";
  EXPECT_LT(lower.connect_ms, 1.0 * kLateAcceptMs)
      << "and no longer than its bound: " << lower.line;
  EXPECT_GE(upper.connect_ms, 1.0 * kLateAcceptMs) << "its listener was not polled before";
  EXPECT_EQ(lower.links, 1) << "the later answer named the first link: " << lower.line;
  EXPECT_EQ(upper.links, 1) << upper.line;
}

TEST(CorePeerLinkCrossed, AConnectorWhoseEndOfTheNamedLinkDoesNotComeGoesOverTcpAtTheBound) {
  auto pair = rdmatest::test_pair();
  SLUICE_REQUIRE_PAIR(pair);
  const std::vector<SideResult> res = run_both(kModeTheirsLate);
  const SideResult& c = res[0];
  std::printf("C: %sP: %s", c.line.c_str(), res[1].line.c_str());
  for (int side = 0; side < 2; ++side) ASSERT_TRUE(res[side].ok) << side << ": " << res[side].line;
  EXPECT_GE(c.connect_ms, kLinkFirstWaitMs - 100.0) << "C waited its bound for its end: " << c.line;
  EXPECT_LT(c.connect_ms, kLinkFirstWaitMs + 5000.0)
      << "then went over TCP, once (no second wait for the same link): " << c.line;
  EXPECT_EQ(c.fell_back, 1) << c.line;
  // C's comm adopted its TCP handshake's socket; its end of P's link came with its accept.
  EXPECT_EQ(c.links, 2) << c.line;
  EXPECT_EQ(res[1].links, 2) << res[1].line;
}

}  // namespace
