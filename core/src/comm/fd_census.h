// The descriptors Sluice's connection setup and comms hold, for the message of an EMFILE/ENFILE
// (sluice/core/base/fd_limit.h): counted by the objects that hold them (FdCount members), read as
// atomics, so any path may take the census whatever locks it holds.
#pragma once

#include <atomic>
#include <string>

#include "sluice/core/base/fd_limit.h"
#include "sluice/core/base/status.h"

namespace sluice {

// kCommSocket: a comm that keeps its own socket (no peer link: SLUICE_OOB_LINK=0 or an older peer);
// kLink: a peer link's socket (health/peer_link.h), one per peer process.
enum class FdKind { kListen, kHandshake, kConnect, kCmChannel, kCommSocket, kLink, kCount };

// Counts one holder of `kind` for its lifetime (a member of the object that holds the descriptor).
class FdCount {
 public:
  explicit FdCount(FdKind k);
  ~FdCount();
  FdCount(const FdCount&) = delete;
  FdCount& operator=(const FdCount&) = delete;

 private:
  FdKind kind_;
};
// Adds `delta` holders of `kind` (for a holder that is not one object, the rdma_cm channel).
void fd_count_add(FdKind kind, long delta);

// Comms with a socket of their own, peer links, listening sockets, handshakes, connects, rdma_cm
// channels.
SluiceFds sluice_fd_census();
// Code::kSystemError with the message that names the limit, what Sluice holds and the fix.
Status fd_exhausted_status(const std::string& what, int err);

}  // namespace sluice
