// Profiler events through the exported v10, v11 and v12 tables (docs/profiler.md): a counting
// callback stands in for NCCL's ncclProfilerCallback and records every start and stop. Runs in
// the plugin_rdma_qps1 / _qps4 / _qps4_split processes (one QP; four whole-message; four split).
// Flush READs need NCCL_NET_FORCE_FLUSH=1, which is read once per process: that case runs in a
// child process of the same binary (DISABLED_ProfilerChild, started by ProfilerFlush).
#include <infiniband/verbs.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <set>
#include <string>
#include <vector>

#include "ext_stats.h"
#include "plugin_bed.h"
#include "sluice/core/wire/eager.h"
#include "sluice/core/wire/wire.h"
#include "sluice/sluice_ext.h"

extern char** environ;

namespace nettest {
namespace {

constexpr int64_t kIbPluginId = NCCL_PROFILER_NET_TYPE_IB | NCCL_PROFILER_NET_IB_VER;

struct Event {
  void* parent = nullptr;
  int64_t plugin_id = 0;
  ncclProfilerNetIbDescr_v1_t d{};
  bool stopped = false;
};

// What the callback saw. Events live in a deque (stable addresses): the handle is the Event*.
struct Recorder {
  std::mutex mu;
  std::deque<Event> events;
  int broken = 0;    // calls that break NCCL's contract (NULL eHandle/pHandle/extData, bad type)
  int bad_stop = 0;  // stop of a NULL handle or of an event already stopped
  void clear() {
    std::lock_guard<std::mutex> lk(mu);
    events.clear();
    broken = bad_stop = 0;
  }
};
Recorder g_rec;

ncclResult_t counting_callback(void** eHandle, int type, void* pHandle, int64_t pluginId,
                               void* extData) {
  std::lock_guard<std::mutex> lk(g_rec.mu);
  if (eHandle == nullptr) {
    ++g_rec.broken;
    return ncclSuccess;
  }
  if (type == ncclProfilerNetEventStart) {
    // NCCL dereferences pHandle here: a NULL one would crash NCCL.
    if (pHandle == nullptr || extData == nullptr) {
      ++g_rec.broken;
      return ncclSuccess;
    }
    Event e;
    e.parent = pHandle;
    e.plugin_id = pluginId;
    e.d = *static_cast<const ncclProfilerNetIbDescr_v1_t*>(extData);
    g_rec.events.push_back(e);
    *eHandle = &g_rec.events.back();
  } else if (type == ncclProfilerNetEventStop) {
    auto* e = static_cast<Event*>(*eHandle);
    if (e == nullptr || e->stopped) {
      ++g_rec.bad_stop;
    } else {
      e->stopped = true;
    }
  } else {
    ++g_rec.broken;
  }
  return ncclSuccess;
}

// Events under `parent` still open (not stopped).
int open_under(void* parent) {
  std::lock_guard<std::mutex> lk(g_rec.mu);
  int n = 0;
  for (const Event& e : g_rec.events) n += e.parent == parent && !e.stopped;
  return n;
}

const sluiceExt_v2_t* ext() {
  return ext_v2();
}

std::set<uint32_t> qps_of(void* comm, uint32_t* flush_qpn = nullptr) {
  sluiceCommStats_v2_t st{};
  st.size = sizeof st;
  std::set<uint32_t> out;
  if (ext() == nullptr || ext()->commStatsV2(comm, &st) != 0) return out;
  for (int m = 0; m < st.nMembers; ++m)
    for (int q = 0; q < st.members[m].nQps; ++q) out.insert(st.members[m].qpNum[q]);
  if (flush_qpn != nullptr) *flush_qpn = st.flushQpNum;
  return out;
}

// Posts one irecv (n buffers, parents[i]) and the n matching isends (sparents[i]); waits for all,
// checking that every event under a request's parent is stopped by the time test reports it done.
::testing::AssertionResult exchange(Net& n, Conn& c, RegBuf* sb, RegBuf* rb, const size_t* sizes,
                                    int count, void** rparents, void** sparents, int tag0) {
  void* data[8];
  void* mhs[8];
  size_t caps[8];
  int tags[8];
  for (int i = 0; i < count; ++i) {
    data[i] = rb[i].data();
    mhs[i] = rb[i].mh();
    caps[i] = sizes[i] + 64;
    tags[i] = tag0 + i;
  }
  void* rreq = nullptr;
  n.phandles = rparents;
  auto ok = post_until("irecv", &rreq, [&](void** req) {
    return n.irecv(c.recv, count, data, caps, tags, mhs, req);
  });
  n.phandles = nullptr;
  if (!ok) return ok;
  std::vector<void*> sreqs(count, nullptr);
  for (int i = count - 1; i >= 0; --i) {  // reverse order: the group's leader is not the first
    n.phandle = sparents != nullptr ? sparents[i] : nullptr;
    ok = post_until("isend", &sreqs[i], [&](void** req) {
      return n.isend(c.send, sb[i].data(), sizes[i], tags[i], sb[i].mh(), req);
    });
    n.phandle = nullptr;
    if (!ok) return ok;
  }
  for (int i = 0; i < count; ++i) {
    int s = -1;
    ok = wait_done(n, "send", sreqs[i], &s);
    if (!ok) return ok;
    if (sparents != nullptr && sparents[i] != nullptr && open_under(sparents[i]) != 0)
      return ::testing::AssertionFailure() << "send " << i << " done with events still open";
  }
  int got[8] = {};
  ok = wait_done(n, "recv", rreq, got);
  if (!ok) return ok;
  for (int i = 0; i < count; ++i) {
    if (got[i] != static_cast<int>(sizes[i]))
      return ::testing::AssertionFailure() << "recv " << i << " got " << got[i];
    if (rparents != nullptr && rparents[i] != nullptr && open_under(rparents[i]) != 0)
      return ::testing::AssertionFailure() << "recv " << i << " done with events still open";
  }
  return ::testing::AssertionSuccess();
}

class Profiler : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(Abi, Profiler, ::testing::Values(10, 11, 12),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return "v" + std::to_string(i.param);
                         });

// Single messages of several sizes, grouped receives of 1..8, then messages with a NULL phandle and
// with NULL entries in phandles: every start has its stop before test says done, every event is a
// NET/IB QP event on one of the comm's QPs, and the lengths add up to the bytes sent.
TEST_P(Profiler, EveryWorkRequestStartsAndStopsUnderItsParent) {
  REQUIRE_BED();
  ASSERT_NE(ext(), nullptr) << "sluiceExt_v2 not exported";
  g_rec.clear();
  Net n(GetParam());
  n.profiler = &counting_callback;
  ASSERT_EQ(n.init(0x2200 + GetParam()), ncclSuccess);
  Conn c;
  ASSERT_TRUE(open_bed_conn(n, &c));
  const std::set<uint32_t> send_qps = qps_of(c.send), recv_qps = qps_of(c.recv);
  ASSERT_FALSE(send_qps.empty());
  ASSERT_FALSE(recv_qps.empty());
  constexpr size_t kBuf = 1 << 20;
  RegBuf sb[8], rb[8];
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(sb[i].allocate(&n, c.send, kBuf));
    ASSERT_TRUE(rb[i].allocate(&n, c.recv, kBuf + 64));
  }
  // Parent tokens: only their addresses matter (NCCL's are proxy-step handles).
  std::vector<char> stok(64), rtok(64);
  std::set<void*> sparents, rparents;
  std::set<void*> silent;  // zero-byte members of a group: no work request carries them
  size_t bytes_sent = 0;
  int grouped_sends = 0;  // groups of n > 1: their closing WRITE_WITH_IMM carries the record
  int k = 0;
  for (size_t size : {size_t{0}, size_t{1}, size_t{4096}, size_t{65537}, kBuf}) {
    SCOPED_TRACE("size " + std::to_string(size));
    void* sp = &stok[k];
    void* rp = &rtok[k];
    ++k;
    sparents.insert(sp);
    rparents.insert(rp);
    ASSERT_TRUE(exchange(n, c, sb, rb, &size, 1, &rp, &sp, 10));
    bytes_sent += size;
  }
  for (int g = 1; g <= 8; ++g) {
    SCOPED_TRACE("group of " + std::to_string(g));
    size_t sizes[8];
    void* sps[8];
    void* rps[8];
    for (int i = 0; i < g; ++i) {
      sizes[i] = i == g - 1 && g > 2 ? 0 : 3000 * (i + 1) + 7;
      sps[i] = &stok[k];
      rps[i] = &rtok[k];
      ++k;
      sparents.insert(sps[i]);
      rparents.insert(rps[i]);
      if (sizes[i] == 0 && g > 1) silent.insert(sps[i]);
      bytes_sent += sizes[i];
    }
    grouped_sends += g > 1;
    ASSERT_TRUE(exchange(n, c, sb, rb, sizes, g, rps, sps, 100 * g));
  }
  size_t events_before_null = 0;
  {
    std::lock_guard<std::mutex> lk(g_rec.mu);
    events_before_null = g_rec.events.size();
  }
  // NULL phandle / NULL phandles: no event at all for those messages.
  {
    size_t size = 5000;
    ASSERT_TRUE(exchange(n, c, sb, rb, &size, 1, nullptr, nullptr, 7));
    size_t sizes[3] = {100, 200, 300};
    void* rps[3] = {nullptr, nullptr, nullptr};
    void* sps[3] = {nullptr, nullptr, nullptr};
    ASSERT_TRUE(exchange(n, c, sb, rb, sizes, 3, rps, sps, 70));
  }
  {
    std::lock_guard<std::mutex> lk(g_rec.mu);
    EXPECT_EQ(g_rec.events.size(), events_before_null) << "events for messages with NULL phandle";
    EXPECT_EQ(g_rec.broken, 0) << "callback called against NCCL's contract";
    EXPECT_EQ(g_rec.bad_stop, 0) << "stop of a NULL or already stopped event";
    size_t send_len = 0;
    int send_events = 0, cts_events = 0;
    std::set<void*> with_send, with_cts;
    for (const Event& e : g_rec.events) {
      EXPECT_TRUE(e.stopped) << "an event was never stopped";
      EXPECT_EQ(e.plugin_id, kIbPluginId);
      EXPECT_EQ(e.d.type, ncclProfileQp);
      EXPECT_EQ(e.d.qp.device, 0);
      const auto qpn = static_cast<uint32_t>(e.d.qp.qpNum);
      if (sparents.count(e.parent) != 0) {
        ++send_events;
        with_send.insert(e.parent);
        EXPECT_TRUE(send_qps.count(qpn) != 0) << "send event on qpn " << qpn;
        EXPECT_TRUE(e.d.qp.opcode == IBV_WR_RDMA_WRITE ||
                    e.d.qp.opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
            << "opcode " << e.d.qp.opcode;
        send_len += e.d.qp.length;
      } else if (rparents.count(e.parent) != 0) {
        ++cts_events;
        with_cts.insert(e.parent);
        EXPECT_TRUE(recv_qps.count(qpn) != 0) << "clear-to-send event on qpn " << qpn;
        EXPECT_EQ(e.d.qp.opcode, IBV_WR_RDMA_WRITE);
        EXPECT_EQ(e.d.qp.length, sizeof(sluice::wire::CtsEntry));
      } else {
        ADD_FAILURE() << "event under a parent nobody passed";
      }
    }
    for (void* p : sparents) {
      EXPECT_EQ(with_send.count(p), silent.count(p) == 0 ? 1u : 0u)
          << (silent.count(p) ? "event for a zero-byte group member" : "a send without event");
    }
    EXPECT_EQ(with_cts, rparents) << "every receive buffer gets its clear-to-send event";
    EXPECT_EQ(cts_events, static_cast<int>(rparents.size())) << "one per receive buffer";
    EXPECT_GE(send_events, static_cast<int>(sparents.size()));
    EXPECT_EQ(send_len, bytes_sent + grouped_sends * sizeof(sluice::wire::DoneRecord))
        << "data lengths + one completion record per grouped send";
  }
  for (int i = 0; i < 8; ++i) {
    sb[i].reset();
    rb[i].reset();
  }
  EXPECT_TRUE(close_conn(n, &c));
  EXPECT_EQ(n.finalize(), ncclSuccess);
}

// The eager path (SLUICE_EAGER_MAX, docs/eager.md; on by default, off in plugin_rdma_noeager): a
// message sent eagerly is one RDMA WRITE of header and payload into the receiver's ring, and that
// WRITE is its one event, on the send comm's QP, stopped by the time test says the send is done.
// Each send goes before its receive (so it cannot have seen the receive's clear-to-send), and both
// are tested together, as NCCL's proxy does. Before, eager sends started no event at all.
TEST(ProfilerEager, AnEagerSendIsOneWriteEvent) {
  REQUIRE_BED();
  ASSERT_NE(ext(), nullptr) << "sluiceExt_v2 not exported";
  g_rec.clear();
  // The engine (and its configuration) lives as long as the bed's own Net: the process's
  // environment decides (unset: on, the default; plugin_rdma_noeager sets SLUICE_EAGER_MAX=0).
  // With it off, the same sends all go by rendezvous, each with its events (checked below too).
  // A comm with more than one path (a fused device, SLUICE_TEST_FUSE; a standby) has it too,
  // unless SLUICE_EAGER_FUSED=0.
  const char* max = std::getenv("SLUICE_EAGER_MAX");
  const char* fuse = std::getenv("SLUICE_TEST_FUSE");
  const char* standby = std::getenv("SLUICE_STANDBY");
  const char* fused_eager = std::getenv("SLUICE_EAGER_FUSED");
  const bool one_path =
      (fuse == nullptr || *fuse == '\0') && (standby == nullptr || std::strcmp(standby, "0") == 0);
  const bool fused_off = fused_eager != nullptr && std::strcmp(fused_eager, "0") == 0;
  const bool eager_on = (max == nullptr || std::atol(max) > 0) && (one_path || !fused_off);
  Net n(12);
  n.profiler = &counting_callback;
  ASSERT_EQ(n.init(0x2240), ncclSuccess);
  Conn c;
  ASSERT_TRUE(open_bed_conn(n, &c));
  const std::set<uint32_t> send_qps = qps_of(c.send);
  RegBuf sb, rb;
  ASSERT_TRUE(sb.allocate(&n, c.send, 4096));
  ASSERT_TRUE(rb.allocate(&n, c.recv, 4096));
  std::vector<char> stok(64);
  constexpr int kTag = 21;
  int eager_sent = 0;
  std::vector<int> eager_at;
  for (int i = 0; i < 24; ++i) {
    const size_t size = 1 + 97 * static_cast<size_t>(i);
    sluiceCommStats_v1_t before{}, after{};
    ASSERT_TRUE(comm_stats(c.send, &before));
    n.phandle = &stok[i];
    ASSERT_TRUE(send_first_message(
        n, c, sb.data(), sb.mh(), rb.data(), rb.mh(), size, kTag, 300 + i,
        [&] { EXPECT_EQ(open_under(&stok[i]), 0) << "send " << i << " done, event open"; }))
        << "message " << i;
    n.phandle = nullptr;
    ASSERT_TRUE(comm_stats(c.send, &after));
    if (after.eagerMessages > before.eagerMessages) {
      ++eager_sent;
      eager_at.push_back(i);
    }
  }
  // Each comm says where it stands with the eager path (sluiceCommStats_v2_t::eager).
  for (void* comm : {c.send, c.recv}) {
    sluiceCommStats_v2_t st{};
    st.size = sizeof st;
    ASSERT_EQ(ext()->commStatsV2(comm, &st), 0);
    EXPECT_EQ(st.eager, eager_on ? SLUICE_EAGER_ON : SLUICE_EAGER_OFF)
        << (comm == c.send ? "send" : "receive") << " comm";
  }
  if (eager_on) {
    ASSERT_GT(eager_sent, 0) << "no send went eagerly: the test shows nothing";
  } else {
    EXPECT_EQ(eager_sent, 0) << "a send went eagerly with the eager path off (or on a comm of "
                                "more than one path with SLUICE_EAGER_FUSED=0)";
  }
  {
    std::lock_guard<std::mutex> lk(g_rec.mu);
    EXPECT_EQ(g_rec.broken, 0) << "callback called against NCCL's contract";
    EXPECT_EQ(g_rec.bad_stop, 0) << "stop of a NULL or already stopped event";
    for (int i = 0; i < 24; ++i) {
      bool any = false;
      for (const Event& e : g_rec.events) any = any || e.parent == &stok[i];
      EXPECT_TRUE(any) << "send " << i << " has no event";
    }
    for (int i : eager_at) {
      int events = 0;
      for (const Event& e : g_rec.events) {
        if (e.parent != &stok[i]) continue;
        ++events;
        EXPECT_TRUE(e.stopped);
        EXPECT_EQ(e.d.qp.opcode, IBV_WR_RDMA_WRITE) << "eager send " << i;
        EXPECT_TRUE(send_qps.count(static_cast<uint32_t>(e.d.qp.qpNum)) != 0);
        EXPECT_EQ(e.d.qp.length, sluice::wire::kEagerHeaderBytes + 1 + 97 * static_cast<size_t>(i))
            << "header and payload";
      }
      EXPECT_EQ(events, 1) << "eager send " << i << ": one event, its WRITE";
    }
  }
  std::fprintf(stderr, "%d of 24 sends went eagerly\n", eager_sent);
  sb.reset();
  rb.reset();
  EXPECT_TRUE(close_conn(n, &c));
  EXPECT_EQ(n.finalize(), ncclSuccess);
}

// v11/v12 contexts are per NCCL communicator: a comm of a ctx whose init passed no callback never
// calls one, even with phandles (a NULL callback is handled).
TEST(ProfilerNull, CallbackOfContextIsNullEmitsNothing) {
  REQUIRE_BED();
  g_rec.clear();
  Net n(12);
  ASSERT_EQ(n.init(0x2299), ncclSuccess);  // profiler stays NULL
  Conn c;
  ASSERT_TRUE(open_bed_conn(n, &c));
  {
    RegBuf sb, rb;
    ASSERT_TRUE(sb.allocate(&n, c.send, 8192));
    ASSERT_TRUE(rb.allocate(&n, c.recv, 8192 + 64));
    char tok[2];
    void* sp = &tok[0];
    void* rp = &tok[1];
    size_t size = 8192;
    ASSERT_TRUE(exchange(n, c, &sb, &rb, &size, 1, &rp, &sp, 3));
  }
  std::lock_guard<std::mutex> lk(g_rec.mu);
  EXPECT_TRUE(g_rec.events.empty());
  EXPECT_EQ(g_rec.broken + g_rec.bad_stop, 0);
  EXPECT_TRUE(close_conn(n, &c));
  EXPECT_EQ(n.finalize(), ncclSuccess);
}

// Run by ProfilerFlush with NCCL_NET_FORCE_FLUSH=1 (host buffers then get a real loopback READ).
// With SLUICE_PROFILER_EVENTS=0 nothing may be emitted at all.
TEST(DISABLED_ProfilerChild, FlushReadIsAnEvent) {
  REQUIRE_BED();
  const char* knob = std::getenv("SLUICE_PROFILER_EVENTS");
  const bool off = knob != nullptr && std::string(knob) == "0";
  g_rec.clear();
  Net n(12);
  n.profiler = &counting_callback;
  ASSERT_EQ(n.init(0x2301), ncclSuccess);
  Conn c;
  ASSERT_TRUE(open_bed_conn(n, &c));
  {
    RegBuf sb, rb;
    ASSERT_TRUE(sb.allocate(&n, c.send, 4096));
    ASSERT_TRUE(rb.allocate(&n, c.recv, 4096 + 64));
    char tok[2];
    void* sp = &tok[0];
    void* rp = &tok[1];
    size_t size = 4096;
    ASSERT_TRUE(exchange(n, c, &sb, &rb, &size, 1, &rp, &sp, 3));
    void* data = rb.data();
    int sizes = 4096;
    void* mh = rb.mh();
    void* freq = nullptr;
    ASSERT_EQ(n.iflush(c.recv, 1, &data, &sizes, &mh, &freq), ncclSuccess);
    ASSERT_NE(freq, nullptr) << "NCCL_NET_FORCE_FLUSH=1 must flush host buffers";
    ASSERT_TRUE(wait_done(n, "flush", freq, nullptr));
    EXPECT_EQ(open_under(rp), 0) << "flush done with its READ event open";
    uint32_t flush_qpn = 0;
    (void)qps_of(c.recv, &flush_qpn);
    EXPECT_NE(flush_qpn, 0u);
    std::lock_guard<std::mutex> lk(g_rec.mu);
    int reads = 0;
    for (const Event& e : g_rec.events) {
      EXPECT_TRUE(e.stopped);
      if (e.d.qp.opcode != IBV_WR_RDMA_READ) continue;
      ++reads;
      EXPECT_EQ(e.parent, rp) << "the READ nests under the flushed receive's phandle";
      EXPECT_EQ(static_cast<uint32_t>(e.d.qp.qpNum), flush_qpn);
      EXPECT_EQ(e.d.qp.length, 1u);
    }
    if (off) {
      EXPECT_TRUE(g_rec.events.empty()) << "SLUICE_PROFILER_EVENTS=0 must silence every event";
    } else {
      EXPECT_EQ(reads, 1);
    }
    EXPECT_EQ(g_rec.broken + g_rec.bad_stop, 0);
  }
  EXPECT_TRUE(close_conn(n, &c));
  EXPECT_EQ(n.finalize(), ncclSuccess);
}

int run_child(const char* events_knob) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string s = *e;
    if (s.rfind("NCCL_NET_FORCE_FLUSH=", 0) == 0 || s.rfind("SLUICE_PROFILER_EVENTS=", 0) == 0)
      continue;
    env.push_back(s);
  }
  env.emplace_back("NCCL_NET_FORCE_FLUSH=1");
  env.emplace_back(std::string("SLUICE_PROFILER_EVENTS=") + events_knob);
  std::vector<char*> envp;
  for (std::string& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string a0 = "plugin_rdma_test", a1 = "--gtest_filter=DISABLED_ProfilerChild.*",
              a2 = "--gtest_also_run_disabled_tests";
  char* argv[] = {a0.data(), a1.data(), a2.data(), nullptr};
  pid_t pid = -1;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()) != 0) return -1;
  const auto deadline = Clock::now() + 2 * wait_limit();
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -2;
    }
    usleep(10000);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -3;
}

TEST(ProfilerFlush, ReadEventAndKnobOffInChild) {
  REQUIRE_BED();
  EXPECT_EQ(run_child("1"), 0) << "child with NCCL_NET_FORCE_FLUSH=1 failed (its output is above)";
  EXPECT_EQ(run_child("0"), 0) << "child with SLUICE_PROFILER_EVENTS=0 failed";
}

}  // namespace
}  // namespace nettest
