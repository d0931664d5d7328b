// Tests that cut the path with a receive posted: the receiver's own clear-to-send must be proven
// first, or its watchdog (not the sender's) is the first to see the cut.
//
// Each irecv publishes itself at once, in an unsignaled clear-to-send RDMA WRITE of its own. A
// receive that completes proves the writes up to its own; a later receive's write stays unproven
// (nothing the receiver holds says it arrived) until a signaled WR behind it completes: the
// progress watchdog's zero-length probe, posted once the unproven tail waited half the bound
// (core/src/health/progress.h). A test that means "the receiver has nothing of its own outstanding
// when the path goes" drives the receive until that probe went out and came back.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>

#include "ext_stats.h"
#include "net_harness.h"

namespace nettest {

// The receive comm's probes so far (sluiceExt_v1 commStats; -1 when the extension is missing).
inline long long cts_probes(void* recv_comm) {
  sluiceCommStats_v1_t s;
  return comm_stats(recv_comm, &s) ? static_cast<long long>(s.ctsProbes) : -1;
}

// Drives `req` (a pending receive of `recv_comm`, not expected to complete) until the watchdog
// probed its comm's clear-to-send tail, then for `settle_ms` more, so the probe's completion is
// polled. False when no probe went out within `limit_ms`, the receive failed or it completed.
inline bool prove_cts_tail(Net& n, void* recv_comm, void* req, long long limit_ms,
                           long long settle_ms = 200) {
  using Clock = std::chrono::steady_clock;
  const long long p0 = cts_probes(recv_comm);
  if (p0 < 0) return false;
  const auto start = Clock::now();
  auto probed = Clock::time_point{};
  for (;;) {
    const auto now = Clock::now();
    if (probed == Clock::time_point{} && cts_probes(recv_comm) > p0) probed = now;
    if (probed != Clock::time_point{} && now - probed >= std::chrono::milliseconds(settle_ms))
      return true;
    if (probed == Clock::time_point{} && now - start >= std::chrono::milliseconds(limit_ms))
      return false;
    int done = 0;
    if (n.test(req, &done, nullptr) != ncclSuccess || done) return false;
    usleep(1000);
  }
}

}  // namespace nettest
