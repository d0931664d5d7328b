// The out-of-band TCP socket of connection setup (connect.cc, listener.cc): non-blocking helpers
// that move what the socket takes now and never block.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <string>

#include "sluice/core/base/status.h"

namespace sluice {

// sockaddr_to_string's text ("a.b.c.d:port", "[v6%scope]:port"), with the names of IPv6 scopes
// (interfaces) kept a second rather than read by if_indextoname each time.
std::string sockaddr_text(const sockaddr_storage& sa);
// O_NONBLOCK and TCP_NODELAY on `fd`.
Status set_nonblocking(int fd);
// Sends/receives what the socket takes now. ok() = all bytes done; kAgain = call again.
Status send_some(int fd, const void* buf, size_t n, size_t* done, const std::string& peer);
Status recv_some(int fd, void* buf, size_t n, size_t* done, const std::string& peer);

}  // namespace sluice
