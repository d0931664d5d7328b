// Failover of a fused comm between two hosts (issue 20; scripts/rdma-bed --two-host,
// tests/rdma/failover.cmake): one process per VM, exit status = result (0 = pass), a side TCP
// socket on eth0 (port kSidePort) carries the listen handles and the sync bytes.
//
//   plugin_failover_two_host HOST STEP[,STEP...]
//
// Each host fuses its two devices with makeVDevice (path 0: the device on eth0, the bed address,
// where the kept socket and the side socket run too; path 1: the device on eth1) and every
// connection is fused -> fused, host1 sending, host0 receiving. Failover is on (SLUICE_FAILOVER
// unset). Every step opens a fresh connection; every byte is pattern-checked with guard bytes
// after it, every receive must complete once with its size, and a last small message (the
// sentinel) must arrive as itself, so that no message arrived twice. Steps:
//  sender-port    a stream of SLUICE_TEST_FAILOVER_MESSAGES (300) messages of 4 KiB .. 4 MiB
//                 (log-uniform, fixed seed, every other receive posted at 4 MiB so that it is
//                 striped, the others at their size, whole on one path below SLUICE_STRIPE_MIN),
//                 kWindow in flight. After a third of them host1 takes its eth1 down, after two
//                 thirds up again (port ACTIVE and its GID back). No call may fail. Per phase
//                 (before / down / after) each member's packet counters are read on both hosts;
//                 host1's sent packets must show: before, both members carried (each >= 10 % of
//                 the packets: a new connection uses both); down, the eth1 member sent at most
//                 max(1 % of the eth0 member's, kSlackPackets) while messages kept completing, the
//                 longest wait between two completions within the link bound. Failback is not
//                 required: after the link is up the comm may stay on path 0. Both hosts must have
//                 logged an INFO line with "failed over" and one with "fenced on both sides".
//  receiver-port  the same with host0 (the receiver) taking its eth1 down and up.
//  idle           a fresh connection, 2 messages, then nothing in flight: host1 takes eth1 down,
//                 both wait 2 s, then 8 messages of 4 KiB .. 4 MiB arrive verified and host1's
//                 eth1 member sent no packet meanwhile; eth1 up.
//  silent         the stream again; after a third host1 drops every RoCE packet arriving on its
//                 eth1 (tc ingress filter, UDP dport 4791: no port event), kept to the end. The
//                 stream completes verified (failover by RC retries exhausted or the progress
//                 watchdog, run with short NCCL_IB_TIMEOUT / NCCL_IB_RETRY_CNT); the time from the
//                 filter to the first completion after it and the longest wait are printed, the
//                 wait bounded by detection (RC bound, else the watchdog's) + 2 polls + kMoveMs;
//                 in the last third the eth1 member sent at most the slack.
//  all-gone       4 MiB messages, kWindow in flight; after 3 host1 drops every RoCE packet
//                 arriving on eth0 and eth1 (the side and kept sockets are TCP: untouched). host1's
//                 comm must fail within SLUICE_TEST_ALL_GONE_MS (20000) of the filters with a WARN
//                 naming every path ("path 0: ", "path 1: "); host0's pending receive must fail
//                 too (the failure notice), within that bound + 5 s. Filters removed, both close.
// Each invocation starts with a verified warm-up connection (opened and closed) and ends with the
// process's fds, QPs, CQs and MRs back at the count taken after it. A step whose data path failed
// (an error, a byte wrong, a wait past SLUICE_TEST_DEADLINE_S) ends the run; one whose checks
// failed after it ended cleanly (a bound, a counter, a log line) lets the next steps run, so one
// boot reports every step, and the exit status is the first failure's.
#include <arpa/inet.h>
#include <net/if.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bed_link.h"
#include "bed_tc.h"
#include "plugin_bed.h"
#include "side_channel.h"

namespace nettest {
namespace {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

constexpr uint16_t kSidePort = 47125;
constexpr int kTag = 31;
constexpr int kWindow = 8;
constexpr size_t kMinMsg = 4096;
constexpr size_t kMaxMsg = size_t{4} << 20;
constexpr size_t kSlot = (kMaxMsg + kGuard + 4095) / 4096 * 4096;
constexpr size_t kSentinel = 4099;
// rxe sends at most 128 packets past the last ACK on a QP (RXE_MAX_UNACKED_PSNS); until this side
// learns of the peer's fault (one liveness poll) the failed path's QP may still send that window.
constexpr long long kSlackPackets = 256;
// A failover's wait between two completions beyond detection: the replay and the messages queued
// on the path left (a window of 8 x 4 MiB at ~5 MB/s, the bed's one link) move meanwhile.
constexpr long long kMoveMs = 10000;
constexpr long long kMarginMs = 5000;  // scheduling margin (two TCG VMs on a loaded host)

int g_host = -1;

long long ms_since(Clock::time_point t) {
  return duration_cast<milliseconds>(Clock::now() - t).count();
}
long long ms_between(Clock::time_point a, Clock::time_point b) {
  return duration_cast<milliseconds>(b - a).count();
}

int fail(int code, const std::string& what) {
  std::fprintf(stderr, "host%d: FAILED (%d): %s\n", g_host, code, what.c_str());
  return code;
}

// A check that failed after its step ended cleanly (both hosts in step, the comm closed): the
// steps after it still run, so that one boot reports them all; the exit status is the first's.
int g_failed = 0;
int failed_check(int code, const std::string& what) {
  fail(code, what);
  if (g_failed == 0) g_failed = code;
  return 0;
}

// ---- Kept INFO lines (the plugin's transitions) ------------------------------------------------

size_t info_size() {
  std::lock_guard<std::mutex> lk(g_info_mu);
  return g_info.size();
}

// Kept INFO lines from `from` on that contain `text`.
std::vector<std::string> info_with(size_t from, const char* text) {
  std::lock_guard<std::mutex> lk(g_info_mu);
  std::vector<std::string> out;
  for (size_t i = from; i < g_info.size(); ++i)
    if (contains(g_info[i], text)) out.push_back(g_info[i]);
  return out;
}

constexpr const char* kFailedOver = "failed over";
constexpr const char* kFenced = "fenced on both sides";

// Prints the failover transitions the plugin logged since `from`.
void print_transitions(const char* step, size_t from) {
  std::lock_guard<std::mutex> lk(g_info_mu);
  for (size_t i = from; i < g_info.size(); ++i) {
    const std::string& l = g_info[i];
    for (const char* t : {kFailedOver, kFenced, "recovering", "recovery attempt", "back (epoch",
                          "back in full", "fence did not complete"}) {
      if (contains(l, t)) {
        std::fprintf(stderr, "host%d: [%s] plugin INFO: %s\n", g_host, step, l.c_str());
        break;
      }
    }
  }
}

// ---- Links, ports and tc ----------------------------------------------------------------------

// The bed's links and ports: bed_link.h (this VM's name in the lines set_link prints).
bool set_link(const std::string& ifname, bool up) {
  return nettest::set_link(g_host, ifname, up);
}

// Drops RoCE v2 (UDP dport 4791, IPv4 and IPv6) arriving on the given netdevs: bed_tc.h's RoceDrop,
// on the links named rather than on every test port, and in one `tc -batch` (each fork + exec of
// tc took ~0.7 s in a loaded TCG VM: one command per filter took 5 s for two links).
class IngressDrop {
 public:
  std::string install(const std::vector<std::string>& devs) {
    if (sluice::rdmatest::run("modprobe -a sch_ingress cls_u32 act_gact") != 0)
      return "modprobe sch_ingress cls_u32 act_gact failed";
    char path[] = "/tmp/failover_tc.XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) return "mkstemp";
    std::string batch;
    for (const auto& d : devs) {
      const std::string f = "filter add dev " + d + " ingress protocol ";
      batch += "qdisc add dev " + d + " clsact\n" + f +
               "ipv6 prio 1 u32 match ip6 protocol 17 0xff match ip6 dport 4791 0xffff action "
               "drop\n" +
               f +
               "ip prio 2 u32 match ip protocol 17 0xff match ip dport 4791 0xffff action drop\n";
      devs_.push_back(d);
    }
    const bool written = write_full(fd, batch.data(), batch.size());
    close(fd);
    const int rc = written ? sluice::rdmatest::run(std::string("tc -batch ") + path) : -1;
    unlink(path);
    if (rc != 0) return "tc -batch failed:\n" + batch;
    return {};
  }
  long dropped() const {
    long sum = 0;
    for (const auto& d : devs_) {
      FILE* p = popen(("tc -s filter show dev " + d + " ingress 2>/dev/null").c_str(), "r");
      if (p == nullptr) continue;
      char line[512];
      while (std::fgets(line, sizeof line, p) != nullptr) {
        const char* x = std::strstr(line, "(dropped ");
        if (x != nullptr) sum += std::strtol(x + 9, nullptr, 10);
      }
      pclose(p);
    }
    return sum;
  }
  bool remove() {
    bool ok = true;
    for (const auto& d : devs_)
      ok = sluice::rdmatest::run("tc qdisc del dev " + d + " clsact") == 0 && ok;
    devs_.clear();
    return ok;
  }
  ~IngressDrop() { remove(); }

 private:
  std::vector<std::string> devs_;
};

// ---- The fused device, the side socket, connections ------------------------------------------

// Per member: [0] the device on eth0 (kept), [1] the device on eth1 (taken down).
struct Ctx {
  int host = -1;
  int side = -1;
  Net n{12};
  int vdev = -1;
  Props m[2];
  int path[2] = {-1, -1};  // the member's index in the fused device: its path
  std::string netdev[2];
  std::string addr2;  // SLUICE_BED_ADDR2: eth1's address, whose GID must come back
};

struct Counters {
  long long sent[2] = {}, rcvd[2] = {};
};
Counters counters(const Ctx& x) {
  usleep(30 * 1000);  // ib_core caches hw_counters for 10 ms
  Counters c;
  for (int i = 0; i < 2; ++i) {
    const int port = x.m[i].port > 0 ? x.m[i].port : 1;
    c.sent[i] = device_sent_packets(x.m[i].name, port);
    c.rcvd[i] = device_rcvd_packets(x.m[i].name, port);
  }
  return c;
}

// NCCL's order of calls: devices, getProperties of each, makeVDevice of the physical ones.
std::string fuse(Ctx& x) {
  int nd = 0;
  if (x.n.devices(&nd) != ncclSuccess) return "devices";
  std::vector<int> phys;
  std::vector<Props> props(nd);
  for (int d = 0; d < nd; ++d) {
    if (x.n.properties(d, &props[d]) != ncclSuccess) return "getProperties";
    if (props[d].vndevs == 1 && props[d].vdevs == std::vector<int>{d}) phys.push_back(d);
  }
  if (phys.size() != 2) return std::to_string(phys.size()) + " physical devices (want the bed's 2)";
  if (x.n.make_vdevice({phys[0], phys[1]}, &x.vdev) != ncclSuccess)
    return "makeVDevice: " + last_warn();
  for (int i = 0; i < 2; ++i) {
    const Props& p = props[phys[i]];
    const std::string nd_name = read_line(port_dir(p) + "gid_attrs/ndevs/0");
    const int which = nd_name == "eth1" ? 1 : nd_name == "eth0" ? 0 : -1;
    if (which < 0) return p.name + " is on '" + nd_name + "', not eth0 or eth1";
    x.m[which] = p;
    x.path[which] = i;
    x.netdev[which] = nd_name;
  }
  if (x.path[0] < 0 || x.path[1] < 0) return "the two devices are not one on eth0, one on eth1";
  Props v;
  if (x.n.properties(x.vdev, &v) != ncclSuccess) return "getProperties of the fused device";
  std::fprintf(stderr, "host%d: fused device %d %s: path %d %s (eth0), path %d %s (eth1)\n", x.host,
               x.vdev, v.name.c_str(), x.path[0], x.m[0].name.c_str(), x.path[1],
               x.m[1].name.c_str());
  return {};
}

// Both hosts at the same point: each writes `tag` and reads the other's.
bool sync(const Ctx& x, char tag) {
  char b = 0;
  return write_full(x.side, &tag, 1) && read_full(x.side, &b, 1, wait_limit()) && b == tag;
}

// A fresh fused connection: host0 listens (a listener per connection) and accepts, host1 connects.
std::string open_comm(Ctx& x, void** comm) {
  *comm = nullptr;
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  const auto deadline = Clock::now() + wait_limit();
  if (x.host == 0) {
    void* lc = nullptr;
    if (x.n.listen(x.vdev, handle, &lc) != ncclSuccess) return "listen: " + last_warn();
    if (!write_full(x.side, handle, sizeof handle)) return "side write";
    while (*comm == nullptr) {
      if (x.n.accept(lc, comm) != ncclSuccess) return "accept: " + last_warn();
      if (Clock::now() > deadline) return "accept timed out";
      if (*comm == nullptr) usleep(100);
    }
    x.n.close_listen(lc);
    return {};
  }
  if (!read_full(x.side, handle, sizeof handle, wait_limit())) return "side read";
  while (*comm == nullptr) {
    if (x.n.connect(x.vdev, handle, comm) != ncclSuccess) return "connect: " + last_warn();
    if (Clock::now() > deadline) return "connect timed out";
    if (*comm == nullptr) usleep(100);
  }
  return {};
}

ncclResult_t close_comm(Ctx& x, void* comm) {
  return x.host == 1 ? x.n.close_send(comm) : x.n.close_recv(comm);
}

// ---- The stream -------------------------------------------------------------------------------

struct Msg {
  size_t size = 0;
  size_t cap = 0;  // the receiver's posted size
  uint64_t seed = 0;
};

// `count` messages of 4 KiB .. 4 MiB, log-uniform (every size class alike; mean ~0.6 MB), the
// first at 4 MiB; every other receive posted at 4 MiB (striped over both paths), the others at
// their size; then the sentinel.
std::vector<Msg> random_msgs(int step, int count) {
  std::mt19937_64 rng(0xfa11 + static_cast<uint64_t>(step));
  std::uniform_real_distribution<double> u(std::log(double(kMinMsg)), std::log(double(kMaxMsg)));
  std::vector<Msg> v;
  for (int i = 0; i < count; ++i) {
    const size_t s =
        i == 0 ? kMaxMsg : std::clamp<size_t>(size_t(std::exp(u(rng))), kMinMsg, kMaxMsg);
    v.push_back({s, i % 2 == 0 ? kMaxMsg : s, pattern_seed(s, 100000u * step + i, kTag)});
  }
  v.push_back({kSentinel, kSentinel, pattern_seed(kSentinel, 100000u * step + 99999, kTag)});
  return v;
}

std::vector<Msg> fixed_msgs(int step, const std::vector<size_t>& sizes, bool striped) {
  std::vector<Msg> v;
  for (size_t i = 0; i < sizes.size(); ++i)
    v.push_back({sizes[i], striped || i % 2 == 0 ? kMaxMsg : sizes[i],
                 pattern_seed(sizes[i], 100000u * step + 50000 + i, kTag)});
  return v;
}

// A point in the stream: when, how far, the counters.
struct Mark {
  bool set = false;
  Clock::time_point t{};
  int done = 0;
  size_t bytes = 0;
  Counters c;
};

// What one host does mid-stream (the other is told by a side byte each: 'D', then 'U').
struct Fault {
  int actor = -1;       // the host that injects it; -1: none
  int inject_at = -1;   // messages done on the actor
  int restore_at = -1;  // -1: never (the mark is still taken, with no action, if >= 0)
  std::function<std::string()> inject, restore;
};

enum { kStart, kFault, kRestore, kEnd };
constexpr const char* kPhase[] = {"before", "down", "after"};

struct Run {
  Mark mark[4];
  long long max_gap_ms[3] = {-1, -1, -1};  // longest wait between two completions, per phase
  int done_in[3] = {};
  long long first_after_fault_ms = -1;  // the first completion after the fault mark
  Clock::time_point failed_over_at{}, fenced_at{};
  bool seen_failed_over = false, seen_fenced = false;
  bool comm_failed = false;  // until_error: the plugin returned an error
  std::string comm_error;
  Clock::time_point failed_at{};
};

// Runs `msgs` on `comm` (host1 sends, host0 receives), kWindow in flight, every completion checked
// (its size; on the receiver every byte and the guards); the fault's actor injects it and
// restores it on cue, the other host marks the same points when its side bytes arrive. With
// until_error an error from the plugin ends the stream (run->comm_failed), else it is a failure.
std::string stream(Ctx& x, void* comm, RegBuf& buf, const std::vector<Msg>& msgs, const Fault& f,
                   bool until_error, Run* run) {
  const bool sender = x.host == 1;
  const bool actor = f.actor == x.host;
  const bool told = f.actor >= 0 && !actor;
  const size_t info0 = info_size();
  const int total = static_cast<int>(msgs.size());
  std::vector<void*> reqs(kWindow, nullptr);
  int posted = 0, done = 0;
  size_t bytes = 0;
  auto mark = [&](int k) {
    Mark& m = run->mark[k];
    m.t = Clock::now();
    m.done = done;
    m.bytes = bytes;
    m.c = counters(x);
    m.set = true;
  };
  auto phase = [&] { return run->mark[kRestore].set ? 2 : run->mark[kFault].set ? 1 : 0; };
  auto where = [&] {
    return f.actor < 0 ? std::string() : std::string(" (") + kPhase[phase()] + ")";
  };
  mark(kStart);
  auto last = Clock::now();
  auto next_side_poll = last, next_info_poll = last;
  while (done < total) {
    const auto now = Clock::now();
    if (now - last > wait_limit())
      return std::to_string(done) + " of " + std::to_string(total) + " messages done; none for " +
             std::to_string(wait_limit().count()) + " ms" + where();
    while (posted < total && posted - done < kWindow) {
      const Msg& m = msgs[posted];
      uint8_t* p = buf.data() + (posted % kWindow) * kSlot;
      void* mh = buf.mh();
      void* req = nullptr;
      ncclResult_t r;
      if (sender) {
        fill_pattern(p, m.size, m.seed);
        r = x.n.isend(comm, p, m.size, kTag, mh, &req);
      } else {
        std::memset(p, kGuardByte, m.size + kGuard);
        std::memset(p + kMaxMsg, kGuardByte, kGuard);
        void* data = p;
        size_t cap = m.cap;
        int tag = kTag;
        r = x.n.irecv(comm, 1, &data, &cap, &tag, &mh, &req);
      }
      if (r != ncclSuccess) {
        const std::string e = std::string(sender ? "isend" : "irecv") + " of message " +
                              std::to_string(posted) + " returned " + std::to_string(r) + ": " +
                              last_warn();
        if (!until_error) return e;
        run->comm_failed = true;
        run->comm_error = e;
        run->failed_at = Clock::now();
        return {};
      }
      if (req == nullptr) break;  // not now
      reqs[posted % kWindow] = req;
      ++posted;
    }
    if (done < posted) {
      int finished = 0, got = -1;
      const ncclResult_t r = x.n.test(reqs[done % kWindow], &finished, &got);
      if (r != ncclSuccess) {
        const std::string e = "test of message " + std::to_string(done) + where() + " returned " +
                              std::to_string(r) + ": " + last_warn();
        if (!until_error) return e;
        run->comm_failed = true;
        run->comm_error = e;
        run->failed_at = Clock::now();
        return {};
      }
      if (finished) {
        const Msg& m = msgs[done];
        if (got != static_cast<int>(m.size))
          return "message " + std::to_string(done) + " reported " + std::to_string(got) + " of " +
                 std::to_string(m.size) + " bytes";
        if (!sender) {
          const uint8_t* p = buf.data() + (done % kWindow) * kSlot;
          std::string bad = check_pattern(p, m.size, m.seed);
          if (bad.empty()) bad = check_fill(p + m.size, kGuard, kGuardByte);
          if (bad.empty()) bad = check_fill(p + kMaxMsg, kGuard, kGuardByte);
          if (!bad.empty())
            return "message " + std::to_string(done) + " (" + std::to_string(m.size) + " bytes)" +
                   where() + ": " + bad;
        }
        const auto t = Clock::now();
        const int ph = phase();
        run->max_gap_ms[ph] = std::max(run->max_gap_ms[ph], ms_between(last, t));
        ++run->done_in[ph];
        if (ph >= 1 && run->first_after_fault_ms < 0)
          run->first_after_fault_ms = ms_between(run->mark[kFault].t, t);
        last = t;
        bytes += m.size;
        ++done;
      }
    }
    if (now >= next_info_poll) {  // when the plugin logged its transitions
      next_info_poll = now + milliseconds(10);
      if (!run->seen_failed_over && !info_with(info0, kFailedOver).empty()) {
        run->seen_failed_over = true;
        run->failed_over_at = now;
      }
      if (!run->seen_fenced && !info_with(info0, kFenced).empty()) {
        run->seen_fenced = true;
        run->fenced_at = now;
      }
    }
    if (actor && !run->mark[kFault].set && done >= f.inject_at) {
      if (std::string e = f.inject(); !e.empty()) return "injecting the fault: " + e;
      mark(kFault);
      const char b = 'D';
      if (!write_full(x.side, &b, 1)) return "side write";
    } else if (actor && run->mark[kFault].set && !run->mark[kRestore].set && f.restore_at >= 0 &&
               done >= f.restore_at) {
      if (f.restore) {
        if (std::string e = f.restore(); !e.empty()) return "restoring: " + e;
      }
      mark(kRestore);
      const char b = 'U';
      if (!write_full(x.side, &b, 1)) return "side write";
    } else if (told && now >= next_side_poll &&
               (!run->mark[kFault].set || (f.restore_at >= 0 && !run->mark[kRestore].set))) {
      next_side_poll = now + milliseconds(5);
      pollfd q{x.side, POLLIN, 0};
      if (poll(&q, 1, 0) == 1) {
        char b = 0;
        if (!read_full(x.side, &b, 1, wait_limit())) return "side read";
        if (b != (run->mark[kFault].set ? 'U' : 'D'))
          return std::string("unexpected side byte '") + b + "'";
        mark(run->mark[kFault].set ? kRestore : kFault);
      }
    }
  }
  mark(kEnd);
  return {};
}

// After the stream, the told host reads the side bytes it has not seen yet (its stream may end
// first); those marks are then the end's.
std::string catch_up(Ctx& x, const Fault& f, Run* run) {
  if (f.actor < 0 || f.actor == x.host) return {};
  for (int k : {kFault, kRestore}) {
    if (run->mark[k].set || (k == kRestore && f.restore_at < 0)) continue;
    char b = 0;
    if (!read_full(x.side, &b, 1, wait_limit()) || b != (k == kFault ? 'D' : 'U'))
      return "the peer's side byte for the " + std::string(k == kFault ? "fault" : "restore");
    run->mark[k] = run->mark[kEnd];
    run->mark[k].t = Clock::now();
  }
  return {};
}

long long delta(const Mark& a, const Mark& b, bool sent, int member) {
  return sent ? b.c.sent[member] - a.c.sent[member] : b.c.rcvd[member] - a.c.rcvd[member];
}

// Per phase: messages, bytes, time, rate, and each member's sent / received packets.
void print_run(const Ctx& x, const char* step, const Run& r, const char* names[3]) {
  for (int ph = 0; ph < 3; ++ph) {
    const Mark& a = r.mark[ph == 0 ? kStart : ph == 1 ? kFault : kRestore];
    const Mark& b = r.mark[ph == 0 ? kFault : ph == 1 ? kRestore : kEnd];
    if (!a.set || !b.set) continue;
    const double s = std::max(1e-3, std::chrono::duration<double>(b.t - a.t).count());
    std::fprintf(stderr,
                 "host%d: [%s] %-7s %4d messages, %6.1f MB in %5.1f s (%.2f MB/s), longest wait "
                 "%lld ms; packets sent %s %lld, %s %lld; received %s %lld, %s %lld\n",
                 x.host, step, names[ph], b.done - a.done, double(b.bytes - a.bytes) / 1e6, s,
                 double(b.bytes - a.bytes) / 1e6 / s, r.max_gap_ms[ph], x.m[0].name.c_str(),
                 delta(a, b, true, 0), x.m[1].name.c_str(), delta(a, b, true, 1),
                 x.m[0].name.c_str(), delta(a, b, false, 0), x.m[1].name.c_str(),
                 delta(a, b, false, 1));
  }
}

// Both members carried on a fresh connection: each >= 10 % of host1's sent packets.
std::string both_carried(const Ctx& x, const Mark& a, const Mark& b) {
  const long long k = delta(a, b, true, 0), f = delta(a, b, true, 1);
  if (k < 0 || f < 0 || a.c.sent[0] < 0 || a.c.sent[1] < 0) return "cannot read the counters";
  if (k + f <= 0 || k * 10 < k + f || f * 10 < k + f)
    return "a new connection did not use both members: sent " + x.m[0].name + " " +
           std::to_string(k) + ", " + x.m[1].name + " " + std::to_string(f) + " packets";
  return {};
}

// Each host logged both transitions at INFO since `from`.
std::string logged_transitions(size_t from) {
  for (const char* t : {kFailedOver, kFenced})
    if (info_with(from, t).empty()) return "no INFO line with \"" + std::string(t) + "\"";
  return {};
}

int messages() {
  return static_cast<int>(std::max(24L, env_long("SLUICE_TEST_FAILOVER_MESSAGES", 300)));
}

// Detection of a silent path: RC retries exhausted (rxe: a retry count of 7 never ends), else the
// progress watchdog (core/src/health/progress.h: base + 10 s per MiB of the run, a run <= 1 MiB).
long long silent_detect_ms() {
  const long t = env_long("NCCL_IB_TIMEOUT", 20), rc = env_long("NCCL_IB_RETRY_CNT", 7);
  const double rc_ms = 4.096e-3 * std::pow(2.0, double(t)) * double(rc + 1);
  if (rc < 7) return static_cast<long long>(rc_ms) + 1;
  const long knob = env_long("SLUICE_PROGRESS_TIMEOUT_MS", 0);
  return (knob > 0 ? knob : static_cast<long long>(rc_ms * 1.5) + 1000) + 10000;
}
long long poll_ms() {
  return env_long("SLUICE_LIVENESS_POLL_MS", 1000);
}

// ---- Steps -----------------------------------------------------------------------------------

// sender-port (actor 1), receiver-port (actor 0): the link flap mid-stream; silent: the tc drop.
int step_stream_fault(Ctx& x, int step, const char* name, int actor, bool silent) {
  if (!sync(x, static_cast<char>('a' + step))) return fail(3, std::string(name) + ": sync");
  void* comm = nullptr;
  if (std::string e = open_comm(x, &comm); !e.empty()) return fail(10 + step, name + (": " + e));
  RegBuf buf;
  if (!buf.allocate(&x.n, comm, kWindow * kSlot)) return fail(10 + step, "regMr");
  const int n = messages();
  const auto msgs = random_msgs(step, n);
  LinkGuard link{"eth1"};
  IngressDrop drop;
  Fault f;
  f.actor = actor;
  f.inject_at = n / 3;
  f.restore_at = 2 * n / 3;
  if (silent) {
    f.inject = [&] { return drop.install({x.netdev[1]}); };
  } else {
    f.inject = [&] {
      link.down = true;
      return set_link(x.netdev[1], false) ? "" : "eth1 down failed";
    };
    f.restore = [&]() -> std::string {
      if (!set_link(x.netdev[1], true)) return "eth1 up failed";
      link.down = false;
      const auto t = Clock::now();
      while (!port_back(x.m[1], x.addr2)) {
        if (ms_since(t) > 20000) return x.m[1].name + " not ACTIVE with its GID 20 s after up";
        usleep(10 * 1000);
      }
      std::fprintf(stderr, "host%d: [%s] %s ACTIVE with the GID of %s %lld ms after eth1 up\n",
                   x.host, name, x.m[1].name.c_str(), x.addr2.c_str(), ms_since(t));
      return {};
    };
  }
  const size_t info0 = info_size();
  Run r;
  std::string e = stream(x, comm, buf, msgs, f, false, &r);
  if (e.empty()) e = catch_up(x, f, &r);
  if (silent && actor == x.host) {
    std::fprintf(stderr, "host%d: [%s] the filter dropped %ld packets\n", x.host, name,
                 drop.dropped());
    if (!drop.remove()) e = e.empty() ? "removing the tc filter" : e;
  }
  print_transitions(name, info0);
  if (!e.empty()) return fail(10 + step, std::string(name) + ": " + e);
  const char* silent_names[3] = {"before", "dropped", "quiet"};
  const char* link_names[3] = {"before", "down", "after"};
  print_run(x, name, r, silent ? silent_names : link_names);
  const auto since_fault = [&](bool seen, Clock::time_point t) {
    return seen ? std::to_string(ms_between(r.mark[kFault].t, t)) + " ms" : std::string("never");
  };
  std::fprintf(stderr,
               "host%d: [%s] %s on host%d: first completion %lld ms after it; longest wait "
               "between completions %lld ms; INFO \"%s\" %s, \"%s\" %s after it\n",
               x.host, name, silent ? "RoCE dropped on eth1" : "eth1 down", actor,
               r.first_after_fault_ms, r.max_gap_ms[1], kFailedOver,
               since_fault(r.seen_failed_over, r.failed_over_at).c_str(), kFenced,
               since_fault(r.seen_fenced, r.fenced_at).c_str());
  if (!sync(x, 'e')) return fail(3, std::string(name) + ": sync after the stream");
  std::string bad;
  const long long bound = (silent ? silent_detect_ms() : 0) + 2 * poll_ms() + kMoveMs + kMarginMs;
  if (x.host == 1) bad = both_carried(x, r.mark[kStart], r.mark[kFault]);
  if (bad.empty() && r.done_in[1] < 1)
    bad = std::string("no message completed while ") + (silent ? "dropped" : "down");
  if (bad.empty() && r.max_gap_ms[1] > bound)
    bad = "a wait of " + std::to_string(r.max_gap_ms[1]) + " ms between completions after the " +
          "fault, bound " + std::to_string(bound) + " ms";
  if (bad.empty() && x.host == 1) {
    // Down: the eth1 member is out of the stripe (silent: once failed over, in the last third).
    const Mark& a = r.mark[silent ? kRestore : kFault];
    const Mark& b = r.mark[silent ? kEnd : kRestore];
    const long long kept = delta(a, b, true, 0), gone = delta(a, b, true, 1);
    const long long slack = std::max(kept / 100, kSlackPackets);
    if (kept <= 0) bad = x.m[0].name + " sent nothing while " + x.m[1].name + " was out";
    if (bad.empty() && gone > slack)
      bad = x.m[1].name + " sent " + std::to_string(gone) + " packets while out of the stripe (" +
            x.m[0].name + " " + std::to_string(kept) + "; slack " + std::to_string(slack) + ")";
  }
  if (bad.empty()) bad = logged_transitions(info0);
  buf.reset();
  if (close_comm(x, comm) != ncclSuccess && bad.empty()) bad = "close: " + last_warn();
  if (!bad.empty()) return failed_check(10 + step, std::string(name) + ": " + bad);
  std::fprintf(stderr, "host%d: [%s] passed\n", x.host, name);
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
  LinkGuard link{"eth1"};
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
    const auto u = Clock::now();
    while (!port_back(x.m[1], x.addr2)) {
      if (ms_since(u) > 20000) return fail(10 + step, "idle: eth1's port or GID not back");
      usleep(10 * 1000);
    }
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
  IngressDrop drop;
  Fault f;
  f.actor = 1;
  f.inject_at = 3;
  f.inject = [&] {
    const auto t = Clock::now();
    std::string e = drop.install({x.netdev[0], x.netdev[1]});
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

struct Resources {
  int fds = 0;
  long qp = 0, cq = 0, mr = 0;
  static Resources now() {
    using sluice::rdmatest::count_own;
    return {open_fd_count(), count_own("qp"), count_own("cq"), count_own("mr")};
  }
  std::string diff(const Resources& base) const {
    if (qp < 0 || base.qp < 0) return " (rdma resource show failed)";
    std::string d;
    if (fds != base.fds) d += " fds " + std::to_string(base.fds) + " -> " + std::to_string(fds);
    if (qp != base.qp) d += " qp " + std::to_string(base.qp) + " -> " + std::to_string(qp);
    if (cq != base.cq) d += " cq " + std::to_string(base.cq) + " -> " + std::to_string(cq);
    if (mr != base.mr) d += " mr " + std::to_string(base.mr) + " -> " + std::to_string(mr);
    return d;
  }
};

int run(int host, const std::string& steps) {
  g_host = host;
  g_keep_info = true;
  Ctx x;
  x.host = host;
  const char* a2 = std::getenv("SLUICE_BED_ADDR2");
  if (a2 == nullptr || std::getenv("SLUICE_BED_PEER_ADDR") == nullptr)
    return fail(2, "not in the two-host bed with two links (SLUICE_BED_ADDR2 unset)");
  x.addr2 = a2;
  x.side = side_socket(host, kSidePort);
  if (x.side < 0) return fail(3, "no side connection");
  if (x.n.init(0x2420 + host) != ncclSuccess) return fail(2, "init: " + last_warn());
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
  size_t at = 0;
  int step = 0;
  while (at <= steps.size()) {
    const size_t comma = std::min(steps.find(',', at), steps.size());
    const std::string s = steps.substr(at, comma - at);
    at = comma + 1;
    ++step;
    const auto t = Clock::now();
    int rc = 0;
    if (s == "sender-port") {
      rc = step_stream_fault(x, step, "sender-port", 1, false);
    } else if (s == "receiver-port") {
      rc = step_stream_fault(x, step, "receiver-port", 0, false);
    } else if (s == "idle") {
      rc = step_idle(x, step);
    } else if (s == "silent") {
      rc = step_stream_fault(x, step, "silent", 1, true);
    } else if (s == "all-gone") {
      rc = step_all_gone(x, step);
    } else {
      return fail(2,
                  "unknown step '" + s + "' (sender-port, receiver-port, idle, silent, all-gone)");
    }
    std::fprintf(stderr, "host%d: step %s: exit %d after %.1f s\n", host, s.c_str(), rc,
                 double(ms_since(t)) / 1000);
    if (rc != 0) return rc;
  }
  const std::string leak = Resources::now().diff(base);
  if (!leak.empty()) return fail(9, "not back to the baseline after the steps:" + leak);
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
}  // namespace nettest

int main(int argc, char** argv) {
  if (argc != 3 || (std::string(argv[1]) != "0" && std::string(argv[1]) != "1"))
    return std::fprintf(stderr, "usage: %s 0|1 STEP[,STEP...]\n", argv[0]), 2;
  return nettest::run(std::atoi(argv[1]), argv[2]);
}
