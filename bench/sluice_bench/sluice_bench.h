// sluice-bench internals: the wire between the two sides and the tests each side runs.
// The initiator (the local parent, or --client) runs the plan and prints; the peer (the forked
// child, or --server) executes the passive half of each command and reports its own numbers.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "../common/bootstrap.h"
#include "../common/net.h"
#include "../common/util.h"

namespace bench {

enum class Op : uint32_t {
  kBw = 1,
  kLat,
  kConn,
  kRawBw,
  kRawLat,
  kQuit,
  kRawSendLat,
  kScaleUp,    // scale: open N idle pairs (initiator sends, peer receives), post a receive each
  kScaleDown,  // scale: a verified message on each idle pair, then close them all
};

// Cmd::flags
constexpr uint32_t kCountWire = 1;  // read the device's packet counter around the timed phase
constexpr uint32_t kPrePost = 2;    // latency: receives posted `window` ahead (NCCL's proxy)
constexpr uint32_t kCallCpu = 4;    // time every isend / irecv / test on the thread's CPU clock

// One command from the initiator to the peer. Plain data: it travels as bytes.
struct Cmd {
  Op op;
  uint32_t window;
  uint32_t nconns;
  uint32_t verify;
  uint64_t size;
  uint64_t iters;
  uint64_t warmup;
  int32_t raw_port;
  int32_t gid_index;  // -1 = let perftest choose
  int32_t tx_depth;   // 0 = perftest default
  int32_t slots;      // buffer slots per connection (0 = one per request in flight)
  uint32_t flags;     // kCountWire | kPrePost
  uint32_t pad;
  double timeout_s;
};

// What one side measured (sent by the peer, filled locally by the initiator).
struct SideStats {
  double elapsed_s = 0;
  double user_s = 0, sys_s = 0;
  double close_s = 0;
  uint64_t rss_before = 0, rss_after = 0;
  int64_t qps = 0, cqs = 0, cqes = 0, mrs = 0, pds = 0;
  int32_t verbs_valid = 0;
  // conn: rdma_cm event channels this process held with every connection up (SLUICE_CM=rdmacm:
  // one per comm; oob: none), which tells the connection manager the plugin really used.
  int32_t cm_channels = 0;
  uint64_t bad_bytes = 0;  // verification failures (bytes that differ) + size mismatches
  uint64_t messages = 0;
  // kCountWire: packets this side's device sent over the counted phase (wire_valid = 0: no
  // counter). The plugin's own statistics over the same phase (ext_valid = 0: no sluiceExt_v1).
  int32_t wire_valid = 0;
  int32_t ext_valid = 0;
  uint64_t wire_pkts = 0;
  uint64_t wrs = 0, doorbells = 0, cts_writes = 0, ext_messages = 0;
  // sluiceExt_v2 over the same phase, summed over this side's comms and their members (rails):
  // payload bytes, completions polled, and the post-to-completion histogram (log2 ns buckets).
  int32_t ext2_valid = 0;
  int32_t members = 0;
  char member0[32] = {};  // the first member's device name
  uint64_t bytes = 0, completions = 0;
  // Per member (a fused device's; index m of each comm's commStatsV2, summed over the comms).
  static constexpr int kMembers = 4;
  char member_name[kMembers][32] = {};
  uint64_t member_bytes[kMembers] = {}, member_completions[kMembers] = {};
  uint64_t latency[SLUICE_EXT_LATENCY_BUCKETS] = {};
  // Failover (sluiceExt_v2's paths), at the end of the phase, per local member of the paths:
  // the worst state over the comms (SLUICE_PATH_*), failovers and failbacks summed, bytes the
  // sender replayed summed, the longest last stall (-1: none). failover_on: some comm fails over.
  int32_t failover_on = 0;
  int32_t member_state[kMembers] = {};
  uint32_t member_failovers[kMembers] = {}, member_failbacks[kMembers] = {};
  uint64_t member_replayed[kMembers] = {};
  int64_t member_stall_ms[kMembers] = {-1, -1, -1, -1};
  // kCallCpu: the plugin calls of the timed phase and their thread CPU time (Net::CallCpu).
  uint64_t calls[3] = {}, call_ns[3] = {};  // isend, irecv, test
};

struct Options {
  enum Role { kLocal, kServer, kClient } role = kLocal;
  std::string addr, client_host;
  int port = 18600;
  std::string dev0, dev1, dev;
  std::string plugin;
  std::set<std::string> tests = {"bw", "rate", "lat", "agg", "conn"};
  uint64_t min_size = 8, max_size = 64ull << 20;
  double step = 2;
  uint32_t window = 8;
  uint64_t bytes_per_size = 256ull << 20;
  uint64_t iters_min = 16, iters_max = 10000, iters_fixed = 0;
  double warmup_frac = 0.1;
  uint64_t rate_max = 4096;
  uint32_t rate_window = 32;
  std::vector<uint64_t> lat_sizes = {8};
  uint64_t lat_iters = 2000;
  bool lat_jit = true, lat_prepost = true;  // --lat-modes
  uint32_t lat_ahead = 8;                   // receives posted ahead in the pre-posted mode
  uint32_t conns = 4;
  std::vector<uint64_t> agg_sizes = {64 << 10, 1 << 20, 8 << 20};
  uint32_t conn_count = 256;
  bool verify = false;
  int slots = 0;
  bool compare_raw = false;
  int gid_index = 0;
  int raw_port = 18515;
  int raw_tx_depth = -1;  // -1: the test's window; 0: perftest's default (128)
  std::string raw_dev0, raw_dev1, raw_dev;
  std::string csv, json;
  double timeout = 120;
  bool quiet = false;
  uint32_t reps = 1;  // every timed figure (Sluice and perftest) this many times
  bool count = true;  // packets on the wire and WRs per message (first repetition)
  std::string label;  // printed in the header and the JSON (e.g. "NCCL_IB_QPS_PER_CONNECTION=4")
  // scale: idle connection pairs per row, connects in flight per round, streaming messages and
  // ping-pongs on the active pair, repetitions of those, exact per-connection counts to check.
  std::vector<uint64_t> scale_pairs = {0, 1000};
  uint32_t scale_inflight = 128;  // NCCL_CONNECT_ROUND_MAX_PEERS
  uint64_t scale_iters = 2000, scale_lat_iters = 500;
  uint32_t scale_reps = 3;
  uint64_t scale_mem_floor_mib = 256;  // the set-up stops when MemAvailable falls under it
  std::string scale_expect;            // --scale-expect, e.g. "fds=1/1,qps=1/1,cqs=1/1"
  // --nofile SOFT[:HARD]: RLIMIT_NOFILE of both processes before the plugin's init (0 = as is).
  uint64_t nofile_soft = 0, nofile_hard = 0;
  std::string profile = "none";  // --profile none|default|count: init's profiler callback
  std::string trace;             // --trace FILE: Chrome trace of every work request (profile.h)
  std::string trace_lib;         // --trace-profiler LIB (default: the built one)
};

// Everything a side needs to run its half.
struct Side {
  Net* net;
  int dev;
  Channel* ch;
  std::string raw_dev;  // perftest -d value
  int raw_ib_port;      // perftest -i value (0 = default)
  std::string hw_dev;   // the verbs device and port whose packet counter this side reads
  int hw_port;
};

// The device's "packets sent" counter: rxe's hw_counters/sent_pkts, else the port's
// counters/port_xmit_packets (a real NIC; shared with any other traffic on that port).
struct WireCounter {
  bool ok = false;
  uint64_t value = 0;
  std::string source;  // the sysfs file read, or why none could be
  static WireCounter read(const std::string& dev, int port);
};
// Sleeps long enough for the last ACKs of a phase to leave the device, then reads its counter.
WireCounter settle_and_read(const Side& s);

// Latency samples of the initiator (half round trips, microseconds, sorted).
struct LatResult {
  SideStats self, peer;
  std::vector<double> half_rtt_us;
};

// --spin: poll without ever yielding the CPU (default: yield after a run of idle polls).
extern bool g_pure_spin;
// --idle-sleep US: bandwidth loops sleep US microseconds instead of yielding after a run of idle
// polls.
extern int g_idle_sleep_us;

// Bandwidth: the initiator sends, the peer receives.
SideStats bw_send(Side& s, const Cmd& c);
SideStats bw_recv(Side& s, const Cmd& c);
// Ping-pong: initiator pings, peer pongs.
LatResult lat_ping(Side& s, const Cmd& c);
SideStats lat_pong(Side& s, const Cmd& c);
// Connection setup cost: initiator connects (and reports the wall time of the whole setup),
// peer listens/accepts.
SideStats conn_connect(Side& s, const Cmd& c);
SideStats conn_accept(Side& s, const Cmd& c);

// perftest ---------------------------------------------------------------------------------------
struct RawBw {
  bool ok = false;
  std::string error;
  double peak_gbs = 0, avg_gbs = 0, mpps = 0;
};
struct RawLat {
  bool ok = false;
  std::string error;
  double min_us = 0, max_us = 0, typical_us = 0, avg_us = 0, p99_us = 0;
};
// Parsers for perftest's result lines (exposed for the self-test).
RawBw parse_ib_write_bw(const std::string& out);
RawLat parse_ib_write_lat(const std::string& out);  // ib_send_lat prints the same columns
// The perftest tool of a raw command (ib_write_bw, ib_write_lat, ib_send_lat).
const char* raw_tool(Op op);
// The server half (peer): starts perftest's server, tells the initiator, waits for it to end.
// With kCountWire, its device's packets over the whole perftest run.
SideStats raw_serve(Side& s, const Cmd& c);
// The client half (initiator); *wire gets this side's packets when kCountWire.
RawBw raw_bw_client(Side& s, const Cmd& c, const std::string& peer_addr, SideStats* wire);
RawLat raw_lat_client(Side& s, const Cmd& c, const std::string& peer_addr, SideStats* wire);

// The initiator: runs the plan against the peer, prints the tables and the targets, writes
// CSV/JSON. Returns the number of bad bytes seen (verification failures on either side).
uint64_t initiate(const Options& o, Side& s, Net& net, const std::string& peer_addr,
                  const std::string& sender_name, const std::string& receiver_name);

// scale (scale.cc): the peer's halves of kScaleUp / kScaleDown (they reply on the channel
// themselves), and the initiator's plan with its tables.
void scale_serve(Side& s, const Cmd& c);
void scale_run(const Options& o, Side& s, std::vector<Table>* tables, uint64_t* failures);

// Verification pattern: 8-byte words derived from (stream, seq, word index).
void fill_pattern(void* p, size_t n, uint64_t stream, uint64_t seq);
uint64_t check_pattern(const void* p, size_t n, uint64_t stream, uint64_t seq);

}  // namespace bench
