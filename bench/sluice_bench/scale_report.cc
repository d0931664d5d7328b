// The initiator's half of the scale test: for each N, the idle pairs up (scale.cc), then on one
// more, active pair --scale-reps repetitions of 8 B streaming (the bw test's loop, every isend /
// irecv / test timed on the thread's CPU clock) and 8 B ping-pong (receives pre-posted, as NCCL's
// proxy does), then the idle pairs verified and closed. Three tables, one row per N: set-up and
// close (scale), memory and objects per connection (scale_mem), time per message and CPU per
// call (scale_calls). Each N's figures are also printed as soon as they are measured, so a later
// N that fails does not take them along.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>

#include "scale.h"
#include "stats.h"

namespace bench {
namespace {

Cmd make_cmd(const Options& o, Op op, uint64_t size, uint64_t iters, uint32_t window,
             uint32_t nconns, uint32_t flags) {
  Cmd c{};
  c.op = op;
  c.size = size;
  c.iters = iters;
  c.warmup = iters == 0 ? 0 : std::max<uint64_t>(1, std::llround(iters * o.warmup_frac));
  c.window = window;
  c.nconns = nconns;
  c.verify = 1;  // the active pair's bytes are checked too
  c.raw_port = o.raw_port;
  c.gid_index = o.gid_index;
  c.timeout_s = o.timeout;
  c.slots = 0;
  c.flags = flags;
  return c;
}

// One N's measurements.
struct Row {
  uint64_t pairs = 0;
  ScaleReport me, peer;  // sender (this side), receiver
  std::vector<double> stream_us, half_rtt_us;
  std::vector<double> ns[4];  // isend (sender), irecv (receiver), test (sender), test (receiver)
  std::vector<double> tests_per_msg[2];                // test calls per message, sender / receiver
  std::vector<double> isends_per_msg, irecvs_per_msg;  // calls (those that returned NULL too)
  uint64_t bad_active = 0;
  std::vector<std::string> problems;
};

// --scale-expect "fds=1/1,qps=1/1,nofile=raised": per-connection growth, sender/receiver (keys
// fds, qps, cqs, mrs), or for fds_total the whole growth of each side's descriptors with every pair
// up, whatever the number of pairs (the plugin's peer link: one socket per peer process), or for
// keepalive the most sockets with a keepalive timer running that each
// side may hold with every pair up (the plugin runs one per peer host), or for listen the most
// listening sockets the receiver's listens of a round may hold (RECV only; the plugin shares one
// per address), or for tcp_opens the most TCP connections the set-up may open, counted by the
// namespace's /proc/net/snmp (SEND: ActiveOpens, RECV: PassiveOpens; the plugin's peer link carries
// the handshakes of a known process); nofile:
// each side's soft RLIMIT_NOFILE is its hard one by the set-up (the plugin's init raised it) and,
// with --nofile, each side held more fds than that soft limit.
struct Expect {
  std::map<std::string, std::pair<double, double>> per_conn;
  bool nofile_raised = false;
};
Expect parse_expect(const std::string& spec) {
  Expect x;
  auto& m = x.per_conn;
  size_t pos = 0;
  while (pos < spec.size()) {
    size_t c = spec.find(',', pos);
    const std::string item = spec.substr(pos, c == std::string::npos ? std::string::npos : c - pos);
    if (item == "nofile=raised") {
      x.nofile_raised = true;
      if (c == std::string::npos) break;
      pos = c + 1;
      continue;
    }
    const size_t eq = item.find('='), sl = item.find('/');
    if (eq == std::string::npos || sl == std::string::npos || sl < eq)
      fail("--scale-expect: '%s' is not KEY=SEND/RECV", item.c_str());
    const std::string key = item.substr(0, eq);
    if (key != "fds" && key != "fds_total" && key != "qps" && key != "cqs" && key != "mrs" &&
        key != "keepalive" && key != "listen" && key != "tcp_opens" && key != "eager_on")
      fail(
          "--scale-expect: unknown key '%s' (fds, fds_total, qps, cqs, mrs, keepalive, listen, "
          "tcp_opens, eager_on, nofile=raised)",
          key.c_str());
    m[key] = {atof(item.substr(eq + 1, sl - eq - 1).c_str()), atof(item.substr(sl + 1).c_str())};
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  return x;
}

// Whether a side's comms negotiated the eager path, so that its adapter holds the pool: as the
// plugin says of each comm (sluiceCommStats_v2_t::eager, counted after the verified message).
bool eager_pool(const ScaleReport& r) {
  return r.eager[SLUICE_EAGER_NEGOTIATED] + r.eager[SLUICE_EAGER_ON] +
             r.eager[SLUICE_EAGER_WITHOUT] >
         0;
}

int64_t growth(const ScaleReport& r, const std::string& key) {
  const ScaleSnap &a = r.snap_base, &b = r.snap_up;
  if (key == "fds" || key == "fds_total") return b.fds - a.fds;
  if (key == "qps") return b.qps - a.qps;
  if (key == "cqs") return b.cqs - a.cqs;
  return b.mrs - a.mrs;
}

// The TCP connections the set-up opened, as the side's namespace counted them: the sender's
// connects (ActiveOpens), the receiver's accepts (PassiveOpens); -1 where /proc/net/snmp had none.
int64_t tcp_opened(const ScaleReport& r, bool sender) {
  const int64_t a = sender ? r.snap_base.tcp_active : r.snap_base.tcp_passive;
  const int64_t b = sender ? r.snap_up.tcp_active : r.snap_up.tcp_passive;
  return a < 0 || b < 0 ? -1 : b - a;
}

double per(double v, uint64_t n) {
  return n > 0 ? v / static_cast<double>(n) : NAN;
}
double kib_per(int64_t from, int64_t to, uint64_t n) {
  return per(static_cast<double>(to - from) / 1024.0, n);
}

std::string fmt_spread(const Spread& x, const char* f) {
  if (std::isnan(x.med)) return "-";
  return strf(f, x.med) + " [" + strf(f, x.lo) + ".." + strf(f, x.hi) + "]";
}

}  // namespace

void scale_run(const Options& o, Side& s, std::vector<Table>* tables, uint64_t* failures) {
  auto progress = [&](const std::string& what) {
    if (!o.quiet) fprintf(stderr, "sluice-bench: %s\n", what.c_str());
  };
  auto send_cmd = [&](const Cmd& c) {
    s.ch->send_pod(c, Deadline(o.timeout, "sending a command"));
  };
  const double clock_ns = cpu_clock_cost_ns();
  const auto expect = parse_expect(o.scale_expect);
  // Warm-up: one short ping-pong each way, so that what the plugin sets up once per process is in
  // every N's baseline (its close then returns to the baseline).
  {
    progress("scale: warm-up ping-pong");
    Cmd c = make_cmd(o, Op::kLat, 8, 20, 1, 1, 0);
    send_cmd(c);
    LatResult r = lat_ping(s, c);
    s.ch->recv_pod<SideStats>(Deadline(o.timeout, "waiting for the peer's numbers"));
    (void)r;
  }
  printf(
      "# scale: idle pairs sender -> receiver (one thread a side, %u connects in flight per round, "
      "closeListen after each accept), a receive posted on each idle receive comm; profiler "
      "callback: %s; thread CPU clock cost %.0f ns per timed call (subtracted)\n",
      o.scale_inflight, o.profile.c_str(), clock_ns);
  std::vector<Row> rows;
  for (uint64_t n : o.scale_pairs) {
    Row row;
    row.pairs = n;
    progress(strf("scale: %llu idle pairs: setting up", (unsigned long long)n));
    Cmd up = make_cmd(o, Op::kScaleUp, o.scale_mem_floor_mib, 0, o.scale_inflight,
                      static_cast<uint32_t>(n), 0);
    send_cmd(up);
    row.me = scale_up(s, up, false);
    row.peer = s.ch->recv_pod<ScaleReport>(Deadline(o.timeout + 120, "the receiver's set-up"));
    const bool up_ok = !row.me.failed && !row.peer.failed;
    if (up_ok) {
      for (uint32_t rep = 0; rep < o.scale_reps; ++rep) {
        progress(strf("scale: %llu idle pairs: 8 B streaming and ping-pong, repetition %u/%u",
                      (unsigned long long)n, rep + 1, o.scale_reps));
        Cmd bw = make_cmd(o, Op::kBw, 8, o.scale_iters, o.window, 1, kCallCpu);
        send_cmd(bw);
        SideStats me = bw_send(s, bw);
        SideStats peer = s.ch->recv_pod<SideStats>(Deadline(o.timeout, "the peer's numbers"));
        row.bad_active += me.bad_bytes + peer.bad_bytes;
        row.stream_us.push_back(me.elapsed_s * 1e6 / std::max<uint64_t>(me.messages, 1));
        auto ns_per = [&](const SideStats& x, int k) {
          return x.calls[k] ? static_cast<double>(x.call_ns[k]) / x.calls[k] - clock_ns : NAN;
        };
        row.ns[0].push_back(ns_per(me, Net::CallCpu::kIsend));
        row.ns[1].push_back(ns_per(peer, Net::CallCpu::kIrecv));
        row.ns[2].push_back(ns_per(me, Net::CallCpu::kTest));
        row.ns[3].push_back(ns_per(peer, Net::CallCpu::kTest));
        row.tests_per_msg[0].push_back(per(me.calls[Net::CallCpu::kTest], me.messages));
        row.tests_per_msg[1].push_back(per(peer.calls[Net::CallCpu::kTest], peer.messages));
        row.isends_per_msg.push_back(per(me.calls[Net::CallCpu::kIsend], me.messages));
        row.irecvs_per_msg.push_back(per(peer.calls[Net::CallCpu::kIrecv], peer.messages));
        Cmd lat = make_cmd(o, Op::kLat, 8, o.scale_lat_iters, o.lat_ahead, 1, kPrePost);
        send_cmd(lat);
        LatResult l = lat_ping(s, lat);
        SideStats lp = s.ch->recv_pod<SideStats>(Deadline(o.timeout, "the peer's numbers"));
        row.bad_active += l.self.bad_bytes + lp.bad_bytes;
        if (!l.half_rtt_us.empty())
          row.half_rtt_us.push_back(l.half_rtt_us[l.half_rtt_us.size() / 2]);
      }
    }
    progress(strf("scale: %llu idle pairs: a verified message on each, then the close",
                  (unsigned long long)n));
    Cmd down = make_cmd(o, Op::kScaleDown, 0, 0, o.scale_inflight, static_cast<uint32_t>(n), 0);
    send_cmd(down);
    row.me = scale_down(s, down, false);
    row.peer = s.ch->recv_pod<ScaleReport>(Deadline(o.timeout + 120, "the receiver's close"));
    // What failed, in words.
    // Each side's words, once when both tell the same (the first failure reaches both).
    auto both = [](const char* a, const char* b) {
      if (std::strcmp(a, b) == 0 || b[0] == '\0') return std::string(a);
      if (a[0] == '\0') return std::string(b);
      return std::string(a) + " | " + b;
    };
    if (row.me.failed || row.peer.failed)
      row.problems.push_back(
          strf("set-up FAILED with %llu of %llu pairs up (sender), %llu "
               "(receiver): %s",
               (unsigned long long)row.me.up, (unsigned long long)n,
               (unsigned long long)row.peer.up, both(row.me.error, row.peer.error).c_str()));
    if (row.me.verify_failed || row.peer.verify_failed || (up_ok && row.peer.verified != n))
      row.problems.push_back(
          strf("verification FAILED: %llu of %llu idle pairs' messages right: "
               "%s",
               (unsigned long long)row.peer.verified, (unsigned long long)n,
               both(row.me.verify_error, row.peer.verify_error).c_str()));
    if (row.bad_active != 0)
      row.problems.push_back(
          strf("the active pair's messages: %llu bad byte(s)", (unsigned long long)row.bad_active));
    for (int side = 0; side < 2; ++side) {
      const ScaleReport& r = side ? row.peer : row.me;
      const std::string leak = scale_leak(r.snap_base, r.snap_closed);
      if (!leak.empty())
        row.problems.push_back(strf("%s not back at its baseline after the close: %s%s",
                                    side ? "receiver" : "sender", leak.c_str(),
                                    up_ok ? ""
                                          : " (connects and accepts the failed set-up left in "
                                            "progress: NCCL's API has no call to cancel one; "
                                            "finalize releases them)"));
    }
    for (int side = 0; side < 2 && expect.nofile_raised; ++side) {
      const ScaleReport& r = side ? row.peer : row.me;
      const char* who = side ? "receiver" : "sender";
      const bool raised = r.nofile_soft == r.nofile_hard;
      // Past the old soft limit: required where the N alone is more than it.
      const bool past_needed = o.nofile_soft != 0 && n > o.nofile_soft;
      const bool past = !past_needed || static_cast<uint64_t>(r.snap_up.fds) > o.nofile_soft;
      printf(
          "# scale N=%llu: %s RLIMIT_NOFILE soft %llu hard %llu at the set-up (soft %llu before "
          "the init), %d fds held with every pair up: %s\n",
          (unsigned long long)n, who, (unsigned long long)r.nofile_soft,
          (unsigned long long)r.nofile_hard, (unsigned long long)o.nofile_soft, r.snap_up.fds,
          !raised || !past ? "NOT AS EXPECTED"
          : past_needed    ? "raised, and the old soft limit passed"
                           : "raised");
      if (!raised) row.problems.push_back(strf("%s: soft RLIMIT_NOFILE not raised to hard", who));
      if (!past)
        row.problems.push_back(
            strf("%s: held no more fds than the old soft limit (the test proves nothing)", who));
    }
    if (up_ok) {
      for (const auto& [key, want] : expect.per_conn) {
        if (key == "keepalive") {  // a ceiling on the count with every pair up, not a growth
          const int ks = row.me.snap_up.keepalive, kr = row.peer.snap_up.keepalive;
          const bool ok = ks >= 0 && kr >= 0 && ks <= want.first && kr <= want.second;
          printf(
              "# scale N=%llu: keepalive sockets %d / %d with every pair up (sender / receiver), "
              "at most %g / %g: %s\n",
              (unsigned long long)n, ks, kr, want.first, want.second, ok ? "ok" : "MISMATCH");
          if (!ok) row.problems.push_back("more keepalive sockets than expected");
          continue;
        }
        if (key == "tcp_opens") {  // ceilings on the TCP connections the set-up opened
          const int64_t a = tcp_opened(row.me, true), p = tcp_opened(row.peer, false);
          const bool ok = a >= 0 && p >= 0 && a <= want.first && p <= want.second;
          printf(
              "# scale N=%llu: TCP connections opened by the set-up %lld / %lld (connects / "
              "accepts), at most %g / %g: %s\n",
              (unsigned long long)n, (long long)a, (long long)p, want.first, want.second,
              ok ? "ok" : "MISMATCH");
          if (!ok) row.problems.push_back("more TCP connections opened than expected");
          continue;
        }
        if (key == "eager_on") {  // a ceiling on the comms holding the pool's rings and books
          const uint64_t es = row.me.eager[SLUICE_EAGER_ON], er = row.peer.eager[SLUICE_EAGER_ON];
          const bool ok = es <= want.first && er <= want.second;
          printf(
              "# scale N=%llu: %llu / %llu comms hold a ring or a book of the eager pool "
              "(sender / receiver), at most %g / %g: %s\n",
              (unsigned long long)n, (unsigned long long)es, (unsigned long long)er, want.first,
              want.second, ok ? "ok" : "MISMATCH");
          if (!ok) row.problems.push_back("more comms hold eager state than the pool bounds");
          continue;
        }
        if (key == "listen") {  // a ceiling on the receiver's listening sockets in a round
          const int lr = row.peer.round_listening;
          const bool ok = lr >= 0 && lr <= want.second;
          printf(
              "# scale N=%llu: %d listening socket(s) held by the receiver's %d listens of a "
              "round, at most %g: %s\n",
              (unsigned long long)n, lr, row.peer.round_listens, want.second,
              ok ? "ok" : "MISMATCH");
          if (!ok) row.problems.push_back("more listening sockets than expected");
          continue;
        }
        const int64_t gs = growth(row.me, key), gr = growth(row.peer, key);
        if (key == "fds_total") {  // the whole growth, not per connection
          const int64_t ws = n > 0 ? static_cast<int64_t>(want.first) : 0;
          const int64_t wr = n > 0 ? static_cast<int64_t>(want.second) : 0;
          const bool ok = gs == ws && gr == wr;
          printf(
              "# scale N=%llu: fds growth %lld / %lld in all with every pair up (sender / "
              "receiver), expected %lld / %lld whatever the pairs: %s\n",
              (unsigned long long)n, (long long)gs, (long long)gr, (long long)ws, (long long)wr,
              ok ? "exact" : "MISMATCH");
          if (!ok) row.problems.push_back("fds in all not as expected");
          continue;
        }
        // The eager path's pool (docs/eager.md) is one registration per adapter, whatever the
        // comms: made with the first comm that negotiates it (each side uses one adapter here).
        const int pool_s = key == "mrs" && n > 0 && eager_pool(row.me) ? 1 : 0;
        const int pool_r = key == "mrs" && n > 0 && eager_pool(row.peer) ? 1 : 0;
        const int pool = pool_s + pool_r;
        const double ws = want.first * n + pool_s, wr = want.second * n + pool_r;
        const bool ok = std::fabs(gs - ws) < 1e-6 && std::fabs(gr - wr) < 1e-6;
        printf(
            "# scale N=%llu: %s growth %lld / %lld (sender / receiver), expected %g / %g per "
            "connection%s: %s\n",
            (unsigned long long)n, key.c_str(), (long long)gs, (long long)gr, want.first,
            want.second, pool != 0 ? " and the adapter's eager pool" : "",
            ok ? "exact" : "MISMATCH");
        if (!ok) row.problems.push_back(strf("%s per connection not as expected", key.c_str()));
      }
    }
    const ScaleReport &me = row.me, &pe = row.peer;
    auto f = [](double v, const char* fmt) {
      return std::isnan(v) ? std::string("-") : strf(fmt, v);
    };
    printf(
        "# scale N=%llu: %llu/%llu up in %.2f s (%s ms/pair); close %.3f s sender, %.3f s "
        "receiver; RSS KiB/conn %s / %s, VmPin KiB/conn %s / %s, fds/conn %s / %s (sender / "
        "receiver); streaming %s us/msg, half RTT %s us; RLIMIT_NOFILE soft %llu / %llu; the "
        "machine's MemAvailable fell by %.0f MiB with every pair up (both processes and the "
        "kernel; %.0f MiB left); %s\n",
        (unsigned long long)n, (unsigned long long)std::min(me.up, pe.up), (unsigned long long)n,
        me.establish_s, f(per(me.establish_s * 1e3, n), "%.2f").c_str(), me.close_s, pe.close_s,
        f(kib_per(me.snap_base.rss, me.snap_up.rss, me.up), "%.1f").c_str(),
        f(kib_per(pe.snap_base.rss, pe.snap_up.rss, pe.up), "%.1f").c_str(),
        f(kib_per(me.snap_base.pin, me.snap_up.pin, me.up), "%.1f").c_str(),
        f(kib_per(pe.snap_base.pin, pe.snap_up.pin, pe.up), "%.1f").c_str(),
        f(per(me.snap_up.fds - me.snap_base.fds, me.up), "%.3f").c_str(),
        f(per(pe.snap_up.fds - pe.snap_base.fds, pe.up), "%.3f").c_str(),
        fmt_spread(spread(row.stream_us), "%.1f").c_str(),
        fmt_spread(spread(row.half_rtt_us), "%.1f").c_str(), (unsigned long long)me.nofile_soft,
        (unsigned long long)pe.nofile_soft,
        (me.snap_base.mem_available - me.snap_idle.mem_available) / 1048576.0,
        me.snap_idle.mem_available / 1048576.0, row.problems.empty() ? "ok" : "FAILED");
    printf(
        "# scale N=%llu: TCP sockets with keepalive running %d / %d with every pair up, %d / %d "
        "before (sender / receiver; one per peer host); the receiver's %d listens of a round "
        "held %d listening socket(s); TCP connections opened by the set-up %lld / %lld "
        "(connects / accepts, /proc/net/snmp; a known process's handshakes go on its peer link)\n",
        (unsigned long long)n, me.snap_up.keepalive, pe.snap_up.keepalive, me.snap_base.keepalive,
        pe.snap_base.keepalive, pe.round_listens, pe.round_listening,
        (long long)tcp_opened(me, true), (long long)tcp_opened(pe, false));
    printf(
        "# scale N=%llu: the idle comms and the eager path after their message (sender / "
        "receiver): %llu / %llu with a book or a ring and its book (the pool's), %llu / %llu "
        "without for good, %llu / %llu negotiated and nothing lent yet, %llu / %llu not "
        "negotiated, %llu / %llu unread\n",
        (unsigned long long)n, (unsigned long long)me.eager[SLUICE_EAGER_ON],
        (unsigned long long)pe.eager[SLUICE_EAGER_ON],
        (unsigned long long)me.eager[SLUICE_EAGER_WITHOUT],
        (unsigned long long)pe.eager[SLUICE_EAGER_WITHOUT],
        (unsigned long long)me.eager[SLUICE_EAGER_NEGOTIATED],
        (unsigned long long)pe.eager[SLUICE_EAGER_NEGOTIATED],
        (unsigned long long)me.eager[SLUICE_EAGER_OFF],
        (unsigned long long)pe.eager[SLUICE_EAGER_OFF], (unsigned long long)me.eager_unread,
        (unsigned long long)pe.eager_unread);
    for (const std::string& p : row.problems)
      printf("# scale N=%llu: %s\n", (unsigned long long)n, p.c_str());
    fflush(stdout);
    *failures += row.problems.size();
    rows.push_back(std::move(row));
  }

  Table t("scale",
          {"pairs", "up_send", "up_recv", "status", "establish_s", "ms/pair", "close_ms_send",
           "close_ms_recv", "close_ms/pair", "dereg_ms_send", "dereg_ms_recv", "verified",
           "nofile_soft_send", "nofile_soft_recv", "tcp_opens_send", "tcp_opens_recv"});
  Table m("scale_mem", {"pairs",
                        "rss_KiB/conn_send",
                        "rss_KiB/conn_recv",
                        "pin_KiB/conn_send",
                        "pin_KiB/conn_recv",
                        "lck_KiB/conn_send",
                        "lck_KiB/conn_recv",
                        "fds/conn_send",
                        "fds/conn_recv",
                        "qps/conn_send",
                        "qps/conn_recv",
                        "cqs/conn_send",
                        "cqs/conn_recv",
                        "mrs/conn_send",
                        "mrs/conn_recv",
                        "rss_idle_KiB/conn_send",
                        "rss_idle_KiB/conn_recv",
                        "pin_idle_KiB/conn_send",
                        "pin_idle_KiB/conn_recv",
                        "verbs_rss_KiB/conn_send",
                        "verbs_rss_KiB/conn_recv",
                        "machine_MiB",
                        "machine_KiB/pair",
                        "eager_on_send",
                        "eager_on_recv",
                        "eager_without_send",
                        "eager_without_recv"});
  Table k("scale_calls", {"pairs",
                          "stream_us_min",
                          "stream_us",
                          "stream_us_max",
                          "stream_vs_0",
                          "half_rtt_us_min",
                          "half_rtt_us",
                          "half_rtt_us_max",
                          "half_rtt_vs_0",
                          "isend_ns_min",
                          "isend_ns",
                          "isend_ns_max",
                          "irecv_ns_min",
                          "irecv_ns",
                          "irecv_ns_max",
                          "test_ns_send_min",
                          "test_ns_send",
                          "test_ns_send_max",
                          "test_ns_recv_min",
                          "test_ns_recv",
                          "test_ns_recv_max",
                          "isends/msg",
                          "irecvs/msg",
                          "tests/msg_send",
                          "tests/msg_recv"});
  const Row* zero = nullptr;
  for (const Row& r : rows)
    if (r.pairs == 0 && !r.stream_us.empty() && zero == nullptr) zero = &r;
  for (const Row& r : rows) {
    const ScaleReport &me = r.me, &pe = r.peer;
    const double n = static_cast<double>(r.pairs);
    t.add({Table::integer(static_cast<long long>(r.pairs)),
           Table::integer(static_cast<long long>(me.up)),
           Table::integer(static_cast<long long>(pe.up)),
           Table::text(r.problems.empty() ? "ok" : "FAILED"), Table::num(me.establish_s, "%.3f"),
           Table::num(per(me.establish_s * 1e3, r.pairs), "%.3f"),
           Table::num(me.close_s * 1e3, "%.1f"), Table::num(pe.close_s * 1e3, "%.1f"),
           Table::num(n > 0 ? std::max(me.close_s, pe.close_s) * 1e3 / n : NAN, "%.3f"),
           Table::num(me.dereg_s * 1e3, "%.1f"), Table::num(pe.dereg_s * 1e3, "%.1f"),
           Table::integer(static_cast<long long>(pe.verified)),
           Table::integer(static_cast<long long>(me.nofile_soft)),
           Table::integer(static_cast<long long>(pe.nofile_soft)),
           Table::integer(static_cast<long long>(tcp_opened(me, true))),
           Table::integer(static_cast<long long>(tcp_opened(pe, false)))});
    auto obj = [&](const ScaleReport& x, int64_t ScaleSnap::*f) {
      return x.snap_base.verbs_valid && x.snap_up.verbs_valid
                 ? per(static_cast<double>(x.snap_up.*f - x.snap_base.*f), x.up)
                 : NAN;
    };
    m.add(
        {Table::integer(static_cast<long long>(r.pairs)),
         Table::num(kib_per(me.snap_base.rss, me.snap_up.rss, me.up), "%.1f"),
         Table::num(kib_per(pe.snap_base.rss, pe.snap_up.rss, pe.up), "%.1f"),
         Table::num(kib_per(me.snap_base.pin, me.snap_up.pin, me.up), "%.1f"),
         Table::num(kib_per(pe.snap_base.pin, pe.snap_up.pin, pe.up), "%.1f"),
         Table::num(kib_per(me.snap_base.lck, me.snap_up.lck, me.up), "%.1f"),
         Table::num(kib_per(pe.snap_base.lck, pe.snap_up.lck, pe.up), "%.1f"),
         Table::num(per(me.snap_up.fds - me.snap_base.fds, me.up), "%.3f"),
         Table::num(per(pe.snap_up.fds - pe.snap_base.fds, pe.up), "%.3f"),
         Table::num(obj(me, &ScaleSnap::qps), "%.3f"),
         Table::num(obj(pe, &ScaleSnap::qps), "%.3f"),
         Table::num(obj(me, &ScaleSnap::cqs), "%.3f"),
         Table::num(obj(pe, &ScaleSnap::cqs), "%.3f"),
         Table::num(obj(me, &ScaleSnap::mrs), "%.3f"),
         Table::num(obj(pe, &ScaleSnap::mrs), "%.3f"),
         Table::num(kib_per(me.snap_base.rss, me.snap_idle.rss, me.up), "%.1f"),
         Table::num(kib_per(pe.snap_base.rss, pe.snap_idle.rss, pe.up), "%.1f"),
         Table::num(kib_per(me.snap_base.pin, me.snap_idle.pin, me.up), "%.1f"),
         Table::num(kib_per(pe.snap_base.pin, pe.snap_idle.pin, pe.up), "%.1f"),
         Table::num(kib_per(me.snap_base.rss_verbs, me.snap_idle.rss_verbs, me.up), "%.1f"),
         Table::num(kib_per(pe.snap_base.rss_verbs, pe.snap_idle.rss_verbs, pe.up), "%.1f"),
         Table::num((me.snap_base.mem_available - me.snap_idle.mem_available) / 1048576.0, "%.0f"),
         Table::num(kib_per(me.snap_idle.mem_available, me.snap_base.mem_available,
                            std::min(me.up, pe.up)),
                    "%.1f"),
         Table::integer(static_cast<long long>(me.eager[SLUICE_EAGER_ON])),
         Table::integer(static_cast<long long>(pe.eager[SLUICE_EAGER_ON])),
         Table::integer(static_cast<long long>(me.eager[SLUICE_EAGER_WITHOUT])),
         Table::integer(static_cast<long long>(pe.eager[SLUICE_EAGER_WITHOUT]))});
    const Spread st = spread(r.stream_us), hr = spread(r.half_rtt_us);
    const Spread vs_st = zero ? ratio(st, spread(zero->stream_us)) : Spread{};
    const Spread vs_hr = zero ? ratio(hr, spread(zero->half_rtt_us)) : Spread{};
    std::vector<Table::Cell> row = {Table::integer(static_cast<long long>(r.pairs)),
                                    Table::num(st.lo, "%.2f"),
                                    Table::num(st.med, "%.2f"),
                                    Table::num(st.hi, "%.2f"),
                                    Table::num(vs_st.med, "%.3f"),
                                    Table::num(hr.lo, "%.2f"),
                                    Table::num(hr.med, "%.2f"),
                                    Table::num(hr.hi, "%.2f"),
                                    Table::num(vs_hr.med, "%.3f")};
    for (int c = 0; c < 4; ++c) {
      const Spread x = spread(r.ns[c]);
      row.push_back(Table::num(x.lo, "%.0f"));
      row.push_back(Table::num(x.med, "%.0f"));
      row.push_back(Table::num(x.hi, "%.0f"));
    }
    row.push_back(Table::num(spread(r.isends_per_msg).med, "%.2f"));
    row.push_back(Table::num(spread(r.irecvs_per_msg).med, "%.2f"));
    row.push_back(Table::num(spread(r.tests_per_msg[0]).med, "%.2f"));
    row.push_back(Table::num(spread(r.tests_per_msg[1]).med, "%.2f"));
    k.add(std::move(row));
    if (zero != nullptr && r.pairs != 0 && !std::isnan(vs_st.med))
      printf(
          "# scale N=%llu against none: streaming x%.3f [%.3f..%.3f], half RTT x%.3f "
          "[%.3f..%.3f] (median ratio [the extremes the spreads allow])\n",
          (unsigned long long)r.pairs, vs_st.med, vs_st.lo, vs_st.hi, vs_hr.med, vs_hr.lo,
          vs_hr.hi);
  }
  tables->push_back(std::move(t));
  tables->push_back(std::move(m));
  tables->push_back(std::move(k));
}

}  // namespace bench
