// Failover and failback of a fused comm between two hosts (issue 20; scripts/rdma-bed --two-host,
// tests/rdma/failover.cmake): one process per VM, exit status = result (0 = pass), a side TCP
// socket on eth0 (port kSidePort) carries the listen handles and the sync bytes.
//
//   plugin_failover_two_host HOST STEP[,STEP...]
//
// Each host fuses its two devices with makeVDevice (path 0: the device on eth0, the bed address,
// where the kept socket and the side socket run too; path 1: the device on eth1, "member 1") and
// every connection is fused -> fused, host1 sending, host0 receiving. Failover is on
// (SLUICE_FAILOVER unset). Every step opens a fresh connection; every byte is pattern-checked (the
// pattern differs per message index) with guard bytes after it, every receive must complete once
// with its size, and a last small message (the sentinel) must arrive as itself, so that no message
// arrived twice. The failback bounds come from the core's knobs as the run sets them:
// SLUICE_FAILBACK_RETRY_CAP_MS (from the port ACTIVE again to "back": one backoff delay, at most
// the cap, plus one attempt, given kBackSlackMs), SLUICE_FAILBACK_RAMP_MS ("back in full" two ramp
// steps later); member 1's packets rise once the receives posted before "back" are served: by the
// completion of the kCarryWindow-th message past those this host had posted when it saw "back"
// (a count, not a time: the bed's pace swings with its host's load). Each paced stream prints
// its timeline (each phase's start and each transition's INFO line at the time this host saw
// it) and rxe's loss counters. Steps:
//  sender-port    a stream of 4 KiB .. 4 MiB messages (log-uniform by message index, the first at
//                 4 MiB; every other receive posted at 4 MiB so that it is striped, the others at
//                 their size, whole on one path below SLUICE_STRIPE_MIN), kWindow in flight, paced
//                 by the clock, not by message counts: a flap cycle is SLUICE_TEST_FLAP_MS (4000).
//                 After half a cycle (and 2 x kWindow messages: past the connection's warm-up)
//                 host1 takes its eth1 down for a quarter of a cycle, then up (port ACTIVE and its
//                 GID back), three times on the same comm. A down phase lasts until the actor
//                 completed kMinDownDone messages posted after the link went down (the replay of
//                 what path 1 had in flight may take longer than a quarter cycle on the bed's one
//                 link; the other host completes the same messages within milliseconds), an up
//                 phase at least three quarters of a cycle and until the actor logged "back in
//                 full" a quarter of a cycle ago and completed its carry window (the last: half a
//                 cycle, for the share below). Phases: before, then down k / up k per flap, then
//                 drain (the end's word to the sentinel); per phase each member's packet counters
//                 are read on both hosts and printed with the messages, MB/s and the longest wait
//                 between two completions. No call may fail. Per flap and host: a message completed
//                 while down; host1's eth1 member sent at most max(1 % of the eth0 member's,
//                 kSlackPackets) while down; "failed over" logged; after up, member 1 carries again
//                 on the same comm: the INFO line "back (epoch" within the back bound, member 1's
//                 packet counter (host1 sent, host0 received) up kCarryPackets within the carry
//                 window, "back in full" within the full bound. Before the first flap both members
//                 carried (each >= 10 % of host1's packets); in the last up phase member 1's share
//                 of the packets is > 25 % of its weight's share. Printed per flap and summed up as
//                 median and min-max over the flaps, one line each: "stall per failover" (the
//                 longest wait between completions from the link down until this host saw "back"),
//                 "stall per failback" (the same from "back" to the end of the up phase: the path's
//                 return and ramp; a wait across an edge counts on both sides of it), the times
//                 from link up to "back", to member 1 carrying and to "back in full", and the
//                 bandwidth before, during (down) and after (up).
//  receiver-port  the same with host0 (the receiver) taking its eth1 down and up: host1's port
//                 stays ACTIVE, so its attempts come by backoff (at most the cap apart) and host0
//                 refuses each at once with a FENCE while its port is down.
//  fence          no late write: path 1's packets delayed so that they reach host0 after the
//                 failover. From the start host0 redirects the RoCE packets arriving on its eth1
//                 through an ifb device with netem (no delay); after 2 x kWindow messages it sets
//                 the delay to kDelayMs (1 s; tc runs in a thread of its own while the stream goes
//                 on); 300 ms later host1 takes its eth1 down (the failover: both sides fence
//                 path 1 and host1 replays on path 0), 1.3 s later host0 removes the delay (every
//                 delayed packet has arrived) and host1 takes eth1 up; the stream runs on until
//                 "back in full". (The delay sits at host0: a netem on host1's eth1 loses its queue
//                 when host1 takes eth1 down, so no late packet would arrive;
//                 SLUICE_TEST_FENCE_DELAY=sender puts it there anyway, as a control.) host0 keeps
//                 2 x kWindow receive buffers, each re-posted (same memory) for the next receive
//                 into it once the window allows, fills each whole buffer with the guard byte
//                 before posting it and counts every byte that is not what the message left there
//                 (its pattern over its size, the guard byte over the rest of the buffer): at its
//                 completion, again just before the buffer is re-posted (after kWindow more
//                 completions) and at the end of the run. Prints "fence check: N buffers re-posted,
//                 L late bytes" and how many RoCE packets of path 1 reached host0 after its fence
//                 (and how many of them rxe1 counted as received); L must be 0, and (delay at
//                 host0) that count above 0, else the fence was not exercised. Also "back (epoch"
//                 within the back bound after eth1 up.
//  idle           a fresh connection, 2 messages, then nothing in flight: host1 takes eth1 down,
//                 both wait 2 s, then 8 messages of 4 KiB .. 4 MiB arrive verified and host1's eth1
//                 member sent no packet meanwhile; eth1 up.
//  silent         a stream of SLUICE_TEST_FAILOVER_MESSAGES (300) random messages; after a third
//                 host1 drops every RoCE packet arriving on its eth1 (tc ingress filter, UDP dport
//                 4791: no port event), kept to the end. The stream completes verified (failover by
//                 RC retries exhausted or the progress watchdog, run with short NCCL_IB_TIMEOUT /
//                 NCCL_IB_RETRY_CNT); the time from the filter to the first completion after it and
//                 the longest wait are printed, the wait bounded by detection (RC bound, else the
//                 watchdog's) + 2 polls + kMoveMs; in the last third the eth1 member sent at most
//                 the slack.
//  all-gone       4 MiB messages, kWindow in flight; after 3 host1 drops every RoCE packet arriving
//                 on eth0 and eth1 (the side and kept sockets are TCP: untouched). host1's comm
//                 must fail within SLUICE_TEST_ALL_GONE_MS (20000) of the filters with a WARN
//                 naming every path ("path 0: ", "path 1: "); host0's pending receive must fail too
//                 (the failure notice), within that bound + 5 s. Filters removed, both close.
// init gets a profiler callback and every isend / irecv a step handle, as NCCL gives them with no
// profiler plugin loaded (nccl_profiler_default.h; SLUICE_TEST_PROFILER=loaded|off changes it): the
// plugin's profiler branch runs through every failover and replay (issue 31); the run ends with a
// check that the plugin called the callback.
//
// Each invocation starts with a verified warm-up connection (opened and closed) and ends with the
// process's fds, QPs, CQs and MRs back at the count taken after it. A step whose data path failed
// (an error, a byte wrong outside the fence check, a wait past SLUICE_TEST_DEADLINE_S) ends the
// run; one whose checks failed after it ended cleanly (a bound, a counter, a log line, late bytes)
// lets the next steps run, so one boot reports every step, and the exit status is the first
// failure's.
// The test is split in files: plugin_failover_harness.h (what the steps share; its .cc: the plain
// stream and the printing), plugin_failover_paced.cc (the paced stream), plugin_failover_flaps.cc
// (sender-port, receiver-port), plugin_failover_steps.cc (fence, idle, silent, all-gone),
// plugin_failover_eager.cc (eager: its own comment says what it checks); this file runs the steps.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bed_resources.h"
#include "nccl_profiler_default.h"
#include "plugin_failover_harness.h"

namespace nettest::failover {
namespace {

int run(int host, const std::string& steps) {
  g_host = host;
  g_keep_info = true;
  Ctx x;
  x.host = host;
  const char* a2 = std::getenv("SLUICE_BED_ADDR2");
  if (a2 == nullptr || std::getenv("SLUICE_BED_PEER_ADDR") == nullptr)
    return fail(2, "not in the two-host bed with two links (SLUICE_BED_ADDR2 unset)");
  x.addr2 = a2;
  x.side = side_socket(host, kSidePort);
  if (x.side < 0) return fail(3, "no side connection");
  // As NCCL calls it: a profiler callback at init (NCCL's own, no profiler plugin loaded) and a
  // step handle with every isend / irecv (nccl_profiler_default.h; SLUICE_TEST_PROFILER).
  nccl_profiler::attach(x.n, nccl_profiler::Mode::kDefault);
  if (x.n.init(0x2420 + host) != ncclSuccess) return fail(2, "init: " + last_warn());
  if (std::string e = fuse(x); !e.empty()) return fail(2, "fusion: " + e);
  // Warm-up: a verified fused connection, opened and closed, then the resource baseline.
  {
    if (!sync(x, 'w')) return fail(3, "sync");
    void* comm = nullptr;
    if (std::string e = open_comm(x, &comm); !e.empty()) return fail(4, "warm-up: " + e);
    RegBuf buf;
    if (!buf.allocate(&x.n, comm, kWindow * kSlot)) return fail(4, "regMr");
    Run r;
    if (std::string e = stream(
            x, comm, buf, fixed_msgs(0, {kMaxMsg, 4096, 65537, kSentinel}, false), {}, false, &r);
        !e.empty())
      return fail(4, "warm-up: " + e);
    buf.reset();
    if (close_comm(x, comm) != ncclSuccess) return fail(4, "warm-up close");
  }
  if (!sync(x, 'W')) return fail(3, "sync");
  const Resources base = Resources::now();
  size_t at = 0;
  int step = 0;
  while (at <= steps.size()) {
    const size_t comma = std::min(steps.find(',', at), steps.size());
    const std::string s = steps.substr(at, comma - at);
    at = comma + 1;
    ++step;
    const auto t = Clock::now();
    int rc = 0;
    if (s == "sender-port") {
      rc = step_flaps(x, step, "sender-port", 1);
    } else if (s == "receiver-port") {
      rc = step_flaps(x, step, "receiver-port", 0);
    } else if (s == "fence") {
      rc = step_fence(x, step);
    } else if (s == "idle") {
      rc = step_idle(x, step);
    } else if (s == "silent") {
      rc = step_silent(x, step);
    } else if (s == "eager") {
      rc = step_eager(x, step);
    } else if (s == "all-gone") {
      rc = step_all_gone(x, step);
    } else if (s == "hold-rq") {
      rc = step_hold_rq(x, step);
    } else if (s == "create-fail") {
      rc = step_create_fail(x, step);
    } else if (s == "old-peer") {
      rc = step_old_peer(x, step);
    } else {
      return fail(2, "unknown step '" + s +
                         "' (sender-port, receiver-port, fence, idle, silent, eager, all-gone, "
                         "hold-rq, create-fail, old-peer)");
    }
    std::fprintf(stderr, "host%d: step %s: exit %d after %.1f s\n", host, s.c_str(), rc,
                 double(ms_since(t)) / 1000);
    if (rc != 0) return rc;
  }
  const std::string leak = Resources::now().diff(base);
  if (!leak.empty()) return fail(9, "not back to the baseline after the steps:" + leak);
  std::fprintf(stderr, "host%d: %s\n", host, nccl_profiler::summary().c_str());
  if (const std::string e = nccl_profiler::check(true); !e.empty()) return fail(9, e);
  if (x.n.finalize() != ncclSuccess) return fail(9, "finalize");
  close(x.side);
  if (g_failed != 0) {
    std::fprintf(stderr, "host%d: fds/QP/CQ/MR back to the baseline; FAILED (%d): see above\n",
                 host, g_failed);
    return g_failed;
  }
  std::fprintf(stderr, "host%d: fds/QP/CQ/MR back to the baseline; PASS\n", host);
  return 0;
}

}  // namespace
}  // namespace nettest::failover

int main(int argc, char** argv) {
  if (argc != 3 || (std::string(argv[1]) != "0" && std::string(argv[1]) != "1"))
    return std::fprintf(stderr, "usage: %s 0|1 STEP[,STEP...]\n", argv[0]), 2;
  return nettest::failover::run(std::atoi(argv[1]), argv[2]);
}
