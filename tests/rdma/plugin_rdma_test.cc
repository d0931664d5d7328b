// Data-path tests through the exported plugin tables (label rdma; run inside scripts/rdma-bed).
// Without an RDMA device every test is skipped with the reason, unless SLUICE_REQUIRE_RDMA=1.
//
// Knobs: SLUICE_TEST_DEADLINE_S (bound on every wait, 60), SLUICE_TEST_STRESS_MESSAGES (100000),
// SLUICE_TEST_SEED (12345), SLUICE_TEST_CYCLES (1000), SLUICE_TEST_LOG_LEVEL (2 = WARN).
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "plugin_bed.h"

extern char** environ;

namespace nettest {
namespace {

// ---- Properties
// ----------------------------------------------------------------------------------

TEST(Properties, EveryVersion) {
  REQUIRE_BED();
  for (int v = 8; v <= 12; ++v) {
    SCOPED_TRACE("v" + std::to_string(v));
    Net n(v);
    ASSERT_EQ(n.init(0x100 + v), ncclSuccess);
    int ndev = 0;
    ASSERT_EQ(n.devices(&ndev), ncclSuccess);
    EXPECT_EQ(ndev, bed().ndev);
    std::vector<std::string> names;
    for (int d = 0; d < ndev; ++d) {
      Props p;
      ASSERT_EQ(n.properties(d, &p), ncclSuccess);
      EXPECT_FALSE(p.name.empty());
      names.push_back(p.name);
      EXPECT_TRUE(p.ptr_support & NCCL_PTR_HOST);
      EXPECT_FALSE(p.ptr_support & NCCL_PTR_CUDA) << "GPU memory is a later issue";
      EXPECT_GT(p.speed, 0);
      EXPECT_EQ(p.max_recvs, 8);
      EXPECT_EQ(p.dev_type, NCCL_NET_DEVICE_HOST);
      EXPECT_EQ(p.dev_version, 0);
      if (v >= 9) {
        EXPECT_EQ(p.vndevs, 1);
        EXPECT_EQ(p.vdev0, d);
        EXPECT_GT(p.max_p2p, 0u);
        EXPECT_LE(p.max_p2p, NCCL_MAX_NET_SIZE_BYTES);
        EXPECT_GT(p.max_coll, 0u);
        EXPECT_LE(p.max_coll, NCCL_MAX_NET_SIZE_BYTES);
      }
      if (v >= 11) {
        EXPECT_EQ(p.max_multi, 1);
      }
      if (v == 12) {
        EXPECT_EQ(p.rail, -1);  // NCCL_NET_ID_UNDEF: SLUICE_NIC_RAILS is not set here
        EXPECT_EQ(p.plane, -1);
      }
    }
    std::sort(names.begin(), names.end());
    EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end()) << "names not unique";
    Props p;
    sluice::rdmatest::ExpectWarns expected;  // out-of-range device indices WARN on purpose
    EXPECT_EQ(n.properties(ndev, &p), ncclInvalidArgument);
    EXPECT_EQ(n.properties(-1, &p), ncclInvalidArgument);
    EXPECT_EQ(n.finalize(), ncclSuccess);
  }
}

// ---- Transfers (cross-device and same-device loopback)
// -------------------------------------------

struct Pair {
  const char* label;
  bool loopback;
};

class Transfer : public ::testing::TestWithParam<Pair> {
 protected:
  void SetUp() override {
    REQUIRE_BED();
    send_dev_ = bed().dev_a;
    recv_dev_ = GetParam().loopback ? bed().dev_a : bed().dev_b;
    ASSERT_TRUE(open_conn(net(), send_dev_, recv_dev_, &conn_));
  }
  void TearDown() override {
    sbuf_.reset();
    rbuf_.reset();
    if (conn_.send != nullptr || conn_.recv != nullptr) {
      EXPECT_TRUE(close_conn(net(), &conn_));
    }
  }
  int send_dev_ = 0, recv_dev_ = 0;
  Conn conn_;
  RegBuf sbuf_, rbuf_;
};

std::string pair_name(const ::testing::TestParamInfo<Pair>& info) {
  return info.param.label;
}

INSTANTIATE_TEST_SUITE_P(Pairs, Transfer,
                         ::testing::Values(Pair{"CrossDevice", false}, Pair{"Loopback", true}),
                         pair_name);

TEST_P(Transfer, AllSizesEveryByteVerified) {
  ASSERT_TRUE(sbuf_.allocate(&net(), conn_.send, kMaxSize));
  ASSERT_TRUE(rbuf_.allocate(&net(), conn_.recv, kMaxSize + kGuard));
  for (int iter = 0; iter < 2; ++iter) {
    for (size_t size : kSizes) {
      SCOPED_TRACE("size " + std::to_string(size) + " iteration " + std::to_string(iter));
      const uint64_t seed = pattern_seed(size, iter);
      fill_pattern(sbuf_.data(), size, seed);
      std::memset(rbuf_.data(), kGuardByte, size + kGuard);
      int got = -1;
      // Second iteration: test(request, done, NULL) must work too.
      ASSERT_TRUE(send_recv(net(), conn_, sbuf_, size, rbuf_, size, 7, &got, iter == 1));
      EXPECT_EQ(got, static_cast<int>(size));
      EXPECT_EQ(check_pattern(rbuf_.data(), size, seed), "");
      EXPECT_EQ(check_fill(rbuf_.data() + size, kGuard, kGuardByte), "") << "written past size";
    }
  }
}

TEST_P(Transfer, PostedBufferLargerThanMessage) {
  constexpr size_t kCap = 65536;
  ASSERT_TRUE(sbuf_.allocate(&net(), conn_.send, kCap));
  ASSERT_TRUE(rbuf_.allocate(&net(), conn_.recv, kCap));
  for (size_t size : {size_t{0}, size_t{1}, size_t{1000}, size_t{4097}, kCap - 1}) {
    SCOPED_TRACE("size " + std::to_string(size));
    const uint64_t seed = pattern_seed(size, 3);
    fill_pattern(sbuf_.data(), size, seed);
    std::memset(rbuf_.data(), kGuardByte, kCap);
    int got = -1;
    ASSERT_TRUE(send_recv(net(), conn_, sbuf_, size, rbuf_, kCap, 1, &got));
    EXPECT_EQ(got, static_cast<int>(size)) << "test must report the sent size";
    EXPECT_EQ(check_pattern(rbuf_.data(), size, seed), "");
    EXPECT_EQ(check_fill(rbuf_.data() + size, kCap - size, kGuardByte), "");
  }
}

TEST_P(Transfer, IflushOnHostMemoryCompletesAtOnce) {
  ASSERT_TRUE(sbuf_.allocate(&net(), conn_.send, 4096));
  ASSERT_TRUE(rbuf_.allocate(&net(), conn_.recv, 4096));
  fill_pattern(sbuf_.data(), 4096, 9);
  int got = -1;
  ASSERT_TRUE(send_recv(net(), conn_, sbuf_, 4096, rbuf_, 4096, 0, &got));
  void* data = rbuf_.data();
  void* mh = rbuf_.mh();
  int sizes[1] = {got};
  void* req = reinterpret_cast<void*>(uintptr_t{1});
  EXPECT_EQ(net().iflush(conn_.recv, 1, &data, sizes, &mh, &req), ncclSuccess);
  EXPECT_EQ(req, nullptr) << "host memory needs no flush: request must be NULL";
}

// A message larger than the posted buffer: a clear error on both sides, nothing written past the
// posted size. The connection is unusable afterwards and is closed (close may report the error).
TEST_P(Transfer, MessageLargerThanPostedBufferFailsCleanly) {
  constexpr size_t kPosted = 4096;
  constexpr size_t kSent = 8192;
  ASSERT_TRUE(sbuf_.allocate(&net(), conn_.send, kSent));
  // The registration covers the guard area: the NIC could write there if the plugin let it.
  ASSERT_TRUE(rbuf_.allocate(&net(), conn_.recv, kSent + kGuard));
  fill_pattern(sbuf_.data(), kSent, 5);
  std::memset(rbuf_.data(), kGuardByte, kSent + kGuard);
  const int warns_before = g_warns.load();
  sluice::rdmatest::ExpectWarns expected;  // the oversize message WARNs on both sides

  void* rdata = rbuf_.data();
  void* rmh = rbuf_.mh();
  size_t cap = kPosted;
  int tag = 3;
  void* rreq = nullptr;
  ASSERT_TRUE(post_until("irecv", &rreq, [&](void** req) {
    return net().irecv(conn_.recv, 1, &rdata, &cap, &tag, &rmh, req);
  }));
  // The sender may refuse at isend (it knows the posted size) or fail at test.
  ncclResult_t send_err = ncclSuccess;
  void* sreq = nullptr;
  const auto deadline = Clock::now() + wait_limit();
  while (sreq == nullptr && send_err == ncclSuccess) {
    send_err = net().isend(conn_.send, sbuf_.data(), kSent, tag, sbuf_.mh(), &sreq);
    ASSERT_LT(Clock::now(), deadline) << "isend neither posted nor failed";
    if (sreq == nullptr) usleep(50);
  }
  ncclResult_t recv_err = ncclSuccess;
  bool send_done = false, recv_done = false;
  while ((send_err == ncclSuccess && !send_done) || (recv_err == ncclSuccess && !recv_done)) {
    ASSERT_LT(Clock::now(), deadline)
        << "no error within the deadline: sender "
        << (send_err != ncclSuccess ? "failed" : "silent") << ", receiver "
        << (recv_err != ncclSuccess ? "failed" : "silent");
    int done = 0;
    if (send_err == ncclSuccess && !send_done) {
      send_err = net().test(sreq, &done, nullptr);
      send_done = done;
    }
    done = 0;
    if (recv_err == ncclSuccess && !recv_done) {
      recv_err = net().test(rreq, &done, nullptr);
      recv_done = done;
    }
  }
  EXPECT_NE(send_err, ncclSuccess) << "sender completed an oversize send successfully";
  EXPECT_NE(recv_err, ncclSuccess) << "receiver completed an oversize receive successfully";
  EXPECT_GT(g_warns.load(), warns_before) << "the failure must be WARNed";
  EXPECT_EQ(check_fill(rbuf_.data() + kPosted, kSent - kPosted + kGuard, kGuardByte), "")
      << "bytes written past the posted buffer";
  sbuf_.reset();
  rbuf_.reset();
  net().close_send(conn_.send);
  net().close_recv(conn_.recv);
  conn_ = Conn{};
}

// ---- Grouped receives
// ----------------------------------------------------------------------------

class Grouped : public Transfer {};
INSTANTIATE_TEST_SUITE_P(Pairs, Grouped,
                         ::testing::Values(Pair{"CrossDevice", false}, Pair{"Loopback", true}),
                         pair_name);

TEST_P(Grouped, OneToEightReceivesWithDistinctTagsAndSizes) {
  constexpr int kMax = 8;
  constexpr size_t kSlot = 40000;
  RegBuf rbufs[kMax], sbufs[kMax];
  for (int i = 0; i < kMax; ++i) {
    ASSERT_TRUE(rbufs[i].allocate(&net(), conn_.recv, kSlot + kGuard));
    ASSERT_TRUE(sbufs[i].allocate(&net(), conn_.send, kSlot));
  }
  for (int n = 1; n <= kMax; ++n) {
    SCOPED_TRACE("n = " + std::to_string(n));
    void* data[kMax];
    void* mhs[kMax];
    size_t caps[kMax];
    int tags[kMax];
    size_t sent[kMax];
    for (int i = 0; i < n; ++i) {
      data[i] = rbufs[i].data();
      mhs[i] = rbufs[i].mh();
      caps[i] = 4096 * (i + 1) + 17 * i;
      tags[i] = 1000 + 7 * i + n;
      sent[i] = caps[i] - 3 * i;             // i = 0: exactly the posted size; others smaller
      if (i == n - 1 && n > 2) sent[i] = 0;  // a zero-byte member of the group
      std::memset(rbufs[i].data(), kGuardByte, kSlot + kGuard);
      fill_pattern(sbufs[i].data(), sent[i], pattern_seed(sent[i], n, tags[i]));
    }
    void* rreq = nullptr;
    ASSERT_TRUE(post_until("irecv", &rreq, [&](void** req) {
      return net().irecv(conn_.recv, n, data, caps, tags, mhs, req);
    }));
    // The sender posts in reverse tag order: tags, not order, pick the buffer within a group.
    std::vector<void*> sreqs(n, nullptr);
    for (int i = n - 1; i >= 0; --i) {
      ASSERT_TRUE(post_until("isend", &sreqs[i], [&](void** req) {
        return net().isend(conn_.send, sbufs[i].data(), sent[i], tags[i], sbufs[i].mh(), req);
      }));
    }
    for (int i = 0; i < n; ++i) {
      int s = -1;
      ASSERT_TRUE(wait_done(net(), "send", sreqs[i], &s));
      EXPECT_EQ(s, static_cast<int>(sent[i]));
    }
    int sizes[64] = {};
    for (int& s : sizes) s = -1;
    ASSERT_TRUE(wait_done(net(), "grouped recv", rreq, sizes));
    for (int i = 0; i < n; ++i) {
      SCOPED_TRACE("member " + std::to_string(i) + " tag " + std::to_string(tags[i]));
      EXPECT_EQ(sizes[i], static_cast<int>(sent[i]));
      EXPECT_EQ(check_pattern(rbufs[i].data(), sent[i], pattern_seed(sent[i], n, tags[i])), "");
      EXPECT_EQ(check_fill(rbufs[i].data() + sent[i], kSlot + kGuard - sent[i], kGuardByte), "");
    }
    EXPECT_EQ(sizes[n], -1) << "test wrote past the n sizes";
  }
}

// ---- 32 requests in flight per comm
// --------------------------------------------------------------

class InFlight : public Transfer {};
INSTANTIATE_TEST_SUITE_P(Pairs, InFlight,
                         ::testing::Values(Pair{"CrossDevice", false}, Pair{"Loopback", true}),
                         pair_name);

TEST_P(InFlight, ThirtyTwoRequestsPerComm) {
  constexpr int kN = NCCL_NET_MAX_REQUESTS;
  constexpr size_t kSlot = 16384;
  ASSERT_TRUE(sbuf_.allocate(&net(), conn_.send, kN * kSlot));
  ASSERT_TRUE(rbuf_.allocate(&net(), conn_.recv, kN * kSlot));
  std::memset(rbuf_.data(), kGuardByte, kN * kSlot);
  std::vector<void*> rreqs(kN), sreqs(kN);
  std::vector<size_t> sizes(kN);
  for (int i = 0; i < kN; ++i) {
    sizes[i] = (i * 517 + 1) % kSlot;
    fill_pattern(sbuf_.data() + i * kSlot, sizes[i], pattern_seed(sizes[i], i));
  }
  for (int i = 0; i < kN; ++i) {  // all 32 receives outstanding before any send
    void* data = rbuf_.data() + i * kSlot;
    void* mh = rbuf_.mh();
    size_t cap = kSlot;
    int tag = i;
    ASSERT_TRUE(post_until(
        "irecv", &rreqs[i],
        [&](void** req) { return net().irecv(conn_.recv, 1, &data, &cap, &tag, &mh, req); }))
        << "receive " << i;
  }
  for (int i = 0; i < kN; ++i) {  // then 32 sends outstanding
    ASSERT_TRUE(post_until("isend", &sreqs[i],
                           [&](void** req) {
                             return net().isend(conn_.send, sbuf_.data() + i * kSlot, sizes[i], i,
                                                sbuf_.mh(), req);
                           }))
        << "send " << i;
  }
  // Complete in reverse order of posting.
  for (int i = kN - 1; i >= 0; --i) {
    int s = -1;
    ASSERT_TRUE(wait_done(net(), "recv", rreqs[i], &s)) << "receive " << i;
    EXPECT_EQ(s, static_cast<int>(sizes[i]));
    EXPECT_EQ(check_pattern(rbuf_.data() + i * kSlot, sizes[i], pattern_seed(sizes[i], i)), "");
    ASSERT_TRUE(wait_done(net(), "send", sreqs[i], nullptr)) << "send " << i;
  }
}

// ---- Two processes: listen in the parent, connect in a child
// -------------------------------------

constexpr int kChildIterations = 1;

// Child role (argv: --sluice-child <fd> <dev>): reads the handle from the pipe, connects and sends
// every size of kSizes with the agreed pattern. <dev> is a device index, or "<a>+<b>": the child
// fuses a and b (makeVDevice, SLUICE_TEST_FUSE) and sends from the fused device. Exit status 0 =
// all sends completed.
int child_main(int fd, const std::string& dev_spec) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  size_t got = 0;
  const auto deadline = Clock::now() + wait_limit();
  while (got < sizeof handle) {
    pollfd p{fd, POLLIN, 0};
    if (Clock::now() > deadline || poll(&p, 1, 1000) < 0) {
      std::fprintf(stderr, "child: no handle from the parent\n");
      return 2;
    }
    if (!(p.revents & (POLLIN | POLLHUP))) continue;
    ssize_t n = read(fd, handle + got, sizeof handle - got);
    if (n <= 0) {
      std::fprintf(stderr, "child: pipe closed after %zu bytes\n", got);
      return 2;
    }
    got += static_cast<size_t>(n);
  }
  Net n(12);
  if (ncclResult_t r = n.init(0xc41d); r != ncclSuccess) {
    std::fprintf(stderr, "child: init returned %d\n", r);
    return 3;
  }
  int dev = std::atoi(dev_spec.c_str());
  if (const size_t plus = dev_spec.find('+'); plus != std::string::npos) {
    const int a = dev, b = std::atoi(dev_spec.c_str() + plus + 1);
    if (ncclResult_t r = n.make_vdevice({a, b}, &dev); r != ncclSuccess) {
      std::fprintf(stderr, "child: makeVDevice({%d, %d}) returned %d: %s\n", a, b, r,
                   last_warn().c_str());
      return 3;
    }
  }
  void* sc = nullptr;
  while (sc == nullptr) {
    if (ncclResult_t r = n.connect(dev, handle, &sc); r != ncclSuccess) {
      std::fprintf(stderr, "child: connect returned %d\n", r);
      return 4;
    }
    if (Clock::now() > deadline) {
      std::fprintf(stderr, "child: connect did not complete\n");
      return 4;
    }
    if (sc == nullptr) usleep(100);
  }
  int rc = 0;
  {
    RegBuf sbuf;
    if (!sbuf.allocate(&n, sc, kMaxSize)) return 5;
    for (int iter = 0; iter < kChildIterations && rc == 0; ++iter) {
      for (size_t size : kSizes) {
        fill_pattern(sbuf.data(), size, pattern_seed(size, 100 + iter));
        void* req = nullptr;
        auto ok = post_until("isend", &req, [&](void** r) {
          return n.isend(sc, sbuf.data(), size, 42, sbuf.mh(), r);
        });
        if (ok) ok = wait_done(n, "send", req, nullptr);
        if (!ok) {
          std::fprintf(stderr, "child: size %zu: %s\n", size, ok.message());
          rc = 6;
          break;
        }
      }
    }
  }
  if (n.close_send(sc) != ncclSuccess) rc = rc ? rc : 7;
  if (n.finalize() != ncclSuccess) rc = rc ? rc : 8;
  return rc;
}

TEST(TwoProcess, ListenInParentConnectInChild) {
  REQUIRE_BED();
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* lc = nullptr;
  ASSERT_EQ(net().listen(bed().dev_b, handle, &lc), ncclSuccess);
  ASSERT_NE(lc, nullptr);
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  // posix_spawn (not a bare fork) so the child starts with a fresh address space: no verbs state
  // or registered memory is shared with the parent.
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[0], 3);  // dup2 clears O_CLOEXEC on fd 3
  // The child's own engine lists the physical devices only: it makes the fused one itself.
  const std::string dev = bed().dev_a == bed().vdev
                              ? std::to_string(bed().phys_a) + "+" + std::to_string(bed().phys_b)
                              : std::to_string(bed().dev_a);
  char arg0[] = "plugin_rdma_test";
  char arg1[] = "--sluice-child";
  char arg2[] = "3";
  std::vector<char> arg3(dev.begin(), dev.end());
  arg3.push_back('\0');
  char* argv[] = {arg0, arg1, arg2, arg3.data(), nullptr};
  pid_t pid = -1;
  int err = posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[0]);
  ASSERT_EQ(err, 0) << "posix_spawn: " << strerror(err);
  ASSERT_EQ(write(fds[1], handle, sizeof handle), static_cast<ssize_t>(sizeof handle));
  close(fds[1]);

  auto reap = [&](bool kill_it) -> int {
    if (kill_it) kill(pid, SIGKILL);
    const auto deadline = Clock::now() + wait_limit();
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        return -1;
      }
      usleep(1000);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  };

  void* rc = nullptr;
  const auto deadline = Clock::now() + wait_limit();
  while (rc == nullptr) {
    ncclResult_t r = net().accept(lc, &rc);
    if (r != ncclSuccess || Clock::now() > deadline) {
      net().close_listen(lc);
      FAIL() << "accept returned " << r << " (child exit " << reap(true) << ")";
    }
    if (rc == nullptr) usleep(100);
  }
  EXPECT_EQ(net().close_listen(lc), ncclSuccess);
  {
    RegBuf rbuf;
    ASSERT_TRUE(rbuf.allocate(&net(), rc, kMaxSize + kGuard));
    for (int iter = 0; iter < kChildIterations; ++iter) {
      for (size_t size : kSizes) {
        SCOPED_TRACE("size " + std::to_string(size));
        std::memset(rbuf.data(), kGuardByte, size + kGuard);
        void* data = rbuf.data();
        void* mh = rbuf.mh();
        size_t cap = size;
        int tag = 42;
        void* req = nullptr;
        ASSERT_TRUE(post_until("irecv", &req, [&](void** r) {
          return net().irecv(rc, 1, &data, &cap, &tag, &mh, r);
        }));
        int got = -1;
        auto ok = wait_done(net(), "recv", req, &got);
        if (!ok) {
          ADD_FAILURE() << ok.message() << " (child exit " << reap(true) << ")";
          net().close_recv(rc);
          return;
        }
        EXPECT_EQ(got, static_cast<int>(size));
        EXPECT_EQ(check_pattern(rbuf.data(), size, pattern_seed(size, 100 + iter)), "");
        EXPECT_EQ(check_fill(rbuf.data() + size, kGuard, kGuardByte), "");
      }
    }
  }
  EXPECT_EQ(reap(false), 0) << "child failed (its stderr is above)";
  EXPECT_EQ(net().close_recv(rc), ncclSuccess);
}

// ---- 64 comms open at once
// -----------------------------------------------------------------------

TEST(ManyComms, SixtyFourOpenAtOnce) {
  REQUIRE_BED();
  constexpr int kComms = 64;
  constexpr size_t kSize = 4096 + 11;
  std::vector<Conn> conns(kComms);
  std::vector<std::unique_ptr<RegBuf>> sb(kComms), rb(kComms);
  for (int i = 0; i < kComms; ++i) {
    ASSERT_TRUE(open_conn(net(), bed().dev_a, bed().dev_b, &conns[i])) << "connection " << i;
    sb[i] = std::make_unique<RegBuf>();
    rb[i] = std::make_unique<RegBuf>();
    ASSERT_TRUE(sb[i]->allocate(&net(), conns[i].send, kSize));
    ASSERT_TRUE(rb[i]->allocate(&net(), conns[i].recv, kSize));
  }
  for (int i = 0; i < kComms; ++i) {  // all 64 still open: use each one
    fill_pattern(sb[i]->data(), kSize, pattern_seed(kSize, i));
    int got = -1;
    ASSERT_TRUE(send_recv(net(), conns[i], *sb[i], kSize, *rb[i], kSize, i, &got)) << "comm " << i;
    EXPECT_EQ(got, static_cast<int>(kSize));
    EXPECT_EQ(check_pattern(rb[i]->data(), kSize, pattern_seed(kSize, i)), "") << "comm " << i;
  }
  for (int i = 0; i < kComms; ++i) {
    sb[i].reset();
    rb[i].reset();
    EXPECT_TRUE(close_conn(net(), &conns[i])) << "comm " << i;
  }
}

// ---- Every ABI version
// ---------------------------------------------------------------------------

class Versions : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(Abi, Versions, ::testing::Values(8, 9, 10, 11, 12),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return "v" + std::to_string(i.param);
                         });

TEST_P(Versions, SendRecvThroughTable) {
  REQUIRE_BED();
  Net n(GetParam());
  ASSERT_EQ(n.init(0x700 + GetParam()), ncclSuccess);
  Conn c;
  ASSERT_TRUE(open_bed_conn(n, &c));
  {
    RegBuf sbuf, rbuf;
    ASSERT_TRUE(sbuf.allocate(&n, c.send, 65537));
    ASSERT_TRUE(rbuf.allocate(&n, c.recv, 65537 + kGuard));
    for (size_t size : {size_t{0}, size_t{1}, size_t{4096}, size_t{65537}}) {
      SCOPED_TRACE("size " + std::to_string(size));
      const uint64_t seed = pattern_seed(size, GetParam());
      fill_pattern(sbuf.data(), size, seed);
      std::memset(rbuf.data(), kGuardByte, size + kGuard);
      int got = -1;
      ASSERT_TRUE(send_recv(n, c, sbuf, size, rbuf, size + kGuard, 5, &got));
      EXPECT_EQ(got, static_cast<int>(size));
      EXPECT_EQ(check_pattern(rbuf.data(), size, seed), "");
      EXPECT_EQ(check_fill(rbuf.data() + size, kGuard, kGuardByte), "");
    }
  }
  EXPECT_TRUE(close_conn(n, &c));
  EXPECT_EQ(n.finalize(), ncclSuccess);
}

// ---- Stress: many random-size messages, 32 in flight
// ---------------------------------------------

}  // namespace
}  // namespace nettest

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--sluice-child") {
    return nettest::child_main(std::atoi(argv[2]), argv[3]);
  }
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new nettest::BedEnvironment);
  return RUN_ALL_TESTS();
}
