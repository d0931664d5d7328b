// The process's file descriptor limit (RLIMIT_NOFILE), which every comm counts against: each keeps
// its out-of-band TCP socket for its life, each listen holds a listening socket, each connect and
// accept in progress a socket. Many systems start processes with a soft limit of 1,024, which a job
// of a thousand GPUs passes at init (issue 32). So the engine's init raises the soft limit to the
// hard one, and an EMFILE/ENFILE on a socket Sluice opens fails the call with a message that names
// the limit, the descriptors Sluice's comms hold and the fix (fd_exhausted_text).
#pragma once

#include <cerrno>
#include <cstdint>
#include <string>

namespace sluice {

struct FdLimit {
  uint64_t soft = 0;
  uint64_t hard = 0;  // RLIM_INFINITY as UINT64_MAX
  bool known = false;
};
// The limit now (getrlimit); known = false when it cannot be read.
FdLimit read_fd_limit();

// What raising the soft limit did: its value before and after, the hard limit, and a reason when
// it could not be raised (empty otherwise).
struct FdRaise {
  uint64_t before = 0;
  uint64_t after = 0;
  uint64_t hard = 0;
  std::string error;
  // "RLIMIT_NOFILE: soft limit raised from 1024 to 524288 (the hard limit) ..." for the INFO line.
  std::string text() const;
};
// Raises the soft RLIMIT_NOFILE to the hard limit (to fs.nr_open when the hard limit is infinite,
// which setrlimit refuses for NOFILE). `nr_open` = that cap (0: read /proc/sys/fs/nr_open).
FdRaise raise_fd_limit(uint64_t nr_open = 0);
// raise_fd_limit once per process, with an INFO line that says what it did (old -> new); a WARN
// when it could not. The plugin's init calls it once its engine is made (its log sink set).
void raise_fd_limit_at_init();

// The census of the descriptors Sluice's comms hold, for the message.
struct SluiceFds {
  uint64_t comm_sockets = 0;  // send/receive comms that keep a socket of their own
  uint64_t peer_links = 0;    // peer links (one socket per peer process, shared by its comms)
  uint64_t listen_sockets = 0;
  uint64_t handshakes = 0;  // accepted connections whose handshake is in progress
  uint64_t connects = 0;    // connects in progress (at most one socket each)
  uint64_t cm_channels = 0;
  uint64_t total() const {
    return comm_sockets + peer_links + listen_sockets + handshakes + connects + cm_channels;
  }
};
// The message for an EMFILE/ENFILE (`err`) from `what` ("listen: socket()", "accept4 on ..."):
// the limit (soft/hard) as read now, the descriptors Sluice's comms hold, and the fix.
std::string fd_exhausted_text(const std::string& what, int err, const FdLimit& limit,
                              const SluiceFds& held);
inline bool fd_exhausted(int err) {
  return err == EMFILE || err == ENFILE;
}

}  // namespace sluice
