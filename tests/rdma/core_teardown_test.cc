// Refused sends and teardown from partial states, through core's API over real verbs (labels rdma
// and faults; bounds set short by core.cmake's environment):
//  * a send larger than the posted receive buffer, and one over maxP2pBytes, fail the sender and
//    complete the receiver's request with an error naming the size, the limit, the tag, the QPs,
//    the devices and the peer (the message NCCL's WARN prints); both comms then keep failing fast
//    with the same reason, and nothing was written;
//  * a connect and an accepted handshake that NCCL stops polling are released by a later control
//    call once their bound passed, and at finalize;
//  * close with receives or sends in flight (the peer gone) returns within SLUICE_CLOSE_TIMEOUT_MS
//    and stops as soon as nothing is outstanding;
//  * deregMr of a registration a pending request uses succeeds at once (NCCL's teardown order):
//    the handle is dead, the MR stays until the request is done or close drained the queues, and
//    a regMr of the same range gets a fresh MR;
//  * finalize with comms open releases their verbs objects; later calls on them fail, close frees.
// Every test checks that the QPs, CQs and MRs of the process (`rdma resource show`) and its file
// descriptors are back to where they started.
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core_pair.h"
#include "rdma_env.h"
#include "sluice/core/api.h"
#include "sluice/core/base/config.h"
#include "sluice/core/wire/wire.h"

namespace {

using sluice::rdmatest::count_own;

using namespace sluice;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// ---- Log capture
struct LogLine {
  int level;
  std::string text;
};
std::mutex g_log_mu;
std::vector<LogLine> g_log;

void capture_sink(int level, unsigned long, const char* file, int line, const char* fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  {
    std::lock_guard<std::mutex> lk(g_log_mu);
    g_log.push_back({level, msg});
  }
  if (level <= kLogInfo) {
    std::fprintf(stderr, "%ssluice %s %s:%d %s\n", level == kLogWarn ? rdmatest::warn_prefix() : "",
                 level == kLogWarn ? "WARN" : "INFO", file, line, msg);
  }
}

bool logged(int level, const std::string& part) {
  std::lock_guard<std::mutex> lk(g_log_mu);
  for (const LogLine& l : g_log)
    if (l.level == level && l.text.find(part) != std::string::npos) return true;
  return false;
}

using rdmatest::open_fd_count;

struct Resources {
  long qp = 0, cq = 0, mr = 0;
  int fds = 0;
  static Resources now() {
    return {count_own("qp"), count_own("cq"), count_own("mr"), open_fd_count()};
  }
};

void expect_back_to(const Resources& base, const char* when) {
  const Resources r = Resources::now();
  ASSERT_GE(base.qp, 0) << "`rdma resource show` failed (iproute2's rdma tool is needed)";
  EXPECT_EQ(r.qp, base.qp) << "QPs leaked " << when;
  EXPECT_EQ(r.cq, base.cq) << "CQs leaked " << when;
  EXPECT_EQ(r.mr, base.mr) << "MRs leaked " << when;
  EXPECT_EQ(r.fds, base.fds) << "file descriptors leaked " << when;
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : fallback;
}

class CoreTeardown : public ::testing::Test {
 protected:
  void SetUp() override {
    {
      std::lock_guard<std::mutex> lk(g_log_mu);
      g_log.clear();
    }
    auto pair = rdmatest::test_pair();
    SLUICE_REQUIRE_PAIR(pair);
    ASSERT_TRUE(acquire());
    ASSERT_TRUE(rdmatest::core_pair_devices(pair, &dev_a_, &dev_b_, &name_a_, &name_b_));
    std::printf("ports: %s\n", pair.describe().c_str());
    // librdmacm opens a device's verbs context (file descriptors) the first time the process uses
    // rdma_cm on it and keeps it until the library is unloaded: one connection before any test
    // takes its baseline, so the baselines count what Sluice holds, not librdmacm's cache.
    static bool warmed = false;
    if (!warmed) {
      warmed = true;
      char h[kHandleSize];
      ListenComm* l = nullptr;
      ASSERT_TRUE(listen(dev_b_, h, &l).is_ok());
      SendComm* s = nullptr;
      RecvComm* r = nullptr;
      ASSERT_NO_FATAL_FAILURE(connect_pair(l, h, &s, &r));
      EXPECT_TRUE(close_send(s).is_ok());
      EXPECT_TRUE(close_recv(r).is_ok());
      EXPECT_TRUE(close_listen(l).is_ok());
    }
  }
  void TearDown() override {
    if (acquired_) engine_release();
  }
  bool acquire() {
    Status st = engine_acquire(capture_sink);
    EXPECT_TRUE(st.is_ok()) << st.message();
    acquired_ = st.is_ok();
    return acquired_;
  }

  // A connected pair over listen comm `l` (handle `h`).
  void connect_pair(ListenComm* l, char* h, SendComm** s, RecvComm** r) {
    *s = nullptr;
    *r = nullptr;
    const auto t0 = Clock::now();
    while (*s == nullptr || *r == nullptr) {
      ASSERT_LT(Clock::now(), t0 + std::chrono::seconds(60)) << "pair not connected";
      if (*s == nullptr) {
        Status st = connect(dev_a_, h, CommConfig{}, s);
        ASSERT_TRUE(st.is_ok()) << st.message();
      }
      if (*r == nullptr) {
        Status st = accept(l, r);
        ASSERT_TRUE(st.is_ok()) << st.message();
      }
    }
  }

  bool acquired_ = false;
  int dev_a_ = -1, dev_b_ = -1;
  std::string name_a_, name_b_;
};

void expect_has(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "missing \"" << part << "\" in: " << text;
}

// A send larger than the posted buffer (case 0), and one over maxP2pBytes (case 1): the sender's
// isend fails, the receiver's request completes with the error within kBound, both name the
// sizes, the limit, the tag, the QPs, the devices and the peer, and both comms keep failing fast
// with the same reason. Nothing is written into the receive buffer.
TEST_F(CoreTeardown, RefusedSendsTellTheReceiver) {
  constexpr auto kBound = std::chrono::seconds(5);
  const Resources base = Resources::now();
  for (int over_limit = 0; over_limit <= 1; ++over_limit) {
    SCOPED_TRACE(over_limit ? "over maxP2pBytes" : "larger than the posted buffer");
    char handle[kHandleSize];
    ListenComm* l = nullptr;
    ASSERT_TRUE(listen(dev_b_, handle, &l).is_ok());
    SendComm* s = nullptr;
    RecvComm* r = nullptr;
    ASSERT_NO_FATAL_FAILURE(connect_pair(l, handle, &s, &r));
    std::vector<uint8_t> src(8192, 0x5a), dst(4096, 0xab);
    MemHandle *ms = nullptr, *mr = nullptr;
    ASSERT_TRUE(reg_mr(s, src.data(), src.size(), MemType::kHost, &ms).is_ok());
    ASSERT_TRUE(reg_mr(r, dst.data(), dst.size(), MemType::kHost, &mr).is_ok());
    const int tag = 40 + over_limit;
    void* d = dst.data();
    size_t cap = dst.size();
    Request* rq = nullptr;
    ASSERT_TRUE(irecv(r, 1, &d, &cap, &tag, &mr, &rq).is_ok());
    // Over the limit: the buffer is never read, so a small registration stands for it.
    const size_t size = over_limit ? wire::kMaxMessageBytes + 1 : src.size();
    Request* sq = nullptr;
    Status sst;
    const auto t0 = Clock::now();
    for (;;) {
      ASSERT_LT(Clock::now(), t0 + kBound) << "isend neither failed nor matched";
      sst = isend(s, src.data(), size, tag, ms, &sq);
      if (!sst.is_again()) break;
      int done = 0;
      ASSERT_TRUE(test(rq, &done, nullptr).is_ok());  // publishes the receive
    }
    ASSERT_FALSE(sst.is_ok()) << "the refused send was accepted";
    EXPECT_EQ(sq, nullptr);
    const auto told_at = Clock::now();
    const std::string sm = sst.message();
    std::printf("sender: %s\n", sm.c_str());
    expect_has(sm, "isend of " + std::to_string(size) + " bytes (tag " + std::to_string(tag) + ")");
    expect_has(sm, over_limit ? "exceeds maxP2pBytes = " + std::to_string(wire::kMaxMessageBytes)
                              : std::string("larger than the receive buffer of 4096 bytes"));
    expect_has(sm, "the receiver is told");
    expect_has(sm, "qpn ");
    expect_has(sm, name_a_);
    expect_has(sm, name_b_);
    expect_has(sm, " at ");

    Status rst;
    int done = 0;
    for (;;) {
      ASSERT_LT(Clock::now(), told_at + kBound) << "the receiver was not told";
      rst = test(rq, &done, nullptr);
      if (!rst.is_ok()) break;
      ASSERT_EQ(done, 0) << "the refused receive completed as a success";
    }
    std::printf("receiver told %.1f ms after the sender's isend failed: %s\n", ms_since(told_at),
                rst.message().c_str());
    const std::string rm = rst.message();
    expect_has(rm, "peer tried to send " + std::to_string(size) +
                       " bytes into receive buffer 0 (tag " + std::to_string(tag) + ")");
    expect_has(rm, over_limit ? "4096 bytes, more than maxP2pBytes = " +
                                    std::to_string(wire::kMaxMessageBytes) + " bytes"
                              : std::string("of only 4096 bytes"));
    expect_has(rm, "nothing was written");
    expect_has(rm, "qpn ");
    expect_has(rm, name_a_);
    expect_has(rm, name_b_);
    expect_has(rm, " at ");
    for (uint8_t b : dst) ASSERT_EQ(b, 0xab) << "the refused send wrote into the receive buffer";

    // Both comms keep failing fast with the same reason.
    Request* again = nullptr;
    const auto f0 = Clock::now();
    Status s2 = isend(s, src.data(), 16, tag + 1, ms, &again);
    EXPECT_EQ(s2.message(), sm);
    Status r2 = irecv(r, 1, &d, &cap, &tag, &mr, &again);
    EXPECT_EQ(r2.message(), rm);
    EXPECT_LT(ms_since(f0), 1000.0) << "a failed comm must fail fast";

    EXPECT_TRUE(dereg_mr(s, ms).is_ok());
    EXPECT_TRUE(dereg_mr(r, mr).is_ok());
    EXPECT_TRUE(close_send(s).is_ok());
    EXPECT_TRUE(close_recv(r).is_ok());
    EXPECT_TRUE(close_listen(l).is_ok());
  }
  expect_back_to(base, "after refused sends");
}

// Starts a connect and an accept on `l` and leaves both in the middle of the handshake, each with
// its QPs, CQ, MR and socket: the connector has sent its metadata and waits for the reply (never
// read), the acceptor built its comm and waits for the ready byte.
void abandon_handshake(int dev_a, ListenComm* l, char* handle, long qp0) {
  SendComm* s = nullptr;
  // The connector builds its QPs once it knows its connection manager (with SLUICE_CM=auto and a
  // listener that has an rdma_cm port, after a route lookup): poll until it has.
  long qp_connector = qp0;
  for (const auto t = Clock::now(); qp_connector == qp0; qp_connector = count_own("qp")) {
    ASSERT_LT(Clock::now(), t + std::chrono::seconds(10)) << "the connect built no QPs";
    ASSERT_TRUE(connect(dev_a, handle, CommConfig{}, &s).is_ok());
    ASSERT_EQ(s, nullptr);
    if (count_own("qp") == qp0) std::this_thread::sleep_for(milliseconds(5));
  }
  ASSERT_GT(qp_connector, qp0) << "the connect built no QPs";
  const auto t0 = Clock::now();
  // The connector sends its metadata within its first calls; the acceptor builds its QPs on it.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(connect(dev_a, handle, CommConfig{}, &s).is_ok());
    ASSERT_EQ(s, nullptr);
    std::this_thread::sleep_for(milliseconds(20));
  }
  RecvComm* r = nullptr;
  while (count_own("qp") == qp_connector) {
    ASSERT_LT(Clock::now(), t0 + std::chrono::seconds(20)) << "the acceptor built no comm";
    ASSERT_TRUE(accept(l, &r).is_ok());
    ASSERT_EQ(r, nullptr) << "the handshake completed without the connector's ready byte";
    std::this_thread::sleep_for(milliseconds(20));
  }
}

// NCCL stops polling a connect and an accept mid-handshake: a later control call (here a listen)
// past SLUICE_CONNECT_TIMEOUT_MS and SLUICE_HANDSHAKE_TIMEOUT_MS releases both; the abandoned
// handle then fails connect cleanly.
TEST_F(CoreTeardown, AbandonedHandshakesAreReleasedAfterTheirBound) {
  const int connect_ms = env_int("SLUICE_CONNECT_TIMEOUT_MS", Config{}.connect_timeout_ms);
  const int handshake_ms = env_int("SLUICE_HANDSHAKE_TIMEOUT_MS", Config{}.handshake_timeout_ms);
  ASSERT_LE(std::max(connect_ms, handshake_ms), 10000) << "set the bounds short (core.cmake)";
  const Resources base = Resources::now();
  char handle[kHandleSize];
  ListenComm* l = nullptr;
  ASSERT_TRUE(listen(dev_b_, handle, &l).is_ok());
  ASSERT_NO_FATAL_FAILURE(abandon_handshake(dev_a_, l, handle, base.qp));
  const auto started = Clock::now();  // both bounds started before this
  // Before the bounds: a control call leaves them alone.
  char h2[kHandleSize];
  ListenComm* l2 = nullptr;
  ASSERT_TRUE(listen(dev_b_, h2, &l2).is_ok());
  EXPECT_TRUE(close_listen(l2).is_ok());
  if (ms_since(started) < std::min(connect_ms, handshake_ms) - 200) {
    EXPECT_GT(count_own("qp"), base.qp) << "released before its bound";
  }
  std::this_thread::sleep_for(milliseconds(std::max(connect_ms, handshake_ms) + 200) -
                              (Clock::now() - started));
  // Any later control call reaps: a listen.
  ASSERT_TRUE(listen(dev_b_, h2, &l2).is_ok());
  std::printf("abandoned handshakes released %.0f ms after they were left (bounds %d / %d ms)\n",
              ms_since(started), connect_ms, handshake_ms);
  EXPECT_EQ(count_own("qp"), base.qp) << "abandoned QPs not released";
  EXPECT_TRUE(logged(kLogInfo, "no longer polled past SLUICE_CONNECT_TIMEOUT_MS"));
  EXPECT_TRUE(logged(kLogWarn, "accept no longer called"));
  SendComm* s = nullptr;
  Status st = connect(dev_a_, handle, CommConfig{}, &s);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.message();
  expect_has(st.message(), "no connection in progress");
  RecvComm* r = nullptr;
  EXPECT_TRUE(accept(l, &r).is_ok());
  EXPECT_EQ(r, nullptr);
  EXPECT_TRUE(close_listen(l2).is_ok());
  EXPECT_TRUE(close_listen(l).is_ok());
  expect_back_to(base, "after abandoned handshakes");
}

// Finalize with a connect and an accepted handshake in progress and a listen comm open: all verbs
// objects go with the engine; the listen comm only fails accept afterwards, and close frees it.
TEST_F(CoreTeardown, FinalizeReleasesHandshakesInProgress) {
  const Resources base = Resources::now();
  char handle[kHandleSize];
  ListenComm* l = nullptr;
  ASSERT_TRUE(listen(dev_b_, handle, &l).is_ok());
  ASSERT_NO_FATAL_FAILURE(abandon_handshake(dev_a_, l, handle, base.qp));
  const auto t0 = Clock::now();
  engine_release();
  acquired_ = false;
  std::printf("finalize with 2 handshakes in progress took %.1f ms\n", ms_since(t0));
  EXPECT_TRUE(logged(kLogInfo, "finalize released 1 connect(s) and 1 accepted handshake(s)"));
  EXPECT_EQ(count_own("qp"), 0);
  EXPECT_EQ(count_own("cq"), 0);
  EXPECT_EQ(count_own("mr"), 0);
  RecvComm* r = nullptr;
  EXPECT_FALSE(accept(l, &r).is_ok());
  EXPECT_TRUE(close_listen(l).is_ok());
  ASSERT_TRUE(acquire());  // a later init works, and the listen comm is gone for good
  ASSERT_TRUE(listen(dev_b_, handle, &l).is_ok());
  EXPECT_TRUE(close_listen(l).is_ok());
  expect_back_to(base, "after finalize");
}

// Close with work in flight, both sides, peer not answering: receives posted that no send will
// ever serve, then a send whose receiver closed while its WRITEs were on the wire. Each close
// returns within SLUICE_CLOSE_TIMEOUT_MS (+ 1 s slack for the emulated bed), stops as soon as the
// QPs are drained (no "not drained" WARN), and releases everything.
TEST_F(CoreTeardown, CloseWithWorkInFlightIsBounded) {
  const int close_ms = env_int("SLUICE_CLOSE_TIMEOUT_MS", Config{}.close_timeout_ms);
  ASSERT_GE(close_ms, 500) << "set SLUICE_CLOSE_TIMEOUT_MS to a second or more (core.cmake)";
  const double ceiling = close_ms + 1000.0;
  const Resources base = Resources::now();
  char handle[kHandleSize];
  ListenComm* l = nullptr;
  ASSERT_TRUE(listen(dev_b_, handle, &l).is_ok());

  // (a) Three receives posted and published, no sender.
  {
    SendComm* s = nullptr;
    RecvComm* r = nullptr;
    ASSERT_NO_FATAL_FAILURE(connect_pair(l, handle, &s, &r));
    std::vector<uint8_t> dst(3 * 4096);
    MemHandle* mr = nullptr;
    ASSERT_TRUE(reg_mr(r, dst.data(), dst.size(), MemType::kHost, &mr).is_ok());
    for (int k = 0; k < 3; ++k) {
      void* d = dst.data() + k * 4096;
      size_t cap = 4096;
      int tag = k;
      Request* rq = nullptr;
      ASSERT_TRUE(irecv(r, 1, &d, &cap, &tag, &mr, &rq).is_ok());
      int done = 0;
      ASSERT_TRUE(test(rq, &done, nullptr).is_ok());
      EXPECT_EQ(done, 0);
    }
    // deregMr of a registration the pending receives use, NCCL's order (deregMr, then close):
    // it succeeds and the handle is dead at once; the MR stays until close drained the queues.
    const long mrs_before = count_own("mr");
    Status dst_st = dereg_mr(r, mr);
    EXPECT_TRUE(dst_st.is_ok()) << dst_st.message();
    EXPECT_EQ(count_own("mr"), mrs_before) << "the MR went while 3 receives still use it";
    EXPECT_EQ(dereg_mr(r, mr).code(), Code::kInvalidArgument);  // dead: a second one is refused
    {
      void* d = dst.data();
      size_t cap = 4096;
      int tag = 9;
      Request* rq = nullptr;
      Status st = irecv(r, 1, &d, &cap, &tag, &mr, &rq);
      EXPECT_EQ(st.code(), Code::kInvalidArgument) << "irecv with a deregistered handle";
    }
    const auto t0 = Clock::now();
    EXPECT_TRUE(close_recv(r).is_ok());
    // The comm's own MR (CTS staging and records) and the deferred one; and, with the eager path
    // on (the default), its adapter's eager pool, released with the last comm that negotiated it
    // (the sender is on the other port).
    const Config cfg = load_config_from_environment().value();
    const long pool = cfg.eager_max > 0 && cfg.eager_rings > 0 ? 1 : 0;
    EXPECT_EQ(count_own("mr"), mrs_before - 2 - pool) << "close did not release the deferred MR";
    const double recv_ms = ms_since(t0);
    const auto t1 = Clock::now();
    EXPECT_TRUE(close_send(s).is_ok());
    std::printf(
        "close with 3 receives in flight: %.1f ms; its idle sender: %.1f ms (bound %d ms)\n",
        recv_ms, ms_since(t1), close_ms);
    EXPECT_LT(recv_ms, ceiling);
    EXPECT_LT(ms_since(t1), ceiling);
  }

  // (b) A 4 MiB send on the wire whose receiver is gone.
  {
    SendComm* s = nullptr;
    RecvComm* r = nullptr;
    ASSERT_NO_FATAL_FAILURE(connect_pair(l, handle, &s, &r));
    std::vector<uint8_t> buf(4 << 20, 0x11), dst(4 << 20);
    MemHandle *ms = nullptr, *mr = nullptr;
    ASSERT_TRUE(reg_mr(s, buf.data(), buf.size(), MemType::kHost, &ms).is_ok());
    ASSERT_TRUE(reg_mr(r, dst.data(), dst.size(), MemType::kHost, &mr).is_ok());
    void* d = dst.data();
    size_t cap = dst.size();
    int tag = 3;
    Request *rq = nullptr, *sq = nullptr;
    ASSERT_TRUE(irecv(r, 1, &d, &cap, &tag, &mr, &rq).is_ok());
    const auto t0 = Clock::now();
    while (sq == nullptr) {
      ASSERT_LT(Clock::now(), t0 + std::chrono::seconds(10));
      Status st = isend(s, buf.data(), buf.size(), tag, ms, &sq);
      ASSERT_TRUE(st.is_ok() || st.is_again()) << st.message();
    }
    EXPECT_TRUE(close_recv(r).is_ok());  // the peer goes while the WRITEs are in flight
    const auto t1 = Clock::now();
    EXPECT_TRUE(close_send(s).is_ok());
    std::printf(
        "close of a send comm with a 4 MiB send in flight, peer gone: %.1f ms (bound %d ms)\n",
        ms_since(t1), close_ms);
    EXPECT_LT(ms_since(t1), ceiling);
  }
  EXPECT_FALSE(logged(kLogWarn, "not drained within SLUICE_CLOSE_TIMEOUT_MS"))
      << "close waited for its bound although the QPs were flushed";
  EXPECT_TRUE(close_listen(l).is_ok());
  // Case (b) left its registrations on the closed comms: released at finalize.
  engine_release();
  acquired_ = false;
  EXPECT_TRUE(logged(kLogWarn, "memory registration(s) still held at shutdown"));
  ASSERT_TRUE(acquire());
  expect_back_to(base, "after closes with work in flight");
}

// The close bound expiring (SLUICE_CLOSE_TIMEOUT_MS=0: one look at the CQ right after the QPs went
// to ERROR, before the flushed work can be back): the WARN names the QPs and what was in flight,
// and everything is released all the same.
TEST_F(CoreTeardown, CloseBoundExpiredWarnsAndReleases) {
  const char* was = std::getenv("SLUICE_CLOSE_TIMEOUT_MS");
  const std::string saved = was != nullptr ? was : "";
  engine_release();
  acquired_ = false;
  setenv("SLUICE_CLOSE_TIMEOUT_MS", "0", 1);
  const bool ok = acquire();
  if (saved.empty()) {
    unsetenv("SLUICE_CLOSE_TIMEOUT_MS");
  } else {
    setenv("SLUICE_CLOSE_TIMEOUT_MS", saved.c_str(), 1);
  }
  ASSERT_TRUE(ok);
  const Resources base = Resources::now();
  char handle[kHandleSize];
  ListenComm* l = nullptr;
  ASSERT_TRUE(listen(dev_b_, handle, &l).is_ok());
  SendComm* s = nullptr;
  RecvComm* r = nullptr;
  ASSERT_NO_FATAL_FAILURE(connect_pair(l, handle, &s, &r));
  std::vector<uint8_t> dst(2 * 4096);
  MemHandle* mr = nullptr;
  ASSERT_TRUE(reg_mr(r, dst.data(), dst.size(), MemType::kHost, &mr).is_ok());
  for (int k = 0; k < 2; ++k) {
    void* d = dst.data() + k * 4096;
    size_t cap = 4096;
    int tag = k;
    Request* rq = nullptr;
    ASSERT_TRUE(irecv(r, 1, &d, &cap, &tag, &mr, &rq).is_ok());
    int done = 0;
    ASSERT_TRUE(test(rq, &done, nullptr).is_ok());
  }
  const auto t0 = Clock::now();
  EXPECT_TRUE(close_recv(r).is_ok());
  const double ms = ms_since(t0);
  std::printf("close with an expired bound (0 ms) took %.1f ms\n", ms);
  EXPECT_LT(ms, 1000.0);
  EXPECT_TRUE(logged(kLogWarn, "outstanding work not drained within SLUICE_CLOSE_TIMEOUT_MS=0 ms"));
  EXPECT_TRUE(logged(kLogWarn, "the send queue of qpn "));
  EXPECT_TRUE(logged(kLogWarn, "2 receive WR(s) on qpn "));
  EXPECT_TRUE(logged(kLogWarn, "in flight: 2 irecv(s) not tested done"));
  EXPECT_TRUE(logged(kLogWarn, "releasing the QPs, CQ and memory anyway"));
  EXPECT_TRUE(close_send(s).is_ok());
  EXPECT_TRUE(close_listen(l).is_ok());
  engine_release();  // the registration held on the closed comm goes here
  acquired_ = false;
  ASSERT_TRUE(acquire());
  expect_back_to(base, "after a close whose bound expired");
}

// Finalize with a send and a receive comm still open, a receive in flight and its registration
// held: the verbs objects and sockets go at finalize (with a WARN); every later call on the comms
// fails with the reason except deregMr and close (teardown steps NCCL stops at on error), which
// succeed, and close frees them.
TEST_F(CoreTeardown, FinalizeWithCommsOpenReleasesThem) {
  const Resources base = Resources::now();
  char handle[kHandleSize];
  ListenComm* l = nullptr;
  ASSERT_TRUE(listen(dev_b_, handle, &l).is_ok());
  SendComm* s = nullptr;
  RecvComm* r = nullptr;
  ASSERT_NO_FATAL_FAILURE(connect_pair(l, handle, &s, &r));
  std::vector<uint8_t> src(4096, 1), dst(4096);
  MemHandle *ms = nullptr, *mr = nullptr;
  ASSERT_TRUE(reg_mr(s, src.data(), src.size(), MemType::kHost, &ms).is_ok());
  ASSERT_TRUE(reg_mr(r, dst.data(), dst.size(), MemType::kHost, &mr).is_ok());
  void* d = dst.data();
  size_t cap = dst.size();
  int tag = 5;
  Request* rq = nullptr;
  ASSERT_TRUE(irecv(r, 1, &d, &cap, &tag, &mr, &rq).is_ok());
  int done = 0;
  ASSERT_TRUE(test(rq, &done, nullptr).is_ok());
  const auto t0 = Clock::now();
  engine_release();
  acquired_ = false;
  std::printf("finalize with 2 comms open and a receive in flight took %.1f ms\n", ms_since(t0));
  EXPECT_TRUE(logged(kLogWarn, "finalize with 2 send/receive comm(s) still open"));
  EXPECT_EQ(count_own("qp"), 0) << "QPs outlived finalize";
  EXPECT_EQ(count_own("cq"), 0) << "CQs outlived finalize";
  EXPECT_EQ(count_own("mr"), 0) << "MRs outlived finalize";
  const std::string why = "finalized with this comm open";
  Request* req = nullptr;
  expect_has(isend(s, src.data(), src.size(), tag, ms, &req).message(), why);
  expect_has(irecv(r, 1, &d, &cap, &tag, &mr, &req).message(), why);
  expect_has(test(rq, &done, nullptr).message(), why);
  EXPECT_EQ(done, 0);
  // deregMr is a teardown step NCCL stops at on error: it succeeds (finalize released the
  // registration already; the handle is not touched).
  EXPECT_TRUE(dereg_mr(s, ms).is_ok());
  EXPECT_TRUE(dereg_mr(r, mr).is_ok());
  MemHandle* m2 = nullptr;
  expect_has(reg_mr(r, dst.data(), dst.size(), MemType::kHost, &m2).message(), why);
  EXPECT_TRUE(close_send(s).is_ok());
  EXPECT_TRUE(close_recv(r).is_ok());
  EXPECT_TRUE(close_listen(l).is_ok());
  ASSERT_TRUE(acquire());
  // A fresh engine works, and the retired comms did not disturb its count of open comms.
  ASSERT_TRUE(listen(dev_b_, handle, &l).is_ok());
  ASSERT_NO_FATAL_FAILURE(connect_pair(l, handle, &s, &r));
  EXPECT_TRUE(close_send(s).is_ok());
  EXPECT_TRUE(close_recv(r).is_ok());
  EXPECT_TRUE(close_listen(l).is_ok());
  engine_release();
  acquired_ = false;
  EXPECT_FALSE(logged(kLogWarn, "still open: keeping devices alive"));
  ASSERT_TRUE(acquire());
  expect_back_to(base, "after finalize with comms open");
}

// deregMr while a send request holds the registration (matched into a grouped receive that waits
// for its second send): it succeeds, the handle is dead at once, but the MR stays while the send
// may still read it; a regMr of the same range gets a fresh MR (never the deferred one), a send
// from it verifies, and the deferred MR goes at the comm's next regMr/deregMr once the group is
// done.
TEST_F(CoreTeardown, DeregOfARegistrationInUseIsDeferred) {
  const Resources base = Resources::now();
  char handle[kHandleSize];
  ListenComm* l = nullptr;
  ASSERT_TRUE(listen(dev_b_, handle, &l).is_ok());
  SendComm* s = nullptr;
  RecvComm* r = nullptr;
  ASSERT_NO_FATAL_FAILURE(connect_pair(l, handle, &s, &r));
  std::vector<uint8_t> src(2 * 4096, 0x21), dst(2 * 4096);
  MemHandle *ms = nullptr, *mr = nullptr;
  ASSERT_TRUE(reg_mr(s, src.data(), src.size(), MemType::kHost, &ms).is_ok());
  ASSERT_TRUE(reg_mr(r, dst.data(), dst.size(), MemType::kHost, &mr).is_ok());
  void* d[2] = {dst.data(), dst.data() + 4096};
  size_t cap[2] = {4096, 4096};
  int tags[2] = {1, 2};
  MemHandle* mrs[2] = {mr, mr};
  Request *rq = nullptr, *sq1 = nullptr, *sq2 = nullptr;
  ASSERT_TRUE(irecv(r, 2, d, cap, tags, mrs, &rq).is_ok());
  const auto t0 = Clock::now();
  while (sq1 == nullptr) {
    ASSERT_LT(Clock::now(), t0 + std::chrono::seconds(10));
    Status st = isend(s, src.data(), 4096, 1, ms, &sq1);
    ASSERT_TRUE(st.is_ok() || st.is_again()) << st.message();
  }
  const long mr_count = count_own("mr");
  Status st = dereg_mr(s, ms);
  EXPECT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(count_own("mr"), mr_count) << "the MR went while a send still uses it";
  {
    Request* no = nullptr;
    EXPECT_EQ(isend(s, src.data() + 4096, 4096, 2, ms, &no).code(), Code::kInvalidArgument)
        << "isend with a deregistered handle";
  }
  // The same range again: a fresh registration (the deferred one is never handed out).
  MemHandle* ms2 = nullptr;
  ASSERT_TRUE(reg_mr(s, src.data(), src.size(), MemType::kHost, &ms2).is_ok());
  EXPECT_EQ(count_own("mr"), mr_count + 1) << "regMr reused the deferred MR";
  while (sq2 == nullptr) {
    ASSERT_LT(Clock::now(), t0 + std::chrono::seconds(10));
    Status s2 = isend(s, src.data() + 4096, 4096, 2, ms2, &sq2);
    ASSERT_TRUE(s2.is_ok() || s2.is_again()) << s2.message();
  }
  int rdone = 0, d1 = 0, d2 = 0;
  while (!rdone || !d1 || !d2) {
    ASSERT_LT(Clock::now(), t0 + std::chrono::seconds(20)) << "group not delivered";
    if (!rdone) {
      ASSERT_TRUE(test(rq, &rdone, nullptr).is_ok());
    }
    if (!d1) {
      ASSERT_TRUE(test(sq1, &d1, nullptr).is_ok());
    }
    if (!d2) {
      ASSERT_TRUE(test(sq2, &d2, nullptr).is_ok());
    }
  }
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), src.size()), 0);
  // The group is done: the comm's next deregMr frees the deferred MR with the new one.
  EXPECT_TRUE(dereg_mr(s, ms2).is_ok());
  EXPECT_EQ(count_own("mr"), mr_count - 1) << "the deferred MR outlived its send";
  EXPECT_TRUE(dereg_mr(r, mr).is_ok());
  EXPECT_TRUE(close_send(s).is_ok());
  EXPECT_TRUE(close_recv(r).is_ok());
  EXPECT_TRUE(close_listen(l).is_ok());
  expect_back_to(base, "after deregMr in use");
}

}  // namespace
