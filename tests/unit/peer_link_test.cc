// The peer link (core/src/health/peer_link.h) over a real socket pair: its two ends stand for two
// processes (each end registered under the other's process id), with comms' channels on them.
// Frames reach only the end they name; a goodbye or notice concerns one comm, the link's EOF every
// comm; a handshake's hold keeps the link open; the last end closes it; a connect's claim on the
// first link makes the others wait. No verbs, no engine (keepalive is off without one).
#include "health/peer_link.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

namespace sluice {
namespace {

wire::Nonce proc_of(uint8_t seed) {
  wire::Nonce n;
  for (size_t i = 0; i < wire::kNonceBytes; ++i) n.bytes[i] = static_cast<uint8_t>(seed * 16 + i);
  return n;
}

struct Pair {
  LinkEnd a, b;  // the comm's end in "process A" (its peer is B) and in "process B"
};

// A link between processes A and B made by a handshake that A connected: A's end and B's end, with
// one comm's channels on them.
Pair adopt_pair(const wire::Nonce& pa, const wire::Nonce& pb, uint64_t id, int* fd_a) {
  int sp[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp), 0);
  if (fd_a != nullptr) *fd_a = sp[0];
  const uint32_t ca = link_new_chan(), cb = link_new_chan();
  Pair p;
  p.a = link_adopt(sp[0], pb, id, wire::kLinkEndConnector, ca, cb, "B");
  p.b = link_adopt(sp[1], pa, id, wire::kLinkEndAcceptor, cb, ca, "A");
  return p;
}

// A second comm over the same link, as a handshake from A to B with A's offer of its end makes it.
Pair join_pair(const wire::Nonce& pa, const wire::Nonce& pb) {
  const uint32_t ca = link_new_chan(), cb = link_new_chan();
  LinkHold ha = link_hold_newest(pb, ca);
  EXPECT_TRUE(ha.held()) << "A has a live link to B";
  LinkHold hb = link_hold_id(pa, ha.id(), ha.role(), cb);
  EXPECT_TRUE(hb.held()) << "B finds its end of the link A offered";
  Pair p;
  p.a = link_join(std::move(ha), cb);
  p.b = link_join(std::move(hb), ca);
  return p;
}

LinkSeen poll(LinkEnd& e, PathMsgSink sink = nullptr, void* ctx = nullptr, int room = 0) {
  LinkSeen s;
  EXPECT_TRUE(link_poll(e, sink, ctx, room, &s)) << "nobody else holds the link";
  return s;
}

void collect(void* ctx, const wire::PathMsg& m) {
  static_cast<std::vector<wire::PathMsg>*>(ctx)->push_back(m);
}

bool send_notice(LinkEnd& e, const std::string& reason) {
  uint8_t msg[wire::kNoticeMaxBytes];
  const size_t n = wire::encode_notice(reason, msg);
  std::string why;
  return link_send(e, wire::LinkFrameType::kNotice, msg, n, &why);
}

TEST(PeerLink, FramesReachOnlyTheirCommAndTheLastEndClosesTheLink) {
  const wire::Nonce pa = proc_of(1), pb = proc_of(2);
  const size_t links0 = link_count();
  Pair c1 = adopt_pair(pa, pb, 0x1111, nullptr);
  Pair c2 = join_pair(pa, pb);
  EXPECT_EQ(link_count(), links0 + 2) << "one link: its two ends";
  EXPECT_EQ(c2.a.link, c1.a.link) << "the second comm rides the first one's link";

  // A notice for comm 2 fails comm 2's peer end only.
  ASSERT_TRUE(send_notice(c2.a, "the watchdog fired on qpn 7"));
  LinkSeen s = poll(c2.b);
  EXPECT_EQ(s.seen, SocketSeen::kNotice);
  EXPECT_EQ(s.text, "the watchdog fired on qpn 7");
  EXPECT_EQ(poll(c1.b).seen, SocketSeen::kNothing);

  // Path messages go to the sink, at most `room` a poll; without a sink one is refused.
  wire::PathMsg m{};
  m.type = wire::PathMsgType::kChecked;
  m.path = 1;
  m.epoch = 3;
  m.nqps = 1;
  uint8_t buf[wire::kPathMsgMaxBytes];
  const size_t n = wire::encode_path_msg(m, buf);
  ASSERT_GT(n, 0u);
  std::string why;
  ASSERT_TRUE(link_send(c1.b, wire::LinkFrameType::kPath, buf, n, &why)) << why;
  ASSERT_TRUE(link_send(c1.b, wire::LinkFrameType::kPath, buf, n, &why)) << why;
  std::vector<wire::PathMsg> got;
  EXPECT_EQ(poll(c1.a, collect, &got, 1).seen, SocketSeen::kNothing);
  ASSERT_EQ(got.size(), 1u) << "room for one";
  EXPECT_EQ(got[0].epoch, 3u);
  EXPECT_EQ(poll(c1.a, collect, &got, 4).seen, SocketSeen::kNothing);
  EXPECT_EQ(got.size(), 2u);
  ASSERT_TRUE(link_send(c2.b, wire::LinkFrameType::kPath, buf, n, &why)) << why;
  s = poll(c2.a);  // a comm without failover
  EXPECT_EQ(s.seen, SocketSeen::kBadNotice);
  EXPECT_NE(s.text.find("without failover"), std::string::npos) << s.text;

  // A third comm's end in A closes: its peer end sees the goodbye, comm 1 nothing; the link stays.
  Pair c3 = join_pair(pa, pb);
  link_leave(c3.a, true);
  s = poll(c3.b);
  EXPECT_EQ(s.seen, SocketSeen::kEof) << s.text;
  EXPECT_TRUE(s.goodbye);
  EXPECT_EQ(poll(c1.b).seen, SocketSeen::kNothing);
  EXPECT_EQ(link_count(), links0 + 2);
  link_leave(c3.b, false);
  link_leave(c2.a, true);  // comm 2's notice stands: a later goodbye does not hide it
  EXPECT_EQ(poll(c2.b).seen, SocketSeen::kNotice);
  link_leave(c2.b, false);

  // Comm 1's end in A closes: the last end of A's side, which closes; B's end reads the goodbye
  // before the EOF, so comm 1 ends as a normal close.
  link_leave(c1.a, true);
  EXPECT_EQ(link_count(), links0 + 1);
  s = poll(c1.b);
  EXPECT_EQ(s.seen, SocketSeen::kEof);
  EXPECT_TRUE(s.goodbye);
  // B's side has no live link to A any more: a new connect from B would make one.
  LinkHold none = link_hold_newest(pa, link_new_chan());
  EXPECT_FALSE(none.held()) << "a link whose peer closed is not offered";
  link_leave(c1.b, false);
  EXPECT_EQ(link_count(), links0);
}

TEST(PeerLink, APeerProcessGoneReachesEveryCommOnTheLink) {
  const wire::Nonce pa = proc_of(3), pb = proc_of(4);
  int fd_a = -1;
  Pair c1 = adopt_pair(pa, pb, 0x2222, &fd_a);
  Pair c2 = join_pair(pa, pb);
  ASSERT_EQ(shutdown(fd_a, SHUT_RDWR), 0);  // A's process dies: its kernel closes the socket
  for (LinkEnd* e : {&c1.b, &c2.b}) {
    const LinkSeen s = poll(*e);
    EXPECT_EQ(s.seen, SocketSeen::kEof);
    EXPECT_FALSE(s.goodbye) << "no goodbye came: the process, not a comm, went";
  }
  std::string why;
  uint8_t one = 0;
  EXPECT_FALSE(link_send(c1.b, wire::LinkFrameType::kGoodbye, &one, 0, &why));
  EXPECT_NE(why.find("gone"), std::string::npos) << why;
  for (LinkEnd* e : {&c1.a, &c2.a, &c1.b, &c2.b}) link_leave(*e, false);
}

TEST(PeerLink, AHandshakesHoldKeepsTheLinkOpenAndAReleasedOneIsTold) {
  const wire::Nonce pa = proc_of(5), pb = proc_of(6);
  const size_t links0 = link_count();
  Pair c1 = adopt_pair(pa, pb, 0x3333, nullptr);
  // B answered "use" to a connect from A: its hold, with its channel on B's end.
  const uint32_t ca = link_new_chan(), cb = link_new_chan();
  LinkHold ha = link_hold_newest(pb, ca);
  ASSERT_TRUE(ha.held());
  LinkHold hb = link_hold_id(pa, ha.id(), ha.role(), cb);
  ASSERT_TRUE(hb.held());
  EXPECT_FALSE(link_hold_id(pa, ha.id(), wire::kLinkEndAcceptor, link_new_chan()).held())
      << "B's end has the acceptor's role: an offer naming that role is for another end";
  link_leave(c1.b, true);  // B's only comm closes: the hold keeps B's end open
  EXPECT_EQ(link_count(), links0 + 2);
  // A finished (it sent its ready byte) and joined; B then releases the handshake: A's comm learns
  // why from a notice on the link.
  LinkEnd a2 = link_join(std::move(ha), cb);
  link_hold_fail(std::move(hb), ca, "the listener released the connection's handshake: test");
  const LinkSeen s = poll(a2);
  EXPECT_EQ(s.seen, SocketSeen::kNotice);
  EXPECT_NE(s.text.find("released"), std::string::npos) << s.text;
  EXPECT_EQ(link_count(), links0 + 1) << "B's end went with its hold";
  link_leave(a2, false);
  link_leave(c1.a, false);
  EXPECT_EQ(link_count(), links0);
}

TEST(PeerLink, APeerThatStopsReadingFailsSendsAtTheQueueBoundNotGrowingMemory) {
  const wire::Nonce pa = proc_of(5), pb = proc_of(6);
  Pair c = adopt_pair(pa, pb, 0x5555, nullptr);
  // B stops reading: A's frames fill the socket's buffers, then the link's queue, up to its bound.
  uint8_t msg[wire::kNoticeMaxBytes];
  const size_t n = wire::encode_notice(std::string(200, 'n'), msg);
  size_t sent = 0;
  std::string why;
  while (link_send(c.a, wire::LinkFrameType::kNotice, msg, n, &why)) {
    sent += wire::kLinkFrameHeaderBytes + n;  // what the link queues: the frame
    ASSERT_LT(sent, kLinkTxMaxBytes + (size_t{64} << 20)) << "the queue has no bound";
  }
  // Refused only once the queue (past what the socket's buffers took) is at its bound.
  EXPECT_GE(sent + wire::kLinkFrameHeaderBytes + n, kLinkTxMaxBytes)
      << "refused before the bound: " << why;
  EXPECT_NE(why.find("queued that its peer has not read"), std::string::npos) << why;
  // The refusal fails that send only: once B reads again, A's queue drains and sends go on.
  for (int i = 0; i < 4096 && poll(c.b).seen != SocketSeen::kNothing; ++i) {
    LinkSeen ignored;
    (void)link_poll(c.a, nullptr, nullptr, 0, &ignored);  // A writes what the socket now takes
  }
  LinkSeen ignored;
  (void)link_poll(c.a, nullptr, nullptr, 0, &ignored);
  EXPECT_TRUE(link_send(c.a, wire::LinkFrameType::kNotice, msg, n, &why)) << why;
  link_leave(c.a, false);
  link_leave(c.b, false);
}

// A handshake on the link (no TCP connection): the connector's hello reaches the listener's
// process as a LinkHello with a channel of its own registered; the reply and the ready mark reach
// only their handshake's channel; both holds then become the comm's ends. A hello the listener
// drops tells the connector why; one still waiting at the service's close is refused too.
TEST(PeerLink, AHandshakeRunsOnTheLinkAndEndsInTwoEndsOfANewComm) {
  const wire::Nonce pa = proc_of(9), pb = proc_of(10);
  Pair first = adopt_pair(pa, pb, 0x9999, nullptr);
  const size_t links = link_count();

  LinkHold ha = link_hold_newest(pb, link_new_chan());  // A's connect, on its link to B
  ASSERT_TRUE(ha.held());
  const std::vector<uint8_t> meta(300, 0x11), answer(280, 0x22);
  std::string why;
  ASSERT_TRUE(ha.send(wire::LinkFrameType::kHello, 0, meta.data(), meta.size(), &why)) << why;
  EXPECT_TRUE(link_take_hellos().empty()) << "nobody in B has read the link yet";
  EXPECT_EQ(poll(first.b).seen, SocketSeen::kNothing) << "a hello concerns no comm";
  std::vector<LinkHello> got = link_take_hellos();
  ASSERT_EQ(got.size(), 1u);
  LinkHello& h = got[0];
  EXPECT_EQ(h.peer_chan, ha.chan()) << "the hello names the connector's channel";
  EXPECT_EQ(h.bytes, meta);
  ASSERT_TRUE(h.hold.held());
  EXPECT_EQ(h.hold.id(), 0x9999u) << "held on the link it came on";
  EXPECT_TRUE(link_take_hellos().empty()) << "taken once";

  ASSERT_TRUE(
      h.hold.send(wire::LinkFrameType::kHsReply, h.peer_chan, answer.data(), answer.size(), &why))
      << why;
  LinkHold::Seen r;
  ASSERT_TRUE(ha.poll(&r));
  ASSERT_TRUE(r.reply);
  EXPECT_EQ(r.bytes, answer);
  EXPECT_EQ(r.seen, SocketSeen::kNothing);
  ASSERT_TRUE(ha.send(wire::LinkFrameType::kHsReady, h.hold.chan(), nullptr, 0, &why)) << why;
  LinkHold::Seen ready;
  ASSERT_TRUE(h.hold.poll(&ready));
  EXPECT_TRUE(ready.ready);
  EXPECT_FALSE(ready.reply) << "the reply went to the connector's channel only";

  const uint32_t cb = h.hold.chan(), ca = ha.chan();
  LinkEnd a = link_join(std::move(ha), cb), b = link_join(std::move(h.hold), ca);
  EXPECT_EQ(link_count(), links) << "the new comm rides the existing link";
  ASSERT_TRUE(send_notice(a, "the new comm's notice"));
  LinkSeen s = poll(b);
  EXPECT_EQ(s.seen, SocketSeen::kNotice);
  EXPECT_EQ(s.text, "the new comm's notice");
  EXPECT_EQ(poll(first.b).seen, SocketSeen::kNothing) << "only the new comm's end";

  // A hello the listener drops: the connector reads why on its channel.
  LinkHold hc = link_hold_newest(pb, link_new_chan());
  ASSERT_TRUE(hc.send(wire::LinkFrameType::kHello, 0, meta.data(), meta.size(), &why)) << why;
  (void)poll(first.b);
  got = link_take_hellos();
  ASSERT_EQ(got.size(), 1u);
  link_hold_fail(std::move(got[0].hold), got[0].peer_chan, "nonce mismatch: no such listen");
  ASSERT_TRUE(hc.poll(&r));
  EXPECT_FALSE(r.reply);
  EXPECT_EQ(r.seen, SocketSeen::kNotice);
  EXPECT_EQ(r.text, "nonce mismatch: no such listen");
  hc.release();

  // One still waiting when the service closes (the listener's finalize) is refused too.
  LinkHold hd = link_hold_newest(pb, link_new_chan());
  ASSERT_TRUE(hd.send(wire::LinkFrameType::kHello, 0, meta.data(), meta.size(), &why)) << why;
  (void)poll(first.b);
  link_service_close();
  EXPECT_TRUE(link_take_hellos().empty());
  ASSERT_TRUE(hd.poll(&r));
  EXPECT_EQ(r.seen, SocketSeen::kNotice);
  EXPECT_NE(r.text.find("finalized"), std::string::npos) << r.text;
  hd.release();

  link_leave(a, false);
  link_leave(b, false);
  link_leave(first.a, false);
  link_leave(first.b, false);
}

TEST(PeerLink, ConnectsWaitForTheFirstLinkToAProcess) {
  const wire::Nonce pa = proc_of(7), pb = proc_of(8);
  LinkClaim first, second;
  EXPECT_TRUE(link_first(pb, &first));
  EXPECT_TRUE(first.held()) << "no link yet: this connect makes it";
  EXPECT_FALSE(link_first(pb, &second)) << "another connect waits for it";
  EXPECT_TRUE(link_first(pa, &second)) << "a claim concerns one process";
  second.release();
  Pair c = adopt_pair(pa, pb, 0x4444, nullptr);  // the first connect's handshake made the link
  first.release();
  LinkClaim third;
  EXPECT_TRUE(link_first(pb, &third));
  EXPECT_FALSE(third.held()) << "a live link exists: offer it, claim nothing";
  link_leave(c.a, false);
  link_leave(c.b, false);
}

// fork(2): the child gets a fresh process id, no links (its copies of the parent's are left behind,
// their sockets untouched) and links off; the parent keeps its id and its link, which still works.
TEST(PeerLink, AForkedChildHasItsOwnIdAndNoneOfTheParentsLinks) {
  ASSERT_TRUE(link_proc_id_ok());
  const wire::Nonce parent_id = link_proc_id();
  Pair c = adopt_pair(proc_of(9), proc_of(10), 0x5555, nullptr);
  ASSERT_GE(link_count(), 1u);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child: one byte per fact, 1 when it holds. No gtest here (its state is the parent's).
    const wire::Nonce mine = link_proc_id();
    const uint8_t facts[4] = {
        static_cast<uint8_t>(std::memcmp(&mine, &parent_id, sizeof mine) != 0),
        static_cast<uint8_t>(!link_proc_id_ok()),
        static_cast<uint8_t>(link_count() == 0),
        static_cast<uint8_t>(!link_hold_newest(proc_of(10), link_new_chan()).held()),
    };
    (void)!write(pipe_fds[1], facts, sizeof facts);
    _exit(0);
  }
  close(pipe_fds[1]);
  uint8_t facts[4] = {};
  size_t got = 0;
  while (got < sizeof facts) {
    const ssize_t n = read(pipe_fds[0], facts + got, sizeof facts - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_EQ(got, sizeof facts) << "the child did not report";
  EXPECT_EQ(facts[0], 1) << "the child kept the parent's process id";
  EXPECT_EQ(facts[1], 1) << "peer links are on in the child";
  EXPECT_EQ(facts[2], 1) << "the child counts the parent's links";
  EXPECT_EQ(facts[3], 1) << "the child found the parent's link to the peer";
  // The parent: its id and link as they were; a frame still goes across.
  EXPECT_TRUE(link_proc_id_ok());
  EXPECT_EQ(std::memcmp(&link_proc_id(), &parent_id, sizeof parent_id), 0);
  ASSERT_TRUE(send_notice(c.a, "after the fork"));
  const LinkSeen seen = poll(c.b);
  EXPECT_EQ(seen.seen, SocketSeen::kNotice) << "the parent's link broke in the child";
  EXPECT_EQ(seen.text, "after the fork");
  link_leave(c.a, false);
  link_leave(c.b, false);
}

}  // namespace
}  // namespace sluice
