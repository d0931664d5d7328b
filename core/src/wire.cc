#include "sluice/core/wire.h"

#include <sys/socket.h>

#include <cstring>
#include <string>

namespace sluice::wire {

uint32_t handle_checksum(const Handle& h) {
  const auto* p = reinterpret_cast<const uint8_t*>(&h);
  uint32_t x = 2166136261u;
  for (size_t i = 0; i < offsetof(Handle, checksum); ++i) {
    x ^= p[i];
    x *= 16777619u;
  }
  return x;
}

Status validate_handle(const Handle& h) {
  if (h.magic != kHandleMagic) {
    return Status(Code::kInvalidArgument,
                  "connection handle is not a Sluice handle (bad magic): corrupt handle, or the "
                  "listener uses a different network plugin");
  }
  if (h.version != kVersion) {
    return Status(Code::kInvalidArgument, "connection handle has wire version " +
                                              std::to_string(h.version) + ", this Sluice speaks " +
                                              std::to_string(kVersion) +
                                              ": mixed Sluice versions across the job");
  }
  if (handle_checksum(h) != h.checksum)
    return Status(Code::kInvalidArgument, "connection handle checksum mismatch: corrupt handle");
  if (h.family != AF_INET && h.family != AF_INET6)
    return Status(Code::kInvalidArgument, "connection handle has an unknown address family");
  if (h.port == 0) return Status(Code::kInvalidArgument, "connection handle has port 0");
  return Status::ok();
}

Status validate_meta(const Meta& m, uint8_t expected_role, uint64_t nonce) {
  if (m.magic != kMetaMagic)
    return Status(Code::kRemoteError, "peer sent no Sluice connection metadata (bad magic)");
  if (m.version != kVersion) {
    return Status(Code::kRemoteError, "peer speaks Sluice wire version " +
                                          std::to_string(m.version) + ", we speak " +
                                          std::to_string(kVersion));
  }
  if (m.role != expected_role)
    return Status(Code::kRemoteError, "peer metadata has the wrong role");
  if (m.nonce != nonce)
    return Status(Code::kRemoteError, "peer metadata is for another listener (nonce mismatch)");
  if (m.nqps == 0 || m.nqps > kMaxQps)
    return Status(Code::kRemoteError, "peer metadata has " + std::to_string(m.nqps) + " QPs");
  if (m.split_data > 1) {
    return Status(Code::kRemoteError,
                  "peer metadata has split_data = " + std::to_string(m.split_data));
  }
  if (m.fifo_slots != static_cast<uint32_t>(kFifoSlots))
    return Status(Code::kRemoteError, "peer uses a FIFO depth of " + std::to_string(m.fifo_slots));
  if (m.dev_name[sizeof m.dev_name - 1] != '\0')
    return Status(Code::kRemoteError, "peer metadata device name is not terminated");
  return Status::ok();
}

}  // namespace sluice::wire
