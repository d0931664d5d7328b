// NIC fusion's connection (issue 24), core over real verbs in one process: a comm on a fused
// device of the bed's two ports connects to a fused device and to a single port, in both
// directions. Checked on the live comms: the members and their CQs, every QP at RTS on its
// path's member, paired with the peer's QP of the same index, the comm memory registered (and
// keyed) on every member adapter; a one-member connection stays one member of one path. The
// fused device is made with the test-only Engine::test_add_vdevice until make_vdevice lands.
// Data over each: every size class and a grouped receive, bytes, guards and per-member counters
// checked (exchange()).
// Registrations on a fused comm: one handle keyed on every member adapter (checked by an RDMA
// WRITE from every QP of the comm with its member's keys), shared per adapter with that adapter's
// own registrations, and every MR back after reg/dereg cycles (`rdma resource show`).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "comm/comm.h"
#include "core_pair.h"
#include "datapath/datapath_internal.h"
#include "datapath/flush.h"
#include "rdma_env.h"
#include "sluice/core/api.h"
#include "sluice/core/base/qp.h"

namespace {

using namespace sluice;
using Clock = std::chrono::steady_clock;

// `rdma resource show`'s text, or "" where the tool is missing.
std::string resource_text() {
  std::string out;
  FILE* f = popen("rdma resource show 2>/dev/null", "r");
  if (f == nullptr) return out;
  char line[512];
  while (std::fgets(line, sizeof line, f) != nullptr) out += line;
  pclose(f);
  return out;
}

// Its MR count per device ("0: rxe0: pd 3 cq 4 qp 5 cm_id 0 mr 2 ctx 0").
std::map<std::string, int> mr_counts() {
  std::map<std::string, int> n;
  const std::string text = resource_text();
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    const size_t c1 = line.find(": ");
    const size_t c2 = c1 == std::string::npos ? c1 : line.find(':', c1 + 2);
    const size_t mr = line.find(" mr ");
    if (c2 == std::string::npos || mr == std::string::npos) continue;
    n[line.substr(c1 + 2, c2 - c1 - 2)] = std::atoi(line.c_str() + mr + 4);
  }
  return n;
}

// Users of adapter a's cache over [base, +len) with `magic`.
int cache_users(Adapter* a, uintptr_t base, size_t len, uint32_t magic) {
  std::lock_guard<std::mutex> lk(a->mr_mu);
  int n = 0;
  for (const auto& e : a->mrs)
    for (const auto& u : e->users) n += u->base == base && u->len == len && u->magic == magic;
  return n;
}

class CoreFusion : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pair = rdmatest::test_pair();
    SLUICE_REQUIRE_PAIR(pair);
    Status st = engine_acquire(nullptr);
    ASSERT_TRUE(st.is_ok()) << st.message();
    acquired_ = true;
    ASSERT_TRUE(rdmatest::core_pair_devices(pair, &dev_a_, &dev_b_));
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
      ASSERT_TRUE(c.qp[q]);
      // On its member's adapter (context) and CQ, at RTS.
      EXPECT_EQ(c.qp[q].get()->context, members[m]->adapter->ctx.get()) << "QP " << q;
      EXPECT_EQ(c.qp[q].get()->send_cq, c.members[m].cq.get()) << "QP " << q;
      EXPECT_EQ(qp_query_state(c.qp[q].get()), IBV_QPS_RTS) << c.describe_qp(q);
      // A completion's QP is found by its number on the member whose CQ delivered it: QP numbers
      // are per adapter, and the bed's rxe0 and rxe1 hand out the same ones.
      EXPECT_EQ(dp::qp_index(c, c.qp[q].qpn, m), q) << c.describe_qp(q);
    }
  }

  // Polls both requests until done, within a bound.
  static void wait_both(Request* a, Request* b, size_t* got) {
    int da = a == nullptr, db = b == nullptr;
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (!(da && db)) {
      ASSERT_LT(Clock::now(), deadline) << "requests not done";
      Status st = Status::ok();
      if (!da) st = test(a, &da, nullptr);
      ASSERT_TRUE(st.is_ok()) << st.message();
      if (!db) st = test(b, &db, got);
      ASSERT_TRUE(st.is_ok()) << st.message();
    }
  }

  // Messages of every size class over the comm, and one grouped receive, every byte checked and
  // the bytes after each receive buffer untouched; on a fused comm each member's byte counter
  // (CommStatsV2) on both sides adds up to the bytes sent, and a striped message moves bytes on
  // every member of both sides.
  static void exchange(SendComm* s, RecvComm* r) {
    constexpr size_t kMax = (size_t{8} << 20) + 3, kGuard = 64;
    std::vector<unsigned char> src(kMax), dst(kMax + kGuard);
    MemHandle* smh = nullptr;
    MemHandle* rmh = nullptr;
    ASSERT_TRUE(reg_mr(s, src.data(), src.size(), MemType::kHost, &smh).is_ok());
    ASSERT_TRUE(reg_mr(r, dst.data(), dst.size(), MemType::kHost, &rmh).is_ok());
    const auto member_bytes = [](void* comm, std::vector<uint64_t>* out) {
      CommStatsV2 st;
      ASSERT_TRUE(comm_stats_v2(comm, &st).is_ok());
      out->assign(st.nmembers, 0);
      for (int m = 0; m < st.nmembers; ++m) (*out)[m] = st.members[m].bytes;
    };
    const size_t kSizes[] = {0, 1, 4095, 65536 + 3, (size_t{1} << 20) + 7, kMax};
    int seed = 1;
    for (size_t size : kSizes) {
      SCOPED_TRACE("size " + std::to_string(size));
      std::vector<uint64_t> s0, r0, s1, r1;
      ASSERT_NO_FATAL_FAILURE(member_bytes(s, &s0));
      ASSERT_NO_FATAL_FAILURE(member_bytes(r, &r0));
      for (size_t i = 0; i < size; ++i) src[i] = static_cast<unsigned char>(i * 131 + seed);
      std::memset(dst.data(), 0xEE, dst.size());
      void* data[1] = {dst.data()};
      size_t cap[1] = {size};
      int tags[1] = {seed};
      MemHandle* mhs[1] = {rmh};
      Request* rq = nullptr;
      Request* sq = nullptr;
      ASSERT_TRUE(irecv(r, 1, data, cap, tags, mhs, &rq).is_ok());
      const auto deadline = Clock::now() + std::chrono::seconds(60);
      while (sq == nullptr) {
        ASSERT_LT(Clock::now(), deadline) << "isend never taken";
        Status st = isend(s, src.data(), size, seed, smh, &sq);
        ASSERT_TRUE(st.is_ok() || st.is_again()) << st.message();
        int d = 0;
        if (sq == nullptr) {
          ASSERT_TRUE(test(rq, &d, nullptr).is_ok());  // publishes the receive
        }
        ASSERT_EQ(d, 0) << "the receive completed before its send";
      }
      size_t got = 0;
      ASSERT_NO_FATAL_FAILURE(wait_both(sq, rq, &got));
      EXPECT_EQ(got, size);
      EXPECT_EQ(0, std::memcmp(src.data(), dst.data(), size)) << "bytes differ";
      for (size_t i = size; i < size + kGuard; ++i)
        ASSERT_EQ(dst[i], 0xEE) << "written past the message at " << i;
      ASSERT_NO_FATAL_FAILURE(member_bytes(s, &s1));
      ASSERT_NO_FATAL_FAILURE(member_bytes(r, &r1));
      uint64_t sent = 0, recvd = 0;
      for (size_t m = 0; m < s1.size(); ++m) sent += s1[m] - s0[m];
      for (size_t m = 0; m < r1.size(); ++m) recvd += r1[m] - r0[m];
      EXPECT_EQ(sent, size) << "send members' bytes";
      EXPECT_EQ(recvd, size) << "receive members' bytes";
      const bool striped =
          s->c.npaths > 1 && size >= static_cast<size_t>(engine()->config().stripe_min);
      if (striped) {
        for (size_t m = 0; m < s1.size(); ++m)
          EXPECT_GT(s1[m] - s0[m], 0u) << "send member " << m << " carried nothing";
        for (size_t m = 0; m < r1.size(); ++m)
          EXPECT_GT(r1[m] - r0[m], 0u) << "receive member " << m << " carried nothing";
      }
      std::printf("  %zu B%s: send members", size, striped ? " (striped)" : "");
      for (size_t m = 0; m < s1.size(); ++m)
        std::printf(" %llu", static_cast<unsigned long long>(s1[m] - s0[m]));
      std::printf(", receive members");
      for (size_t m = 0; m < r1.size(); ++m)
        std::printf(" %llu", static_cast<unsigned long long>(r1[m] - r0[m]));
      std::printf("\n");
      ++seed;
    }
    // A grouped receive of three buffers, the sends in another order than the entries.
    const size_t gs[3] = {100, 70000, (size_t{1} << 20) + 1};
    const size_t off[3] = {0, 4096, 81920};
    void* data[3];
    size_t cap[3];
    int tags[3] = {31, 32, 33};
    MemHandle* mhs[3] = {rmh, rmh, rmh};
    for (int i = 0; i < 3; ++i) {
      data[i] = dst.data() + off[i];
      cap[i] = gs[i] + 10;  // posted larger than sent
    }
    std::memset(dst.data(), 0xEE, dst.size());
    for (size_t i = 0; i < kMax; ++i) src[i] = static_cast<unsigned char>(i * 7 + 3);
    Request* rq = nullptr;
    ASSERT_TRUE(irecv(r, 3, data, cap, tags, mhs, &rq).is_ok());
    Request* sq[3] = {};
    const int order[3] = {2, 0, 1};
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    for (int k = 0; k < 3; ++k) {
      const int i = order[k];
      while (sq[i] == nullptr) {
        ASSERT_LT(Clock::now(), deadline) << "grouped isend never taken";
        Status st = isend(s, src.data() + off[i], gs[i], tags[i], smh, &sq[i]);
        ASSERT_TRUE(st.is_ok() || st.is_again()) << st.message();
        int d = 0;
        if (sq[i] == nullptr) {
          ASSERT_TRUE(test(rq, &d, nullptr).is_ok());
        }
        ASSERT_EQ(d, 0) << "the grouped receive completed before its last send";
      }
    }
    size_t got[3] = {};
    for (int i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(wait_both(sq[i], nullptr, nullptr));
    int d = 0;
    while (!d) {
      ASSERT_LT(Clock::now(), deadline) << "grouped receive not done";
      ASSERT_TRUE(test(rq, &d, got).is_ok());
    }
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(got[i], gs[i]) << "buffer " << i;
      EXPECT_EQ(0, std::memcmp(src.data() + off[i], dst.data() + off[i], gs[i])) << "buffer " << i;
      for (size_t k = gs[i]; k < cap[i]; ++k)
        ASSERT_EQ(dst[off[i] + k], 0xEE) << "buffer " << i << " written past its message";
    }
    EXPECT_TRUE(dereg_mr(s, smh).is_ok());
    EXPECT_TRUE(dereg_mr(r, rmh).is_ok());
  }

  // Both ends: the same paths, QP q paired with the peer's QP q, and data over it.
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
      EXPECT_EQ(s->c.qp[q].remote_qpn, r->c.qp[q].qpn) << "QP " << q;
      EXPECT_EQ(r->c.qp[q].remote_qpn, s->c.qp[q].qpn) << "QP " << q;
    }
    // Members sharing an adapter share the comm memory's registration, others have their own
    // (keyed by it: keys are per adapter, so another adapter's may equal member 0's by chance).
    for (const Conn* c : {&s->c, &r->c}) {
      for (int m = 1; m < c->nmembers; ++m) {
        const bool shared = c->members[m].dev->adapter == c->members[0].dev->adapter;
        EXPECT_EQ(shared, !c->mem_mr_more[m]) << "member " << m;
        if (shared) {
          EXPECT_EQ(c->mem_rkey[m], c->mem_rkey[0]) << "member " << m;
        } else if (c->mem_mr_more[m]) {
          EXPECT_EQ(c->mem_rkey[m], c->mem_mr_more[m]->rkey) << "member " << m;
          EXPECT_EQ(c->mem_mr_more[m]->context, c->members[m].dev->adapter->ctx.get());
        }
      }
    }
    ASSERT_NO_FATAL_FAILURE(exchange(s, r));
    // Statistics name every member with the QPs that live on it.
    for (const auto& [comm, conn, devs] :
         {std::tuple<void*, const Conn*, const std::vector<Device*>*>{s, &s->c, &ms},
          std::tuple<void*, const Conn*, const std::vector<Device*>*>{r, &r->c, &mr}}) {
      CommStatsV2 stats;
      ASSERT_TRUE(comm_stats_v2(comm, &stats).is_ok());
      ASSERT_EQ(stats.nmembers, static_cast<int>(devs->size()));
      int qps = 0;
      for (int m = 0; m < stats.nmembers; ++m) {
        const MemberStats& st = stats.members[m];
        EXPECT_EQ(st.dev, (*devs)[m]->index) << "member " << m;
        ASSERT_NE(st.name, nullptr);
        EXPECT_EQ(std::string(st.name), (*devs)[m]->name);
        for (int k = 0; k < st.nqps; ++k) {
          int q = 0;
          while (q < conn->nqps && !(conn->qp[q].qpn == st.qpn[k] && conn->qp_member[q] == m)) ++q;
          EXPECT_LT(q, conn->nqps) << "member " << m << " reports qpn " << st.qpn[k];
        }
        qps += st.nqps;
      }
      EXPECT_EQ(qps, conn->nqps) << "every QP under exactly one member";
    }
    // Close drains every QP (its marker WR comes back flushed) well within the drain's bound: a
    // QP number is per adapter, so both members' QPs may be qpn 17, and a drain that took one for
    // the other waited out SLUICE_CLOSE_TIMEOUT_MS on every fused close.
    const int bound_ms = engine()->config().close_timeout_ms;
    const auto t0 = Clock::now();
    EXPECT_TRUE(close_send(s).is_ok());
    const auto t1 = Clock::now();
    EXPECT_TRUE(close_recv(r).is_ok());
    const auto t2 = Clock::now();
    const auto msec = [](Clock::duration d) {
      return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
    };
    EXPECT_LT(msec(t1 - t0), bound_ms) << "closeSend waited out its drain";
    EXPECT_LT(msec(t2 - t1), bound_ms) << "closeRecv waited out its drain";
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
  const auto counts = [] { return resource_text(); };
  const std::string before = counts();
  if (before.empty()) GTEST_SKIP() << "no `rdma resource show` here (iproute2's rdma tool)";
  for (int i = 0; i < 5; ++i) {
    ASSERT_NO_FATAL_FAILURE(check(fused_, dev_b_));
    ASSERT_NO_FATAL_FAILURE(check(dev_a_, fused_));
  }
  EXPECT_EQ(counts(), before);
  std::printf("resources after 10 fused open/close cycles:\n%s", before.c_str());
}

// A fused comm's regMr keys the buffer on every member adapter: an RDMA WRITE from every QP of a
// fused-to-fused comm, with the sender's key on the QP's member and the receiver's key on the
// peer QP's member, lands its bytes (a wrong lkey or rkey fails the WRITE with a protection or
// remote access error).
TEST_F(CoreFusion, RegistrationKeyedOnEveryMember) {
  SendComm* s = nullptr;
  RecvComm* r = nullptr;
  ASSERT_NO_FATAL_FAILURE(open_pair(fused_, fused_, &s, &r));
  constexpr size_t kPart = 4096 + 3;
  const int nq = s->c.nqps;
  std::vector<char> src(kPart * nq), dst(kPart * nq, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i * 7 + 1);
  MemHandle* smh = nullptr;
  MemHandle* rmh = nullptr;
  Status st = reg_mr(s, src.data(), src.size(), MemType::kHost, &smh);
  ASSERT_TRUE(st.is_ok()) << st.message();
  st = reg_mr(r, dst.data(), dst.size(), MemType::kHost, &rmh);
  ASSERT_TRUE(st.is_ok()) << st.message();
  const bool two_adapters = s->c.members[0].dev->adapter != s->c.members[1].dev->adapter;
  for (const MemHandle* mh : {smh, rmh}) {
    EXPECT_EQ(mh->nmore, two_adapters ? 1 : 0);
    for (int i = 0; i < mh->nmore; ++i) {
      EXPECT_EQ(mh->more[i]->magic, MemHandle::kMember);
      EXPECT_EQ(mh->more[i]->base, mh->base);
      EXPECT_EQ(mh->more[i]->len, mh->len);
    }
  }
  for (int m = 0; m < s->c.nmembers; ++m) {
    ASSERT_NE(smh->on(s->c.members[m].dev->adapter), nullptr) << "send member " << m;
    ASSERT_NE(rmh->on(r->c.members[m].dev->adapter), nullptr) << "recv member " << m;
  }
  for (int q = 0; q < nq; ++q) {
    const int m = s->c.qp_member[q];
    const int rm = r->c.qp_member[q];
    ibv_sge sge{};
    sge.addr = reinterpret_cast<uintptr_t>(src.data()) + q * kPart;
    sge.length = kPart;
    sge.lkey = smh->on(s->c.members[m].dev->adapter)->lkey;
    ibv_send_wr wr{};
    ibv_send_wr* bad = nullptr;
    wr.wr_id = 0x5eed0000u + q;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(dst.data()) + q * kPart;
    wr.wr.rdma.rkey = rmh->on(r->c.members[rm].dev->adapter)->rkey;
    ASSERT_EQ(ibv_post_send(s->c.qp[q].get(), &wr, &bad), 0) << s->c.describe_qp(q);
    ibv_wc wc{};
    int got = 0;
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (got == 0 && Clock::now() < deadline) got = ibv_poll_cq(s->c.members[m].cq.get(), 1, &wc);
    ASSERT_EQ(got, 1) << "no completion of the WRITE on " << s->c.describe_qp(q);
    EXPECT_EQ(wc.wr_id, wr.wr_id);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS)
        << ibv_wc_status_str(wc.status) << " on " << s->c.describe_qp(q) << " (member " << m
        << " -> peer member " << rm << ")";
  }
  EXPECT_EQ(0, std::memcmp(src.data(), dst.data(), src.size()));
  std::printf("%d WRITEs of %zu B, one per QP over %d member(s), landed with the members' keys\n",
              nq, kPart, s->c.nmembers);
  EXPECT_TRUE(dereg_mr(s, smh).is_ok());
  EXPECT_TRUE(dereg_mr(r, rmh).is_ok());
  EXPECT_TRUE(close_send(s).is_ok());
  EXPECT_TRUE(close_recv(r).is_ok());
}

// The cache stays per adapter: a one-port comm's regMr inside a fused registration shares the
// fused handle's extra MR on that port's adapter while the fused handle lives; once it is
// deregistered its extra is gone from that cache (never handed to a later regMr).
TEST_F(CoreFusion, RegistrationCacheStaysPerAdapter) {
  SendComm* fs = nullptr;
  RecvComm* fr = nullptr;
  SendComm* bs = nullptr;
  RecvComm* br = nullptr;
  ASSERT_NO_FATAL_FAILURE(open_pair(fused_, dev_b_, &fs, &fr));
  ASSERT_NO_FATAL_FAILURE(open_pair(dev_b_, dev_b_, &bs, &br));
  Adapter* b = engine()->device(dev_b_)->adapter;
  if (b == engine()->device(dev_a_)->adapter) GTEST_SKIP() << "both ports on one adapter";
  std::vector<char> buf(64 * 1024);
  MemHandle* fused = nullptr;
  MemHandle* one = nullptr;
  Status st = reg_mr(fs, buf.data(), buf.size(), MemType::kHost, &fused);
  ASSERT_TRUE(st.is_ok()) << st.message();
  ASSERT_EQ(fused->nmore, 1);
  const MemHandle* extra = fused->on(b);
  ASSERT_NE(extra, nullptr);
  ASSERT_NE(extra, fused);
  EXPECT_EQ(cache_users(b, extra->base, extra->len, MemHandle::kMember), 1);
  st = reg_mr(bs, buf.data() + 8192, 4096, MemType::kHost, &one);
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(one->entry, extra->entry) << "the one-port regMr did not share the extra's MR";
  EXPECT_EQ(one->rkey, extra->rkey);
  const uintptr_t base = extra->base;
  const size_t len = extra->len;
  EXPECT_TRUE(dereg_mr(fs, fused).is_ok());
  EXPECT_EQ(cache_users(b, base, len, MemHandle::kMember), 0) << "the extra outlived its handle";
  EXPECT_EQ(cache_users(b, base, len, MemHandle::kMemberDeferred), 0);
  // The one-port registration outlives the fused one and is released on its own.
  EXPECT_EQ(cache_users(b, one->base, one->len, MemHandle::kMagic), 1);
  EXPECT_TRUE(dereg_mr(bs, one).is_ok());
  EXPECT_EQ(cache_users(b, base + 8192, 4096, MemHandle::kMagic), 0);
  EXPECT_TRUE(close_send(fs).is_ok());
  EXPECT_TRUE(close_recv(fr).is_ok());
  EXPECT_TRUE(close_send(bs).is_ok());
  EXPECT_TRUE(close_recv(br).is_ok());
}

// A registration that fails on one member fails whole: member 0's part (here a hit in its
// adapter's cache, under a one-port comm's registration) is released again, nothing is left on
// the member that failed (a dma-buf registration of fd -1 fails there), and the error names the
// member. The one-port comm's own registration is untouched.
TEST_F(CoreFusion, RegistrationFailingOnOneMemberLeavesNothing) {
  SendComm* fs = nullptr;
  RecvComm* fr = nullptr;
  SendComm* as = nullptr;
  RecvComm* ar = nullptr;
  ASSERT_NO_FATAL_FAILURE(open_pair(fused_, dev_b_, &fs, &fr));
  ASSERT_NO_FATAL_FAILURE(open_pair(dev_a_, dev_a_, &as, &ar));
  Adapter* a = engine()->device(dev_a_)->adapter;
  Adapter* b = engine()->device(dev_b_)->adapter;
  if (a == b) GTEST_SKIP() << "both ports on one adapter";
  std::vector<char> arena(8 * 4096);
  char* page = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(arena.data()) + 4095) &
                                       ~static_cast<uintptr_t>(4095));
  MemHandle* one = nullptr;
  Status st = reg_mr(as, page, 4 * 4096, MemType::kHost, &one);
  ASSERT_TRUE(st.is_ok()) << st.message();
  const auto before = mr_counts();
  MemHandle* fused = reinterpret_cast<MemHandle*>(0x1);
  st = reg_mr_dmabuf(fs, page + 4096, 4096, MemType::kHost, 0, -1, &fused);
  EXPECT_FALSE(st.is_ok());
  EXPECT_EQ(fused, nullptr);
  EXPECT_NE(st.message().find("member 1"), std::string::npos) << st.message();
  std::printf("refused whole: %s\n", st.message().c_str());
  EXPECT_EQ(cache_users(a, reinterpret_cast<uintptr_t>(page) + 4096, 4096, MemHandle::kMagic), 0)
      << "member 0's cache hit stayed registered";
  EXPECT_EQ(cache_users(a, one->base, one->len, MemHandle::kMagic), 1);
  {
    std::lock_guard<std::mutex> lk(b->mr_mu);
    for (const auto& e : b->mrs) {
      for (const auto& u : e->users) {
        EXPECT_FALSE(u->base <= reinterpret_cast<uintptr_t>(page) + 4096 &&
                     u->base + u->len > reinterpret_cast<uintptr_t>(page) + 4096)
            << "member 1 kept a registration of the range";
      }
    }
  }
  if (!before.empty()) {
    EXPECT_EQ(mr_counts(), before);
  }
  EXPECT_TRUE(dereg_mr(as, one).is_ok());
  EXPECT_TRUE(close_send(fs).is_ok());
  EXPECT_TRUE(close_recv(fr).is_ok());
  EXPECT_TRUE(close_send(as).is_ok());
  EXPECT_TRUE(close_recv(ar).is_ok());
}

// Reg/dereg cycles on fused comms register on both adapters while held and give every MR back.
TEST_F(CoreFusion, RegDeregCyclesReturnEveryMr) {
  const auto before = mr_counts();
  if (before.empty()) GTEST_SKIP() << "no `rdma resource show` here (iproute2's rdma tool)";
  const std::string na = engine()->device(dev_a_)->adapter->name;
  const std::string nb = engine()->device(dev_b_)->adapter->name;
  if (na == nb) GTEST_SKIP() << "both ports on one adapter";
  SendComm* s = nullptr;
  RecvComm* r = nullptr;
  ASSERT_NO_FATAL_FAILURE(open_pair(fused_, fused_, &s, &r));
  const auto open = mr_counts();
  // Page-aligned and apart, so that no two share an MR (the cache shares only inside a range).
  constexpr size_t kBuf = 4 * 4096;
  std::vector<char> arena(5 * kBuf + 4096);
  char* first = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(arena.data()) + 4095) &
                                        ~static_cast<uintptr_t>(4095));
  for (int cycle = 0; cycle < 10; ++cycle) {
    std::vector<MemHandle*> mhs;
    for (int i = 0; i < 4; ++i) {
      MemHandle* mh = nullptr;
      Status st = reg_mr(cycle % 2 ? static_cast<void*>(s) : static_cast<void*>(r),
                         first + i * (kBuf + 4096), 3 * 4096 + 17, MemType::kHost, &mh);
      ASSERT_TRUE(st.is_ok()) << st.message();
      mhs.push_back(mh);
    }
    if (cycle == 0) {
      auto held = mr_counts();
      EXPECT_EQ(held[na], open.at(na) + 4) << "member 0's adapter";
      EXPECT_EQ(held[nb], open.at(nb) + 4) << "member 1's adapter";
    }
    for (MemHandle* mh : mhs)
      ASSERT_TRUE(dereg_mr(cycle % 2 ? static_cast<void*>(s) : static_cast<void*>(r), mh).is_ok());
    EXPECT_EQ(mr_counts(), open) << "cycle " << cycle;
  }
  EXPECT_TRUE(close_send(s).is_ok());
  EXPECT_TRUE(close_recv(r).is_ok());
  EXPECT_EQ(mr_counts(), before);
}

}  // namespace

// NCCL_NET_FORCE_FLUSH on a fused comm: iflush READs through every member adapter (each with the
// buffer's key there), and the flush is done only when all of them completed.
class CoreFusionFlush : public CoreFusion {
 protected:
  void SetUp() override {
    setenv("NCCL_NET_FORCE_FLUSH", "1", 1);
    CoreFusion::SetUp();
  }
  void TearDown() override {
    CoreFusion::TearDown();
    unsetenv("NCCL_NET_FORCE_FLUSH");
  }
};

TEST_F(CoreFusionFlush, ReadsThroughEveryMemberAdapter) {
  SendComm* s = nullptr;
  RecvComm* r = nullptr;
  ASSERT_NO_FATAL_FAILURE(open_pair(fused_, fused_, &s, &r));
  ASSERT_NO_FATAL_FAILURE(exchange(s, r));  // the last message (8 MiB + 3) is striped
  const bool two_adapters = r->c.members[0].dev->adapter != r->c.members[1].dev->adapter;
  std::vector<unsigned char> dst(4096, 0x5a);
  MemHandle* rmh = nullptr;
  ASSERT_TRUE(reg_mr(r, dst.data(), dst.size(), MemType::kHost, &rmh).is_ok());
  ASSERT_TRUE(rmh->access & IBV_ACCESS_REMOTE_READ) << "force flush needs remote read";
  for (int round = 0; round < 3; ++round) {
    dst[0] = static_cast<unsigned char>(0x31 + round);
    void* data = dst.data();
    int size = static_cast<int>(dst.size());
    Request* freq = nullptr;
    Status st = iflush(r, 1, &data, &size, &rmh, &freq);
    ASSERT_TRUE(st.is_ok()) << st.message();
    ASSERT_NE(freq, nullptr);
    const FlushStats fs = flush_stats(*r);
    EXPECT_EQ(fs.lanes, two_adapters ? 2 : 1);
    EXPECT_EQ(fs.reads_posted, static_cast<uint64_t>((round + 1) * fs.lanes));
    int done = 0;
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (!done) {
      ASSERT_LT(Clock::now(), deadline) << "flush never completed";
      ASSERT_TRUE(test(freq, &done, nullptr).is_ok());
      if (!done) {
        EXPECT_LT(flush_stats(*r).reads_completed, static_cast<uint64_t>((round + 1) * fs.lanes));
      }
    }
    EXPECT_EQ(flush_stats(*r).reads_completed, static_cast<uint64_t>((round + 1) * fs.lanes))
        << "done before every member's READ completed";
    EXPECT_EQ(flush_stats(*r).bounce, dst[0]);
    std::printf("flush round %d: %d READ(s), one per member adapter, bounce 0x%02x\n", round,
                fs.lanes, flush_stats(*r).bounce);
  }
  EXPECT_TRUE(dereg_mr(r, rmh).is_ok());
  EXPECT_TRUE(close_send(s).is_ok());
  EXPECT_TRUE(close_recv(r).is_ok());
}
