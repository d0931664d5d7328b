// No fd wall (issue 32), with the hard limit too low for the job: the named error on both sides,
// and no hang.
//  * Acceptor out of descriptors: its accept fails at once with a message naming its RLIMIT_NOFILE
//    (soft/hard), the descriptors Sluice holds and the fix (it used to retry forever), and the
//    connector, whose TCP connection the kernel completed in the listener's backlog, fails within
//    seconds with the acceptor's limit named (it used to wait SLUICE_CONNECT_TIMEOUT_MS and blame
//    NCCL_SOCKET_IFNAME).
//  * Connector out of descriptors: connect and listen fail with the limit named.
// Each side that runs out is its own process (fork before any verbs object), its limits lowered
// with setrlimit and its remaining descriptors filled; the other side keeps the bed's limits.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core_pair.h"
#include "rdma_env.h"
#include "sluice/core/api.h"
#include "sluice/core/wire/wire.h"

namespace {

using namespace sluice;
using Clock = std::chrono::steady_clock;

constexpr rlim_t kLimit = 256;  // soft = hard in the process that runs out

const char* g_side = "connector";

// Core's INFO and WARN lines on stderr, with the side that logged them.
void sink(int level, unsigned long, const char*, int, const char* fmt, ...) {
  if (level > kLogInfo) return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "%s[%s] sluice %s %s\n", level == kLogWarn ? rdmatest::warn_prefix() : "",
               g_side, level == kLogWarn ? "WARN" : "INFO", msg);
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Lowers RLIMIT_NOFILE to kLimit (soft and hard) and fills every descriptor left with /dev/null.
std::vector<int> exhaust_fds() {
  rlimit r{kLimit, kLimit};
  if (setrlimit(RLIMIT_NOFILE, &r) != 0) return {};
  std::vector<int> fds;
  for (;;) {
    const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) break;
    fds.push_back(fd);
  }
  return fds;
}

bool write_all(int fd, const void* p, size_t n) {
  const auto* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = write(fd, c, n);
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, void* p, size_t n) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = read(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// The acceptor's process: listen, hand the handle to the parent, run out of descriptors, accept
// until accept fails (bounded). Writes "OK <message>" or "FAIL <why>" to `out`; exit status 0/1.
[[noreturn]] void acceptor_child(int handle_fd, int out) {
  g_side = "acceptor";
  rdmatest::ExpectWarns expected;
  std::string result;
  auto finish = [&](bool ok, const std::string& text) {
    result = (ok ? "OK " : "FAIL ") + text;
    const uint32_t n = static_cast<uint32_t>(result.size());
    write_all(out, &n, sizeof n);
    write_all(out, result.data(), n);
    _exit(ok ? 0 : 1);
  };
  if (!engine_acquire(sink).is_ok()) finish(false, "engine_acquire");
  int a = -1, b = -1;
  if (!rdmatest::core_pair_devices(rdmatest::test_pair(), &a, &b)) {
    finish(false, "test pair not found");
  }
  char handle[kHandleSize];
  ListenComm* l = nullptr;
  Status st = listen(b, handle, &l);
  if (!st.is_ok()) finish(false, "listen: " + st.message());
  if (!write_all(handle_fd, handle, sizeof handle)) finish(false, "handle pipe");
  const std::vector<int> filled = exhaust_fds();
  if (filled.empty()) finish(false, "could not lower RLIMIT_NOFILE");
  const auto t0 = Clock::now();
  RecvComm* r = nullptr;
  while (st.is_ok()) {
    if (ms_since(t0) > 60000) finish(false, "accept neither failed nor completed in 60 s");
    st = accept(l, &r);
    if (r != nullptr) finish(false, "accepted a comm with no descriptor left");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (int fd : filled) close(fd);
  const bool closed = close_listen(l).is_ok();
  engine_release();
  finish(closed, st.message());
  _exit(1);  // not reached: finish exits
}

TEST(FdLimit, AcceptorOutOfDescriptorsFailsAtOnceAndTheConnectorIsToldItsLimit) {
  auto pair = rdmatest::test_pair();
  SLUICE_REQUIRE_PAIR(pair);
  int handle_pipe[2], out_pipe[2];
  ASSERT_EQ(pipe2(handle_pipe, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(out_pipe, O_CLOEXEC), 0);
  std::fflush(nullptr);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(handle_pipe[0]);
    close(out_pipe[0]);
    acceptor_child(handle_pipe[1], out_pipe[1]);
  }
  close(handle_pipe[1]);
  close(out_pipe[1]);
  struct Reap {
    pid_t pid;
    int status = -1;
    ~Reap() {
      if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
      }
    }
  } reap{child};

  char handle[kHandleSize];
  ASSERT_TRUE(read_all(handle_pipe[0], handle, sizeof handle)) << "the acceptor gave no handle";
  ASSERT_TRUE(engine_acquire(sink).is_ok());
  int a = -1, b = -1;
  ASSERT_TRUE(rdmatest::core_pair_devices(pair, &a, &b));
  rdmatest::ExpectWarns expected;
  SendComm* s = nullptr;
  Status st;
  const auto t0 = Clock::now();
  while (st.is_ok() && s == nullptr) {
    ASSERT_LT(ms_since(t0), 60000) << "connect neither failed nor completed in 60 s";
    st = connect(a, handle, CommConfig{}, &s);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const double connect_ms = ms_since(t0);
  EXPECT_EQ(s, nullptr) << "connected to a listener with no descriptor left";
  std::printf("connector failed after %.0f ms: %s\n", connect_ms, st.message().c_str());
  const std::string lim = "soft " + std::to_string(kLimit) + ", hard " + std::to_string(kLimit);
  EXPECT_LT(connect_ms, 30000) << "the connector waited for its timeout";
  EXPECT_EQ(st.code(), Code::kRemoteError);
  EXPECT_TRUE(has(st.message(), "refused the connection")) << st.message();
  EXPECT_TRUE(has(st.message(), "out of file descriptors")) << st.message();
  EXPECT_TRUE(has(st.message(), "RLIMIT_NOFILE is " + lim)) << st.message();
  EXPECT_TRUE(has(st.message(), "ulimit -n")) << st.message();
  EXPECT_FALSE(has(st.message(), "NCCL_SOCKET_IFNAME")) << st.message();

  uint32_t n = 0;
  ASSERT_TRUE(read_all(out_pipe[0], &n, sizeof n)) << "the acceptor reported nothing";
  std::string text(n, '\0');
  ASSERT_TRUE(read_all(out_pipe[0], text.data(), n));
  waitpid(child, &reap.status, 0);
  reap.pid = 0;
  std::printf("acceptor: %s\n", text.c_str());
  ASSERT_TRUE(WIFEXITED(reap.status));
  EXPECT_EQ(WEXITSTATUS(reap.status), 0) << text;
  EXPECT_TRUE(has(text, "OK accept on")) << text;
  EXPECT_TRUE(has(text, "accept4() failed")) << text;
  EXPECT_TRUE(has(text, "EMFILE")) << text;
  EXPECT_TRUE(has(text, "RLIMIT_NOFILE " + lim)) << text;
  EXPECT_TRUE(has(text, "Sluice's comms hold")) << text;
  EXPECT_TRUE(has(text, "1 listening sockets")) << text;
  EXPECT_TRUE(has(text, "ulimit -n")) << text;
  EXPECT_TRUE(has(text, "LimitNOFILE=")) << text;
  EXPECT_TRUE(has(text, "was told why")) << text;
  engine_release();
  close(handle_pipe[0]);
  close(out_pipe[0]);
}

// The connecting process out of descriptors: connect and listen fail with the limit named; a listen
// beside an open one shares its listening socket and needs no descriptor.
TEST(FdLimit, ConnectorOutOfDescriptorsNamesItsLimit) {
  auto pair = rdmatest::test_pair();
  SLUICE_REQUIRE_PAIR(pair);
  int out_pipe[2];
  ASSERT_EQ(pipe2(out_pipe, O_CLOEXEC), 0);
  std::fflush(nullptr);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(out_pipe[0]);
    std::string text;
    bool ok = engine_acquire(sink).is_ok();
    int a = -1, b = -1;
    ok = ok && rdmatest::core_pair_devices(pair, &a, &b);
    char handle[kHandleSize];
    ListenComm* l = nullptr;
    ok = ok && listen(b, handle, &l).is_ok();  // a listener to connect to, before running out
    const std::vector<int> filled = ok ? exhaust_fds() : std::vector<int>{};
    if (ok && !filled.empty()) {
      SendComm* s = nullptr;
      Status st;
      for (int k = 0; k < 1000 && st.is_ok() && s == nullptr; ++k) {
        st = connect(a, handle, CommConfig{}, &s);
      }
      // A second listen shares the first one's listening socket: it needs no descriptor, so it
      // works out of descriptors, on the same port.
      char h2[kHandleSize];
      ListenComm* l2 = nullptr;
      const Status shared = listen(b, h2, &l2);
      std::string same_port = "no";
      if (shared.is_ok()) {
        wire::Handle x, y;
        std::memcpy(&x, handle, sizeof x);
        std::memcpy(&y, h2, sizeof y);
        sockaddr_storage sx{}, sy{};
        socklen_t lx = 0, ly = 0;
        wire::handle_address(x, &sx, &lx);
        wire::handle_address(y, &sy, &ly);
        if (lx == ly && std::memcmp(&sx, &sy, lx) == 0) same_port = "yes";
      }
      // With every listen closed the socket is gone: the next listen needs a descriptor again.
      const bool closed = close_listen(l).is_ok() && (l2 == nullptr || close_listen(l2).is_ok());
      l = nullptr;
      const std::vector<int> refilled = exhaust_fds();  // the descriptors the closes gave back
      char h3[kHandleSize];
      ListenComm* l3 = nullptr;
      const Status ls = listen(b, h3, &l3);
      text = "connect: " + st.message() +
             "\nshared listen: " + (shared.is_ok() ? "ok" : shared.message()) + ", same port " +
             same_port + (closed ? "" : ", close_listen failed") + "\nlisten: " + ls.message();
      for (int fd : filled) close(fd);
      for (int fd : refilled) close(fd);
      if (l3 != nullptr && !close_listen(l3).is_ok()) text += "\nclose_listen failed";
    } else {
      text = "setup failed";
    }
    if (l != nullptr && !close_listen(l).is_ok()) text += "\nclose_listen failed";
    engine_release();
    const uint32_t n = static_cast<uint32_t>(text.size());
    write_all(out_pipe[1], &n, sizeof n);
    write_all(out_pipe[1], text.data(), n);
    _exit(0);
  }
  close(out_pipe[1]);
  uint32_t n = 0;
  const bool got = read_all(out_pipe[0], &n, sizeof n);
  std::string text(got ? n : 0, '\0');
  const bool got_text = got && read_all(out_pipe[0], text.data(), n);
  int status = -1;
  waitpid(child, &status, 0);
  close(out_pipe[0]);
  ASSERT_TRUE(got_text) << "the child reported nothing";
  std::printf("%s\n", text.c_str());
  const std::string lim =
      "RLIMIT_NOFILE soft " + std::to_string(kLimit) + ", hard " + std::to_string(kLimit);
  const std::string c = text.substr(0, text.find("\nshared listen: "));
  EXPECT_TRUE(has(text, "\nshared listen: ok, same port yes\n")) << text;
  const std::string li = text.substr(text.find("\nlisten: "));
  for (const std::string& m : {c, li}) {
    EXPECT_TRUE(has(m, "EMFILE")) << m;
    EXPECT_TRUE(has(m, lim)) << m;
    EXPECT_TRUE(has(m, "ulimit -n")) << m;
  }
  EXPECT_TRUE(has(c, "connect to")) << c;
  EXPECT_TRUE(has(c, "socket() failed")) << c;
  EXPECT_TRUE(has(li, "listen on")) << li;
}

}  // namespace
