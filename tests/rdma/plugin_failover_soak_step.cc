// The flap soak's step (plugin_failover_soak.cc says what it runs and checks): the events of its
// paced stream, one per link down and up, then per flap its figures and checks, per group the
// stalls' spread, and the plugin's failover and failback counts per path.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "nccl_profiler_default.h"
#include "plugin_failover_soak.h"

namespace nettest::failover::soak {
namespace {

constexpr const char* kName = "soak";
// eth0 carries the plugin's kept socket and the side socket: once it is back, FENCE and the side
// byte of the up come with TCP's next retransmission (its timer doubles from 200 ms while the
// link is down).
constexpr long long kSocketLinkSlackMs = 2000;

double mb(long long b) {
  return double(b) / 1e6;
}

// What one flap measured on this host.
struct Figures {
  long long stall_fo = -1, stall_fb = -1, fo = -1, back = -1, full = -1, plugin_stall = -1;
};

}  // namespace

int step_soak(Ctx& x, int step, const std::string& addr1) {
  if (!sync(x, static_cast<char>('a' + step))) return fail(3, "soak: sync");
  void* comm = nullptr;
  if (std::string e = open_comm(x, &comm); !e.empty()) return fail(10 + step, "soak: " + e);
  RegBuf buf;
  if (!buf.allocate(&x.n, comm, kWindow * slot_bytes())) return fail(10 + step, "regMr");
  const long long c = cycle_ms();
  Link l0(x, 0, addr1), l1(x, 1, x.addr2);
  Link* link[2] = {&l0, &l1};
  const std::vector<Flap> flaps = plan();
  // A failover's wait between completions: detection (a port event) + 2 liveness polls + the move.
  const long long gap_bound = 2 * poll_ms() + kMoveMs + kMarginMs;
  std::vector<Event> ev;
  for (size_t j = 0; j < flaps.size(); ++j) {
    const Flap& fl = flaps[j];
    Link* l = link[fl.link];
    const std::string what = std::to_string(j + 1) + " host" + std::to_string(fl.actor) + " eth" +
                             std::to_string(fl.link);
    Event d;
    d.actor = fl.actor;
    d.name = "down " + what;
    d.after_ms = c / 2;
    d.min_done = j == 0 ? 2 * kWindow : 0;  // the first: past the connection's warm-up
    d.past_posted = j == 0;
    d.until_full = j > 0;  // the flap before back in full an eighth period ago, on both hosts
    d.peer_full = j > 0;
    d.hold_ms = c / 8;
    d.max_ms = full_bound_ms() + c;
    d.act = [l] { return l->down(); };
    ev.push_back(d);
    Event u;
    u.actor = fl.actor;
    u.name = "up " + what;
    u.after_ms = c / 4;
    // eth1: down until this host logged "fenced on both sides" (the peer failed over too) and
    // completed kMinDownDone messages since; eth0 carries the kept socket, so FENCE waits for the
    // link: a quarter period, whatever completed.
    u.min_done = fl.link == 1 ? kMinDownDone : 0;
    u.past_posted = false;
    u.from_fence = fl.link == 1;
    u.max_ms = fl.link == 1 ? gap_bound : c / 4;
    u.watch_back = true;  // its member's counter: the next flap waits for it to carry again
    u.watch_member = fl.link;
    u.carry_window = false;
    u.act = [l] { return l->up(); };
    ev.push_back(u);
  }
  Event end;
  end.actor = flaps.empty() ? 1 : flaps.back().actor;
  end.name = "drain";
  end.end = true;
  end.after_ms = c / 2;
  end.until_full = !flaps.empty();
  end.past_posted = false;
  end.peer_full = !flaps.empty();
  end.hold_ms = c / 4;  // the last phase: mostly at the full share
  end.max_ms = full_bound_ms() + c;
  ev.push_back(end);
  std::vector<Snap> snaps{snap(x, comm)};
  const size_t info0 = info_size();
  Flow f;
  const Losses loss0 = losses(x);
  std::fprintf(stderr,
               "host%d: [%s] %zu flaps, period %lld ms, messages 4 KiB .. %zu MiB, %d in flight\n",
               x.host, kName, flaps.size(), c, g_max_msg >> 20, kWindow);
  const std::string e = paced_stream(x, comm, buf, step, kWindow, false, ev, &f, {},
                                     [&](size_t) { snaps.push_back(snap(x, comm)); });
  if (!e.empty()) {
    print_transitions(kName, info0);
    const int rc = fail(10 + step, std::string(kName) + ": " + e);
    buf.reset();
    close_comm(x, comm);  // best effort (the comm may have failed): nothing left for LeakSanitizer
    return rc;
  }
  snaps.push_back(snap(x, comm));  // the end of the drain
  print_paced(x, kName, f, loss0);
  std::string bad;
  auto note = [&](const std::string& s) {
    if (bad.empty()) bad = s;
    std::fprintf(stderr, "host%d: [%s] CHECK FAILED: %s\n", x.host, kName, s.c_str());
  };
  if (snaps.size() != f.ph.size() + 1 || !snaps.front().ok || !snaps.back().ok)
    note("sluiceExt_v2 commStatsV2 not readable at every phase");
  if (x.host == 1) {
    if (std::string b = both_carried(x, f.ph[0].start, f.ph[1 < f.ph.size() ? 1 : 0].start);
        !b.empty())
      note(b);
  }
  const long long slack = c / 8;  // a told host may log a transition before the side byte
  const bool sent = x.host == 1;
  std::map<std::string, std::vector<Figures>> groups;
  std::vector<std::string> order;
  for (size_t j = 0; j < flaps.size(); ++j) {
    const Flap& fl = flaps[j];
    const int m = fl.link;
    const bool actor = fl.actor == x.host;
    const size_t b = 2 * j, d = 2 * j + 1, u = 2 * j + 2;
    const PhaseStat& D = f.ph[d];
    const PhaseStat& U = f.ph[u];
    const std::string fk = "flap " + std::to_string(j + 1) + " (host" + std::to_string(fl.actor) +
                           " eth" + std::to_string(m) + "): ";
    Figures g;
    g.fo = f.first_ms(kFailedOver, D.start.t, U.start.t, slack);
    g.back = f.first_ms(kBack, U.start.t, f.phase_end(u), slack);
    g.full = f.first_ms(kBackFull, U.start.t, f.phase_end(u), slack);
    const auto back_at = g.back >= 0 ? U.start.t + milliseconds(g.back) : f.phase_end(u);
    g.stall_fo = f.max_gap(D.start.t, back_at);
    g.stall_fb = f.max_gap(back_at, f.phase_end(u));
    // The plugin's stall of this flap's failover, read at the up phase's end (an eth0 flap's
    // failover completes only once the link is back: its FENCE rides on eth0).
    if (snaps.size() > u + 1) g.plugin_stall = snaps[u + 1].stall_ms[m];
    const long long down_ms = ms_between(D.start.t, U.start.t);
    // Bytes and packets per member in the phase before, the down phase and the up phase.
    std::string per;
    for (size_t k : {b, d, u}) {
      const Mark& a = f.ph[k].start;
      const Mark& zz = k + 1 < f.ph.size() ? f.ph[k + 1].start : f.end;
      char t[200];
      const bool have = snaps.size() > k + 1 && snaps[k].ok && snaps[k + 1].ok;
      std::snprintf(t, sizeof t, "%s%s %.1f/%.1f MB, %lld/%lld pkts", per.empty() ? "" : "; ",
                    k == b   ? "before"
                    : k == d ? "down"
                             : "after",
                    have ? mb(snaps[k + 1].bytes[0] - snaps[k].bytes[0]) : -1.0,
                    have ? mb(snaps[k + 1].bytes[1] - snaps[k].bytes[1]) : -1.0,
                    delta(a, zz, sent, 0), delta(a, zz, sent, 1));
      per += t;
    }
    std::fprintf(stderr,
                 "host%d: [%s] flap %zu %s (host%d eth%d): down %lld ms, %d messages while down; "
                 "stall per failover %lld ms, per failback %lld ms; plugin's failover stall %lld "
                 "ms; \"%s\" %lld ms after down, \"%s\" %lld ms, %s carrying %lld ms and \"%s\" "
                 "%lld ms after up; %s / %s per phase, %s: %s\n",
                 x.host, kName, j + 1, fl.group, fl.actor, m, down_ms, D.done, g.stall_fo,
                 g.stall_fb, g.plugin_stall, kFailedOver, g.fo, kBack, g.back, x.m[m].name.c_str(),
                 U.carries_ms, kBackFull, g.full, x.m[0].name.c_str(), x.m[1].name.c_str(),
                 sent ? "sent" : "received", per.c_str());
    if (groups.find(fl.group) == groups.end()) order.push_back(fl.group);
    groups[fl.group].push_back(g);
    // The bounds "back" and "back in full" are held to: from the port's return; eth0 adds the
    // TCP retransmission that brings FENCE (and the side byte of the up) once the link is back.
    const long long extra = m == 0 ? kSocketLinkSlackMs : 0;
    if (U.carries_ms < 0)
      note(fk + x.m[m].name + "'s packets " + (sent ? "sent" : "received") + " did not rise " +
           std::to_string(kCarryPackets) + " after its link came back");
    if (m == 1) {
      // The host that flapped it: completions after "fenced on both sides", while still down.
      const long long fenced = f.first_ms(kFenced, D.start.t, U.start.t, 0);
      int after_fence = 0;
      for (const auto& t : f.completions)
        after_fence += fenced >= 0 && t >= D.start.t + milliseconds(fenced) && t < U.start.t;
      if (actor && after_fence < 1)
        note(fk + "no message completed after \"" + kFenced + "\" while eth1 was down (" +
             (fenced < 0 ? std::string("no fence logged") : std::to_string(fenced) + " ms in") +
             ")");
      if (g.stall_fo > gap_bound)
        note(fk + "a wait of " + std::to_string(g.stall_fo) + " ms between completions after " +
             "the link went down, bound " + std::to_string(gap_bound) + " ms");
      if (g.fo < 0) note(fk + "no INFO \"" + kFailedOver + "\" while eth1 was down");
      if (sent) {
        const long long kept = delta(D.start, U.start, true, 0),
                        gone = delta(D.start, U.start, true, 1);
        const long long most = std::max(kept / 100, kSlackPackets);
        if (kept <= 0) note(fk + x.m[0].name + " sent nothing while eth1 was down");
        if (gone > most)
          note(fk + x.m[1].name + " sent " + std::to_string(gone) + " packets while eth1 was " +
               "down (" + x.m[0].name + " " + std::to_string(kept) + "; slack " +
               std::to_string(most) + ")");
      }
    } else {
      if (actor && g.fo < 0) note(fk + "no INFO \"" + kFailedOver + "\" while eth0 was down");
      const long long wait = f.max_gap(D.start.t, f.phase_end(u));
      if (wait > down_ms + extra + gap_bound)
        note(fk + "a wait of " + std::to_string(wait) + " ms between completions across the " +
             "flap, bound the down time + " + std::to_string(extra + gap_bound) + " ms");
    }
    if (g.back < 0 || g.back > back_bound_ms() + extra)
      note(fk + "INFO \"" + kBack + "\" " +
           (g.back < 0 ? "never" : std::to_string(g.back) + " ms") + " after up, bound " +
           std::to_string(back_bound_ms() + extra) + " ms");
    if (g.full < 0 || g.full > full_bound_ms() + extra)
      note(fk + "INFO \"" + kBackFull + "\" " +
           (g.full < 0 ? "never" : std::to_string(g.full) + " ms") + " after up, bound " +
           std::to_string(full_bound_ms() + extra) + " ms");
  }
  for (const std::string& name : order) {
    std::vector<double> fo, fb, back, full, pst;
    for (const Figures& g : groups[name]) {
      fo.push_back(double(g.stall_fo));
      fb.push_back(double(g.stall_fb));
      back.push_back(double(g.back));
      full.push_back(double(g.full));
      pst.push_back(double(g.plugin_stall));
    }
    std::fprintf(stderr,
                 "host%d: [%s] %s: stall per failover %s; per failback %s (before the first "
                 "flap the longest wait was %lld ms); plugin's failover stall %s; up to \"%s\" "
                 "%s; up to \"%s\" %s\n",
                 x.host, kName, name.c_str(), spread(fo, "ms").c_str(), spread(fb, "ms").c_str(),
                 f.ph[0].max_gap_ms, spread(pst, "ms").c_str(), kBack, spread(back, "ms").c_str(),
                 kBackFull, spread(full, "ms").c_str());
  }
  // The plugin's own counts per path: one failover and one failback per flap of its link.
  const Snap& last = snaps.back();
  for (int l = 0; l < 2 && last.ok; ++l) {
    long long n = 0;
    for (const Flap& fl : flaps) n += fl.link == l;
    std::fprintf(stderr,
                 "host%d: [%s] path of %s (eth%d): %lld failovers, %lld failbacks, %.1f MB "
                 "replayed; %lld flaps of its link\n",
                 x.host, kName, x.m[l].name.c_str(), l, last.failovers[l], last.failbacks[l],
                 mb(last.replayed[l]), n);
    if (last.failovers[l] != n || last.failbacks[l] != n)
      note("the path of " + x.m[l].name + " counts " + std::to_string(last.failovers[l]) +
           " failovers and " + std::to_string(last.failbacks[l]) + " failbacks, its link " +
           std::to_string(n) + " flaps");
  }
  // The drain: each member carries > 25 % of its weight's share.
  if (!flaps.empty()) {
    const size_t k = f.ph.size() - 1;
    const Share sh = final_share(x, f.ph[k].start, f.end);
    if (sh.pct < 0 || sh.weight_pct <= 0) {
      note("the drain's shares: counters or the fused device's weights (INFO) not readable");
    } else {
      const double of[2] = {100.0 * (100.0 - sh.pct) / (100.0 - sh.weight_pct),
                            100.0 * sh.pct / sh.weight_pct};
      std::fprintf(stderr,
                   "host%d: [%s] drain: %s %.1f %% of the packets (weight %.1f %%), %s %.1f %% "
                   "(weight %.1f %%): %.0f %% and %.0f %% of their shares (each must be > 25 %%)\n",
                   x.host, kName, x.m[0].name.c_str(), 100.0 - sh.pct, 100.0 - sh.weight_pct,
                   x.m[1].name.c_str(), sh.pct, sh.weight_pct, of[0], of[1]);
      for (int l = 0; l < 2; ++l)
        if (of[l] <= 25) note("in the drain " + x.m[l].name + " carried too little of its share");
    }
  }
  if (const std::string p = nccl_profiler::check(false); !p.empty()) note(p);
  if (!sync(x, 'e')) return fail(3, "soak: sync after the stream");
  buf.reset();
  if (close_comm(x, comm) != ncclSuccess) note("close: " + last_warn());
  if (!bad.empty()) return failed_check(10 + step, std::string(kName) + ": " + bad);
  std::fprintf(stderr, "host%d: [%s] passed\n", x.host, kName);
  return 0;
}

}  // namespace nettest::failover::soak
