// A primary with a standby between two hosts (issue 20, docs/standby.md; scripts/rdma-bed
// --two-host, tests/rdma/standby.cmake): one process per VM, exit status = result (0 = pass), a
// side TCP socket on eth0 (port kSidePort) carries the listen handle and the sync bytes.
//
//   plugin_standby_two_host HOST
//
// SLUICE_STANDBY=1. Each VM has two devices, one per link; the comm is opened on the device on eth1
// (the primary) on both hosts, so its standby is the device on eth0 (the only other one): the
// primary's link can go down while the kept socket and the side socket, on eth0, stay up. host1
// sends, host0 receives. Two rounds on one comm, each a stream of SLUICE_TEST_STANDBY_MESSAGES
// (160) messages of 4 KiB .. 4 MiB (log-uniform, fixed seed; every other receive posted at 4 MiB,
// the others at their size), 8 in flight, every byte checked with guard bytes after it and a last
// small message (the sentinel) that must arrive as itself; in round 1 the sender (host1) takes its
// eth1 down and up, in round 2 the receiver (host0). Checks, from each host's own port counters
// per phase:
//  * at init the plugin logged the primary's standby, the device on eth0; the comm logged 2 paths,
//    path 1 (the standby's) of weight 0, failover on;
//  * before (up to counters both hosts read just before the fault): the standby sent and received
//    at most kQuiet packets on both hosts (no data, no clear-to-send: host0 sends the CTS
//    writes), while the primary carried the stream;
//  * after a quarter of the messages the round's host takes eth1 down: messages keep completing,
//    its primary sends at most kSlackPackets, the standby carries; both hosts log "failed over"
//    and "fenced on both sides";
//  * at half it takes eth1 up and waits for the port and its GID; then each host must log
//    "back (epoch" (failback) while the stream goes on, then "back in full" once its ramp
//    (SLUICE_FAILBACK_RAMP_MS) ends: until then the receiver stripes part of its receives on the
//    standby's path. From kWindow messages after "back in full" (the receives posted before it may
//    still name the standby's path; the receiver's comes first, as the sender's failback follows
//    the receiver's answer) to the end, the standby sends at most kQuiet packets again and the
//    primary carries every message. (Counted from "back (epoch", the sender's window sometimes
//    began inside the receiver's ramp: the standby then sent thousands of packets there.)
// The longest wait between two completions per phase and the time from "back" to the end are
// printed. init gets a profiler callback and every isend / irecv a step handle, as NCCL gives them
// with no profiler plugin loaded (nccl_profiler_default.h). A warm-up comm (opened, 3 messages,
// closed) comes first; after the stream's comm is closed, the process's QPs, CQs and MRs must be
// back at the count taken after the warm-up, and the plugin must have called the callback.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bed_link.h"
#include "bed_resources.h"
#include "bed_stream.h"
#include "nccl_profiler_default.h"
#include "plugin_bed.h"
#include "side_channel.h"

namespace nettest {
namespace {

using std::chrono::milliseconds;

// kWindow, the messages (4 KiB .. 4 MiB, kSentinel) in slots of kSlot bytes, and kSlackPackets
// (what the primary may still push into its dead link before this side knows): bed_stream.h.
constexpr uint16_t kSidePort = 47126;
constexpr int kTag = 37;
// The standby's packets while the primary carries: none are expected (measured: 0); 2 allow for
// what the kernel might send on an idle RC QP. Without the clear-to-send rule (recv.cc cts_qp),
// the standby carried ~10 CTS writes (and as many ACKs) in a before phase of 15 messages.
constexpr long long kQuiet = 2;

int g_host = -1;

int fail(int code, const std::string& what) {
  std::fprintf(stderr, "host%d: FAILED (%d): %s\n", g_host, code, what.c_str());
  return code;
}

// [0] the primary (the device on eth1), [1] its standby (the device on eth0).
struct Ctx {
  int host = -1;
  int side = -1;
  Net n{12};
  int dev = -1;  // the primary's index: every comm is opened on it
  Props m[2];
  std::string netdev[2];
  std::string addr2;  // SLUICE_BED_ADDR2: eth1's address, whose GID must come back
};

// Both devices' packets (bed_link.h), past ib_core's 10 ms cache of hw_counters.
LinkCounters counters(const Ctx& x) {
  return link_counters(x.m);
}

bool sync(const Ctx& x, char tag) {
  return side_sync(x.side, tag);
}

// The two physical devices, by the link each is on; the primary's standby as the plugin logged it.
std::string find_devices(Ctx& x) {
  int nd = 0;
  if (x.n.devices(&nd) != ncclSuccess) return "devices";
  for (int d = 0; d < nd; ++d) {
    Props p;
    if (x.n.properties(d, &p) != ncclSuccess) return "getProperties";
    const std::string nd_name = read_line(port_dir(p) + "gid_attrs/ndevs/0");
    const int which = nd_name == "eth1" ? 0 : nd_name == "eth0" ? 1 : -1;
    if (which < 0) return p.name + " is on '" + nd_name + "', not eth0 or eth1";
    if (!x.m[which].name.empty()) return "two devices on " + nd_name;
    x.m[which] = p;
    x.netdev[which] = nd_name;
    if (which == 0) x.dev = d;
  }
  if (x.dev < 0 || x.m[1].name.empty()) return "want one device on eth0 and one on eth1";
  const auto said = info_with(0, x.m[0].name + ": standby ");
  if (said.empty()) return "no INFO line naming " + x.m[0].name + "'s standby";
  std::fprintf(stderr, "host%d: plugin INFO: %s\n", x.host, said.back().c_str());
  if (!contains(said.back(), ": standby " + x.m[1].name + ": "))
    return "the standby of " + x.m[0].name + " is not " + x.m[1].name + ": " + said.back();
  return {};
}

// host0 listens on the primary and accepts, host1 connects from its primary.
std::string open_comm(Ctx& x, void** comm) {
  return open_side_comm(x.n, x.host, x.side, x.dev, comm);
}

ncclResult_t close_comm(Ctx& x, void* comm) {
  return close_side_comm(x.n, x.host, comm);
}

// bed_stream.h's random_msgs of this round.
std::vector<Msg> random_msgs(int count, int run) {
  return nettest::random_msgs(0x57a1d + static_cast<uint64_t>(run), run, count, kTag, false);
}

enum { kStart, kPre, kDown, kUp, kBack, kSettled, kEnd, kMarks };
constexpr const char* kMarkName[] = {"start", "pre", "down", "up", "back", "settled", "end"};

struct Mark {
  bool set = false;
  Clock::time_point t{};
  int done = 0;
  LinkCounters c;
};

struct Run {
  Mark mark[kMarks];
  long long max_gap_ms[kMarks] = {};  // longest wait between completions, by the phase it ends in
  int done_in[kMarks] = {};
};

int phase_of(const Run& r) {
  int p = kStart;
  for (int k = kStart; k < kEnd; ++k)
    if (r.mark[k].set) p = k;
  return p;
}

// The stream (host1 sends, host0 receives), kWindow in flight, every completion checked. The
// actor takes its eth1 down at down_at and up at up_at (then waits for the port and its GID) and
// tells the other host ('D', 'U'); each host marks "back" when its comm logs the failback, and
// "settled" kWindow messages after its comm logs "back in full". actor -1: no fault.
std::string stream(Ctx& x, void* comm, RegBuf& buf, const std::vector<Msg>& msgs, int actor,
                   int down_at, int up_at, LinkGuard& link, Run* run) {
  const bool sender = x.host == 1;
  const bool acts = actor == x.host, told = actor >= 0 && !acts;
  const size_t info0 = info_size();
  const int total = static_cast<int>(msgs.size());
  std::vector<void*> reqs(kWindow, nullptr);
  int posted = 0, done = 0;
  int full_at = -1;  // messages done when the comm logged "back in full" (its ramp's end)
  auto mark = [&](int k) {
    Mark& m = run->mark[k];
    m.t = Clock::now();
    m.done = done;
    m.c = counters(x);
    m.set = true;
  };
  mark(kStart);
  auto last = Clock::now();
  auto next_poll = last;
  while (done < total) {
    const auto now = Clock::now();
    if (now - last > wait_limit())
      return std::to_string(done) + " of " + std::to_string(total) + " messages done; none for " +
             std::to_string(wait_limit().count()) + " ms (phase " + kMarkName[phase_of(*run)] + ")";
    while (posted < total && posted - done < kWindow) {
      const Msg& m = msgs[posted];
      uint8_t* p = buf.data() + (posted % kWindow) * kSlot;
      void* req = nullptr;
      const ncclResult_t r = post_msg(x.n, comm, sender, p, buf.mh(), m, kTag, &req);
      if (r != ncclSuccess)
        return std::string(sender ? "isend" : "irecv") + " of message " + std::to_string(posted) +
               " returned " + std::to_string(r) + ": " + last_warn();
      if (req == nullptr) break;
      reqs[posted % kWindow] = req;
      ++posted;
    }
    if (done < posted) {
      int finished = 0, got = -1;
      if (x.n.test(reqs[done % kWindow], &finished, &got) != ncclSuccess)
        return "test of message " + std::to_string(done) + " (phase " + kMarkName[phase_of(*run)] +
               "): " + last_warn();
      if (finished) {
        const Msg& m = msgs[done];
        if (got != static_cast<int>(m.size))
          return "message " + std::to_string(done) + " reported " + std::to_string(got) + " of " +
                 std::to_string(m.size) + " bytes";
        if (!sender) {
          const uint8_t* p = buf.data() + (done % kWindow) * kSlot;
          if (const std::string bad = check_msg(p, m); !bad.empty())
            return "message " + std::to_string(done) + " (" + std::to_string(m.size) +
                   " bytes, phase " + kMarkName[phase_of(*run)] + "): " + bad;
        }
        const auto t = Clock::now();
        const int ph = phase_of(*run);
        run->max_gap_ms[ph] = std::max(run->max_gap_ms[ph], ms_between(last, t));
        ++run->done_in[ph];
        last = t;
        ++done;
      }
    }
    // The fault and its end: the actor acts and tells the other host, which marks them when the
    // byte arrives. Before the fault both hosts read their counters ('P', answered 'p'): the
    // failover's first packets (the receiver's republished clear-to-send) may reach the other
    // host before the 'D' does.
    if (acts && !run->mark[kDown].set && done >= down_at) {
      char b = 'P';
      if (!write_full(x.side, &b, 1) || !read_full(x.side, &b, 1, wait_limit()) || b != 'p')
        return "the peer's answer to 'P'";
      mark(kPre);
      link.down = true;
      if (!set_link(x.host, x.netdev[0], false)) return "eth1 down failed";
      mark(kDown);
      if (const char b = 'D'; !write_full(x.side, &b, 1)) return "side write";
    } else if (acts && run->mark[kDown].set && !run->mark[kUp].set && done >= up_at) {
      if (!set_link(x.host, x.netdev[0], true)) return "eth1 up failed";
      link.down = false;
      long long took = 0;
      if (!wait_port_back(x.m[0], x.addr2, &took, 10))
        return x.m[0].name + " not ACTIVE with its GID 20 s after eth1 up";
      std::fprintf(stderr, "host%d: %s ACTIVE with the GID of %s %lld ms after eth1 up\n", x.host,
                   x.m[0].name.c_str(), x.addr2.c_str(), took);
      mark(kUp);
      if (const char b = 'U'; !write_full(x.side, &b, 1)) return "side write";
    } else if (told && !run->mark[kUp].set && now >= next_poll) {
      pollfd q{x.side, POLLIN, 0};
      if (poll(&q, 1, 0) == 1) {
        char b = 0;
        if (!read_full(x.side, &b, 1, wait_limit())) return "side read";
        const int k = !run->mark[kPre].set ? kPre : !run->mark[kDown].set ? kDown : kUp;
        if (b != "PDU"[k - kPre]) return std::string("unexpected side byte '") + b + "'";
        mark(k);
        if (k == kPre && !write_full(x.side, "p", 1)) return "side write";
      }
    }
    if (now >= next_poll) {
      next_poll = now + milliseconds(5);
      if (run->mark[kUp].set && !run->mark[kBack].set && !info_with(info0, "back (epoch").empty())
        mark(kBack);
      if (run->mark[kBack].set && full_at < 0 && !info_with(info0, "back in full").empty())
        full_at = done;
    }
    if (full_at >= 0 && !run->mark[kSettled].set && done >= full_at + kWindow) mark(kSettled);
  }
  mark(kEnd);
  if (told && !run->mark[kUp].set) {  // the actor's bytes may come after the stream ended
    for (int k : {kPre, kDown, kUp}) {
      if (run->mark[k].set) continue;
      char b = 0;
      if (!read_full(x.side, &b, 1, wait_limit()) || b != "PDU"[k - kPre])
        return std::string("the peer's side byte for ") + kMarkName[k];
      if (k == kPre && !write_full(x.side, "p", 1)) return "side write";
      run->mark[k] = run->mark[kEnd];
    }
  }
  return {};
}

long long delta(const Mark& a, const Mark& b, bool sent, int member) {
  return nettest::delta(a.c, b.c, sent, member);
}

void print_phase(const Ctx& x, const Run& r, int from, int to, const char* name) {
  const Mark& a = r.mark[from];
  const Mark& b = r.mark[to];
  if (!a.set || !b.set) return;
  long long gap = 0;
  for (int k = from; k < to; ++k) gap = std::max(gap, r.max_gap_ms[k]);
  std::fprintf(stderr,
               "host%d: %-10s %3d messages in %6lld ms, longest wait %5lld ms; packets sent %s "
               "%lld, %s %lld; received %s %lld, %s %lld\n",
               x.host, name, b.done - a.done, ms_between(a.t, b.t), gap, x.m[0].name.c_str(),
               delta(a, b, true, 0), x.m[1].name.c_str(), delta(a, b, true, 1), x.m[0].name.c_str(),
               delta(a, b, false, 0), x.m[1].name.c_str(), delta(a, b, false, 1));
}

// The checks of one host's run (docs at the top); `actor` took its eth1 down.
std::string check_run(const Ctx& x, const Run& r, int actor, size_t info0) {
  for (int k = kStart; k < kMarks; ++k)
    if (!r.mark[k].set)
      return std::string("no ") + kMarkName[k] + " mark: " +
             (k >= kBack ? "the comm did not log its failback (\"back (epoch\") in time" : "");
  const bool sender = x.host == 1;
  const Mark &s = r.mark[kStart], &pre = r.mark[kPre], &d = r.mark[kDown], &u = r.mark[kUp],
             &st = r.mark[kSettled], &e = r.mark[kEnd];
  // Before: the standby is quiet on both hosts, the primary carries.
  if (delta(s, pre, true, 1) > kQuiet || delta(s, pre, false, 1) > kQuiet)
    return "before the fault the standby " + x.m[1].name + " sent " +
           std::to_string(delta(s, pre, true, 1)) + " and received " +
           std::to_string(delta(s, pre, false, 1)) + " packets (at most " + std::to_string(kQuiet) +
           ": no data, no clear-to-send)";
  if (delta(s, pre, sender, 0) <= 0) return "before the fault the primary carried nothing";
  // Down: messages complete on the standby; the actor's primary is out.
  if (r.done_in[kDown] < 1) return "no message completed while eth1 was down";
  if (delta(d, u, sender, 1) <= 0) return "the standby carried nothing while eth1 was down";
  if (x.host == actor) {
    const long long kept = delta(d, u, true, 1), gone = delta(d, u, true, 0);
    const long long slack = std::max(kept / 100, kSlackPackets);
    if (gone > slack)
      return x.m[0].name + " sent " + std::to_string(gone) + " packets with its link down (" +
             x.m[1].name + " " + std::to_string(kept) + ", slack " + std::to_string(slack) + ")";
  }
  // Back: the primary carries again, the standby is quiet once the receives named by it are done.
  // Up to kWindow messages completing after the settled mark were posted before it (their packets
  // may all precede it): at least 3 more than that, posted after it, must carry.
  if (e.done - st.done < kWindow + 3)
    return "only " + std::to_string(e.done - st.done) +
           " messages after the failback settled (at least " + std::to_string(kWindow + 3) +
           ": the window in flight and 3 posted after it): it came too late in the stream";
  if (delta(st, e, true, 1) > kQuiet || delta(st, e, false, 1) > kQuiet)
    return "after the failback the standby " + x.m[1].name + " still sent " +
           std::to_string(delta(st, e, true, 1)) + " and received " +
           std::to_string(delta(st, e, false, 1)) + " packets";
  if (delta(st, e, sender, 0) <= 0) return "after the failback the primary carried nothing";
  for (const char* t : {"failed over", "fenced on both sides", "back (epoch"})
    if (info_with(info0, t).empty()) return std::string("no INFO line with \"") + t + "\"";
  return {};
}

void print_transitions(size_t from) {
  std::lock_guard<std::mutex> lk(g_info_mu);
  for (size_t i = from; i < g_info.size(); ++i)
    for (const char* t : {"paths of", "failed over", "fenced on both sides", "recovering",
                          "recovery attempt", "back (epoch", "back in full"})
      if (contains(g_info[i], t)) {
        std::fprintf(stderr, "host%d: plugin INFO: %s\n", g_host, g_info[i].c_str());
        break;
      }
}

int run(int host) {
  g_host = host;
  g_keep_info = true;
  Ctx x;
  x.host = host;
  const char* a2 = std::getenv("SLUICE_BED_ADDR2");
  if (env_long("SLUICE_STANDBY", 0) != 1) return fail(2, "run with SLUICE_STANDBY=1");
  if (a2 == nullptr || std::getenv("SLUICE_BED_PEER_ADDR") == nullptr)
    return fail(2, "not in the two-host bed with two links (SLUICE_BED_ADDR2 unset)");
  x.addr2 = a2;
  x.side = side_socket(host, kSidePort);
  if (x.side < 0) return fail(3, "no side connection");
  // As NCCL calls it: a profiler callback at init (NCCL's own, no profiler plugin loaded) and a
  // step handle with every isend / irecv (nccl_profiler_default.h; SLUICE_TEST_PROFILER).
  nccl_profiler::attach(x.n, nccl_profiler::Mode::kDefault);
  if (x.n.init(0x5b00 + host) != ncclSuccess) return fail(2, "init: " + last_warn());
  if (std::string e = find_devices(x); !e.empty()) return fail(2, e);
  const int n = static_cast<int>(std::max(24L, env_long("SLUICE_TEST_STANDBY_MESSAGES", 160)));
  // Warm-up: a comm opened on the primary, 3 messages, closed; then the resource baseline.
  if (!sync(x, 'w')) return fail(3, "sync");
  {
    void* comm = nullptr;
    if (std::string e = open_comm(x, &comm); !e.empty()) return fail(4, "warm-up: " + e);
    RegBuf buf;
    if (!buf.allocate(&x.n, comm, kWindow * kSlot)) return fail(4, "regMr");
    Run r;
    LinkGuard none{"", false, host};
    if (std::string e = stream(x, comm, buf, random_msgs(2, 0), -1, 0, 0, none, &r); !e.empty())
      return fail(4, "warm-up: " + e);
    buf.reset();
    if (close_comm(x, comm) != ncclSuccess) return fail(4, "warm-up close: " + last_warn());
  }
  if (!sync(x, 'W')) return fail(3, "sync");
  const Resources base = Resources::now();
  const size_t info0 = info_size();
  void* comm = nullptr;
  if (std::string e = open_comm(x, &comm); !e.empty()) return fail(5, e);
  {
    const auto paths = info_with(info0, " paths of ");
    if (paths.empty()) return fail(5, "no INFO line with the comm's paths");
    const std::string& l = paths.back();
    if (!contains(l, "2 paths of") || !contains(l, ", 1=0 ") || !contains(l, "failover on"))
      return fail(5, "want 2 paths, path 1 (the standby's) of weight 0, failover on: " + l);
  }
  RegBuf buf;
  if (!buf.allocate(&x.n, comm, kWindow * kSlot)) return fail(5, "regMr");
  LinkGuard link{"eth1", false, host};
  std::string bad;
  // Round 1: the sender's eth1 goes down and up; round 2, on the same comm: the receiver's.
  Mark prev;                                  // the end of the round before
  for (int round = 1; round <= 2; ++round) {  // both run, whatever round 1's checks said
    const int actor = round == 1 ? 1 : 0;
    if (!sync(x, static_cast<char>('0' + round))) return fail(3, "sync before a round");
    const size_t info1 = info_size();
    Run r;
    const auto t0 = Clock::now();
    std::string e = stream(x, comm, buf, random_msgs(n, round), actor, n / 4, n / 2, link, &r);
    print_transitions(info1);
    if (!e.empty()) return fail(5 + round, "round " + std::to_string(round) + ": " + e);
    std::fprintf(stderr, "host%d: round %d: host%d's eth1 down and up\n", host, round, actor);
    if (prev.set) {  // between the rounds (the syncs): nothing is expected on either device
      Run gap;
      gap.mark[kStart] = prev;
      gap.mark[kPre] = r.mark[kStart];
      gap.mark[kPre].done = prev.done;  // messages: none between the rounds
      print_phase(x, gap, kStart, kPre, "between");
    }
    prev = r.mark[kEnd];
    print_phase(x, r, kStart, kPre, "before");
    print_phase(x, r, kDown, kUp, "down");
    print_phase(x, r, kUp, kBack, "recovering");
    print_phase(x, r, kBack, kSettled, "back");
    print_phase(x, r, kSettled, kEnd, "settled");
    std::fprintf(stderr,
                 "host%d: round %d: %d messages verified in %lld ms; longest wait between "
                 "completions while eth1 was down %lld ms; \"back\" logged %lld ms after eth1 up\n",
                 host, round, n + 1, ms_between(t0, Clock::now()), r.max_gap_ms[kDown],
                 r.mark[kBack].set ? ms_between(r.mark[kUp].t, r.mark[kBack].t) : -1LL);
    if (std::string b = check_run(x, r, actor, info1); !b.empty() && bad.empty())
      bad = "round " + std::to_string(round) + ": " + b;
  }
  if (!sync(x, 'e')) return fail(3, "sync after the stream");
  buf.reset();
  if (close_comm(x, comm) != ncclSuccess && bad.empty()) bad = "close: " + last_warn();
  // QPs, CQs and MRs (bed_resources.h), not the fds.
  const std::string leak = Resources::now().diff(base, false);
  if (bad.empty() && !leak.empty()) bad = "QPs/CQs/MRs not back to the baseline:" + leak;
  std::fprintf(stderr, "host%d: %s\n", host, nccl_profiler::summary().c_str());
  if (const std::string e = nccl_profiler::check(true); bad.empty() && !e.empty()) bad = e;
  if (x.n.finalize() != ncclSuccess && bad.empty()) bad = "finalize";
  close(x.side);
  if (!bad.empty()) return fail(7, bad);
  std::fprintf(stderr, "host%d: PASS\n", host);
  return 0;
}

}  // namespace
}  // namespace nettest

int main(int argc, char** argv) {
  if (argc != 2 || (std::string(argv[1]) != "0" && std::string(argv[1]) != "1"))
    return std::fprintf(stderr, "usage: %s 0|1\n", argv[0]), 2;
  return nettest::run(std::atoi(argv[1]));
}
