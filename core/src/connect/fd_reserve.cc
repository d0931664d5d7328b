#include "connect/fd_reserve.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "comm/fd_census.h"
#include "connect/oob_socket.h"
#include "sluice/core/wire/wire.h"

namespace sluice {
namespace {

// A leaf lock: nothing else is taken under it.
struct FdReserve {
  std::mutex mu;
  int fd = -1;
  size_t users = 0;
};
FdReserve& fd_reserve() {
  static auto* r = new FdReserve;  // NOLINT: never destroyed (no static destructor)
  return *r;
}

int open_reserve() {
  return open("/dev/null", O_RDONLY | O_CLOEXEC);
}

}  // namespace

Status fd_reserve_take(const std::string& what) {
  FdReserve& r = fd_reserve();
  std::lock_guard<std::mutex> lk(r.mu);
  if (r.fd < 0) {
    r.fd = open_reserve();
    if (r.fd < 0) {
      const int err = errno;
      if (fd_exhausted(err)) return fd_exhausted_status(what + ": the reserved descriptor", err);
      return errno_status(Code::kSystemError,
                          what + ": open(/dev/null) for the reserved descriptor", err);
    }
  }
  ++r.users;
  return Status::ok();
}

void fd_reserve_give() {
  FdReserve& r = fd_reserve();
  std::lock_guard<std::mutex> lk(r.mu);
  if (r.users > 0 && --r.users == 0 && r.fd >= 0) {
    close(r.fd);
    r.fd = -1;
  }
}

Status refuse_out_of_fds(int listen_fd, const std::string& dev, const std::string& where, int err) {
  const Status st = fd_exhausted_status("accept on " + dev + " (" + where + "): accept4()", err);
  const FdLimit lim = read_fd_limit();
  const SluiceFds held = sluice_fd_census();
  char brief[wire::kNoticeMaxText];
  std::snprintf(brief, sizeof brief,
                "the accepting process (%s, listening on %s) is out of file descriptors: "
                "accept4() failed with %s (%s); its RLIMIT_NOFILE is soft %llu, hard %llu, and "
                "its Sluice comms hold %llu. Raise the limit there (`ulimit -n`, `LimitNOFILE=`, "
                "`--ulimit nofile=`)",
                dev.c_str(), where.c_str(), err == ENFILE ? "ENFILE" : "EMFILE", std::strerror(err),
                static_cast<unsigned long long>(lim.soft),
                static_cast<unsigned long long>(lim.hard),
                static_cast<unsigned long long>(held.total()));
  std::string told;
  FdReserve& r = fd_reserve();
  {
    std::lock_guard<std::mutex> lk(r.mu);
    if (r.fd >= 0) {
      close(r.fd);
      r.fd = -1;
      sockaddr_storage sa{};
      socklen_t len = sizeof sa;
      const int fd =
          accept4(listen_fd, reinterpret_cast<sockaddr*>(&sa), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) {
        // What the connector sent is read first, so that closing sends a FIN, not a reset.
        uint8_t sink[4096];
        for (int k = 0; k < 16 && ::recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0; ++k) {
        }
        uint8_t notice[wire::kNoticeMaxBytes];
        const size_t n = wire::encode_notice(brief, notice);
        if (::send(fd, notice, n, MSG_NOSIGNAL | MSG_DONTWAIT) == static_cast<ssize_t>(n))
          told = sockaddr_text(sa);
        shutdown(fd, SHUT_WR);
        close(fd);
      }
      r.fd = open_reserve();  // the slot the connection had
    }
  }
  if (told.empty()) return st;
  return Status(st.code(), st.message() + "; the connector at " + told + " was told why");
}

}  // namespace sluice
