// Clear-to-send publication in the posting patterns that matter, counted and timed (label rdma;
// part of the plugin_rdma_test binary). NCCL's proxy (recvProxyProgress in NCCL's
// src/transport/net.cc) posts at most one irecv per receive comm per progress call and returns as
// soon as it posted anything; it tests the oldest receive of each comm only in a call that could
// post nothing. So in steady state every irecv is followed by other calls before the same comm's
// next irecv, and at the start of an operation a comm's first receives (up to NCCL_STEPS) are
// posted one per call, interleaved with the other channels' comms.
//
// The counts asserted follow from recv.cc's publication rule (issue 32: irecv publishes its own
// entries at once, touching no other comm): one CTS write per receive in every pattern, NCCL's
// steady state and op start, over one comm or many, and a burst on one comm too. Times are
// printed only (the bed is loaded): CPU ns per irecv + test call pair in NCCL's steady pattern and
// per test of a pending receive, with 1..N receive comms open (no call walks the other comms).
//
// SLUICE_TEST_CTS_COMMS: comma-separated comm counts (default "1,4"); SLUICE_TEST_CTS_ROUNDS:
// rounds per pattern (default 8); SLUICE_TEST_CTS_REPS: timing repetitions (default 1).
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "ext_stats.h"
#include "plugin_bed.h"
#include "sluice/core/wire/wire.h"
#include "sluice/sluice_ext.h"

namespace nettest {
namespace {

const sluiceExt_v1_t* cts_ext() {
  return ext_v1();
}

struct Sum {
  uint64_t messages = 0, wrs = 0, doorbells = 0, cts_writes = 0, cts_entries = 0;
};
Sum sum_stats(const std::vector<void*>& comms) {
  Sum s;
  for (void* c : comms) {
    sluiceCommStats_v1_t st{};
    EXPECT_EQ(cts_ext()->commStats(c, &st), 0);
    s.messages += st.messages;
    s.wrs += st.wrs;
    s.doorbells += st.doorbells;
    s.cts_writes += st.ctsWrites;
    s.cts_entries += st.ctsEntries;
  }
  return s;
}
Sum operator-(const Sum& a, const Sum& b) {
  return {a.messages - b.messages, a.wrs - b.wrs, a.doorbells - b.doorbells,
          a.cts_writes - b.cts_writes, a.cts_entries - b.cts_entries};
}

long long cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1000000000ll + t.tv_nsec;
}

std::vector<int> comm_counts() {
  std::vector<int> out;
  const char* v = std::getenv("SLUICE_TEST_CTS_COMMS");
  std::stringstream in(v != nullptr && *v != '\0' ? v : "1,4");
  for (std::string item; std::getline(in, item, ',');) {
    const int n = std::atoi(item.c_str());
    if (n > 0) out.push_back(n);
  }
  return out;
}

int cts_lanes() {
  const long q = env_long("NCCL_IB_QPS_PER_CONNECTION", 1);
  return env_long("NCCL_IB_SPLIT_DATA_ON_QPS", 0) != 0 ? static_cast<int>(q) : 1;
}

constexpr size_t kMsg = 8, kStride = 64;
constexpr int kDepth = 8;  // NCCL_STEPS: receives NCCL keeps posted per comm

class CtsPublish : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_BED();
    ASSERT_NE(cts_ext(), nullptr) << "sluiceExt_v1 not exported";
  }
  void TearDown() override { close_all(); }

  void open(int n) {
    close_all();
    for (int i = 0; i < n; ++i) {
      Conn c;
      ASSERT_TRUE(open_conn(net(), bed().dev_a, bed().dev_b, &c));
      conns_.push_back(c);
      recvs_.push_back(c.recv);
      sbufs_.push_back(std::make_unique<RegBuf>());
      rbufs_.push_back(std::make_unique<RegBuf>());
      ASSERT_TRUE(sbufs_.back()->allocate(&net(), c.send, NCCL_NET_MAX_REQUESTS * kStride));
      ASSERT_TRUE(rbufs_.back()->allocate(&net(), c.recv, NCCL_NET_MAX_REQUESTS * kStride));
    }
  }
  void close_all() {
    sbufs_.clear();
    rbufs_.clear();
    for (Conn& c : conns_) EXPECT_TRUE(close_conn(net(), &c));
    conns_.clear();
    recvs_.clear();
  }
  void irecv(int i, int k, void** req) {
    void* data = rbufs_[i]->data() + k * kStride;
    void* mh = rbufs_[i]->mh();
    size_t cap = kMsg;
    int tag = k;
    ASSERT_TRUE(post_until("irecv", req, [&](void** r) {
      return net().irecv(conns_[i].recv, 1, &data, &cap, &tag, &mh, r);
    }));
  }
  // Sends receive k of comm i and waits for both ends.
  void complete(int i, int k, void* rreq) {
    void* sreq = nullptr;
    ASSERT_TRUE(post_until("isend", &sreq, [&](void** r) {
      return net().isend(conns_[i].send, sbufs_[i]->data() + k * kStride, kMsg, k, sbufs_[i]->mh(),
                         r);
    }));
    int got = -1;
    ASSERT_TRUE(wait_done(net(), "recv", rreq, &got));
    ASSERT_EQ(got, static_cast<int>(kMsg));
    ASSERT_TRUE(wait_done(net(), "send", sreq, nullptr));
  }
  // writes_lo..writes_hi: the CTS writes the pattern must cost.
  void check(const char* what, int ncomms, const Sum& r, long long pkts, uint64_t msgs,
             uint64_t writes_lo, uint64_t writes_hi) {
    std::fprintf(stderr,
                 "[cts] %-28s %2d comm(s) %5llu msgs: receiver %.3f CTS writes %.3f WRs %.3f "
                 "doorbells per message; %s%.3f packets per message\n",
                 what, ncomms, static_cast<unsigned long long>(msgs),
                 double(r.cts_writes) / double(msgs), double(r.wrs) / double(msgs),
                 double(r.doorbells) / double(msgs), pkts < 0 ? "(no counters) " : "",
                 pkts < 0 ? 0.0 : double(pkts) / double(msgs));
    EXPECT_EQ(r.messages, msgs) << what;
    EXPECT_EQ(r.cts_entries, msgs) << what;
    EXPECT_GE(r.cts_writes, writes_lo) << what;
    EXPECT_LE(r.cts_writes, writes_hi) << what;
    // Receive WRs: one per lane, one doorbell per QP per publication; plus the CTS writes.
    EXPECT_EQ(r.wrs, msgs * cts_lanes() + r.cts_writes) << what;
    if (writes_lo == msgs) {
      EXPECT_EQ(r.doorbells, msgs * (cts_lanes() + 1)) << what;
    }
  }

  std::vector<Conn> conns_;
  std::vector<void*> recvs_;
  std::vector<std::unique_ptr<RegBuf>> sbufs_, rbufs_;
};

// NCCL's steady state: per comm, round robin, one irecv and then a test of it (still pending);
// then the sends. Timed: the irecv + test pair, and a later test of a pending receive.
TEST_F(CtsPublish, NcclPatternsGetOneWritePerReceive) {
  const int rounds = static_cast<int>(env_long("SLUICE_TEST_CTS_ROUNDS", 8));
  const int reps = static_cast<int>(env_long("SLUICE_TEST_CTS_REPS", 1));
  for (int n : comm_counts()) {
    open(n);
    if (HasFatalFailure()) return;
    std::vector<void*> rq(n);
    std::vector<double> pair_ns, test_ns;
    Sum s0 = sum_stats(recvs_);
    long long p0 = bed_sent_packets();
    for (int rep = 0; rep < reps; ++rep) {
      long long pair = 0, tests = 0;
      for (int round = 0; round < rounds; ++round) {
        for (int i = 0; i < n; ++i) {
          const long long t0 = cpu_ns();
          irecv(i, 0, &rq[i]);
          int done = 1;
          ASSERT_EQ(net().test(rq[i], &done, nullptr), ncclSuccess);
          pair += cpu_ns() - t0;
          ASSERT_EQ(done, 0);
        }
        const long long t1 = cpu_ns();
        for (int i = 0; i < n; ++i) {
          int done = 1;
          ASSERT_EQ(net().test(rq[i], &done, nullptr), ncclSuccess);
        }
        tests += cpu_ns() - t1;
        for (int i = 0; i < n; ++i) {
          complete(i, 0, rq[i]);
          if (HasFatalFailure()) return;
        }
      }
      pair_ns.push_back(double(pair) / (rounds * n));
      test_ns.push_back(double(tests) / (rounds * n));
    }
    long long p1 = bed_sent_packets();
    const uint64_t steady_msgs = uint64_t(rounds) * n * reps;
    check("steady: irecv, test", n, sum_stats(recvs_) - s0, p0 < 0 || p1 < 0 ? -1 : p1 - p0,
          steady_msgs, steady_msgs, steady_msgs);
    std::sort(pair_ns.begin(), pair_ns.end());
    std::sort(test_ns.begin(), test_ns.end());
    std::fprintf(
        stderr,
        "[cts] cpu ns, %2d comm(s), %d rep(s): irecv+test pair min %.0f med %.0f max %.0f; "
        "test of a pending receive min %.0f med %.0f max %.0f\n",
        n, reps, pair_ns.front(), pair_ns[pair_ns.size() / 2], pair_ns.back(), test_ns.front(),
        test_ns[test_ns.size() / 2], test_ns.back());

    // NCCL's op start: kDepth receives per comm, one per comm per "progress call", then a test of
    // each comm's oldest, then the sends: each irecv its own write, back to back on one comm too.
    s0 = sum_stats(recvs_);
    p0 = bed_sent_packets();
    std::vector<void*> dq(size_t(n) * kDepth);
    for (int round = 0; round < rounds; ++round) {
      for (int k = 0; k < kDepth; ++k)
        for (int i = 0; i < n; ++i) irecv(i, k, &dq[size_t(i) * kDepth + k]);
      for (int i = 0; i < n; ++i) {
        int done = 1;
        ASSERT_EQ(net().test(dq[size_t(i) * kDepth], &done, nullptr), ncclSuccess);
      }
      for (int i = 0; i < n; ++i)
        for (int k = 0; k < kDepth; ++k) {
          complete(i, k, dq[size_t(i) * kDepth + k]);
          if (HasFatalFailure()) return;
        }
    }
    p1 = bed_sent_packets();
    const uint64_t op_msgs = uint64_t(rounds) * n * kDepth;
    check("op start: depth 8, interleaved", n, sum_stats(recvs_) - s0,
          p0 < 0 || p1 < 0 ? -1 : p1 - p0, op_msgs, op_msgs, op_msgs);
  }
}

// A window of 32 receives posted back to back on one comm, then the sends, then the tests: each
// receive is published by its own irecv, unless its QP's CTS budget (kCtsBudget = 23 writes whose
// signaled completion the NIC has not reported yet: a slow or loaded NIC) is taken; such an entry
// goes out at the comm's next irecv or test, together with any staged behind it. So at most one
// write per receive, and at least one per two (a CI run on a loaded 2-core host merged some).
TEST_F(CtsPublish, BurstOnOneCommPublishesEachReceiveAtOnce) {
  const int rounds = static_cast<int>(env_long("SLUICE_TEST_CTS_ROUNDS", 8));
  constexpr int kWin = NCCL_NET_MAX_REQUESTS;
  open(1);
  if (HasFatalFailure()) return;
  const Sum s0 = sum_stats(recvs_);
  const long long p0 = bed_sent_packets();
  for (int round = 0; round < rounds; ++round) {
    std::vector<void*> rq(kWin), sq(kWin);
    for (int k = 0; k < kWin; ++k) irecv(0, k, &rq[k]);
    for (int k = 0; k < kWin; ++k) {
      ASSERT_TRUE(post_until("isend", &sq[k], [&](void** r) {
        // As NCCL's proxy does while it waits: it tests the receives too. A receive whose
        // clear-to-send was staged (its QP's budget taken by writes the NIC has not reported
        // yet: a loaded host) goes out at the comm's next irecv or test; without one the last
        // receives of the burst would wait for ever. The newest cannot complete before its send.
        int done = 0;
        const ncclResult_t t = net().test(rq[kWin - 1], &done, nullptr);
        if (t != ncclSuccess) return t;
        EXPECT_EQ(done, 0) << "receive " << kWin - 1 << " completed before its send";
        return net().isend(conns_[0].send, sbufs_[0]->data() + k * kStride, kMsg, k,
                           sbufs_[0]->mh(), r);
      }));
    }
    for (int k = 0; k < kWin; ++k) {
      ASSERT_TRUE(wait_done(net(), "recv", rq[k], nullptr));
      ASSERT_TRUE(wait_done(net(), "send", sq[k], nullptr));
    }
  }
  const long long p1 = bed_sent_packets();
  const uint64_t msgs = uint64_t(rounds) * kWin;
  check("burst: window 32, one comm", 1, sum_stats(recvs_) - s0, p0 < 0 || p1 < 0 ? -1 : p1 - p0,
        msgs, msgs / 2, msgs);
}

}  // namespace
}  // namespace nettest
