// The harness of plugin_failover_two_host (tests/rdma/plugin_failover_two_host.cc says what each
// step checks): the fused device of each VM and its two members, the side socket, the plain
// stream (faults at message counts, plugin_failover_harness.cc) and the paced stream (faults at
// times, plugin_failover_paced.cc), the marks and phases they take with each member's packet
// counters, the failback bounds the run's knobs give, and the lines they print. The steps:
// plugin_failover_flaps.cc (sender-port, receiver-port) and plugin_failover_steps.cc (fence, idle,
// silent, all-gone).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "bed_link.h"
#include "bed_stream.h"
#include "bed_tc.h"
#include "plugin_bed.h"
#include "side_channel.h"

namespace nettest::failover {

using std::chrono::milliseconds;

inline constexpr uint16_t kSidePort = 47125;
inline constexpr int kTag = 31;
// A failover's wait between two completions beyond detection: the replay and the messages queued
// on the path left (a window of 8 x 4 MiB at ~5 MB/s, the bed's one link) move meanwhile.
inline constexpr long long kMoveMs = 10000;
inline constexpr long long kMarginMs = 5000;  // scheduling margin (two TCG VMs on a loaded host)

inline int g_host = -1;

inline int fail(int code, const std::string& what) {
  std::fprintf(stderr, "host%d: FAILED (%d): %s\n", g_host, code, what.c_str());
  return code;
}

// A check that failed after its step ended cleanly (both hosts in step, the comm closed): the
// steps after it still run, so that one boot reports them all; the exit status is the first's.
inline int g_failed = 0;
inline int failed_check(int code, const std::string& what) {
  fail(code, what);
  if (g_failed == 0) g_failed = code;
  return 0;
}

// ---- Kept INFO lines (the plugin's transitions) ------------------------------------------------

// Arrays, not pointers: one object in every file, so that Seen::what compares by its address.
inline constexpr char kFailedOver[] = "failed over";
inline constexpr char kFenced[] = "fenced on both sides";

// An INFO line of a failover transition.
inline bool is_transition(const std::string& l) {
  for (const char* t : {kFailedOver, kFenced, "recovering", "recovery attempt", "checked one way",
                        "back (epoch", "back in full", "fence did not complete"})
    if (contains(l, t)) return true;
  return false;
}

// Prints the failover transitions the plugin logged since `from`.
void print_transitions(const char* step, size_t from);

// Each host logged both transitions at INFO since `from`.
std::string logged_transitions(size_t from);

// ---- Links (bed_link.h), the fused device, the side socket, connections ----------------------

// bed_link.h's set_link, this VM's name in the line it prints.
inline bool set_link(const std::string& ifname, bool up) {
  return nettest::set_link(g_host, ifname, up);
}

// Per member: [0] the device on eth0 (kept), [1] the device on eth1 (taken down).
struct Ctx {
  int host = -1;
  int side = -1;
  Net n{12};
  int vdev = -1;
  Props m[2];
  int path[2] = {-1, -1};  // the member's index in the fused device: its path
  std::string netdev[2];
  std::string addr2;  // SLUICE_BED_ADDR2: eth1's address, whose GID must come back
  std::string fused;  // the fused device's name ("rxe0+rxe1"), for its logged weights
};

// Each member's packets (bed_link.h). fresh: past ib_core's 10 ms cache of hw_counters; else maybe
// 10 ms old, for the marks of the paced streams, which must not stall the stream they measure.
using Counters = LinkCounters;
inline Counters counters(const Ctx& x, bool fresh = true) {
  return link_counters(x.m, fresh);
}

// NCCL's order of calls: devices, getProperties of each, makeVDevice of the physical ones.
std::string fuse(Ctx& x);

// Both hosts at the same point (side_channel.h).
inline bool sync(const Ctx& x, char tag) {
  return side_sync(x.side, tag);
}

// A fresh fused connection: host0 listens (a listener per connection) and accepts, host1 connects.
// With SLUICE_CM=rdmacm the connection must have been made through rdma_cm (its route's INFO).
inline std::string open_comm(Ctx& x, void** comm) {
  const size_t from = info_size();
  std::string e = open_side_comm(x.n, x.host, x.side, x.vdev, comm);
  const char* cm = std::getenv("SLUICE_CM");
  if (e.empty() && cm != nullptr && std::string(cm) == "rdmacm" &&
      info_with(from, "rdma_cm route for").empty())
    e = "SLUICE_CM=rdmacm, but no INFO \"rdma_cm route for\": not connected through rdma_cm";
  return e;
}
inline ncclResult_t close_comm(Ctx& x, void* comm) {
  return close_side_comm(x.n, x.host, comm);
}

// ---- The stream (bed_stream.h's messages) -----------------------------------------------------

// bed_stream.h's random_msgs of this step, the first at 4 MiB.
inline std::vector<Msg> random_msgs(int step, int count) {
  return nettest::random_msgs(0xfa11 + static_cast<uint64_t>(step), step, count, kTag, true);
}

std::vector<Msg> fixed_msgs(int step, const std::vector<size_t>& sizes, bool striped);

// A point in the stream: when, how far, the counters.
struct Mark {
  bool set = false;
  Clock::time_point t{};
  int done = 0;
  int posted = 0;  // paced streams
  size_t bytes = 0;
  Counters c;
};

// What one host does mid-stream (the other is told by a side byte each: 'D', then 'U').
struct Fault {
  int actor = -1;       // the host that injects it; -1: none
  int inject_at = -1;   // messages done on the actor
  int restore_at = -1;  // -1: never (the mark is still taken, with no action, if >= 0)
  std::function<std::string()> inject, restore;
  // On the told host, when the fault's side byte arrived (after its mark); may be empty.
  std::function<void()> on_told;
  // The actor tells the other host before it injects (else after): the told host's on_told then
  // runs while the actor's inject does.
  bool tell_first = false;
};

enum { kStart, kFault, kRestore, kEnd };
constexpr const char* kPhase[] = {"before", "down", "after"};

struct Run {
  Mark mark[4];
  long long max_gap_ms[3] = {-1, -1, -1};  // longest wait between two completions, per phase
  int done_in[3] = {};
  long long first_after_fault_ms = -1;  // the first completion after the fault mark
  Clock::time_point failed_over_at{}, fenced_at{};
  bool seen_failed_over = false, seen_fenced = false;
  bool comm_failed = false;  // until_error: the plugin returned an error
  std::string comm_error;
  Clock::time_point failed_at{};
};

// Runs `msgs` on `comm` (host1 sends, host0 receives), kWindow in flight, every completion checked
// (its size; on the receiver every byte and the guards); the fault's actor injects it and
// restores it on cue, the other host marks the same points when its side bytes arrive. With
// until_error an error from the plugin ends the stream (run->comm_failed), else it is a failure.
std::string stream(Ctx& x, void* comm, RegBuf& buf, const std::vector<Msg>& msgs, const Fault& f,
                   bool until_error, Run* run);

// After the stream, the told host reads the side bytes it has not seen yet (its stream may end
// first); those marks are then the end's.
std::string catch_up(Ctx& x, const Fault& f, Run* run);

inline long long delta(const Mark& a, const Mark& b, bool sent, int member) {
  return nettest::delta(a.c, b.c, sent, member);
}

// Per phase: messages, bytes, time, rate, and each member's sent / received packets.
void print_run(const Ctx& x, const char* step, const Run& r, const char* names[3]);

// Both members carried on a fresh connection: each >= 10 % of host1's sent packets.
std::string both_carried(const Ctx& x, const Mark& a, const Mark& b);

inline int messages() {
  return static_cast<int>(std::max(24L, env_long("SLUICE_TEST_FAILOVER_MESSAGES", 300)));
}

// Detection of a silent path: RC retries exhausted (rxe: a retry count of 7 never ends), else the
// progress watchdog (core/src/health/progress.h: base + 10 s per MiB of the run, a run <= 1 MiB).
long long silent_detect_ms();
inline long long poll_ms() {
  return env_long("SLUICE_LIVENESS_POLL_MS", 1000);
}

// ---- Paced streams (the flaps, the fence check) ------------------------------------------------
// A stream whose faults come at times, not at message counts: a list of events, each done by one
// host (its actor) a delay after the previous event, and told to the other host by a side byte
// ('A' + its index), which marks it there when it arrives. An event begins a phase; the last one
// ends the stream: its actor, having posted P messages, names the sentinel's index E = P + 2 x
// kWindow and posts no message from P + kWindow on until the other host acknowledged E. Each side
// completes only what the other posted, so the other host has then posted fewer than P + 2 x
// kWindow: message E cannot have gone out as an ordinary one. Messages are chosen by index
// (msg_at), the same on both hosts.

inline constexpr char kBack[] = "back (epoch";
inline constexpr char kCheckedOneWay[] = "checked one way";  // the receiver, waiting for CHECKED
inline constexpr char kOffered[] = "offered epoch";          // the receiver, answering an attempt
inline constexpr char kBackFull[] = "back in full";
// Member 1 carries again once its counter (host1: sent, host0: received) rose this much since the
// link came up: the path check is one packet; a quarter share of one striped 4 MiB message, the
// least a path ramping in carries, is hundreds.
inline constexpr long long kCarryPackets = 64;
inline constexpr int kEndAhead = 2;
inline constexpr int kFlaps = 3;
inline constexpr int kMinDownDone = 2;

// The core's failback knobs as this run sets them (the core's defaults otherwise).
inline long long retry_cap_ms() {
  return env_long("SLUICE_FAILBACK_RETRY_CAP_MS", 30000);
}
inline long long ramp_ms() {
  return env_long("SLUICE_FAILBACK_RAMP_MS", 1000);
}
// From the port ACTIVE again to "back": at most one backoff delay (<= the cap) and one attempt (a
// socket round trip and the fresh QPs' bring-up), given this much on the bed: the offer may need a
// TCP retransmission (the bed loses packets), and on a loaded TCG VM each step takes a while
// (measured up to ~1.6 s for one attempt); "back in full" two ramp steps later (25 % -> 50 % ->
// 100 %). Member 1's packets rise once receives posted after host0's "back" are served (the
// kWindow posted before it complete first): by the completion of message P + kCarryWindow, P the
// messages this host had posted when it saw "back" (host1's sends and host0's receives may be a
// window apart; kCarrySlackMs for the counter's poll and cache), whatever the bed's pace.
inline constexpr long long kBackSlackMs = 3000;
inline constexpr int kCarryWindow = 2 * kWindow;
inline constexpr long long kCarrySlackMs = 100;
inline long long back_bound_ms() {
  return retry_cap_ms() + kBackSlackMs;
}
inline long long full_bound_ms() {
  return back_bound_ms() + 2 * ramp_ms();
}
inline long long cycle_ms() {
  return std::max(1000L, env_long("SLUICE_TEST_FLAP_MS", 4000));
}

// The largest message of the paced streams (msg_at) and the stride of their receive buffers
// (slot_bytes): kMaxMsg (4 MiB) and kSlot for plugin_failover_two_host; the soak
// (plugin_failover_soak.cc) sets 16 MiB before its stream.
inline size_t g_max_msg = kMaxMsg;
inline size_t slot_bytes() {
  return (g_max_msg + kGuard + 4095) / 4096 * 4096;
}

// Message `i` of a paced stream of step `step` whose sentinel is message `end` (-1: not known
// yet): log-uniform 4 KiB .. g_max_msg by a hash of the index (message 0: g_max_msg), every other
// receive posted at g_max_msg (striped), the others at their size; a pattern of its own per index.
Msg msg_at(int step, int i, int end);

struct Event {
  int actor = -1;
  std::string name;        // of the phase it begins
  long long after_ms = 0;  // after the previous event (as this host marked it)
  // Also (unless max_ms passed): "back in full" logged here since the previous event, hold_ms ago
  // (and, after a phase watching member 1, a window of messages completed after "back"); here,
  // min_done messages completed past those posted when the previous event was marked: messages
  // the other host cannot have completed before it (each side completes only what the other
  // posted), so that it completes them too, after the event.
  bool until_full = false;
  long long hold_ms = 0, max_ms = 0;
  int min_done = 0;
  // false: min_done counts the completions since the previous event instead (messages posted
  // before it among them; the soak: a stream that completes while the link is down, without
  // waiting for the whole window posted before the fault).
  bool past_posted = true;
  // Also: min_done completions since this host logged "fenced on both sides" in the phase (the
  // peer failed over too, and the stream goes on over the path left).
  bool from_fence = false;
  bool watch_back = false;   // the phase it begins watches member 1's counter rise
  int watch_member = 1;      // ... or this member's (the soak's eth0 flaps: 0)
  bool carry_window = true;  // until_full after it: also the window of messages after "back";
                             // false: only the member's counter rise (carries_ms)
  // Also the other host's word on its own "back in full" since the previous event: 'F', or 'N'
  // once max_ms passed there without it. It sends exactly one per such event (never both
  // directions at once: the other host is told of this event only after), so that the next fault
  // does not cut the other side's ramp short (the soak).
  bool peer_full = false;
  bool end = false;                  // the last: ends the stream
  std::function<std::string()> act;  // on the actor, before the mark; may be empty
  bool async = false;  // act in a thread of its own while the stream goes on (a fork + exec of
                       // tc takes ~1 s in a loaded TCG VM); the event is due when it returns
};

struct PhaseStat {
  std::string name;
  Mark start;
  long long max_gap_ms = -1;  // longest wait between two completions (the first: since the last
                              // completion of the phase before; none before message 0's)
  int done = 0;
  int gap_to = -1;            // the message whose completion ended the longest wait
  long long gap_end_ms = -1;  // when, since the start
  bool watch_back = false;
  int member = 1;             // the member it watches (Event::watch_member)
  bool carry_window = true;   // Event::carry_window
  long long base1 = -1;       // that member's counter at the start
  long long carries_ms = -1;  // that member's counter rose kCarryPackets, this long after the start
  int back_posted = -1;       // messages posted when this host saw "back (epoch" in the phase
  long long window_ms = -1;   // message back_posted + kCarryWindow completed, this long after start
};

// An INFO transition and when the stream saw it (polled every 10 ms).
struct Seen {
  const char* what;
  Clock::time_point t;
};

struct Flow {
  std::vector<PhaseStat> ph;
  Mark end;
  std::vector<Seen> seen;
  // Every transition's INFO line (an index into g_info) and when the stream saw it; info_end: the
  // first line the stream did not see.
  std::vector<std::pair<Clock::time_point, size_t>> logged;
  size_t info_end = 0;
  // The fence check (thorough receives): buffers re-posted, bytes that were not what the message
  // left there, the first of them described.
  int reposted = 0;
  long long late_bytes = 0;
  std::string late_first;
  // When the first of `what` was seen in [from, to); -1 if never; 0 if before from (by the slack:
  // a told host may see the transition before the side byte of its cause).
  long long first_ms(const char* what, Clock::time_point from, Clock::time_point to,
                     long long slack_ms = 500) const {
    for (const Seen& s : seen) {
      if (s.what != what || s.t >= to || s.t < from - milliseconds(slack_ms)) continue;
      return std::max(0LL, ms_between(from, s.t));
    }
    return -1;
  }
  Clock::time_point phase_end(size_t k) const {
    return k + 1 < ph.size() ? ph[k + 1].start.t : end.t;
  }
  std::vector<Clock::time_point> completions;  // of every message, in order
  // The longest wait between two completions that overlaps [a, b) (a wait that began before a
  // counts, as does one that ended after b); -1 if none.
  long long max_gap(Clock::time_point a, Clock::time_point b) const {
    long long most = -1;
    for (size_t i = 1; i < completions.size(); ++i)
      if (completions[i] > a && completions[i - 1] < b)
        most = std::max(most, ms_between(completions[i - 1], completions[i]));
    return most;
  }
};

// Member `i`'s counter this host watches (host1: sent packets, host0: received), not waiting past
// the counters' cache.
inline long long member_packets(const Ctx& x, int i) {
  const int port = x.m[i].port > 0 ? x.m[i].port : 1;
  return x.host == 1 ? device_sent_packets(x.m[i].name, port)
                     : device_rcvd_packets(x.m[i].name, port);
}

// rxe's counters of lost packets and their recovery, per member: retransmission sequences started
// by the requester (after the RC timeout or a NAK), NAKs for a sequence error received, requests
// out of sequence seen by the responder, RNR NAKs received and sent. Printed per paced stream as
// context for a long wait: the bed loses packets, and a lost last packet (no later one to draw a
// NAK) waits out the RC timeout (4.3 s at NCCL_IB_TIMEOUT=20).
inline constexpr const char* kLossNames[] = {"completer_retry_err", "rcvd_seq_err",
                                             "out_of_seq_request", "rcvd_rnr_err", "send_rnr_err"};
inline constexpr int kLosses = 5;
struct Losses {
  long long v[2][kLosses] = {};
};
Losses losses(const Ctx& x);
void print_losses(const Ctx& x, const char* step, const Losses& a, const Losses& b);

// Runs the paced stream on `comm` (host1 sends, host0 receives), kWindow in flight over `nslots`
// buffers of buf (message i in buffer i % nslots), the events on cue. Every completion checked:
// its size; on the receiver every byte and the guards. thorough (the fence check): each receive
// buffer is filled whole with the guard byte before it is posted, and checked whole at the
// receive's completion, before the buffer is re-posted and at the end, wrong bytes counted in
// flow->late_bytes rather than ending the stream. at_fence runs once when this host first logs
// "fenced on both sides", at_phase after the mark of each phase it begins.
std::string paced_stream(Ctx& x, void* comm, RegBuf& buf, int step, int nslots, bool thorough,
                         const std::vector<Event>& ev, Flow* flow,
                         const std::function<void()>& at_fence = {},
                         const std::function<void(size_t)>& at_phase = {});

// The phases and the plugin's transitions in the order this host saw them, each at its time since
// the stream began (transitions: when the stream's 10 ms poll found them); then any transition
// logged after the stream.
void print_timeline(const char* step, const Flow& f);

// Per phase: messages, bytes, time, rate, the longest wait, each member's sent / received packets.
double phase_mbps(const Flow& f, size_t k);
void print_phases(const Ctx& x, const char* step, const Flow& f);

// After a paced stream: its timeline, its phases and rxe's loss counters since l0.
void print_paced(const Ctx& x, const char* step, const Flow& f, const Losses& l0);

// "median M unit, min-max A-B unit over N flaps" (values < 0: "never" counted apart).
std::string spread(std::vector<double> v, const char* unit, int prec = 0);

// The LinkGuard'ed eth1 taken down and up again by its host; up waits for the port ACTIVE with
// its GID (from that point the failback bound runs).
struct Eth1 {
  Ctx& x;
  const char* step;
  LinkGuard guard;
  Eth1(Ctx& c, const char* s) : x(c), step(s), guard{c.netdev[1], false, c.host} {}
  std::string down();
  std::string up();
};

// member 1's share of the packets between two marks (this host's counter) against its weight's.
struct Share {
  double pct = -1, weight_pct = -1;
};
Share final_share(const Ctx& x, const Mark& a, const Mark& b);

// ---- Steps ------------------------------------------------------------------------------------
// Each returns 0, or the exit status of a failure that ends the run (failed_check: one that lets
// the next steps run). `step` is the step's index in the run.

// plugin_failover_flaps.cc: sender-port (actor 1), receiver-port (actor 0); nflaps flaps of the
// actor's eth1 on one comm (kFlaps for those two steps).
int step_flaps(Ctx& x, int step, const char* name, int actor, int nflaps = kFlaps);
// plugin_failover_defects.cc (issue 31): hold-rq (the receive queue's half of the fence, with
// SLUICE_TEST_HOLD_RQ on the receiver), create-fail (SLUICE_TEST_FAILBACK_CREATE_FAILS on the
// sender: failback's first QP creation fails), old-peer (one host at SLUICE_TEST_PATH_MSG_SET=1).
int step_hold_rq(Ctx& x, int step);
int step_create_fail(Ctx& x, int step);
int step_old_peer(Ctx& x, int step);
// plugin_failover_steps.cc.
int step_fence(Ctx& x, int step);
int step_idle(Ctx& x, int step);
int step_silent(Ctx& x, int step);
// plugin_failover_eager.cc: eager (small messages on both paths, host1's eth1 down and up).
int step_eager(Ctx& x, int step);
int step_all_gone(Ctx& x, int step);

}  // namespace nettest::failover
