// A fused comm whose member adapter refuses the eager pool's registration (docs/eager.md, "Fused
// comms"): core_eager_keys_refused runs this binary without CAP_IPC_LOCK and with RLIMIT_MEMLOCK
// (48 MiB) above one registration of the pool (SLUICE_EAGER_RINGS=512: 34 MB) but below two, so
// the pool is made and registered on its own adapter and the kernel refuses it on the fused
// device's second member, for real (the pinned pages are counted per registration). Every comm of
// that fused device then goes by clear-to-send, every byte delivered; the refusal is said once at
// WARN and is not tried again: every later comm that spans the same adapters gets it at INFO, as
// remembered (before, each comm pinned the whole pool again for the same refusal, and warned). A
// one-port pair on the pool's own adapter still goes eagerly.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "comm/engine.h"
#include "core_pair.h"
#include "rdma_env.h"
#include "sluice/core/api.h"

namespace {

using namespace sluice;
using Clock = std::chrono::steady_clock;

std::atomic<int> g_warned{0};      // "eager path off for this comm" at WARN
std::atomic<int> g_remembered{0};  // the same at INFO, given as remembered

void sink(int level, unsigned long, const char* file, int line, const char* fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const bool off = std::strstr(msg, "eager path off for this comm") != nullptr;
  if (level <= kLogWarn) {
    g_warned += off;
    std::fprintf(stderr, "%ssluice WARN %s:%d %s\n", rdmatest::warn_prefix(), file, line, msg);
  } else if (level == kLogInfo && off) {
    g_remembered += std::strstr(msg, "not tried again") != nullptr;
    std::fprintf(stderr, "sluice INFO %s\n", msg);
  }
}

// Whether this process holds CAP_IPC_LOCK (bit 14 of CapEff), which lifts RLIMIT_MEMLOCK.
bool has_ipc_lock() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    return (std::strtoull(line.c_str() + 7, nullptr, 16) >> 14 & 1u) != 0;
  }
  return true;
}

class CoreEagerKeys : public ::testing::Test {
 protected:
  struct Pair {
    SendComm* s = nullptr;
    RecvComm* r = nullptr;
    MemHandle *ms = nullptr, *mr = nullptr;
  };

  void SetUp() override {
    auto pair = rdmatest::test_pair();
    SLUICE_REQUIRE_PAIR(pair);
    auto cfg = load_config_from_environment();
    ASSERT_TRUE(cfg.is_ok());
    ASSERT_EQ(cfg.value().eager_rings, 512) << "run it as core_eager_keys_refused (core.cmake)";
    ASSERT_FALSE(has_ipc_lock()) << "run it without CAP_IPC_LOCK (core.cmake: setpriv)";
    rlimit rl{};
    ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &rl), 0);
    ASSERT_EQ(rl.rlim_cur, kMemlock) << "run it under prlimit --memlock (core.cmake)";
    ASSERT_TRUE(engine_acquire(sink).is_ok());
    acquired_ = true;
    ASSERT_TRUE(rdmatest::core_pair_devices(pair, &dev_a_, &dev_b_));
    if (dev_a_ == dev_b_) GTEST_SKIP() << "one port only (loopback pair): nothing to fuse";
    Status st = engine()->test_add_vdevice({dev_a_, dev_b_}, {1, 1}, &fused_);
    ASSERT_TRUE(st.is_ok()) << st.message();
    src_.resize(kBuf);
    dst_.resize(kBuf);
    for (size_t i = 0; i < kBuf; ++i) src_[i] = static_cast<uint8_t>((i * 2654435761u) >> 9);
  }
  void TearDown() override {
    for (Pair& p : pairs_) close(&p);
    if (acquired_) engine_release();
  }

  // A send comm on `ds` connected to a receive comm on `dr` (the listen closed after accept),
  // with the test's buffers registered on each.
  Pair& open(int ds, int dr) {
    pairs_.emplace_back();
    Pair& p = pairs_.back();
    char handle[kHandleSize];
    ListenComm* l = nullptr;
    EXPECT_TRUE(listen(dr, handle, &l).is_ok());
    auto deadline = Clock::now() + std::chrono::seconds(60);
    while ((p.s == nullptr || p.r == nullptr) && Clock::now() < deadline) {
      if (p.s == nullptr) {
        EXPECT_TRUE(connect(ds, handle, CommConfig{}, &p.s).is_ok());
      }
      if (p.r == nullptr) {
        EXPECT_TRUE(accept(l, &p.r).is_ok());
      }
    }
    EXPECT_TRUE(close_listen(l).is_ok());
    if (p.s == nullptr || p.r == nullptr) return p;
    EXPECT_TRUE(reg_mr(p.s, src_.data(), src_.size(), MemType::kHost, &p.ms).is_ok());
    EXPECT_TRUE(reg_mr(p.r, dst_.data(), dst_.size(), MemType::kHost, &p.mr).is_ok());
    return p;
  }
  void close(Pair* p) {
    if (p->s != nullptr) {
      if (p->ms != nullptr) {
        EXPECT_TRUE(dereg_mr(p->s, p->ms).is_ok());
      }
      EXPECT_TRUE(close_send(p->s).is_ok());
    }
    if (p->r != nullptr) {
      if (p->mr != nullptr) {
        EXPECT_TRUE(dereg_mr(p->r, p->mr).is_ok());
      }
      EXPECT_TRUE(close_recv(p->r).is_ok());
    }
    *p = Pair{};
  }
  static Status wait(Request* req, size_t* size) {
    auto deadline = Clock::now() + std::chrono::seconds(60);
    int done = 0;
    size_t sizes[8] = {};
    while (!done) {
      if (Clock::now() > deadline) return Status(Code::kInternalError, "request timed out");
      if (Status st = test(req, &done, sizes); !st.is_ok()) return st;
    }
    if (size != nullptr) *size = sizes[0];
    return Status::ok();
  }
  // n messages of 8..64 bytes, then one of 100,000, each receive posted before its send (an isend
  // that says "again" retried while the receive is tested); every byte and size checked. Returns
  // the eager WRITEs the sender posted.
  uint64_t stream(Pair& p, int n) {
    CommStats s0;
    EXPECT_TRUE(comm_stats(p.s, &s0).is_ok());
    for (int k = 0; k <= n; ++k) {
      const size_t size = k == n ? 100000 : 8 + static_cast<size_t>(k * 7) % 57;
      const size_t off = static_cast<size_t>(k) * 64;
      std::memset(dst_.data(), 0xee, size + 1);
      Request *rq = nullptr, *sq = nullptr;
      void* d = dst_.data();
      size_t cap = kBuf / 2;
      int tag = 3;
      EXPECT_TRUE(irecv(p.r, 1, &d, &cap, &tag, &p.mr, &rq).is_ok()) << k;
      auto deadline = Clock::now() + std::chrono::seconds(30);
      Status st;
      bool recv_done = false;
      size_t got = 0;
      for (;;) {
        st = isend(p.s, src_.data() + off, size, tag, p.ms, &sq);
        if (!st.is_again() || Clock::now() > deadline) break;
        int done = 0;
        size_t sizes[8] = {};
        if (!recv_done && test(rq, &done, sizes).is_ok() && done) {
          recv_done = true;
          got = sizes[0];
        }
      }
      EXPECT_TRUE(st.is_ok()) << "message " << k << ": " << st.message();
      if (!st.is_ok()) return 0;
      if (!recv_done) {
        EXPECT_TRUE(wait(rq, &got).is_ok()) << k;
      }
      EXPECT_TRUE(wait(sq, nullptr).is_ok()) << k;
      EXPECT_EQ(got, size) << k;
      EXPECT_EQ(std::memcmp(dst_.data(), src_.data() + off, size), 0) << k;
      EXPECT_EQ(dst_[size], 0xee) << k;
    }
    CommStats s1;
    EXPECT_TRUE(comm_stats(p.s, &s1).is_ok());
    return s1.eager - s0.eager;
  }
  static EagerState state(void* comm) {
    CommStatsV2 st;
    EXPECT_TRUE(comm_stats_v2(comm, &st).is_ok());
    return st.eager;
  }

  static constexpr rlim_t kMemlock = 48ull << 20;  // core.cmake's prlimit --memlock
  static constexpr size_t kBuf = 256u << 10;
  bool acquired_ = false;
  int dev_a_ = -1, dev_b_ = -1, fused_ = -1;
  std::vector<Pair> pairs_;
  std::vector<uint8_t> src_, dst_;
};

TEST_F(CoreEagerKeys, ARefusedMemberRegistrationIsRememberedAndItsCommsGoByClearToSend) {
  constexpr int kMsgs = 40;
  pairs_.reserve(3);
  // The first fused pair: both of its comms ask for the pool's keys on the second member; the
  // first ask is refused by the kernel (WARN), the second is given that refusal (INFO).
  Pair& p0 = open(fused_, fused_);
  ASSERT_TRUE(p0.s != nullptr && p0.r != nullptr);
  EXPECT_EQ(state(p0.s), EagerState::kWithout);
  EXPECT_EQ(state(p0.r), EagerState::kOff);
  EXPECT_EQ(stream(p0, kMsgs), 0u) << "a fused comm without the pool's keys sent eagerly";
  EXPECT_EQ(g_warned.load(), 1) << "the refusal is said once at WARN";
  EXPECT_EQ(g_remembered.load(), 1);
  // A second fused pair: not tried again.
  Pair& p1 = open(fused_, fused_);
  ASSERT_TRUE(p1.s != nullptr && p1.r != nullptr);
  EXPECT_EQ(state(p1.s), EagerState::kWithout);
  EXPECT_EQ(state(p1.r), EagerState::kOff);
  EXPECT_EQ(stream(p1, kMsgs), 0u);
  EXPECT_EQ(g_warned.load(), 1) << "a later comm tried the refused registration again";
  EXPECT_EQ(g_remembered.load(), 3);
  // The pool itself is sound: a pair on its own adapter goes eagerly.
  Pair& p2 = open(dev_a_, dev_a_);
  ASSERT_TRUE(p2.s != nullptr && p2.r != nullptr);
  EXPECT_GE(stream(p2, kMsgs), kMsgs / 2u) << "the pool's own adapter lost its eager path";
  EXPECT_EQ(state(p2.s), EagerState::kOn);
  EXPECT_EQ(state(p2.r), EagerState::kOn);
  EXPECT_EQ(g_warned.load(), 1);
}

}  // namespace
