// NCCL's teardown order through the exported tables (part of plugin_faults_test; labels rdma and
// faults). NCCL's proxy frees a net connection with deregMr of its buffers first and closeSend /
// closeRecv after (sendProxyFree / recvProxyFree, src/transport/net.cc), each under NCCLCHECK, and
// ncclProxyFreeConnections stops at the first error: so none of these calls may fail for a state
// that a teardown reaches (docs/failures.md, "NCCL's teardown order"). Checked here, on the v11
// and v12 tables:
//  * a window of receives and sends of every size class (0 B .. 8 MiB + 3) torn down in that order
//    while in flight, with 1 and 4 threads (each driving its own pair of comms), for
//    SLUICE_TEST_TEARDOWN_CYCLES cycles (200 by default) in all: every call returns ncclSuccess,
//    and the process's QPs, CQs, MRs, PDs and fds are back where they started;
//  * the same after an injected comm failure (a send larger than the posted receive fails both
//    comms) with the rest of the window still pending;
//  * a deregMr deferred by a pending receive, then a regMr of the same range: a fresh MR (the
//    deferred one is never handed out), a transfer into it verifies, and the deferred MR goes once
//    its receive is done.
// After a peer SIGKILL the same order (deregMr with the failed request pending, then close) is
// what SenderKilled / ReceiverKilled in plugin_faults_test.cc do at the end of their scopes.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "plugin_bed.h"

namespace nettest {
namespace {

struct Baseline {
  int qp = 0, cq = 0, mr = 0, pd = 0, fds = 0;
  std::string fd_list;
  static Baseline now() {
    return {rdma_resource_count("qp"), rdma_resource_count("cq"), rdma_resource_count("mr"),
            rdma_resource_count("pd"), open_fd_count(),           open_fd_list()};
  }
};

void expect_baseline(const Baseline& b, const char* when) {
  const Baseline a = Baseline::now();
  ASSERT_GE(b.qp, 0) << "`rdma resource show` failed (iproute2's rdma tool is needed)";
  EXPECT_EQ(a.qp, b.qp) << "QPs leaked " << when;
  EXPECT_EQ(a.cq, b.cq) << "CQs leaked " << when;
  EXPECT_EQ(a.mr, b.mr) << "MRs leaked " << when;
  EXPECT_EQ(a.pd, b.pd) << "PDs leaked " << when;
  EXPECT_EQ(a.fds, b.fds) << "fds leaked " << when << "; before:\n"
                          << b.fd_list << "after:\n"
                          << a.fd_list;
}

// Page-aligned memory freed only after the comms are closed (as NCCL frees its buffers after
// the proxy closed the connection).
struct Mem {
  uint8_t* p = nullptr;
  explicit Mem(size_t n) {
    p = static_cast<uint8_t*>(std::aligned_alloc(4096, (n + 4095) / 4096 * 4096));
  }
  ~Mem() { std::free(p); }
};

constexpr int kSizeClasses = sizeof kSizes / sizeof kSizes[0];
size_t window_bytes() {
  size_t n = 0;
  for (size_t s : kSizes) n += (s + 4095) / 4096 * 4096 + 4096;
  return n;
}

// One cycle on a fresh pair: post the window, test every request once, then NCCL's order.
// fail_first: the first receive is posted 4096 bytes and its send is 65537 (refused: both comms
// fail). Returns "" or what went wrong.
std::string cycle(Net& n, int cycle_no, bool fail_first) {
  Conn c;
  if (auto ok = open_conn(n, bed().dev_a, bed().dev_b, &c); !ok)
    return std::string("open_conn failed: ") + ok.message();
  const size_t total = window_bytes();
  Mem src(total), dst(total);
  void *smh = nullptr, *rmh = nullptr;
  if (n.reg_mr(c.send, src.p, total, &smh) != ncclSuccess ||
      n.reg_mr(c.recv, dst.p, total, &rmh) != ncclSuccess)
    return "regMr failed";
  std::vector<void*> reqs;
  size_t off = 0;
  std::vector<size_t> offs;
  for (int i = 0; i < kSizeClasses; ++i) {
    offs.push_back(off);
    off += (kSizes[i] + 4095) / 4096 * 4096 + 4096;
  }
  std::string err;
  for (int i = 0; i < kSizeClasses && err.empty(); ++i) {
    void* data = dst.p + offs[i];
    size_t cap = fail_first && i == 0 ? 4096 : std::max<size_t>(kSizes[i], 1);
    int tag = 100 + i;
    void* q = nullptr;
    if (!post_until("irecv", &q,
                    [&](void** r) { return n.irecv(c.recv, 1, &data, &cap, &tag, &rmh, r); }))
      err = "irecv";
    reqs.push_back(q);
  }
  bool failed = false;
  for (int i = 0; i < kSizeClasses && err.empty() && !failed; ++i) {
    const size_t size = fail_first && i == 0 ? 65537 : kSizes[i];
    void* q = nullptr;
    const auto deadline = Clock::now() + wait_limit();
    while (q == nullptr && Clock::now() < deadline) {
      ncclResult_t r = n.isend(c.send, src.p + offs[i], size, 100 + i, smh, &q);
      if (r != ncclSuccess) {
        if (!fail_first) err = "isend returned " + std::to_string(r);
        failed = true;  // the refused send failed the comm
        break;
      }
    }
    if (q == nullptr && !failed) err = "isend got no request";
    if (q != nullptr) reqs.push_back(q);
  }
  if (fail_first && !failed) err = "the oversize send did not fail the sender";
  // Every request tested once: some done, most in flight; a failed comm's test fails.
  for (void* q : reqs) {
    int done = 0;
    ncclResult_t r = n.test(q, &done, nullptr);
    if (r != ncclSuccess && !fail_first && err.empty())
      err = "test returned " + std::to_string(r) + " on a healthy comm";
  }
  // NCCL's order: deregMr (requests still pending), then close. None may fail.
  ncclResult_t d1 = n.dereg_mr(c.send, smh), d2 = n.dereg_mr(c.recv, rmh);
  ncclResult_t c1 = n.close_send(c.send), c2 = n.close_recv(c.recv);
  if (d1 != ncclSuccess || d2 != ncclSuccess || c1 != ncclSuccess || c2 != ncclSuccess) {
    err += " cycle " + std::to_string(cycle_no) + ": deregMr " + std::to_string(d1) + "/" +
           std::to_string(d2) + ", closeSend " + std::to_string(c1) + ", closeRecv " +
           std::to_string(c2);
  }
  return err;
}

// The baseline a test's cycles must return to, taken after one warm-up cycle in its own init /
// finalize, the first time in the process (later tests find the cache in place). The first
// connection in a process leaves librdmacm's device cache behind: resolving a route
// (connect/route_gid.cc, in either connection manager) makes librdmacm open a verbs context of that
// device, which it keeps, with its async-event fd, for the life of the library (freed at unload,
// never by a close), one per device. That is checked here: the warm-up may add only such pairs, at
// most one per device, and no QP, CQ, MR or PD. Every later cycle must return to it.
std::vector<std::string> fd_targets_added(const std::string& before, const std::string& after) {
  std::vector<std::string> added;
  size_t pos = 0;
  while (pos < after.size()) {
    const size_t end = after.find('\n', pos);
    const std::string line = after.substr(pos, end - pos);
    pos = end == std::string::npos ? after.size() : end + 1;
    if (!line.empty() && before.find(line + "\n") == std::string::npos)
      added.push_back(line.substr(line.find(" -> ") + 4));
  }
  return added;
}

Baseline warm_baseline(int version) {
  static bool warmed = false;
  if (warmed) return Baseline::now();
  warmed = true;
  const Baseline cold = Baseline::now();
  {
    Net n(version);
    EXPECT_EQ(n.init(0x7e90 + version), ncclSuccess);
    sluice::rdmatest::ExpectWarns quiet;
    EXPECT_EQ(cycle(n, -1, false), "") << "the warm-up cycle";
    EXPECT_EQ(n.finalize(), ncclSuccess);
  }
  const Baseline warm = Baseline::now();
  EXPECT_EQ(warm.qp, cold.qp) << "QPs left by the warm-up cycle";
  EXPECT_EQ(warm.cq, cold.cq) << "CQs left by the warm-up cycle";
  EXPECT_EQ(warm.mr, cold.mr) << "MRs left by the warm-up cycle";
  EXPECT_EQ(warm.pd, cold.pd) << "PDs left by the warm-up cycle";
  int contexts = 0, events = 0;
  std::vector<std::string> devs;
  for (const std::string& t : fd_targets_added(cold.fd_list, warm.fd_list)) {
    if (t.rfind("/dev/infiniband/uverbs", 0) == 0) {
      ++contexts;
      EXPECT_EQ(std::count(devs.begin(), devs.end(), t), 0) << t << " cached twice";
      devs.push_back(t);
    } else if (t == "anon_inode:[infinibandevent]") {
      ++events;
    } else {
      ADD_FAILURE() << "the warm-up cycle left fd -> " << t
                    << ", not librdmacm's device cache; before:\n"
                    << cold.fd_list << "after:\n"
                    << warm.fd_list;
    }
  }
  EXPECT_EQ(contexts, events) << "librdmacm's cache is a verbs context and its async-event fd";
  return warm;
}

int cycles() {
  return static_cast<int>(env_long("SLUICE_TEST_TEARDOWN_CYCLES", 200));
}

struct Case {
  int version;
  int threads;
};

class NcclOrder : public ::testing::TestWithParam<Case> {};
INSTANTIATE_TEST_SUITE_P(Teardown, NcclOrder,
                         ::testing::Values(Case{11, 1}, Case{11, 4}, Case{12, 1}, Case{12, 4}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return "v" + std::to_string(i.param.version) + "_" +
                                  std::to_string(i.param.threads) + "threads";
                         });

TEST_P(NcclOrder, WindowInFlightEveryCallSucceedsNothingLeaks) {
  REQUIRE_BED();
  const Case k = GetParam();
  const Baseline before = warm_baseline(k.version);
  if (HasFailure()) return;
  const auto t0 = Clock::now();
  {
    Net n(k.version);
    ASSERT_EQ(n.init(0x7ea0 + k.version), ncclSuccess);
    sluice::rdmatest::ExpectWarns quiet;  // a close may name what it left in flight
    const int per = std::max(1, cycles() / k.threads);
    std::vector<std::string> errs(k.threads);
    std::vector<std::thread> th;
    for (int t = 0; t < k.threads; ++t) {
      th.emplace_back([&, t] {
        for (int i = 0; i < per && errs[t].empty(); ++i) errs[t] = cycle(n, i, false);
      });
    }
    for (auto& x : th) x.join();
    for (int t = 0; t < k.threads; ++t) EXPECT_EQ(errs[t], "") << "thread " << t;
    EXPECT_EQ(n.finalize(), ncclSuccess);
  }
  const long long ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  std::fprintf(stderr,
               "v%d, %d thread(s): %d cycles of a %d-message window torn down in flight "
               "in %lld ms\n",
               k.version, k.threads, std::max(1, cycles() / k.threads) * k.threads,
               2 * kSizeClasses, ms);
  expect_baseline(before, "after the cycles");
}

TEST_P(NcclOrder, AfterAnInjectedCommFailure) {
  REQUIRE_BED();
  const Case k = GetParam();
  const Baseline before = warm_baseline(k.version);
  if (HasFailure()) return;
  {
    Net n(k.version);
    ASSERT_EQ(n.init(0x7eb0 + k.version), ncclSuccess);
    sluice::rdmatest::ExpectWarns expected;  // the refused send and the failed receive WARN
    std::vector<std::string> errs(k.threads);
    std::vector<std::thread> th;
    for (int t = 0; t < k.threads; ++t) {
      th.emplace_back([&, t] {
        for (int i = 0; i < 3 && errs[t].empty(); ++i) errs[t] = cycle(n, i, true);
      });
    }
    for (auto& x : th) x.join();
    for (int t = 0; t < k.threads; ++t) EXPECT_EQ(errs[t], "") << "thread " << t;
    EXPECT_EQ(n.finalize(), ncclSuccess);
  }
  expect_baseline(before, "after torn-down failed comms");
}

// deregMr deferred by a pending receive, then regMr of the same range: a fresh MR, a transfer
// into it verifies, and the deferred MR goes at the comm's next deregMr once its receive is done.
TEST(TeardownDeferred, RegMrOfTheSameRangeGetsAFreshRegistration) {
  REQUIRE_BED();
  const Counts before = Counts::now();
  Conn c;
  ASSERT_TRUE(open_conn(net(), bed().dev_a, bed().dev_b, &c));
  constexpr size_t kLen = 65536;
  Mem src(kLen), dst(kLen);
  fill_pattern(src.p, kLen, 4242);
  std::memset(dst.p, 0, kLen);
  void *smh = nullptr, *rmh1 = nullptr, *rmh2 = nullptr;
  ASSERT_EQ(net().reg_mr(c.send, src.p, kLen, &smh), ncclSuccess);
  ASSERT_EQ(net().reg_mr(c.recv, dst.p, kLen, &rmh1), ncclSuccess);
  void* data = dst.p;
  size_t cap = kLen;
  int tag = 5;
  void* r1 = nullptr;
  ASSERT_TRUE(post_until(
      "irecv", &r1, [&](void** r) { return net().irecv(c.recv, 1, &data, &cap, &tag, &rmh1, r); }));
  const int mrs = rdma_resource_count("mr");
  EXPECT_EQ(net().dereg_mr(c.recv, rmh1), ncclSuccess) << "deregMr refused with a receive pending";
  EXPECT_EQ(rdma_resource_count("mr"), mrs) << "the MR went while a receive still uses it";
  ASSERT_EQ(net().reg_mr(c.recv, dst.p, kLen, &rmh2), ncclSuccess);
  EXPECT_EQ(rdma_resource_count("mr"), mrs + 1) << "regMr handed out the deferred registration";
  // The pending receive (deferred MR) takes the first send; the second goes into the fresh MR.
  void* s1 = nullptr;
  ASSERT_TRUE(post_until(
      "isend", &s1, [&](void** r) { return net().isend(c.send, src.p, kLen / 2, 5, smh, r); }));
  ASSERT_TRUE(wait_done(net(), "send 1", s1, nullptr));
  ASSERT_TRUE(wait_done(net(), "recv 1", r1, nullptr));
  std::memset(dst.p, 0, kLen);
  void* r2 = nullptr;
  tag = 6;
  ASSERT_TRUE(post_until(
      "irecv", &r2, [&](void** r) { return net().irecv(c.recv, 1, &data, &cap, &tag, &rmh2, r); }));
  void* s2 = nullptr;
  ASSERT_TRUE(post_until("isend", &s2,
                         [&](void** r) { return net().isend(c.send, src.p, kLen, 6, smh, r); }));
  ASSERT_TRUE(wait_done(net(), "send 2", s2, nullptr));
  ASSERT_TRUE(wait_done(net(), "recv 2", r2, nullptr));
  EXPECT_EQ(check_pattern(dst.p, kLen, 4242), "") << "the transfer into the fresh MR differs";
  EXPECT_EQ(net().dereg_mr(c.recv, rmh2), ncclSuccess);
  EXPECT_EQ(rdma_resource_count("mr"), mrs - 1) << "the deferred MR outlived its receive";
  EXPECT_EQ(net().dereg_mr(c.send, smh), ncclSuccess);
  EXPECT_TRUE(close_conn(net(), &c));
  expect_released(before);
}

}  // namespace
}  // namespace nettest
