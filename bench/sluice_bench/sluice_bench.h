// sluice-bench internals: the wire between the two sides and the tests each side runs.
// The initiator (the local parent, or --client) runs the plan and prints; the peer (the forked
// child, or --server) executes the passive half of each command and reports its own numbers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "../common/bootstrap.h"
#include "../common/net.h"
#include "../common/util.h"

namespace bench {

enum class Op : uint32_t { kBw = 1, kLat, kConn, kRawBw, kRawLat, kQuit };

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
  int32_t pad = 0;
  uint64_t bad_bytes = 0;  // verification failures (bytes that differ) + size mismatches
  uint64_t messages = 0;
};

// Everything a side needs to run its half.
struct Side {
  Net* net;
  int dev;
  Channel* ch;
  std::string raw_dev;  // perftest -d value
  int raw_ib_port;      // perftest -i value (0 = default)
};

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
RawLat parse_ib_write_lat(const std::string& out);
// The server half (peer): starts perftest's server, tells the initiator, waits for it to end.
void raw_serve(Side& s, const Cmd& c, bool lat);
// The client half (initiator).
RawBw raw_bw_client(Side& s, const Cmd& c, const std::string& peer_addr);
RawLat raw_lat_client(Side& s, const Cmd& c, const std::string& peer_addr);

// Verification pattern: 8-byte words derived from (stream, seq, word index).
void fill_pattern(void* p, size_t n, uint64_t stream, uint64_t seq);
uint64_t check_pattern(const void* p, size_t n, uint64_t stream, uint64_t seq);

}  // namespace bench
