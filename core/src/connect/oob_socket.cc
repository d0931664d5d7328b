// Non-blocking socket helpers of connection setup (oob_socket.h).
#include "connect/oob_socket.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>

#include "sluice/core/base/net_addr.h"

namespace sluice {

std::string sockaddr_text(const sockaddr_storage& sa) {
  return sockaddr_to_string(sa);
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
