// The eager path on real verbs (issue 33, docs/eager.md), through core's API: SLUICE_EAGER_MAX is
// set by core.cmake (4096). Sizes across the threshold in one stream, every byte checked; sends
// ahead of their receives (the ring holds them, the receives complete at irecv, their entries
// batched); grouped receives mixing eager and rendezvous parts in any order; a message larger than
// its receive buffer failing both sides; completion in posting order; and the counters that show
// which path each message took.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "core_pair.h"
#include "rdma_env.h"
#include "sluice/core/api.h"

namespace {

using namespace sluice;
using Clock = std::chrono::steady_clock;

constexpr size_t kEagerMax = 4096;  // core.cmake's SLUICE_EAGER_MAX for this test

void test_sink(int level, unsigned long, const char* file, int line, const char* fmt, ...) {
  if (level > kLogWarn) return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "%ssluice WARN %s:%d %s\n", rdmatest::warn_prefix(), file, line, msg);
}

class CoreEager : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pair = rdmatest::test_pair();
    SLUICE_REQUIRE_PAIR(pair);
    ASSERT_TRUE(engine_acquire(test_sink).is_ok());
    acquired_ = true;
    ASSERT_TRUE(rdmatest::core_pair_devices(pair, &dev_a_, &dev_b_));
    ASSERT_NO_FATAL_FAILURE(open_pair());
    src_.resize(kBuf);
    dst_.resize(kBuf);
    for (size_t i = 0; i < kBuf; ++i) src_[i] = static_cast<uint8_t>((i * 2654435761u) >> 9);
    ASSERT_TRUE(reg_mr(s_, src_.data(), src_.size(), MemType::kHost, &ms_).is_ok());
    ASSERT_TRUE(reg_mr(r_, dst_.data(), dst_.size(), MemType::kHost, &mr_).is_ok());
  }
  void TearDown() override {
    if (ms_ != nullptr) {
      EXPECT_TRUE(dereg_mr(s_, ms_).is_ok());
    }
    if (mr_ != nullptr) {
      EXPECT_TRUE(dereg_mr(r_, mr_).is_ok());
    }
    if (s_ != nullptr) {
      EXPECT_TRUE(close_send(s_).is_ok());
    }
    if (r_ != nullptr) {
      EXPECT_TRUE(close_recv(r_).is_ok());
    }
    if (acquired_) engine_release();
  }
  void stream(const std::vector<size_t>& sizes, int send_window, int recv_window);
  uint64_t batch_eager = 0, batch_writes = 0, batch_wrs = 0;  // stream()'s counts
  // A send comm on dev_a_ connected to a receive comm on dev_b_ (the listen closed after accept).
  void open_pair(SendComm** s, RecvComm** r) {
    char handle[kHandleSize];
    ListenComm* l = nullptr;
    ASSERT_TRUE(listen(dev_b_, handle, &l).is_ok());
    auto deadline = Clock::now() + std::chrono::seconds(60);
    while (*s == nullptr || *r == nullptr) {
      ASSERT_LT(Clock::now(), deadline);
      if (*s == nullptr) {
        ASSERT_TRUE(connect(dev_a_, handle, CommConfig{}, s).is_ok());
      }
      if (*r == nullptr) {
        ASSERT_TRUE(accept(l, r).is_ok());
      }
    }
    ASSERT_TRUE(close_listen(l).is_ok());
  }
  void open_pair() { open_pair(&s_, &r_); }
  // An isend retried while it says "again" (the receive comm is tested meanwhile, as NCCL's proxy
  // would progress it); returns the final status.
  Status send(size_t off, size_t n, int tag, Request** out, Request* progress = nullptr) {
    return send_on(s_, ms_, off, n, tag, out, progress);
  }
  // The same on any send comm and its handle (a receive test that fails ends the wait).
  Status send_on(SendComm* s, MemHandle* mh, size_t off, size_t n, int tag, Request** out,
                 Request* progress = nullptr) {
    auto deadline = Clock::now() + std::chrono::seconds(30);
    for (;;) {
      Status st = isend(s, src_.data() + off, n, tag, mh, out);
      if (!st.is_again()) return st;
      if (progress != nullptr) {
        int done = 0;
        size_t sz[8];
        if (Status t = test(progress, &done, sz); !t.is_ok()) return t;
        if (done) progress = nullptr;
      }
      if (Clock::now() > deadline) return Status(Code::kInternalError, "isend waited 30 s");
    }
  }
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
  Status recv1(size_t off, size_t cap, int tag, Request** out) {
    void* d = dst_.data() + off;
    return irecv(r_, 1, &d, &cap, &tag, &mr_, out);
  }
  CommStats stats(void* c) {
    CommStats st;
    EXPECT_TRUE(comm_stats(c, &st).is_ok());
    return st;
  }

  static constexpr size_t kBuf = 16u << 20;
  bool acquired_ = false;
  int dev_a_ = -1, dev_b_ = -1;
  SendComm* s_ = nullptr;
  RecvComm* r_ = nullptr;
  MemHandle *ms_ = nullptr, *mr_ = nullptr;
  std::vector<uint8_t> src_, dst_;
};

// One stream of sizes across the threshold, each receive posted when the previous one completed
// (NCCL's steady state), every byte and size checked; small messages go eagerly.
TEST_F(CoreEager, SizesAcrossTheThresholdInOneStream) {
  std::vector<size_t> sizes = {0, 1, kEagerMax - 1, kEagerMax, kEagerMax + 1, (4u << 20) + 3, 16,
                               0, 8, kEagerMax};
  std::mt19937 rng(3);
  for (int i = 0; i < 200; ++i)
    sizes.push_back(rng() % 3 == 0 ? kEagerMax + rng() % 100000 : rng() % (kEagerMax + 1));
  const CommStats s0 = stats(s_), r0 = stats(r_);
  size_t small = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const size_t n = sizes[k];
    const size_t off = (k * 4099) % (kBuf / 2);
    std::memset(dst_.data(), 0xee, n + 64);
    Request *rq = nullptr, *sq = nullptr;
    ASSERT_TRUE(recv1(0, kBuf / 2, 7, &rq).is_ok());
    ASSERT_TRUE(send(off, n, 7, &sq, rq).is_ok()) << "message " << k << " of " << n;
    size_t got = SIZE_MAX;
    ASSERT_TRUE(wait(rq, &got).is_ok()) << k;
    ASSERT_TRUE(wait(sq, nullptr).is_ok()) << k;
    ASSERT_EQ(got, n) << "message " << k;
    ASSERT_EQ(std::memcmp(dst_.data(), src_.data() + off, n), 0) << "message " << k;
    ASSERT_EQ(dst_[n], 0xee) << "message " << k << ": a byte past its size was written";
    small += n <= kEagerMax ? 1 : 0;
  }
  const CommStats s1 = stats(s_), r1 = stats(r_);
  std::printf("%zu messages (%zu small): %llu eager WRITEs, %llu eager copies, %llu CTS writes\n",
              sizes.size(), small, static_cast<unsigned long long>(s1.eager - s0.eager),
              static_cast<unsigned long long>(r1.eager - r0.eager),
              static_cast<unsigned long long>(r1.cts_writes - r0.cts_writes));
  // Receives posted one at a time before their send: most small ones find the clear-to-send
  // first (zero-copy, same packets); the eager path is taken where the send came first.
  EXPECT_EQ(s1.eager - s0.eager, r1.eager - r0.eager);
  EXPECT_LE(s1.eager - s0.eager, small);
}

// Sends ahead of their receives: after the first receive (which carries the grant and the credit),
// W small sends go before any receive is posted; each receive then completes at irecv from the
// ring, and their entries go out together.
TEST_F(CoreEager, SendsAheadOfTheirReceivesCompleteFromTheRing) {
  Request *rq = nullptr, *sq = nullptr;
  ASSERT_TRUE(recv1(0, 64, 1, &rq).is_ok());
  ASSERT_TRUE(send(0, 64, 1, &sq, rq).is_ok());
  ASSERT_TRUE(wait(rq, nullptr).is_ok());
  ASSERT_TRUE(wait(sq, nullptr).is_ok());
  for (int round = 0; round < 20; ++round) {
    const CommStats s0 = stats(s_), r0 = stats(r_);
    std::vector<Request*> sends;
    for (int i = 0; i < 8; ++i) {
      Request* q = nullptr;
      Status st = send(static_cast<size_t>(round * 8 + i) * 500, 100 + i * 37, 1, &q);
      ASSERT_TRUE(st.is_ok()) << st.message();
      sends.push_back(q);
    }
    // The eager WRITEs complete with no receive posted.
    for (Request* q : sends) ASSERT_TRUE(wait(q, nullptr).is_ok());
    EXPECT_EQ(stats(s_).eager - s0.eager, 8u) << "round " << round;
    for (int i = 0; i < 8; ++i) {
      Request* q = nullptr;
      std::memset(dst_.data() + i * 1000, 0, 1000);
      ASSERT_TRUE(recv1(i * 1000, 1000, 1, &q).is_ok());
      size_t got = 0;
      ASSERT_TRUE(wait(q, &got).is_ok());
      ASSERT_EQ(got, 100u + i * 37);
      ASSERT_EQ(std::memcmp(dst_.data() + i * 1000,
                            src_.data() + static_cast<size_t>(round * 8 + i) * 500, got),
                0);
    }
    const CommStats r1 = stats(r_);
    EXPECT_EQ(r1.eager - r0.eager, 8u);
    // Eight receives completed from the ring: their entries went out in at most two writes (held
    // until W/2 slots were freed), not eight.
    EXPECT_LE(r1.cts_writes - r0.cts_writes, 2u) << "round " << round;
  }
}

// The sender as far ahead as the credits let it, with no receive posted (a whole ring of messages,
// whatever SLUICE_EAGER_SLOTS: the ctest entries run 4, 16 and 32, the default): every send
// completes, then every receive posted later completes from the ring, in order, bytes and sizes
// intact.
TEST_F(CoreEager, AWholeRingOfMessagesAheadOfTheirReceives) {
  constexpr int kRank = 3;
  Request *rq = nullptr, *sq = nullptr;
  ASSERT_TRUE(recv1(0, 64, kRank, &rq).is_ok());
  ASSERT_TRUE(send(0, 64, kRank, &sq, rq).is_ok());
  ASSERT_TRUE(wait(rq, nullptr).is_ok());
  ASSERT_TRUE(wait(sq, nullptr).is_ok());
  for (int round = 0; round < 6; ++round) {
    std::vector<Request*> sends;
    std::vector<size_t> sizes;
    // Send until isend says "again" with every send complete: the credits are spent.
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    for (;;) {
      ASSERT_LT(Clock::now(), deadline) << "round " << round << ": " << sends.size() << " sent";
      ASSERT_LT(sends.size(), 200u) << "more sends than any ring holds went with no receive";
      const size_t n = 8 + (sends.size() * 13 + round) % 120;
      Request* q = nullptr;
      Status st = isend(s_, src_.data() + sends.size() * 512 + round, n, kRank, ms_, &q);
      if (st.is_ok()) {
        sends.push_back(q);
        sizes.push_back(n);
        continue;
      }
      ASSERT_TRUE(st.is_again()) << st.message();
      bool all_done = true;
      for (Request*& x : sends) {
        if (x == nullptr) continue;
        int done = 0;
        ASSERT_TRUE(test(x, &done, nullptr).is_ok());
        if (done) {
          x = nullptr;
        } else {
          all_done = false;
        }
      }
      if (all_done) break;
    }
    ASSERT_GE(sends.size(), 4u) << "round " << round;
    if (round == 0) std::fprintf(stderr, "[ahead] %zu sends ahead of any receive\n", sends.size());
    for (size_t i = 0; i < sends.size(); ++i) {
      Request* q = nullptr;
      std::memset(dst_.data() + i * 256, 0, 256);
      Status st = recv1(i * 256, 256, kRank, &q);
      ASSERT_TRUE(st.is_ok()) << "round " << round << " message " << i << ": " << st.message();
      size_t got = 0;
      ASSERT_TRUE(wait(q, &got).is_ok()) << "round " << round << " message " << i;
      ASSERT_EQ(got, sizes[i]) << "round " << round << " message " << i;
      ASSERT_EQ(std::memcmp(dst_.data() + i * 256, src_.data() + i * 512 + round, got), 0)
          << "round " << round << " message " << i;
    }
  }
}

// A sender whose eager sends all completed closes its comm (its rank finished: NCCL may destroy
// the communicator once its own operations are done) before the receiver posts their receives: the
// messages are in the receiver's ring, and every receive of them completes; only a receive for a
// message never sent fails, naming the peer's close.
TEST_F(CoreEager, MessagesInTheRingOutliveTheSendersClose) {
  constexpr int kRank = 5, kMsgs = 6;
  Request *rq = nullptr, *sq = nullptr;
  ASSERT_TRUE(recv1(0, 64, kRank, &rq).is_ok());
  ASSERT_TRUE(send(0, 64, kRank, &sq, rq).is_ok());
  ASSERT_TRUE(wait(rq, nullptr).is_ok());
  ASSERT_TRUE(wait(sq, nullptr).is_ok());
  const CommStats s0 = stats(s_);
  for (int i = 0; i < kMsgs; ++i) {
    Request* q = nullptr;
    ASSERT_TRUE(send(static_cast<size_t>(i) * 300, 40 + i, kRank, &q).is_ok());
    ASSERT_TRUE(wait(q, nullptr).is_ok());
  }
  ASSERT_EQ(stats(s_).eager - s0.eager, static_cast<uint64_t>(kMsgs));
  ASSERT_TRUE(dereg_mr(s_, ms_).is_ok());
  ms_ = nullptr;
  ASSERT_TRUE(close_send(s_).is_ok());
  s_ = nullptr;
  for (int i = 0; i < kMsgs; ++i) {
    Request* q = nullptr;
    Status st = recv1(static_cast<size_t>(i) * 100, 100, kRank, &q);
    ASSERT_TRUE(st.is_ok()) << "message " << i << ": " << st.message();
    size_t got = 0;
    st = wait(q, &got);
    ASSERT_TRUE(st.is_ok()) << "message " << i << ": " << st.message();
    ASSERT_EQ(got, 40u + i);
    ASSERT_EQ(std::memcmp(dst_.data() + i * 100, src_.data() + i * 300, got), 0) << i;
  }
  Request* q = nullptr;
  Status st = recv1(0, 100, kRank, &q);
  if (st.is_ok()) st = wait(q, nullptr);
  EXPECT_FALSE(st.is_ok()) << "a receive for a message never sent completed";
  EXPECT_NE(st.message().find("closed"), std::string::npos) << st.message();
}

// NCCL's steady state for small messages: receives posted ahead (4 here), each re-posted as one
// completes. Once the comm's traffic is eager the receiver holds each receive's clear-to-send back
// and the message comes through the ring: one WRITE per message on the sender, and the receiver's
// CTS writes are batched (W/2 receives per write, 16 at the default W), not one per receive. Then a
// large send asks for its clear-to-send and goes by rendezvous, and small ones go eagerly again.
// The tag is NCCL's: the sending rank, here one beyond 64 (each end numbers any tag value it
// meets).
TEST_F(CoreEager, HeldClearToSendForStreamsOfSmallMessages) {
  constexpr int kAhead = 4, kMsgs = 400, kRank = 1000;
  std::vector<Request*> rq(kMsgs, nullptr);
  int posted = 0;
  auto post = [&]() {
    const int k = posted++;
    ASSERT_TRUE(recv1(static_cast<size_t>(k % kAhead) * 64, 64, kRank, &rq[k]).is_ok());
  };
  for (int i = 0; i < kAhead; ++i) ASSERT_NO_FATAL_FAILURE(post());
  const CommStats s0 = stats(s_), r0 = stats(r_);
  int warm = 0;
  CommStats sw{}, rw{};
  for (int k = 0; k < kMsgs; ++k) {
    Request* sq = nullptr;
    ASSERT_TRUE(send(static_cast<size_t>(k) * 16, 16, kRank, &sq, rq[k]).is_ok()) << k;
    size_t got = 0;
    ASSERT_TRUE(wait(rq[k], &got).is_ok()) << k;
    ASSERT_EQ(got, 16u);
    ASSERT_EQ(std::memcmp(dst_.data() + static_cast<size_t>(k % kAhead) * 64,
                          src_.data() + static_cast<size_t>(k) * 16, 16),
              0)
        << k;
    ASSERT_TRUE(wait(sq, nullptr).is_ok()) << k;
    if (posted < kMsgs) {
      ASSERT_NO_FATAL_FAILURE(post());
    }
    if (k == 2 * kAhead) {  // past the receives published before the traffic was eager
      warm = k;
      sw = stats(s_);
      rw = stats(r_);
    }
  }
  const CommStats s1 = stats(s_), r1 = stats(r_);
  const uint64_t n = static_cast<uint64_t>(kMsgs - warm);
  std::printf(
      "%d messages of 16 B, %d ahead: %llu eager, %llu CTS writes, %llu sender WRs (%llu "
      "from message %d on)\n",
      kMsgs, kAhead, static_cast<unsigned long long>(s1.eager - s0.eager),
      static_cast<unsigned long long>(r1.cts_writes - r0.cts_writes),
      static_cast<unsigned long long>(s1.wrs - s0.wrs),
      static_cast<unsigned long long>(s1.wrs - sw.wrs), warm);
  // Nearly every one: a receive that waits for the sender to pass its FIFO slot publishes what it
  // holds, and a message may then find its clear-to-send.
  EXPECT_GE(s1.eager - sw.eager, n - n / 32) << "messages after the first few go eagerly";
  // Batches of W/2 (16 at the default), some cut short by such a wait: far from one write per
  // receive.
  EXPECT_LE(r1.cts_writes - rw.cts_writes, n / 4) << "clear-to-send writes are batched";
  // Every message carries the sender's FIFO head: no head report while messages flow (there was
  // one per 16 slots read: n / 16 more).
  EXPECT_LE(s1.wrs - sw.wrs, n + 2) << "one WRITE per message, and no head report";
  // A large message now: its receive's clear-to-send is held, the send asks for it.
  Request *big = nullptr, *sq = nullptr;
  ASSERT_TRUE(recv1(0, 1 << 20, kRank, &big).is_ok());
  const uint64_t cts_before = stats(r_).cts_writes;
  ASSERT_TRUE(send(4096, 100000, kRank, &sq, big).is_ok());
  size_t got = 0;
  ASSERT_TRUE(wait(big, &got).is_ok());
  ASSERT_TRUE(wait(sq, nullptr).is_ok());
  ASSERT_EQ(got, 100000u);
  ASSERT_EQ(std::memcmp(dst_.data(), src_.data() + 4096, got), 0);
  EXPECT_GE(stats(r_).cts_writes, cts_before + 1) << "published when asked";
  // Small again: eager once a small message completed.
  const uint64_t e0 = stats(s_).eager;
  for (int k = 0; k < 20; ++k) {
    Request* r = nullptr;
    ASSERT_TRUE(recv1(0, 64, kRank, &r).is_ok());
    ASSERT_TRUE(send(static_cast<size_t>(k) * 8, 8, kRank, &sq, r).is_ok());
    ASSERT_TRUE(wait(r, &got).is_ok());
    ASSERT_EQ(got, 8u);
    ASSERT_TRUE(wait(sq, nullptr).is_ok());
  }
  EXPECT_GE(stats(s_).eager - e0, 18u);
}

// Grouped receives whose parts come eagerly and by rendezvous, the sends in any order, some before
// the receive and some after.
TEST_F(CoreEager, GroupedReceivesMixEagerAndRendezvousParts) {
  std::mt19937 rng(11);
  uint64_t eager_before = stats(s_).eager;
  for (int round = 0; round < 60; ++round) {
    const int n = 1 + static_cast<int>(rng() % 4);
    void* d[8];
    size_t cap[8], want[8];
    int tags[8];
    MemHandle* mhs[8];
    for (int i = 0; i < n; ++i) {
      d[i] = dst_.data() + static_cast<size_t>(i) * 300000;
      cap[i] = 300000;
      tags[i] = 3 + i;
      mhs[i] = mr_;
      want[i] = rng() % 2 == 0 ? rng() % 2000 : kEagerMax + rng() % 200000;
      std::memset(d[i], 0, want[i] + 8);
    }
    std::vector<int> order(n);
    for (int i = 0; i < n; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    const int before = static_cast<int>(rng() % (n + 1));  // sends that go before the receive
    std::vector<Request*> sqs;
    Request* rq = nullptr;
    for (int k = 0; k < n; ++k) {
      if (k == before && rq == nullptr) {
        ASSERT_TRUE(irecv(r_, n, d, cap, tags, mhs, &rq).is_ok());
      }
      const int i = order[k];
      Request* q = nullptr;
      if (k < before && want[i] > kEagerMax) {
        // A large send cannot go before its receive: post the receive first.
        if (rq == nullptr) {
          ASSERT_TRUE(irecv(r_, n, d, cap, tags, mhs, &rq).is_ok());
        }
      }
      ASSERT_TRUE(send(static_cast<size_t>(i) * 7777, want[i], tags[i], &q, rq).is_ok());
      sqs.push_back(q);
    }
    if (rq == nullptr) {
      ASSERT_TRUE(irecv(r_, n, d, cap, tags, mhs, &rq).is_ok());
    }
    // The sends first, as NCCL's proxy tests each send it posted: a send that joined a batch of
    // eager sends goes at its comm's next test (docs/eager.md, "Batches").
    for (Request* q : sqs) ASSERT_TRUE(wait(q, nullptr).is_ok()) << "round " << round;
    size_t got[8] = {};
    ASSERT_TRUE(wait(rq, got).is_ok()) << "round " << round;
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(got[i], want[i]) << "round " << round << " part " << i;
      ASSERT_EQ(std::memcmp(d[i], src_.data() + static_cast<size_t>(i) * 7777, want[i]), 0)
          << "round " << round << " part " << i;
    }
  }
  EXPECT_GT(stats(s_).eager, eager_before);
}

// A receive completed from the ring is reported only after every earlier receive.
TEST_F(CoreEager, CompletionInPostingOrder) {
  Request *r1 = nullptr, *r2 = nullptr, *s1 = nullptr, *s2 = nullptr;
  ASSERT_TRUE(recv1(0, 64, 2, &r1).is_ok());  // the grant and a credit
  ASSERT_TRUE(send(0, 8, 2, &s1, r1).is_ok());
  ASSERT_TRUE(wait(r1, nullptr).is_ok());
  ASSERT_TRUE(wait(s1, nullptr).is_ok());
  // A large receive first (its send comes last), then a small message that arrives before its
  // receive: the small receive completes at irecv, but is reported after the large one.
  Request* big = nullptr;
  ASSERT_TRUE(recv1(0, 1 << 20, 2, &big).is_ok());
  // Send the large one later: first the small one must not be able to go before it (NCCL's order).
  // The comm's traffic was eager, so the large receive's clear-to-send is held back: the send asks
  // for it, and the receiver (tested meanwhile, as NCCL's proxy does) publishes it.
  ASSERT_TRUE(send(0, 1 << 20, 2, &s1, big).is_ok());
  ASSERT_TRUE(send(2 << 20, 16, 2, &s2).is_ok());
  ASSERT_TRUE(recv1(2 << 20, 64, 2, &r2).is_ok());
  size_t got = 0;
  ASSERT_TRUE(wait(r2, &got).is_ok());
  EXPECT_EQ(got, 16u);
  // r2 was reported done: so was big before it.
  int done = 0;
  size_t bsz = 0;
  ASSERT_TRUE(test(big, &done, &bsz).is_ok());
  EXPECT_EQ(done, 1);
  EXPECT_EQ(bsz, size_t{1} << 20);
  ASSERT_TRUE(wait(s1, nullptr).is_ok());
  ASSERT_TRUE(wait(s2, nullptr).is_ok());
}

// The threshold is SLUICE_EAGER_MAX itself: a message of that size goes eagerly, one byte more by
// rendezvous, though a ring slot (32 + SLUICE_EAGER_MAX rounded up to 64 bytes) could hold it.
TEST_F(CoreEager, TheThresholdIsEagerMaxItself) {
  auto cfg = load_config_from_environment();
  ASSERT_TRUE(cfg.is_ok());
  const size_t max = static_cast<size_t>(cfg.value().eager_max);
  ASSERT_GT(max, 0u);
  ASSERT_NE((max + 32) % 64, 0u) << "run it with a SLUICE_EAGER_MAX whose slot is rounded up";
  Request *rq = nullptr, *sq = nullptr;
  ASSERT_TRUE(recv1(0, 64, 5, &rq).is_ok());
  ASSERT_TRUE(send(0, 64, 5, &sq, rq).is_ok());
  ASSERT_TRUE(wait(rq, nullptr).is_ok());
  ASSERT_TRUE(wait(sq, nullptr).is_ok());
  for (size_t n : {max, max + 1}) {
    const uint64_t e0 = stats(s_).eager;
    std::memset(dst_.data(), 0, n + 64);
    ASSERT_TRUE(recv1(0, n + 64, 5, &rq).is_ok());
    ASSERT_TRUE(send(64, n, 5, &sq, rq).is_ok());
    size_t got = 0;
    ASSERT_TRUE(wait(rq, &got).is_ok());
    ASSERT_TRUE(wait(sq, nullptr).is_ok());
    ASSERT_EQ(got, n);
    ASSERT_EQ(std::memcmp(dst_.data(), src_.data() + 64, n), 0);
    if (n == max) {
      // Sent before the receive was seen: the receive's clear-to-send is held (eager traffic).
      EXPECT_EQ(stats(s_).eager, e0 + 1) << n << " bytes (SLUICE_EAGER_MAX) went by rendezvous";
    } else {
      EXPECT_EQ(stats(s_).eager, e0) << n << " bytes (SLUICE_EAGER_MAX + 1) went eagerly";
    }
  }
}

// An eager message larger than the receive buffer posted after it landed: the receive fails with
// the sizes, nothing is written, and the sender's next call fails too.
TEST_F(CoreEager, EagerMessageLargerThanItsReceiveFailsBothSides) {
  Request *rq = nullptr, *sq = nullptr;
  ASSERT_TRUE(recv1(0, 64, 4, &rq).is_ok());
  ASSERT_TRUE(send(0, 8, 4, &sq, rq).is_ok());
  ASSERT_TRUE(wait(rq, nullptr).is_ok());
  ASSERT_TRUE(wait(sq, nullptr).is_ok());
  const uint64_t e0 = stats(s_).eager;
  ASSERT_TRUE(send(0, 1000, 4, &sq).is_ok());
  ASSERT_TRUE(wait(sq, nullptr).is_ok());
  ASSERT_EQ(stats(s_).eager, e0 + 1) << "the 1000-byte send went eagerly";
  rdmatest::ExpectWarns expected;
  std::memset(dst_.data(), 0x5c, 4096);
  Status st = recv1(0, 100, 4, &rq);
  if (st.is_ok()) st = wait(rq, nullptr);
  ASSERT_EQ(st.code(), Code::kInvalidUsage) << st.message();
  EXPECT_NE(st.message().find("1000 bytes"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("only 100 bytes"), std::string::npos) << st.message();
  for (int i = 0; i < 4096; ++i) ASSERT_EQ(dst_[i], 0x5c);
  // The sender learns it (the failure notice) and fails fast from then on.
  auto deadline = Clock::now() + std::chrono::seconds(30);
  Status ss;
  do {
    ASSERT_LT(Clock::now(), deadline);
    ss = isend(s_, src_.data(), 8, 4, ms_, &sq);
    if (ss.is_ok()) {
      int done = 0;
      while (ss.is_ok() && !done && Clock::now() < deadline) ss = test(sq, &done, nullptr);
    }
  } while (ss.is_ok() || ss.is_again());
  EXPECT_NE(ss.message().find("1000 bytes"), std::string::npos) << ss.message();
}

// ---- The pool's bound (core_eager_pool: SLUICE_EAGER_RINGS=2) ----------------------------------
//
// Rings and books are lent from a bounded pool per adapter: a receive comm's ring and book at its
// first receive, a send comm's book at its first slot read (or eager send) with a grant. A comm
// that gets none sends everything by clear-to-send, correctly; one whose sender got no book while
// its receiver got a ring asks once for everything (an ask-all), or the receiver's held
// clear-to-send would wait for ever. Closing returns what a comm holds.
class CoreEagerPool : public CoreEager {
 protected:
  struct Pair {
    SendComm* s = nullptr;
    RecvComm* r = nullptr;
    MemHandle *ms = nullptr, *mr = nullptr;
  };
  void open(Pair* p) {
    ASSERT_NO_FATAL_FAILURE(open_pair(&p->s, &p->r));
    ASSERT_TRUE(reg_mr(p->s, src_.data(), src_.size(), MemType::kHost, &p->ms).is_ok());
    ASSERT_TRUE(reg_mr(p->r, dst_.data(), dst_.size(), MemType::kHost, &p->mr).is_ok());
  }
  static EagerState state(void* comm) {
    CommStatsV2 st;
    EXPECT_TRUE(comm_stats_v2(comm, &st).is_ok());
    return st.eager;
  }
  void close_sender(Pair* p) {
    if (p->s == nullptr) return;
    EXPECT_TRUE(dereg_mr(p->s, p->ms).is_ok());
    EXPECT_TRUE(close_send(p->s).is_ok());
    p->s = nullptr;
  }
  void close_receiver(Pair* p) {
    if (p->r == nullptr) return;
    EXPECT_TRUE(dereg_mr(p->r, p->mr).is_ok());
    EXPECT_TRUE(close_recv(p->r).is_ok());
    p->r = nullptr;
  }
  // n messages of 8..64 bytes, each receive posted before its send and re-posted as the previous
  // completes (NCCL's steady state: the receiver holds clear-to-send back once the traffic is
  // small), then one of 100,000 bytes; every byte and size checked. *eager: the eager WRITEs the
  // sender posted and the messages the receiver copied out of its ring.
  void stream(Pair& p, int n, uint64_t* eager_sent, uint64_t* eager_copied) {
    CommStats s0, r0;
    ASSERT_TRUE(comm_stats(p.s, &s0).is_ok());
    ASSERT_TRUE(comm_stats(p.r, &r0).is_ok());
    for (int k = 0; k <= n; ++k) {
      const size_t size = k == n ? 100000 : 8 + static_cast<size_t>(k * 7) % 57;
      const size_t off = static_cast<size_t>(k) * 64;
      std::memset(dst_.data(), 0xee, size + 1);
      Request *rq = nullptr, *sq = nullptr;
      void* d = dst_.data();
      size_t cap = 1 << 20;
      int tag = 9;
      ASSERT_TRUE(irecv(p.r, 1, &d, &cap, &tag, &p.mr, &rq).is_ok()) << k;
      Status st = send_on(p.s, p.ms, off, size, tag, &sq, rq);
      ASSERT_TRUE(st.is_ok()) << "message " << k << ": " << st.message();
      size_t got = 0;
      ASSERT_TRUE(wait(rq, &got).is_ok()) << k;
      ASSERT_TRUE(wait(sq, nullptr).is_ok()) << k;
      ASSERT_EQ(got, size) << k;
      ASSERT_EQ(std::memcmp(dst_.data(), src_.data() + off, size), 0) << k;
      ASSERT_EQ(dst_[size], 0xee) << k;
    }
    CommStats s1, r1;
    ASSERT_TRUE(comm_stats(p.s, &s1).is_ok());
    ASSERT_TRUE(comm_stats(p.r, &r1).is_ok());
    *eager_sent = s1.eager - s0.eager;
    *eager_copied = r1.eager - r0.eager;
  }
};

TEST_F(CoreEagerPool, RingsAndBooksAreBoundedLentAtFirstUseAndGivenBack) {
  auto cfg = load_config_from_environment();
  ASSERT_TRUE(cfg.is_ok());
  ASSERT_EQ(cfg.value().eager_rings, 2) << "run it with SLUICE_EAGER_RINGS=2 (core.cmake)";
  constexpr int kMsgs = 60;
  uint64_t sent = 0, copied = 0;
  // The fixture's pair and p1: a ring and a book each (the two of the receiver's adapter, the two
  // sender books of the sender's), and the traffic goes eagerly.
  Pair p0{s_, r_, ms_, mr_};
  ASSERT_NO_FATAL_FAILURE(stream(p0, kMsgs, &sent, &copied));
  EXPECT_GE(sent, kMsgs / 2u) << "the first pair goes eagerly";
  EXPECT_EQ(sent, copied);
  EXPECT_EQ(state(p0.s), EagerState::kOn);
  EXPECT_EQ(state(p0.r), EagerState::kOn);
  Pair p1;
  ASSERT_NO_FATAL_FAILURE(open(&p1));
  EXPECT_EQ(state(p1.s), EagerState::kNegotiated) << "a book lent before any use";
  EXPECT_EQ(state(p1.r), EagerState::kNegotiated) << "a ring lent before any receive";
  ASSERT_NO_FATAL_FAILURE(stream(p1, kMsgs, &sent, &copied));
  EXPECT_GE(sent, kMsgs / 2u) << "the second pair goes eagerly";
  // p2: no ring is left for its receiver, so its sender reads its first slot without a grant and
  // takes no book; everything goes by clear-to-send.
  Pair p2;
  ASSERT_NO_FATAL_FAILURE(open(&p2));
  ASSERT_NO_FATAL_FAILURE(stream(p2, kMsgs, &sent, &copied));
  EXPECT_EQ(sent, 0u) << "a pair without a ring sent eagerly";
  EXPECT_EQ(copied, 0u);
  EXPECT_EQ(state(p2.s), EagerState::kWithout);
  EXPECT_EQ(state(p2.r), EagerState::kWithout);
  // p1's receiver goes (its ring and book back) but its sender stays (its book held), and p2 goes.
  // p3's receiver gets the ring; its sender finds no sender book: it asks once for everything.
  close_receiver(&p1);
  close_sender(&p2);
  close_receiver(&p2);
  Pair p3;
  ASSERT_NO_FATAL_FAILURE(open(&p3));
  ASSERT_NO_FATAL_FAILURE(stream(p3, kMsgs, &sent, &copied));
  EXPECT_EQ(sent, 0u) << "a sender without a book sent eagerly";
  EXPECT_EQ(copied, 0u);
  EXPECT_EQ(state(p3.s), EagerState::kWithout);
  EXPECT_EQ(state(p3.r), EagerState::kOn);
  // Everything but the fixture's pair back: p4 goes eagerly again.
  close_sender(&p1);
  close_sender(&p3);
  close_receiver(&p3);
  Pair p4;
  ASSERT_NO_FATAL_FAILURE(open(&p4));
  ASSERT_NO_FATAL_FAILURE(stream(p4, kMsgs, &sent, &copied));
  EXPECT_GE(sent, kMsgs / 2u) << "the ring and the book came back at close";
  EXPECT_EQ(sent, copied);
  EXPECT_EQ(state(p4.s), EagerState::kOn);
  EXPECT_EQ(state(p4.r), EagerState::kOn);
  close_sender(&p4);
  close_receiver(&p4);
}

// ---- A pool that cannot be made (core_eager_pool_unmade) ----------------------------------------
//
// SLUICE_EAGER_RINGS=4096 rings of 32 slots of 64 KiB: 8.6 GB to allocate and register, more than
// the bed's VM holds (its mmap is refused). The eager path is an optimisation: the adapter says so
// once at WARN and its comms go by clear-to-send, every byte delivered, and a later pair too. Both
// ends negotiated it (the features were exchanged before the pools): the receive comm lends no
// ring (off), the send comm reads the receiver's entries as eager ones but has no book (without).
class CoreEagerPoolUnmade : public CoreEagerPool {};

TEST_F(CoreEagerPoolUnmade, CommsGoByClearToSendWhenThePoolCannotBeMade) {
  auto cfg = load_config_from_environment();
  ASSERT_TRUE(cfg.is_ok());
  ASSERT_EQ(cfg.value().eager_rings, 4096) << "run it with SLUICE_EAGER_RINGS=4096 (core.cmake)";
  ASSERT_GT(cfg.value().eager_max, 0);
  if (state(r_) != EagerState::kOff)
    GTEST_SKIP() << "this machine made an 8.6 GB eager pool: nothing to test here";
  constexpr int kMsgs = 40;
  uint64_t sent = 0, copied = 0;
  Pair p0{s_, r_, ms_, mr_};
  ASSERT_NO_FATAL_FAILURE(stream(p0, kMsgs, &sent, &copied));
  EXPECT_EQ(sent, 0u);
  EXPECT_EQ(copied, 0u);
  EXPECT_EQ(state(p0.s), EagerState::kWithout);
  EXPECT_EQ(state(p0.r), EagerState::kOff);
  Pair p1;
  ASSERT_NO_FATAL_FAILURE(open(&p1));
  EXPECT_EQ(state(p1.s), EagerState::kWithout);
  EXPECT_EQ(state(p1.r), EagerState::kOff);
  ASSERT_NO_FATAL_FAILURE(stream(p1, kMsgs, &sent, &copied));
  EXPECT_EQ(sent, 0u);
  EXPECT_EQ(copied, 0u);
  close_sender(&p1);
  close_receiver(&p1);
}

// Batches (docs/eager.md "Batches"): a window of 32 sends against a window of 17 receives, more
// than the ring's 16 credits, one thread testing everything it posted in turn (NCCL's proxy), sizes
// across the threshold mixed (0 B to SLUICE_EAGER_MAX, and rendezvous sizes above it). Every size
// and byte checked, completions in posting order. With SLUICE_EAGER_BATCH > 1 (the default), sends
// made while an eager WRITE is in flight go several to a WRITE: fewer WRITEs than eager messages;
// with 1, at least one per message. Before the receiver's credit for a batch
// (ReceiverBook::credit_due) this stream stopped for good: the sender waited for a slot a batch
// filled, with fewer than W/2 freed.
// Streams `sizes` on tag 7 with kSendWin sends and kRecvWin receives in flight, one thread
// testing the oldest of each in turn (as NCCL's proxy does); every size and byte checked.
void CoreEager::stream(const std::vector<size_t>& sizes, int send_window, int recv_window) {
  const int kSendWin = send_window, kRecvWin = recv_window;
  constexpr int kRank = 7;
  constexpr size_t kCap = 2 * kEagerMax + 64;
  const int kMsgs = static_cast<int>(sizes.size());
  auto src_of = [&](int i) { return static_cast<size_t>(i) * 7919 % (kBuf - kCap); };
  // The tag is numbered on both ends once one message went: the rest may go before the receive.
  {
    Request* r = nullptr;
    Request* q = nullptr;
    ASSERT_TRUE(recv1(0, 64, kRank, &r).is_ok());
    ASSERT_TRUE(send(0, 8, kRank, &q, r).is_ok());
    ASSERT_TRUE(wait(q, nullptr).is_ok());
    ASSERT_TRUE(wait(r, nullptr).is_ok());
  }
  const CommStats s0 = stats(s_);
  std::vector<Request*> sq(kMsgs, nullptr), rq(kMsgs, nullptr);
  int sent = 0, received = 0, sdone = 0, rdone = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  while (sdone < kMsgs || rdone < kMsgs) {
    ASSERT_LT(Clock::now(), deadline) << "sent " << sent << " (" << sdone << " done), received "
                                      << received << " (" << rdone << " done)";
    while (sent < kMsgs && sent - sdone < kSendWin) {
      Status st = isend(s_, src_.data() + src_of(sent), sizes[sent], kRank, ms_, &sq[sent]);
      if (st.is_again()) break;
      ASSERT_TRUE(st.is_ok()) << st.message();
      ++sent;
    }
    while (received < kMsgs && received - rdone < kRecvWin) {
      void* d = dst_.data() + static_cast<size_t>(received % kRecvWin) * kCap;
      size_t cap = kCap;
      int tag = kRank;
      Status st = irecv(r_, 1, &d, &cap, &tag, &mr_, &rq[received]);
      if (st.is_again()) break;
      ASSERT_TRUE(st.is_ok()) << st.message();
      ++received;
    }
    // The oldest of each, as NCCL's proxy tests them.
    while (sdone < sent) {
      int done = 0;
      ASSERT_TRUE(test(sq[sdone], &done, nullptr).is_ok());
      if (!done) break;
      ++sdone;
    }
    while (rdone < received) {
      int done = 0;
      size_t got = 0;
      ASSERT_TRUE(test(rq[rdone], &done, &got).is_ok());
      if (!done) break;
      ASSERT_EQ(got, sizes[rdone]) << "message " << rdone;
      const uint8_t* d = dst_.data() + static_cast<size_t>(rdone % kRecvWin) * kCap;
      ASSERT_EQ(std::memcmp(d, src_.data() + src_of(rdone), got), 0) << "message " << rdone;
      ++rdone;
    }
  }
  const CommStats s1 = stats(s_);
  batch_eager = s1.eager - s0.eager;
  batch_writes = s1.eager_writes - s0.eager_writes;
  batch_wrs = s1.wrs - s0.wrs;
}

TEST_F(CoreEager, BatchesOfSendsAgainstAWiderWindowThanTheCredits) {
  constexpr int kMsgs = 1500;
  constexpr size_t kCap = 2 * kEagerMax + 64;
  std::mt19937 rng(1234);
  std::vector<size_t> sizes(kMsgs);
  for (int i = 0; i < kMsgs; ++i) {
    const uint32_t r = rng() % 16;
    sizes[i] = r < 9    ? rng() % 65                                  // small: the batches' case
               : r < 12 ? rng() % (kEagerMax + 1)                     // up to the threshold
               : r < 13 ? kEagerMax + static_cast<size_t>(rng() % 2)  // at it and one past
               : r < 14 ? 0
                        : kEagerMax + 1 + rng() % (kCap - kEagerMax - 1);  // rendezvous
  }
  ASSERT_NO_FATAL_FAILURE(stream(sizes, 32, 17));
  const uint64_t eager = batch_eager, wrs = batch_writes;
  std::fprintf(stderr, "[batches] %d messages, %llu eager, in %llu WRITEs (%llu WRs in all)\n",
               kMsgs, static_cast<unsigned long long>(eager), static_cast<unsigned long long>(wrs),
               static_cast<unsigned long long>(batch_wrs));
  EXPECT_GT(eager, static_cast<uint64_t>(kMsgs) / 3) << "most small messages go eagerly";
  const char* batch = std::getenv("SLUICE_EAGER_BATCH");
  if (batch == nullptr || std::atoi(batch) > 1) {
    EXPECT_LT(2 * wrs, eager) << "bursts of eager sends went fewer than two to a WRITE";
  } else {
    EXPECT_EQ(wrs, eager) << "SLUICE_EAGER_BATCH=1: one WRITE per eager message";
  }
}

// All small, both windows full (sluice-bench's rate test): every message eager, whatever the ring's
// size (the ctest entries run it at 4 and 64 slots too).
TEST_F(CoreEager, SmallMessagesWithBothWindowsFull) {
  std::vector<size_t> sizes(3000);
  for (size_t i = 0; i < sizes.size(); ++i) sizes[i] = 8 + i % 3 * 8;
  ASSERT_NO_FATAL_FAILURE(stream(sizes, 32, 32));
  EXPECT_EQ(batch_eager, sizes.size());
}

}  // namespace
