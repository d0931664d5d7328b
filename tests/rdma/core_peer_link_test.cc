// The peer link's handshakes, over real verbs through core's API (issue 32):
//  * a connect to a process this one already has a link with runs its handshake on that link: no
//    TCP connection is made (the kernel's TCP open counters do not move), and every comm carries
//    data; with SLUICE_OOB_LINK_HANDSHAKE=0 (core_peer_link_tcp) each connect makes its own;
//  * a connect on the link to a listen that was closed is refused with the reason, at once;
//  * a connect whose link ends before the listener answers (its hello unread) goes on over TCP;
//  * a connect whose process holds another connect's never-released claim on the first link to the
//    peer waits for it at most kLinkFirstWaitMs (2 s), then adopts its own socket as a link.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core_pair.h"
#include "health/peer_link.h"
#include "rdma_env.h"
#include "sluice/core/api.h"
#include "sluice/core/wire/link.h"
#include "tcp_opens.h"

namespace {

using namespace sluice;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

using bench::tcp_opens;
using bench::TcpOpens;

class CorePeerLink : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pair = rdmatest::test_pair();
    SLUICE_REQUIRE_PAIR(pair);
    ASSERT_TRUE(engine_acquire(nullptr).is_ok());
    acquired_ = true;
    ASSERT_TRUE(rdmatest::core_pair_devices(pair, &dev_a_, &dev_b_));
    ASSERT_EQ(link_count(), 0u) << "a link is open before the test";
  }
  void TearDown() override {
    if (acquired_) engine_release();
  }

  // A listen on dev_b; its handle.
  ListenComm* listen_b(std::vector<char>* handle) {
    handle->assign(kHandleSize, 0);
    ListenComm* l = nullptr;
    EXPECT_TRUE(listen(dev_b_, handle->data(), &l).is_ok());
    return l;
  }

  // Connects to `handle` and accepts on `l` as NCCL does (closeListen after the accept). The
  // connect's time in ms, -1 on failure (the test has failed then).
  double pair_up(std::vector<char>& handle, ListenComm* l, SendComm** s, RecvComm** r) {
    *s = nullptr;
    *r = nullptr;
    const auto t0 = Clock::now();
    double connected_ms = -1;
    while (*s == nullptr || *r == nullptr) {
      if (ms_since(t0) > 30000.0) {
        ADD_FAILURE() << "no pair within 30 s";
        return -1;
      }
      if (*s == nullptr) {
        Status st = connect(dev_a_, handle.data(), CommConfig{}, s);
        if (!st.is_ok()) {
          ADD_FAILURE() << st.message();
          return -1;
        }
        if (*s != nullptr) connected_ms = ms_since(t0);
      }
      if (*r == nullptr) {
        Status st = accept(l, r);
        if (!st.is_ok()) {
          ADD_FAILURE() << st.message();
          return -1;
        }
        if (*r != nullptr) {
          EXPECT_TRUE(close_listen(l).is_ok());
        }
      }
    }
    return connected_ms;
  }

  bool acquired_ = false;
  int dev_a_ = -1, dev_b_ = -1;
};

TEST_F(CorePeerLink, AConnectToAKnownProcessMakesNoTcpConnection) {
  const char* env = std::getenv("SLUICE_OOB_LINK_HANDSHAKE");
  const bool on_link = env == nullptr || std::string(env) != "0";
  constexpr int kMore = 8;
  std::vector<char> handle;
  std::vector<SendComm*> sends(kMore + 1, nullptr);
  std::vector<RecvComm*> recvs(kMore + 1, nullptr);
  // The first pair between the two "processes" (one here, loopback) makes the link, over TCP.
  const TcpOpens t0 = tcp_opens();
  ASSERT_GE(t0.active, 0) << "/proc/net/snmp has no Tcp ActiveOpens";
  ListenComm* l = listen_b(&handle);
  ASSERT_GE(pair_up(handle, l, &sends[0], &recvs[0]), 0.0);
  const TcpOpens t1 = tcp_opens();
  EXPECT_GE(t1.active - t0.active, 1) << "the first connect made no TCP connection?";
  EXPECT_EQ(link_count(), 2u) << "one link: its two ends in this process";

  const LinkHandshakeCounts before = link_handshake_counts();
  double ms = 0;
  for (int i = 1; i <= kMore; ++i) {
    l = listen_b(&handle);
    const double t = pair_up(handle, l, &sends[i], &recvs[i]);
    ASSERT_GE(t, 0.0);
    ms += t;
  }
  const TcpOpens t2 = tcp_opens();
  std::printf("%d more connects (handshake %s): %.1f ms each; TCP opens: %ld active, %ld passive\n",
              kMore, on_link ? "on the link" : "over TCP", ms / kMore, t2.active - t1.active,
              t2.passive - t1.passive);
  if (on_link) {
    EXPECT_EQ(t2.active - t1.active, 0) << "a connect to a known process made a TCP connection";
    EXPECT_EQ(t2.passive - t1.passive, 0) << "the listener took a TCP connection";
  } else {
    EXPECT_GE(t2.active - t1.active, kMore) << "SLUICE_OOB_LINK_HANDSHAKE=0: one per connect";
  }
  EXPECT_EQ(link_count(), 2u) << "every comm rides the first link";
  const LinkHandshakeCounts after = link_handshake_counts();
  EXPECT_EQ(after.hellos_sent - before.hellos_sent, on_link ? static_cast<uint64_t>(kMore) : 0u);
  EXPECT_EQ(after.hellos_taken - before.hellos_taken, after.hellos_sent - before.hellos_sent);
  EXPECT_EQ(after.fell_back, before.fell_back);
  for (int i = 0; i <= kMore; ++i) {
    rdmatest::check_one_message(sends[i], recvs[i], static_cast<unsigned>(i));
  }

  // A connect to a listen closed meanwhile is refused with the reason, on the link too. (Another
  // listen keeps the shared port open, so that over TCP the refusal is the listener's too.)
  std::vector<char> keeper_handle;
  ListenComm* keeper = listen_b(&keeper_handle);
  l = listen_b(&handle);
  ASSERT_TRUE(close_listen(l).is_ok());
  SendComm* orphan = nullptr;
  Status st;
  const auto t_orphan = Clock::now();
  while (orphan == nullptr && st.is_ok() && ms_since(t_orphan) < 30000.0) {
    st = connect(dev_a_, handle.data(), CommConfig{}, &orphan);
    RecvComm* none = nullptr;  // the listener's process reads (over TCP: takes) the connection
    EXPECT_TRUE(accept(keeper, &none).is_ok());
    EXPECT_EQ(none, nullptr) << "the keeper's listen had no connector";
  }
  EXPECT_EQ(orphan, nullptr);
  EXPECT_EQ(st.code(), Code::kRemoteError) << st.message();
  if (on_link) {
    EXPECT_NE(st.message().find("nonce mismatch"), std::string::npos) << st.message();
  }
  EXPECT_LT(ms_since(t_orphan), 5000.0) << "refused at once, not at a time-out";
  std::printf("connect to a closed listen: %.0f ms: %s\n", ms_since(t_orphan),
              st.message().c_str());
  EXPECT_TRUE(close_listen(keeper).is_ok());

  for (int i = 0; i <= kMore; ++i) {
    EXPECT_TRUE(close_send(sends[i]).is_ok());
    EXPECT_TRUE(close_recv(recvs[i]).is_ok());
  }
  EXPECT_EQ(link_count(), 0u) << "the link outlived its comms";
}

// The link ends after the hello went out and before the listener read it (the listener's process
// closed its last comm to this one: its end of the link closed, the hello unread): the connect
// goes on over TCP, with a new link, and the comm works. The connect sees the link's end only
// because it had its hello out on it: a link already seen closed is never offered.
TEST_F(CorePeerLink, AConnectWhoseLinkEndsBeforeTheAnswerGoesOnOverTcp) {
  const char* env = std::getenv("SLUICE_OOB_LINK_HANDSHAKE");
  ASSERT_FALSE(env != nullptr && std::string(env) == "0")
      << "needs handshakes on the link (core_peer_link_tcp leaves this test out)";
  std::vector<char> handle1, handle2;
  SendComm *s1 = nullptr, *s2 = nullptr;
  RecvComm *r1 = nullptr, *r2 = nullptr;
  ListenComm* l1 = listen_b(&handle1);
  ASSERT_GE(pair_up(handle1, l1, &s1, &r1), 0.0);  // the link
  ListenComm* l2 = listen_b(&handle2);
  const LinkHandshakeCounts c0 = link_handshake_counts();
  const TcpOpens t0 = tcp_opens();
  // connect until its hello is out (no accept is called: nobody here reads the listener's end).
  const auto t_start = Clock::now();
  while (link_handshake_counts().hellos_sent == c0.hellos_sent) {
    ASSERT_LT(ms_since(t_start), 10000.0) << "the connect never sent its hello";
    ASSERT_TRUE(connect(dev_a_, handle2.data(), CommConfig{}, &s2).is_ok());
    ASSERT_EQ(s2, nullptr) << "connected without the listener";
  }
  // Both comms on the link close. In one process both ends of the link are this process's, and
  // the hello went out on either: the end it went to has no comm left and closes with the hello
  // unread (the other is held open by the connect's hold), as the listener's process closing its
  // last comm to this one does.
  ASSERT_TRUE(close_recv(r1).is_ok());
  ASSERT_TRUE(close_send(s1).is_ok());
  ASSERT_GE(pair_up(handle2, l2, &s2, &r2), 0.0);
  const LinkHandshakeCounts c1 = link_handshake_counts();
  const TcpOpens t1 = tcp_opens();
  std::printf("link ended under a hello: fell back %llu time(s), TCP opens %ld active\n",
              static_cast<unsigned long long>(c1.fell_back - c0.fell_back), t1.active - t0.active);
  EXPECT_EQ(c1.fell_back - c0.fell_back, 1u) << "the connect did not go back to TCP";
  EXPECT_EQ(c1.hellos_taken, c0.hellos_taken) << "the hello was read after all";
  EXPECT_EQ(t1.active - t0.active, 1) << "the fallback's one TCP connection";
  rdmatest::check_one_message(s2, r2, 9);
  EXPECT_TRUE(close_send(s2).is_ok());
  EXPECT_TRUE(close_recv(r2).is_ok());
  EXPECT_EQ(link_count(), 0u) << "a link outlived its comms";
}

TEST_F(CorePeerLink, AConnectWaitsForAnotherConnectsFirstLinkAtMostTwoSeconds) {
  std::vector<char> handle;
  ListenComm* l = listen_b(&handle);
  wire::Nonce proc;
  ASSERT_TRUE(wire::handle_link(handle.data(), &proc)) << "the handle names no process";
  // Another connect of this process is making the first link to the listener's process, and its
  // handshake is never polled again: its claim stays.
  LinkClaim stuck;
  ASSERT_TRUE(link_first(proc, &stuck));
  ASSERT_TRUE(stuck.held());
  SendComm* s = nullptr;
  RecvComm* r = nullptr;
  const double connected_ms = pair_up(handle, l, &s, &r);
  ASSERT_GE(connected_ms, 0.0);
  std::printf("connect with another connect's first-link claim held: %.0f ms\n", connected_ms);
  EXPECT_GE(connected_ms, 1900.0) << "the connect did not wait for the other connect's link";
  EXPECT_LT(connected_ms, 2000.0 + 8000.0) << "the wait did not end at its bound";
  EXPECT_TRUE(stuck.held()) << "the claim was never released: the connect went on past it";
  EXPECT_EQ(link_count(), 2u) << "the connect adopted its socket: one link, its two ends here";
  rdmatest::check_one_message(s, r, 3);
  EXPECT_TRUE(close_send(s).is_ok());
  EXPECT_TRUE(close_recv(r).is_ok());
  EXPECT_EQ(link_count(), 0u) << "the link outlived its comms";
  stuck.release();
}

}  // namespace
