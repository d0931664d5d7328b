// A member device's fatal error on a multi-path comm (issue 31): IBV_EVENT_DEVICE_FATAL on one
// member used to fail every comm on it, even one whose other path was healthy, so with
// SLUICE_STANDBY=1 a reset of the idle standby NIC failed every comm whose primary was fine. Now
// that member's paths fail over, fenced without waiting for the device (a dead device places
// nothing and reports nothing), and stay down with the reason; the comm goes on over the paths
// left, every byte checked. Soft-RoCE never raises the event (rxe has no disassociate_ucontext:
// removing an rxe device waits for its users instead), so the test injects it where the async
// thread would take it (SLUICE_TEST_FAULT_FILE, docs/configuration.md); rxe itself keeps working,
// which the plugin must then not depend on.
//
// One process (the bed's VM, rxe0 and rxe1), both sides of the comm in it, NCCL's calling
// convention (v12, a profiler callback at init and a step handle per post). Modes, by the
// environment (tests/rdma/device_fatal.cmake):
//  * SLUICE_TEST_FUSE=fused: a fused rxe0+rxe1 comm (path 0 on rxe0, path 1 on rxe1, messages
//    striped over both); rxe1 is declared dead mid-stream.
//  * SLUICE_STANDBY=1: a comm on rxe0 at both ends (its standby rxe1 holds path 1, weight 0, idle);
//    the standby is declared dead.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ext_stats.h"
#include "nccl_profiler_default.h"
#include "plugin_bed.h"
#include "rdma_env.h"

namespace nettest {
namespace {

constexpr size_t kMsg = size_t{1} << 20;  // striped over both paths of a fused comm (>= 64 KiB)

std::string fault_file() {
  const char* f = std::getenv("SLUICE_TEST_FAULT_FILE");
  return f != nullptr ? f : "";
}

bool write_fault(const std::string& dev) {
  FILE* f = std::fopen(fault_file().c_str(), "w");
  if (f == nullptr) return false;
  std::fprintf(f, "device_fatal %s\n", dev.c_str());
  return std::fclose(f) == 0;
}

// `count` messages of mixed sizes (1 MiB, 4 KiB, 0, 65537), each pattern-checked with its guard.
::testing::AssertionResult messages(Net& n, Conn& c, RegBuf& sbuf, RegBuf& rbuf, int first,
                                    int count) {
  const size_t sizes[] = {kMsg, 4096, 0, 65537};
  for (int i = first; i < first + count; ++i) {
    const size_t sz = sizes[i % 4];
    fill_pattern(sbuf.data(), sz, pattern_seed(sz, i, 31));
    std::memset(rbuf.data(), kGuardByte, kMsg + kGuard);
    int got = -1;
    auto ok = send_recv(n, c, sbuf, sz, rbuf, kMsg, i, &got);
    if (!ok) return ok << " (message " << i << ")";
    if (got != static_cast<int>(sz))
      return ::testing::AssertionFailure() << "message " << i << ": " << got << " of " << sz;
    if (std::string bad = check_pattern(rbuf.data(), sz, pattern_seed(sz, i, 31)); !bad.empty())
      return ::testing::AssertionFailure() << "message " << i << ": " << bad;
    if (std::string bad = check_fill(rbuf.data() + sz, kMsg + kGuard - sz, kGuardByte);
        !bad.empty())
      return ::testing::AssertionFailure() << "message " << i << " past its size: " << bad;
  }
  return ::testing::AssertionSuccess();
}

// The eager burst (fused comms, SLUICE_EAGER_FUSED): up to kBurst small messages sent ahead of
// their receives (into the receiver's ring, striped over both paths by counter) and left untested,
// so that the dead member's share of their WRITEs has no completion polled when its path is fenced.
// With SLUICE_EAGER_BATCH=3 (device_fatal.cmake) the first goes alone and the others in batches of
// 3, each posted when the next send cannot join it (the last one at the first test): a batch on the
// dead path is replayed whole.
constexpr int kBurst = 12;
constexpr size_t kBurstSlot = 4096;
size_t burst_size(int k) {
  return 1 + static_cast<size_t>(k) * 331 % 4000;
}

struct Burst {
  std::vector<void*> sreq;
};

::testing::AssertionResult burst_send(Net& n, Conn& c, RegBuf& sbuf, RegBuf& rbuf, int tag,
                                      Burst* b) {
  // A send goes eagerly ahead of its receive only with a tag the sender saw the receiver number
  // (in a clear-to-send entry): one message on the tag first.
  int got = -1;
  fill_pattern(sbuf.data(), 8, 99);
  if (auto ok = send_recv(n, c, sbuf, 8, rbuf, 4096, tag, &got); !ok) return ok << " (tag 77)";
  for (int k = 0; k < kBurst; ++k) {
    const size_t sz = burst_size(k);
    uint8_t* p = sbuf.data() + static_cast<size_t>(k) * kBurstSlot;
    fill_pattern(p, sz, pattern_seed(sz, 7000 + k, tag));
    void* req = nullptr;
    if (n.isend(c.send, p, sz, tag, sbuf.mh(), &req) != ncclSuccess)
      return ::testing::AssertionFailure() << "burst isend " << k << ": " << last_warn();
    if (req == nullptr) break;  // no credit or staging slot left: the rest is not needed
    b->sreq.push_back(req);
  }
  if (b->sreq.size() < 6)
    return ::testing::AssertionFailure() << "only " << b->sreq.size() << " of " << kBurst
                                         << " burst sends went before their receives";
  return ::testing::AssertionSuccess();
}

// The burst's receives, then every request tested to done: each message once, its size, every
// byte and the guard after it.
::testing::AssertionResult burst_receive(Net& n, Conn& c, RegBuf& rbuf, int tag, Burst& b) {
  const int count = static_cast<int>(b.sreq.size());

  std::memset(rbuf.data(), kGuardByte, static_cast<size_t>(count) * kBurstSlot);
  std::vector<void*> rreq(count, nullptr);
  for (int k = 0; k < count; ++k) {
    void* data = rbuf.data() + static_cast<size_t>(k) * kBurstSlot;
    void* mh = rbuf.mh();
    size_t cap = kBurstSlot - kGuard;
    int t = tag;
    if (!post_until("irecv", &rreq[k],
                    [&](void** req) { return n.irecv(c.recv, 1, &data, &cap, &t, &mh, req); }))
      return ::testing::AssertionFailure() << "burst irecv " << k;
  }
  // Sends and receives tested in turn, as NCCL's proxy tests everything it posted: the last batch
  // of eager sends (SLUICE_EAGER_BATCH, device_fatal.cmake) goes at the send comm's next test.
  std::vector<void*> all(b.sreq);
  all.insert(all.end(), rreq.begin(), rreq.end());
  std::vector<int> sizes(all.size(), -1);
  if (auto ok = wait_all(n, "burst", all, sizes.data()); !ok) return ok << ": " << last_warn();
  for (int k = 0; k < count; ++k) {
    const int got = sizes[static_cast<size_t>(count + k)];
    const size_t sz = burst_size(k);
    if (got != static_cast<int>(sz))
      return ::testing::AssertionFailure() << "burst message " << k << ": " << got << " of " << sz;
    const uint8_t* p = rbuf.data() + static_cast<size_t>(k) * kBurstSlot;
    if (std::string bad = check_pattern(p, sz, pattern_seed(sz, 7000 + k, tag)); !bad.empty())
      return ::testing::AssertionFailure() << "burst message " << k << ": " << bad;
    if (std::string bad = check_fill(p + sz, kBurstSlot - sz, kGuardByte); !bad.empty())
      return ::testing::AssertionFailure() << "burst message " << k << " past its size: " << bad;
  }
  return ::testing::AssertionSuccess();
}

// test() calls per second on a receive that stays pending for `ms` (nothing sent for it): what a
// call costs on this comm now (issue 31, defect 5: with a path down for good every call used to
// read the socket). Then a message completes it.
double calls_per_s(Net& n, Conn& c, RegBuf& sbuf, RegBuf& rbuf, int tag, long ms) {
  void* rreq = nullptr;
  void* rdata = rbuf.data();
  void* rmh = rbuf.mh();
  size_t cap = 4096;
  if (!post_until("irecv", &rreq,
                  [&](void** req) { return n.irecv(c.recv, 1, &rdata, &cap, &tag, &rmh, req); }))
    return -1;
  long calls = 0;
  const auto t0 = Clock::now();
  while (Clock::now() - t0 < std::chrono::milliseconds(ms)) {
    int done = 0;
    if (n.test(rreq, &done, nullptr) != ncclSuccess || done) return -1;
    ++calls;
  }
  const double per_s = calls * 1000.0 / static_cast<double>(ms_since(t0));
  void* sreq = nullptr;
  fill_pattern(sbuf.data(), 64, 5);
  if (!post_until(
          "isend", &sreq,
          [&](void** req) { return n.isend(c.send, sbuf.data(), 64, tag, sbuf.mh(), req); }) ||
      !wait_done(n, "send", sreq, nullptr) || !wait_done(n, "recv", rreq, nullptr))
    return -1;
  return per_s;
}

TEST(DeviceFatal, AMembersDeadDeviceFailsOverItsPathsAndTheCommGoesOn) {
  ASSERT_FALSE(fault_file().empty()) << "SLUICE_TEST_FAULT_FILE unset (device_fatal.cmake sets it)";
  std::remove(fault_file().c_str());
  g_keep_info = true;
  const bool standby = std::getenv("SLUICE_STANDBY") != nullptr;
  // The plugin as NCCL drives it: v12, a profiler callback at init (one that returns real event
  // handles and checks NCCL's contract) and a step handle per post.
  Net n{12};
  nccl_profiler::attach(n, nccl_profiler::Mode::kLoaded);
  ASSERT_EQ(n.init(0xfa7a1), ncclSuccess) << last_warn();
  int ndev = 0;
  ASSERT_EQ(n.devices(&ndev), ncclSuccess);
  const auto pair = sluice::rdmatest::test_pair();
  ASSERT_TRUE(pair.error.empty()) << pair.error;
  if (pair.ports.size() < 2 && !require_rdma()) GTEST_SKIP() << "no pair of RDMA ports here";
  ASSERT_GE(pair.ports.size(), 2u) << "two devices needed";
  int a = -1, b = -1;
  std::string name_b;
  for (int d = 0; d < ndev; ++d) {
    Props p;
    ASSERT_EQ(n.properties(d, &p), ncclSuccess);
    if (pair.a().matches(p.name)) a = d;
    if (pair.b().matches(p.name)) {
      b = d;
      name_b = p.name;
    }
  }
  ASSERT_TRUE(a >= 0 && b >= 0 && a != b) << pair.describe();
  // The fused comm (rxe0+rxe1 at both ends) loses its path over the second device; the standby
  // comm (the first device at both ends) loses its standby, the second device.
  int send_dev = a, recv_dev = a;
  if (!standby) {
    int v = -1;
    ASSERT_EQ(n.make_vdevice({a, b}, &v), ncclSuccess) << last_warn();
    send_dev = recv_dev = v;
  }
  const std::string dead = name_b.substr(0, name_b.find(':'));
  {
    Conn c;
    ASSERT_TRUE(open_conn(n, send_dev, recv_dev, &c));
    RegBuf sbuf, rbuf;
    ASSERT_TRUE(sbuf.allocate(&n, c.send, kMsg));
    ASSERT_TRUE(rbuf.allocate(&n, c.recv, kMsg + kGuard));
    const size_t info0 = info_size();
    ASSERT_TRUE(messages(n, c, sbuf, rbuf, 0, 8));
    const double healthy = calls_per_s(n, c, sbuf, rbuf, 900, 300);
    ASSERT_GT(healthy, 0);
    const auto paths = info_with(0, "paths of");
    ASSERT_FALSE(paths.empty());
    EXPECT_NE(paths.back().find("failover on"), std::string::npos) << paths.back();

    sluice::rdmatest::ExpectWarns expected;  // the device's fatal event is a WARN
    // Eager messages in flight on both paths when the device dies (their completions unpolled):
    // the dead member's are posted again on the path left, and the receiver, whose ring the first
    // WRITEs reached too (rxe goes on working), takes each message once.
    Burst burst;
    ASSERT_TRUE(burst_send(n, c, sbuf, rbuf, 77, &burst));
    ASSERT_TRUE(write_fault(dead)) << fault_file();
    // The async thread reads the file every 100 ms; the comms find out at their next call.
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (last_warn().find("injected by SLUICE_TEST_FAULT_FILE") == std::string::npos) {
      ASSERT_LT(Clock::now(), deadline) << "no fatal event within 10 s";
      usleep(20000);
    }
    EXPECT_NE(last_warn().find(dead + ": async event"), std::string::npos) << last_warn();
    ASSERT_TRUE(burst_receive(n, c, rbuf, 77, burst));
    const long long replays = eager_replays(c.send);
    std::fprintf(stderr, "[device-fatal] %zu burst sends, %lld eager WRITEs replayed\n",
                 burst.sreq.size(), replays);
    if (standby) {
      EXPECT_EQ(replays, 0) << "the standby carried an eager WRITE";
    } else {
      EXPECT_GT(replays, 0) << "no eager WRITE of the dead member was replayed";
    }
    // The comm goes on: 64 messages over the paths left, each checked.
    ASSERT_TRUE(messages(n, c, sbuf, rbuf, 8, 64));
    // Both sides failed the dead member's path over and keep it down with the reason.
    const auto over = info_with(info0, "failed over (device fatal");
    const auto down = info_with(info0, "stays down: its device " + dead);
    EXPECT_EQ(over.size(), 2u) << "one per side";
    EXPECT_EQ(down.size(), 2u) << "one per side";
    for (const std::string& l : down)
      EXPECT_NE(l.find("IBV_EVENT_DEVICE_FATAL"), std::string::npos) << l;
    EXPECT_TRUE(info_with(info0, "back (epoch").empty()) << "a dead device's path came back";
    // A path down for good costs a call nothing more than a healthy comm's (the socket is read at
    // the liveness cadence only): printed, not asserted (the bed's pace swings).
    const double down_cps = calls_per_s(n, c, sbuf, rbuf, 901, 300);
    ASSERT_GT(down_cps, 0);
    std::fprintf(stderr,
                 "[device-fatal] test() calls per second on a pending receive: all paths up %.0f, "
                 "one path down for good %.0f (%.2fx)\n",
                 healthy, down_cps, down_cps / healthy);
    sbuf.reset();
    rbuf.reset();
    EXPECT_TRUE(close_conn(n, &c));
  }
  std::remove(fault_file().c_str());
  EXPECT_EQ(nccl_profiler::check(true), "");
  EXPECT_EQ(n.finalize(), ncclSuccess);
}

}  // namespace
}  // namespace nettest
