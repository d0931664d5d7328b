// The plugin's statistics extension (sluice/sluice_ext.h), looked up once in the loaded library,
// for tests that count what a comm did.
#pragma once

#include <dlfcn.h>

#include "net_harness.h"
#include "sluice/sluice_ext.h"

namespace nettest {

// sluiceExt_v1 / sluiceExt_v2 of the loaded plugin; nullptr when it does not export them.
inline const sluiceExt_v1_t* ext_v1() {
  static const auto* e =
      static_cast<const sluiceExt_v1_t*>(dlsym(Lib::get().handle, SLUICE_EXT_SYMBOL));
  return e;
}

inline const sluiceExt_v2_t* ext_v2() {
  static const auto* e =
      static_cast<const sluiceExt_v2_t*>(dlsym(Lib::get().handle, SLUICE_EXT_V2_SYMBOL));
  return e;
}

// commStats of `comm` into *out (zeroed first); false when the extension is missing or refuses
// the comm.
inline bool comm_stats(void* comm, sluiceCommStats_v1_t* out) {
  *out = sluiceCommStats_v1_t{};
  return ext_v1() != nullptr && ext_v1()->commStats(comm, out) == 0;
}

// sluiceCommStats_v2_t::eager of `comm` (SLUICE_EAGER_OFF .. SLUICE_EAGER_WITHOUT): where the comm
// stands with the eager path, as the plugin decided it; -1 when it cannot be read.
inline int eager_state(void* comm) {
  sluiceCommStats_v2_t st{};
  st.size = sizeof st;
  if (ext_v2() == nullptr || ext_v2()->commStatsV2(comm, &st) != 0) return -1;
  return st.eager;
}

// sluiceCommStats_v2_t::eagerReplays of send comm `comm`: eager WRITEs a failover posted again;
// -1 when it cannot be read.
inline long long eager_replays(void* comm) {
  sluiceCommStats_v2_t st{};
  st.size = sizeof st;
  if (ext_v2() == nullptr || ext_v2()->commStatsV2(comm, &st) != 0) return -1;
  return static_cast<long long>(st.eagerReplays);
}

}  // namespace nettest
