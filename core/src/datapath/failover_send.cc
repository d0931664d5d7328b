// Failover's driver on the send side (failover_dp.h): the fence of each failed path, the replay of
// what it did not deliver once both sides fenced it (send.cc fo_send_replay), and the failback
// clock (the sender offers).
#include "datapath/failover_dp.h"
#include "sluice/core/base/log.h"

namespace sluice::dp {

Status fo_drive_send(SendComm& s, int64_t now) {
  Conn& c = s.c;
  PathFailover& f = c.fo;
  // The drain markers and the checks of a fresh path (their completions) come from the CQs; a
  // poll records nothing else to apply here but faults, taken at the next call.
  bool poll = false;
  for (int p = 0; p < c.npaths; ++p) {
    const failover::State st = f.path[p].state();
    poll = poll || st == failover::State::kFencing || st == failover::State::kChecking;
  }
  if (poll) SLUICE_RETURN_IF_ERROR(poll_send(s));
  for (int p = 0; p < c.npaths; ++p) SLUICE_RETURN_IF_ERROR(fo_fence_step(c, p, now));
  for (int p = 0; p < c.npaths; ++p) SLUICE_RETURN_IF_ERROR(fo_clock_step(c, p, now));
  fo_reap_retired(c, now);
  for (int p = 0; p < c.npaths; ++p) {
    if (!f.replay_pending[p]) continue;
    bool done = false;
    SLUICE_RETURN_IF_ERROR(fo_send_replay(s, p, &done));
    if (!done) continue;
    // Then the eager WRITEs flushed on the path (eager.cc "Failover"); until all are posted again
    // the path's replay stays pending (fo_send_replay finds nothing left to do meanwhile).
    if (s.eg.on) SLUICE_RETURN_IF_ERROR(eager_replay(s, p, &done));
    if (!done) continue;
    f.replay_pending[p] = false;
    f.last_stall_ms = f.rec->path_stall_ms[p] = now - f.rec->fault_ms[p];
    SLUICE_INFO(kSubNet,
                "send comm to %s: %s fenced on both sides %lld ms after the fault; %llu chains "
                "(%llu bytes) and %llu eager WRITEs replayed so far on this comm, later ones go "
                "to path %d",
                c.peer.c_str(), fo_path_desc(c, p).c_str(), static_cast<long long>(f.last_stall_ms),
                static_cast<unsigned long long>(f.chains_replayed),
                static_cast<unsigned long long>(f.bytes_replayed),
                static_cast<unsigned long long>(s.c.stats.eager_replays.get()), f.sub[p]);
  }
  return Status::ok();
}

}  // namespace sluice::dp
