// Core data path over real verbs, through core's API (the plugin layer's tests drive the same paths
// through the exported NCCL tables). One process; connect and accept alternate in one thread.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core_pair.h"
#include "rdma_env.h"
#include "sluice/core/api.h"

namespace {

using namespace sluice;
using Clock = std::chrono::steady_clock;

// Core's log on stderr at the level SLUICE_LOG asks (none|warn|info|trace, default warn), as the
// fallback sink would; the WARNs a negative test provokes are marked "[expected] ".
void test_sink(int level, unsigned long, const char* file, int line, const char* fmt, ...) {
  static const int max_level = [] {
    const char* v = std::getenv("SLUICE_LOG");
    std::string s = v != nullptr ? v : "warn";
    return s == "none" ? kLogNone : s == "info" ? kLogInfo : s == "trace" ? kLogTrace : kLogWarn;
  }();
  if (level > max_level && level != kLogInfo) return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (level == kLogInfo) rdmatest::count_cm_choice(msg);  // SLUICE_CM checks (check_cm_used)
  if (level > max_level) return;
  std::fprintf(stderr, "%ssluice %s %s:%d %s\n", level == kLogWarn ? rdmatest::warn_prefix() : "",
               level == kLogWarn ? "WARN" : "INFO", file, line, msg);
}

class CoreDatapath : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pair = rdmatest::test_pair();
    SLUICE_REQUIRE_PAIR(pair);
    Status st = engine_acquire(test_sink);
    ASSERT_TRUE(st.is_ok()) << st.message();
    acquired_ = true;
    ASSERT_GE(device_count(), 1);
    // core's indices of the test pair's ports (core names them "dev" or "dev:port").
    ASSERT_TRUE(rdmatest::core_pair_devices(pair, &dev_a_, &dev_b_));
    std::printf("ports: %s (core devices %d -> %d)\n", pair.describe().c_str(), dev_a_, dev_b_);
  }
  void TearDown() override {
    if (acquired_) engine_release();
  }

  // Connects dev_s -> dev_r; fails the test after 60 s.
  void open_pair(int dev_s, int dev_r, SendComm** s, RecvComm** r) {
    const rdmatest::CmCounts cm_before = rdmatest::cm_counts();
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
    EXPECT_EQ(rdmatest::check_cm_used(cm_before), "");
  }

  // Waits for a request; returns the status of the failing test() call, if any.
  Status wait(Request* req, size_t* sizes) {
    auto deadline = Clock::now() + std::chrono::seconds(60);
    int done = 0;
    while (!done) {
      if (Clock::now() > deadline) return Status(Code::kInternalError, "request timed out");
      Status st = test(req, &done, sizes);
      if (!st.is_ok()) return st;
    }
    return Status::ok();
  }

  // Tests receive `rq` once while a send waits (NCCL's proxy tests its receives while it retries
  // its sends: the eager path's receiver may hold a clear-to-send back until then). A receive
  // that fails is remembered (its request is gone).
  void progress(Request* rq) {
    if (rq == nullptr || rq_failed_) return;
    int done = 0;
    size_t sz[8];
    Status st = test(rq, &done, sz);
    EXPECT_EQ(done, 0) << "a receive completed before its send was posted";
    if (!st.is_ok()) {
      rq_failed_ = true;
      rq_status_ = st;
    }
  }

  bool rq_failed_ = false;
  Status rq_status_;
  bool acquired_ = false;
  int dev_a_ = 0;  // the test pair (rdma_env.h), as core's device indices
  int dev_b_ = 0;
};

void fill(std::vector<uint8_t>& b, size_t n, unsigned salt) {
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>((i * 2654435761u + salt) >> 7);
}

TEST_F(CoreDatapath, SizesAreDeliveredExactly) {
  SendComm* s;
  RecvComm* r;
  ASSERT_NO_FATAL_FAILURE(open_pair(dev_a_, dev_b_, &s, &r));
  const size_t kMax = (8u << 20) + 3;
  std::vector<uint8_t> src(kMax), dst(kMax + 64);
  MemHandle *ms = nullptr, *mr = nullptr;
  ASSERT_TRUE(reg_mr(s, src.data(), src.size(), MemType::kHost, &ms).is_ok());
  ASSERT_TRUE(reg_mr(r, dst.data(), dst.size(), MemType::kHost, &mr).is_ok());
  unsigned salt = 1;
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{4095}, size_t{4096}, size_t{65537},
                   size_t{1} << 20, kMax}) {
    fill(src, n, ++salt);
    std::memset(dst.data(), 0xab, dst.size());
    Request *rq = nullptr, *sq = nullptr;
    void* d = dst.data();
    size_t cap = kMax;  // posted buffer larger than the message
    int tag = 5;
    ASSERT_TRUE(irecv(r, 1, &d, &cap, &tag, &mr, &rq).is_ok());
    ASSERT_NE(rq, nullptr);
    auto deadline = Clock::now() + std::chrono::seconds(30);
    while (sq == nullptr) {
      ASSERT_LT(Clock::now(), deadline);
      Status st = isend(s, src.data(), n, tag, ms, &sq);
      ASSERT_TRUE(st.is_ok() || st.is_again()) << st.message();
      if (sq == nullptr) progress(rq);  // as NCCL's proxy tests its receives meanwhile
    }
    size_t got = 999;
    Status st = wait(rq, &got);
    ASSERT_TRUE(st.is_ok()) << st.message();
    st = wait(sq, nullptr);
    ASSERT_TRUE(st.is_ok()) << st.message();
    EXPECT_EQ(got, n);
    EXPECT_EQ(std::memcmp(src.data(), dst.data(), n), 0) << "size " << n;
    EXPECT_EQ(dst[n], 0xab) << "wrote past the message, size " << n;
  }
  EXPECT_TRUE(dereg_mr(s, ms).is_ok());
  EXPECT_TRUE(dereg_mr(r, mr).is_ok());
  EXPECT_TRUE(close_send(s).is_ok());
  EXPECT_TRUE(close_recv(r).is_ok());
}

TEST_F(CoreDatapath, GroupedReceiveAndTooLargeMessage) {
  SendComm* s;
  RecvComm* r;
  ASSERT_NO_FATAL_FAILURE(open_pair(dev_a_, dev_b_, &s, &r));
  std::vector<uint8_t> src(1 << 20), dst(1 << 20);
  MemHandle *ms = nullptr, *mr = nullptr;
  ASSERT_TRUE(reg_mr(s, src.data(), src.size(), MemType::kHost, &ms).is_ok());
  ASSERT_TRUE(reg_mr(r, dst.data(), dst.size(), MemType::kHost, &mr).is_ok());
  fill(src, src.size(), 9);
  for (int n = 1; n <= 8; ++n) {
    void* d[8];
    size_t cap[8];
    int tags[8];
    MemHandle* mhs[8];
    for (int i = 0; i < n; ++i) {
      d[i] = dst.data() + i * 100000;
      cap[i] = 90000;
      tags[i] = 100 + i;
      mhs[i] = mr;
    }
    std::memset(dst.data(), 0, dst.size());
    Request* rq = nullptr;
    ASSERT_TRUE(irecv(r, n, d, cap, tags, mhs, &rq).is_ok());
    std::vector<Request*> sqs;
    for (int i = n - 1; i >= 0; --i) {  // any order of tags within the group
      Request* sq = nullptr;
      auto deadline = Clock::now() + std::chrono::seconds(30);
      while (sq == nullptr) {
        ASSERT_LT(Clock::now(), deadline);
        Status st = isend(s, src.data() + i * 1000, 1000 + i * 333, tags[i], ms, &sq);
        ASSERT_TRUE(st.is_ok() || st.is_again()) << st.message();
        if (sq == nullptr) progress(rq);
      }
      sqs.push_back(sq);
    }
    size_t got[8] = {};
    ASSERT_TRUE(wait(rq, got).is_ok());
    for (Request* sq : sqs) ASSERT_TRUE(wait(sq, nullptr).is_ok());
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(got[i], 1000u + i * 333) << "n " << n << " i " << i;
      EXPECT_EQ(std::memcmp(dst.data() + i * 100000, src.data() + i * 1000, got[i]), 0);
    }
  }
  // Too large: an error on both sides, nothing written.
  rdmatest::ExpectWarns expected;
  std::memset(dst.data(), 0x5c, dst.size());
  void* d = dst.data();
  size_t cap = 100;
  int tag = 1;
  Request *rq = nullptr, *sq = nullptr;
  ASSERT_TRUE(irecv(r, 1, &d, &cap, &tag, &mr, &rq).is_ok());
  Status st;
  auto deadline = Clock::now() + std::chrono::seconds(30);
  do {
    ASSERT_LT(Clock::now(), deadline);
    st = isend(s, src.data(), 101, tag, ms, &sq);
    if (st.is_again()) progress(rq);
  } while (st.is_again());
  // With the eager path on (core_datapath_eager) the 101 bytes may go eagerly, before the sender
  // saw the receive's size: the receiver refuses them, and the sender learns it (failure notice).
  while (st.is_ok()) {
    ASSERT_LT(Clock::now(), deadline);
    progress(rq);
    int done = 0;
    st = test(sq, &done, nullptr);
    if (st.is_ok() && done) st = isend(s, src.data(), 1, tag, ms, &sq);
    if (st.is_again()) st = Status::ok();
  }
  ASSERT_EQ(st.code(), Code::kInvalidUsage) << st.message();
  EXPECT_NE(st.message().find("101 bytes"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(" 100 bytes"), std::string::npos) << st.message();
  Status rs = rq_failed_ ? rq_status_ : wait(rq, nullptr);
  ASSERT_EQ(rs.code(), Code::kInvalidUsage) << rs.message();
  EXPECT_NE(rs.message().find("101 bytes"), std::string::npos) << rs.message();
  for (uint8_t b : dst) ASSERT_EQ(b, 0x5c);
  // The failure is sticky with the same reason.
  Status again = isend(s, src.data(), 1, tag, ms, &sq);
  EXPECT_EQ(again.message(), st.message());
  EXPECT_TRUE(dereg_mr(s, ms).is_ok());
  EXPECT_TRUE(dereg_mr(r, mr).is_ok());
  EXPECT_TRUE(close_send(s).is_ok());
  EXPECT_TRUE(close_recv(r).is_ok());
}

TEST_F(CoreDatapath, ManyRandomMessagesWithFullWindow) {
  SendComm* s;
  RecvComm* r;
  ASSERT_NO_FATAL_FAILURE(open_pair(dev_a_, dev_b_, &s, &r));
  constexpr int kWindow = 32;
  constexpr size_t kSlot = 64 << 10;
  std::vector<uint8_t> src(kWindow * kSlot), dst(kWindow * kSlot);
  MemHandle *ms = nullptr, *mr = nullptr;
  ASSERT_TRUE(reg_mr(s, src.data(), src.size(), MemType::kHost, &ms).is_ok());
  ASSERT_TRUE(reg_mr(r, dst.data(), dst.size(), MemType::kHost, &mr).is_ok());
  std::mt19937 rng(1234);
  const int kMessages = 20000;
  std::vector<size_t> sizes(kMessages);
  for (auto& n : sizes)
    n = static_cast<size_t>(std::exp2(std::uniform_real_distribution<double>(0, 16)(rng))) - 1;
  int posted_r = 0, posted_s = 0, done_r = 0, done_s = 0;
  std::vector<Request*> rq(kWindow), sq(kWindow);
  auto deadline = Clock::now() + std::chrono::seconds(240);
  while (done_r < kMessages || done_s < kMessages) {
    ASSERT_LT(Clock::now(), deadline) << done_r << "/" << done_s;
    if (posted_r < kMessages && posted_r - done_r < kWindow) {
      int k = posted_r % kWindow;
      void* d = dst.data() + k * kSlot;
      size_t cap = kSlot;
      int tag = 0;
      Request* q = nullptr;
      Status st = irecv(r, 1, &d, &cap, &tag, &mr, &q);
      ASSERT_TRUE(st.is_ok() || st.is_again()) << st.message();
      if (q) rq[k] = q, ++posted_r;
    }
    if (posted_s < posted_r && posted_s - done_s < kWindow) {
      int k = posted_s % kWindow;
      uint8_t* p = src.data() + k * kSlot;
      for (size_t i = 0; i < sizes[posted_s]; i += 61) p[i] = static_cast<uint8_t>(posted_s + i);
      Request* q = nullptr;
      Status st = isend(s, p, sizes[posted_s], 0, ms, &q);
      ASSERT_TRUE(st.is_ok() || st.is_again()) << st.message();
      if (q) sq[k] = q, ++posted_s;
    }
    if (done_s < posted_s) {
      int dn = 0;
      Status st = test(sq[done_s % kWindow], &dn, nullptr);
      ASSERT_TRUE(st.is_ok()) << st.message();
      if (dn) ++done_s;
    }
    if (done_r < posted_r) {
      int dn = 0;
      size_t got = 0;
      int k = done_r % kWindow;
      Status st = test(rq[k], &dn, &got);
      ASSERT_TRUE(st.is_ok()) << st.message();
      if (dn) {
        ASSERT_EQ(got, sizes[done_r]) << "message " << done_r;
        const uint8_t* p = dst.data() + k * kSlot;
        for (size_t i = 0; i < got; i += 61)
          ASSERT_EQ(p[i], static_cast<uint8_t>(done_r + i)) << "message " << done_r;
        ++done_r;
      }
    }
  }
  EXPECT_TRUE(dereg_mr(s, ms).is_ok());
  EXPECT_TRUE(dereg_mr(r, mr).is_ok());
  EXPECT_TRUE(close_send(s).is_ok());
  EXPECT_TRUE(close_recv(r).is_ok());
}

TEST_F(CoreDatapath, CorruptHandleAndBadBuffersAreCleanErrors) {
  char handle[kHandleSize];
  std::memset(handle, 0x42, sizeof handle);
  SendComm* s = nullptr;
  rdmatest::ExpectWarns expected;
  Status st = connect(dev_a_, handle, CommConfig{}, &s);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.message();
  EXPECT_EQ(s, nullptr);
  RecvComm* r = nullptr;
  ASSERT_NO_FATAL_FAILURE(open_pair(dev_a_, dev_b_, &s, &r));
  std::vector<uint8_t> a(8192), b(8192);
  MemHandle* ma = nullptr;
  ASSERT_TRUE(reg_mr(r, a.data(), 4096, MemType::kHost, &ma).is_ok());
  void* d = b.data();  // not registered
  size_t cap = 100;
  int tag = 0;
  Request* q = reinterpret_cast<Request*>(0x1);
  st = irecv(r, 1, &d, &cap, &tag, &ma, &q);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.message();
  EXPECT_EQ(q, nullptr);
  EXPECT_TRUE(dereg_mr(r, ma).is_ok());
  EXPECT_TRUE(close_send(s).is_ok());
  EXPECT_TRUE(close_recv(r).is_ok());
}

}  // namespace
