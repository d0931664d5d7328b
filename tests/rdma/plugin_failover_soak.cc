// Flap soak of a fused comm between two hosts (issue 31; scripts/rdma-bed --two-host,
// tests/rdma/failover_soak.cmake): one process per VM, exit status = result (0 = pass), the side
// TCP socket on eth0 as in plugin_failover_two_host (its harness, plugin_failover_harness.h, and
// its paced stream, plugin_failover_paced.cc, run the stream here).
//
//   plugin_failover_soak HOST
//
// Both hosts fuse their two devices (path 0 on eth0, path 1 on eth1) and open one fused comm,
// host1 sending, host0 receiving, driven as NCCL drives the plugin: init is given a profiler
// callback, and every isend / irecv a proxy-step handle; the callback stands for a loaded profiler
// plugin (nccl_profiler_default.h, kLoaded: real event handles, every start and stop checked
// against NCCL's contract), SLUICE_TEST_PROFILER=default for NCCL with none loaded. On that one
// comm, one paced stream (kWindow = 8 in flight, log-uniform 4 KiB .. SLUICE_TEST_SOAK_MAX_MSG
// (16 MiB), every other receive posted at the largest size so that it is striped; every byte and
// the guard after it checked, a sentinel last) runs through, in this order:
//   1. SLUICE_TEST_SOAK_FLAPS (10) flaps of the receiver's (host0's) eth1,
//   2. as many of the sender's (host1's) eth1,
//   3. SLUICE_TEST_SOAK_ROUNDS (2) rounds of eth0 down / up then eth1 down / up, on host1 in odd
//      rounds, host0 in even ones: one link down at a time, the next flap only once the last is
//      "back in full" (never both down at once).
// A flap: its host takes the link down (SIOCSIFFLAGS) and, a quarter of SLUICE_TEST_FLAP_MS
// (2000 in CI) later, up again (eth1: only once it logged "fenced on both sides" and completed
// kMinDownDone messages since), then waits for the port ACTIVE with its GID; the next flap (or the
// drain) comes half a period after up, once its host logged "back in full" an eighth of a period
// ago, the other host sent word that it logged it too (the next fault never cuts a ramp short) and
// the link's member carried again (its packet counter up kCarryPackets). No call may fail and every
// byte is checked, so the stream must complete. Checked per flap, each host from what it saw:
//  * eth1: the host that flapped it completed messages after the fence while it was down (the
//    event waits for kMinDownDone; checked: at least one); "failed over" logged then; the longest
//    wait between completions from the fault to "back" within 2 liveness polls
//    + kMoveMs + kMarginMs; host1's eth1 member sent at most the slack while down;
//  * eth0, which the plugin's kept socket and the side socket share (docs/test-bed.md): FENCE and
//    the side bytes wait for the link, so the stream may wait out the down time (not checked:
//    no completion is required while it is down): on the host that flapped it "failed over"
//    logged while down; the longest wait across the flap within the down time +
//    kSocketLinkSlackMs + the bound above;
//  * both: after up "back (epoch" within the back bound and "back in full" within the full bound
//    (the failback knobs, plugin_failover_harness.h; eth0: + kSocketLinkSlackMs, TCP's
//    retransmission of FENCE), and the link's member carrying again before the next flap;
//  * at the end, per path, the plugin's failover and failback counts (sluiceExt_v2) equal the
//    flaps of its link; in the drain each member carries > 25 % of its weight's share;
//  * the profiler: no breach of the contract, the callback called; after the close every event
//    stopped; the process's fds, QPs, CQs and MRs back at the baseline taken after a warm-up comm.
// Printed per flap: the stall of the failover (the longest wait between two completions from the
// fault to "back") and of the failback (from "back" to the end of the up phase), the plugin's own
// failover stall (lastStallMs), the times to "failed over", "back", the member carrying and "back
// in full", and each member's payload bytes (sluiceExt_v2: posted on host1, received on host0) and
// packets (host1 sent, host0 received) in the phase before, the down phase and the up phase; per
// group the stalls' median and min-max. The step, its figures and checks:
// plugin_failover_soak_step.cc.
#include "plugin_failover_soak.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bed_resources.h"
#include "nccl_profiler_default.h"

namespace nettest::failover::soak {

std::vector<Flap> plan() {
  const int n = static_cast<int>(std::max(0L, env_long("SLUICE_TEST_SOAK_FLAPS", 10)));
  const int rounds = static_cast<int>(std::max(0L, env_long("SLUICE_TEST_SOAK_ROUNDS", 2)));
  std::vector<Flap> v;
  for (int k = 0; k < n; ++k) v.push_back({0, 1, "receiver eth1"});
  for (int k = 0; k < n; ++k) v.push_back({1, 1, "sender eth1"});
  for (int r = 1; r <= rounds; ++r) {
    const int h = r % 2 == 1 ? 1 : 0;
    v.push_back({h, 0, "in turn eth0"});
    v.push_back({h, 1, "in turn eth1"});
  }
  return v;
}

std::string Link::down() {
  guard.down = true;
  const auto t = Clock::now();
  const bool ok = set_link(x.netdev[i], false);
  down_at = Clock::now();
  std::fprintf(stderr, "host%d: [soak] %s down took %lld ms\n", x.host, x.netdev[i].c_str(),
               ms_between(t, down_at));
  return ok ? "" : x.netdev[i] + " down failed";
}

std::string Link::up() {
  const auto t = Clock::now();
  if (!set_link(x.netdev[i], true)) return x.netdev[i] + " up failed";
  guard.down = false;
  const long long set_ms = ms_since(t);
  long long took = 0;
  if (!wait_port_back(x.m[i], addr, &took, 5))
    return x.m[i].name + " not ACTIVE with its GID 20 s after up";
  std::fprintf(stderr,
               "host%d: [soak] %s up %lld ms after it went down (the call took %lld ms); %s "
               "ACTIVE with the GID of %s %lld ms later\n",
               x.host, x.netdev[i].c_str(), ms_between(down_at, t), set_ms, x.m[i].name.c_str(),
               addr.c_str(), took);
  return {};
}

Snap snap(const Ctx& x, void* comm) {
  Snap s;
  const auto* ext =
      static_cast<const sluiceExt_v2_t*>(dlsym(Lib::get().handle, SLUICE_EXT_V2_SYMBOL));
  sluiceCommStats_v2_t st{};
  st.size = sizeof st;
  if (ext == nullptr || ext->commStatsV2(comm, &st) != 0) return s;
  for (int l = 0; l < 2; ++l) {
    int member = -1;
    for (int k = 0; k < st.nMembers; ++k)
      if (x.m[l].name == st.members[k].name) member = k;
    if (member < 0) return s;
    s.bytes[l] = static_cast<long long>(st.members[member].bytes);
    for (int p = 0; p < st.nPaths; ++p) {
      if (st.paths[p].localMember != member) continue;
      s.failovers[l] = st.paths[p].failovers;
      s.failbacks[l] = st.paths[p].failbacks;
      s.stall_ms[l] = st.paths[p].lastStallMs;
      s.replayed[l] = static_cast<long long>(st.paths[p].bytesReplayed);
    }
  }
  s.ok = true;
  return s;
}

namespace {

int run(int host) {
  g_host = host;
  g_keep_info = true;
  Ctx x;
  x.host = host;
  const char* a1 = std::getenv("SLUICE_BED_ADDR");
  const char* a2 = std::getenv("SLUICE_BED_ADDR2");
  if (a1 == nullptr || a2 == nullptr || std::getenv("SLUICE_BED_PEER_ADDR") == nullptr)
    return fail(2, "not in the two-host bed with two links (SLUICE_BED_ADDR2 unset)");
  x.addr2 = a2;
  g_max_msg = static_cast<size_t>(
      std::max(long(kMaxMsg), env_long("SLUICE_TEST_SOAK_MAX_MSG", long{16} << 20)));
  x.side = side_socket(host, kSidePort);
  if (x.side < 0) return fail(3, "no side connection");
  const nccl_profiler::Mode mode = nccl_profiler::attach(x.n, nccl_profiler::Mode::kLoaded);
  std::fprintf(stderr, "host%d: [soak] profiler callback given at init: %s\n", host,
               nccl_profiler::mode_name(mode));
  if (x.n.init(0x2430 + host) != ncclSuccess) return fail(2, "init: " + last_warn());
  if (std::string e = fuse(x); !e.empty()) return fail(2, "fusion: " + e);
  // Warm-up: a verified fused connection, opened and closed, then the resource baseline.
  {
    if (!sync(x, 'w')) return fail(3, "sync");
    void* comm = nullptr;
    if (std::string e = open_comm(x, &comm); !e.empty()) return fail(4, "warm-up: " + e);
    RegBuf buf;
    if (!buf.allocate(&x.n, comm, kWindow * kSlot)) return fail(4, "regMr");
    Run r;
    if (std::string e = stream(
            x, comm, buf, fixed_msgs(0, {kMaxMsg, 4096, 65537, kSentinel}, false), {}, false, &r);
        !e.empty())
      return fail(4, "warm-up: " + e);
    buf.reset();
    if (close_comm(x, comm) != ncclSuccess) return fail(4, "warm-up close");
  }
  if (!sync(x, 'W')) return fail(3, "sync");
  const Resources base = Resources::now();
  const auto t = Clock::now();
  const int rc = step_soak(x, 1, a1);
  std::fprintf(stderr, "host%d: step soak: exit %d after %.1f s\n", host, rc,
               double(ms_since(t)) / 1000);
  if (rc != 0) return rc;
  std::fprintf(stderr, "host%d: [soak] %s\n", host, nccl_profiler::summary().c_str());
  if (const std::string e = nccl_profiler::check(true); !e.empty()) failed_check(9, e);
  const std::string leak = Resources::now().diff(base);
  if (!leak.empty()) return fail(9, "not back to the baseline after the soak:" + leak);
  if (x.n.finalize() != ncclSuccess) return fail(9, "finalize");
  close(x.side);
  if (g_failed != 0) {
    std::fprintf(stderr, "host%d: fds/QP/CQ/MR back to the baseline; FAILED (%d): see above\n",
                 host, g_failed);
    return g_failed;
  }
  std::fprintf(stderr, "host%d: fds/QP/CQ/MR back to the baseline; PASS\n", host);
  return 0;
}

}  // namespace
}  // namespace nettest::failover::soak

int main(int argc, char** argv) {
  if (argc != 2 || (std::string(argv[1]) != "0" && std::string(argv[1]) != "1"))
    return std::fprintf(stderr, "usage: %s 0|1\n", argv[0]), 2;
  return nettest::failover::soak::run(std::atoi(argv[1]));
}
