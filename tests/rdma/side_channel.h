// Bounded pipe/socket I/O for the rdma tests that run more than one process, and the side TCP
// connection between the two VMs of scripts/rdma-bed --two-host (host0 listens on `port`, host1
// connects to SLUICE_BED_PEER_ADDR, retrying until host0 is up), with the sync of the two hosts
// and a comm opened across it (host0 receives, host1 sends). Used by plugin_faults_test.cc,
// plugin_faults_two_host.cc, plugin_two_host_test.cc, plugin_lossy_two_host_test.cc,
// plugin_failover_*.cc and plugin_standby_two_host.cc.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>

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

// Both hosts at the same point: each writes `tag` on the side connection and reads the other's.
inline bool side_sync(int side, char tag) {
  char b = 0;
  return write_full(side, &tag, 1) && read_full(side, &b, 1, wait_limit()) && b == tag;
}

// A fresh comm on device `dev` of each host: host0 listens (a listener per comm), sends the handle
// over the side connection and accepts (a receive comm), host1 connects (a send comm); bounded by
// wait_limit(). "" or what failed.
inline std::string open_side_comm(Net& n, int host, int side, int dev, void** comm) {
  *comm = nullptr;
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  const auto deadline = Clock::now() + wait_limit();
  if (host == 0) {
    void* lc = nullptr;
    if (n.listen(dev, handle, &lc) != ncclSuccess) return "listen: " + last_warn();
    if (!write_full(side, handle, sizeof handle)) return "side write";
    while (*comm == nullptr) {
      if (n.accept(lc, comm) != ncclSuccess) return "accept: " + last_warn();
      if (Clock::now() > deadline) return "accept timed out";
      if (*comm == nullptr) usleep(100);
    }
    n.close_listen(lc);
    return {};
  }
  if (!read_full(side, handle, sizeof handle, wait_limit())) return "side read";
  while (*comm == nullptr) {
    if (n.connect(dev, handle, comm) != ncclSuccess) return "connect: " + last_warn();
    if (Clock::now() > deadline) return "connect timed out";
    if (*comm == nullptr) usleep(100);
  }
  return {};
}

// Closes what open_side_comm opened on this host.
inline ncclResult_t close_side_comm(Net& n, int host, void* comm) {
  return host == 1 ? n.close_send(comm) : n.close_recv(comm);
}

}  // namespace nettest
