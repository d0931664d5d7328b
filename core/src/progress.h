// Progress watchdog: a bound on posted work whatever the NIC or driver does (progress.cc).
//
// RC gives up on a packet after NCCL_IB_RETRY_CNT retries of NCCL_IB_TIMEOUT each and completes
// the work request in error, but Soft-RoCE treats a retry count of 7 (NCCL's default) as "retry
// forever", and a stuck peer NIC may never answer at all: then a send whose packets keep being
// lost never completes nor errors, while the peer host (and so the TCP liveness socket) is fine.
// The watchdog bounds that wait. Watched: work this side put on the wire and asked a completion
// for, per QP of a comm in use: the sender's signaled WRITE_WITH_IMM that closes each group (and
// the WRITEs before it), the reject notice, and the receiver's signaled clear-to-send WRITEs. A
// receiver waiting for data it has published buffers for is not watched (the peer may simply be
// slow to send), nor are the receiver's unsignaled CTS writes after its last signaled one (no
// completion will ever be reported for them, so their age says nothing).
//
// The clock of a QP starts at the first check that sees watched work outstanding on it, and any
// send-queue completion polled on that QP stops it (progress); each check polls the CQ first, so
// work that completed while nobody called is never taken for stuck. Checks run at the liveness
// poll cadence (SLUICE_LIVENESS_POLL_MS, rate-limited like liveness.cc: no syscall per test).
// A QP whose clock ran past the bound fails its comm:
//   bound = 4.096 us x 2^NCCL_IB_TIMEOUT x (NCCL_IB_RETRY_CNT + 1) x 1.5 + 1 s
// (a retry count of 7 counts as 7), or SLUICE_PROGRESS_TIMEOUT_MS when set. The clock starts at
// most one poll period after the work was posted (or last completed) and fires at the first check
// past the bound: the comm fails at its next test/isend/irecv within bound + two poll periods.
// Progress is seen per work request, not per packet: on a link so slow that one message takes
// longer than the bound (the emulated bed at short NCCL_IB_TIMEOUT), set the knob higher.
#pragma once

#include <cstdint>
#include <string>

#include "sluice/core/wire.h"

namespace sluice {

// Per-comm watchdog state (a member of Conn), driven by the comm's driving thread (for a receive
// comm, under RecvComm::mu).
struct ProgressWatch {
  // steady_clock time (ns) since which QP q has had watched work outstanding and no completion;
  // 0 = not running (nothing outstanding, or a completion since the last check).
  int64_t since_ns[wire::kMaxQps] = {};
  bool due = false;    // a liveness poll came due: the next check_device runs the watchdog
  int64_t now_ns = 0;  // the clock read of that poll
};

// ---- Pure logic (unit-tested without verbs) ----------------------------------------------------

// The RC retry bound in milliseconds, 4.096 us x 2^ib_timeout x (retry_cnt + 1), and the
// watchdog's bound: that x 1.5 + 1000 ms.
double rc_retry_bound_ms(int ib_timeout, int retry_cnt);
long long progress_bound_ms(int ib_timeout, int retry_cnt);

// One check. outstanding[q]: QP q has watched work without a completion right now (after the CQ
// was polled). Updates since_ns (starts clocks at now_ns, stops those of idle QPs) and returns the
// QP whose clock has run longest past bound_ms, or -1; *waited_ms is how long it waited.
int progress_check(int64_t* since_ns, const bool* outstanding, int nqps, int64_t now_ns,
                   long long bound_ms, long long* waited_ms);

// The failure text. qp: describe_qp of the stuck QP (names the peer, device and QPs); what: the
// watched work ("isend data/closing WRITE_WITH_IMM" or "clear-to-send WRITE"); from_knob: the bound
// is SLUICE_PROGRESS_TIMEOUT_MS, not derived.
std::string progress_reason(const std::string& qp, const char* what, long long waited_ms,
                            long long bound_ms, int ib_timeout, int retry_cnt,
                            bool from_knob = false);

}  // namespace sluice
