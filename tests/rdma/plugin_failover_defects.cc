// plugin_failover_two_host's steps for issue 31's defects (tests/rdma/failover.cmake runs them):
//  hold-rq      the receive queue's half of the fence. host0 runs with SLUICE_TEST_HOLD_RQ=1: every
//               successful receive completion of a fenced QP is held until that QP's drain marker
//               is back, as a NIC whose receive completions trail its send queue's would. A stream
//               of 4 MiB messages (every one striped, so every one has a chain on path 1), 8 in
//               flight. host0 makes no call for kSleepMs, so the closes path 1 delivers meanwhile
//               wait in its CQ, then takes its eth1 down: its next call takes the port's event
//               first, fences path 1 and polls those closes behind its fence, where the hook holds
//               them. Its FENCE must count them (the fence waits for every receive WR of the
//               fenced QPs): else host1, which saw them complete, refuses the FENCE's count
//               (health/qp_ledger.h check_arrived), and a close that had only lost its ACK would
//               be replayed into a receive that completed. Checks: every byte and the sentinel,
//               no call fails, host0 logged that the hook held at least one completion (else the
//               step exercised nothing), both hosts "failed over" and "fenced on both sides".
//  create-fail  host1 runs with SLUICE_TEST_FAILBACK_CREATE_FAILS=1: the first fresh QP failback
//               creates fails, as ibv_create_qp out of memory would. One flap of host1's eth1
//               (step_flaps' checks: the path back within its bound, carrying again); and host1
//               logged the failed attempt with the injected reason, then "back".
//  old-peer     one host runs with SLUICE_TEST_PATH_MSG_SET=1 (the path messages of a Sluice
//               before CHECKED). One flap of host1's eth1 (step_flaps' checks), and both hosts
//               logged at connect that the comm runs path-message set 1; the receiver took the
//               path back without waiting for CHECKED ("checked one way" never logged).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "plugin_failover_harness.h"

namespace nettest::failover {
namespace {

// Long enough for host1 to put a window of 4 MiB messages through (~1 s at the bed's pace).
constexpr long long kSleepMs = 2000;

// The count in host0's INFO "SLUICE_TEST_HOLD_RQ held N successful receive completion(s) ...",
// summed over every such line since `from`.
long long held_since(size_t from) {
  long long n = 0;
  for (const std::string& l : info_with(from, "SLUICE_TEST_HOLD_RQ held ")) {
    const size_t at = l.find("SLUICE_TEST_HOLD_RQ held ");
    n += std::atoll(l.c_str() + at + std::string("SLUICE_TEST_HOLD_RQ held ").size());
  }
  return n;
}

}  // namespace

int step_hold_rq(Ctx& x, int step) {
  const char* name = "hold-rq";
  if (!sync(x, static_cast<char>('a' + step))) return fail(3, "hold-rq: sync");
  const char* hold = std::getenv("SLUICE_TEST_HOLD_RQ");
  if (x.host == 0 && (hold == nullptr || std::string(hold) != "1"))
    return fail(2, "hold-rq: host0 must run with SLUICE_TEST_HOLD_RQ=1 (failover.cmake)");
  void* comm = nullptr;
  if (std::string e = open_comm(x, &comm); !e.empty()) return fail(10 + step, "hold-rq: " + e);
  RegBuf buf;
  if (!buf.allocate(&x.n, comm, kWindow * kSlot)) return fail(10 + step, "regMr");
  std::vector<size_t> sizes(28, kMaxMsg);
  sizes.push_back(kSentinel);
  const auto msgs = fixed_msgs(step, sizes, true);
  // host0 makes no call for kSleepMs while host1 streams (the closes path 1 delivers wait in its
  // CQ), then takes its eth1 down: its next call takes the port's event first, fences path 1 and
  // polls those closes behind its fence, where the hook holds them. eth1 comes back up later.
  Eth1 link(x, name);
  Fault f;
  f.actor = 0;
  f.inject_at = 2 * kWindow;  // past the connection's warm-up
  f.restore_at = 3 * kWindow;
  f.inject = [&] {
    std::fprintf(stderr, "host0: [%s] no call into the plugin for %lld ms, then eth1 down\n", name,
                 kSleepMs);
    usleep(static_cast<useconds_t>(kSleepMs * 1000));
    return link.down();
  };
  f.restore = [&] { return link.up(); };
  const size_t info0 = info_size();
  Run r;
  std::string e = stream(x, comm, buf, msgs, f, false, &r);
  if (e.empty()) e = catch_up(x, f, &r);
  print_transitions(name, info0);
  if (!e.empty()) return fail(10 + step, std::string(name) + ": " + e);
  const char* names[3] = {"before", "dropped", "after"};
  print_run(x, name, r, names);
  if (!sync(x, 'e')) return fail(3, "hold-rq: sync after the stream");
  std::string bad = logged_transitions(info0);
  if (x.host == 0) {
    const long long held = held_since(info0);
    std::fprintf(stderr,
                 "host0: [%s] the hook held %lld successful receive completion(s) of fenced QPs "
                 "until their drain markers were back; the FENCE counted them, no late close\n",
                 name, held);
    if (bad.empty() && held < 1)
      bad =
          "SLUICE_TEST_HOLD_RQ held no completion: the receive queue's half of the fence was "
          "not exercised";
  }
  if (bad.empty() && info_with(info0, kFenced).empty()) bad = "no \"fenced on both sides\"";
  buf.reset();
  if (close_comm(x, comm) != ncclSuccess) return fail(10 + step, "hold-rq: close");
  if (!bad.empty()) return failed_check(20 + step, std::string(name) + ": " + bad);
  return 0;
}

int step_create_fail(Ctx& x, int step) {
  const char* name = "create-fail";
  const char* n = std::getenv("SLUICE_TEST_FAILBACK_CREATE_FAILS");
  if (x.host == 1 && (n == nullptr || std::atoi(n) < 1))
    return fail(2, "create-fail: host1 must run with SLUICE_TEST_FAILBACK_CREATE_FAILS=1");
  const size_t info0 = info_size();
  if (int rc = step_flaps(x, step, name, 1, 1); rc != 0) return rc;
  if (x.host != 1) return 0;
  const auto failed = info_with(info0, "injected by SLUICE_TEST_FAILBACK_CREATE_FAILS");
  const auto back = info_with(info0, kBack);
  std::fprintf(stderr,
               "host1: [%s] %zu attempt step(s) failed on the injected create, then %zu "
               "\"%s\"\n",
               name, failed.size(), back.size(), kBack);
  if (failed.empty())
    return failed_check(20 + step, "create-fail: no attempt failed on the injected create");
  if (back.empty()) return failed_check(20 + step, "create-fail: the path never came back");
  return 0;
}

int step_old_peer(Ctx& x, int step) {
  const char* name = "old-peer";
  const char* set = std::getenv("SLUICE_TEST_PATH_MSG_SET");
  const bool old_here = set != nullptr && std::string(set) == "1";
  const size_t info0 = info_size();
  if (int rc = step_flaps(x, step, name, 1, 1); rc != 0) return rc;
  // This host's comm said at connect which set it runs: the older one, and why.
  const auto sets = info_with(info0, "path-message set 1");
  const std::string why = old_here ? "SLUICE_TEST_PATH_MSG_SET" : "the peer is an older Sluice";
  bool said = false;
  for (const std::string& l : sets) said = said || l.find(why) != std::string::npos;
  std::fprintf(stderr, "host%d: [%s] %s: path-message set 1 %s; \"%s\" %zu time(s)\n", x.host, name,
               old_here ? "this host plays the older Sluice" : "the peer plays it",
               said ? "logged" : "NOT logged", kCheckedOneWay,
               info_with(info0, kCheckedOneWay).size());
  if (!said)
    return failed_check(20 + step, "old-peer: no INFO \"path-message set 1 ... " + why + "\"");
  if (x.host == 0 && !info_with(info0, kCheckedOneWay).empty())
    return failed_check(20 + step, "old-peer: the receiver waited for a CHECKED set 1 has not");
  return 0;
}

}  // namespace nettest::failover
