// The 128-byte listen handle as connect() reads it from NCCL (bytes another rank wrote).
// Contract: validate_handle() rejects with a non-empty kInvalidArgument message, or the handle
// decodes to an address that the real encoder (the one listen() uses) turns back into a valid
// handle naming the same listener: same address, port, device and nonce, and the same rdma_cm
// address and port when it offers one.
#include <netinet/in.h>

#include <algorithm>
#include <cstring>

#include "fuzz_check.h"
#include "sluice/core/api.h"
#include "sluice/core/base/net_addr.h"
#include "sluice/core/wire/wire.h"

using namespace sluice;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint8_t raw[kHandleSize] = {};  // NCCL's handle memory; a short input leaves zeroes
  if (size > 0) std::memcpy(raw, data, std::min(size, sizeof raw));
  wire::Handle h;
  std::memcpy(&h, raw, sizeof h);

  const Status st = wire::validate_handle(h);
  if (!st.is_ok()) {
    FUZZ_CHECK(!st.message().empty(), "rejection without a reason");
    FUZZ_CHECK(st.code() == Code::kInvalidArgument, "code %d", static_cast<int>(st.code()));
    return 0;
  }
  FUZZ_CHECK(h.family == AF_INET || h.family == AF_INET6, "family %u accepted", h.family);
  FUZZ_CHECK(h.port != 0, "port 0 accepted");

  sockaddr_storage sa{};
  socklen_t len = 0;
  wire::handle_address(h, &sa, &len);
  FUZZ_CHECK(len == (h.family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6)), "len %u",
             static_cast<unsigned>(len));
  FUZZ_CHECK(!sockaddr_to_string(sa).empty(), "address prints as nothing");

  // Re-encode with listen()'s encoder and decode again: the same listener.
  sockaddr_storage cm{};
  const bool offers = wire::handle_cm_address(h, &cm);
  FUZZ_CHECK(offers == (h.cm_port != 0), "rdma_cm port %u, offers %d", h.cm_port, offers);
  FUZZ_CHECK(!offers || cm.ss_family == AF_INET || cm.ss_family == AF_INET6, "rdma_cm family %u",
             cm.ss_family);
  const wire::Handle again =
      wire::encode_handle(sa, h.listen_dev, h.nonce, h.cm_port, offers ? &cm : nullptr);
  const Status st2 = wire::validate_handle(again);
  FUZZ_CHECK(st2.is_ok(), "re-encoded handle rejected: %s", st2.message().c_str());
  sockaddr_storage sa2{};
  socklen_t len2 = 0;
  wire::handle_address(again, &sa2, &len2);
  FUZZ_CHECK(len2 == len && std::memcmp(&sa, &sa2, len) == 0, "address changed in round trip");
  FUZZ_CHECK(again.listen_dev == h.listen_dev &&
                 std::memcmp(again.nonce.bytes, h.nonce.bytes, sizeof h.nonce.bytes) == 0,
             "device/nonce changed");
  FUZZ_CHECK(again.connect_state == 0 && again.connect_check == 0, "connector fields not clear");
  sockaddr_storage cm2{};
  FUZZ_CHECK(wire::handle_cm_address(again, &cm2) == offers, "rdma_cm offer changed");
  FUZZ_CHECK(
      !offers || (same_address(cm, cm2) && reinterpret_cast<sockaddr_in*>(&cm)->sin_port ==
                                               reinterpret_cast<sockaddr_in*>(&cm2)->sin_port),
      "rdma_cm address changed in round trip");
  return 0;
}
