// The cost of a message, counted (sluiceExt_v1 commStats), and clear-to-send published at each
// irecv without deadlock (label rdma; part of the plugin_rdma_test binary). The counts asserted
// here are deterministic: they follow from the protocol, not from timing. Where the bed's rxe
// counters are readable, packets on the wire per message are printed as well (informational: the
// bench reports them against perftest).
//
// NCCL_IB_QPS_PER_CONNECTION and NCCL_IB_SPLIT_DATA_ON_QPS come from the environment (plugin.cmake
// registers this binary once per combination).
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "ext_stats.h"
#include "plugin_bed.h"
#include "sluice/core/wire/wire.h"
#include "sluice/sluice_ext.h"

namespace nettest {
namespace {

const sluiceExt_v1_t* ext() {
  return ext_v1();
}

sluiceCommStats_v1_t stats(void* comm) {
  sluiceCommStats_v1_t s;
  EXPECT_TRUE(comm_stats(comm, &s));
  return s;
}

sluiceCommStats_v1_t operator-(const sluiceCommStats_v1_t& a, const sluiceCommStats_v1_t& b) {
  sluiceCommStats_v1_t d{};
  d.messages = a.messages - b.messages;
  d.wrs = a.wrs - b.wrs;
  d.doorbells = a.doorbells - b.doorbells;
  d.ctsWrites = a.ctsWrites - b.ctsWrites;
  d.ctsEntries = a.ctsEntries - b.ctsEntries;
  return d;
}

int qps() {
  return static_cast<int>(env_long("NCCL_IB_QPS_PER_CONNECTION", 1));
}
bool split() {
  return env_long("NCCL_IB_SPLIT_DATA_ON_QPS", 0) != 0;
}
// Lanes a message uses: every QP when split, else one.
int lanes() {
  return split() ? qps() : 1;
}

void report(const char* what, int n, const sluiceCommStats_v1_t& s, const sluiceCommStats_v1_t& r,
            long long pkts) {
  std::fprintf(stderr,
               "[cost] %s, %d messages, %d QP(s), split %d: sender %.2f WRs %.2f doorbells; "
               "receiver %.2f WRs %.2f doorbells %.2f CTS writes per message; %s%.2f packets per "
               "message\n",
               what, n, qps(), split() ? 1 : 0, double(s.wrs) / n, double(s.doorbells) / n,
               double(r.wrs) / n, double(r.doorbells) / n, double(r.ctsWrites) / n,
               pkts < 0 ? "(no counters) " : "", pkts < 0 ? 0.0 : double(pkts) / n);
}

class Cost : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_BED();
    ASSERT_NE(ext(), nullptr) << "sluiceExt_v1 not exported";
    ASSERT_EQ(ext()->version, 1);
    ASSERT_TRUE(open_conn(net(), bed().dev_a, bed().dev_b, &conn_));
    ASSERT_TRUE(sbuf_.allocate(&net(), conn_.send, 64 * 1024));
    ASSERT_TRUE(rbuf_.allocate(&net(), conn_.recv, 64 * 1024));
  }
  void TearDown() override {
    sbuf_.reset();
    rbuf_.reset();
    if (conn_.send != nullptr || conn_.recv != nullptr) {
      EXPECT_TRUE(close_conn(net(), &conn_));
    }
  }
  Conn conn_;
  RegBuf sbuf_, rbuf_;
};

TEST_F(Cost, StatsRefuseWhatIsNotAComm) {
  sluiceCommStats_v1_t s;
  EXPECT_NE(ext()->commStats(nullptr, &s), 0);
  EXPECT_NE(ext()->commStats(conn_.send, nullptr), 0);
  int not_a_comm[64] = {};
  EXPECT_NE(ext()->commStats(not_a_comm, &s), 0);
  const sluiceCommStats_v1_t a = stats(conn_.send);
  EXPECT_EQ(a.messages, 0u);
  EXPECT_EQ(a.wrs, 0u);
}

// Ping-pong of 8-byte messages: irecv, isend, test, one message at a time. Each receive is
// published alone (by the isend that follows it), so every count per message is exact.
TEST_F(Cost, EightBytePingPongCountsAreExact) {
  constexpr int kN = 64;
  fill_pattern(sbuf_.data(), 8, 1);
  ASSERT_TRUE(send_recv(net(), conn_, sbuf_, 8, rbuf_, 8, 5, nullptr));  // warm-up
  const auto s0 = stats(conn_.send), r0 = stats(conn_.recv);
  const long long p0 = bed_sent_packets();
  for (int i = 0; i < kN; ++i) {
    fill_pattern(sbuf_.data(), 8, pattern_seed(8, i));
    int got = -1;
    ASSERT_TRUE(send_recv(net(), conn_, sbuf_, 8, rbuf_, 8, 5, &got));
    ASSERT_EQ(got, 8);
    ASSERT_EQ(check_pattern(rbuf_.data(), 8, pattern_seed(8, i)), "");
  }
  const long long p1 = bed_sent_packets();
  const auto s = stats(conn_.send) - s0, r = stats(conn_.recv) - r0;
  report("8 B ping-pong", kN, s, r, p0 < 0 || p1 < 0 ? -1 : p1 - p0);
  // Sender: one WRITE_WITH_IMM per lane, one doorbell per lane. With NCCL_IB_SPLIT_DATA_ON_QPS=0
  // that is 1 whatever NCCL_IB_QPS_PER_CONNECTION is.
  EXPECT_EQ(s.messages, uint64_t{kN});
  EXPECT_EQ(s.wrs, uint64_t(kN) * lanes());
  EXPECT_EQ(s.doorbells, uint64_t(kN) * lanes());
  // Receiver: a receive WR per lane (one post per QP) and one CTS write per receive.
  EXPECT_EQ(r.messages, uint64_t{kN});
  EXPECT_EQ(r.ctsWrites, uint64_t{kN});
  EXPECT_EQ(r.ctsEntries, uint64_t{kN});
  EXPECT_EQ(r.wrs, uint64_t(kN) * (lanes() + 1));
  EXPECT_EQ(r.doorbells, uint64_t(kN) * (lanes() + 1));
}

// Streaming with a window of 32: 32 receives posted back to back, then 32 sends, then the tests.
// Each irecv publishes its entry at once (issue 32); only entries that found the QP's CTS budget
// taken wait for the comm's next call, and then go out together: at most one write per receive.
// While a send waits for its clear-to-send, the receiver's oldest open receive is tested, as
// NCCL's proxy tests its posted receives: the entries held back go out at that call (when the
// budget's completions came late, under load, a test that only retried isend waited forever).
TEST_F(Cost, EightByteStreamingWindow32PublishesAtEachIrecv) {
  constexpr int kWin = NCCL_NET_MAX_REQUESTS;
  constexpr int kRounds = 16;
  constexpr size_t kSz = 8, kStride = 64;
  const auto s0 = stats(conn_.send), r0 = stats(conn_.recv);
  const long long p0 = bed_sent_packets();
  for (int round = 0; round < kRounds; ++round) {
    std::vector<void*> rreqs(kWin), sreqs(kWin);
    for (int i = 0; i < kWin; ++i) {
      void* data = rbuf_.data() + i * kStride;
      void* mh = rbuf_.mh();
      size_t cap = kSz;
      int tag = i;
      ASSERT_TRUE(post_until("irecv", &rreqs[i], [&](void** req) {
        return net().irecv(conn_.recv, 1, &data, &cap, &tag, &mh, req);
      }));
      fill_pattern(sbuf_.data() + i * kStride, kSz, pattern_seed(kSz, round, i));
    }
    std::vector<int> rdone(kWin, 0), rgot(kWin, -1);
    int oldest = 0;  // the oldest receive not yet done
    for (int i = 0; i < kWin; ++i) {
      ASSERT_TRUE(post_until("isend", &sreqs[i], [&](void** req) {
        ncclResult_t r =
            net().isend(conn_.send, sbuf_.data() + i * kStride, kSz, i, sbuf_.mh(), req);
        if (r == ncclSuccess && *req == nullptr && oldest < kWin) {
          r = net().test(rreqs[oldest], &rdone[oldest], &rgot[oldest]);
          if (rdone[oldest]) ++oldest;
        }
        return r;
      }));
    }
    for (int i = 0; i < kWin; ++i) {
      int got = rgot[i];
      if (!rdone[i]) {
        ASSERT_TRUE(wait_done(net(), "recv", rreqs[i], &got));
      }
      ASSERT_EQ(got, static_cast<int>(kSz));
      ASSERT_EQ(check_pattern(rbuf_.data() + i * kStride, kSz, pattern_seed(kSz, round, i)), "");
      ASSERT_TRUE(wait_done(net(), "send", sreqs[i], nullptr));
    }
  }
  const long long p1 = bed_sent_packets();
  const int n = kWin * kRounds;
  const auto s = stats(conn_.send) - s0, r = stats(conn_.recv) - r0;
  report("8 B streaming, window 32", n, s, r, p0 < 0 || p1 < 0 ? -1 : p1 - p0);
  EXPECT_EQ(s.messages, uint64_t(n));
  EXPECT_EQ(s.wrs, uint64_t(n) * lanes());
  EXPECT_EQ(r.messages, uint64_t(n));
  EXPECT_EQ(r.ctsEntries, uint64_t(n));
  EXPECT_LE(r.ctsWrites, uint64_t(n)) << "at most one CTS write per receive";
  EXPECT_GE(r.ctsWrites, uint64_t(n) / 2) << "receives published at their irecv, not held back";
}

// Adaptive routing (NCCL_IB_ADAPTIVE_ROUTING, NCCL_IB_AR_THRESHOLD): a message above the threshold
// costs exactly one more WR per lane that carries its data (the separate zero-length
// WRITE_WITH_IMM, counted in arImmWrites); at or below it, or with the mode off (the RoCE
// default), not one more. Whole messages use one lane; split ones every QP, but an 8-byte one has
// data on lane 0 only. Runs in every plugin_rdma variant: off there, on in the AR pass.
bool ar_on() {
  return env_long("NCCL_IB_ADAPTIVE_ROUTING", -2) > 0;  // RoCE: NCCL's default is off
}
size_t ar_threshold() {
  return static_cast<size_t>(env_long("NCCL_IB_AR_THRESHOLD", 8192));
}
int data_lanes(size_t size) {
  if (!split()) return 1;
  const size_t chunk = ((size + qps() - 1) / qps() + 127) / 128 * 128;  // cts::chunk_of
  int n = 0;
  for (int lane = 0; lane < qps(); ++lane) n += static_cast<size_t>(lane) * chunk < size ? 1 : 0;
  return n;
}

TEST_F(Cost, AdaptiveRoutingCostsOneWrPerDataLaneAboveTheThreshold) {
  constexpr int kN = 16;
  const size_t thr = ar_threshold();
  std::vector<size_t> sizes = {8, 4096};
  if (thr + 1 <= 64 * 1024) sizes.insert(sizes.end(), {thr, thr + 1, 64 * 1024});
  for (size_t sz : sizes) {
    const auto s0 = stats(conn_.send);
    for (int i = 0; i < kN; ++i) {
      fill_pattern(sbuf_.data(), sz, pattern_seed(sz, i));
      int got = -1;
      ASSERT_TRUE(send_recv(net(), conn_, sbuf_, sz, rbuf_, sz, 9, &got));
      ASSERT_EQ(got, static_cast<int>(sz));
      ASSERT_EQ(check_pattern(rbuf_.data(), sz, pattern_seed(sz, i)), "");
    }
    const auto s1 = stats(conn_.send);
    const uint64_t extra = ar_on() && sz > thr ? uint64_t(data_lanes(sz)) : 0;
    EXPECT_EQ(s1.wrs - s0.wrs, uint64_t(kN) * (lanes() + extra))
        << sz << " bytes, adaptive routing " << (ar_on() ? "on" : "off") << ", threshold " << thr;
    EXPECT_EQ(s1.arImmWrites - s0.arImmWrites, uint64_t(kN) * extra) << sz << " bytes";
    EXPECT_EQ(s1.doorbells - s0.doorbells, uint64_t(kN) * lanes()) << "still one post per lane";
    std::fprintf(stderr, "[cost] adaptive routing %s: %zu B: %.2f WRs per message\n",
                 ar_on() ? "on" : "off", sz, double(s1.wrs - s0.wrs) / kN);
  }
}

// The watchdog's progress signal (core/src/health/progress.h, cts::plan_lane): a message's bytes
// on a lane go as WRITEs of at most 1 MiB, each but the chain's close signaled when the next would
// take its run past 1 MiB, so a lane carrying L bytes (up to 7 MiB: cts::kMaxPieces) costs
// ceil(L / 1 MiB) WRs
// (one more with adaptive routing's separate close) and ceil(L / 1 MiB) completions, still one
// doorbell; up to 1 MiB on a lane nothing changes (the counts of the tests above). Counted from
// the sender's sluiceExt_v2 member counters (wrs, completions), for 1, 4 and 7 MiB messages.
const sluiceExt_v2_t* ext2() {
  return ext_v2();
}

// Failover's per-path statistics (sluiceExt_v2, appended): a healthy comm reports every path up
// at its full share, no failover, no stall; a fused comm (SLUICE_TEST_FUSE, more than one path)
// fails over, a one-path comm does not. A caller compiled before the paths were appended (size
// up to flushQpNum) gets its part and nothing written past it.
TEST_F(Cost, FailoverStatsShowEveryPathUpOnAHealthyComm) {
  ASSERT_NE(ext2(), nullptr) << "sluiceExt_v2 not exported";
  int got = -1;
  fill_pattern(sbuf_.data(), 4096, 3);
  ASSERT_TRUE(send_recv(net(), conn_, sbuf_, 4096, rbuf_, 4096, 9, &got));
  for (void* comm : {conn_.send, conn_.recv}) {
    sluiceCommStats_v2_t st{};
    st.size = sizeof st;
    ASSERT_EQ(ext2()->commStatsV2(comm, &st), 0);
    const bool fused = st.nMembers > 1 || st.nPaths > 1;
    EXPECT_EQ(st.failover, fused ? 1 : 0);
    ASSERT_GE(st.nPaths, 1);
    ASSERT_LE(st.nPaths, SLUICE_EXT_MAX_MEMBERS);
    for (int p = 0; p < st.nPaths; ++p) {
      SCOPED_TRACE("path " + std::to_string(p));
      const sluicePathStats_v2_t& ps = st.paths[p];
      EXPECT_EQ(ps.state, SLUICE_PATH_UP);
      EXPECT_EQ(ps.sharePct, 100);
      EXPECT_EQ(ps.failovers, 0u);
      EXPECT_EQ(ps.failbacks, 0u);
      EXPECT_EQ(ps.bytesReplayed, 0u);
      EXPECT_EQ(ps.lastStallMs, -1);
      EXPECT_GE(ps.localMember, 0);
      EXPECT_LT(ps.localMember, st.nMembers);
    }
    // An older caller's struct ends at flushQpNum: the paths are not written.
    struct {
      sluiceCommStats_v2_t st;
      unsigned char canary[8];
    } old{};
    std::memset(&old, 0xa5, sizeof old);
    old.st.size = offsetof(sluiceCommStats_v2_t, failover);
    ASSERT_EQ(ext2()->commStatsV2(comm, &old.st), 0);
    const auto* tail =
        reinterpret_cast<const unsigned char*>(&old.st) + offsetof(sluiceCommStats_v2_t, failover);
    for (size_t i = 0; i < sizeof old.st - offsetof(sluiceCommStats_v2_t, failover); ++i)
      ASSERT_EQ(tail[i], 0xa5) << "byte " << i << " past the caller's size written";
  }
}

TEST_F(Cost, LongMessagesCostOneWrAndOneCompletionPerMiB) {
  ASSERT_NE(ext2(), nullptr) << "sluiceExt_v2 not exported";
  constexpr size_t kMiB = size_t{1} << 20;
  constexpr int kN = 2;
  RegBuf sbig, rbig;
  ASSERT_TRUE(sbig.allocate(&net(), conn_.send, 7 * kMiB));
  ASSERT_TRUE(rbig.allocate(&net(), conn_.recv, 7 * kMiB));
  const auto member = [](void* comm) {
    sluiceCommStats_v2_t st{};
    st.size = sizeof st;
    EXPECT_EQ(ext2()->commStatsV2(comm, &st), 0);
    return st.members[0];
  };
  for (size_t sz : {kMiB, 4 * kMiB, 7 * kMiB}) {
    // Expected per message, lane by lane (chunks as cts::chunk_of; 1 MiB WRITEs).
    const int nl = lanes();
    const size_t chunk = nl == 1 ? sz : ((sz + nl - 1) / nl + 127) / 128 * 128;
    uint64_t wrs = 0, cqes = 0;
    for (int lane = 0; lane < nl; ++lane) {
      const size_t off = static_cast<size_t>(lane) * chunk;
      const size_t len = off < sz ? std::min(chunk, sz - off) : 0;
      const uint64_t writes = (len + kMiB - 1) / kMiB;
      const bool separate = len == 0 || (ar_on() && sz > ar_threshold());
      wrs += writes + (separate ? 1 : 0);
      cqes += writes == 0 ? 1 : writes;
    }
    const auto m0 = member(conn_.send);
    const auto s0 = stats(conn_.send);
    for (int i = 0; i < kN; ++i) {
      fill_pattern(sbig.data(), sz, pattern_seed(sz, i, 3));
      int got = -1;
      ASSERT_TRUE(send_recv(net(), conn_, sbig, sz, rbig, sz, 11, &got));
      ASSERT_EQ(got, static_cast<int>(sz));
      ASSERT_EQ(check_pattern(rbig.data(), sz, pattern_seed(sz, i, 3)), "") << sz << " bytes";
    }
    const auto m1 = member(conn_.send);
    const auto s1 = stats(conn_.send);
    const double mib = double(kN) * double(sz) / double(kMiB);
    std::fprintf(stderr,
                 "[cost] progress signal: %zu MiB, %d QP(s), split %d%s: sender %.2f WRs %.2f "
                 "completions %.2f doorbells per MiB (%.0f / %.0f / %.0f per message)\n",
                 sz / kMiB, qps(), split() ? 1 : 0, ar_on() ? ", adaptive routing" : "",
                 double(m1.wrs - m0.wrs) / mib, double(m1.completions - m0.completions) / mib,
                 double(s1.doorbells - s0.doorbells) / mib, double(m1.wrs - m0.wrs) / kN,
                 double(m1.completions - m0.completions) / kN,
                 double(s1.doorbells - s0.doorbells) / kN);
    EXPECT_EQ(m1.wrs - m0.wrs, kN * wrs) << sz << " bytes";
    EXPECT_EQ(m1.completions - m0.completions, kN * cqes) << sz << " bytes";
    EXPECT_EQ(s1.doorbells - s0.doorbells, uint64_t(kN) * nl) << "still one post per lane";
  }
}

// NCCL's pattern: a burst of receives, then tests of them before any send. Each irecv publishes
// its own entry at once (issue 32: no receive waits for a later call of this or any comm), and
// the tests publish nothing more.
TEST_F(Cost, BurstOfReceivesPublishesEachAtItsIrecv) {
  constexpr int kBurst = 5;
  std::vector<void*> rreqs(kBurst), sreqs(kBurst);
  const auto r0 = stats(conn_.recv);
  for (int i = 0; i < kBurst; ++i) {
    void* data = rbuf_.data() + i * 4096;
    void* mh = rbuf_.mh();
    size_t cap = 4096;
    int tag = 100 + i;
    ASSERT_TRUE(post_until("irecv", &rreqs[i], [&](void** req) {
      return net().irecv(conn_.recv, 1, &data, &cap, &tag, &mh, req);
    }));
    EXPECT_EQ((stats(conn_.recv) - r0).ctsWrites, uint64_t(i + 1)) << "irecv " << i;
  }
  for (int i = 0; i < kBurst; ++i) {
    int done = 1;
    ASSERT_EQ(net().test(rreqs[i], &done, nullptr), ncclSuccess);
    EXPECT_EQ(done, 0);
  }
  const auto r1 = stats(conn_.recv) - r0;
  EXPECT_EQ(r1.ctsWrites, uint64_t{kBurst}) << "one write per receive, none from the tests";
  EXPECT_EQ(r1.ctsEntries, uint64_t{kBurst});
  for (int i = 0; i < kBurst; ++i) {
    fill_pattern(sbuf_.data() + i * 4096, 1000 + i, pattern_seed(1000 + i, 7));
    ASSERT_TRUE(post_until("isend", &sreqs[i], [&](void** req) {
      return net().isend(conn_.send, sbuf_.data() + i * 4096, 1000 + i, 100 + i, sbuf_.mh(), req);
    }));
  }
  for (int i = kBurst - 1; i >= 0; --i) {
    int got = -1;
    ASSERT_TRUE(wait_done(net(), "recv", rreqs[i], &got));
    EXPECT_EQ(got, 1000 + i);
    EXPECT_EQ(check_pattern(rbuf_.data() + i * 4096, 1000 + i, pattern_seed(1000 + i, 7)), "");
    ASSERT_TRUE(wait_done(net(), "send", sreqs[i], nullptr));
  }
}

// ---- Two ranks, each irecv -> isend -> test
// ------------------------------------------------------

struct Rank {
  void* send = nullptr;  // to the other rank
  void* recv = nullptr;  // from the other rank
  RegBuf sbuf, rbuf;
};

// One step of both ranks' exchange driven from the calling thread: post the receive and the
// send (once; a send may be refused until the peer's clear-to-send arrives), then loop over
// isend retries and tests only. Returns "" or what went wrong.
std::string exchange(Net& n, Rank* ranks, int nranks, int iter, size_t size) {
  std::vector<void*> rreq(nranks, nullptr), sreq(nranks, nullptr);
  std::vector<bool> rdone(nranks, false), sdone(nranks, false);
  for (int k = 0; k < nranks; ++k) {
    Rank& r = ranks[k];
    void* data = r.rbuf.data();
    void* mh = r.rbuf.mh();
    size_t cap = r.rbuf.size();
    int tag = iter & 0xffff;
    const auto deadline = Clock::now() + wait_limit();
    while (rreq[k] == nullptr) {
      if (n.irecv(r.recv, 1, &data, &cap, &tag, &mh, &rreq[k]) != ncclSuccess) return "irecv";
      if (Clock::now() > deadline) return "irecv: no request";
    }
    fill_pattern(r.sbuf.data(), size, pattern_seed(size, iter, k));
    if (n.isend(r.send, r.sbuf.data(), size, tag, r.sbuf.mh(), &sreq[k]) != ncclSuccess)
      return "isend";
  }
  const auto deadline = Clock::now() + wait_limit();
  for (;;) {
    bool all = true;
    for (int k = 0; k < nranks; ++k) {
      Rank& r = ranks[k];
      if (sreq[k] == nullptr) {
        if (n.isend(r.send, r.sbuf.data(), size, iter & 0xffff, r.sbuf.mh(), &sreq[k]) !=
            ncclSuccess)
          return "isend retry";
      }
      int done = 0;
      if (sreq[k] != nullptr && !sdone[k]) {
        if (n.test(sreq[k], &done, nullptr) != ncclSuccess) return "test send";
        sdone[k] = done;
      }
      if (!rdone[k]) {
        int got = -1;
        if (n.test(rreq[k], &done, &got) != ncclSuccess) return "test recv";
        if (done) {
          rdone[k] = true;
          if (got != static_cast<int>(size)) return "received " + std::to_string(got);
          // Rank k receives what rank (k + 1) % nranks sent; see the pairing in the tests.
          const std::string bad =
              check_pattern(r.rbuf.data(), size, pattern_seed(size, iter, (k + 1) % nranks));
          if (!bad.empty()) return bad;
        }
      }
      all = all && sdone[k] && rdone[k];
    }
    if (all) return "";
    if (Clock::now() > deadline) {
      std::string m = "deadlock: iteration " + std::to_string(iter) + ":";
      for (int k = 0; k < nranks; ++k) {
        m += " rank " + std::to_string(k) + (sreq[k] ? " send posted" : " send refused") +
             (sdone[k] ? "/done" : "") + (rdone[k] ? " recv done" : " recv pending") + ";";
      }
      return m;
    }
  }
}

class Coalesce : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_BED();
    // Rank 0 sends on c01 (dev_a -> dev_b) and receives on c10; rank 1 the other way round.
    ASSERT_TRUE(open_conn(net(), bed().dev_a, bed().dev_b, &c01_));
    ASSERT_TRUE(open_conn(net(), bed().dev_b, bed().dev_a, &c10_));
    ranks_[0].send = c01_.send;
    ranks_[0].recv = c10_.recv;
    ranks_[1].send = c10_.send;
    ranks_[1].recv = c01_.recv;
    for (Rank& r : ranks_) {
      ASSERT_TRUE(r.sbuf.allocate(&net(), r.send, 4096));
      ASSERT_TRUE(r.rbuf.allocate(&net(), r.recv, 4096));
    }
  }
  void TearDown() override {
    for (Rank& r : ranks_) {
      r.sbuf.reset();
      r.rbuf.reset();
    }
    if (c01_.send != nullptr) {
      EXPECT_TRUE(close_conn(net(), &c01_));
    }
    if (c10_.send != nullptr) {
      EXPECT_TRUE(close_conn(net(), &c10_));
    }
  }
  Conn c01_, c10_;
  Rank ranks_[2];
};

// One thread drives both ranks: each posts irecv then isend (refused until the peer's CTS is
// published), then only retries and tests. A staged receive that no call published would hang.
TEST_F(Coalesce, TwoRanksIrecvIsendTestOneThread) {
  for (int iter = 0; iter < 300; ++iter) {
    const size_t size = iter % 3 == 0 ? 8 : (iter * 37) % 4096;
    const std::string err = exchange(net(), ranks_, 2, iter, size);
    ASSERT_EQ(err, "") << "iteration " << iter;
  }
}

// The same exchange with each rank driven by its own thread: publication of one thread's staged
// receives by another thread's call must neither race nor deadlock.
TEST_F(Coalesce, TwoRanksTwoThreads) {
  std::string errs[2];
  auto rank_loop = [&](int k) {
    Rank& r = ranks_[k];
    for (int iter = 0; iter < 300 && errs[k].empty(); ++iter) {
      const size_t size = (iter * 53 + k) % 4096;
      void* rreq = nullptr;
      void* sreq = nullptr;
      void* data = r.rbuf.data();
      void* mh = r.rbuf.mh();
      size_t cap = r.rbuf.size();
      int tag = iter;
      const auto deadline = Clock::now() + wait_limit();
      while (rreq == nullptr && errs[k].empty()) {
        if (net().irecv(r.recv, 1, &data, &cap, &tag, &mh, &rreq) != ncclSuccess) errs[k] = "irecv";
        if (Clock::now() > deadline) errs[k] = "irecv: no request";
      }
      const size_t peer_size = (iter * 53 + (1 - k)) % 4096;
      fill_pattern(r.sbuf.data(), size, pattern_seed(size, iter, k));
      bool sdone = false, rdone = false;
      while (errs[k].empty() && !(sdone && rdone)) {
        if (Clock::now() > deadline) {
          errs[k] = "deadlock at iteration " + std::to_string(iter) +
                    (sreq ? " (send posted)" : " (send refused)") + (rdone ? " recv done" : "");
          break;
        }
        if (sreq == nullptr &&
            net().isend(r.send, r.sbuf.data(), size, iter, r.sbuf.mh(), &sreq) != ncclSuccess) {
          errs[k] = "isend";
          break;
        }
        int done = 0;
        if (sreq != nullptr && !sdone) {
          if (net().test(sreq, &done, nullptr) != ncclSuccess) errs[k] = "test send";
          sdone = done;
        }
        if (!rdone) {
          int got = -1;
          if (net().test(rreq, &done, &got) != ncclSuccess) errs[k] = "test recv";
          if (done) {
            rdone = true;
            if (got != static_cast<int>(peer_size)) errs[k] = "got " + std::to_string(got);
            std::string bad =
                check_pattern(r.rbuf.data(), peer_size, pattern_seed(peer_size, iter, 1 - k));
            if (!bad.empty()) errs[k] = bad;
          }
        }
      }
    }
  };
  std::thread t0(rank_loop, 0), t1(rank_loop, 1);
  t0.join();
  t1.join();
  EXPECT_EQ(errs[0], "");
  EXPECT_EQ(errs[1], "");
}

}  // namespace
}  // namespace nettest
