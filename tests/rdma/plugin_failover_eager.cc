// plugin_failover_two_host's eager step (plugin_failover_two_host.cc says what every step checks):
// the eager path on a fused comm across a real link flap.
//
//  eager  a stream of SLUICE_TEST_FAILOVER_MESSAGES small messages: 0 .. 4,096 bytes (sent eagerly,
//         into the receiver's ring, by both paths in turn: datapath/eager.cc), every 64th of
//         4,097 .. 64 KiB (clear-to-send: it asks, and the receiver publishes the next window's
//         receives at once until a small one completes), kWindow in flight, receives posted at the
//         message's size or at 4 MiB in turn; after a third host1 takes its eth1 down (path 1 fails
//         over with eager WRITEs in flight on it: those are posted again on path 0 once both sides
//         fenced it), after two thirds up again (failback). Every receive completes once, with
//         its size and every byte, the guard after it untouched, and the sentinel last (no
//         message arrived twice: the receiver takes each eager message by its counter, so a
//         replayed copy of one it took is never taken again). Host1 sent at least half of the
//         messages eagerly and host0 copied as many out of its ring; the eager WRITEs posted again
//         are printed (how many were in flight on path 1 at the failover is the bed's timing;
//         plugin_device_fatal_fused counts them where it is not).
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "ext_stats.h"
#include "plugin_failover_harness.h"

namespace nettest::failover {

namespace {

std::vector<Msg> eager_msgs(int step, int count) {
  std::mt19937_64 rng(0xea9e + static_cast<uint64_t>(step));
  std::vector<Msg> v;
  for (int i = 0; i < count; ++i) {
    const size_t s = i % 64 == 63 ? 4097 + rng() % (65536 - 4097) : rng() % 4097;
    v.push_back({s, i % 2 == 0 ? kMaxMsg : s, pattern_seed(s, 100000u * step + i, kTag)});
  }
  v.push_back({kSentinel, kSentinel, pattern_seed(kSentinel, 100000u * step + 99999, kTag)});
  return v;
}

}  // namespace

int step_eager(Ctx& x, int step) {
  const char* name = "eager";
  if (!sync(x, static_cast<char>('a' + step))) return fail(3, "eager: sync");
  void* comm = nullptr;
  if (std::string e = open_comm(x, &comm); !e.empty()) return fail(10 + step, "eager: " + e);
  RegBuf buf;
  if (!buf.allocate(&x.n, comm, kWindow * kSlot)) return fail(10 + step, "regMr");
  const int n = messages();
  const auto msgs = eager_msgs(step, n);
  sluiceCommStats_v1_t s0{};
  if (!comm_stats(comm, &s0)) return fail(10 + step, "eager: no statistics extension");
  Eth1 eth1(x, name);
  Fault f;
  f.actor = 1;
  f.inject_at = n / 3;
  f.restore_at = 2 * n / 3;
  f.inject = [&] { return eth1.down(); };
  f.restore = [&] { return eth1.up(); };
  const size_t info0 = info_size();
  Run r;
  std::string e = stream(x, comm, buf, msgs, f, false, &r);
  if (e.empty()) e = catch_up(x, f, &r);
  print_transitions(name, info0);
  if (!e.empty()) return fail(10 + step, std::string(name) + ": " + e);
  const char* names[3] = {"before", "down", "up"};
  print_run(x, name, r, names);
  sluiceCommStats_v1_t s1{};
  std::string bad;
  if (!comm_stats(comm, &s1)) bad = "no statistics after the stream";
  const long long eager = static_cast<long long>(s1.eagerMessages - s0.eagerMessages);
  const long long replays = x.host == 1 ? eager_replays(comm) : 0;
  std::fprintf(stderr,
               "host%d: [%s] %d messages, %lld %s eagerly; %lld eager WRITEs posted again after "
               "the failover\n",
               x.host, name, n + 1, eager, x.host == 1 ? "sent" : "copied out of the ring",
               replays);
  if (bad.empty() && eager < n / 2)
    bad = "only " + std::to_string(eager) + " of " + std::to_string(n) +
          " messages went eagerly (is the eager path on for fused comms: SLUICE_EAGER_FUSED?)";
  if (bad.empty() && r.done_in[1] < 1) bad = "no message completed while eth1 was down";
  if (bad.empty()) bad = logged_transitions(info0);
  if (!sync(x, 'e')) return fail(3, "eager: sync after the stream");
  buf.reset();
  if (close_comm(x, comm) != ncclSuccess && bad.empty()) bad = "close: " + last_warn();
  if (!bad.empty()) return failed_check(10 + step, std::string(name) + ": " + bad);
  std::fprintf(stderr, "host%d: [%s] passed\n", x.host, name);
  return 0;
}

}  // namespace nettest::failover
