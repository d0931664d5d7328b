// Non-blocking socket helpers of connection setup (oob_socket.h).
#include "connect/oob_socket.h"

#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <mutex>

#include "sluice/core/base/net_addr.h"

namespace sluice {

namespace {

// The names of network interfaces by index, kept a second: every connection's messages name the
// scope of a link-local out-of-band address, and if_indextoname costs three system calls (a socket,
// an ioctl, its close) each time, seven times a connection pair. A renamed interface shows in
// messages within the second; an index whose name cannot be read now (out of descriptors, or gone)
// prints as its number and is not kept.
class ScopeNames {
 public:
  std::string name_of(uint32_t index) {
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> lk(mu_);
    Entry* stale = nullptr;
    for (Entry& e : kept_) {
      if (e.index != index) continue;
      if (now - e.at < kKeep) return e.name;
      stale = &e;
    }
    char buf[IF_NAMESIZE] = {};
    if (if_indextoname(index, buf) == nullptr) return std::to_string(index);
    Entry& slot = stale != nullptr ? *stale : kept_[next_++ % kept_.size()];
    slot = Entry{index, buf, now};
    return slot.name;
  }

 private:
  static constexpr std::chrono::seconds kKeep{1};
  struct Entry {
    uint32_t index = 0;  // 0: empty (no interface has index 0)
    std::string name;
    std::chrono::steady_clock::time_point at;
  };
  std::mutex mu_;
  std::array<Entry, 8> kept_{};
  size_t next_ = 0;
};

ScopeNames& scope_names() {
  static auto* n = new ScopeNames;  // NOLINT: deliberately never destroyed
  return *n;
}

}  // namespace

std::string sockaddr_text(const sockaddr_storage& sa) {
  if (sa.ss_family != AF_INET6) return sockaddr_to_string(sa);
  sockaddr_storage bare = sa;
  auto& sin6 = reinterpret_cast<sockaddr_in6&>(bare);
  const uint32_t scope = sin6.sin6_scope_id;
  if (scope == 0) return sockaddr_to_string(sa);
  sin6.sin6_scope_id = 0;
  std::string s = sockaddr_to_string(bare);  // "[addr]:port", the scope added below
  const size_t close = s.rfind(']');
  if (close == std::string::npos) return sockaddr_to_string(sa);
  s.insert(close, "%" + scope_names().name_of(scope));
  return s;
}

Status set_nonblocking(int fd) {
  int fl = fcntl(fd, F_GETFL, 0);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
    return errno_status(Code::kSystemError, "fcntl(O_NONBLOCK)", errno);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return Status::ok();
}

Status send_some(int fd, const void* buf, size_t n, size_t* done, const std::string& peer) {
  while (*done < n) {
    ssize_t r = ::send(fd, static_cast<const char*>(buf) + *done, n - *done, MSG_NOSIGNAL);
    if (r > 0) {
      *done += static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Status::again();
    if (r < 0 && errno == EINTR) continue;
    return errno_status(Code::kRemoteError, "send to " + peer + " during connection setup", errno);
  }
  return Status::ok();
}

Status recv_some(int fd, void* buf, size_t n, size_t* done, const std::string& peer) {
  while (*done < n) {
    ssize_t r = ::recv(fd, static_cast<char*>(buf) + *done, n - *done, 0);
    if (r > 0) {
      *done += static_cast<size_t>(r);
      continue;
    }
    if (r == 0) {
      return Status(Code::kRemoteError, "peer " + peer +
                                            " closed the connection during setup (peer process "
                                            "exited or failed its side of the handshake)");
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::again();
    if (errno == EINTR) continue;
    return errno_status(Code::kRemoteError, "recv from " + peer + " during connection setup",
                        errno);
  }
  return Status::ok();
}

}  // namespace sluice
