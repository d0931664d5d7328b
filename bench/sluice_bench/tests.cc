// The plugin-driven halves of each sluice-bench test. Every loop is bounded by the command's
// timeout; a peer that stops making progress fails the run with the phase named.
#include <dirent.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "sluice_bench.h"

namespace bench {

bool g_pure_spin = false;
int g_idle_sleep_us = 0;

namespace {

constexpr uint64_t kMemCapPerSide = 256ull << 20;  // payload buffers per side, all connections
constexpr char kGo = 'G';

struct Buffer {
  std::unique_ptr<char, decltype(&free)> p{nullptr, &free};
  size_t n = 0;
  explicit Buffer(size_t bytes) : n(bytes) {
    size_t rounded = (std::max<size_t>(bytes, 1) + 4095) / 4096 * 4096;
    p.reset(static_cast<char*>(aligned_alloc(4096, rounded)));
    if (!p) fail("cannot allocate %zu bytes", rounded);
    memset(p.get(), 0, rounded);  // touch every page before timing
  }
  char* data() { return p.get(); }
};

uint64_t mix(uint64_t x) {
  x ^= x >> 31;
  x *= 0x7fb5d329728ea185ull;
  x ^= x >> 27;
  x *= 0x81dadef4bc2dd44dull;
  x ^= x >> 33;
  return x;
}

// Slots per connection for a given command (both sides compute the same layout).
uint64_t slots_for(const Cmd& c) {
  uint64_t per = std::max<uint64_t>(c.size, 1) * c.nconns;
  uint64_t want = c.slots > 0 ? static_cast<uint64_t>(c.slots) : c.window;
  return std::clamp<uint64_t>(kMemCapPerSide / per, 1, std::min<uint64_t>(want, c.window));
}
uint64_t window_for(const Cmd& c) {
  return c.verify ? std::min<uint64_t>(c.window, slots_for(c)) : c.window;
}

// Periodic deadline check without reading the clock on every spin. Like NCCL's proxy, a loop
// that keeps finding nothing to do yields the CPU (after kIdleSpins) unless --spin was given: on
// an oversubscribed machine (the emulated bed: 2 vCPUs, two polling processes and the Soft-RoCE
// kernel work) pure busy polling starves the very work it waits for.
constexpr unsigned kIdleSpins = 128;
struct Spin {
  const Deadline& dl;
  bool may_sleep = false;  // bandwidth loops only: latency loops always just yield
  unsigned n = 0;
  unsigned idle = 0;
  void tick() {
    if ((++n & 255) == 0) dl.check();
    if (!g_pure_spin && ++idle >= kIdleSpins) {
      idle = 0;
      if (may_sleep && g_idle_sleep_us > 0) {
        usleep(g_idle_sleep_us);
      } else {
        sched_yield();
      }
    }
  }
  void progress() { idle = 0; }
};

void send_go(Channel& ch, const Deadline& dl) {
  ch.send_pod(kGo, dl);
}
void wait_go(Channel& ch, const Deadline& dl) {
  if (ch.recv_pod<char>(dl) != kGo) fail("control channel out of step");
}

// Accept every listen comm, polling round robin; closes each listen comm as NCCL does.
std::vector<void*> accept_all(Net& net, std::vector<void*>& lcs, const Deadline& dl) {
  std::vector<void*> out(lcs.size(), nullptr);
  size_t left = lcs.size();
  Spin spin{dl};
  while (left > 0) {
    for (size_t k = 0; k < lcs.size(); ++k) {
      if (out[k]) continue;
      out[k] = net.accept_once(lcs[k]);
      if (out[k]) {
        net.close_listen(lcs[k]);
        lcs[k] = nullptr;
        --left;
      }
    }
    spin.tick();
  }
  return out;
}

std::vector<void*> connect_all(Net& net, int dev, std::vector<Handle>& hs, const Deadline& dl) {
  std::vector<void*> out(hs.size(), nullptr);
  size_t left = hs.size();
  Spin spin{dl};
  while (left > 0) {
    for (size_t k = 0; k < hs.size(); ++k) {
      if (out[k]) continue;
      out[k] = net.connect_once(dev, &hs[k]);
      if (out[k]) --left;
    }
    spin.tick();
  }
  return out;
}

// The plugin's statistics summed over comms (ext_valid only when every comm answered).
struct ExtSnap {
  bool ok = true;
  uint64_t wrs = 0, doorbells = 0, cts_writes = 0, messages = 0;
  bool ok2 = true;
  int members = 0;
  std::string member0;
  uint64_t bytes = 0, completions = 0;
  std::string member_name[SideStats::kMembers];
  uint64_t member_bytes[SideStats::kMembers] = {}, member_completions[SideStats::kMembers] = {};
  uint64_t latency[SLUICE_EXT_LATENCY_BUCKETS] = {};
  bool failover_on = false;
  int member_state[SideStats::kMembers] = {};
  uint32_t member_failovers[SideStats::kMembers] = {}, member_failbacks[SideStats::kMembers] = {};
  uint64_t member_replayed[SideStats::kMembers] = {};
  int64_t member_stall_ms[SideStats::kMembers] = {-1, -1, -1, -1};
};
ExtSnap ext_snap(Net& net, const std::vector<void*>& comms) {
  ExtSnap e;
  for (void* c : comms) {
    sluiceCommStats_v1_t st;
    if (!net.comm_stats(c, &st)) {
      e.ok = false;
      continue;
    }
    e.wrs += st.wrs;
    e.doorbells += st.doorbells;
    e.cts_writes += st.ctsWrites;
    e.messages += st.messages;
    sluiceCommStats_v2_t v2;
    if (!net.comm_stats_v2(c, &v2)) {
      e.ok2 = false;
      continue;
    }
    for (int m = 0; m < v2.nMembers; ++m) {
      const sluiceMemberStats_v2_t& ms = v2.members[m];
      if (e.member0.empty()) e.member0 = ms.name;
      e.members = std::max(e.members, v2.nMembers);
      e.bytes += ms.bytes;
      e.completions += ms.completions;
      if (m < SideStats::kMembers) {
        if (e.member_name[m].empty()) e.member_name[m] = ms.name;
        e.member_bytes[m] += ms.bytes;
        e.member_completions[m] += ms.completions;
      }
      for (int b = 0; b < SLUICE_EXT_LATENCY_BUCKETS; ++b) e.latency[b] += ms.latency[b];
    }
    e.failover_on = e.failover_on || v2.failover != 0;
    for (int p = 0; p < v2.nPaths; ++p) {  // by the local member each path runs on
      const sluicePathStats_v2_t& ps = v2.paths[p];
      const int m = ps.localMember;
      if (m < 0 || m >= SideStats::kMembers) continue;
      e.member_state[m] = std::max(e.member_state[m], ps.state);
      e.member_failovers[m] += ps.failovers;
      e.member_failbacks[m] += ps.failbacks;
      e.member_replayed[m] += ps.bytesReplayed;
      e.member_stall_ms[m] = std::max(e.member_stall_ms[m], ps.lastStallMs);
    }
  }
  return e;
}

// Counting (kCountWire): both sides' device counters and the plugin's statistics around a phase.
struct Counted {
  WireCounter w0;
  ExtSnap e0;
  void begin(const Side& s, const std::vector<void*>& comms) {
    w0 = settle_and_read(s);
    e0 = ext_snap(*s.net, comms);
  }
  void end(const Side& s, const std::vector<void*>& comms, SideStats* st) {
    WireCounter w1 = settle_and_read(s);
    ExtSnap e1 = ext_snap(*s.net, comms);
    st->wire_valid = w0.ok && w1.ok;
    st->wire_pkts = w1.value - w0.value;
    st->ext_valid = e0.ok && e1.ok && !comms.empty();
    st->wrs = e1.wrs - e0.wrs;
    st->doorbells = e1.doorbells - e0.doorbells;
    st->cts_writes = e1.cts_writes - e0.cts_writes;
    st->ext_messages = e1.messages - e0.messages;
    st->ext2_valid = e0.ok2 && e1.ok2 && !comms.empty();
    st->members = e1.members;
    snprintf(st->member0, sizeof st->member0, "%s", e1.member0.c_str());
    st->bytes = e1.bytes - e0.bytes;
    st->completions = e1.completions - e0.completions;
    for (int m = 0; m < SideStats::kMembers; ++m) {
      snprintf(st->member_name[m], sizeof st->member_name[m], "%s", e1.member_name[m].c_str());
      st->member_bytes[m] = e1.member_bytes[m] - e0.member_bytes[m];
      st->member_completions[m] = e1.member_completions[m] - e0.member_completions[m];
    }
    for (int b = 0; b < SLUICE_EXT_LATENCY_BUCKETS; ++b)
      st->latency[b] = e1.latency[b] - e0.latency[b];
    st->failover_on = e1.failover_on;
    for (int m = 0; m < SideStats::kMembers; ++m) {  // as they are at the phase's end
      st->member_state[m] = e1.member_state[m];
      st->member_failovers[m] = e1.member_failovers[m];
      st->member_failbacks[m] = e1.member_failbacks[m];
      st->member_replayed[m] = e1.member_replayed[m];
      st->member_stall_ms[m] = e1.member_stall_ms[m];
    }
  }
};

// One side of the bandwidth phase over K connections.
struct BwConn {
  void* comm = nullptr;
  void* mh = nullptr;
  char* base = nullptr;
  uint64_t posted = 0, done = 0;
  std::vector<void*> reqs;
};

SideStats run_bw(Side& s, const Cmd& c, bool sender, std::vector<void*> comms) {
  Net& net = *s.net;
  const uint64_t K = c.nconns, nslots = slots_for(c), w = window_for(c);
  Buffer buf(K * nslots * c.size);
  std::vector<BwConn> conns(K);
  for (uint64_t k = 0; k < K; ++k) {
    conns[k].comm = comms[k];
    conns[k].base = buf.data() + k * nslots * c.size;
    conns[k].mh = net.reg(comms[k], conns[k].base, nslots * c.size);
    conns[k].reqs.assign(w, nullptr);
  }
  SideStats st;
  Counted counted;
  uint64_t seq_base = 0;
  for (int phase = 0; phase < 2; ++phase) {
    const uint64_t n = phase == 0 ? c.warmup : c.iters;
    if (n == 0) continue;
    Deadline dl(c.timeout_s, strf("in the %s bandwidth phase at %s (%s side; is the peer alive?)",
                                  phase ? "timed" : "warm-up", format_size(c.size).c_str(),
                                  sender ? "sending" : "receiving"));
    for (auto& bc : conns) bc.posted = bc.done = 0;
    bool moved = false;
    auto post = [&](BwConn& bc, uint64_t k) {
      while (bc.posted < n && bc.posted - bc.done < w) {
        char* p = bc.base + (bc.posted % nslots) * c.size;
        void* r;
        if (sender) {
          if (c.verify) fill_pattern(p, c.size, k, seq_base + bc.posted);
          r = net.isend(bc.comm, p, c.size, 0, bc.mh);
        } else {
          r = net.irecv(bc.comm, p, c.size, 0, bc.mh);
        }
        if (!r) return;
        bc.reqs[bc.posted % w] = r;
        ++bc.posted;
        moved = true;
      }
    };
    const bool count = phase == 1 && (c.flags & kCountWire);
    if (phase == 1 && (c.flags & kCallCpu)) net.time_calls(true);
    if (count) {
      // The sender reads its counter before the receiver's clear-to-send writes (which its
      // device acknowledges) can start; the receiver reads before it posts.
      if (sender) {
        counted.begin(s, comms);
        send_go(*s.ch, dl);
      } else {
        wait_go(*s.ch, dl);
        counted.begin(s, comms);
      }
    }
    if (sender) {
      wait_go(*s.ch, dl);
    } else {
      for (uint64_t k = 0; k < K; ++k) post(conns[k], k);
      send_go(*s.ch, dl);
    }
    CpuTimes cpu0 = CpuTimes::now();
    double t0 = now_s();
    uint64_t left = K;
    Spin spin{dl, true};
    while (left > 0) {
      for (uint64_t k = 0; k < K; ++k) {
        BwConn& bc = conns[k];
        if (bc.done == n) continue;
        post(bc, k);
        while (bc.done < bc.posted) {
          size_t got = 0;
          if (!net.test(bc.reqs[bc.done % w], &got)) break;
          if (!sender) {
            if (got != c.size) {
              st.bad_bytes += 1;
              if (st.bad_bytes < 5)
                fprintf(stderr,
                        "sluice-bench: conn %llu message %llu: received %zu bytes, sent %llu\n",
                        (unsigned long long)k, (unsigned long long)bc.done, got,
                        (unsigned long long)c.size);
            }
            if (c.verify) {
              const char* p = bc.base + (bc.done % nslots) * c.size;
              uint64_t bad = check_pattern(p, c.size, k, seq_base + bc.done);
              if (bad && st.bad_bytes < 5)
                fprintf(stderr, "sluice-bench: conn %llu message %llu (%s): %llu bytes differ\n",
                        (unsigned long long)k, (unsigned long long)bc.done,
                        format_size(c.size).c_str(), (unsigned long long)bad);
              st.bad_bytes += bad;
            }
          }
          ++bc.done;
          moved = true;
          if (bc.done == n) --left;
        }
      }
      if (moved) spin.progress();
      moved = false;
      spin.tick();
    }
    double t1 = now_s();
    if (phase == 1) {
      if (c.flags & kCallCpu) {
        net.time_calls(false);
        for (int k = 0; k < Net::CallCpu::kKinds; ++k) {
          st.calls[k] = net.call_cpu().calls[k];
          st.call_ns[k] = net.call_cpu().ns[k];
        }
      }
      CpuTimes cpu = CpuTimes::now() - cpu0;
      st.elapsed_s = t1 - t0;
      st.user_s = cpu.user_s;
      st.sys_s = cpu.sys_s;
      st.messages = n * K;
      if (count) counted.end(s, comms, &st);
    }
    seq_base += n;
  }
  for (auto& bc : conns) {
    net.dereg(bc.comm, bc.mh);
    if (sender) {
      net.close_send(bc.comm);
    } else {
      net.close_recv(bc.comm);
    }
  }
  return st;
}

}  // namespace

void fill_pattern(void* p, size_t n, uint64_t stream, uint64_t seq) {
  uint64_t base = mix(stream * 0x9e3779b97f4a7c15ull ^ (seq + 1) * 0xc2b2ae3d27d4eb4full);
  char* c = static_cast<char*>(p);
  size_t words = n / 8;
  for (size_t i = 0; i < words; ++i) {
    uint64_t v = mix(base + i);
    memcpy(c + i * 8, &v, 8);
  }
  if (n % 8) {
    uint64_t v = mix(base + words);
    memcpy(c + words * 8, &v, n % 8);
  }
}

uint64_t check_pattern(const void* p, size_t n, uint64_t stream, uint64_t seq) {
  uint64_t base = mix(stream * 0x9e3779b97f4a7c15ull ^ (seq + 1) * 0xc2b2ae3d27d4eb4full);
  const char* c = static_cast<const char*>(p);
  size_t words = n / 8;
  uint64_t bad = 0;
  for (size_t i = 0; i < words; ++i) {
    uint64_t v = mix(base + i), got;
    memcpy(&got, c + i * 8, 8);
    if (got != v)
      for (int b = 0; b < 8; ++b) bad += ((got >> (8 * b)) & 0xff) != ((v >> (8 * b)) & 0xff);
  }
  if (n % 8) {
    uint64_t v = mix(base + words);
    const unsigned char* vb = reinterpret_cast<const unsigned char*>(&v);
    for (size_t b = 0; b < n % 8; ++b) bad += static_cast<unsigned char>(c[words * 8 + b]) != vb[b];
  }
  return bad;
}

SideStats bw_recv(Side& s, const Cmd& c) {
  Deadline dl(c.timeout_s, "setting up the bandwidth connections (receiver)");
  std::vector<void*> lcs(c.nconns);
  std::vector<Handle> hs(c.nconns);
  for (uint32_t k = 0; k < c.nconns; ++k) hs[k] = s.net->listen(s.dev, &lcs[k]);
  s.ch->send(hs.data(), hs.size() * sizeof(Handle), dl);
  std::vector<void*> rcs = accept_all(*s.net, lcs, dl);
  return run_bw(s, c, false, rcs);
}

SideStats bw_send(Side& s, const Cmd& c) {
  Deadline dl(c.timeout_s, "setting up the bandwidth connections (sender)");
  std::vector<Handle> hs(c.nconns);
  s.ch->recv(hs.data(), hs.size() * sizeof(Handle), dl);
  std::vector<void*> scs = connect_all(*s.net, s.dev, hs, dl);
  return run_bw(s, c, true, scs);
}

// Latency: both sides need a connection each way.
namespace {
struct Pair {
  void* send = nullptr;
  void* recv = nullptr;
};

Pair connect_both_ways(Side& s, const Cmd& c, bool initiator) {
  Deadline dl(c.timeout_s, "connecting both ways for the latency test");
  void* lc = nullptr;
  Handle mine = s.net->listen(s.dev, &lc);
  Handle theirs{};
  if (initiator) {
    s.ch->send_pod(mine, dl);
    theirs = s.ch->recv_pod<Handle>(dl);
  } else {
    theirs = s.ch->recv_pod<Handle>(dl);
    s.ch->send_pod(mine, dl);
  }
  Pair p;
  Spin spin{dl};
  while (!p.send || !p.recv) {
    if (!p.send) p.send = s.net->connect_once(s.dev, &theirs);
    if (!p.recv) {
      p.recv = s.net->accept_once(lc);
      if (p.recv) s.net->close_listen(lc);
    }
    spin.tick();
  }
  return p;
}

template <class F>
void* retry_post(F f, const Deadline& dl) {
  Spin spin{dl};
  for (;;) {
    if (void* r = f()) return r;
    spin.tick();
  }
}

void wait_req(Net& net, void* req, const Deadline& dl, size_t* got = nullptr) {
  Spin spin{dl};
  while (!net.test(req, got)) spin.tick();
}
}  // namespace

// Ping-pong, two modes. Just in time (default): each side posts the receive for the next message
// right before it needs it, so the receiver's clear-to-send write is on the round trip. Pre-posted
// (kPrePost): each side keeps `window` receives posted ahead in distinct slots, as NCCL's proxy
// does, and re-posts a slot after sending its reply. With kCountWire, each side reads its
// device's packet counter (and the plugin's statistics) around the whole loop, warm-up included.
namespace {
struct LatBufs {
  Net& net;
  Pair p;
  uint64_t size, ahead;
  Buffer sbuf, rbuf;
  void *smh, *rmh;
  LatBufs(Net& n, Pair pr, const Cmd& c)
      : net(n),
        p(pr),
        size(c.size),
        ahead((c.flags & kPrePost) ? std::max<uint32_t>(c.window, 1) : 1),
        sbuf(c.size),
        rbuf(c.size * ahead),
        smh(n.reg(pr.send, sbuf.data(), c.size)),
        rmh(n.reg(pr.recv, rbuf.data(), c.size * ahead)) {}
  ~LatBufs() {
    net.dereg(p.send, smh);
    net.dereg(p.recv, rmh);
    net.close_send(p.send);
    net.close_recv(p.recv);
  }
  char* slot(uint64_t i) { return rbuf.data() + (i % ahead) * size; }
  void* post_recv(uint64_t i, const Deadline& dl) {
    return retry_post([&] { return net.irecv(p.recv, slot(i), size, 0, rmh); }, dl);
  }
  void* post_send(const Deadline& dl) {
    return retry_post([&] { return net.isend(p.send, sbuf.data(), size, 0, smh); }, dl);
  }
};

// Counting handshake: the initiator reads first, then the peer reads and may post receives.
void lat_count_begin(Side& s, const Cmd& c, bool initiator, Counted* cnt, const Pair& p,
                     const Deadline& dl) {
  if (!(c.flags & kCountWire)) return;
  if (initiator) {
    cnt->begin(s, {p.send, p.recv});
    send_go(*s.ch, dl);
    wait_go(*s.ch, dl);
  } else {
    wait_go(*s.ch, dl);
    cnt->begin(s, {p.send, p.recv});
    send_go(*s.ch, dl);
  }
}
}  // namespace

LatResult lat_ping(Side& s, const Cmd& c) {
  Net& net = *s.net;
  LatBufs b(net, connect_both_ways(s, c, true), c);
  LatResult res;
  const uint64_t total = c.warmup + c.iters;
  const bool pre = c.flags & kPrePost;
  res.half_rtt_us.reserve(c.iters);
  Deadline dl(c.timeout_s,
              strf("in the %s ping-pong (no pong from the peer)", format_size(c.size).c_str()));
  Counted cnt;
  lat_count_begin(s, c, true, &cnt, b.p, dl);
  std::vector<void*> rr(b.ahead, nullptr);
  if (pre)
    for (uint64_t j = 0; j < std::min(b.ahead, total); ++j) rr[j] = b.post_recv(j, dl);
  CpuTimes cpu0 = CpuTimes::now();
  double tstart = 0;
  for (uint64_t i = 0; i < total; ++i) {
    if (i == c.warmup) {
      cpu0 = CpuTimes::now();
      tstart = now_s();
    }
    if (c.verify) fill_pattern(b.sbuf.data(), c.size, 0, i);
    double t0 = now_s();
    if (!pre) rr[0] = b.post_recv(i, dl);
    void* sr = b.post_send(dl);
    size_t got = 0;
    wait_req(net, sr, dl);
    wait_req(net, rr[i % b.ahead], dl, &got);
    double t1 = now_s();
    if (i >= c.warmup) res.half_rtt_us.push_back((t1 - t0) * 1e6 / 2);
    if (got != c.size) ++res.self.bad_bytes;
    if (c.verify) res.self.bad_bytes += check_pattern(b.slot(i), c.size, 1, i);
    if (pre && i + b.ahead < total) rr[i % b.ahead] = b.post_recv(i + b.ahead, dl);
  }
  double tend = now_s();
  CpuTimes cpu = CpuTimes::now() - cpu0;
  res.self.elapsed_s = tend - tstart;
  res.self.user_s = cpu.user_s;
  res.self.sys_s = cpu.sys_s;
  res.self.messages = c.iters;
  if (c.flags & kCountWire) cnt.end(s, {b.p.send, b.p.recv}, &res.self);
  std::sort(res.half_rtt_us.begin(), res.half_rtt_us.end());
  return res;
}

SideStats lat_pong(Side& s, const Cmd& c) {
  Net& net = *s.net;
  LatBufs b(net, connect_both_ways(s, c, false), c);
  SideStats st;
  const uint64_t total = c.warmup + c.iters;
  const bool pre = c.flags & kPrePost;
  Deadline dl(c.timeout_s,
              strf("in the %s ping-pong (no ping from the peer)", format_size(c.size).c_str()));
  Counted cnt;
  lat_count_begin(s, c, false, &cnt, b.p, dl);
  CpuTimes cpu0 = CpuTimes::now();
  double t0 = now_s();
  std::vector<void*> rr(b.ahead, nullptr);
  for (uint64_t j = 0; j < std::min(b.ahead, total); ++j) rr[j] = b.post_recv(j, dl);
  for (uint64_t i = 0; i < total; ++i) {
    size_t got = 0;
    wait_req(net, rr[i % b.ahead], dl, &got);
    if (got != c.size) ++st.bad_bytes;
    if (c.verify) {
      st.bad_bytes += check_pattern(b.slot(i), c.size, 0, i);
      fill_pattern(b.sbuf.data(), c.size, 1, i);
    }
    void* sr;
    if (pre) {
      // The reply first; the slot just consumed is re-posted for message i + ahead.
      sr = b.post_send(dl);
      if (i + b.ahead < total) rr[i % b.ahead] = b.post_recv(i + b.ahead, dl);
    } else {
      // NCCL's order for a receive that is needed next: post it, then send.
      if (i + 1 < total) rr[0] = b.post_recv(i + 1, dl);
      sr = b.post_send(dl);
    }
    wait_req(net, sr, dl);
  }
  CpuTimes cpu = CpuTimes::now() - cpu0;
  st.elapsed_s = now_s() - t0;
  st.user_s = cpu.user_s;
  st.sys_s = cpu.sys_s;
  st.messages = total;
  if (c.flags & kCountWire) cnt.end(s, {b.p.send, b.p.recv}, &st);
  return st;
}

// Resident memory and verbs objects now, as growth since `v0` (taken with st->rss_before).
// Open rdma_cm event channels (/dev/infiniband/rdma_cm) of this process.
int32_t rdma_cm_channels() {
  int32_t n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  char target[64];
  while (const dirent* e = readdir(d)) {
    const std::string path = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t len = readlink(path.c_str(), target, sizeof target - 1);
    if (len <= 0) continue;
    target[len] = '\0';
    if (std::strcmp(target, "/dev/infiniband/rdma_cm") == 0) ++n;
  }
  closedir(d);
  return n;
}

void record_growth(SideStats* st, const VerbsObjects& v0) {
  st->rss_after = rss_bytes();
  VerbsObjects v1 = VerbsObjects::of_pid(getpid());
  st->verbs_valid = v0.valid && v1.valid;
  st->qps = v1.qps - v0.qps;
  st->cqs = v1.cqs - v0.cqs;
  st->cqes = v1.cqes - v0.cqes;
  st->mrs = v1.mrs - v0.mrs;
  st->pds = v1.pds - v0.pds;
}

// Connection cost. Protocol: peer measures its baseline and sends 'G'; initiator starts the clock
// and answers 'G'; peer listens on all, ships the handles, accepts all, then reports "accepted"
// (its own elapsed) and its resident memory / verbs objects with every connection still open;
// initiator sends 'G' to close; peer reports its close time.
SideStats conn_accept(Side& s, const Cmd& c) {
  Deadline dl(c.timeout_s, strf("establishing %u connections (receiver)", c.nconns));
  SideStats st;
  st.rss_before = rss_bytes();
  VerbsObjects v0 = VerbsObjects::of_pid(getpid());
  send_go(*s.ch, dl);
  wait_go(*s.ch, dl);
  double t0 = now_s();
  std::vector<void*> lcs(c.nconns);
  std::vector<Handle> hs(c.nconns);
  for (uint32_t k = 0; k < c.nconns; ++k) hs[k] = s.net->listen(s.dev, &lcs[k]);
  s.ch->send(hs.data(), hs.size() * sizeof(Handle), dl);
  std::vector<void*> rcs = accept_all(*s.net, lcs, dl);
  st.elapsed_s = now_s() - t0;
  record_growth(&st, v0);
  st.cm_channels = rdma_cm_channels();
  s.ch->send_pod(st, dl);
  wait_go(*s.ch, dl);
  double tc = now_s();
  for (void* rc : rcs) s.net->close_recv(rc);
  st.close_s = now_s() - tc;
  return st;
}

SideStats conn_connect(Side& s, const Cmd& c) {
  Deadline dl(c.timeout_s, strf("establishing %u connections (sender)", c.nconns));
  SideStats st;
  st.rss_before = rss_bytes();
  VerbsObjects v0 = VerbsObjects::of_pid(getpid());
  wait_go(*s.ch, dl);
  double t0 = now_s();
  send_go(*s.ch, dl);
  std::vector<Handle> hs(c.nconns);
  s.ch->recv(hs.data(), hs.size() * sizeof(Handle), dl);
  std::vector<void*> scs = connect_all(*s.net, s.dev, hs, dl);
  double t_connected = now_s();
  SideStats peer = s.ch->recv_pod<SideStats>(dl);  // arrives once the peer accepted them all
  // Wall time of the whole setup (both sides done), measured on one clock.
  st.elapsed_s = std::max(now_s(), t_connected) - t0;
  record_growth(&st, v0);
  st.cm_channels = rdma_cm_channels();
  (void)peer;
  send_go(*s.ch, dl);
  double tc = now_s();
  for (void* sc : scs) s.net->close_send(sc);
  st.close_s = now_s() - tc;
  return st;
}

}  // namespace bench
