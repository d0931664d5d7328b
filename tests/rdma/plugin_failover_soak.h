// The flap soak (plugin_failover_soak.cc says what it runs and checks): its flaps, the links it
// takes down and up, and the plugin's per-member and per-path counters it reads at every phase.
#pragma once

#include <dlfcn.h>

#include <string>
#include <vector>

#include "plugin_failover_harness.h"
#include "sluice/sluice_ext.h"

namespace nettest::failover::soak {

// One flap: `actor` takes its eth`link` down and up.
struct Flap {
  int actor = -1;
  int link = -1;
  const char* group = "";
};

// The soak's flaps in order (SLUICE_TEST_SOAK_FLAPS, SLUICE_TEST_SOAK_ROUNDS).
std::vector<Flap> plan();

// This host's eth`i` (member i) taken down and up; up waits for the port ACTIVE with the GID of
// `addr`; a LinkGuard takes it up if a failed step leaves it down.
struct Link {
  Ctx& x;
  int i;
  std::string addr;
  LinkGuard guard;
  Clock::time_point down_at{};
  Link(Ctx& c, int link, const std::string& a)
      : x(c), i(link), addr(a), guard{c.netdev[link], false, c.host} {}
  std::string down();
  std::string up();
};

// The comm's counters per link (member 0: eth0, 1: eth1; sluiceExt_v2): payload bytes (posted on
// host1's send comm, received on host0's receive comm) and its path's failovers, failbacks, last
// failover stall and bytes replayed.
struct Snap {
  bool ok = false;
  long long bytes[2] = {-1, -1};
  long long failovers[2] = {-1, -1}, failbacks[2] = {-1, -1};
  long long stall_ms[2] = {-1, -1};
  long long replayed[2] = {-1, -1};
};
Snap snap(const Ctx& x, void* comm);

// The soak on a fresh comm (step index `step`); addr1: this host's eth0 address. 0, or the exit
// status of a failure that ended it (a check that failed after a clean end: failed_check).
int step_soak(Ctx& x, int step, const std::string& addr1);

}  // namespace nettest::failover::soak
