// Bounds that cannot hang init (issue 32): a connector that its caller polls less often than the
// listener's SLUICE_HANDSHAKE_TIMEOUT_MS (NCCL's proxy under load polls each pending connect when
// it gets to it) completes, and so does its accept. Before the fix the listener dropped the
// answered handshake at its handshake bound while the connector, at its next poll, read the
// listener's metadata, brought its QPs up and returned a send comm whose receive comm never came.
// Run with SLUICE_HANDSHAKE_TIMEOUT_MS short (core.cmake) and the connector polled every 1.2x that.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core_pair.h"
#include "rdma_env.h"
#include "sluice/core/api.h"
#include "sluice/core/base/config.h"

namespace {

using namespace sluice;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::mutex g_log_mu;
std::vector<std::string> g_log;  // every line core logged at INFO or WARN
int g_warns = 0;

void capture_sink(int level, unsigned long, const char*, int, const char* fmt, ...) {
  if (level > kLogInfo) return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  static const Clock::time_point start = Clock::now();
  std::fprintf(stderr, "%ssluice %s +%.3fs %s\n", level == kLogWarn ? rdmatest::warn_prefix() : "",
               level == kLogWarn ? "WARN" : "INFO",
               std::chrono::duration<double>(Clock::now() - start).count(), msg);
  std::lock_guard<std::mutex> lk(g_log_mu);
  g_log.emplace_back(msg);
  g_warns += level == kLogWarn;
}

bool logged(const std::string& part) {
  std::lock_guard<std::mutex> lk(g_log_mu);
  for (const auto& l : g_log)
    if (l.find(part) != std::string::npos) return true;
  return false;
}

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

TEST(SlowConnector, PolledLessOftenThanTheHandshakeBoundStillCompletesBothSides) {
  auto pair = rdmatest::test_pair();
  SLUICE_REQUIRE_PAIR(pair);
  ASSERT_TRUE(engine_acquire(capture_sink).is_ok());
  struct Release {
    ~Release() { engine_release(); }
  } release;
  int dev_a = -1, dev_b = -1;
  ASSERT_TRUE(rdmatest::core_pair_devices(pair, &dev_a, &dev_b));
  const char* t = std::getenv("SLUICE_HANDSHAKE_TIMEOUT_MS");
  const int handshake_ms = t != nullptr ? std::atoi(t) : Config{}.handshake_timeout_ms;
  const char* c = std::getenv("SLUICE_CONNECT_TIMEOUT_MS");
  const int connect_ms = c != nullptr ? std::atoi(c) : Config{}.connect_timeout_ms;
  const int poll_ms = handshake_ms * 6 / 5;  // the connector's caller: 1.2x the handshake bound
  ASSERT_GT(connect_ms, 3 * poll_ms) << "the connector must be able to wait for 3 polls";
  std::printf(
      "ports %s: SLUICE_HANDSHAKE_TIMEOUT_MS=%d, SLUICE_CONNECT_TIMEOUT_MS=%d, connector "
      "polled every %d ms, accept every 5 ms\n",
      pair.describe().c_str(), handshake_ms, connect_ms, poll_ms);

  // A warm-up connection polled as fast as it likes: the process's first QP bring-up is slow in an
  // emulated bed (a second or more under TCG), which would blur the intervals below.
  {
    char wh[kHandleSize];
    ListenComm* wl = nullptr;
    ASSERT_TRUE(listen(dev_b, wh, &wl).is_ok());
    SendComm* ws = nullptr;
    RecvComm* wr = nullptr;
    const auto w0 = Clock::now();
    while (ws == nullptr || wr == nullptr) {
      ASSERT_LT(Clock::now(), w0 + std::chrono::seconds(60)) << "warm-up pair not connected";
      if (ws == nullptr) {
        ASSERT_TRUE(connect(dev_a, wh, CommConfig{}, &ws).is_ok());
      }
      if (wr == nullptr) {
        ASSERT_TRUE(accept(wl, &wr).is_ok());
      }
    }
    EXPECT_TRUE(close_send(ws).is_ok());
    EXPECT_TRUE(close_recv(wr).is_ok());
    EXPECT_TRUE(close_listen(wl).is_ok());
  }

  char handle[kHandleSize];
  ListenComm* l = nullptr;
  ASSERT_TRUE(listen(dev_b, handle, &l).is_ok());
  SendComm* s = nullptr;
  RecvComm* r = nullptr;
  const auto t0 = Clock::now();
  auto next_poll = t0;
  Clock::time_point connected_at{}, accepted_at{};
  int polls = 0;
  double gap_ms = 0;  // between the previous connect call's return and the latest call
  Clock::time_point last_return{};
  while (s == nullptr || r == nullptr) {
    ASSERT_LT(Clock::now(), t0 + milliseconds(connect_ms + 10000))
        << (s != nullptr ? "the connector completed but accept never did: init would hang"
                         : "the connector did not complete");
    if (s == nullptr && Clock::now() >= next_poll) {
      const auto c0 = Clock::now();
      if (polls > 0) gap_ms = ms_between(last_return, c0);
      Status st = connect(dev_a, handle, CommConfig{}, &s);
      const auto c1 = Clock::now();
      std::printf("connect poll %d at %.0f ms took %.0f ms\n", polls, ms_between(t0, c0),
                  ms_between(c0, c1));
      ASSERT_TRUE(st.is_ok()) << "connect poll " << polls << ": " << st.message();
      ++polls;
      next_poll = c1 + milliseconds(poll_ms);  // a whole interval between two calls
      last_return = c1;
      if (s != nullptr) connected_at = Clock::now();
    }
    if (r == nullptr) {
      Status st = accept(l, &r);
      ASSERT_TRUE(st.is_ok()) << st.message();
      if (r != nullptr) accepted_at = Clock::now();
    }
    std::this_thread::sleep_for(milliseconds(5));
  }
  std::printf(
      "connector: %d polls, done after %.0f ms (%.0f ms after its previous call); accept "
      "done after %.0f ms\n",
      polls, ms_between(t0, connected_at), gap_ms, ms_between(t0, accepted_at));
  // The case this test is about happened: the listener got the metadata in an earlier call (it
  // answers only inside accept, which this thread runs between connect calls) and needed the ready
  // byte that only the last call sent, a whole poll interval later: its answered handshake waited
  // longer than SLUICE_HANDSHAKE_TIMEOUT_MS.
  EXPECT_GE(polls, 2);
  EXPECT_GE(gap_ms, poll_ms) << "the last call came sooner than the poll interval";
  EXPECT_GT(gap_ms, handshake_ms);
  EXPECT_FALSE(logged("dropping")) << "the listener dropped the slowly polled connector";
  EXPECT_EQ(g_warns, 0);
  ASSERT_NO_FATAL_FAILURE(rdmatest::check_one_message(s, r, 17));
  EXPECT_TRUE(close_send(s).is_ok());
  EXPECT_TRUE(close_recv(r).is_ok());
  EXPECT_TRUE(close_listen(l).is_ok());
}

}  // namespace
