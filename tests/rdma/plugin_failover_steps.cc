// plugin_failover_two_host's steps other than the flaps (plugin_failover_two_host.cc says what
// they check): fence (no late write into a re-posted receive buffer), idle (a path gone with
// nothing in flight), silent (a path that stops answering, no port event) and all-gone (every
// path lost: the comm fails).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "plugin_failover_harness.h"

namespace nettest::failover {

// fence: path 1's packets delayed kDelayMs at host0's eth1 ingress (ifb + netem; or at host1's
// egress with SLUICE_TEST_FENCE_DELAY=sender), host1's eth1 down 300 ms later; every receive
// buffer checked whole at its completion, before its re-post and at the end.
int step_fence(Ctx& x, int step) {
  const char* name = "fence";
  if (!sync(x, static_cast<char>('a' + step))) return fail(3, "fence: sync");
  void* comm = nullptr;
  if (std::string e = open_comm(x, &comm); !e.empty()) return fail(10 + step, "fence: " + e);
  const int nslots = 2 * kWindow;
  RegBuf buf;
  if (!buf.allocate(&x.n, comm, nslots * kSlot)) return fail(10 + step, "regMr");
  const char* at = std::getenv("SLUICE_TEST_FENCE_DELAY");
  const bool at_sender = at != nullptr && std::string(at) == "sender";
  const int delayer = at_sender ? 1 : 0;
  // Long enough that the packets path 1 sent last arrive after host0's fence: with the delay in
  // place path 1 sends one window (128 packets per QP) and waits for its ACKs, so its last
  // packets left between the delay's start and the link going down 300 ms later (100 ms was too
  // short: in one run path 1 sent a single packet in it, so that only 2 arrived late); the fence
  // took up to ~400 ms after the link on the bed (the FENCE waits for the flush of the sender's
  // QPs), so whatever path 1 sent delayed arrives after it.
  constexpr long long kDelayMs = 1000;
  static constexpr const char* kIfb = "ifbfence";
  const auto delay = [](long long ms) { return "delay " + std::to_string(ms) + "ms"; };
  const std::string& nd = x.netdev[1];
  // The path goes through netem from the start, with no delay: the event that delays it changes
  // one qdisc, so that the delay starts when the event's side byte goes (a batch that added the
  // filters took a second or more to return on a loaded VM: path 1 had sent its last window,
  // unacknowledged, long before the link went down, and its packets arrived before the fence).
  // At host0: RoCE v2 (UDP dport 4791) arriving on eth1 goes through kIfb, whose egress delays it
  // (bed_tc.h's RoceDelay, which takes the delay away and deletes kIfb if the step ends early).
  sluice::rdmatest::RoceDelay netem;
  if (x.host == delayer) {
    if (std::string e = netem.install(nd, at_sender ? "" : kIfb, delay(0)); !e.empty())
      return fail(10 + step, "fence: " + e);
  }
  if (!sync(x, 'p')) return fail(3, "fence: sync after the preparation");
  Eth1 link(x, name);
  const long long c = cycle_ms();
  std::vector<Event> ev(5);
  ev[0].actor = delayer;
  ev[0].name = "delayed";
  ev[0].after_ms = c / 4;
  ev[0].min_done = 2 * kWindow;  // past the connection's warm-up
  ev[0].max_ms = wait_limit().count();
  ev[0].async = true;
  ev[0].act = [&] { return netem.change(delay(kDelayMs)); };
  ev[1].actor = 1;
  ev[1].name = "down";
  ev[1].after_ms = 300;
  ev[1].act = [&link] { return link.down(); };
  ev[2].actor = delayer;
  ev[2].name = "undelayed";  // every delayed packet has arrived
  ev[2].after_ms = kDelayMs + 300;
  ev[2].async = true;
  ev[2].act = [&] { return netem.remove(); };
  ev[3].actor = 1;
  ev[3].name = "up";
  ev[3].watch_back = true;
  ev[3].act = [&link] { return link.up(); };
  ev[4].actor = 1;
  ev[4].name = "drain";
  ev[4].end = true;
  ev[4].after_ms = c / 4;
  ev[4].until_full = true;
  ev[4].hold_ms = c / 8;
  ev[4].max_ms = full_bound_ms() + c / 4;
  // host0: RoCE packets of path 1 that reached it after its fence (the ifb's, else eth1's, counter)
  // and those rxe1 took in (its received packets), from the fence to the delay's removal.
  const std::string late_file = std::string("/sys/class/net/") + (at_sender ? nd : kIfb) +
                                "/statistics/" + (at_sender ? "rx_packets" : "tx_packets");
  auto late_counter = [&]() -> long long {
    const std::string v = read_line(late_file);
    return v.empty() ? -1 : std::atoll(v.c_str());
  };
  const int port1 = x.m[1].port > 0 ? x.m[1].port : 1;
  long long late0 = -1, late1 = -1, took0 = -1, took1 = -1;
  Flow f;
  auto at_fence = [&] {
    if (x.host != 0) return;
    late0 = late_counter();
    took0 = device_rcvd_packets(x.m[1].name, port1);
  };
  auto at_phase = [&](size_t k) {
    if (x.host != 0 || f.ph[k].name != "undelayed") return;
    late1 = late_counter();
    took1 = device_rcvd_packets(x.m[1].name, port1);
  };
  const size_t info0 = info_size();
  const Losses l0 = losses(x);
  const std::string e = paced_stream(x, comm, buf, step, nslots, true, ev, &f, at_fence, at_phase);
  if (!e.empty()) {
    print_transitions(name, info0);
    return fail(10 + step, std::string("fence: ") + e);
  }
  print_paced(x, name, f, l0);
  std::string bad;
  auto note = [&](const std::string& s) {
    if (bad.empty()) bad = s;
  };
  note(logged_transitions(info0));
  const size_t up = 4;
  const long long back = f.first_ms(kBack, f.ph[up].start.t, f.end.t, c / 8);
  std::fprintf(
      stderr, "host%d: [fence] eth1 up on host1: \"%s\" %lld ms, \"%s\" %lld ms after it\n", x.host,
      kBack, back, kBackFull, f.first_ms(kBackFull, f.ph[up].start.t, f.end.t, c / 8));
  if (back < 0 || back > back_bound_ms())
    note(std::string("INFO \"") + kBack + "\" " +
         (back < 0 ? "never" : std::to_string(back) + " ms") + " after eth1 up, bound " +
         std::to_string(back_bound_ms()) + " ms");
  if (x.host == 0) {
    const long long late = late0 >= 0 && late1 >= 0 ? late1 - late0 : -1;
    std::fprintf(stderr,
                 "host0: [fence] fence check: %lld RoCE packets of path 1 reached host0 after its "
                 "fence (delayed %lld ms at %s; counted by %s), %s took %lld of them in\n",
                 late, kDelayMs, at_sender ? "host1's eth1 egress" : "host0's eth1 ingress",
                 late_file.c_str(), x.m[1].name.c_str(),
                 took0 >= 0 && took1 >= 0 ? took1 - took0 : -1);
    std::fprintf(stderr, "host0: [fence] fence check: %d buffers re-posted, %lld late bytes%s%s\n",
                 f.reposted, f.late_bytes, f.late_first.empty() ? "" : "; ", f.late_first.c_str());
    if (f.late_bytes != 0)
      note(std::to_string(f.late_bytes) + " late bytes in receive buffers: " + f.late_first);
    if (f.reposted < 1) note("no buffer was re-posted");
    if (!at_sender && late <= 0)
      note("no delayed packet of path 1 reached host0 after its fence (" +
           (late < 0 ? std::string("no fence seen or counter unreadable") : "0") +
           "): the fence was not exercised");
  }
  if (!sync(x, 'e')) return fail(3, "fence: sync after the stream");
  buf.reset();
  if (close_comm(x, comm) != ncclSuccess) note("close: " + last_warn());
  if (!bad.empty()) return failed_check(10 + step, std::string("fence: ") + bad);
  std::fprintf(stderr, "host%d: [fence] passed\n", x.host);
  return 0;
}

// idle: eth1 down on host1 with nothing in flight, then 8 messages.
int step_idle(Ctx& x, int step) {
  const char* name = "idle";
  if (!sync(x, static_cast<char>('a' + step))) return fail(3, "idle: sync");
  void* comm = nullptr;
  if (std::string e = open_comm(x, &comm); !e.empty()) return fail(10 + step, "idle: " + e);
  RegBuf buf;
  if (!buf.allocate(&x.n, comm, kWindow * kSlot)) return fail(10 + step, "regMr");
  const size_t info0 = info_size();
  Run warm;
  if (std::string e =
          stream(x, comm, buf, fixed_msgs(step, {1 << 20, 1 << 20}, true), {}, false, &warm);
      !e.empty())
    return fail(10 + step, "idle: before the link went down: " + e);
  if (!sync(x, 'i')) return fail(3, "idle: sync");
  LinkGuard link{"eth1", false, x.host};
  Counters c0;
  char b = 'D';
  if (x.host == 1) {
    c0 = counters(x);
    link.down = true;
    if (!set_link(x.netdev[1], false)) return fail(10 + step, "idle: eth1 down");
    if (!write_full(x.side, &b, 1)) return fail(3, "idle: side write");
  } else if (!read_full(x.side, &b, 1, wait_limit()) || b != 'D') {
    return fail(3, "idle: host1's word that eth1 is down");
  }
  usleep(2000 * 1000);  // idle with the path gone: no call into the plugin
  Run r;
  const auto msgs = fixed_msgs(
      step, {4096, kMaxMsg, 65536, 65537, 12345, size_t{1} << 20, (size_t{2} << 20) + 3, kSentinel},
      false);
  const auto t = Clock::now();
  if (std::string e = stream(x, comm, buf, msgs, {}, false, &r); !e.empty()) {
    print_transitions(name, info0);
    return fail(10 + step, "idle: after 2 s with eth1 down on host1: " + e);
  }
  std::fprintf(stderr, "host%d: [idle] %zu messages verified in %lld ms after 2 s idle\n", x.host,
               msgs.size(), ms_since(t));
  std::string bad;
  if (x.host == 1) {
    const Counters c1 = counters(x);
    std::fprintf(stderr, "host%d: [idle] packets sent while eth1 was down: %s %lld, %s %lld\n",
                 x.host, x.m[0].name.c_str(), c1.sent[0] - c0.sent[0], x.m[1].name.c_str(),
                 c1.sent[1] - c0.sent[1]);
    if (c1.sent[1] != c0.sent[1])
      bad = x.m[1].name + " sent " + std::to_string(c1.sent[1] - c0.sent[1]) +
            " packets with its link down";
    if (!set_link(x.netdev[1], true)) return fail(10 + step, "idle: eth1 up");
    link.down = false;
    long long took = 0;
    if (!wait_port_back(x.m[1], x.addr2, &took, 10))
      return fail(10 + step, "idle: eth1's port or GID not back");
  }
  print_transitions(name, info0);
  if (bad.empty()) bad = logged_transitions(info0);
  if (!sync(x, 'j')) return fail(3, "idle: sync after");
  buf.reset();
  if (close_comm(x, comm) != ncclSuccess && bad.empty()) bad = "close: " + last_warn();
  if (!bad.empty()) return failed_check(10 + step, std::string("idle: ") + bad);
  std::fprintf(stderr, "host%d: [idle] passed\n", x.host);
  return 0;
}

// silent: every RoCE packet arriving on host1's eth1 dropped mid-stream (no port event).
int step_silent(Ctx& x, int step) {
  const char* name = "silent";
  if (!sync(x, static_cast<char>('a' + step))) return fail(3, "silent: sync");
  void* comm = nullptr;
  if (std::string e = open_comm(x, &comm); !e.empty()) return fail(10 + step, "silent: " + e);
  RegBuf buf;
  if (!buf.allocate(&x.n, comm, kWindow * kSlot)) return fail(10 + step, "regMr");
  const int n = messages();
  const auto msgs = random_msgs(step, n);
  sluice::rdmatest::RoceDrop drop;
  Fault f;
  f.actor = 1;
  f.inject_at = n / 3;
  f.restore_at = 2 * n / 3;  // no action: the mark of the last third
  f.inject = [&] { return drop.install_on({x.netdev[1]}); };
  const size_t info0 = info_size();
  Run r;
  std::string e = stream(x, comm, buf, msgs, f, false, &r);
  if (e.empty()) e = catch_up(x, f, &r);
  // While the filter is in place path 1 works one way: host1's packets reach host0, host0's ACKs
  // are dropped. host0 reads its log of that window before host1 lifts the filter: its answered
  // recovery attempts must have stopped at "checked one way", never "back".
  const size_t info_lifted = info_size();
  const bool synced = sync(x, 'd');
  if (x.host == 1) {
    std::fprintf(stderr, "host%d: [%s] the filter dropped %ld packets\n", x.host, name,
                 drop.dropped());
    if (!drop.remove()) e = e.empty() ? "removing the tc filter" : e;
  }
  if (!synced && e.empty()) e = "sync before the filter was lifted";
  print_transitions(name, info0);
  if (!e.empty()) return fail(10 + step, std::string(name) + ": " + e);
  const char* names[3] = {"before", "dropped", "quiet"};
  print_run(x, name, r, names);
  const auto since_fault = [&](bool seen, Clock::time_point t) {
    return seen ? std::to_string(ms_between(r.mark[kFault].t, t)) + " ms" : std::string("never");
  };
  std::fprintf(stderr,
               "host%d: [%s] RoCE dropped on eth1 on host1: first completion %lld ms after it; "
               "longest wait between completions %lld ms; INFO \"%s\" %s, \"%s\" %s after it\n",
               x.host, name, r.first_after_fault_ms, r.max_gap_ms[1], kFailedOver,
               since_fault(r.seen_failed_over, r.failed_over_at).c_str(), kFenced,
               since_fault(r.seen_fenced, r.fenced_at).c_str());
  if (!sync(x, 'e')) return fail(3, "silent: sync after the stream");
  std::string bad;
  const long long bound = silent_detect_ms() + 2 * poll_ms() + kMoveMs + kMarginMs;
  if (x.host == 1) bad = both_carried(x, r.mark[kStart], r.mark[kFault]);
  if (bad.empty() && r.done_in[1] < 1) bad = "no message completed while dropped";
  if (bad.empty() && r.max_gap_ms[1] > bound)
    bad = "a wait of " + std::to_string(r.max_gap_ms[1]) + " ms between completions after the " +
          "fault, bound " + std::to_string(bound) + " ms";
  if (bad.empty() && x.host == 1) {
    // Once failed over (the last third) the eth1 member is out of the stripe.
    const Mark& a = r.mark[kRestore];
    const Mark& b = r.mark[kEnd];
    const long long kept = delta(a, b, true, 0), gone = delta(a, b, true, 1);
    const long long slack = std::max(kept / 100, kSlackPackets);
    if (kept <= 0) bad = x.m[0].name + " sent nothing while " + x.m[1].name + " was out";
    if (bad.empty() && gone > slack)
      bad = x.m[1].name + " sent " + std::to_string(gone) + " packets while out of the stripe (" +
            x.m[0].name + " " + std::to_string(kept) + "; slack " + std::to_string(slack) + ")";
  }
  if (bad.empty() && x.host == 0) {
    // The one-way path, as the receiver saw it while dropped (info0 .. info_lifted).
    const auto in_window = [&](const char* text) {
      return info_with(info0, text).size() - info_with(info_lifted, text).size();
    };
    const size_t one_way = in_window(kCheckedOneWay), back = in_window(kBack);
    std::fprintf(stderr,
                 "host%d: [%s] while dropped: %zu recovery attempt(s) answered, %zu \"%s\", %zu "
                 "\"%s\"\n",
                 x.host, name, in_window(kOffered), one_way, kCheckedOneWay, back, kBack);
    if (one_way < 1)
      bad = std::string("no recovery attempt reached \"") + kCheckedOneWay +
            "\" while the ACKs were dropped (the one-way check was not exercised)";
    else if (back > 0)
      bad = std::string("path 1 was taken back (\"") + kBack + "\") while it worked one way only";
  }
  if (bad.empty()) bad = logged_transitions(info0);
  buf.reset();
  if (close_comm(x, comm) != ncclSuccess && bad.empty()) bad = "close: " + last_warn();
  if (!bad.empty()) return failed_check(10 + step, std::string(name) + ": " + bad);
  std::fprintf(stderr, "host%d: [%s] passed\n", x.host, name);
  return 0;
}

// all-gone: every RoCE packet arriving at host1 dropped, on both links, with 4 MiB messages in
// flight: both paths fail and so does the comm, on both hosts, within the bound.
int step_all_gone(Ctx& x, int step) {
  const char* name = "all-gone";
  if (!sync(x, static_cast<char>('a' + step))) return fail(3, "all-gone: sync");
  void* comm = nullptr;
  if (std::string e = open_comm(x, &comm); !e.empty()) return fail(10 + step, "all-gone: " + e);
  RegBuf buf;
  if (!buf.allocate(&x.n, comm, kWindow * kSlot)) return fail(10 + step, "regMr");
  const long long bound = env_long("SLUICE_TEST_ALL_GONE_MS", 20000);
  sluice::rdmatest::RoceDrop drop;
  Fault f;
  f.actor = 1;
  f.inject_at = 3;
  f.inject = [&] {
    const auto t = Clock::now();
    std::string e = drop.install_on({x.netdev[0], x.netdev[1]});
    std::fprintf(stderr, "host1: [all-gone] filters on %s and %s installed in %lld ms\n",
                 x.netdev[0].c_str(), x.netdev[1].c_str(), ms_since(t));
    return e;
  };
  const size_t info0 = info_size();
  Run r;
  std::string bad;
  {
    sluice::rdmatest::ExpectWarns expect;
    std::string e =
        stream(x, comm, buf, fixed_msgs(step, std::vector<size_t>(64, kMaxMsg), true), f, true, &r);
    if (x.host == 1 && !drop.remove() && e.empty()) e = "removing the tc filters";
    if (e.empty()) e = catch_up(x, f, &r);
    if (!e.empty()) {
      print_transitions(name, info0);
      return fail(10 + step, std::string("all-gone: ") + e);
    }
    if (!r.comm_failed) bad = "all 64 messages completed with every RoCE packet to host1 dropped";
  }
  print_transitions(name, info0);
  if (r.comm_failed) {
    const long long took = std::max(0LL, ms_between(r.mark[kFault].t, r.failed_at));
    const long long b = x.host == 1 ? bound : bound + kMarginMs;
    std::fprintf(stderr,
                 "host%d: [all-gone] the comm failed %lld ms after the filters (bound %lld "
                 "ms): %s\n",
                 x.host, took, b, r.comm_error.c_str());
    if (bad.empty() && took > b) bad = "the comm failed late";
    if (bad.empty() && x.host == 1 &&
        !(contains(r.comm_error, "path 0: ") && contains(r.comm_error, "path 1: ")))
      bad = "the WARN does not name every path (\"path 0: \", \"path 1: \")";
  }
  if (!sync(x, 'g')) return fail(3, "all-gone: sync after");
  buf.reset();
  {
    sluice::rdmatest::ExpectWarns expect;  // the failure may be reported again at close
    if (close_comm(x, comm) != ncclSuccess && bad.empty())
      bad = "closing the failed comm: " + last_warn();
  }
  if (!bad.empty()) return failed_check(10 + step, std::string("all-gone: ") + bad);
  std::fprintf(stderr, "host%d: [all-gone] passed\n", x.host);
  return 0;
}

}  // namespace nettest::failover
