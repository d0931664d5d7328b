// Pure logic of peer liveness (core/src/health/liveness.cc): keepalive settings from
// SLUICE_HEARTBEAT_MS, the poll rate limiter, what a socket read means, the reason texts, and the
// async-event table.
#include "../../core/src/health/liveness.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <string>

namespace sluice {
namespace {

TEST(Keepalive, OffAtZero) {
  KeepaliveParams k = keepalive_params(0);
  EXPECT_FALSE(k.enabled);
  EXPECT_EQ(k.bound_ms, 0);
}

TEST(Keepalive, RoundsUpToWholeSecondsAndBoundsAtFiveHeartbeats) {
  KeepaliveParams k = keepalive_params(10000);
  EXPECT_TRUE(k.enabled);
  EXPECT_EQ(k.idle_s, 10);
  EXPECT_EQ(k.intvl_s, 10);
  EXPECT_EQ(k.count, 3);
  EXPECT_EQ(k.user_timeout_ms, 40000u);
  EXPECT_EQ(k.bound_ms, 50000);
  k = keepalive_params(1);  // below a second: the kernel counts seconds
  EXPECT_EQ(k.idle_s, 1);
  EXPECT_EQ(k.user_timeout_ms, 4000u);
  k = keepalive_params(1500);
  EXPECT_EQ(k.idle_s, 2);
  EXPECT_EQ(k.bound_ms, 10000);
  k = keepalive_params(3600000);  // the table's maximum still fits TCP_USER_TIMEOUT (unsigned)
  EXPECT_EQ(k.user_timeout_ms, 3600u * 1000u * 4u);
}

TEST(PollGate, AtMostOncePerPeriod) {
  int64_t next = 0;
  const int64_t ms = 1000000;
  EXPECT_TRUE(poll_due(5 * ms, &next, 100));
  EXPECT_EQ(next, 105 * ms);
  EXPECT_FALSE(poll_due(6 * ms, &next, 100));
  EXPECT_FALSE(poll_due(105 * ms - 1, &next, 100));
  EXPECT_TRUE(poll_due(105 * ms, &next, 100));
  EXPECT_FALSE(poll_due(106 * ms, &next, 100));
  // A long pause polls once, then waits a whole period again (no burst of catch-up polls).
  EXPECT_TRUE(poll_due(10000 * ms, &next, 100));
  EXPECT_FALSE(poll_due(10001 * ms, &next, 100));
}

TEST(SocketRead, Classified) {
  const uint8_t bye[] = {kGoodbyeByte, kGoodbyeByte};
  const uint8_t junk[] = {kGoodbyeByte, 0x5a};
  EXPECT_EQ(classify_read(-1, EAGAIN, nullptr), SocketSeen::kNothing);
  EXPECT_EQ(classify_read(-1, EWOULDBLOCK, nullptr), SocketSeen::kNothing);
  EXPECT_EQ(classify_read(-1, EINTR, nullptr), SocketSeen::kNothing);
  EXPECT_EQ(classify_read(0, 0, nullptr), SocketSeen::kEof);
  EXPECT_EQ(classify_read(-1, ECONNRESET, nullptr), SocketSeen::kError);
  EXPECT_EQ(classify_read(-1, ETIMEDOUT, nullptr), SocketSeen::kError);
  EXPECT_EQ(classify_read(1, 0, bye), SocketSeen::kGoodbye);
  EXPECT_EQ(classify_read(2, 0, bye), SocketSeen::kGoodbye);
  EXPECT_EQ(classify_read(2, 0, junk), SocketSeen::kGarbage);
  EXPECT_NE(kGoodbyeByte, 0x5a) << "must differ from the handshake's ready byte";
}

bool has(const std::string& s, const char* part) {
  return s.find(part) != std::string::npos;
}

TEST(SocketRead, ReasonsNameThePeerAndWhatWasSeen) {
  const std::string peer = "10.1.2.3:4711";
  std::string r = peer_gone_reason(SocketSeen::kEof, 0, false, peer, 10000);
  EXPECT_TRUE(has(r, "10.1.2.3:4711")) << r;
  EXPECT_TRUE(has(r, "EOF")) << r;
  EXPECT_TRUE(has(r, "process exited or was killed?")) << r;
  r = peer_gone_reason(SocketSeen::kError, ECONNRESET, false, peer, 10000);
  EXPECT_TRUE(has(r, "reset the connection")) << r;
  EXPECT_TRUE(has(r, peer.c_str())) << r;
  r = peer_gone_reason(SocketSeen::kError, ETIMEDOUT, false, peer, 7000);
  EXPECT_TRUE(has(r, "SLUICE_HEARTBEAT_MS=7000")) << r;
  EXPECT_TRUE(has(r, "host down")) << r;
  r = peer_gone_reason(SocketSeen::kEof, 0, true, peer, 10000);
  EXPECT_TRUE(has(r, "closed its comm normally")) << r;
  r = peer_gone_reason(SocketSeen::kGarbage, 0, false, peer, 10000);
  EXPECT_TRUE(has(r, "unexpected bytes")) << r;
  r = peer_gone_reason(SocketSeen::kError, EHOSTUNREACH, false, peer, 10000);
  EXPECT_TRUE(has(r, "failed")) << r;
}

TEST(AsyncEvents, FatalOnesHaveScopeMeaningAndCause) {
  struct Want {
    ibv_event_type t;
    AsyncEventInfo::Scope scope;
  };
  const Want wants[] = {
      {IBV_EVENT_QP_FATAL, AsyncEventInfo::kQp},
      {IBV_EVENT_QP_REQ_ERR, AsyncEventInfo::kQp},
      {IBV_EVENT_QP_ACCESS_ERR, AsyncEventInfo::kQp},
      {IBV_EVENT_CQ_ERR, AsyncEventInfo::kCq},
      {IBV_EVENT_PORT_ERR, AsyncEventInfo::kPort},
      {IBV_EVENT_DEVICE_FATAL, AsyncEventInfo::kDevice},
  };
  for (const Want& w : wants) {
    SCOPED_TRACE(static_cast<int>(w.t));
    AsyncEventInfo i = async_event_info(w.t);
    EXPECT_EQ(i.scope, w.scope);
    EXPECT_GT(std::string(i.meaning).size(), 10u);
    EXPECT_GT(std::string(i.cause).size(), 10u);
  }
  EXPECT_TRUE(has(async_event_info(IBV_EVENT_PORT_ERR).cause, "cable"));
  EXPECT_TRUE(has(async_event_info(IBV_EVENT_QP_ACCESS_ERR).meaning, "rkey"));
}

TEST(AsyncEvents, BenignOnesFailNothing) {
  for (ibv_event_type t :
       {IBV_EVENT_PORT_ACTIVE, IBV_EVENT_COMM_EST, IBV_EVENT_LID_CHANGE, IBV_EVENT_GID_CHANGE,
        IBV_EVENT_SQ_DRAINED, IBV_EVENT_QP_LAST_WQE_REACHED, IBV_EVENT_CLIENT_REREGISTER,
        IBV_EVENT_SM_CHANGE}) {
    EXPECT_EQ(async_event_info(t).scope, AsyncEventInfo::kNone) << static_cast<int>(t);
  }
}

}  // namespace
}  // namespace sluice

// A connect that failed while its local port was not ACTIVE says so first (the likely cause of any
// failure then); an ACTIVE port gives no reason.
TEST(LocalPort, HintOnlyWhenNotActive) {
  EXPECT_EQ(sluice::local_port_hint("dev0:1", IBV_PORT_ACTIVE), "");
  const std::string down = sluice::local_port_hint("dev0:1", IBV_PORT_DOWN);
  EXPECT_EQ(down.find("the local port dev0:1 is DOWN: "), 0u) << down;
  EXPECT_NE(down.find("likely cause: its link is down"), std::string::npos) << down;
  const std::string init = sluice::local_port_hint("dev0:2", IBV_PORT_INIT);
  EXPECT_NE(init.find("dev0:2 is not ACTIVE (init)"), std::string::npos) << init;
}
