// The handshake's bytes on a real connection. A relay between connect() and the listener forwards
// and records the connection metadata both sides send; the test checks that the listen handle and
// both metadata blocks pass the validators the peer applies, that the connection completes through
// the relay, and prints the three (hex, "SLUICE_CAPTURE <kind> <hex>") for
// scripts/capture-fuzz-seeds, which stores them as fuzz/corpus seeds.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "rdma_env.h"
#include "sluice/core/api.h"
#include "sluice/core/wire/wire.h"

namespace {

using namespace sluice;
using Clock = std::chrono::steady_clock;

std::string hex(const void* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    const auto b = static_cast<const uint8_t*>(p)[i];
    s += d[b >> 4];
    s += d[b & 15];
  }
  return s;
}

// Blocking transfer of exactly n bytes, bounded by the socket's 60 s timeouts.
bool xfer(int from, int to, void* buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::recv(from, static_cast<char*>(buf) + got, n - got, 0);
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return ::send(to, buf, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n);
}

void set_timeouts(int fd) {
  timeval tv{60, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

TEST(WireCapture, HandshakeBytesValidateAndConnectThroughARelay) {
  auto devs = rdmatest::active_rdma_devices();
  SLUICE_REQUIRE_DEVICES(devs, 1);
  ASSERT_TRUE(engine_acquire(nullptr).is_ok());
  const int dev_r = device_count() > 1 ? 1 : 0;

  char handle[kHandleSize];
  ListenComm* l = nullptr;
  Status st = listen(dev_r, handle, &l);
  ASSERT_TRUE(st.is_ok()) << st.message();
  wire::Handle h;
  std::memcpy(&h, handle, sizeof h);
  st = wire::validate_handle(h);
  ASSERT_TRUE(st.is_ok()) << st.message();

  // The relay listens on the listener's address; the connector gets a handle naming the relay.
  sockaddr_storage target{};
  socklen_t len = 0;
  wire::handle_address(h, &target, &len);
  sockaddr_storage relay_sa = target;
  if (relay_sa.ss_family == AF_INET)
    reinterpret_cast<sockaddr_in*>(&relay_sa)->sin_port = 0;
  else
    reinterpret_cast<sockaddr_in6*>(&relay_sa)->sin6_port = 0;
  int lfd = socket(relay_sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(lfd, 0);
  ASSERT_EQ(bind(lfd, reinterpret_cast<sockaddr*>(&relay_sa), len), 0) << std::strerror(errno);
  ASSERT_EQ(::listen(lfd, 1), 0);
  socklen_t slen = sizeof relay_sa;
  ASSERT_EQ(getsockname(lfd, reinterpret_cast<sockaddr*>(&relay_sa), &slen), 0);
  const wire::Handle rh = wire::encode_handle(relay_sa, h.listen_dev, h.nonce);
  char relay_handle[kHandleSize] = {};
  std::memcpy(relay_handle, &rh, sizeof rh);

  wire::Meta sender{}, receiver{};
  int cfd = -1, sfd = -1;
  bool relayed = false;
  std::thread relay([&] {
    pollfd p{lfd, POLLIN, 0};
    if (poll(&p, 1, 60000) != 1) return;
    cfd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    sfd = socket(target.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (cfd < 0 || sfd < 0) return;
    set_timeouts(cfd);
    set_timeouts(sfd);
    if (::connect(sfd, reinterpret_cast<sockaddr*>(&target), len) != 0) return;
    char ready = 0;
    relayed = xfer(cfd, sfd, &sender, sizeof sender) &&
              xfer(sfd, cfd, &receiver, sizeof receiver) && xfer(cfd, sfd, &ready, 1);
  });

  SendComm* s = nullptr;
  RecvComm* r = nullptr;
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while ((s == nullptr || r == nullptr) && Clock::now() < deadline) {
    if (s == nullptr) {
      st = connect(0, relay_handle, CommConfig{}, &s);
      if (!st.is_ok()) break;
    }
    if (r == nullptr) {
      st = accept(l, &r);
      if (!st.is_ok()) break;
    }
  }
  relay.join();
  EXPECT_TRUE(st.is_ok()) << st.message();
  EXPECT_TRUE(relayed) << "the relay did not forward the whole handshake";
  EXPECT_NE(s, nullptr);
  EXPECT_NE(r, nullptr);
  if (s != nullptr) {
    EXPECT_TRUE(close_send(s).is_ok());
  }
  if (r != nullptr) {
    EXPECT_TRUE(close_recv(r).is_ok());
  }
  EXPECT_TRUE(close_listen(l).is_ok());
  for (int fd : {cfd, sfd, lfd})
    if (fd >= 0) close(fd);
  engine_release();

  st = wire::validate_meta(sender, 0, h.nonce);
  EXPECT_TRUE(st.is_ok()) << "connector's metadata: " << st.message();
  st = wire::validate_meta(receiver, 1, h.nonce);
  EXPECT_TRUE(st.is_ok()) << "acceptor's metadata: " << st.message();
  EXPECT_TRUE(wire::check_peer_meta(receiver, sender, "acceptor").is_ok());
  EXPECT_TRUE(wire::check_peer_meta(sender, receiver, "connector").is_ok());
  std::printf("SLUICE_CAPTURE handle %s\n", hex(handle, sizeof handle).c_str());
  std::printf("SLUICE_CAPTURE meta_sender %s\n", hex(&sender, sizeof sender).c_str());
  std::printf("SLUICE_CAPTURE meta_receiver %s\n", hex(&receiver, sizeof receiver).c_str());
}

}  // namespace
