// sluice-bench: Sluice through its exported ncclNetPlugin_v12 table (v11 when it has none), side
// by side with perftest.
// See docs/benchmarks.md for the columns and how to run it.
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "../common/profile.h"
#include "sluice_bench.h"

namespace bench {
namespace {

const char* kUsage = R"(usage: sluice-bench [options]

Drives the Sluice NCCL net plugin only through its exported ncclNetPlugin_v12 table (v11 if it has
none; dlopen, as NCCL does), in two processes: locally (default: this process forks its peer; sender on --dev0,
receiver on --dev1) or across two machines (--server on one, --client HOST on the other).

Roles
  (none)                 local run: fork a peer process on this machine
  --server               wait for a --client (two machines); serves one run, then exits
  --client HOST          run the plan against the --server at HOST
  --addr A --port P      control socket address/port (server binds A, default 0.0.0.0; port 18600)
Devices
  --dev0 D / --dev1 D    local run: sender / receiver device, by plugin index or name
                         (defaults: 0 and 1 when the plugin has two devices, else 0 and 0)
  --dev D                --server / --client: this side's device (default 0)
  --fuse A,B             fuse devices A and B (names or indexes) with makeVDevice in each process
                         first, as NCCL does; then name the fused device "A+B" in --dev0/--dev1/--dev
  --plugin P             plugin path or name (default: $NCCL_NET_PLUGIN, else the built one)
Tests (--tests LIST, comma separated; default bw,rate,lat,agg,conn)
  bw     bandwidth sweep, one connection, --window requests in flight
  rate   message rate at small sizes (--rate-max, --rate-window)
  lat    half round trip (ping-pong) at --lat-sizes, in --lat-modes
  agg    aggregate bandwidth over --conns connections at once, at --agg-sizes
  conn   time to establish --conn-count connections; memory and verbs objects per connection
  scale  (not in the default or `all`) for each N in --scale-pairs: N idle connection pairs
         (sender -> receiver, set up as NCCL does: one thread a side, rounds of --scale-inflight
         connects, closeListen after each accept; each idle receive comm with a receive posted),
         then on one more, active pair: 8 B streaming and ping-pong, --scale-reps times, with
         the thread CPU time of every isend / irecv / test; time to establish and to close;
         RSS, pinned memory, fds, QPs, CQs, MRs per connection; one verified message on every
         idle pair; every fd and verbs object back at the baseline after the close
Sizes and iterations
  -b, --min-size S       smallest bw size (default 8)        -e, --max-size S   largest (64M)
  -f, --step F           size multiplier (default 2)
  -w, --window N         requests in flight per connection (default 8, NCCL's proxy steps)
  --bytes-per-size S     iterations = bytes/size, clamped to [--iters-min, --iters-max]
                         (default 256M, 16, 10000); --iters N forces N for every size
  --warmup-frac F        warm-up iterations as a fraction of the timed ones (default 0.1)
  --rate-max S           rate sweep 8 B .. S by --step (default 4K); --rate-window N (default 32)
  --lat-sizes LIST       (default 8); --lat-iters N (default 2000)
  --lat-modes M          jit (receive posted just before it is needed, today's), preposted
                         (--lat-ahead N receives kept posted ahead, NCCL's proxy; default 8)
                         or both (default jit,preposted)
  --conns K              agg: connections (default 4); --agg-sizes LIST (default 64K,1M,8M)
  --conn-count N         conn: connections to establish (default 256)
  --scale-pairs LIST     scale: idle pairs per row (default 0,1000)
  --scale-inflight N     scale: connects in flight per round (default 128, NCCL's
                         NCCL_CONNECT_ROUND_MAX_PEERS)
  --scale-iters N        scale: 8 B messages streamed per repetition (default 2000)
  --scale-lat-iters N    scale: ping-pongs per repetition (default 500)
  --scale-reps N         scale: repetitions of the streaming and ping-pong runs (default 3)
  --scale-mem-floor MIB  scale: stop the set-up with an error (how many came up, what they took)
                         when the machine's MemAvailable falls under MIB (default 256; 0 = never),
                         before the OOM killer would end a side
  --scale-expect SPEC    scale: fail unless each side's growth per connection is exactly these
                         counts, sender/receiver: fds=1/1,qps=1/1,cqs=1/1,mrs=1/1 (any of these
                         keys); nofile=raised: each side's soft RLIMIT_NOFILE is its hard one by
                         the set-up and (with --nofile) it held more fds than --nofile's SOFT;
                         eager_on=S/R: at most S / R idle comms hold a ring or a book of the
                         eager pool after their message (SLUICE_EAGER_RINGS bounds them)
  --nofile SOFT[:HARD]   RLIMIT_NOFILE of both processes before the plugin's init (HARD above
                         the current hard limit needs root); the plugin raises soft to hard
  --slots N              distinct buffer slots per connection (default: one per request in
                         flight, like NCCL's steps; 1 = every message to the same buffer, like
                         ib_write_bw). --verify uses at most N requests in flight.
  --verify               check every received byte (pattern per message); slower
  --reps N               run every timed figure N times (Sluice and perftest interleaved) and
                         print min / median / max; ratios are medians (default 1)
  --no-count             do not count packets on the wire (device counters) and work requests
                         (the plugin's sluiceExt_v1) per message; counted by default, once
Raw verbs comparison
  --compare-raw          run ib_write_bw, ib_write_lat and ib_send_lat (perftest) on the same
                         devices with the same sizes and iteration counts; print Sluice / raw
  --gid-index G          perftest -x (default 0; -1 = perftest's choice)
  --raw-port P           perftest port (default 18515)
  --raw-tx-depth N       ib_write_bw -t (default "match": the test's window; 0 = perftest's 128)
  --raw-dev0 D / --raw-dev1 D / --raw-dev D   perftest -d names (default: from the plugin names)
Output
  --csv PREFIX           write PREFIX-<table>.csv for each table
  --json FILE            write every table as JSON
  --timeout S            bound on every phase, seconds (default 120); a stuck peer fails the run
  --spin                 poll without ever yielding the CPU (default: sched_yield after 128
                         idle polls, as NCCL's proxy does when idle)
  --idle-sleep US        bandwidth tests (bw, rate, agg): sleep US microseconds instead of
                         yielding after those idle polls. Frees the CPU for an emulated NIC
                         (Soft-RoCE in the TCG bed, where perftest's server sleeps too);
                         scripts/main-job uses 200 in the bed. Default 0 (yield).
  --label TEXT           a note for the header and the JSON (e.g. the environment used)
  --profile MODE         what the plugin's init gets as NCCL profiler callback: none (no
                         callback; the default unless the only test is scale), default (NCCL's
                         own with no profiler plugin, which NCCL passes to every init: returns
                         success, leaves the handle alone; every isend/irecv passes a phandle;
                         the default of --tests scale) or count (a callback that counts the
                         plugin's per-work-request events)
  --trace FILE           write every work request of both sides as a Chrome trace (Perfetto,
                         chrome://tracing): one process per side, one track per QP. Loads the
                         profiler plugin --trace-profiler LIB (default: the built
                         libsluice-trace-profiler.so) and stands in for NCCL's core. Local runs only
  -q, --quiet            tables only
Exit status: 0 on success; 1 on any error or verification failure. Targets are reported, never
enforced (this is a benchmark); a timing target whose spread straddles its bound is "within noise".
)";

std::vector<uint64_t> parse_sizes(const std::string& s) {
  std::vector<uint64_t> v;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t c = s.find(',', pos);
    std::string item = s.substr(pos, c == std::string::npos ? std::string::npos : c - pos);
    if (!item.empty()) v.push_back(parse_size(item));
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  if (v.empty()) fail("empty size list '%s'", s.c_str());
  return v;
}

uint64_t parse_uint(const std::string& s, const char* what) {
  char* end = nullptr;
  unsigned long long v = strtoull(s.c_str(), &end, 10);
  if (s.empty() || !end || *end) fail("%s: '%s' is not a non-negative integer", what, s.c_str());
  return v;
}

// "0,1000,10000" (plain counts; "10k" is not a count).
std::vector<uint64_t> parse_counts(const std::string& s, const char* what) {
  std::vector<uint64_t> v;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t c = s.find(',', pos);
    std::string item = s.substr(pos, c == std::string::npos ? std::string::npos : c - pos);
    if (!item.empty()) v.push_back(parse_uint(item, what));
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  if (v.empty()) fail("%s: empty list '%s'", what, s.c_str());
  return v;
}

Options parse_args(int argc, char** argv) {
  Options o;
  bool profile_given = false;
  auto need = [&](int& i) -> std::string {
    if (i + 1 >= argc) fail("%s needs a value (see --help)", argv[i]);
    return argv[++i];
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      fputs(kUsage, stdout);
      exit(0);
    } else if (a == "--server") {
      o.role = Options::kServer;
    } else if (a == "--client") {
      o.role = Options::kClient;
      o.client_host = need(i);
    } else if (a == "--addr") {
      o.addr = need(i);
    } else if (a == "--port") {
      o.port = static_cast<int>(parse_uint(need(i), "--port"));
    } else if (a == "--dev0") {
      o.dev0 = need(i);
    } else if (a == "--dev1") {
      o.dev1 = need(i);
    } else if (a == "--dev") {
      o.dev = need(i);
    } else if (a == "--plugin") {
      o.plugin = need(i);
    } else if (a == "--tests") {
      o.tests.clear();
      std::string t = need(i);
      size_t pos = 0;
      while (pos <= t.size()) {
        size_t c = t.find(',', pos);
        std::string item = t.substr(pos, c == std::string::npos ? std::string::npos : c - pos);
        if (!item.empty()) {
          if (item == "all") {
            o.tests = {"bw", "rate", "lat", "agg", "conn"};
          } else if (item == "bw" || item == "rate" || item == "lat" || item == "agg" ||
                     item == "conn" || item == "scale") {
            o.tests.insert(item);
          } else {
            fail("unknown test '%s' (bw, rate, lat, agg, conn, scale, all)", item.c_str());
          }
        }
        if (c == std::string::npos) break;
        pos = c + 1;
      }
    } else if (a == "-b" || a == "--min-size") {
      o.min_size = parse_size(need(i));
    } else if (a == "-e" || a == "--max-size") {
      o.max_size = parse_size(need(i));
    } else if (a == "-f" || a == "--step") {
      o.step = atof(need(i).c_str());
    } else if (a == "-w" || a == "--window") {
      o.window = static_cast<uint32_t>(parse_uint(need(i), "--window"));
    } else if (a == "--bytes-per-size") {
      o.bytes_per_size = parse_size(need(i));
    } else if (a == "--iters-min") {
      o.iters_min = parse_uint(need(i), "--iters-min");
    } else if (a == "--iters-max") {
      o.iters_max = parse_uint(need(i), "--iters-max");
    } else if (a == "--iters" || a == "-n") {
      o.iters_fixed = parse_uint(need(i), "--iters");
    } else if (a == "--warmup-frac") {
      o.warmup_frac = atof(need(i).c_str());
    } else if (a == "--rate-max") {
      o.rate_max = parse_size(need(i));
    } else if (a == "--rate-window") {
      o.rate_window = static_cast<uint32_t>(parse_uint(need(i), "--rate-window"));
    } else if (a == "--lat-sizes") {
      o.lat_sizes = parse_sizes(need(i));
    } else if (a == "--lat-iters") {
      o.lat_iters = parse_uint(need(i), "--lat-iters");
    } else if (a == "--conns") {
      o.conns = static_cast<uint32_t>(parse_uint(need(i), "--conns"));
    } else if (a == "--agg-sizes") {
      o.agg_sizes = parse_sizes(need(i));
    } else if (a == "--conn-count") {
      o.conn_count = static_cast<uint32_t>(parse_uint(need(i), "--conn-count"));
    } else if (a == "--scale-pairs") {
      o.scale_pairs = parse_counts(need(i), "--scale-pairs");
    } else if (a == "--scale-inflight") {
      o.scale_inflight = static_cast<uint32_t>(parse_uint(need(i), "--scale-inflight"));
    } else if (a == "--scale-iters") {
      o.scale_iters = parse_uint(need(i), "--scale-iters");
    } else if (a == "--scale-lat-iters") {
      o.scale_lat_iters = parse_uint(need(i), "--scale-lat-iters");
    } else if (a == "--scale-reps") {
      o.scale_reps = static_cast<uint32_t>(parse_uint(need(i), "--scale-reps"));
    } else if (a == "--scale-mem-floor") {
      o.scale_mem_floor_mib = parse_uint(need(i), "--scale-mem-floor");
    } else if (a == "--scale-expect") {
      o.scale_expect = need(i);
    } else if (a == "--nofile") {
      std::string v = need(i);
      size_t c = v.find(':');
      o.nofile_soft = parse_uint(v.substr(0, c), "--nofile SOFT");
      o.nofile_hard = c == std::string::npos ? 0 : parse_uint(v.substr(c + 1), "--nofile HARD");
      if (o.nofile_soft == 0) fail("--nofile: SOFT must be > 0");
      if (o.nofile_hard != 0 && o.nofile_hard < o.nofile_soft) fail("--nofile: HARD < SOFT");
    } else if (a == "--profile") {
      o.profile = need(i);
      profile_given = true;
      if (o.profile != "none" && o.profile != "count" && o.profile != "default")
        fail("--profile: '%s' is not none, default or count", o.profile.c_str());
    } else if (a == "--trace") {
      o.trace = need(i);
    } else if (a == "--trace-profiler") {
      o.trace_lib = need(i);
    } else if (a == "--verify") {
      o.verify = true;
    } else if (a == "--compare-raw") {
      o.compare_raw = true;
    } else if (a == "--gid-index") {
      o.gid_index = atoi(need(i).c_str());
    } else if (a == "--raw-port") {
      o.raw_port = static_cast<int>(parse_uint(need(i), "--raw-port"));
    } else if (a == "--raw-tx-depth") {
      std::string v = need(i);
      o.raw_tx_depth = v == "match" ? -1 : static_cast<int>(parse_uint(v, "--raw-tx-depth"));
    } else if (a == "--raw-dev0") {
      o.raw_dev0 = need(i);
    } else if (a == "--raw-dev1") {
      o.raw_dev1 = need(i);
    } else if (a == "--raw-dev") {
      o.raw_dev = need(i);
    } else if (a == "--csv") {
      o.csv = need(i);
    } else if (a == "--json") {
      o.json = need(i);
    } else if (a == "--timeout") {
      o.timeout = atof(need(i).c_str());
    } else if (a == "-q" || a == "--quiet") {
      o.quiet = true;
    } else if (a == "--slots") {
      o.slots = static_cast<int>(parse_uint(need(i), "--slots"));
    } else if (a == "--idle-sleep") {
      g_idle_sleep_us = static_cast<int>(parse_uint(need(i), "--idle-sleep"));
    } else if (a == "--spin") {
      g_pure_spin = true;
    } else if (a == "--reps") {
      o.reps = static_cast<uint32_t>(parse_uint(need(i), "--reps"));
    } else if (a == "--fuse") {
      setenv("SLUICE_BENCH_FUSE", need(i).c_str(),
             1);  // read by each process's Net (bench/common/net.cc)
    } else if (a == "--no-count") {
      o.count = false;
    } else if (a == "--label") {
      o.label = need(i);
    } else if (a == "--lat-ahead") {
      o.lat_ahead = static_cast<uint32_t>(parse_uint(need(i), "--lat-ahead"));
    } else if (a == "--lat-modes") {
      std::string m = need(i);
      o.lat_jit = m.find("jit") != std::string::npos;
      o.lat_prepost = m.find("preposted") != std::string::npos;
      if (!o.lat_jit && !o.lat_prepost) fail("--lat-modes: jit, preposted or jit,preposted");
    } else {
      fail("unknown option '%s' (see --help)", a.c_str());
    }
  }
  if (o.window < 1 || o.window > NCCL_NET_MAX_REQUESTS)
    fail("--window must be 1..%d", NCCL_NET_MAX_REQUESTS);
  if (o.rate_window < 1 || o.rate_window > NCCL_NET_MAX_REQUESTS)
    fail("--rate-window must be 1..%d", NCCL_NET_MAX_REQUESTS);
  if (o.min_size < 1 || o.max_size < o.min_size) fail("bad size range");
  if (o.conns < 1 || o.conns > 64) fail("--conns must be 1..64");
  if (o.conn_count < 1 || o.conn_count > 4096) fail("--conn-count must be 1..4096");
  if (o.timeout <= 0) fail("--timeout must be > 0");
  if (o.reps < 1 || o.reps > 100) fail("--reps must be 1..100");
  if (o.lat_ahead < 1 || o.lat_ahead > NCCL_NET_MAX_REQUESTS)
    fail("--lat-ahead must be 1..%d", NCCL_NET_MAX_REQUESTS);
  for (uint64_t n : o.scale_pairs)
    if (n > 1000000) fail("--scale-pairs: %llu is more than 1000000", (unsigned long long)n);
  if (o.scale_inflight < 1 || o.scale_inflight > 65536) fail("--scale-inflight must be 1..65536");
  if (o.scale_reps < 1 || o.scale_reps > 100) fail("--scale-reps must be 1..100");
  if (o.scale_iters < 1 || o.scale_lat_iters < 1) fail("--scale-iters and --scale-lat-iters >= 1");
  // NCCL passes its callback to every init; the scale test runs as NCCL would unless told.
  if (!profile_given && o.tests.size() == 1 && o.tests.count("scale")) o.profile = "default";
  return o;
}

// perftest's -d (and -i) from a plugin device name such as "rxe0" or "mlx5_0:1".
void raw_names(const std::string& name, std::string* dev, int* port) {
  size_t c = name.find(':');
  *dev = name.substr(0, c);
  *port = c == std::string::npos ? 0 : atoi(name.c_str() + c + 1);
}

std::string dev_name(Net& net, int d) {
  return net.props(d).name ? net.props(d).name : std::to_string(d);
}

// One side on plugin device d: perftest names (or the --raw-dev* override) and the verbs device
// and port whose packet counter it reads.
Side make_side(Net& net, int d, Channel* ch, const std::string& raw_override) {
  Side s{&net, d, ch, "", 0, "", 0};
  raw_names(raw_override.empty() ? dev_name(net, d) : raw_override, &s.raw_dev, &s.raw_ib_port);
  int port = 0;
  const std::string name = dev_name(net, d);
  if (name.find('+') != std::string::npos) {  // fused: every member's counter (WireCounter::read)
    s.hw_dev = name;
    s.hw_port = 0;
    return s;
  }
  raw_names(name, &s.hw_dev, &port);
  s.hw_port = port > 0 ? port : net.props(d).port;
  return s;
}

// The passive half: executes commands until kQuit or the initiator goes away.
void serve(Side& s) {
  Deadline idle(24 * 3600, "waiting for the next command");
  for (;;) {
    Cmd c = s.ch->recv_pod<Cmd>(idle);
    Deadline dl(c.timeout_s, "replying to the initiator");
    SideStats st;
    switch (c.op) {
      case Op::kBw:
        st = bw_recv(s, c);
        break;
      case Op::kLat:
        st = lat_pong(s, c);
        break;
      case Op::kConn:
        st = conn_accept(s, c);
        break;
      case Op::kRawBw:
      case Op::kRawLat:
      case Op::kRawSendLat:
        st = raw_serve(s, c);
        break;
      case Op::kScaleUp:
      case Op::kScaleDown:
        scale_serve(s, c);  // replies itself
        continue;
      case Op::kQuit:
        return;
      default:
        fail("unknown command %u from the initiator", static_cast<unsigned>(c.op));
    }
    s.ch->send_pod(st, dl);
  }
}

// --profile / --trace for the process of `rank` (0 = initiator, 1 = peer), before its Net.
void setup_profiling(const Options& o, int rank) {
  if (!o.trace.empty()) {
    std::string lib = o.trace_lib;
#ifdef SLUICE_TRACE_PROFILER_DEFAULT_PATH
    if (lib.empty()) lib = SLUICE_TRACE_PROFILER_DEFAULT_PATH;
#endif
    if (lib.empty()) fail("--trace needs --trace-profiler LIB");
    setenv("SLUICE_TRACE_FILE", (o.trace + ".rank" + std::to_string(rank)).c_str(), 1);
    prof_setup(ProfMode::kTrace, lib, rank);
  } else if (o.profile == "count") {
    prof_setup(ProfMode::kCount, "", rank);
  } else if (o.profile == "default") {
    prof_setup(ProfMode::kDefault, "", rank);
  }
}

void report_profiling(const Options& o, const char* side) {
  if (prof_mode() == ProfMode::kNone || prof_mode() == ProfMode::kDefault) return;
  prof_finish();
  const ProfCounts c = prof_counts();
  if (!o.quiet || c.starts != c.stops)
    fprintf(stderr, "sluice-bench (%s): profiler events: %llu started, %llu stopped\n", side,
            static_cast<unsigned long long>(c.starts), static_cast<unsigned long long>(c.stops));
}

// The two sides' traces (FILE.rank0, FILE.rank1: the profiler's JSON, one event per line between
// the "traceEvents":[ line and the closing "]}") as one file.
bool merge_traces(const std::string& out) {
  std::string events;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string part = out + ".rank" + std::to_string(rank);
    FILE* f = fopen(part.c_str(), "r");
    if (f == nullptr) {
      fprintf(stderr, "sluice-bench: --trace: %s missing\n", part.c_str());
      return false;
    }
    std::string text;
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
    fclose(f);
    const std::string head = "\"traceEvents\":[\n";
    const size_t a = text.find(head);
    const size_t b = text.rfind("\n]}");
    if (a == std::string::npos || b == std::string::npos || b < a) {
      fprintf(stderr, "sluice-bench: --trace: %s is not the trace profiler's output\n",
              part.c_str());
      return false;
    }
    const size_t from = a + head.size();
    std::string body = b > from ? text.substr(from, b - from) : std::string();
    if (!body.empty()) events += (events.empty() ? "" : ",\n") + body;
    unlink(part.c_str());
  }
  FILE* f = fopen(out.c_str(), "w");
  if (f == nullptr) return false;
  fprintf(f, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n%s\n]}\n", events.c_str());
  fclose(f);
  fprintf(stderr, "sluice-bench: trace written to %s\n", out.c_str());
  return true;
}

// --nofile: both processes' RLIMIT_NOFILE, set before either loads the plugin.
void set_nofile(const Options& o) {
  if (o.nofile_soft == 0) return;
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) fail("getrlimit(RLIMIT_NOFILE): %s", strerror(errno));
  if (o.nofile_hard != 0) r.rlim_max = o.nofile_hard;
  r.rlim_cur = o.nofile_soft;
  if (setrlimit(RLIMIT_NOFILE, &r) != 0)
    fail("--nofile %llu:%llu: setrlimit(RLIMIT_NOFILE): %s (a higher hard limit needs root)",
         (unsigned long long)o.nofile_soft, (unsigned long long)r.rlim_max, strerror(errno));
}

int run_local(Options& o) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    fail("socketpair: %s", strerror(errno));
  fflush(nullptr);
  // Fork before either side loads the plugin: each process gets its own verbs context.
  pid_t child = fork();
  if (child < 0) fail("fork: %s", strerror(errno));
  if (child == 0) {
    close(sv[0]);
    int rc = 0;
    try {
      setup_profiling(o, 1);
      Channel ch(sv[1]);
      Net net(o.plugin);
      int d1 = o.dev1.empty() ? (net.devices() > 1 ? 1 : 0) : net.find_device(o.dev1);
      Side s = make_side(net, d1, &ch, o.raw_dev1);
      Deadline dl(o.timeout, "telling the initiator our device");
      ch.send_str(dev_name(net, d1), dl);
      serve(s);
    } catch (const std::exception& e) {
      fprintf(stderr, "sluice-bench (receiver side): error: %s\n", e.what());
      rc = 1;
    }
    report_profiling(o, "receiver");
    fflush(nullptr);
    _exit(rc);
  }
  close(sv[1]);
  int rc = 0;
  std::string err;
  try {
    setup_profiling(o, 0);
    Channel ch(sv[0]);
    Net net(o.plugin);
    int d0 = o.dev0.empty() ? 0 : net.find_device(o.dev0);
    Side s = make_side(net, d0, &ch, o.raw_dev0);
    std::string receiver =
        ch.recv_str(Deadline(o.timeout, "waiting for the receiver process to load the plugin"));
    if (!o.quiet)
      fprintf(stderr, "sluice-bench: plugin %s, %d device(s); sender %s, receiver %s (pid %d)\n",
              net.path().c_str(), net.devices(), dev_name(net, d0).c_str(), receiver.c_str(),
              static_cast<int>(child));
    if (initiate(o, s, net, "127.0.0.1", dev_name(net, d0), receiver)) rc = 1;
  } catch (const std::exception& e) {
    err = e.what();
    rc = 1;
  }
  // Reap the peer (bounded).
  int st = 0;
  Deadline dl(rc ? 2 : 30, "waiting for the receiver process");
  while (waitpid(child, &st, WNOHANG) == 0) {
    if (dl.expired()) {
      kill(child, SIGKILL);
      waitpid(child, &st, 0);
      break;
    }
    usleep(10000);
  }
  if (!err.empty()) fprintf(stderr, "sluice-bench: error: %s\n", err.c_str());
  report_profiling(o, "sender");
  if (!o.trace.empty() && !merge_traces(o.trace)) rc = 1;
  if (WIFEXITED(st) && WEXITSTATUS(st) != 0) rc = 1;
  if (WIFSIGNALED(st)) {
    fprintf(stderr, "sluice-bench: the receiver process died with signal %d\n", WTERMSIG(st));
    rc = 1;
  }
  return rc;
}

int run_server(Options& o) {
  if (!o.trace.empty()) fail("--trace: local runs only");
  setup_profiling(o, 1);
  Listener l(o.addr.empty() ? "0.0.0.0" : o.addr, o.port);
  if (!o.quiet) fprintf(stderr, "sluice-bench: server waiting on port %d\n", l.port());
  Channel ch = l.accept(Deadline(o.timeout * 10, "waiting for a --client"));
  Net net(o.plugin);
  int d = o.dev.empty() ? 0 : net.find_device(o.dev);
  Side s = make_side(net, d, &ch, o.raw_dev);
  ch.send_str(dev_name(net, d), Deadline(o.timeout, "greeting the client"));
  serve(s);
  return 0;
}

int run_client(Options& o) {
  if (!o.trace.empty()) fail("--trace: local runs only");
  setup_profiling(o, 0);
  Channel ch =
      Channel::connect(o.client_host, o.port, Deadline(o.timeout, "connecting to the --server"));
  Net net(o.plugin);
  int d = o.dev.empty() ? 0 : net.find_device(o.dev);
  Side s = make_side(net, d, &ch, o.raw_dev);
  std::string receiver =
      ch.recv_str(Deadline(o.timeout, "waiting for the server to load the plugin")) + "@" +
      o.client_host;
  return initiate(o, s, net, o.client_host, dev_name(net, d), receiver) ? 1 : 0;
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    bench::Options o = bench::parse_args(argc, argv);
    bench::set_nofile(o);
    switch (o.role) {
      case bench::Options::kLocal:
        return bench::run_local(o);
      case bench::Options::kServer:
        return bench::run_server(o);
      case bench::Options::kClient:
        return bench::run_client(o);
    }
  } catch (const std::exception& e) {
    fprintf(stderr, "sluice-bench: error: %s\n", e.what());
    return 1;
  }
  return 1;
}
