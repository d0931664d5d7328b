// Production-fabric features on real verbs (issue 21), part of core_datapath_test, so they run in
// oob mode (core.cmake) and through rdma_cm (plugin_rdma_rdmacm): the traffic class a comm asks for
// is read back from every QP it created (ibv_query_qp), data and clear-to-send; ECE is queried and,
// on rxe (EOPNOTSUPP), skipped with a single INFO while connections are made; registrations ask for
// relaxed ordering (NCCL_IB_PCI_RELAXED_ORDERING=2 on rxe: the probe registers) and carry data.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "core_pair.h"
#include "rdma_env.h"
#include "sluice/core/api.h"

namespace {

using namespace sluice;
using Clock = std::chrono::steady_clock;

std::mutex g_mu;
std::vector<std::string> g_ece_skipped;  // INFO lines "<device>: ECE not used (...)" seen

void fabric_sink(int level, unsigned long, const char* file, int line, const char* fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (level == kLogInfo) {
    rdmatest::count_cm_choice(msg);
    if (std::strstr(msg, ": ECE not used (") != nullptr) {
      std::lock_guard<std::mutex> lk(g_mu);
      g_ece_skipped.emplace_back(msg);
    }
  }
  if (level <= kLogWarn || std::strstr(msg, "ECE") != nullptr ||
      std::strstr(msg, "relaxed ordering") != nullptr ||
      std::strstr(msg, "adaptive routing") != nullptr)
    std::fprintf(stderr, "sluice %s %s:%d %s\n", level <= kLogWarn ? "WARN" : "INFO", file, line,
                 msg);
}

int env_int(const char* name, int dflt) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : dflt;
}

class CoreFabric : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pair = rdmatest::test_pair();
    SLUICE_REQUIRE_PAIR(pair);
    Status st = engine_acquire(fabric_sink);
    ASSERT_TRUE(st.is_ok()) << st.message();
    acquired_ = true;
    ASSERT_TRUE(rdmatest::core_pair_devices(pair, &dev_a_, &dev_b_));
  }
  void TearDown() override {
    if (acquired_) engine_release();
  }
  void open_pair(const CommConfig& cc, SendComm** s, RecvComm** r) {
    char handle[kHandleSize];
    ListenComm* l = nullptr;
    ASSERT_TRUE(listen(dev_b_, handle, &l).is_ok());
    *s = nullptr;
    *r = nullptr;
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (*s == nullptr || *r == nullptr) {
      ASSERT_LT(Clock::now(), deadline) << "connection not established";
      if (*s == nullptr) {
        Status st = connect(dev_a_, handle, cc, s);
        ASSERT_TRUE(st.is_ok()) << st.message();
      }
      if (*r == nullptr) {
        Status st = accept(l, r);
        ASSERT_TRUE(st.is_ok()) << st.message();
      }
    }
    ASSERT_TRUE(close_listen(l).is_ok());
  }
  // One message of `n` bytes s -> r, checked byte for byte.
  void transfer(SendComm* s, RecvComm* r, size_t n) {
    std::vector<uint8_t> src(n), dst(n + 64, 0);
    for (size_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
    MemHandle *ms = nullptr, *mr = nullptr;
    ASSERT_TRUE(reg_mr(s, src.data(), n, MemType::kHost, &ms).is_ok());
    ASSERT_TRUE(reg_mr(r, dst.data(), dst.size(), MemType::kHost, &mr).is_ok());
    const bool ro = s->c.dev->adapter->relaxed_ordering;
    EXPECT_EQ((ms->access & IBV_ACCESS_RELAXED_ORDERING) != 0, ro);
    EXPECT_EQ((mr->access & IBV_ACCESS_RELAXED_ORDERING) != 0, ro);
    void* data = dst.data();
    size_t cap = dst.size();
    int tag = 1;
    Request *rq = nullptr, *sq = nullptr;
    ASSERT_TRUE(irecv(r, 1, &data, &cap, &tag, &mr, &rq).is_ok());
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (sq == nullptr) {
      ASSERT_LT(Clock::now(), deadline);
      Status st = isend(s, src.data(), n, 1, ms, &sq);  // again until the clear-to-send came
      ASSERT_TRUE(st.is_ok() || st.is_again()) << st.message();
      if (sq == nullptr) {  // the receive is tested meanwhile, as NCCL's proxy does
        int done = 0;
        ASSERT_TRUE(test(rq, &done, nullptr).is_ok());
        ASSERT_EQ(done, 0);
      }
    }
    for (Request* q : {sq, rq}) {
      int done = 0;
      size_t sizes[8] = {};
      while (!done) {
        ASSERT_LT(Clock::now(), deadline);
        ASSERT_TRUE(test(q, &done, sizes).is_ok());
      }
    }
    EXPECT_EQ(std::memcmp(src.data(), dst.data(), n), 0);
    EXPECT_TRUE(dereg_mr(s, ms).is_ok());
    EXPECT_TRUE(dereg_mr(r, mr).is_ok());
  }
  bool acquired_ = false;
  int dev_a_ = -1, dev_b_ = -1;
};

struct Av {
  int tc = -1, sl = -1;
  bool global = false;
};
Av read_av(ibv_qp* qp) {
  ibv_qp_attr a{};
  ibv_qp_init_attr init{};
  Av av;
  if (ibv_query_qp(qp, &a, IBV_QP_AV | IBV_QP_STATE, &init) != 0) return av;
  av.global = a.ah_attr.is_global != 0;
  av.tc = a.ah_attr.grh.traffic_class;
  av.sl = a.ah_attr.sl;
  return av;
}

// ncclNetCommConfig.trafficClass (v11) reaches every QP the comm pair created: the connector's data
// QPs get NCCL_IB_TC or the comm's class, the acceptor's QPs (which carry the clear-to-send writes)
// NCCL_IB_FIFO_TC or the same class. The SL (NCCL_IB_SL or the comm's class) is checked where the
// address keeps it: on InfiniBand; on RoCE the SL is not part of the address (rxe keeps none).
TEST_F(CoreFabric, TrafficClassOfTheCommIsOnEveryQp) {
  CommConfig cc;
  cc.traffic_class = 10;
  SendComm* s = nullptr;
  RecvComm* r = nullptr;
  ASSERT_NO_FATAL_FAILURE(open_pair(cc, &s, &r));
  const int tc = env_int("NCCL_IB_TC", -1) >= 0 ? env_int("NCCL_IB_TC", -1) : cc.traffic_class;
  const int fifo_tc = env_int("NCCL_IB_FIFO_TC", -1) >= 0 ? env_int("NCCL_IB_FIFO_TC", -1) : tc;
  const int sl = env_int("NCCL_IB_SL", -1) >= 0 ? env_int("NCCL_IB_SL", -1) : cc.traffic_class;
  ASSERT_GE(s->c.nqps, 1);
  ASSERT_EQ(s->c.nqps, r->c.nqps);
  for (int q = 0; q < s->c.nqps; ++q) {
    const Av a = read_av(s->c.qp[q].get()), b = read_av(r->c.qp[q].get());
    if (s->c.dev->roce) {
      ASSERT_TRUE(a.global && b.global) << "RoCE addresses carry a GRH";
      EXPECT_EQ(a.tc, tc) << "data QP " << q << " (" << s->c.describe_qp(q) << ")";
      EXPECT_EQ(b.tc, fifo_tc) << "clear-to-send QP " << q << " (" << r->c.describe_qp(q) << ")";
    } else {
      EXPECT_EQ(a.sl, sl) << "data QP " << q;
      EXPECT_EQ(b.sl, sl) << "clear-to-send QP " << q;
      if (a.global) {
        EXPECT_EQ(a.tc, tc);
      }
    }
  }
  ASSERT_NO_FATAL_FAILURE(transfer(s, r, 100000));
  EXPECT_TRUE(close_send(s).is_ok());
  EXPECT_TRUE(close_recv(r).is_ok());
}

// ECE: queried on each connection; a provider without it (rxe: EOPNOTSUPP) leaves the connection
// without ECE and says so once per device, not per connection. Where the device has ECE both ends
// set the same options (the intersection of the same device's offer is the offer).
TEST_F(CoreFabric, EceQueriedAndSkippedWhereUnsupported) {
  {
    std::lock_guard<std::mutex> lk(g_mu);
    g_ece_skipped.clear();  // this test's engine is a fresh one (SetUp acquired it)
  }
  bool unsupported = false;
  for (int round = 0; round < 2; ++round) {
    SendComm* s = nullptr;
    RecvComm* r = nullptr;
    ASSERT_NO_FATAL_FAILURE(open_pair(CommConfig{}, &s, &r));
    const bool rxe = s->c.dev->adapter->name.rfind("rxe", 0) == 0;
    if (rxe || !s->c.ece_local.supported) {
      unsupported = true;
      EXPECT_FALSE(s->c.ece_local.supported) << "rxe answers ibv_query_ece with EOPNOTSUPP";
      EXPECT_FALSE(s->c.ece.supported);
      EXPECT_FALSE(r->c.ece.supported);
    } else {
      EXPECT_TRUE(s->c.ece.supported);
      EXPECT_EQ(s->c.ece.options, r->c.ece.options);
      EXPECT_EQ(s->c.ece.vendor_id, r->c.ece.vendor_id);
    }
    ASSERT_NO_FATAL_FAILURE(transfer(s, r, 4096));
    EXPECT_TRUE(close_send(s).is_ok());
    EXPECT_TRUE(close_recv(r).is_ok());
  }
  if (!unsupported) return;
  // Two connections, each device of the pair said it once (at its first connection), not twice.
  std::lock_guard<std::mutex> lk(g_mu);
  for (int dev : {dev_a_, dev_b_}) {
    const std::string prefix = "NET/Sluice : " + engine()->device(dev)->name + ": ECE not used (";
    int n = 0;
    for (const auto& m : g_ece_skipped) n += m.rfind(prefix, 0) == 0 ? 1 : 0;
    EXPECT_EQ(n, 1) << prefix;
  }
}

// NCCL_IB_PCI_RELAXED_ORDERING (default 2): where the probe registration with the flag works (rxe
// takes it: an optional flag), every data registration asks for it, and data arrives intact.
TEST_F(CoreFabric, RelaxedOrderingRequestedAndRegistrationsWork) {
  const Device* d = engine()->device(dev_a_);
  const int mode = env_int("NCCL_IB_PCI_RELAXED_ORDERING", 2);
  std::fprintf(stderr, "%s: probe: %s; decision: %s\n", d->name.c_str(),
               d->adapter->ro_probe.text.c_str(), d->ro.why.c_str());
  if (mode == 2) {
    EXPECT_EQ(d->ro.on, d->adapter->ro_probe.ok);
  }
  if (mode == 2 && d->adapter->name.rfind("rxe", 0) == 0) {
    EXPECT_TRUE(d->adapter->ro_probe.ok) << d->adapter->ro_probe.text;
    EXPECT_TRUE(d->ro.on);
  }
  if (mode == 0) {
    EXPECT_FALSE(d->ro.on);
  }
  SendComm* s = nullptr;
  RecvComm* r = nullptr;
  ASSERT_NO_FATAL_FAILURE(open_pair(CommConfig{}, &s, &r));
  for (size_t n : {size_t{1}, size_t{8192}, size_t{1} << 20})
    ASSERT_NO_FATAL_FAILURE(transfer(s, r, n));
  EXPECT_TRUE(close_send(s).is_ok());
  EXPECT_TRUE(close_recv(r).is_ok());
}

}  // namespace
