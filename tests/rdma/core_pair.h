// Shared by the core rdma tests (core_*_test.cc): the engine's devices for the test pair. Core's
// public API only (sluice/core/api.h).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "rdma_env.h"
#include "sluice/core/api.h"

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

}  // namespace sluice::rdmatest
