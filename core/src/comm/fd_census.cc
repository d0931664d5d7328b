#include "comm/fd_census.h"

namespace sluice {
namespace {

std::atomic<long> g_counts[static_cast<int>(FdKind::kCount)];

uint64_t count_of(FdKind k) {
  const long v = g_counts[static_cast<int>(k)].load(std::memory_order_relaxed);
  return v > 0 ? static_cast<uint64_t>(v) : 0;
}

}  // namespace

FdCount::FdCount(FdKind k) : kind_(k) {
  fd_count_add(k, 1);
}

FdCount::~FdCount() {
  fd_count_add(kind_, -1);
}

void fd_count_add(FdKind kind, long delta) {
  g_counts[static_cast<int>(kind)].fetch_add(delta, std::memory_order_relaxed);
}

SluiceFds sluice_fd_census() {
  SluiceFds f;
  f.comm_sockets = count_of(FdKind::kCommSocket);
  f.peer_links = count_of(FdKind::kLink);
  f.listen_sockets = count_of(FdKind::kListen);
  f.handshakes = count_of(FdKind::kHandshake);
  f.connects = count_of(FdKind::kConnect);
  f.cm_channels = count_of(FdKind::kCmChannel);
  return f;
}

Status fd_exhausted_status(const std::string& what, int err) {
  return Status(Code::kSystemError,
                fd_exhausted_text(what, err, read_fd_limit(), sluice_fd_census()));
}

}  // namespace sluice
