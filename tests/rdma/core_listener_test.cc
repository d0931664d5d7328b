// The listener under stray connections, through core's API over real verbs: idle, drip-feeding,
// garbage, wrong-version and reset TCP connections to the listen address never delay a real peer
// and never fail accept; each is dropped with an INFO naming its address and why. 16 peers
// connecting at once all get comms; a foreign or corrupt handle fails connect cleanly, leaking
// nothing. Run with SLUICE_HANDSHAKE_TIMEOUT_MS set short (core.cmake).
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core_pair.h"
#include "rdma_env.h"
#include "sluice/core/api.h"
#include "sluice/core/base/config.h"
#include "sluice/core/base/net_addr.h"
#include "sluice/core/wire/wire.h"

namespace {

using sluice::rdmatest::count_own;

using namespace sluice;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// ---- Log capture: every line core logs, with the time it was logged.
struct LogLine {
  int level;
  Clock::time_point at;
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
    g_log.push_back({level, Clock::now(), msg});
  }
  if (level <= kLogInfo) {  // with the time since the process started, to read bounds off a log
    static const Clock::time_point start = Clock::now();
    std::fprintf(stderr, "%ssluice %s +%.3fs %s:%d %s\n",
                 level == kLogWarn ? rdmatest::warn_prefix() : "",
                 level == kLogWarn ? "WARN" : "INFO",
                 std::chrono::duration<double>(Clock::now() - start).count(), file, line, msg);
  }
}

// The first logged line containing every one of `parts`; null when none.
bool find_log(const std::vector<std::string>& parts, LogLine* out) {
  std::lock_guard<std::mutex> lk(g_log_mu);
  for (const LogLine& l : g_log) {
    bool all = true;
    for (const auto& p : parts) all = all && l.text.find(p) != std::string::npos;
    if (all) {
      if (out != nullptr) *out = l;
      return true;
    }
  }
  return false;
}

int warn_count() {
  std::lock_guard<std::mutex> lk(g_log_mu);
  int n = 0;
  for (const LogLine& l : g_log) n += l.level == kLogWarn;
  return n;
}

// The engine with the capture sink, and the test pair as core's device indices.
class CoreListener : public ::testing::Test {
 protected:
  void SetUp() override {
    {
      std::lock_guard<std::mutex> lk(g_log_mu);
      g_log.clear();
    }
    auto pair = rdmatest::test_pair();
    SLUICE_REQUIRE_PAIR(pair);
    Status st = engine_acquire(capture_sink);
    ASSERT_TRUE(st.is_ok()) << st.message();
    acquired_ = true;
    ASSERT_TRUE(rdmatest::core_pair_devices(pair, &dev_a_, &dev_b_));
    pair_ = pair;
    const char* t = std::getenv("SLUICE_HANDSHAKE_TIMEOUT_MS");
    handshake_ms_ = t != nullptr ? std::atoi(t) : Config{}.handshake_timeout_ms;
    std::printf("ports: %s, SLUICE_HANDSHAKE_TIMEOUT_MS=%d\n", pair.describe().c_str(),
                handshake_ms_);
  }
  void TearDown() override {
    if (acquired_) engine_release();
  }

  // A TCP connection to the listener of `handle`; its local address as core prints peers.
  static int stray(const char* handle, std::string* local) {
    sockaddr_storage sa;
    socklen_t len;
    rdmatest::handle_sockaddr(handle, &sa, &len);
    int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), len) != 0) {
      close(fd);
      return -1;
    }
    sockaddr_storage me{};
    socklen_t ml = sizeof me;
    getsockname(fd, reinterpret_cast<sockaddr*>(&me), &ml);
    *local = sockaddr_to_string(me);
    return fd;
  }

  bool acquired_ = false;
  rdmatest::TestPair pair_;
  int dev_a_ = 0, dev_b_ = 0;
  int handshake_ms_ = 0;
};

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

TEST_F(CoreListener, StraysNeverDelayARealPeer) {
  ASSERT_GE(handshake_ms_, 500) << "set SLUICE_HANDSHAKE_TIMEOUT_MS to a second or two";
  char handle[kHandleSize];
  ListenComm* l = nullptr;
  ASSERT_TRUE(listen(dev_b_, handle, &l).is_ok());
  RecvComm* none = nullptr;

  // A first connection without strays: the process's first QP bring-up is slow in an emulated bed
  // (seconds under TCG), and the bound below is about the strays, not about that warm-up.
  {
    SendComm* ws = nullptr;
    RecvComm* wr = nullptr;
    const auto w0 = Clock::now();
    while (ws == nullptr || wr == nullptr) {
      ASSERT_LT(Clock::now(), w0 + std::chrono::seconds(60)) << "warm-up peer not connected";
      if (ws == nullptr) {
        ASSERT_TRUE(connect(dev_a_, handle, CommConfig{}, &ws).is_ok());
      }
      if (wr == nullptr) {
        ASSERT_TRUE(accept(l, &wr).is_ok());
      }
    }
    std::printf("warm-up peer (no strays) accepted in %.0f ms\n", ms_between(w0, Clock::now()));
    EXPECT_TRUE(close_send(ws).is_ok());
    EXPECT_TRUE(close_recv(wr).is_ok());
  }

  // (a) idle, (b) drip-feeding valid magic one byte per 200 ms, (c) garbage, (d) the right magic
  // with a wrong version, (e) connect then reset.
  std::string a_addr, b_addr, c_addr, d_addr, e_addr;
  int a = stray(handle, &a_addr);
  int b = stray(handle, &b_addr);
  int c = stray(handle, &c_addr);
  int d = stray(handle, &d_addr);
  int e = stray(handle, &e_addr);
  ASSERT_TRUE(a >= 0 && b >= 0 && c >= 0 && d >= 0 && e >= 0) << "cannot reach the listener";
  const auto strays_at = Clock::now();
  std::atomic<bool> stop{false};
  std::thread drip([&] {
    wire::Meta m{};
    m.magic = wire::kMetaMagic;
    m.version = wire::kVersion;
    const auto* p = reinterpret_cast<const uint8_t*>(&m);
    for (size_t i = 0; i < sizeof m && !stop.load(); ++i) {
      if (::send(b, p + i, 1, MSG_NOSIGNAL) != 1) return;  // dropped
      std::this_thread::sleep_for(milliseconds(200));
    }
  });
  struct Joiner {  // joins the dripping thread on every exit, a failed assertion's too
    std::atomic<bool>& stop;
    std::thread& t;
    ~Joiner() {
      stop.store(true);
      if (t.joinable()) t.join();
    }
  } joiner{stop, drip};
  const char http[] = "GET / HTTP/1.1\r\nHost: sluice\r\n\r\n";
  ASSERT_EQ(::send(c, http, sizeof http - 1, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof http - 1));
  wire::Meta v{};
  v.magic = wire::kMetaMagic;
  v.version = wire::kVersion + 1;
  ASSERT_EQ(::send(d, &v, sizeof v, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof v));
  linger lg{1, 0};
  setsockopt(e, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  close(e);  // RST

  // The listener takes the strays in before the real peer arrives.
  while (Clock::now() < strays_at + milliseconds(100)) {
    Status st = accept(l, &none);
    ASSERT_TRUE(st.is_ok()) << st.message();
    ASSERT_EQ(none, nullptr) << "a stray became a comm";
  }

  // The real peer, while the idle and the dripping strays are still held.
  SendComm* s = nullptr;
  RecvComm* r = nullptr;
  const auto t0 = Clock::now();
  Clock::time_point accepted_at;
  while (s == nullptr || r == nullptr) {
    ASSERT_LT(Clock::now(), t0 + std::chrono::seconds(60)) << "real peer not connected";
    if (s == nullptr) {
      Status st = connect(dev_a_, handle, CommConfig{}, &s);
      ASSERT_TRUE(st.is_ok()) << st.message();
    }
    if (r == nullptr) {
      Status st = accept(l, &r);
      ASSERT_TRUE(st.is_ok()) << "accept failed: " << st.message();
      if (r != nullptr) accepted_at = Clock::now();
    }
  }
  const double real_ms = ms_between(t0, accepted_at);
  const double strays_deadline_ms = ms_between(t0, strays_at + milliseconds(handshake_ms_));
  std::printf(
      "real peer accepted %.0f ms after it started connecting; the strays' deadline was "
      "%.0f ms after that start\n",
      real_ms, strays_deadline_ms);
  // Not blocked until the strays' deadline: the comm came while the idle stray was still pending.
  EXPECT_FALSE(find_log({"dropping connection from " + a_addr}, nullptr))
      << "the idle stray was dropped before the real peer's comm came";
  EXPECT_LT(real_ms, strays_deadline_ms) << "the real peer waited for the strays' deadline";

  // Data flows on the new comm.
  ASSERT_NO_FATAL_FAILURE(rdmatest::check_one_message(s, r, 3));

  // Every stray goes by its deadline plus slack; accept never fails and yields no comm.
  const auto limit = strays_at + milliseconds(handshake_ms_ + 3000);
  auto dropped = [&](const std::string& addr) {
    return find_log({"dropping connection from " + addr}, nullptr);
  };
  while (!(dropped(a_addr) && dropped(b_addr) && dropped(c_addr) && dropped(d_addr))) {
    ASSERT_LT(Clock::now(), limit) << "a stray was not dropped by its deadline plus 3 s";
    Status st = accept(l, &none);
    ASSERT_TRUE(st.is_ok()) << st.message();
    ASSERT_EQ(none, nullptr);
    std::this_thread::sleep_for(milliseconds(10));
  }
  stop.store(true);
  if (drip.joinable()) drip.join();

  LogLine la, lb, lc, ld, le;
  ASSERT_TRUE(find_log(
      {"dropping connection from " + a_addr, "received 0 of " + std::to_string(sizeof(wire::Meta)),
       "SLUICE_HANDSHAKE_TIMEOUT_MS"},
      &la));
  ASSERT_TRUE(find_log({"dropping connection from " + b_addr, "SLUICE_HANDSHAKE_TIMEOUT_MS"}, &lb));
  ASSERT_TRUE(find_log({"dropping connection from " + c_addr, "bad magic", "byte 0"}, &lc));
  ASSERT_TRUE(find_log(
      {"dropping connection from " + d_addr, "wire version " + std::to_string(wire::kVersion + 1)},
      &ld));
  EXPECT_EQ(lb.text.find("received 0 of"), std::string::npos)
      << "the drip stray sent bytes: " << lb.text;
  for (const LogLine* x : {&la, &lb, &lc, &ld}) {
    EXPECT_EQ(x->level, kLogInfo) << "a stray is not an error: " << x->text;
    std::printf("dropped after %.0f ms: %s\n", ms_between(strays_at, x->at), x->text.c_str());
  }
  // Silent and slow ones at their deadline; malformed ones at once (well before the deadline).
  EXPECT_GE(ms_between(strays_at, la.at), handshake_ms_ - 50);
  EXPECT_GE(ms_between(strays_at, lb.at), handshake_ms_ - 50);
  EXPECT_LT(ms_between(strays_at, lc.at), handshake_ms_);
  EXPECT_LT(ms_between(strays_at, ld.at), handshake_ms_);
  // The reset one: dropped with its reset, or refused by the kernel before accept took it.
  bool e_seen = find_log({"dropping connection from " + e_addr}, &le) ||
                find_log({"a connection failed before it was accepted"}, &le);
  EXPECT_TRUE(e_seen) << "no log line for the reset stray " << e_addr;
  if (e_seen) {
    EXPECT_EQ(le.level, kLogInfo) << le.text;
    std::printf("reset stray: %s\n", le.text.c_str());
  }
  EXPECT_EQ(warn_count(), 0) << "strays must not WARN";

  EXPECT_TRUE(close_send(s).is_ok());
  EXPECT_TRUE(close_recv(r).is_ok());
  EXPECT_TRUE(close_listen(l).is_ok());
  for (int fd : {a, b, c, d}) close(fd);
}

// Sixteen real peers at once, with the handshake bound at its default rather than the 1 s the
// stray tests set (core.cmake): one test thread drives all 16 connects and the listener in turn,
// each connect step checking a route (tens of ms under the sanitizers), so a handshake there can
// take longer than 1 s between its steps; a sanitized CI run once dropped 6 of them at 1 s. What
// this test holds is that no real peer is dropped and every comm carries its message.
class CoreListenerMany : public CoreListener {
 protected:
  void SetUp() override {
    const char* t = std::getenv("SLUICE_HANDSHAKE_TIMEOUT_MS");
    if (t != nullptr) saved_ = t;
    unsetenv("SLUICE_HANDSHAKE_TIMEOUT_MS");  // read by the engine CoreListener::SetUp creates
    CoreListener::SetUp();
  }
  void TearDown() override {
    CoreListener::TearDown();
    if (!saved_.empty()) setenv("SLUICE_HANDSHAKE_TIMEOUT_MS", saved_.c_str(), 1);
  }
  std::string saved_;
};

TEST_F(CoreListenerMany, SixteenPeersConnectAtOnce) {
  constexpr int kPeers = 16;
  char handle[kHandleSize];
  ListenComm* l = nullptr;
  ASSERT_TRUE(listen(dev_b_, handle, &l).is_ok());
  // One copy of the handle per connector (connect keeps its state in the handle memory).
  std::vector<std::vector<char>> handles(kPeers, std::vector<char>(handle, handle + kHandleSize));
  std::vector<SendComm*> sends(kPeers, nullptr);
  std::vector<RecvComm*> recvs;
  const auto t0 = Clock::now();
  int connected = 0;
  while (connected < kPeers || static_cast<int>(recvs.size()) < kPeers) {
    ASSERT_LT(Clock::now(), t0 + std::chrono::seconds(120))
        << connected << " connected, " << recvs.size() << " accepted";
    for (int i = 0; i < kPeers; ++i) {
      if (sends[i] != nullptr) continue;
      Status st = connect(dev_a_, handles[i].data(), CommConfig{}, &sends[i]);
      ASSERT_TRUE(st.is_ok()) << "peer " << i << ": " << st.message();
      connected += sends[i] != nullptr;
    }
    RecvComm* r = nullptr;
    Status st = accept(l, &r);
    ASSERT_TRUE(st.is_ok()) << st.message();
    if (r != nullptr) recvs.push_back(r);
  }
  std::printf("%d peers connected and accepted in %.0f ms\n", kPeers, ms_between(t0, Clock::now()));
  EXPECT_EQ(warn_count(), 0);
  EXPECT_FALSE(find_log({"dropping connection"}, nullptr)) << "a real peer was dropped";

  // Every comm carries data: one message per connection, each receive gets one distinct payload.
  std::vector<std::vector<uint8_t>> src(kPeers, std::vector<uint8_t>(64)),
      dst(kPeers, std::vector<uint8_t>(64, 0));
  std::vector<MemHandle*> ms(kPeers), mr(kPeers);
  std::vector<Request*> sq(kPeers, nullptr), rq(kPeers, nullptr);
  for (int i = 0; i < kPeers; ++i) {
    std::memset(src[i].data(), 0x10 + i, 64);
    ASSERT_TRUE(reg_mr(sends[i], src[i].data(), 64, MemType::kHost, &ms[i]).is_ok());
    ASSERT_TRUE(reg_mr(recvs[i], dst[i].data(), 64, MemType::kHost, &mr[i]).is_ok());
    void* d = dst[i].data();
    size_t cap = 64;
    int tag = 1;
    ASSERT_TRUE(irecv(recvs[i], 1, &d, &cap, &tag, &mr[i], &rq[i]).is_ok());
  }
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  std::vector<int> sdone(kPeers, 0), rdone(kPeers, 0);
  for (bool all = false; !all;) {
    ASSERT_LT(Clock::now(), deadline) << "messages not delivered";
    all = true;
    for (int i = 0; i < kPeers; ++i) {
      if (sq[i] == nullptr) {
        Status st = isend(sends[i], src[i].data(), 64, 1, ms[i], &sq[i]);
        ASSERT_TRUE(st.is_ok() || st.is_again()) << st.message();
      }
      if (sq[i] != nullptr && !sdone[i]) {
        ASSERT_TRUE(test(sq[i], &sdone[i], nullptr).is_ok());
      }
      if (!rdone[i]) {
        ASSERT_TRUE(test(rq[i], &rdone[i], nullptr).is_ok());
      }
      all = all && sdone[i] && rdone[i];
    }
  }
  std::set<int> seen;
  for (int i = 0; i < kPeers; ++i) {
    const int v = dst[i][0];
    EXPECT_GE(v, 0x10);
    EXPECT_LT(v, 0x10 + kPeers);
    for (uint8_t x : dst[i]) EXPECT_EQ(x, v);
    seen.insert(v);
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kPeers)) << "each connection its own payload";
  for (int i = 0; i < kPeers; ++i) {
    EXPECT_TRUE(dereg_mr(sends[i], ms[i]).is_ok());
    EXPECT_TRUE(dereg_mr(recvs[i], mr[i]).is_ok());
    EXPECT_TRUE(close_send(sends[i]).is_ok());
    EXPECT_TRUE(close_recv(recvs[i]).is_ok());
  }
  EXPECT_TRUE(close_listen(l).is_ok());
}

using rdmatest::open_fd_count;

// Every listen of the process shares one listening socket (issue 32): the listens after the first
// take no port and no descriptor; each connection reaches the listen whose handle its connector was
// given, whichever listen's accept took it from the backlog; a connector holding the handle of a
// closed listen is dropped as a nonce mismatch while the others carry on; the socket goes with the
// last listen.
TEST_F(CoreListener, ListensShareOneSocketAndEachGetsItsOwnConnector) {
  constexpr int kListens = 8;
  const int fds0 = open_fd_count();
  std::vector<std::vector<char>> handles(kListens, std::vector<char>(kHandleSize));
  std::vector<ListenComm*> ls(kListens, nullptr);
  int fds_after_first = 0;
  for (int i = 0; i < kListens; ++i) {
    ASSERT_TRUE(listen(dev_b_, handles[i].data(), &ls[i]).is_ok());
    if (i == 0) fds_after_first = open_fd_count();
  }
  EXPECT_EQ(open_fd_count(), fds_after_first) << "a listen beside another took a descriptor";
  EXPECT_GE(fds_after_first - fds0, 1);
  std::string addr0;
  for (int i = 0; i < kListens; ++i) {
    sockaddr_storage sa;
    socklen_t len;
    rdmatest::handle_sockaddr(handles[i].data(), &sa, &len);
    const std::string a = sockaddr_to_string(sa);
    if (i == 0) addr0 = a;
    EXPECT_EQ(a, addr0) << "listen " << i << " has its own port";
  }
  // The last listen is closed first: its connector must be refused, the others not disturbed.
  std::vector<char> closed_handle = handles[kListens - 1];
  ASSERT_TRUE(close_listen(ls[kListens - 1]).is_ok());
  ls[kListens - 1] = nullptr;
  constexpr int kLive = kListens - 1;

  rdmatest::ExpectWarns expected;
  std::vector<SendComm*> sends(kLive, nullptr);
  std::vector<RecvComm*> recvs(kLive, nullptr);
  SendComm* orphan = nullptr;
  Status orphan_st;
  const auto t0 = Clock::now();
  for (bool done = false; !done;) {
    ASSERT_LT(Clock::now(), t0 + std::chrono::seconds(60));
    done = true;
    for (int i = 0; i < kLive; ++i) {
      if (sends[i] != nullptr) continue;
      Status st = connect(dev_a_, handles[i].data(), CommConfig{}, &sends[i]);
      ASSERT_TRUE(st.is_ok()) << "connect " << i << ": " << st.message();
      done = false;
    }
    if (orphan_st.is_ok()) {
      orphan_st = connect(dev_a_, closed_handle.data(), CommConfig{}, &orphan);
      ASSERT_EQ(orphan, nullptr) << "connected to a closed listen";
      done = false;
    }
    // Accepts in reverse order, and listen 0's only once every other listen has its comm: the
    // earlier accepts took listen 0's connection from the shared backlog for it.
    for (int i = kLive - 1; i >= 0; --i) {
      if (recvs[i] != nullptr) continue;
      done = false;
      bool others = true;
      for (int k = 1; k < kLive; ++k) others = others && recvs[k] != nullptr;
      if (i == 0 && !others) continue;
      Status st = accept(ls[i], &recvs[i]);
      ASSERT_TRUE(st.is_ok()) << "accept " << i << ": " << st.message();
      if (recvs[i] != nullptr) {
        ASSERT_TRUE(close_listen(ls[i]).is_ok());  // as NCCL does, right after its accept
        ls[i] = nullptr;
      }
    }
  }
  std::printf(
      "%d listens on %s, connected and accepted in %.0f ms; the closed listen's connector: "
      "%s\n",
      kLive, addr0.c_str(), ms_between(t0, Clock::now()), orphan_st.message().c_str());
  EXPECT_EQ(orphan_st.code(), Code::kRemoteError) << orphan_st.message();
  EXPECT_TRUE(find_log({"dropping connection from", "nonce mismatch"}, nullptr))
      << "the listener did not say why it dropped the closed listen's connector";
  EXPECT_FALSE(find_log({"dropping the connection from"}, nullptr)) << "a real peer was dropped";
  for (int i = 0; i < kLive; ++i) {
    // A misrouted pair carries nothing.
    rdmatest::check_one_message(sends[i], recvs[i], static_cast<unsigned>(i));
    EXPECT_TRUE(close_send(sends[i]).is_ok());
    EXPECT_TRUE(close_recv(recvs[i]).is_ok());
  }
  EXPECT_EQ(open_fd_count(), fds0) << "the shared socket outlived its last listen";
}

TEST_F(CoreListener, ForeignAndCorruptHandlesFailConnectCleanly) {
  char handle[kHandleSize];
  ListenComm* l = nullptr;
  ASSERT_TRUE(listen(dev_b_, handle, &l).is_ok());
  const long qp0 = count_own("qp"), cq0 = count_own("cq"), mr0 = count_own("mr");
  rdmatest::ExpectWarns expected;

  // Foreign: a well-formed handle of this address whose nonce is another listener's.
  char foreign[kHandleSize];
  std::memcpy(foreign, handle, kHandleSize);
  wire::Handle h;
  std::memcpy(&h, foreign, sizeof h);
  h.nonce.bytes[5] ^= 0x12;  // one byte of the 16
  h.checksum = wire::handle_checksum(h);
  std::memcpy(foreign, &h, sizeof h);
  SendComm* s = nullptr;
  Status st;
  const auto t0 = Clock::now();
  while (st.is_ok()) {
    ASSERT_LT(Clock::now(), t0 + milliseconds(handshake_ms_ + 30000)) << "foreign handle hangs";
    st = connect(dev_a_, foreign, CommConfig{}, &s);
    ASSERT_EQ(s, nullptr) << "connected with a foreign handle";
    RecvComm* r = nullptr;
    Status a = accept(l, &r);
    ASSERT_TRUE(a.is_ok()) << "a foreign connector failed accept: " << a.message();
    ASSERT_EQ(r, nullptr);
  }
  std::printf("foreign handle: connect failed after %.0f ms: %s\n", ms_between(t0, Clock::now()),
              st.message().c_str());
  EXPECT_EQ(st.code(), Code::kRemoteError) << st.message();
  EXPECT_NE(st.message().find("closed the connection"), std::string::npos) << st.message();
  EXPECT_TRUE(find_log({"dropping connection from", "nonce mismatch"}, nullptr))
      << "the listener did not say why it dropped the foreign connector";

  // Corrupt: every byte flipped; and a zero handle.
  for (int k = 0; k < 2; ++k) {
    char bad[kHandleSize];
    for (size_t i = 0; i < sizeof bad; ++i)
      bad[i] = k == 0 ? static_cast<char>(handle[i] ^ 0x5a) : 0;
    st = connect(dev_a_, bad, CommConfig{}, &s);
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.message();
    EXPECT_NE(st.message().find("handle"), std::string::npos) << st.message();
    EXPECT_EQ(s, nullptr);
  }

  // The listener still serves a real peer, and the failed connector left nothing behind.
  SendComm* rs = nullptr;
  RecvComm* rr = nullptr;
  const auto t1 = Clock::now();
  while (rs == nullptr || rr == nullptr) {
    ASSERT_LT(Clock::now(), t1 + std::chrono::seconds(60));
    if (rs == nullptr) {
      ASSERT_TRUE(connect(dev_a_, handle, CommConfig{}, &rs).is_ok());
    }
    if (rr == nullptr) {
      ASSERT_TRUE(accept(l, &rr).is_ok());
    }
  }
  ASSERT_NO_FATAL_FAILURE(rdmatest::check_one_message(rs, rr, 5));
  EXPECT_TRUE(close_send(rs).is_ok());
  EXPECT_TRUE(close_recv(rr).is_ok());
  if (qp0 < 0) {
    std::printf("`rdma resource show` unavailable: leak not checked\n");
  } else {
    EXPECT_EQ(count_own("qp"), qp0) << "QPs leaked";
    EXPECT_EQ(count_own("cq"), cq0) << "CQs leaked";
    EXPECT_EQ(count_own("mr"), mr0) << "MRs leaked";
  }
  EXPECT_TRUE(close_listen(l).is_ok());
}

// A connector that passes the metadata check and then fails (a bad ready byte, or QPs that cannot
// be brought up against its made-up metadata): only that connection is dropped, with a WARN naming
// the peer, the device and the QP; its comm's verbs objects are released, and accept goes on.
TEST_F(CoreListener, FailureAfterTheMetadataDropsOnlyThatConnection) {
  char handle[kHandleSize];
  ListenComm* l = nullptr;
  ASSERT_TRUE(listen(dev_b_, handle, &l).is_ok());
  DeviceProperties props;
  ASSERT_TRUE(device_properties(dev_b_, &props).is_ok());
  const long qp0 = count_own("qp"), cq0 = count_own("cq"), mr0 = count_own("mr");
  wire::Handle h;
  std::memcpy(&h, handle, sizeof h);
  wire::Meta m{};
  m.magic = wire::kMetaMagic;
  m.version = wire::kVersion;
  m.role = 0;
  m.link_layer = pair_.a().attr.link_layer;
  m.port = 1;
  m.mtu = 3;  // IBV_MTU_1024
  m.nqps = 1;
  m.fifo_slots = wire::kFifoSlots;
  m.nonce = h.nonce;
  m.qps[0] = {0x4242, 7};
  std::snprintf(m.dev_name, sizeof m.dev_name, "made-up0");
  std::string addr;
  int fd = stray(handle, &addr);
  ASSERT_GE(fd, 0);
  // A reachable GID: this socket's own address (IPv4 as an IPv4-mapped GID).
  sockaddr_storage me{};
  socklen_t ml = sizeof me;
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&me), &ml), 0);
  if (me.ss_family == AF_INET6) {
    std::memcpy(m.gid, &reinterpret_cast<sockaddr_in6*>(&me)->sin6_addr, 16);
  } else {
    m.gid[10] = m.gid[11] = 0xff;
    std::memcpy(m.gid + 12, &reinterpret_cast<sockaddr_in*>(&me)->sin_addr, 4);
  }
  ASSERT_EQ(::send(fd, &m, sizeof m, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof m));
  rdmatest::ExpectWarns expected;
  // Accept until the listener answers with its metadata (or drops us); then a bad ready byte.
  wire::Meta reply{};
  size_t got = 0;
  bool closed = false;
  const auto t0 = Clock::now();
  while (got < sizeof reply && !closed) {
    ASSERT_LT(Clock::now(), t0 + std::chrono::seconds(30)) << "no answer from the listener";
    RecvComm* r = nullptr;
    Status st = accept(l, &r);
    ASSERT_TRUE(st.is_ok()) << "accept failed: " << st.message();
    ASSERT_EQ(r, nullptr);
    ssize_t n = ::recv(fd, reinterpret_cast<char*>(&reply) + got, sizeof reply - got, MSG_DONTWAIT);
    if (n > 0) got += static_cast<size_t>(n);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) closed = true;
  }
  if (!closed) {
    EXPECT_TRUE(wire::validate_meta(reply, 1, h.nonce).is_ok()) << "the listener's answer";
    const uint8_t bad = 0x00;
    ASSERT_EQ(::send(fd, &bad, 1, MSG_NOSIGNAL), 1);
  }
  LogLine w;
  while (!find_log({"dropping the connection from " + addr}, &w)) {
    ASSERT_LT(Clock::now(), t0 + std::chrono::seconds(30))
        << "the failed connection was not dropped";
    RecvComm* r = nullptr;
    Status st = accept(l, &r);
    ASSERT_TRUE(st.is_ok()) << "accept failed: " << st.message();
    ASSERT_EQ(r, nullptr);
    std::this_thread::sleep_for(milliseconds(5));
  }
  std::printf("%s: %s\n", closed ? "QP bring-up failed" : "bad ready byte", w.text.c_str());
  EXPECT_EQ(w.level, kLogWarn);
  EXPECT_NE(w.text.find("after the metadata exchange"), std::string::npos) << w.text;
  EXPECT_NE(w.text.find(props.name), std::string::npos) << "names the device: " << w.text;
  EXPECT_NE(w.text.find("made-up0"), std::string::npos) << "names the peer device: " << w.text;
  if (!closed) {
    EXPECT_NE(w.text.find("bad ready byte"), std::string::npos) << w.text;
    EXPECT_NE(w.text.find("qpn " + std::to_string(reply.qps[0].qpn)), std::string::npos)
        << "names our QP: " << w.text;
    EXPECT_NE(w.text.find("qpn " + std::to_string(0x4242)), std::string::npos)
        << "names the peer's QP: " << w.text;
  }
  close(fd);
  if (qp0 >= 0) {
    EXPECT_EQ(count_own("qp"), qp0) << "the dropped comm's QPs were not released";
    EXPECT_EQ(count_own("cq"), cq0);
    EXPECT_EQ(count_own("mr"), mr0);
  }
  // The listener still serves a real peer.
  SendComm* s = nullptr;
  RecvComm* r = nullptr;
  const auto t1 = Clock::now();
  while (s == nullptr || r == nullptr) {
    ASSERT_LT(Clock::now(), t1 + std::chrono::seconds(60));
    if (s == nullptr) {
      ASSERT_TRUE(connect(dev_a_, handle, CommConfig{}, &s).is_ok());
    }
    if (r == nullptr) {
      ASSERT_TRUE(accept(l, &r).is_ok());
    }
  }
  ASSERT_NO_FATAL_FAILURE(rdmatest::check_one_message(s, r, 7));
  EXPECT_TRUE(close_send(s).is_ok());
  EXPECT_TRUE(close_recv(r).is_ok());
  EXPECT_TRUE(close_listen(l).is_ok());
}

// More idle strays than the listener runs handshakes at once: the oldest unidentified one makes
// room, so a real peer still gets in well before the strays' deadline.
TEST_F(CoreListener, MoreStraysThanHandshakeSlotsDoNotLockOutARealPeer) {
  constexpr int kStrays = 70;  // > ListenComm::kMaxPending (64)
  char handle[kHandleSize];
  ListenComm* l = nullptr;
  ASSERT_TRUE(listen(dev_b_, handle, &l).is_ok());
  // Warm-up connection (the process's first QP bring-up is slow in the emulated bed).
  {
    SendComm* ws = nullptr;
    RecvComm* wr = nullptr;
    const auto w0 = Clock::now();
    while (ws == nullptr || wr == nullptr) {
      ASSERT_LT(Clock::now(), w0 + std::chrono::seconds(60)) << "warm-up peer not connected";
      if (ws == nullptr) {
        ASSERT_TRUE(connect(dev_a_, handle, CommConfig{}, &ws).is_ok());
      }
      if (wr == nullptr) {
        ASSERT_TRUE(accept(l, &wr).is_ok());
      }
    }
    EXPECT_TRUE(close_send(ws).is_ok());
    EXPECT_TRUE(close_recv(wr).is_ok());
  }
  std::vector<int> fds;
  std::vector<std::string> addrs(kStrays);
  for (int i = 0; i < kStrays; ++i) {
    int fd = stray(handle, &addrs[i]);
    ASSERT_GE(fd, 0) << "stray " << i;
    fds.push_back(fd);
  }
  const auto strays_at = Clock::now();
  RecvComm* none = nullptr;
  while (Clock::now() < strays_at + milliseconds(100)) {
    ASSERT_TRUE(accept(l, &none).is_ok());
    ASSERT_EQ(none, nullptr);
  }
  SendComm* s = nullptr;
  RecvComm* r = nullptr;
  const auto t0 = Clock::now();
  while (s == nullptr || r == nullptr) {
    ASSERT_LT(Clock::now(), t0 + std::chrono::seconds(60)) << "real peer not connected";
    if (s == nullptr) {
      ASSERT_TRUE(connect(dev_a_, handle, CommConfig{}, &s).is_ok());
    }
    if (r == nullptr) {
      Status st = accept(l, &r);
      ASSERT_TRUE(st.is_ok()) << st.message();
    }
  }
  const double real_ms = ms_between(t0, Clock::now());
  const double deadline_ms = ms_between(t0, strays_at + milliseconds(handshake_ms_));
  std::printf("real peer behind %d idle strays accepted in %.0f ms (strays' deadline %.0f ms)\n",
              kStrays, real_ms, deadline_ms);
  EXPECT_LT(real_ms, deadline_ms) << "the real peer waited for the strays' deadline";
  LogLine first;
  ASSERT_TRUE(
      find_log({"dropping connection from " + addrs[0], "handshakes in progress at once"}, &first))
      << "the oldest stray did not make room";
  EXPECT_EQ(first.level, kLogInfo);
  EXPECT_EQ(warn_count(), 0);
  ASSERT_NO_FATAL_FAILURE(rdmatest::check_one_message(s, r, 11));
  EXPECT_TRUE(close_send(s).is_ok());
  EXPECT_TRUE(close_recv(r).is_ok());
  EXPECT_TRUE(close_listen(l).is_ok());  // with strays still pending: their sockets are closed
  for (int fd : fds) close(fd);
}

}  // namespace
