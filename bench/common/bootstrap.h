// Out-of-band control for the benchmarks: a framed TCP (or socketpair) channel between two
// processes, and a star bootstrap (rank 0 at MASTER_ADDR:MASTER_PORT) for N ranks offering
// allgather and barrier. Every blocking step is bounded by a deadline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "util.h"

namespace bench {

class Channel {
 public:
  Channel() = default;
  explicit Channel(int fd) : fd_(fd) {}
  Channel(Channel&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Channel& operator=(Channel&& o) noexcept;
  ~Channel();

  // Client side: connects to addr:port, retrying until the deadline.
  static Channel connect(const std::string& addr, int port, const Deadline& dl);
  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }

  void send(const void* p, size_t n, const Deadline& dl);
  void recv(void* p, size_t n, const Deadline& dl);
  template <class T>
  void send_pod(const T& v, const Deadline& dl) {
    send(&v, sizeof v, dl);
  }
  template <class T>
  T recv_pod(const Deadline& dl) {
    T v;
    recv(&v, sizeof v, dl);
    return v;
  }
  void send_str(const std::string& s, const Deadline& dl);
  std::string recv_str(const Deadline& dl);

  std::string peer_addr() const;  // numeric address of the other end ("" for a socketpair)

 private:
  int fd_ = -1;
};

// A listening TCP socket. port 0 picks an ephemeral port (see port()).
class Listener {
 public:
  Listener(const std::string& addr, int port);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  int port() const { return port_; }
  Channel accept(const Deadline& dl);

 private:
  int fd_ = -1;
  int port_ = 0;
};

// N-rank rendezvous: rank 0 listens on addr:port, the others connect to it.
class Bootstrap {
 public:
  Bootstrap(int rank, int size, const std::string& addr, int port, double timeout_s);
  int rank() const { return rank_; }
  int size() const { return size_; }
  // out must hold size * n bytes; out[r*n .. r*n+n) = rank r's `in`.
  void allgather(const void* in, size_t n, void* out, double timeout_s);
  void barrier(double timeout_s);

 private:
  int rank_, size_;
  std::vector<Channel> peers_;  // rank 0: peers_[r] for r >= 1; others: peers_[0] = rank 0
};

}  // namespace bench
