// plugin_failover_two_host's flap steps (plugin_failover_two_host.cc says what they check):
// sender-port and receiver-port, three flaps of the actor's eth1 on one comm mid-stream, each
// flap's failover and failback timed and bounded.
#include <cstdio>
#include <string>
#include <vector>

#include "plugin_failover_harness.h"

namespace nettest::failover {

// sender-port (actor 1), receiver-port (actor 0): three flaps of the actor's eth1 on one comm.
int step_flaps(Ctx& x, int step, const char* name, int actor, int nflaps) {
  if (!sync(x, static_cast<char>('a' + step))) return fail(3, std::string(name) + ": sync");
  void* comm = nullptr;
  if (std::string e = open_comm(x, &comm); !e.empty()) return fail(10 + step, name + (": " + e));
  RegBuf buf;
  if (!buf.allocate(&x.n, comm, kWindow * kSlot)) return fail(10 + step, "regMr");
  const long long c = cycle_ms();
  Eth1 link(x, name);
  // A failover's wait between completions: detection (a port event) + 2 liveness polls + the move.
  const long long gap_bound = 2 * poll_ms() + kMoveMs + kMarginMs;
  std::vector<Event> ev;
  for (int k = 1; k <= nflaps; ++k) {
    Event d;
    d.actor = actor;
    d.name = "down " + std::to_string(k);
    d.after_ms = k == 1 ? c / 2 : 3 * c / 4;
    d.min_done = k == 1 ? 2 * kWindow : 0;  // the first: past the connection's warm-up
    d.max_ms = full_bound_ms() + c;
    d.until_full = k > 1;  // the last flap back in full a quarter cycle ago
    d.hold_ms = c / 4;
    d.act = [&link] { return link.down(); };
    ev.push_back(d);
    Event u;
    u.actor = actor;
    u.name = "up " + std::to_string(k);
    u.after_ms = c / 4;
    // Down until messages posted after the link went down completed on the path left (the
    // replay of what path 1 had in flight, up to a window of 4 MiB messages' halves at the bed's
    // ~5 MB/s of one link, may take longer than a quarter cycle): then the other host completes
    // them too, within milliseconds of this one.
    u.min_done = kMinDownDone;
    u.max_ms = gap_bound;
    u.watch_back = true;
    u.act = [&link] { return link.up(); };
    ev.push_back(u);
  }
  Event end;
  end.actor = actor;
  end.name = "drain";  // from the end's word to the sentinel
  end.end = true;
  end.after_ms = 3 * c / 4;
  end.until_full = true;
  end.hold_ms = c / 2;  // the last phase: mostly at the full share
  end.max_ms = full_bound_ms() + c;
  ev.push_back(end);
  const size_t info0 = info_size();
  Flow f;
  const Losses l0 = losses(x);
  const std::string e = paced_stream(x, comm, buf, step, kWindow, false, ev, &f);
  if (!e.empty()) {
    print_transitions(name, info0);
    return fail(10 + step, std::string(name) + ": " + e);
  }
  print_paced(x, name, f, l0);
  std::string bad;
  auto note = [&](const std::string& s) {
    if (bad.empty()) bad = s;
  };
  if (x.host == 1) note(both_carried(x, f.ph[0].start, f.ph[1].start));
  const long long slack = c / 8;  // a told host may log a transition before the side byte
  const std::string m1 = x.m[1].name;
  std::vector<double> st_fo, st_fb, to_back, to_carry, to_full, bw_down, bw_up;
  for (int k = 1; k <= nflaps; ++k) {
    const size_t d = 2 * k - 1, u = 2 * k;
    const PhaseStat& D = f.ph[d];
    const PhaseStat& U = f.ph[u];
    const std::string fk = "flap " + std::to_string(k) + ": ";
    const long long fo = f.first_ms(kFailedOver, D.start.t, U.start.t, slack);
    const long long back = f.first_ms(kBack, U.start.t, f.phase_end(u), slack);
    const long long full = f.first_ms(kBackFull, U.start.t, f.phase_end(u), slack);
    // The stalls around the fault and the return, from the completions' times: the failover's
    // from the link down until this host saw "back", the failback's from there to the end of the
    // up phase (a wait across either edge counts, in both when it spans "back").
    const auto back_at = back >= 0 ? U.start.t + milliseconds(back) : f.phase_end(u);
    const long long stall_fo = f.max_gap(D.start.t, back_at);
    const long long stall_fb = f.max_gap(back_at, f.phase_end(u));
    std::fprintf(stderr,
                 "host%d: [%s] flap %d: eth1 down on host%d: INFO \"%s\" %lld ms after it, %d "
                 "messages while down, stall per failover %lld ms; eth1 up: \"%s\" %lld ms, %s "
                 "carries (+%lld packets) %lld ms (a window of messages after \"back\": %lld "
                 "ms), \"%s\" %lld ms after it (bounds %lld, the window + %lld, %lld ms), stall "
                 "per failback %lld ms\n",
                 x.host, name, k, actor, kFailedOver, fo, D.done, stall_fo, kBack, back, m1.c_str(),
                 kCarryPackets, U.carries_ms, U.window_ms, kBackFull, full, back_bound_ms(),
                 kCarrySlackMs, full_bound_ms(), stall_fb);
    st_fo.push_back(double(stall_fo));
    st_fb.push_back(double(stall_fb));
    to_back.push_back(double(back));
    to_carry.push_back(double(U.carries_ms));
    to_full.push_back(double(full));
    bw_down.push_back(phase_mbps(f, d));
    bw_up.push_back(phase_mbps(f, u));
    if (D.done < 1) note(fk + "no message completed while eth1 was down");
    if (stall_fo > gap_bound)
      note(fk + "a wait of " + std::to_string(stall_fo) + " ms between completions after the " +
           "link went down, bound " + std::to_string(gap_bound) + " ms");
    if (fo < 0) note(fk + "no INFO \"" + kFailedOver + "\" while eth1 was down");
    if (x.host == 1) {  // down: the eth1 member out of the stripe
      const long long kept = delta(D.start, U.start, true, 0),
                      gone = delta(D.start, U.start, true, 1);
      const long long most = std::max(kept / 100, kSlackPackets);
      if (kept <= 0) note(fk + x.m[0].name + " sent nothing while eth1 was down");
      if (gone > most)
        note(fk + m1 + " sent " + std::to_string(gone) + " packets while eth1 was down (" +
             x.m[0].name + " " + std::to_string(kept) + "; slack " + std::to_string(most) + ")");
    }
    if (back < 0 || back > back_bound_ms())
      note(fk + "INFO \"" + kBack + "\" " + (back < 0 ? "never" : std::to_string(back) + " ms") +
           " after eth1 up, bound " + std::to_string(back_bound_ms()) + " ms");
    if (back >= 0 && U.window_ms < 0)
      note(fk + "fewer than " + std::to_string(kCarryWindow) + " messages completed after \"" +
           kBack + "\" while eth1 was up");
    if (U.window_ms >= 0 && (U.carries_ms < 0 || U.carries_ms > U.window_ms + kCarrySlackMs))
      note(fk + m1 + "'s packets did not rise " + std::to_string(kCarryPackets) +
           " by the completion of the " + std::to_string(kCarryWindow) +
           "th message posted after \"" + kBack + "\" (" + std::to_string(U.window_ms) +
           " ms after eth1 up; rose: " +
           (U.carries_ms < 0 ? "never" : std::to_string(U.carries_ms) + " ms") + ")");
    if (full < 0 || full > full_bound_ms())
      note(fk + "INFO \"" + kBackFull + "\" " +
           (full < 0 ? "never" : std::to_string(full) + " ms") + " after eth1 up, bound " +
           std::to_string(full_bound_ms()) + " ms");
  }
  const size_t last = 2 * static_cast<size_t>(nflaps);
  const Share sh = final_share(x, f.ph[last].start, f.ph[last + 1].start);
  const double of_share = sh.weight_pct > 0 ? 100.0 * sh.pct / sh.weight_pct : -1;
  const char* counted = x.host == 1 ? "sent" : "received";
  std::fprintf(stderr,
               "host%d: [%s] stall per failover: %s (before the first flap the longest wait was "
               "%lld ms)\n",
               x.host, name, spread(st_fo, "ms").c_str(), f.ph[0].max_gap_ms);
  std::fprintf(stderr,
               "host%d: [%s] stall per failback: %s (before the first flap the longest wait was "
               "%lld ms)\n",
               x.host, name, spread(st_fb, "ms").c_str(), f.ph[0].max_gap_ms);
  std::fprintf(stderr, "host%d: [%s] eth1 up to \"%s\": %s\n", x.host, name, kBack,
               spread(to_back, "ms").c_str());
  std::fprintf(stderr, "host%d: [%s] eth1 up to %s carrying (packets %s): %s\n", x.host, name,
               m1.c_str(), counted, spread(to_carry, "ms").c_str());
  std::fprintf(stderr, "host%d: [%s] eth1 up to \"%s\": %s\n", x.host, name, kBackFull,
               spread(to_full, "ms").c_str());
  std::fprintf(
      stderr, "host%d: [%s] bandwidth: before %.2f MB/s; during (down) %s; after (up) %s\n", x.host,
      name, phase_mbps(f, 0), spread(bw_down, "MB/s", 2).c_str(), spread(bw_up, "MB/s", 2).c_str());
  std::fprintf(stderr,
               "host%d: [%s] last phase (up %d): %s %s %.1f %% of the packets, its weight's share "
               "%.1f %%: %.0f %% of its share (must be > 25 %%)\n",
               x.host, name, nflaps, m1.c_str(), counted, sh.pct, sh.weight_pct, of_share);
  if (sh.pct < 0 || sh.weight_pct <= 0)
    note("the last phase's share: counters or the fused device's weights (INFO) not readable");
  else if (of_share <= 25)
    note("in the last phase " + m1 + " " + counted + " " + std::to_string(sh.pct) +
         " % of the packets, not > 25 % of its weight's share " + std::to_string(sh.weight_pct) +
         " %");
  if (!sync(x, 'e')) return fail(3, std::string(name) + ": sync after the stream");
  buf.reset();
  if (close_comm(x, comm) != ncclSuccess) note("close: " + last_warn());
  if (!bad.empty()) return failed_check(10 + step, std::string(name) + ": " + bad);
  std::fprintf(stderr, "host%d: [%s] passed\n", x.host, name);
  return 0;
}

}  // namespace nettest::failover
