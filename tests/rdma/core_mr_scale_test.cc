// Registration and close at scale (issue 32): 10,000 registrations on one adapter, then closes of
// comms while they are held, then 10,000 deregistrations; and one buffer registered 10,000 times
// (one MR, 10,000 users). Each regMr, deregMr and close used to walk every MR x user of the adapter
// under its lock. Benchmark-style: the times are printed, not asserted; what is asserted is that
// every call succeeds, the MRs are shared and released as the cache's rules say, and a message
// passes through a registration from the middle of the 10,000.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core_pair.h"
#include "rdma_env.h"
#include "sluice/core/api.h"

namespace {

using namespace sluice;
using Clock = std::chrono::steady_clock;
using rdmatest::count_own;

constexpr int kRegs = 10000;
constexpr int kCloses = 100;
constexpr size_t kPage = 4096;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

struct Pair {
  SendComm* s = nullptr;
  RecvComm* r = nullptr;
};

::testing::AssertionResult open_pair(int dev_a, int dev_b, Pair* p) {
  char handle[kHandleSize];
  ListenComm* l = nullptr;
  Status st = listen(dev_b, handle, &l);
  if (!st.is_ok()) return ::testing::AssertionFailure() << "listen: " << st.message();
  const auto t0 = Clock::now();
  while (p->s == nullptr || p->r == nullptr) {
    if (ms_since(t0) > 60000) return ::testing::AssertionFailure() << "not connected in 60 s";
    if (p->s == nullptr && !(st = connect(dev_a, handle, CommConfig{}, &p->s)).is_ok())
      return ::testing::AssertionFailure() << "connect: " << st.message();
    if (p->r == nullptr && !(st = accept(l, &p->r)).is_ok())
      return ::testing::AssertionFailure() << "accept: " << st.message();
  }
  if (!(st = close_listen(l)).is_ok())
    return ::testing::AssertionFailure() << "closeListen: " << st.message();
  return ::testing::AssertionSuccess();
}

// One message s -> r from src into dst (registered by ms, mr), bytes checked.
::testing::AssertionResult pass_message(Pair& p, uint8_t* src, MemHandle* ms, uint8_t* dst,
                                        MemHandle* mr, size_t n) {
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(i * 7 + 3);
  std::memset(dst, 0, n);
  Request *rq = nullptr, *sq = nullptr;
  void* d = dst;
  size_t cap = n;
  int tag = 1;
  Status st = irecv(p.r, 1, &d, &cap, &tag, &mr, &rq);
  if (!st.is_ok()) return ::testing::AssertionFailure() << "irecv: " << st.message();
  const auto t0 = Clock::now();
  while (sq == nullptr) {
    if (ms_since(t0) > 30000) return ::testing::AssertionFailure() << "isend never posted";
    st = isend(p.s, src, n, tag, ms, &sq);
    if (!st.is_ok() && !st.is_again()) return ::testing::AssertionFailure() << st.message();
  }
  int rdone = 0, sdone = 0;
  while (!rdone || !sdone) {
    if (ms_since(t0) > 30000) return ::testing::AssertionFailure() << "message not delivered";
    if (!rdone && !(st = test(rq, &rdone, nullptr)).is_ok())
      return ::testing::AssertionFailure() << "test(recv): " << st.message();
    if (!sdone && !(st = test(sq, &sdone, nullptr)).is_ok())
      return ::testing::AssertionFailure() << "test(send): " << st.message();
  }
  if (std::memcmp(src, dst, n) != 0) return ::testing::AssertionFailure() << "bytes differ";
  return ::testing::AssertionSuccess();
}

TEST(MrScale, TenThousandRegistrationsAndClosesDoNotWalkTheCache) {
  auto pair = rdmatest::test_pair();
  SLUICE_REQUIRE_PAIR(pair);
  ASSERT_TRUE(engine_acquire(nullptr).is_ok());
  struct Release {
    ~Release() { engine_release(); }
  } release;
  int dev_a = -1, dev_b = -1;
  ASSERT_TRUE(rdmatest::core_pair_devices(pair, &dev_a, &dev_b));
  Pair main_pair;
  ASSERT_TRUE(open_pair(dev_a, dev_b, &main_pair));
  const long mr0 = count_own("mr");

  // 10,000 buffers, one page each, every other page (so no registration contains another).
  auto* mem = static_cast<uint8_t*>(std::aligned_alloc(kPage, 2 * kPage * kRegs));
  ASSERT_NE(mem, nullptr);
  std::memset(mem, 0, 2 * kPage * kRegs);
  std::vector<MemHandle*> mh(kRegs, nullptr);
  auto t0 = Clock::now();
  for (int i = 0; i < kRegs; ++i) {
    Status st = reg_mr(main_pair.r, mem + 2 * kPage * i, kPage, MemType::kHost, &mh[i]);
    ASSERT_TRUE(st.is_ok()) << "registration " << i << ": " << st.message();
  }
  const double reg_ms = ms_since(t0);
  if (mr0 >= 0) {
    EXPECT_EQ(count_own("mr"), mr0 + kRegs) << "one MR per disjoint buffer";
  }
  // A range inside a live registration shares its MR (the cache's rule, found by the index).
  MemHandle* inner = nullptr;
  ASSERT_TRUE(
      reg_mr(main_pair.r, mem + 2 * kPage * 777 + 100, 200, MemType::kHost, &inner).is_ok());
  if (mr0 >= 0) {
    EXPECT_EQ(count_own("mr"), mr0 + kRegs) << "the inner range got its own MR";
  }
  ASSERT_TRUE(dereg_mr(main_pair.r, inner).is_ok());

  // A message through registration 5000 (receive side) while the 10,000 are held.
  std::vector<uint8_t> src(kPage);
  MemHandle* ms = nullptr;
  ASSERT_TRUE(reg_mr(main_pair.s, src.data(), src.size(), MemType::kHost, &ms).is_ok());
  ASSERT_TRUE(pass_message(main_pair, src.data(), ms, mem + 2 * kPage * 5000, mh[5000], kPage));

  // Closes while the cache holds 10,000 registrations.
  std::vector<Pair> extra(kCloses);
  for (int i = 0; i < kCloses; ++i) ASSERT_TRUE(open_pair(dev_a, dev_b, &extra[i])) << i;
  t0 = Clock::now();
  for (Pair& p : extra) {
    ASSERT_TRUE(close_send(p.s).is_ok());
    ASSERT_TRUE(close_recv(p.r).is_ok());
  }
  const double close_ms = ms_since(t0);

  t0 = Clock::now();
  for (int i = 0; i < kRegs; ++i) ASSERT_TRUE(dereg_mr(main_pair.r, mh[i]).is_ok()) << i;
  const double dereg_ms = ms_since(t0);
  if (mr0 >= 0) {
    EXPECT_EQ(count_own("mr"), mr0 + 1) << "MRs left behind (the sender's is kept)";
  }

  // One buffer, 10,000 registrations: one MR with 10,000 users.
  t0 = Clock::now();
  for (int i = 0; i < kRegs; ++i) {
    ASSERT_TRUE(reg_mr(main_pair.r, mem, kPage, MemType::kHost, &mh[i]).is_ok()) << i;
  }
  const double same_reg_ms = ms_since(t0);
  if (mr0 >= 0) {
    EXPECT_EQ(count_own("mr"), mr0 + 2) << "10,000 users of one buffer share one MR";
  }
  t0 = Clock::now();
  for (int i = 0; i < kRegs; ++i) ASSERT_TRUE(dereg_mr(main_pair.r, mh[i]).is_ok()) << i;
  const double same_dereg_ms = ms_since(t0);
  if (mr0 >= 0) {
    EXPECT_EQ(count_own("mr"), mr0 + 1);
  }

  std::printf(
      "%d registrations of disjoint pages: %.0f ms (%.1f us each); %d comm closes with "
      "them held: %.0f ms (%.2f ms each); %d deregistrations: %.0f ms (%.1f us each)\n",
      kRegs, reg_ms, 1000 * reg_ms / kRegs, 2 * kCloses, close_ms, close_ms / (2 * kCloses), kRegs,
      dereg_ms, 1000 * dereg_ms / kRegs);
  std::printf(
      "one page registered %d times: %.0f ms (%.1f us each); deregistered: %.0f ms "
      "(%.1f us each)\n",
      kRegs, same_reg_ms, 1000 * same_reg_ms / kRegs, same_dereg_ms, 1000 * same_dereg_ms / kRegs);
  ASSERT_TRUE(dereg_mr(main_pair.s, ms).is_ok());
  EXPECT_TRUE(close_send(main_pair.s).is_ok());
  EXPECT_TRUE(close_recv(main_pair.r).is_ok());
  if (mr0 >= 0) {
    EXPECT_LE(count_own("mr"), mr0 - 2) << "the pair's own MRs not released";
  }
  std::free(mem);
}

}  // namespace
