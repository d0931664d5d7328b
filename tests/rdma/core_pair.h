// Shared by the core rdma tests (core_*_test.cc): the engine's devices for the test pair, and one
// message over a comm pair with its bytes checked, and a listen handle's address. Core's public
// headers only (sluice/core/api.h, sluice/core/wire).
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "rdma_env.h"
#include "sluice/core/api.h"
#include "sluice/core/wire/wire.h"

namespace sluice::rdmatest {

// Core's indices of the test pair's ports (core names a port "dev" or, on a multi-port device,
// "dev:port"; the first device matching each), after engine_acquire. name_a and name_b, when
// given, get core's names of those devices. Fails naming a device whose properties core would not
// give, or a port that is not among core's devices. Use as
// ASSERT_TRUE(core_pair_devices(pair, &a, &b)), or as a bool where gtest cannot assert (a child).
inline ::testing::AssertionResult core_pair_devices(const TestPair& pair, int* a, int* b,
                                                    std::string* name_a = nullptr,
                                                    std::string* name_b = nullptr) {
  *a = *b = -1;
  for (int d = 0; d < device_count(); ++d) {
    DeviceProperties p;
    const Status st = device_properties(d, &p);
    if (!st.is_ok()) {
      return ::testing::AssertionFailure() << "device_properties(" << d << "): " << st.message();
    }
    if (*a < 0 && pair.a().matches(p.name)) {
      *a = d;
      if (name_a != nullptr) *name_a = p.name;
    }
    if (*b < 0 && pair.b().matches(p.name)) {
      *b = d;
      if (name_b != nullptr) *name_b = p.name;
    }
  }
  if (*a < 0) {
    return ::testing::AssertionFailure() << pair.a().label() << " not among core's devices";
  }
  if (*b < 0) {
    return ::testing::AssertionFailure() << pair.b().label() << " not among core's devices";
  }
  return ::testing::AssertionSuccess();
}

// One 4099-byte message s -> r (tag 5, byte i = i * 131 + salt) into an 8192-byte buffer of 0xab:
// the send and the receive complete within 30 s, the receive reports 4099 bytes, every byte is as
// sent and the byte after them untouched; both registrations are released. Its failures are fatal
// to it only: wrap it in ASSERT_NO_FATAL_FAILURE to stop the caller.
inline void check_one_message(SendComm* s, RecvComm* r, unsigned salt) {
  std::vector<uint8_t> src(4099), dst(8192, 0xab);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 131 + salt);
  MemHandle *ms = nullptr, *mr = nullptr;
  ASSERT_TRUE(reg_mr(s, src.data(), src.size(), MemType::kHost, &ms).is_ok());
  ASSERT_TRUE(reg_mr(r, dst.data(), dst.size(), MemType::kHost, &mr).is_ok());
  Request *rq = nullptr, *sq = nullptr;
  void* d = dst.data();
  size_t cap = dst.size();
  int tag = 5;
  ASSERT_TRUE(irecv(r, 1, &d, &cap, &tag, &mr, &rq).is_ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (sq == nullptr) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline);
    Status st = isend(s, src.data(), src.size(), tag, ms, &sq);
    ASSERT_TRUE(st.is_ok() || st.is_again()) << st.message();
  }
  int rdone = 0, sdone = 0;
  size_t got = 0;
  while (!rdone || !sdone) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "message not delivered";
    if (!rdone) {
      ASSERT_TRUE(test(rq, &rdone, &got).is_ok());
    }
    if (!sdone) {
      ASSERT_TRUE(test(sq, &sdone, nullptr).is_ok());
    }
  }
  EXPECT_EQ(got, src.size());
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), src.size()), 0);
  EXPECT_EQ(dst[src.size()], 0xab);
  EXPECT_TRUE(dereg_mr(s, ms).is_ok());
  EXPECT_TRUE(dereg_mr(r, mr).is_ok());
}

// The listener's address in a listen handle (kHandleSize bytes, a wire::Handle).
inline void handle_sockaddr(const void* handle, sockaddr_storage* sa, socklen_t* len) {
  wire::Handle h;
  std::memcpy(&h, handle, sizeof h);
  *sa = sockaddr_storage{};
  *len = 0;
  wire::handle_address(h, sa, len);
}

}  // namespace sluice::rdmatest
