// Failover's driver on comms without verbs objects (issue 31): the steps that decide, not the
// verbs they then call. A Conn made here has no device, CQ or QP; each test drives the driver only
// where it touches none: the receive-queue half of the fence and its bound, the FENCE that
// follows, a stale completion of a retired or destroyed QP, a port that came back while its path
// could not take it yet, and a late FENCE of a failed attempt.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include "datapath/failover_dp.h"
#include "health/failover.h"
#include "sluice/core/wire/path_msg.h"

namespace sluice {
namespace {

using failover::State;

failover::Timing timing() {
  failover::Timing t;
  t.retry_base_ms = 100;
  t.retry_cap_ms = 100;
  return t;
}

// A two-path comm of one QP per path, failover on, `sender` side; no device (describe_qp names
// "?"). Its socket is one end of a socketpair: *peer_fd reads what it sends.
void make_comm(Conn& c, bool sender, int* peer_fd) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  c.fd = sv[0];
  *peer_fd = sv[1];
  c.npaths = 2;
  c.qp.make(2);
  c.nqps = 2;
  c.qpp = 1;
  c.peer = "test-peer";
  const uint16_t w[2] = {1, 1};
  c.paths = stripe::path_weights(w, 2, w, 2);
  fo_init(c.fo, true, sender, 2, timing());
  c.fo.path_set = 2;
  (void)fo_restripe(c.fo, c.paths);
}

// Drives path p into kFencing as a local fault would (its QPs fenced, markers posted, not back).
void start_fence(Conn& c, int p, int64_t now) {
  (void)c.fo.path[p].on_fault(failover::Cause::kLocalPort, "test", now);
  ASSERT_EQ(c.fo.path[p].state(), State::kFencing);
  QpLife& l = c.qp[p];
  l.qpn = 100 + static_cast<uint32_t>(p);
  l.led.fenced = l.led.marker_posted = true;
  l.fence_ms = now;
}

std::vector<wire::PathMsg> read_msgs(int fd) {
  std::vector<wire::PathMsg> out;
  uint8_t buf[4096];
  const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
  size_t at = 0;
  while (n > 0 && at < static_cast<size_t>(n)) {
    wire::PathMsg m;
    std::string why;
    size_t used = 0;
    if (wire::decode_path_msg(buf + at, static_cast<size_t>(n) - at, &m, &why, &used) !=
        wire::PathMsgParse::kOk)
      break;
    out.push_back(m);
    at += used;
  }
  return out;
}

// The receive queue's half of the fence (issue 31, defect 2): the receiver's FENCE states its
// close counts only once every receive WR posted on the fenced QP has completed, not when the
// send queue's marker is back; a close counted after the FENCE is refused (health/qp_ledger.h).
TEST(FailoverDriver, TheReceiversFenceWaitsForEveryReceiveWrOfTheFencedQp) {
  RecvComm r;
  int peer = -1;
  make_comm(r.c, false, &peer);
  QpLife& l = r.c.qp[1];
  // Two receive WRs posted on QP 1 (no verbs here: nothing is left to move to the substitute once
  // both closes are counted); one close polled before the fault, one still on the queue.
  ledger::on_credits(l.led, 2);
  ASSERT_TRUE(ledger::on_close(l.led).is_ok());
  l.rq_outstanding = 1;
  const int64_t t0 = dp::fo_now_ms();
  start_fence(r.c, 1, t0);
  l.led.marker_seen = true;  // the send queue's marker is back first

  ASSERT_TRUE(dp::fo_fence_step(r.c, 1, t0 + 1).is_ok()) << r.c.failure.message();
  EXPECT_EQ(r.c.fo.path[1].state(), State::kFencing) << "no FENCE with receive WRs outstanding";
  EXPECT_TRUE(read_msgs(peer).empty()) << "the FENCE went out before the receive queue drained";
  EXPECT_FALSE(l.led.fence_told);

  // The close that completed after the marker is counted: the queue is drained.
  ASSERT_TRUE(ledger::on_close(l.led).is_ok());
  l.rq_outstanding = 0;
  ASSERT_TRUE(dp::fo_fence_step(r.c, 1, t0 + 2).is_ok()) << r.c.failure.message();
  const std::vector<wire::PathMsg> sent = read_msgs(peer);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].type, wire::PathMsgType::kFence);
  EXPECT_EQ(sent[0].path, 1);
  EXPECT_EQ(sent[0].last_seq[0], 2u) << "both closes counted";
  EXPECT_EQ(sent[0].sub, 1) << "path 0 substitutes";
  EXPECT_TRUE(l.led.fence_told);
  EXPECT_EQ(l.led.credits, l.led.closes) << "its credits settled by the fence";
  // A close of the fenced QP polled now is one the FENCE did not count: refused.
  EXPECT_FALSE(ledger::on_close(l.led).is_ok());
  close(peer);
}

// The local half of the fence is bounded (issue 31, defect 7): SLUICE_CLOSE_TIMEOUT_MS (2 s
// without an engine) after it began, a fence whose marker or receive WRs never came back fails
// the comm naming what is left, even with SLUICE_FAILOVER_FENCE_MS at 0.
TEST(FailoverDriver, ALocalFenceThatNeverCompletesFailsTheCommWithinTheCloseTimeout) {
  SendComm s;
  int peer = -1;
  make_comm(s.c, true, &peer);
  const int64_t t0 = dp::fo_now_ms();
  start_fence(s.c, 1, t0);  // its marker never comes back
  ASSERT_TRUE(dp::fo_fence_step(s.c, 1, t0 + 1999).is_ok());
  EXPECT_FALSE(s.c.failed());
  Status st = dp::fo_fence_step(s.c, 1, t0 + 2001);
  ASSERT_FALSE(st.is_ok());
  EXPECT_TRUE(s.c.failed());
  EXPECT_NE(st.message().find("did not complete within SLUICE_CLOSE_TIMEOUT_MS=2000"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("qpn 101: its drain marker not back"), std::string::npos)
      << st.message();
  close(peer);
}

// Stale completions (issue 31, defect 11): a flush of a QP the comm no longer holds is ignored on
// a failover comm; a retired QP's marker and receive WRs are counted until it is drained (then
// its slot is free); a success on a retired QP that is not a recovery check is refused.
TEST(FailoverDriver, StaleCompletionsOfRetiredOrDestroyedQpsNeverFailTheComm) {
  RecvComm r;
  int peer = -1;
  make_comm(r.c, false, &peer);
  ibv_wc flush{};
  flush.qp_num = 4242;
  flush.status = IBV_WC_WR_FLUSH_ERR;
  EXPECT_TRUE(dp::fo_stale_wc(r.c, flush, 0, "receive").is_ok());
  EXPECT_FALSE(r.c.failed()) << "a flush of a destroyed incarnation";

  r.c.retired_qps = std::make_unique<RetiredQp[]>(kMaxRetiredQps);
  RetiredQp& ret = r.c.retired_list()[3];
  ret.index = 1;
  ret.qpn = 77;
  ret.member = 1;
  ret.rq_outstanding = 1;
  ibv_wc credit{};
  credit.qp_num = 77;
  credit.status = IBV_WC_WR_FLUSH_ERR;
  credit.wr_id = 0;  // a receive WR (the check's credit)
  ibv_wc marker = credit;
  marker.wr_id = kWrDrainMarker | kWrDrainRetired | 3;
  ASSERT_TRUE(dp::fo_stale_wc(r.c, marker, 1, "receive").is_ok());
  EXPECT_TRUE(static_cast<bool>(ret)) << "a receive WR still to come";
  ibv_wc wrong_member = credit;
  ASSERT_TRUE(dp::fo_stale_wc(r.c, wrong_member, 0, "receive").is_ok());
  EXPECT_TRUE(static_cast<bool>(ret)) << "qpn 77 on member 0 is another QP";
  ASSERT_TRUE(dp::fo_stale_wc(r.c, credit, 1, "receive").is_ok());
  EXPECT_FALSE(static_cast<bool>(ret)) << "drained: destroyed, its slot free";
  EXPECT_FALSE(r.c.failed());

  ret.index = 0;
  ret.qpn = 78;
  ret.member = 0;
  ret.rq_outstanding = 2;
  ibv_wc check{};
  check.qp_num = 78;
  check.status = IBV_WC_SUCCESS;
  check.wr_id = 0;
  check.imm_data = htonl(wire::kImmPathCheck);
  ASSERT_TRUE(dp::fo_stale_wc(r.c, check, 0, "receive").is_ok()) << "a dropped attempt's check";
  ibv_wc late = check;
  late.imm_data = htonl(wire::fused_imm(3, 4096));
  EXPECT_FALSE(dp::fo_stale_wc(r.c, late, 0, "receive").is_ok());
  EXPECT_NE(r.c.failure.message().find("succeeded on retired qpn 78"), std::string::npos)
      << r.c.failure.message();
  close(peer);

  RecvComm plain;  // no failover: a completion of no QP of the comm fails it, flushed or not
  EXPECT_FALSE(dp::fo_stale_wc(plain.c, flush, 0, "receive").is_ok());
}

// A port that came back ACTIVE while its path could not offer yet (issue 31, defect 10): the
// sender had not consumed every receive published before the fence. The bit is kept for the path,
// not dropped, so that the attempt comes at once when it may (not after the backoff, up to 30 s).
TEST(FailoverDriver, APortBackIsKeptUntilThePathMayOffer) {
  SendComm s;
  int peer = -1;
  make_comm(s.c, true, &peer);
  s.c.fo.can_recover = true;
  const int64_t t0 = dp::fo_now_ms();
  failover::Path& p1 = s.c.fo.path[1];
  (void)p1.on_fault(failover::Cause::kLocalPort, "test", t0);
  (void)p1.on_local_fenced(t0);
  (void)p1.on_peer_fence(p1.epoch(), t0);
  ASSERT_EQ(p1.state(), State::kDown);
  s.c.fo.from_seq[1] = 8;  // the receiver's first receive without the path
  s.head = 3;              // the sender consumed 3 of the 8 published before it
  s.c.fo.port_back = 1u << s.c.qp_member[1];
  ASSERT_TRUE(dp::fo_clock_step(s.c, 1, t0 + 1).is_ok());
  EXPECT_EQ(p1.state(), State::kDown);
  EXPECT_NE(s.c.fo.port_back, 0u) << "the port's return was dropped while the path could not offer";
  close(peer);
}

// A FENCE's epoch is checked before any of its fields is used (issue 31, defect 9): a late FENCE
// of a failed attempt is stale; one of the current epoch fences a carrying path or ends an
// attempt, and only the former brings a substitute and counts.
TEST(FailoverDriver, AFencesEpochDecidesWhetherItsFieldsAreUsed) {
  using PF = failover::Path::PeerFence;
  failover::Path p(failover::Role::kSender, timing());
  EXPECT_EQ(p.classify_peer_fence(0), PF::kFences) << "up, epoch 0";
  EXPECT_EQ(p.classify_peer_fence(1), PF::kStale);
  (void)p.on_fault(failover::Cause::kLocalPort, "x", 0);
  (void)p.on_local_fenced(1);
  (void)p.on_peer_fence(0, 2);
  ASSERT_EQ(p.state(), State::kDown);
  EXPECT_EQ(p.classify_peer_fence(0), PF::kStale) << "both fences in: a repeat changes nothing";
  (void)p.on_tick(1000);  // the attempt: epoch 1
  ASSERT_EQ(p.state(), State::kRecovering);
  ASSERT_EQ(p.epoch(), 1u);
  EXPECT_EQ(p.classify_peer_fence(0), PF::kStale) << "a late FENCE of the old incarnation";
  EXPECT_EQ(p.classify_peer_fence(1), PF::kEndsAttempt) << "the receiver refused the attempt";

  // On a comm: a stale FENCE that names a substitute and counts changes none of them.
  SendComm s;
  int peer = -1;
  make_comm(s.c, true, &peer);
  s.c.fo.path[1] = p;
  s.c.fo.sub[1] = 0;
  s.c.fo.from_seq[1] = 5;
  wire::PathMsg late;
  late.type = wire::PathMsgType::kFence;
  late.path = 1;
  late.nqps = 1;
  late.epoch = 0;
  late.sub = 1;
  late.from_seq = 99;
  late.last_seq[0] = 1234;
  s.c.fo.inbox[0] = late;
  s.c.fo.inbox_n = 1;
  s.c.fo.any_not_up = false;  // the driver only takes the inbox
  ASSERT_TRUE(dp::fo_drive(s.c).is_ok()) << s.c.failure.message();
  EXPECT_EQ(s.c.fo.from_seq[1], 5u);
  EXPECT_EQ(s.c.fo.rec->peer_counts[1][0], 0u);
  EXPECT_EQ(s.c.fo.path[1].state(), State::kRecovering);
  close(peer);
}

// A WARN names each QP's own port. A device of a multi-port adapter is named "mlx5_0:1" already
// (engine.cc): its QPs are "on mlx5_0:1", not "mlx5_0:1:1"; a device of a one-port adapter gets
// its port appended.
TEST(FailoverDriver, AQpIsNamedByItsOwnPortOnceEvenOnAMultiPortAdapter) {
  Device multi, single;
  multi.name = "mlx5_0:2";
  multi.port = 2;
  single.name = "rxe1";
  single.port = 1;
  RecvComm r;
  int peer = -1;
  make_comm(r.c, false, &peer);
  r.c.nmembers = 2;
  r.c.members[0].dev = &multi;
  r.c.members[1].dev = &single;
  r.c.qp_member[0] = 0;
  r.c.qp_member[1] = 1;
  const std::string q0 = r.c.describe_qp(0), q1 = r.c.describe_qp(1);
  EXPECT_NE(q0.find(" on mlx5_0:2 -> "), std::string::npos) << q0;
  EXPECT_EQ(q0.find("mlx5_0:2:2"), std::string::npos) << q0;
  EXPECT_NE(q1.find(" on rxe1:1 -> "), std::string::npos) << q1;
  EXPECT_EQ(port_label(multi), "mlx5_0:2");
  EXPECT_EQ(port_label(single), "rxe1:1");
  close(peer);
}

}  // namespace
}  // namespace sluice
