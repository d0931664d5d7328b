#include "bootstrap.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace bench {

namespace {

constexpr uint64_t kHelloMagic = 0x534c5549434542ull;  // "SLUICEB"

sockaddr_storage resolve(const std::string& addr, int port, socklen_t* len) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string p = std::to_string(port);
  int rc = getaddrinfo(addr.empty() ? nullptr : addr.c_str(), p.c_str(), &hints, &res);
  if (rc != 0 || !res) fail("cannot resolve %s:%d: %s", addr.c_str(), port, gai_strerror(rc));
  sockaddr_storage ss{};
  memcpy(&ss, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
  return ss;
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Waits until fd is ready for `events`; throws when the deadline passes.
void wait_fd(int fd, short events, const Deadline& dl) {
  for (;;) {
    pollfd p{fd, events, 0};
    int ms = static_cast<int>(std::max(0.0, dl.left()) * 1000) + 1;
    int n = poll(&p, 1, std::min(ms, 1000));
    if (n > 0) return;
    if (n < 0 && errno != EINTR) fail("poll: %s", strerror(errno));
    dl.check();
  }
}

}  // namespace

Channel& Channel::operator=(Channel&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

Channel::~Channel() {
  if (fd_ >= 0) close(fd_);
}

Channel Channel::connect(const std::string& addr, int port, const Deadline& dl) {
  socklen_t len = 0;
  sockaddr_storage ss = resolve(addr, port, &len);
  std::string last = "no attempt";
  double backoff = 0.01;
  while (!dl.expired()) {
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) fail("socket: %s", strerror(errno));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0) {
      set_nodelay(fd);
      return Channel(fd);
    }
    last = strerror(errno);
    close(fd);
    std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
    backoff = std::min(backoff * 2, 0.25);
  }
  fail("cannot connect to %s:%d within %s (%s)", addr.c_str(), port, dl.what().c_str(),
       last.c_str());
}

void Channel::send(const void* p, size_t n, const Deadline& dl) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    wait_fd(fd_, POLLOUT, dl);
    ssize_t k = ::send(fd_, c, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      fail("control channel send: %s (peer gone?)", strerror(errno));
    }
    c += k;
    n -= static_cast<size_t>(k);
  }
}

void Channel::recv(void* p, size_t n, const Deadline& dl) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    wait_fd(fd_, POLLIN, dl);
    ssize_t k = ::recv(fd_, c, n, MSG_DONTWAIT);
    if (k == 0) fail("control channel closed by the peer (%s)", dl.what().c_str());
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      fail("control channel recv: %s", strerror(errno));
    }
    c += k;
    n -= static_cast<size_t>(k);
  }
}

void Channel::send_str(const std::string& s, const Deadline& dl) {
  uint32_t n = static_cast<uint32_t>(s.size());
  send(&n, sizeof n, dl);
  send(s.data(), n, dl);
}

std::string Channel::recv_str(const Deadline& dl) {
  uint32_t n = 0;
  recv(&n, sizeof n, dl);
  if (n > (64u << 20)) fail("control channel: implausible message length %u", n);
  std::string s(n, '\0');
  recv(s.data(), n, dl);
  return s;
}

std::string Channel::peer_addr() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "";
  char host[NI_MAXHOST];
  if (ss.ss_family != AF_INET && ss.ss_family != AF_INET6) return "";
  if (getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof host, nullptr, 0,
                  NI_NUMERICHOST) != 0)
    return "";
  return host;
}

Listener::Listener(const std::string& addr, int port) {
  socklen_t len = 0;
  sockaddr_storage ss = resolve(addr, port, &len);
  fd_ = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) fail("socket: %s", strerror(errno));
  int one = 1;
  setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd_, reinterpret_cast<sockaddr*>(&ss), len) != 0)
    fail("cannot bind %s:%d: %s", addr.c_str(), port, strerror(errno));
  if (::listen(fd_, 1024) != 0) fail("listen: %s", strerror(errno));
  sockaddr_storage bound{};
  socklen_t bl = sizeof bound;
  getsockname(fd_, reinterpret_cast<sockaddr*>(&bound), &bl);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

Listener::~Listener() {
  if (fd_ >= 0) close(fd_);
}

Channel Listener::accept(const Deadline& dl) {
  wait_fd(fd_, POLLIN, dl);
  int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) fail("accept: %s", strerror(errno));
  set_nodelay(fd);
  return Channel(fd);
}

Bootstrap::Bootstrap(int rank, int size, const std::string& addr, int port, double timeout_s)
    : rank_(rank), size_(size) {
  if (size < 1 || rank < 0 || rank >= size) fail("bad rank %d / world size %d", rank, size);
  if (size == 1) return;
  Deadline dl(timeout_s, strf("waiting for all %d ranks at %s:%d", size, addr.c_str(), port));
  struct Hello {
    uint64_t magic;
    int32_t rank, size;
  };
  if (rank == 0) {
    Listener l(addr, port);
    peers_.resize(size);
    for (int i = 1; i < size; ++i) {
      Channel c = l.accept(dl);
      Hello h = c.recv_pod<Hello>(dl);
      if (h.magic != kHelloMagic)
        fail("bootstrap: a stranger connected to %s:%d", addr.c_str(), port);
      if (h.size != size)
        fail("bootstrap: rank %d says world size %d, rank 0 has %d", h.rank, h.size, size);
      if (h.rank < 1 || h.rank >= size || peers_[h.rank].valid())
        fail("bootstrap: duplicate or bad rank %d", h.rank);
      peers_[h.rank] = std::move(c);
    }
  } else {
    peers_.resize(1);
    peers_[0] = Channel::connect(addr, port, dl);
    peers_[0].send_pod(Hello{kHelloMagic, rank, size}, dl);
  }
}

void Bootstrap::allgather(const void* in, size_t n, void* out, double timeout_s) {
  char* o = static_cast<char*>(out);
  memcpy(o + static_cast<size_t>(rank_) * n, in, n);
  if (size_ == 1) return;
  Deadline dl(timeout_s, "in a bootstrap allgather (a rank is stuck or gone)");
  if (rank_ == 0) {
    for (int r = 1; r < size_; ++r) peers_[r].recv(o + static_cast<size_t>(r) * n, n, dl);
    for (int r = 1; r < size_; ++r) peers_[r].send(o, n * size_, dl);
  } else {
    peers_[0].send(in, n, dl);
    peers_[0].recv(o, n * size_, dl);
  }
}

void Bootstrap::barrier(double timeout_s) {
  char c = 1;
  std::vector<char> all(size_);
  allgather(&c, 1, all.data(), timeout_s);
}

}  // namespace bench
