// sluice-bench's scale test (scale.cc: both sides' set-up and teardown of the idle pairs;
// scale_report.cc: the initiator's plan, its tables and the per-call costs). Plain data only
// crosses the control channel.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sluice_bench.h"

namespace bench {

constexpr size_t kScaleSlot = 64;  // each idle pair's message, in its own slot
constexpr uint64_t kScaleVerifySeq = 0x5ca1e;

// One side's word on a phase (set-up round, verification): how many it finished, and its error.
struct ScaleMsg {
  uint32_t done = 0;
  int32_t err = 0;  // 1: failed here; 2: stopped because the other side failed
  char what[480] = {};
};

// This process's resources: /proc/self/status VmRSS, VmPin, VmLck (bytes), open fds, and its verbs
// objects as `rdma resource show` counts them; and the machine's available memory.
struct ScaleSnap {
  int64_t rss = 0, pin = 0, lck = 0;
  // Of rss: the pages of /proc/self/smaps mappings of /dev/infiniband/* (the NIC's queues the
  // provider maps: QPs, CQs; what the send and receive queue depths cost).
  int64_t rss_verbs = 0;
  int64_t mem_available = 0;  // /proc/meminfo MemAvailable (bytes): the whole machine's
  int32_t fds = 0;
  int32_t verbs_valid = 0;
  int64_t qps = 0, cqs = 0, mrs = 0, pds = 0;
  // This process's TCP sockets whose keepalive timer runs (the plugin runs one per peer host).
  int32_t keepalive = 0;
  int32_t listening = 0;  // and those listening (the plugin shares one per address)
  // The network namespace's TCP connections opened so far (/proc/net/snmp Tcp: ActiveOpens,
  // PassiveOpens): a connect to a process the plugin already has a peer link to opens none.
  int64_t tcp_active = -1, tcp_passive = -1;
};
struct TcpCounts {
  int32_t keepalive = 0, listening = 0;
};
TcpCounts tcp_counts();
ScaleSnap scale_snap();
// What is not back at `base` ("fds 12 -> 13, qps 4 -> 6"); "" when all is.
std::string scale_leak(const ScaleSnap& base, const ScaleSnap& now);

// A side's figures for one N.
struct ScaleReport {
  uint64_t pairs = 0, up = 0;
  int32_t failed = 0;  // the set-up stopped (error says why)
  int32_t closed = 0;
  char error[960] = {};
  uint64_t nofile_soft = 0, nofile_hard = 0;  // RLIMIT_NOFILE at the set-up (after the init)
  // Receiver: the first round's listens, all open at once, and the listening sockets they held.
  int32_t round_listens = 0, round_listening = 0;
  double establish_s = 0, dereg_s = 0, close_s = 0;
  // Before the set-up; every pair up; a receive posted on each (and each comm's slot registered);
  // after the close.
  ScaleSnap snap_base, snap_up, snap_idle, snap_closed;
  uint64_t verified = 0;  // receiver: messages that arrived right; sender: messages sent
  // The idle comms by where they stand with the eager path after the verified message
  // (sluiceCommStats_v2_t::eager: index SLUICE_EAGER_OFF .. SLUICE_EAGER_WITHOUT); eager_unread:
  // comms whose statistics could not be read (a plugin without sluiceExt_v2).
  uint64_t eager[4] = {};
  uint64_t eager_unread = 0;
  uint64_t bad = 0;  // receiver: wrong bytes and wrong sizes
  int32_t verify_failed = 0;
  char verify_error[960] = {};
};

ScaleReport scale_up(Side& s, const Cmd& c, bool receiver);
ScaleReport scale_down(Side& s, const Cmd& c, bool receiver);

}  // namespace bench
