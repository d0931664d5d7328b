#include "sluice/core/base/socket_drain.h"

#include <sys/socket.h>

#include <cstdint>

namespace sluice {

long drain_unread(int fd) {
  if (fd < 0) return 0;
  long total = 0;
  uint8_t buf[4096];
  for (int round = 0; round < kDrainRounds; ++round) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n <= 0) break;
    total += n;
  }
  return total;
}

}  // namespace sluice
