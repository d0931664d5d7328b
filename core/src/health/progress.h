// Progress watchdog: a bound on posted work whatever the NIC or driver does (progress.cc).
//
// RC gives up on a packet after NCCL_IB_RETRY_CNT retries of NCCL_IB_TIMEOUT each and completes
// the work request in error, but Soft-RoCE treats a retry count of 7 (NCCL's default) as "retry
// forever", and a stuck peer NIC may never answer at all: then a send whose packets keep being
// lost never completes nor errors, while the peer host (and so the TCP liveness socket) is fine.
// The watchdog bounds that wait. Watched: work this side put on the wire and asked a completion
// for, per QP of a comm in use: the sender's signaled WRITE_WITH_IMM that closes each group (and
// the WRITEs before it; in a long chain also its progress WRs, one every MiB), the reject notice,
// and the receiver's signaled clear-to-send WRITEs. A receiver waiting for data it has published
// buffers for is not watched (the peer may simply be slow to send), once the clear-to-send of that
// data is known to have reached the peer.
//
// The receiver's unsignaled CTS writes after its last signaled one report no completion, so the
// watchdog cannot see them complete; yet if the last of them is lost for good, the sender never
// learns of the receive, posts nothing, and both sides would wait forever. Such an unsignaled
// "tail" on a QP is watched while it is unproven: no receive at or after the first one its latest
// write published has completed (a completed receive k proves every CTS write that published a
// receive <= k was placed: the sender reads the FIFO in order, and RC places one QP's writes in
// order). Its clock starts at the first check that sees it and restarts at any receive completion
// of the comm (progress). Once it has run for half the bound (cts_probe_after_ms), the check posts
// one probe on that QP: a signaled zero-length RDMA WRITE to the peer's FIFO, counted as a CTS
// write in the send-queue accounting and covering the unsignaled writes before it, so its
// completion (which on RC implies every earlier WR of the QP completed) frees their slots and stops
// the clock. At most one probe per QP is outstanding (it is signaled work, so the tail is no longer
// unsignaled), a QP whose receives keep completing never probes (a healthy stream, however busy),
// and a receiver idle behind a delivered clear-to-send probes once per stall and does not fail. A
// probe that does not complete fails the comm at the bound, measured from the tail's clock; a
// probe posted late (no check for a long while) gets at least half the bound.
//
// The clock of a QP starts at the first check that sees watched work outstanding on it, and any
// send-queue completion polled on that QP stops it (progress); each check polls the CQ first, so
// work that completed while nobody called is never taken for stuck. Checks run at the liveness
// poll cadence (SLUICE_LIVENESS_POLL_MS, rate-limited like liveness.cc: no syscall per test).
// A QP whose clock ran past its bound fails its comm:
//   bound = base + 10 s x (MiB of the run the QP's next completion covers, at most 1 MiB)
//   base  = 4.096 us x 2^NCCL_IB_TIMEOUT x (NCCL_IB_RETRY_CNT + 1) x 1.5 + 1 s
// (a retry count of 7 counts as 7), or base = SLUICE_PROGRESS_TIMEOUT_MS when set. Progress is
// made visible inside long chains: a message's bytes on a QP go as WRITEs of at most 1 MiB
// (cts::kProgressChunk), and a WRITE is signaled whenever the chain would otherwise run past
// 1 MiB without one (cts::plan_lane), so a transfer that moves bytes completes a signaled WR at
// least every 1 MiB, each completion restarting the clock, however large the message. The base is
// a per-packet bound (RC's), and a run of 1 MiB is hundreds of packets: the bytes term gives the
// run time at a floor rate of 0.1 MiB/s (kProgressMsPerMiB), applied to one run, never to all the
// bytes outstanding (min(sq_bytes, sq_seg): the largest run posted since the QP was last idle).
// So a live transfer is judged per MiB, at a floor of 1 MiB per (base + 10 s) whatever its total
// size, and one that moves nothing fails within base + 10 s for any message up to 7 MiB per QP
// (a smaller one: base + 10 s x its MiB). Past 7 MiB on one QP a message keeps 7 WRITEs
// (cts::kMaxPieces, so a group fits the 63-WR send queue) of whole MiB each: 16 MiB signals every
// 3 MiB (bound base + 30 s), a 1 GiB one (maxP2pBytes) every 147 MiB (base + 1470 s). Cost:
// messages up to 1 MiB on a lane get no extra WR, CQE or doorbell; longer ones one WR and one CQE
// per MiB (still one doorbell per lane). Before that (no signals) a message moving nothing waited
// base + 10 s per MiB outstanding (16 MiB: base + 160 s). The receiver's watched work
// (clear-to-send writes, probes) carries no data: its bound is the base. The clock starts at most
// one poll period after the work was posted (or last completed) and fires at the first check past
// the bound: the comm fails at its next test/isend/irecv within bound + two poll periods.
#pragma once

#include <cstdint>
#include <string>

#include "sluice/core/wire/wire.h"

namespace sluice {

// Per-comm watchdog state (a member of Conn), driven by the comm's driving thread (for a receive
// comm, under RecvComm::mu).
struct ProgressWatch {
  // Per QP, in its incarnation (comm/qp_life.h QpLife::since_ns): steady_clock time (ns) since
  // which the QP has had watched work outstanding and no completion; 0 = not running.
  bool due = false;    // a liveness poll came due: the next check_device runs the watchdog
  int64_t now_ns = 0;  // the clock read of that poll
};

// ---- Pure logic (unit-tested without verbs) ----------------------------------------------------

// The RC retry bound in milliseconds, 4.096 us x 2^ib_timeout x (retry_cnt + 1), and the
// watchdog's bound: that x 1.5 + 1000 ms.
double rc_retry_bound_ms(int ib_timeout, int retry_cnt);
long long progress_bound_ms(int ib_timeout, int retry_cnt);

// The bytes term: kProgressMsPerMiB per MiB of the run awaited (rounded up to a millisecond).
// 10 s: the two-VM bed moved 16 MiB under 5 % loss and 5 ms delay at ~3 s per MiB (TCG), so the
// floor keeps a 3x margin over the slowest live transfer measured.
inline constexpr long long kProgressMsPerMiB = 10000;
long long progress_bytes_ms(uint64_t bytes);

// One check. outstanding[q]: QP q has watched work without a completion right now (after the CQ
// was polled). Updates since_ns (starts clocks at now_ns, stops those of idle QPs) and returns the
// QP whose clock has run longest past its bound, or -1; *waited_ms is how long it waited. QP q's
// bound is bound_ms + extra_ms[q] (extra_ms null: none).
int progress_check(int64_t* since_ns, const bool* outstanding, int nqps, int64_t now_ns,
                   long long bound_ms, long long* waited_ms, const long long* extra_ms = nullptr);

// The failure text. qp: describe_qp of the stuck QP (names the peer, device and QPs); what: the
// watched work ("isend data/closing WRITE_WITH_IMM" or "clear-to-send WRITE"); from_knob: the bound
// is SLUICE_PROGRESS_TIMEOUT_MS, not derived.
// ---- The receiver's unsignaled clear-to-send tail (see above) ----------------------------------

// One receive QP's CTS accounting after the CQ poll.
struct CtsTail {
  uint32_t outstanding = 0;  // CTS writes (and probes) whose send-queue slot is in use
  uint32_t unsignaled = 0;   // unsignaled writes since the last signaled one (counted in the above)
  uint64_t from = 0;         // first receive published by the QP's latest CTS write
};

// A probe is due once an unproven tail's clock has run this fraction of the bound.
inline constexpr long long kCtsProbeAfterDiv = 2;
inline long long cts_probe_after_ms(long long bound_ms) {
  return bound_ms / kCtsProbeAfterDiv;
}

// Unsignaled writes outstanding, no signaled work after them, and none known placed:
// completed_hi = 1 + the highest receive seq completed so far (0: none).
bool cts_tail_unproven(const CtsTail& t, uint64_t completed_hi);

// One receive QP at a watchdog check, before progress_check. received: a receive of the comm
// completed since the previous check (restarts an unproven tail's clock). Sets *watched (the
// QP's `outstanding` for progress_check: signaled work or an unproven tail) and returns true when
// a probe is due now (the tail's clock ran cts_probe_after_ms). After posting the probe the caller
// calls cts_probe_posted.
bool cts_tail_check(const CtsTail& t, uint64_t completed_hi, bool received, int64_t now_ns,
                    long long bound_ms, int64_t* since_ns, bool* watched);

// The QP's clock once a probe is posted at now_ns: unchanged, or moved so that the probe has at
// least bound - cts_probe_after_ms before it fires (a check that came late).
int64_t cts_probe_posted(int64_t since_ns, int64_t now_ns, long long bound_ms);

// bytes: the data the QP's next signaled completion covers at most (its bound is bound_ms +
// progress_bytes_ms(bytes)).
std::string progress_reason(const std::string& qp, const char* what, long long waited_ms,
                            long long bound_ms, int ib_timeout, int retry_cnt,
                            bool from_knob = false, uint64_t bytes = 0);

}  // namespace sluice
