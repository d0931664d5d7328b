// sluice-bench: Sluice through its exported ncclNetPlugin_v11 table, side by side with perftest.
// See docs/benchmarks.md for the columns and how to run it.
#include <signal.h>
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

#include "sluice_bench.h"

namespace bench {
namespace {

const char* kUsage = R"(usage: sluice-bench [options]

Drives the Sluice NCCL net plugin only through its exported ncclNetPlugin_v11 table (dlopen, as
NCCL does), in two processes: locally (default: this process forks its peer; sender on --dev0,
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
  --plugin P             plugin path or name (default: $NCCL_NET_PLUGIN, else the built one)
Tests (--tests LIST, comma separated; default bw,rate,lat,agg,conn)
  bw     bandwidth sweep, one connection, --window requests in flight
  rate   message rate at small sizes (--rate-max, --rate-window)
  lat    half round trip (ping-pong) at --lat-sizes
  agg    aggregate bandwidth over --conns connections at once, at --agg-sizes
  conn   time to establish --conn-count connections; memory and verbs objects per connection
Sizes and iterations
  -b, --min-size S       smallest bw size (default 8)        -e, --max-size S   largest (64M)
  -f, --step F           size multiplier (default 2)
  -w, --window N         requests in flight per connection (default 8, NCCL's proxy steps)
  --bytes-per-size S     iterations = bytes/size, clamped to [--iters-min, --iters-max]
                         (default 256M, 16, 10000); --iters N forces N for every size
  --warmup-frac F        warm-up iterations as a fraction of the timed ones (default 0.1)
  --rate-max S           rate sweep 8 B .. S by --step (default 4K); --rate-window N (default 32)
  --lat-sizes LIST       (default 8); --lat-iters N (default 2000)
  --conns K              agg: connections (default 4); --agg-sizes LIST (default 64K,1M,8M)
  --conn-count N         conn: connections to establish (default 256)
  --slots N              distinct buffer slots per connection (default: one per request in
                         flight, like NCCL's steps; 1 = every message to the same buffer, like
                         ib_write_bw). --verify uses at most N requests in flight.
  --verify               check every received byte (pattern per message); slower
Raw verbs comparison
  --compare-raw          run ib_write_bw / ib_write_lat (perftest) on the same devices with the
                         same sizes and iteration counts, and print Sluice / raw
  --gid-index G          perftest -x (default 0; -1 = perftest's choice)
  --raw-port P           perftest port (default 18515)
  --raw-tx-depth N       perftest -t (default: perftest's own default)
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
  -q, --quiet            tables only
Exit status: 0 on success; 1 on any error or verification failure. Targets are reported, never
enforced (this is a benchmark).
)";

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
  uint32_t conns = 4;
  std::vector<uint64_t> agg_sizes = {64 << 10, 1 << 20, 8 << 20};
  uint32_t conn_count = 256;
  bool verify = false;
  int slots = 0;
  bool compare_raw = false;
  int gid_index = 0;
  int raw_port = 18515;
  int raw_tx_depth = 0;
  std::string raw_dev0, raw_dev1, raw_dev;
  std::string csv, json;
  double timeout = 120;
  bool quiet = false;
};

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

Options parse_args(int argc, char** argv) {
  Options o;
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
                     item == "conn") {
            o.tests.insert(item);
          } else {
            fail("unknown test '%s' (bw, rate, lat, agg, conn, all)", item.c_str());
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
    } else if (a == "--verify") {
      o.verify = true;
    } else if (a == "--compare-raw") {
      o.compare_raw = true;
    } else if (a == "--gid-index") {
      o.gid_index = atoi(need(i).c_str());
    } else if (a == "--raw-port") {
      o.raw_port = static_cast<int>(parse_uint(need(i), "--raw-port"));
    } else if (a == "--raw-tx-depth") {
      o.raw_tx_depth = static_cast<int>(parse_uint(need(i), "--raw-tx-depth"));
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
  return o;
}

// perftest's -d (and -i) from a plugin device name such as "rxe0" or "mlx5_0:1".
void raw_names(const std::string& name, std::string* dev, int* port) {
  size_t c = name.find(':');
  *dev = name.substr(0, c);
  *port = c == std::string::npos ? 0 : atoi(name.c_str() + c + 1);
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
        raw_serve(s, c, false);
        break;
      case Op::kRawLat:
        raw_serve(s, c, true);
        break;
      case Op::kQuit:
        return;
      default:
        fail("unknown command %u from the initiator", static_cast<unsigned>(c.op));
    }
    s.ch->send_pod(st, dl);
  }
}

struct Initiator {
  Initiator(Options& opts, Side& side, std::string peer, std::string sender)
      : o(opts), s(side), peer_addr(std::move(peer)), sender_name(std::move(sender)) {}
  Options& o;
  Side& s;
  std::string peer_addr;  // for perftest's client
  std::string sender_name, receiver_name;
  std::vector<Table> tables;
  // Targets, for the summary.
  double min_bw_ratio_1m = NAN, lat_ratio = NAN, rss_per_conn = NAN, conn_time = NAN;
  uint64_t bad = 0;

  uint64_t iters_for(uint64_t size) const {
    if (o.iters_fixed) return o.iters_fixed;
    return std::clamp<uint64_t>(o.bytes_per_size / std::max<uint64_t>(size, 1), o.iters_min,
                                o.iters_max);
  }
  Cmd cmd(Op op, uint64_t size, uint64_t iters, uint32_t window, uint32_t nconns) const {
    Cmd c{};
    c.op = op;
    c.size = size;
    c.iters = iters;
    c.warmup = std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(iters * o.warmup_frac)));
    c.window = window;
    c.nconns = nconns;
    c.verify = o.verify;
    c.raw_port = o.raw_port;
    c.gid_index = o.gid_index;
    c.tx_depth = o.raw_tx_depth;
    c.timeout_s = o.timeout;
    c.slots = o.slots;
    return c;
  }
  SideStats peer_reply(const Cmd& c) {
    Deadline dl(c.timeout_s, "waiting for the peer's numbers");
    return s.ch->recv_pod<SideStats>(dl);
  }
  void progress(const std::string& what) {
    if (!o.quiet) fprintf(stderr, "sluice-bench: %s\n", what.c_str());
  }

  void bw_table(const char* name, const std::vector<uint64_t>& sizes, uint32_t window,
                uint32_t nconns, bool raw) {
    std::vector<std::string> cols = {"size", "iters", "window"};
    if (nconns > 1) cols.push_back("conns");
    for (const char* c : {"GB/s", "Mmsg/s", "cpu_us/msg_send", "cpu_us/msg_recv"})
      cols.push_back(c);
    if (nconns > 1) cols.push_back("GB/s_per_conn");
    if (raw) {
      for (const char* c : {"raw_GB/s", "raw_peak_GB/s", "raw_Mmsg/s", "sluice/raw"})
        cols.push_back(c);
    }
    if (o.verify) cols.push_back("bad_bytes");
    Table t(name, cols);
    for (uint64_t size : sizes) {
      uint64_t iters = iters_for(size);
      progress(strf("%s: %s x %llu (window %u, %u conn%s)", name, format_size(size).c_str(),
                    (unsigned long long)iters, window, nconns, nconns > 1 ? "s" : ""));
      Cmd c = cmd(Op::kBw, size, iters, window, nconns);
      s.ch->send_pod(c, Deadline(o.timeout, "sending a command"));
      SideStats me = bw_send(s, c);
      SideStats peer = peer_reply(c);
      bad += peer.bad_bytes + me.bad_bytes;
      double gbs = static_cast<double>(size) * me.messages / me.elapsed_s / 1e9;
      std::vector<Table::Cell> row = {Table::integer(size), Table::integer(iters),
                                      Table::integer(window)};
      if (nconns > 1) row.push_back(Table::integer(nconns));
      row.push_back(Table::num(gbs, "%.3f"));
      row.push_back(Table::num(me.messages / me.elapsed_s / 1e6, "%.4f"));
      row.push_back(Table::num((me.user_s + me.sys_s) * 1e6 / me.messages, "%.2f"));
      row.push_back(Table::num(
          (peer.user_s + peer.sys_s) * 1e6 / std::max<uint64_t>(peer.messages, 1), "%.2f"));
      if (nconns > 1) row.push_back(Table::num(gbs / nconns, "%.3f"));
      if (raw) {
        Cmd rc = cmd(Op::kRawBw, size, iters, window, 1);
        s.ch->send_pod(rc, Deadline(o.timeout, "sending a command"));
        RawBw r = raw_bw_client(s, rc, peer_addr);
        (void)peer_reply(rc);
        if (!r.ok)
          fprintf(stderr, "sluice-bench: warning: ib_write_bw %s: %s\n", format_size(size).c_str(),
                  r.error.c_str());
        row.push_back(Table::num(r.ok ? r.avg_gbs : NAN, "%.3f"));
        row.push_back(Table::num(r.ok ? r.peak_gbs : NAN, "%.3f"));
        row.push_back(Table::num(r.ok ? r.mpps : NAN, "%.4f"));
        double ratio = r.ok && r.avg_gbs > 0 ? gbs / r.avg_gbs : NAN;
        row.push_back(Table::num(ratio, "%.3f"));
        if (size >= (1u << 20) && !std::isnan(ratio))
          min_bw_ratio_1m = std::isnan(min_bw_ratio_1m) ? ratio : std::min(min_bw_ratio_1m, ratio);
      }
      if (o.verify) row.push_back(Table::integer(static_cast<long long>(peer.bad_bytes)));
      t.add(std::move(row));
    }
    tables.push_back(std::move(t));
  }

  void lat_table(bool raw) {
    std::vector<std::string> cols = {"size",   "iters",  "min_us",          "typical_us",
                                     "avg_us", "p99_us", "cpu_us/msg_ping", "cpu_us/msg_pong"};
    if (raw) {
      for (const char* c : {"raw_typical_us", "raw_avg_us", "sluice/raw_typical", "sluice/raw_avg"})
        cols.push_back(c);
    }
    if (o.verify) cols.push_back("bad_bytes");
    Table t("lat", cols);
    for (uint64_t size : o.lat_sizes) {
      progress(strf("lat: %s x %llu ping-pongs", format_size(size).c_str(),
                    (unsigned long long)o.lat_iters));
      Cmd c = cmd(Op::kLat, size, o.lat_iters, 1, 1);
      s.ch->send_pod(c, Deadline(o.timeout, "sending a command"));
      LatResult me = lat_ping(s, c);
      SideStats peer = peer_reply(c);
      bad += me.self.bad_bytes + peer.bad_bytes;
      auto& v = me.half_rtt_us;
      double avg = me.self.elapsed_s * 1e6 / me.self.messages / 2;
      double typ = v[v.size() / 2];
      double p99 = v[std::min(v.size() - 1, static_cast<size_t>(v.size() * 0.99))];
      std::vector<Table::Cell> row = {
          Table::integer(size),
          Table::integer(o.lat_iters),
          Table::num(v.front()),
          Table::num(typ),
          Table::num(avg),
          Table::num(p99),
          Table::num((me.self.user_s + me.self.sys_s) * 1e6 / me.self.messages),
          Table::num((peer.user_s + peer.sys_s) * 1e6 / std::max<uint64_t>(peer.messages, 1))};
      if (raw) {
        Cmd rc = cmd(Op::kRawLat, size, o.lat_iters, 1, 1);
        s.ch->send_pod(rc, Deadline(o.timeout, "sending a command"));
        RawLat r = raw_lat_client(s, rc, peer_addr);
        (void)peer_reply(rc);
        if (!r.ok)
          fprintf(stderr, "sluice-bench: warning: ib_write_lat %s: %s\n", format_size(size).c_str(),
                  r.error.c_str());
        row.push_back(Table::num(r.ok ? r.typical_us : NAN));
        row.push_back(Table::num(r.ok ? r.avg_us : NAN));
        row.push_back(Table::num(r.ok ? typ / r.typical_us : NAN, "%.3f"));
        row.push_back(Table::num(r.ok ? avg / r.avg_us : NAN, "%.3f"));
        if (size == 8 && r.ok) lat_ratio = typ / r.typical_us;
      }
      if (o.verify)
        row.push_back(Table::integer(static_cast<long long>(me.self.bad_bytes + peer.bad_bytes)));
      t.add(std::move(row));
    }
    tables.push_back(std::move(t));
  }

  void conn_table() {
    progress(strf("conn: establishing %u connections", o.conn_count));
    Cmd c = cmd(Op::kConn, 0, 0, 1, o.conn_count);
    s.ch->send_pod(c, Deadline(o.timeout, "sending a command"));
    SideStats me = conn_connect(s, c);
    SideStats peer = peer_reply(c);
    double n = o.conn_count;
    auto kib = [&](const SideStats& x) {
      return (static_cast<double>(x.rss_after) - static_cast<double>(x.rss_before)) / n / 1024;
    };
    auto per = [&](const SideStats& x, int64_t v) { return x.verbs_valid ? v / n : NAN; };
    Table t("conn",
            {"conns", "establish_s", "ms/conn", "rss_KiB/conn_send", "rss_KiB/conn_recv",
             "qps/conn_send", "qps/conn_recv", "cqs/conn_send", "cqs/conn_recv", "cqes/conn_send",
             "cqes/conn_recv", "mrs/conn_send", "mrs/conn_recv", "close_s_send", "close_s_recv"});
    t.add({Table::integer(o.conn_count), Table::num(me.elapsed_s, "%.3f"),
           Table::num(me.elapsed_s * 1e3 / n, "%.3f"), Table::num(kib(me), "%.1f"),
           Table::num(kib(peer), "%.1f"), Table::num(per(me, me.qps)),
           Table::num(per(peer, peer.qps)), Table::num(per(me, me.cqs)),
           Table::num(per(peer, peer.cqs)), Table::num(per(me, me.cqes), "%.1f"),
           Table::num(per(peer, peer.cqes), "%.1f"), Table::num(per(me, me.mrs)),
           Table::num(per(peer, peer.mrs)), Table::num(me.close_s, "%.3f"),
           Table::num(peer.close_s, "%.3f")});
    if (!me.verbs_valid || !peer.verbs_valid)
      fprintf(stderr,
              "sluice-bench: note: verbs objects not counted (iproute2 `rdma resource show` "
              "unavailable)\n");
    tables.push_back(std::move(t));
    rss_per_conn = std::max(kib(me), kib(peer));
    conn_time = me.elapsed_s;
  }

  void run() {
    if (o.tests.count("bw"))
      bw_table("bw", size_sweep(o.min_size, o.max_size, o.step), o.window, 1, o.compare_raw);
    if (o.tests.count("rate"))
      bw_table("rate", size_sweep(8, std::max<uint64_t>(8, o.rate_max), o.step), o.rate_window, 1,
               o.compare_raw);
    if (o.tests.count("lat")) lat_table(o.compare_raw);
    if (o.tests.count("agg")) bw_table("agg", o.agg_sizes, o.window, o.conns, false);
    if (o.tests.count("conn")) conn_table();
    s.ch->send_pod(cmd(Op::kQuit, 0, 0, 1, 1), Deadline(o.timeout, "sending quit"));
  }

  void report(Net& net) {
    printf("# sluice-bench: plugin %s (%s), sender %s -> receiver %s, window %u%s\n", net.name(),
           net.path().c_str(), sender_name.c_str(), receiver_name.c_str(), o.window,
           o.verify ? ", every byte verified" : "");
    printf(
        "# GB/s = 10^9 bytes/s; cpu_us/msg = (user + system) CPU time of that process / "
        "messages\n");
    for (auto& t : tables) {
      printf("\n# [%s]\n", t.name().c_str());
      t.print(stdout);
      if (!o.csv.empty()) t.write_csv(o.csv + "-" + t.name() + ".csv");
    }
    printf("\n# Targets (reported, not enforced)\n");
    auto line = [](const char* what, double v, const char* target, bool ok_when_le, double bound,
                   const char* fmt) {
      if (std::isnan(v)) {
        printf("#   %-44s %10s   target %s\n", what, "n/a", target);
        return;
      }
      bool ok = ok_when_le ? v <= bound : v >= bound;
      printf(("#   %-44s " + std::string(fmt) + "   target %s  %s\n").c_str(), what, v, target,
             ok ? "MET" : "SHORT");
    };
    line("bandwidth >= 1 MiB, min Sluice/ib_write_bw", min_bw_ratio_1m, ">= 0.95", false, 0.95,
         "%10.3f");
    line("8 B half round trip, Sluice/ib_write_lat", lat_ratio, "<= 1.5", true, 1.5, "%10.3f");
    line("host memory per connection (KiB, max side)", rss_per_conn, "<= 64", true, 64, "%10.1f");
    line(strf("time to establish %u connections (s)", o.conn_count).c_str(), conn_time, "< 5", true,
         5, "%10.3f");
    if (o.verify) printf("# verification: %s\n", bad ? "FAILED" : "every received byte matched");
    if (!o.json.empty()) {
      FILE* f = fopen(o.json.c_str(), "w");
      if (!f) fail("cannot write %s", o.json.c_str());
      fprintf(f,
              "{\"tool\": \"sluice-bench\", \"plugin\": %s, \"sender\": %s, \"receiver\": %s, "
              "\"window\": %u,\n",
              json_escape(net.path()).c_str(), json_escape(sender_name).c_str(),
              json_escape(receiver_name).c_str(), o.window);
      fprintf(f, " \"verify\": %s, \"bad_bytes\": %llu, \"tables\": [", o.verify ? "true" : "false",
              (unsigned long long)bad);
      for (size_t i = 0; i < tables.size(); ++i)
        fprintf(f, "%s\n%s", i ? "," : "", tables[i].json().c_str());
      fprintf(f, "]}\n");
      fclose(f);
    }
  }
};

std::string dev_name(Net& net, int d) {
  return net.props(d).name ? net.props(d).name : std::to_string(d);
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
      Channel ch(sv[1]);
      Net net(o.plugin);
      int d1 = o.dev1.empty() ? (net.devices() > 1 ? 1 : 0) : net.find_device(o.dev1);
      Side s{&net, d1, &ch, "", 0};
      raw_names(o.raw_dev1.empty() ? dev_name(net, d1) : o.raw_dev1, &s.raw_dev, &s.raw_ib_port);
      Deadline dl(o.timeout, "telling the initiator our device");
      ch.send_str(dev_name(net, d1), dl);
      serve(s);
    } catch (const std::exception& e) {
      fprintf(stderr, "sluice-bench (receiver side): error: %s\n", e.what());
      rc = 1;
    }
    fflush(nullptr);
    _exit(rc);
  }
  close(sv[1]);
  int rc = 0;
  std::string err;
  try {
    Channel ch(sv[0]);
    Net net(o.plugin);
    int d0 = o.dev0.empty() ? 0 : net.find_device(o.dev0);
    Side s{&net, d0, &ch, "", 0};
    raw_names(o.raw_dev0.empty() ? dev_name(net, d0) : o.raw_dev0, &s.raw_dev, &s.raw_ib_port);
    Initiator in(o, s, "127.0.0.1", dev_name(net, d0));
    in.receiver_name =
        ch.recv_str(Deadline(o.timeout, "waiting for the receiver process to load the plugin"));
    if (!o.quiet)
      fprintf(stderr, "sluice-bench: plugin %s, %d device(s); sender %s, receiver %s (pid %d)\n",
              net.path().c_str(), net.devices(), in.sender_name.c_str(), in.receiver_name.c_str(),
              static_cast<int>(child));
    in.run();
    in.report(net);
    if (in.bad) rc = 1;
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
  if (WIFEXITED(st) && WEXITSTATUS(st) != 0) rc = 1;
  if (WIFSIGNALED(st)) {
    fprintf(stderr, "sluice-bench: the receiver process died with signal %d\n", WTERMSIG(st));
    rc = 1;
  }
  return rc;
}

int run_server(Options& o) {
  Listener l(o.addr.empty() ? "0.0.0.0" : o.addr, o.port);
  if (!o.quiet) fprintf(stderr, "sluice-bench: server waiting on port %d\n", l.port());
  Channel ch = l.accept(Deadline(o.timeout * 10, "waiting for a --client"));
  Net net(o.plugin);
  int d = o.dev.empty() ? 0 : net.find_device(o.dev);
  Side s{&net, d, &ch, "", 0};
  raw_names(o.raw_dev.empty() ? dev_name(net, d) : o.raw_dev, &s.raw_dev, &s.raw_ib_port);
  ch.send_str(dev_name(net, d), Deadline(o.timeout, "greeting the client"));
  serve(s);
  return 0;
}

int run_client(Options& o) {
  Channel ch =
      Channel::connect(o.client_host, o.port, Deadline(o.timeout, "connecting to the --server"));
  Net net(o.plugin);
  int d = o.dev.empty() ? 0 : net.find_device(o.dev);
  Side s{&net, d, &ch, "", 0};
  raw_names(o.raw_dev.empty() ? dev_name(net, d) : o.raw_dev, &s.raw_dev, &s.raw_ib_port);
  Initiator in(o, s, o.client_host, dev_name(net, d));
  in.receiver_name = ch.recv_str(Deadline(o.timeout, "waiting for the server to load the plugin")) +
                     "@" + o.client_host;
  in.run();
  in.report(net);
  return in.bad ? 1 : 0;
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    bench::Options o = bench::parse_args(argc, argv);
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
