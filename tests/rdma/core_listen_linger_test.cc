// The shared listening socket outlives its last listen while comms are open (issue 32): NCCL's
// rounds (listen, connect/accept, closeListen) then keep one port for the job instead of taking a
// fresh ephemeral port each round. A connector holding a closed listen's handle is refused; the
// socket goes when the last comm closes, or at a finalize that retires the comms left open.
// Label rdma.
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core_pair.h"
#include "rdma_env.h"
#include "sluice/core/api.h"
#include "sluice/core/wire/wire.h"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kHandleSize = 128;  // NCCL_NET_HANDLE_MAXSIZE

using rdmatest::open_fd_count;

// What each descriptor is, for a failure's message ("3:socket:[123] 4:anon_inode:[eventpoll] ...").
std::string fd_list() {
  std::string out;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      char target[256] = {};
      const std::string path = std::string("/proc/self/fd/") + e->d_name;
      if (readlink(path.c_str(), target, sizeof target - 1) < 0) continue;
      out += std::string(" ") + e->d_name + ":" + target;
    }
    closedir(d);
  }
  return out;
}

// The port in a listen handle.
int handle_port(const std::vector<char>& handle) {
  sockaddr_storage sa;
  socklen_t len;
  rdmatest::handle_sockaddr(handle.data(), &sa, &len);
  return sa.ss_family == AF_INET ? ntohs(reinterpret_cast<const sockaddr_in&>(sa).sin_port)
                                 : ntohs(reinterpret_cast<const sockaddr_in6&>(sa).sin6_port);
}

// Whether a plain TCP connect to the listener of `handle` is taken (true) or refused (false).
bool port_takes_connections(const std::vector<char>& handle) {
  sockaddr_storage sa;
  socklen_t len;
  rdmatest::handle_sockaddr(handle.data(), &sa, &len);
  const int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), len) == 0;
  close(fd);
  return ok;
}

class CoreListenLinger : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pair = rdmatest::test_pair();
    SLUICE_REQUIRE_PAIR(pair);
    Status st = engine_acquire(nullptr);
    ASSERT_TRUE(st.is_ok()) << st.message();
    acquired_ = true;
    ASSERT_TRUE(rdmatest::core_pair_devices(pair, &dev_a_, &dev_b_));
  }
  void TearDown() override {
    if (acquired_) engine_release();
  }

  // NCCL's round: listen on b, connect from a and accept together, closeListen after the accept.
  void round(std::vector<char>* handle, SendComm** s, RecvComm** r) {
    handle->assign(kHandleSize, 0);
    ListenComm* l = nullptr;
    ASSERT_TRUE(listen(dev_b_, handle->data(), &l).is_ok());
    const auto t0 = Clock::now();
    while (*s == nullptr || *r == nullptr) {
      ASSERT_LT(Clock::now(), t0 + std::chrono::seconds(60)) << "a round did not connect";
      if (*s == nullptr) {
        Status st = connect(dev_a_, handle->data(), CommConfig{}, s);
        ASSERT_TRUE(st.is_ok()) << st.message();
      }
      if (*r == nullptr) {
        Status st = accept(l, r);
        ASSERT_TRUE(st.is_ok()) << st.message();
      }
    }
    ASSERT_TRUE(close_listen(l).is_ok());
  }

  bool acquired_ = false;
  int dev_a_ = 0, dev_b_ = 0;
};

TEST_F(CoreListenLinger, RoundsKeepOnePortWhileCommsAreOpenAndItGoesWithTheLast) {
  constexpr int kRounds = 4;
  // A round first, its comms closed: librdmacm opens a device context on its first route lookup
  // and keeps it for the process's life (not ours to count).
  {
    std::vector<char> h;
    SendComm* s = nullptr;
    RecvComm* r = nullptr;
    ASSERT_NO_FATAL_FAILURE(round(&h, &s, &r));
    ASSERT_TRUE(close_send(s).is_ok());
    ASSERT_TRUE(close_recv(r).is_ok());
  }
  const int fds0 = open_fd_count();
  const std::string fds_before = fd_list();
  std::vector<std::vector<char>> handles(kRounds);
  std::vector<SendComm*> sends(kRounds, nullptr);
  std::vector<RecvComm*> recvs(kRounds, nullptr);
  std::vector<int> fds_after(kRounds, 0);
  for (int i = 0; i < kRounds; ++i) {
    ASSERT_NO_FATAL_FAILURE(round(&handles[i], &sends[i], &recvs[i]));
    fds_after[i] = open_fd_count();
  }
  for (int i = 1; i < kRounds; ++i) {
    EXPECT_EQ(handle_port(handles[i]), handle_port(handles[0]))
        << "round " << i << " listened on a new port after round 0's listen closed";
    // Each round's comms add their own descriptors (or none, on a peer link); the listening
    // socket is not among what a later round adds: the rounds add the same.
    EXPECT_EQ(fds_after[i] - fds_after[i - 1], fds_after[1] - fds_after[0]) << "round " << i;
  }
  std::printf("%d rounds on port %d; descriptors: %d before, %d after the rounds\n", kRounds,
              handle_port(handles[0]), fds0, fds_after[kRounds - 1]);

  // A connector with a closed listen's handle, no listen open: refused, not left to its bound.
  {
    SendComm* orphan = nullptr;
    Status st;
    const auto t0 = Clock::now();
    while (st.is_ok()) {
      ASSERT_LT(Clock::now(), t0 + std::chrono::seconds(20)) << "a closed listen's connector hangs";
      st = connect(dev_a_, handles[1].data(), CommConfig{}, &orphan);
      ASSERT_EQ(orphan, nullptr) << "connected to a closed listen";
    }
    std::printf("a closed listen's connector: %s\n", st.message().c_str());
    EXPECT_EQ(st.code(), Code::kRemoteError) << st.message();
  }

  for (int i = 0; i < kRounds; ++i) {
    rdmatest::check_one_message(sends[i], recvs[i], static_cast<unsigned>(i));
    EXPECT_TRUE(close_send(sends[i]).is_ok());
    EXPECT_TRUE(close_recv(recvs[i]).is_ok());
  }
  EXPECT_EQ(open_fd_count(), fds0)
      << "the listening socket outlived the last comm:" << fd_list() << "; before:" << fds_before;

  // With no comm open the next listen opens afresh, and its socket goes with it.
  std::vector<char> h(kHandleSize);
  ListenComm* l = nullptr;
  ASSERT_TRUE(listen(dev_b_, h.data(), &l).is_ok());
  EXPECT_GT(open_fd_count(), fds0);
  ASSERT_TRUE(close_listen(l).is_ok());
  EXPECT_EQ(open_fd_count(), fds0) << "a listen's socket outlived it with no comm open";
}

// NCCL's finalize with comms open (they are retired: verbs objects and sockets released) takes the
// count of open comms to 0: a socket lingering for the next round goes too, and its port refuses.
TEST_F(CoreListenLinger, FinalizeWithCommsOpenClosesTheLingeringSocket) {
  std::vector<char> h;
  SendComm* s = nullptr;
  RecvComm* r = nullptr;
  ASSERT_NO_FATAL_FAILURE(round(&h, &s, &r));
  EXPECT_TRUE(port_takes_connections(h)) << "the socket did not outlive its listen";
  {
    rdmatest::ExpectWarns expected;  // "finalize with 2 send/receive comm(s) still open"
    engine_release();
    acquired_ = false;
  }
  EXPECT_FALSE(port_takes_connections(h)) << "the lingering socket outlived the last finalize";
  EXPECT_TRUE(close_send(s).is_ok());  // retired comms: close frees them
  EXPECT_TRUE(close_recv(r).is_ok());
}

}  // namespace
}  // namespace sluice
