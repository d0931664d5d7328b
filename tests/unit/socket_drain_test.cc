// drain_unread (base/socket_drain): a socket closed with unread bytes sends a reset, which the
// peer reads as a crash; read first, and the peer reads an orderly EOF. Over real loopback TCP,
// since a socketpair has no FIN or reset to tell apart.
#include "sluice/core/base/socket_drain.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

namespace sluice {
namespace {

// A connected loopback TCP pair: {one end, the other end}.
std::pair<int, int> tcp_pair() {
  const int l = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(l, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(::listen(l, 1), 0);
  socklen_t len = sizeof a;
  EXPECT_EQ(::getsockname(l, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const int c = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_EQ(::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const int s = ::accept(l, nullptr, nullptr);
  EXPECT_GE(s, 0);
  ::close(l);
  return {c, s};
}

// Sends `n` bytes from `from` and waits until `to` has them to read.
void send_and_wait(int from, int to, size_t n) {
  std::vector<char> buf(n, 'x');
  ASSERT_EQ(::send(from, buf.data(), n, 0), static_cast<ssize_t>(n));
  pollfd p{to, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 5000), 1);
}

// What the peer reads after the other end's close: 0 (EOF) or -errno.
int peer_reads_after_close(int peer) {
  pollfd p{peer, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 5000), 1);
  char b[64];
  const ssize_t r = ::recv(peer, b, sizeof b, 0);
  return r < 0 ? -errno : static_cast<int>(r);
}

TEST(SocketDrain, ClosingWithUnreadBytesResetsThePeer) {
  // The failure drain_unread exists for: without it, the peer reads ECONNRESET.
  auto [a, b] = tcp_pair();
  send_and_wait(b, a, 10);
  ::close(a);
  EXPECT_EQ(peer_reads_after_close(b), -ECONNRESET);
  ::close(b);
}

TEST(SocketDrain, ReadFirstAndThePeerReadsAnOrderlyEof) {
  auto [a, b] = tcp_pair();
  send_and_wait(b, a, 10);
  EXPECT_EQ(drain_unread(a), 10);
  ::close(a);
  EXPECT_EQ(peer_reads_after_close(b), 0);
  ::close(b);
}

TEST(SocketDrain, NeverBlocksAndIsBounded) {
  auto [a, b] = tcp_pair();
  EXPECT_EQ(drain_unread(a), 0);  // nothing there: returns at once
  EXPECT_EQ(drain_unread(-1), 0);
  // More than the bound (kDrainRounds reads of 4 KiB): one call reads at most the bound.
  const size_t big = static_cast<size_t>(kDrainRounds) * 4096 * 2;
  std::vector<char> buf(big, 'y');
  size_t sent = 0;
  while (sent < big) {
    const ssize_t r = ::send(b, buf.data() + sent, big - sent, MSG_DONTWAIT);
    if (r <= 0) break;
    sent += static_cast<size_t>(r);
  }
  ASSERT_GT(sent, static_cast<size_t>(kDrainRounds) * 4096);
  pollfd p{a, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 5000), 1);
  usleep(50 * 1000);  // let loopback deliver what was sent
  EXPECT_LE(drain_unread(a), static_cast<long>(kDrainRounds) * 4096);
  ::close(a);
  ::close(b);
}

}  // namespace
}  // namespace sluice
