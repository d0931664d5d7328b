// Bounded pipe/socket I/O for the rdma tests that run more than one process, and the side TCP
// connection between the two VMs of scripts/rdma-bed --two-host (host0 listens on `port`, host1
// connects to SLUICE_BED_PEER_ADDR, retrying until host0 is up). Used by plugin_faults_test.cc,
// plugin_faults_two_host.cc and plugin_two_host_test.cc.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>

#include "net_harness.h"

namespace nettest {

inline bool read_full(int fd, void* buf, size_t n, std::chrono::milliseconds limit) {
  size_t got = 0;
  const auto deadline = Clock::now() + limit;
  while (got < n) {
    pollfd p{fd, POLLIN, 0};
    if (Clock::now() > deadline) return false;
    if (poll(&p, 1, 100) < 0) return false;
    if (!(p.revents & (POLLIN | POLLHUP))) continue;
    ssize_t r = read(fd, static_cast<char*>(buf) + got, n - got);
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

inline bool write_full(int fd, const void* buf, size_t n) {
  const char* c = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// The side connection of the two VMs; -1 on failure (bounded by wait_limit()).
inline int side_socket(int host, uint16_t port) {
  const char* peer = std::getenv("SLUICE_BED_PEER_ADDR");
  int fd = -1;
  const auto deadline = Clock::now() + wait_limit();
  if (host == 0) {
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    if (bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(l, 1) != 0) {
      close(l);
      return -1;
    }
    pollfd p{l, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(wait_limit().count())) == 1) fd = accept(l, nullptr, nullptr);
    close(l);
    return fd;
  }
  if (peer == nullptr) return -1;
  while (Clock::now() < deadline) {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    inet_pton(AF_INET, peer, &a.sin_addr);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
    close(fd);
    usleep(200 * 1000);
  }
  return -1;
}

}  // namespace nettest
