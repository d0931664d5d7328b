// sluice-bench's scale test, both sides: N idle connection pairs set up as NCCL does (one thread a
// side; rounds of at most --scale-inflight connects, the listener's side listening for the whole
// round first, as after NCCL's bootstrap exchange; closeListen right after each accept), a
// receive posted on every idle receive comm, then (scale_report.cc) an active pair measured
// beside them, and at the end one verified message on every idle pair and the close, timed.
// Every phase runs on both sides at once and ends with one Msg each way: a failure on either side
// (a plugin error, a timeout) stops both, is reported with the count that came up, and never
// hangs the other side.
#include "scale.h"

#include <dirent.h>
#include <poll.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include "tcp_opens.h"

namespace bench {
namespace {

// This process's state for the current N (one scale command pair at a time).
struct State {
  std::vector<void*> comms;  // by pair index; nullptr where the pair did not come up here
  std::vector<void*> mhs;
  std::vector<void*> reqs;  // peer: the receive posted on each idle comm
  std::unique_ptr<char, decltype(&free)> buf{nullptr, &free};
  ScaleReport rep;
};
State g_state;

void put(char* dst, size_t n, const std::string& s) {
  snprintf(dst, n, "%s", s.c_str());
}

// An error's text with the plugin's last WARN, which names what the result code does not.
std::string with_warn(const std::string& what) {
  const std::string w = last_plugin_warn();
  return w.empty() ? what : what + " (plugin's last WARN: " + w + ")";
}

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
}

// Poll loops yield after a run of idle polls, as the other tests do (tests.cc, Spin).
struct Idle {
  unsigned n = 0;
  void tick() {
    if (!g_pure_spin && ++n >= 128) {
      n = 0;
      sched_yield();
    }
  }
};

// One phase on both sides at once. `step` makes progress and returns true when this side is done;
// it throws BenchError on a failure. Each side then sends one Msg and reads the other's (which may
// arrive first: one that says the other side failed stops this side's loop).
struct Outcome {
  ScaleMsg mine, theirs;
  bool ok() const { return mine.err == 0 && theirs.err == 0; }
};
template <class Step, class Done>
Outcome exchange(Side& s, const Deadline& dl, const char* peer_name, Step step, Done done) {
  Outcome out;
  bool have_theirs = false;
  Idle idle;
  try {
    for (unsigned i = 0;; ++i) {
      if (step()) break;
      if ((i & 15) == 0) {
        dl.check();
        if (!have_theirs && readable(s.ch->fd())) {
          out.theirs = s.ch->recv_pod<ScaleMsg>(dl);
          have_theirs = true;
          if (out.theirs.err != 0) {
            out.mine.err = 2;
            put(out.mine.what, sizeof out.mine.what,
                strf("stopped: the %s side failed", peer_name));
            break;
          }
        }
      }
      idle.tick();
    }
  } catch (const BenchError& e) {
    out.mine.err = 1;
    put(out.mine.what, sizeof out.mine.what, with_warn(e.what()));
  }
  out.mine.done = done();
  Deadline reply(dl.left() + 60, strf("waiting for the %s side's word on the phase", peer_name));
  s.ch->send_pod(out.mine, reply);
  if (!have_theirs) out.theirs = s.ch->recv_pod<ScaleMsg>(reply);
  return out;
}

int64_t status_kib(const std::string& text, const char* key) {
  const size_t at = text.find(key);
  if (at == std::string::npos) return -1;
  return atoll(text.c_str() + at + strlen(key));
}

int32_t fd_count() {
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  int32_t n = 0;
  while (const dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n - 1;  // the directory's own descriptor
}

// The first error of a phase, both sides' words in it.
std::string first_error(const Outcome& o, const char* me, const char* peer) {
  std::string t;
  if (o.mine.err == 1) t += strf("%s: %s", me, o.mine.what);
  if (o.theirs.err == 1) t += strf("%s%s: %s", t.empty() ? "" : "; ", peer, o.theirs.what);
  if (t.empty() && o.mine.err) t = strf("%s: %s", me, o.mine.what);
  if (t.empty() && o.theirs.err) t = strf("%s: %s", peer, o.theirs.what);
  return t;
}

// Stops the set-up with a clear error, before the OOM killer would, when the machine's available
// memory falls under the floor (Cmd::size, MiB); the error says what the pairs cost so far.
void check_memory(const ScaleReport& rep, const Cmd& c, uint64_t up, uint64_t pairs) {
  if (c.size == 0) return;
  std::ifstream mf("/proc/meminfo");
  std::string mi((std::istreambuf_iterator<char>(mf)), std::istreambuf_iterator<char>());
  const int64_t avail = status_kib(mi, "MemAvailable:") * 1024;
  if (avail < 0 || avail >= static_cast<int64_t>(c.size << 20)) return;
  const double used = static_cast<double>(rep.snap_base.mem_available - avail);
  const double per_pair = up > 0 ? used / static_cast<double>(up) : 0;
  fail(
      "stopped with %llu of %llu pairs up: the machine's MemAvailable is %.0f MiB, under the "
      "floor of %llu MiB (--scale-mem-floor); the pairs so far took %.0f MiB (%.1f KiB each, "
      "both processes and the kernel), so %llu pairs need about %.0f MiB more than the baseline",
      (unsigned long long)up, (unsigned long long)pairs, avail / 1048576.0,
      (unsigned long long)c.size, used / 1048576.0, per_pair / 1024.0, (unsigned long long)pairs,
      per_pair * static_cast<double>(pairs) / 1048576.0);
}

void finish_up(Side& s, uint64_t pairs, bool receiver) {
  State& st = g_state;
  Net& net = *s.net;
  st.rep.snap_up = scale_snap();
  // Each comm registers its own 64 B slot; every idle receive comm posts one receive into it.
  st.buf.reset(static_cast<char*>(aligned_alloc(4096, std::max<uint64_t>(pairs, 1) * kScaleSlot)));
  if (!st.buf) fail("cannot allocate %llu slots", (unsigned long long)pairs);
  memset(st.buf.get(), 0, std::max<uint64_t>(pairs, 1) * kScaleSlot);
  st.mhs.assign(pairs, nullptr);
  st.reqs.assign(pairs, nullptr);
  Deadline dl(120, "posting a receive on every idle comm");
  try {
    for (uint64_t k = 0; k < pairs; ++k) {
      if (st.comms[k] == nullptr) continue;
      char* slot = st.buf.get() + k * kScaleSlot;
      st.mhs[k] = net.reg(st.comms[k], slot, kScaleSlot);
      if (!receiver) continue;
      Idle idle;
      while ((st.reqs[k] = net.irecv(st.comms[k], slot, kScaleSlot, 0, st.mhs[k])) == nullptr) {
        dl.check();
        idle.tick();
      }
    }
  } catch (const BenchError& e) {
    if (!st.rep.failed) {
      st.rep.failed = 1;
      put(st.rep.error, sizeof st.rep.error, with_warn(e.what()));
    }
  }
  st.rep.snap_idle = scale_snap();
}

}  // namespace

// This process's TCP sockets: those with their keepalive timer running (/proc/net/tcp{,6} rows
// whose "tr" is 2; an idle socket without keepalive shows 0, one with unacknowledged bytes 1) and
// those listening (state 0A), matched by inode to the sockets of /proc/self/fd.
TcpCounts tcp_counts() {
  TcpCounts out;
  std::unordered_set<unsigned long> ours;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return {-1, -1};
  while (const dirent* e = readdir(d)) {
    char link[64] = {};
    if (e->d_name[0] == '.' || readlinkat(dirfd(d), e->d_name, link, sizeof link - 1) <= 0)
      continue;
    if (std::strncmp(link, "socket:[", 8) == 0) ours.insert(std::strtoul(link + 8, nullptr, 10));
  }
  closedir(d);
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream row(line);
      std::string sl, local, remote, st, queues, timer, retr, uid, timeout;
      unsigned long inode = 0;
      if (!(row >> sl >> local >> remote >> st >> queues >> timer >> retr >> uid >> timeout >>
            inode))
        continue;
      if (ours.count(inode) == 0) continue;
      out.keepalive += timer.rfind("02:", 0) == 0;
      out.listening += st == "0A";
    }
  }
  return out;
}

ScaleSnap scale_snap() {
  ScaleSnap x;
  std::ifstream f("/proc/self/status");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  x.rss = status_kib(text, "VmRSS:") * 1024;
  x.pin = status_kib(text, "VmPin:") * 1024;
  x.lck = status_kib(text, "VmLck:") * 1024;
  {
    std::ifstream sm("/proc/self/smaps");
    std::string line;
    bool verbs = false;
    while (std::getline(sm, line)) {
      const size_t dash = line.find('-');
      if (dash != std::string::npos && dash > 0 && dash < 17 &&
          std::isxdigit(static_cast<unsigned char>(line[0]))) {
        verbs = line.find("/dev/infiniband/") != std::string::npos;  // a mapping's header
      } else if (verbs && line.rfind("Rss:", 0) == 0) {
        x.rss_verbs += std::atoll(line.c_str() + 4) * 1024;
      }
    }
  }
  std::ifstream mf("/proc/meminfo");
  std::string mi((std::istreambuf_iterator<char>(mf)), std::istreambuf_iterator<char>());
  x.mem_available = status_kib(mi, "MemAvailable:") * 1024;
  x.fds = fd_count();
  const TcpCounts tcp = tcp_counts();
  x.keepalive = tcp.keepalive;
  x.listening = tcp.listening;
  const bench::TcpOpens opens = bench::tcp_opens();
  x.tcp_active = opens.active;
  x.tcp_passive = opens.passive;
  VerbsObjects v = VerbsObjects::of_pid(getpid());
  x.verbs_valid = v.valid;
  x.qps = v.qps;
  x.cqs = v.cqs;
  x.mrs = v.mrs;
  x.pds = v.pds;
  return x;
}

std::string scale_leak(const ScaleSnap& base, const ScaleSnap& now) {
  std::string d;
  auto one = [&](const char* what, int64_t a, int64_t b) {
    if (a != b)
      d += strf("%s%s %lld -> %lld", d.empty() ? "" : ", ", what, (long long)a, (long long)b);
  };
  one("fds", base.fds, now.fds);
  if (!base.verbs_valid || !now.verbs_valid) return d.empty() ? "verbs not counted" : d;
  one("qps", base.qps, now.qps);
  one("cqs", base.cqs, now.cqs);
  one("mrs", base.mrs, now.mrs);
  one("pds", base.pds, now.pds);
  return d;
}

// Both sides: the baseline, then the rounds. The sender (initiator) connects; the receiver (peer)
// listens and accepts. c.nconns = N, c.window = connects in flight per round.
ScaleReport scale_up(Side& s, const Cmd& c, bool receiver) {
  State& st = g_state;
  Net& net = *s.net;
  st = State{};
  const uint64_t pairs = c.nconns;
  st.comms.assign(pairs, nullptr);
  ScaleReport& rep = st.rep;
  rep.pairs = pairs;
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rep.nofile_soft = rl.rlim_cur;
    rep.nofile_hard = rl.rlim_max;
  }
  rep.snap_base = scale_snap();
  const char* me = receiver ? "receiver" : "sender";
  const char* peer = receiver ? "sender" : "receiver";
  Deadline sync(c.timeout_s, "starting the scale set-up");
  double t0 = 0;
  if (receiver) {
    s.ch->send_pod('G', sync);
    if (s.ch->recv_pod<char>(sync) != 'G') fail("control channel out of step");
    t0 = now_s();
  } else {
    if (s.ch->recv_pod<char>(sync) != 'G') fail("control channel out of step");
    t0 = now_s();
    s.ch->send_pod('G', sync);
  }
  uint64_t first = 0;  // pair index of the round's first
  for (;;) {
    Deadline dl(c.timeout_s, strf("in the scale set-up's round at pair %llu (%s side)",
                                  (unsigned long long)first, me));
    ScaleMsg hdr;
    std::vector<Handle> hs;
    std::vector<void*> lcs;
    if (receiver) {
      const uint64_t k_max = std::min<uint64_t>(c.window, pairs - first);
      try {
        check_memory(rep, c, first, pairs);
        for (uint64_t k = 0; k < k_max; ++k) {
          void* lc = nullptr;
          hs.push_back(net.listen(s.dev, &lc));
          lcs.push_back(lc);
        }
        if (first == 0) {  // the round's listens all open: the listening sockets they hold
          rep.round_listens = static_cast<int32_t>(lcs.size());
          rep.round_listening = tcp_counts().listening - rep.snap_base.listening;
        }
      } catch (const BenchError& e) {
        hdr.err = 1;
        put(hdr.what, sizeof hdr.what, with_warn(e.what()));
      }
      hdr.done = static_cast<uint32_t>(hs.size());
      s.ch->send_pod(hdr, dl);
      if (!hs.empty()) s.ch->send(hs.data(), hs.size() * sizeof(Handle), dl);
    } else {
      hdr = s.ch->recv_pod<ScaleMsg>(dl);
      hs.resize(hdr.done);
      if (!hs.empty()) s.ch->recv(hs.data(), hs.size() * sizeof(Handle), dl);
    }
    if (hs.empty()) {  // the end, or a listen that failed at once
      if (hdr.err != 0) {
        rep.failed = 1;
        put(rep.error, sizeof rep.error, strf("receiver: %s", hdr.what));
      }
      break;
    }
    std::vector<void*> got(hs.size(), nullptr);
    size_t left = hs.size();
    bool checked = receiver;
    auto step = [&]() {
      if (!checked) {  // the sender's host (the same machine in a local run)
        checked = true;
        check_memory(rep, c, first, pairs);
      }
      for (size_t k = 0; k < hs.size(); ++k) {
        if (got[k] != nullptr) continue;
        if (receiver) {
          got[k] = net.accept_once(lcs[k]);
          if (got[k] != nullptr) {
            net.close_listen(lcs[k]);  // as NCCL does, right after the accept
            lcs[k] = nullptr;
          }
        } else {
          got[k] = net.connect_once(s.dev, &hs[k]);
        }
        if (got[k] != nullptr) --left;
      }
      return left == 0;
    };
    Outcome o = exchange(s, dl, peer, step, [&]() { return hs.size() - left; });
    for (size_t k = 0; k < hs.size(); ++k) {
      st.comms[first + k] = got[k];
      rep.up += got[k] != nullptr;
    }
    for (void* lc : lcs) {  // listens a failed round left open
      if (lc == nullptr) continue;
      try {
        net.close_listen(lc);
      } catch (const BenchError&) {
      }
    }
    first += hs.size();
    if (!o.ok() || hdr.err != 0) {
      rep.failed = 1;
      std::string e = first_error(o, me, peer);
      if (hdr.err != 0) e = strf("receiver: %s%s%s", hdr.what, e.empty() ? "" : "; ", e.c_str());
      put(rep.error, sizeof rep.error, e);
      break;
    }
    if (receiver && first == pairs) {  // the end marker
      ScaleMsg end;
      s.ch->send_pod(end, dl);
      break;
    }
  }
  rep.establish_s = now_s() - t0;
  finish_up(s, pairs, receiver);
  return rep;
}

// Both sides: one verified message on every idle pair (skipped after a failed set-up), the
// registrations dropped, then the close of every idle comm, timed on each side.
ScaleReport scale_down(Side& s, const Cmd& c, bool receiver) {
  State& st = g_state;
  Net& net = *s.net;
  ScaleReport& rep = st.rep;
  const uint64_t pairs = st.comms.size();
  const char* me = receiver ? "receiver" : "sender";
  const char* peer = receiver ? "sender" : "receiver";
  Deadline dl(c.timeout_s, strf("verifying a message on each of %llu idle pairs (%s side)",
                                (unsigned long long)pairs, me));
  // Both sides verify, or neither: a side whose set-up failed (a registration or receive that
  // could not be posted is only known to that side) says so first.
  const int32_t failed = rep.failed;
  s.ch->send_pod(failed, dl);
  const int32_t peer_failed = s.ch->recv_pod<int32_t>(dl);
  const bool skip = failed != 0 || peer_failed != 0;
  if (skip && !rep.failed) {
    rep.verify_failed = 1;
    put(rep.verify_error, sizeof rep.verify_error,
        strf("not verified: the %s's set-up failed", peer));
  }
  if (!skip) {
    std::vector<char> done(pairs, 0);
    std::vector<uint64_t> inflight;  // sender: pairs whose isend is not yet tested done
    uint64_t next = 0, left = pairs;
    auto step = [&]() {
      if (receiver) {
        for (uint64_t k = 0; k < pairs; ++k) {
          if (done[k]) continue;
          size_t got = 0;
          if (!net.test(st.reqs[k], &got)) continue;
          done[k] = 1;
          --left;
          const uint64_t bad =
              check_pattern(st.buf.get() + k * kScaleSlot, kScaleSlot, k, kScaleVerifySeq);
          rep.bad += bad + (got != kScaleSlot);
          rep.verified += bad == 0 && got == kScaleSlot;
        }
        return left == 0;
      }
      while (next < pairs && inflight.size() < c.window) {
        char* slot = st.buf.get() + next * kScaleSlot;
        fill_pattern(slot, kScaleSlot, next, kScaleVerifySeq);
        void* r = net.isend(st.comms[next], slot, kScaleSlot, 0, st.mhs[next]);
        if (r == nullptr) break;
        st.reqs[next] = r;
        inflight.push_back(next++);
      }
      for (size_t i = 0; i < inflight.size();) {
        if (net.test(st.reqs[inflight[i]], nullptr)) {
          ++rep.verified;  // sent; the receiver's count is the verified one
          inflight[i] = inflight.back();
          inflight.pop_back();
        } else {
          ++i;
        }
      }
      return next == pairs && inflight.empty();
    };
    Outcome o = exchange(s, dl, peer, step, [&]() { return rep.verified; });
    if (!o.ok() || rep.bad != 0) {
      rep.verify_failed = 1;
      std::string e = first_error(o, me, peer);
      if (rep.bad != 0)
        e += strf("%s%llu bad byte(s)", e.empty() ? "" : "; ", (unsigned long long)rep.bad);
      put(rep.verify_error, sizeof rep.verify_error, e);
    }
  }
  // Where each idle comm stands with the eager path once it carried its message: the pool bounds
  // those that hold a ring or a book (docs/eager.md), whatever the pairs.
  for (uint64_t k = 0; k < pairs; ++k) {
    sluiceCommStats_v2_t v2{};
    v2.size = sizeof v2;
    if (st.comms[k] != nullptr && net.comm_stats_v2(st.comms[k], &v2) && v2.eager >= 0 &&
        v2.eager < 4) {
      ++rep.eager[v2.eager];
    } else {
      ++rep.eager_unread;
    }
  }
  double t = now_s();
  for (uint64_t k = 0; k < pairs; ++k) {
    if (st.mhs.size() > k && st.mhs[k] != nullptr) net.dereg(st.comms[k], st.mhs[k]);
  }
  rep.dereg_s = now_s() - t;
  Deadline sync(c.timeout_s, "starting the close");
  if (receiver) {
    s.ch->send_pod('G', sync);
    if (s.ch->recv_pod<char>(sync) != 'G') fail("control channel out of step");
  } else {
    if (s.ch->recv_pod<char>(sync) != 'G') fail("control channel out of step");
    s.ch->send_pod('G', sync);
  }
  t = now_s();
  for (void* comm : st.comms) {
    if (comm == nullptr) continue;
    if (receiver) {
      net.close_recv(comm);
    } else {
      net.close_send(comm);
    }
  }
  rep.close_s = now_s() - t;
  rep.closed = 1;
  st.comms.clear();
  rep.snap_closed = scale_snap();
  ScaleReport out = rep;
  st = State{};
  return out;
}

void scale_serve(Side& s, const Cmd& c) {
  ScaleReport r = c.op == Op::kScaleUp ? scale_up(s, c, true) : scale_down(s, c, true);
  s.ch->send_pod(r, Deadline(c.timeout_s, "sending the receiver's scale figures"));
}

}  // namespace bench
