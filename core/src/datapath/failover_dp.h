// Failover's driver, split by side (health/path_failover.h says the design): failover_dp.cc holds
// what both sides do (the async-event word, faults, the inbox of path messages, the fence of a
// path's QPs, the failback clock, fo_apply), failover_send.cc the sender's driver (replay) and
// failover_recv.cc the receiver's (the receive-queue side of the fence, the credits moved to a
// substitute, re-publication, the test hook that holds receive completions back).
#pragma once

#include <cstdint>
#include <string>

#include "datapath/datapath_internal.h"

namespace sluice::dp {

int64_t fo_now_ms();
const char* fo_side(const Conn& c);
// "path 1 (qpn 17 on rxe1:1 -> ... +1 QPs)".
std::string fo_path_desc(const Conn& c, int p);
Status fo_every_path_failed(Conn& c);
// Path p's local member reported DEVICE_FATAL: it is fenced without verbs and stays down.
bool fo_member_dead(const Conn& c, int p);

// One step of path p's fence (fencing only): the markers that did not fit, the local fence's
// completion (markers back, receive WRs completed; bounded by SLUICE_CLOSE_TIMEOUT_MS) and the
// fence's own clock.
Status fo_fence_step(Conn& c, int p, int64_t now);
// One step of path p's failback clock (down, an attempt, the ramp).
Status fo_clock_step(Conn& c, int p, int64_t now);

// The drivers of each side, from fo_drive once any path is not up.
Status fo_drive_send(SendComm& s, int64_t now);
Status fo_drive_recv(RecvComm& r, int64_t now);

// The receiver, before its FENCE of path p (fo_apply's kSendFence): the substitute, the first
// receive without the path, the credits the path's QPs still owe moved there. Caller holds r.mu.
Status fo_recv_before_fence(RecvComm& r, int p);
// The receiver, both sides fenced: every receive not yet complete published again. Caller holds
// r.mu.
Status fo_recv_republish(RecvComm& r);

// Failback (failback_dp.cc): QP index q's incarnation leaves for the retired list (or is destroyed
// at once when drained); retired ones past SLUICE_CLOSE_TIMEOUT_MS are destroyed.
void fo_retire(Conn& c, int q, int64_t now);
void fo_reap_retired(Conn& c, int64_t now);

}  // namespace sluice::dp
