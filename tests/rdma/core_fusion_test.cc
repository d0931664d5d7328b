// NIC fusion's connection (issue 24), core over real verbs in one process: a comm on a fused
// device of the bed's two ports connects to a fused device and to a single port, in both
// directions. Checked on the live comms: the members and their CQs, every QP at RTS on its
// path's member, paired with the peer's QP of the same index, the comm memory registered (and
// keyed) on every member adapter; a one-member connection stays one member of one path. The
// fused device is made with the test-only Engine::test_add_vdevice until make_vdevice lands.
// The fused data path has not landed: isend/irecv refuse a fused comm, which is checked too.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "rdma_env.h"
#include "sluice/core/api.h"
#include "sluice/core/base/qp.h"

namespace {

using namespace sluice;
using Clock = std::chrono::steady_clock;

class CoreFusion : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pair = rdmatest::test_pair();
    SLUICE_REQUIRE_PAIR(pair);
    Status st = engine_acquire(nullptr);
    ASSERT_TRUE(st.is_ok()) << st.message();
    acquired_ = true;
    for (int d = 0; d < device_count(); ++d) {
      DeviceProperties p;
      ASSERT_TRUE(device_properties(d, &p).is_ok());
      if (dev_a_ < 0 && pair.a().matches(p.name)) dev_a_ = d;
      if (dev_b_ < 0 && pair.b().matches(p.name)) dev_b_ = d;
    }
    ASSERT_GE(dev_a_, 0);
    ASSERT_GE(dev_b_, 0);
    if (dev_a_ == dev_b_) GTEST_SKIP() << "one port only (loopback pair): nothing to fuse";
    st = engine()->test_add_vdevice({dev_a_, dev_b_}, {1, 1}, &fused_);
    ASSERT_TRUE(st.is_ok()) << st.message();
    std::printf("fused device %d = devices %d + %d (%s)\n", fused_, dev_a_, dev_b_,
                pair.describe().c_str());
  }
  void TearDown() override {
    if (acquired_) engine_release();
  }

  void open_pair(int dev_s, int dev_r, SendComm** s, RecvComm** r) {
    char handle[kHandleSize];
    ListenComm* l = nullptr;
    Status st = listen(dev_r, handle, &l);
    ASSERT_TRUE(st.is_ok()) << st.message();
    *s = nullptr;
    *r = nullptr;
    auto deadline = Clock::now() + std::chrono::seconds(60);
    while (*s == nullptr || *r == nullptr) {
      ASSERT_LT(Clock::now(), deadline) << "connection not established";
      if (*s == nullptr) {
        st = connect(dev_s, handle, CommConfig{}, s);
        ASSERT_TRUE(st.is_ok()) << st.message();
      }
      if (*r == nullptr) {
        st = accept(l, r);
        ASSERT_TRUE(st.is_ok()) << st.message();
      }
    }
    ASSERT_TRUE(close_listen(l).is_ok());
  }

  // One side's comm as the layout says: `n` members over `npaths` paths of `qpp` QPs each.
  static void expect_layout(const Conn& c, const std::vector<Device*>& members, int npaths,
                            int qpp) {
    const int n = static_cast<int>(members.size());
    ASSERT_EQ(c.nmembers, n);
    ASSERT_EQ(c.npaths, npaths);
    ASSERT_EQ(c.nqps, npaths * qpp);
    for (int m = 0; m < n; ++m) {
      EXPECT_EQ(c.members[m].dev, members[m]) << "member " << m;
      EXPECT_TRUE(c.members[m].cq) << "member " << m << " has no CQ";
      EXPECT_NE(c.mem_rkey[m], 0u) << "comm memory not keyed on member " << m;
    }
    for (int q = 0; q < c.nqps; ++q) {
      const int m = (q / qpp) % n;
      EXPECT_EQ(c.qp_member[q], m) << "QP " << q;
      ASSERT_TRUE(c.qps[q]);
      // On its member's adapter (context) and CQ, at RTS.
      EXPECT_EQ(c.qps[q]->context, members[m]->adapter->ctx.get()) << "QP " << q;
      EXPECT_EQ(c.qps[q]->send_cq, c.members[m].cq.get()) << "QP " << q;
      EXPECT_EQ(qp_query_state(c.qps[q].get()), IBV_QPS_RTS) << c.describe_qp(q);
    }
  }

  // Both ends: the same paths, QP q paired with the peer's QP q, and (fused) refused data.
  void check(int dev_s, int dev_r) {
    SendComm* s = nullptr;
    RecvComm* r = nullptr;
    ASSERT_NO_FATAL_FAILURE(open_pair(dev_s, dev_r, &s, &r));
    const auto ms = engine()->members_of(dev_s);
    const auto mr = engine()->members_of(dev_r);
    const int npaths = static_cast<int>(std::max(ms.size(), mr.size()));
    const int qpp = engine()->config().qps_per_connection;
    std::printf("%d -> %d: %zu member(s) to %zu, %d path(s) of %d QP(s); %s\n", dev_s, dev_r,
                ms.size(), mr.size(), npaths, qpp, s->c.describe_qp(s->c.nqps - 1).c_str());
    expect_layout(s->c, ms, npaths, qpp);
    expect_layout(r->c, mr, npaths, qpp);
    for (int q = 0; q < s->c.nqps && q < r->c.nqps; ++q) {
      EXPECT_EQ(s->c.remote_qpn[q], r->c.qps[q]->qp_num) << "QP " << q;
      EXPECT_EQ(r->c.remote_qpn[q], s->c.qps[q]->qp_num) << "QP " << q;
    }
    // Members sharing an adapter share the comm memory's registration, others have their own.
    for (const Conn* c : {&s->c, &r->c}) {
      for (int m = 1; m < c->nmembers; ++m) {
        const bool shared = c->members[m].dev->adapter == c->members[0].dev->adapter;
        EXPECT_EQ(shared, c->mem_rkey[m] == c->mem_rkey[0]) << "member " << m;
        EXPECT_EQ(shared, !c->mem_mr_more[m]) << "member " << m;
      }
    }
    if (npaths > 1) {
      char buf[64];
      Request* req = nullptr;
      Status st = isend(s, buf, 0, 1, nullptr, &req);
      EXPECT_EQ(st.code(), Code::kInvalidUsage) << st.message();
      EXPECT_NE(st.message().find("fused"), std::string::npos) << st.message();
      void* data[1] = {buf};
      size_t sizes[1] = {0};
      int tags[1] = {1};
      MemHandle* mhs[1] = {nullptr};
      st = irecv(r, 1, data, sizes, tags, mhs, &req);
      EXPECT_EQ(st.code(), Code::kInvalidUsage) << st.message();
    }
    CommStatsV2 stats;
    EXPECT_TRUE(comm_stats_v2(s, &stats).is_ok());
    EXPECT_TRUE(close_send(s).is_ok());
    EXPECT_TRUE(close_recv(r).is_ok());
  }

  bool acquired_ = false;
  int dev_a_ = -1, dev_b_ = -1, fused_ = -1;
};

TEST_F(CoreFusion, FusedToFused) {
  check(fused_, fused_);
}

TEST_F(CoreFusion, FusedToSinglePort) {
  check(fused_, dev_b_);
  check(fused_, dev_a_);
}

TEST_F(CoreFusion, SinglePortToFused) {
  check(dev_a_, fused_);
  check(dev_b_, fused_);
}

TEST_F(CoreFusion, SinglePortsStayOneMemberOnePath) {
  check(dev_a_, dev_b_);
}

// Open/close cycles of fused comms give every verbs object back: rdma-core's resource counts
// (`rdma resource show`: pd, cq, qp, mr per device) are the same before and after.
TEST_F(CoreFusion, OpenCloseCyclesLeaveNoVerbsObject) {
  const auto counts = [] {
    std::string out;
    FILE* f = popen("rdma resource show 2>/dev/null", "r");
    if (f == nullptr) return out;
    char line[512];
    while (std::fgets(line, sizeof line, f) != nullptr) out += line;
    pclose(f);
    return out;
  };
  const std::string before = counts();
  if (before.empty()) GTEST_SKIP() << "no `rdma resource show` here (iproute2's rdma tool)";
  for (int i = 0; i < 5; ++i) {
    ASSERT_NO_FATAL_FAILURE(check(fused_, dev_b_));
    ASSERT_NO_FATAL_FAILURE(check(dev_a_, fused_));
  }
  EXPECT_EQ(counts(), before);
  std::printf("resources after 10 fused open/close cycles:\n%s", before.c_str());
}

}  // namespace
