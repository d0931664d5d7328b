// Peer faults through the exported plugin tables (labels rdma and faults; run inside
// scripts/rdma-bed): the peer process is SIGKILLed with and without work in flight, in both
// directions, and the survivor must fail the comm within a bound set short by the test's
// environment (SLUICE_LIVENESS_POLL_MS), with a WARN naming the peer and what was seen; the failed
// comm keeps failing with the same reason, another comm keeps working, and closing releases every
// verbs object. A peer that closes its comm normally after all work raises no error.
//
// The peer is this binary re-run by posix_spawn ("--faults-child ROLE DEV"), with a pipe each way:
// child fd 3 = from the parent (a listen handle), child fd 4 = to the parent (a listen handle,
// progress bytes). The same binary runs the two-host link faults ("--two-host-peer HOST [PHASE]",
// plugin_faults_two_host.cc).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "plugin_bed.h"
#include "side_channel.h"

extern char** environ;

namespace nettest {
namespace {

constexpr size_t kMsg = 65537;
constexpr int kTag = 7;
constexpr char kReady = 'R';
// The assertion ceiling on detection; the tests run with SLUICE_LIVENESS_POLL_MS=100.
constexpr auto kBound = std::chrono::milliseconds(5000);

uint64_t seed_of(int msg) {
  return pattern_seed(kMsg, 500 + msg, kTag);
}

// ---- The child (the peer that dies or closes)
// ------------------------------------------------------------

// Roles: send-kill / send-close (connects to the parent's handle and sends message 1);
// recv-kill / recv-cts-kill / recv-close (listens, hands its handle to the parent, receives
// message 1; recv-cts-kill also publishes a second receive). *-kill then report ready and wait to
// be killed; *-close close their comm normally and exit 0.
int three_comms_child(Net& n, int dev, int out);

// One message of kMsg bytes received on `comm` into buf, verified against `seed`: 0, else the exit.
int recv_one(Net& n, void* comm, RegBuf& buf, uint64_t seed) {
  void* data = buf.data();
  void* mh = buf.mh();
  size_t cap = kMsg;
  int tag = kTag;
  void* req = nullptr;
  if (!post_until("irecv", &req,
                  [&](void** r) { return n.irecv(comm, 1, &data, &cap, &tag, &mh, r); }))
    return 6;
  if (!wait_done(n, "recv", req, nullptr)) return 6;
  return check_pattern(buf.data(), kMsg, seed).empty() ? 0 : 9;
}

// The child's side of a connection from the parent, as NCCL makes it: listen, hand the handle to
// the parent (fd `out`), accept until `deadline`, close the listen. 0 with *comm set, else the
// exit.
int accept_for_parent(Net& n, int dev, int out, Clock::time_point deadline, void** comm) {
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* lc = nullptr;
  if (n.listen(dev, handle, &lc) != ncclSuccess) return 4;
  if (!write_full(out, handle, sizeof handle)) return 2;
  *comm = nullptr;
  while (*comm == nullptr) {
    if (n.accept(lc, comm) != ncclSuccess || Clock::now() > deadline) return 4;
    if (*comm == nullptr) usleep(100);
  }
  n.close_listen(lc);
  return 0;
}

int child_main(const std::string& role, int dev) {
  const int in = 3, out = 4;
  Net n(12);
  if (n.init(0xfa17) != ncclSuccess) return 3;
  if (role == "recv-three") return three_comms_child(n, dev, out);
  const bool sender = role.rfind("send", 0) == 0;
  const bool close_normally = role.find("close") != std::string::npos;
  void* comm = nullptr;
  const auto deadline = Clock::now() + wait_limit();
  if (sender) {
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    if (!read_full(in, handle, sizeof handle, wait_limit())) return 2;
    while (comm == nullptr) {
      if (n.connect(dev, handle, &comm) != ncclSuccess || Clock::now() > deadline) return 4;
      if (comm == nullptr) usleep(100);
    }
  } else if (int rc = accept_for_parent(n, dev, out, deadline, &comm); rc != 0) {
    return rc;
  }
  RegBuf buf;
  if (!buf.allocate(&n, comm, 2 * kMsg)) return 5;
  void* req = nullptr;
  if (sender) {
    fill_pattern(buf.data(), kMsg, seed_of(1));
    if (!post_until("isend", &req,
                    [&](void** r) { return n.isend(comm, buf.data(), kMsg, kTag, buf.mh(), r); }))
      return 6;
    if (!wait_done(n, "send", req, nullptr)) return 6;
  } else {
    if (int rc = recv_one(n, comm, buf, seed_of(1)); rc != 0) return rc;
    if (role == "recv-cts-kill") {  // a second receive, its clear-to-send published
      void* data = buf.data() + kMsg;
      void* mh = buf.mh();
      size_t cap = kMsg;
      int tag = kTag;
      void* req2 = nullptr;
      if (!post_until("irecv", &req2,
                      [&](void** r) { return n.irecv(comm, 1, &data, &cap, &tag, &mh, r); }))
        return 6;
      int done = 0;
      if (n.test(req2, &done, nullptr) != ncclSuccess) return 6;  // publishes
    }
  }
  if (!close_normally) {
    if (!write_full(out, &kReady, 1)) return 2;
    for (;;) pause();  // until SIGKILL
  }
  buf.reset();
  int rc = 0;
  if ((sender ? n.close_send(comm) : n.close_recv(comm)) != ncclSuccess) rc = 7;
  if (n.finalize() != ncclSuccess) rc = rc ? rc : 8;
  return rc;
}

// Role recv-three (PeerLink.*): three receive comms from the parent (three listens, each closed
// after its accept), a message on each; then comm 0 closed normally ('C' to the parent), a second
// message on comms 1 and 2; then ready, and killed.
int three_comms_child(Net& n, int dev, int out) {
  void* comms[3] = {};
  const auto deadline = Clock::now() + wait_limit();
  for (void*& comm : comms)
    if (int rc = accept_for_parent(n, dev, out, deadline, &comm); rc != 0) return rc;
  RegBuf bufs[3];
  for (int i = 0; i < 3; ++i) {
    if (!bufs[i].allocate(&n, comms[i], kMsg)) return 5;
    if (int rc = recv_one(n, comms[i], bufs[i], seed_of(10 + i)); rc != 0) return rc;
  }
  bufs[0].reset();
  if (n.close_recv(comms[0]) != ncclSuccess) return 7;
  if (!write_full(out, "C", 1)) return 2;
  for (int i = 1; i < 3; ++i)
    if (int rc = recv_one(n, comms[i], bufs[i], seed_of(20 + i)); rc != 0) return rc;
  if (!write_full(out, &kReady, 1)) return 2;
  for (;;) pause();  // until SIGKILL
}

// ---- The parent side
// -----------------------------------------------------------------------------

struct Child {
  pid_t pid = -1;
  int to = -1;    // parent writes (child's fd 3)
  int from = -1;  // parent reads (child's fd 4)
  ~Child() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    if (to >= 0) close(to);
    if (from >= 0) close(from);
  }
  // Exit status (128 + signal when killed); -1 if it did not end within the test deadline.
  int reap() {
    const auto deadline = Clock::now() + wait_limit();
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) return -1;
      usleep(1000);
    }
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  int kill_now() {
    kill(pid, SIGKILL);
    return reap();
  }
};

::testing::AssertionResult spawn_child(const std::string& role, int dev, Child* c) {
  int down[2], up[2];
  if (pipe2(down, O_CLOEXEC) != 0 || pipe2(up, O_CLOEXEC) != 0)
    return ::testing::AssertionFailure() << "pipe2: " << strerror(errno);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, down[0], 3);
  posix_spawn_file_actions_adddup2(&fa, up[1], 4);
  std::string d = std::to_string(dev);
  std::vector<std::string> args = {"plugin_faults_test", "--faults-child", role, d};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int err = posix_spawn(&c->pid, "/proc/self/exe", &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(down[0]);
  close(up[1]);
  c->to = down[1];
  c->from = up[0];
  if (err != 0) return ::testing::AssertionFailure() << "posix_spawn: " << strerror(err);
  return ::testing::AssertionSuccess();
}

// The parent receives: listen, give the child the handle, accept.
::testing::AssertionResult accept_from_child(Child& ch, int dev, void** rc) {
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* lc = nullptr;
  if (net().listen(dev, handle, &lc) != ncclSuccess)
    return ::testing::AssertionFailure() << "listen failed";
  if (!write_full(ch.to, handle, sizeof handle))
    return ::testing::AssertionFailure() << "handle not written";
  *rc = nullptr;
  const auto deadline = Clock::now() + wait_limit();
  while (*rc == nullptr) {
    ncclResult_t r = net().accept(lc, rc);
    if (r != ncclSuccess || Clock::now() > deadline) {
      net().close_listen(lc);
      return ::testing::AssertionFailure()
             << "accept returned " << r << " (child " << ch.kill_now() << ")";
    }
    if (*rc == nullptr) usleep(100);
  }
  net().close_listen(lc);
  return ::testing::AssertionSuccess();
}

// The parent sends: read the child's handle, connect.
::testing::AssertionResult connect_to_child(Child& ch, int dev, void** sc) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  if (!read_full(ch.from, handle, sizeof handle, wait_limit()))
    return ::testing::AssertionFailure()
           << "no handle from the child (exit " << ch.kill_now() << ")";
  *sc = nullptr;
  const auto deadline = Clock::now() + wait_limit();
  while (*sc == nullptr) {
    ncclResult_t r = net().connect(dev, handle, sc);
    if (r != ncclSuccess || Clock::now() > deadline)
      return ::testing::AssertionFailure()
             << "connect returned " << r << " (child " << ch.kill_now() << ")";
    if (*sc == nullptr) usleep(100);
  }
  return ::testing::AssertionSuccess();
}

void* post_recv(void* rc, RegBuf& buf, size_t offset) {
  void* data = buf.data() + offset;
  void* mh = buf.mh();
  size_t cap = kMsg;
  int tag = kTag;
  void* req = nullptr;
  EXPECT_TRUE(post_until("irecv", &req,
                         [&](void** r) { return net().irecv(rc, 1, &data, &cap, &tag, &mh, r); }));
  return req;
}

// What every fault test checks after the survivor's call `what` failed with `r` at `took` after
// the kill: the code, the bound, and that the WARN names device, QP, peer and what was seen.
void expect_peer_death_reported(ncclResult_t r, std::chrono::milliseconds took, int dev) {
  EXPECT_EQ(r, ncclRemoteError);
  EXPECT_LT(took.count(), kBound.count()) << "detection took " << took.count() << " ms";
  const std::string w = last_warn();
  EXPECT_TRUE(contains(w, "process exited or was killed?")) << w;
  EXPECT_TRUE(contains(w, "EOF") || contains(w, "reset")) << w;
  EXPECT_TRUE(contains(w, "peer ")) << w;
  EXPECT_TRUE(contains(w, "qpn ")) << w;
  EXPECT_TRUE(contains(w, bed().props[dev].name)) << w;
  std::fprintf(stderr, "detected in %lld ms: %s\n", static_cast<long long>(took.count()),
               w.c_str());
}

// The reason part of a WARN ("... test: peer 10.0.0.1:4711 closed ... (ncclRemoteError)"), without
// the call's name that the plugin puts in front.
std::string reason_of(const std::string& w) {
  size_t p = w.find("peer ");
  return p == std::string::npos ? w : w.substr(p);
}

// A second comm in this process, opened before the fault, still moves bytes correctly.
void expect_other_comm_works(Conn& other) {
  RegBuf s, r;
  ASSERT_TRUE(s.allocate(&net(), other.send, 4096));
  ASSERT_TRUE(r.allocate(&net(), other.recv, 4096));
  fill_pattern(s.data(), 4096, 77);
  int got = -1;
  ASSERT_TRUE(send_recv(net(), other, s, 4096, r, 4096, 3, &got));
  EXPECT_EQ(got, 4096);
  EXPECT_EQ(check_pattern(r.data(), 4096, 77), "");
}

ncclResult_t call_test_until_error(void* req, Clock::time_point since, int* done) {
  ncclResult_t r = ncclSuccess;
  *done = 0;
  while (r == ncclSuccess && !*done && Clock::now() - since < 2 * kBound) {
    r = net().test(req, done, nullptr);
    if (r == ncclSuccess && !*done) usleep(200);
  }
  return r;
}

using std::chrono::duration_cast;
using std::chrono::milliseconds;

// ---- Sender killed: the parent receives
// -------------------------------------------------------------

class SenderKilled : public ::testing::TestWithParam<bool> {};  // param: receive in flight
INSTANTIATE_TEST_SUITE_P(Faults, SenderKilled, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "ReceiveInFlight" : "Idle";
                         });

TEST_P(SenderKilled, ReceiverFailsWithinTheBound) {
  REQUIRE_BED();
  const bool in_flight = GetParam();
  const Counts before = Counts::now();
  Conn other;
  ASSERT_TRUE(open_conn(net(), bed().dev_a, bed().dev_b, &other));
  Child ch;
  ASSERT_TRUE(spawn_child("send-kill", bed().dev_a, &ch));
  void* rc = nullptr;
  ASSERT_TRUE(accept_from_child(ch, bed().dev_b, &rc));
  {
    RegBuf buf;
    ASSERT_TRUE(buf.allocate(&net(), rc, 2 * kMsg));
    void* req = post_recv(rc, buf, 0);
    ASSERT_TRUE(wait_done(net(), "recv", req, nullptr));
    EXPECT_EQ(check_pattern(buf.data(), kMsg, seed_of(1)), "");
    char b = 0;
    ASSERT_TRUE(read_full(ch.from, &b, 1, wait_limit()) && b == kReady);
    void* req2 = nullptr;
    if (in_flight) {  // a receive whose clear-to-send reached the (soon dead) sender
      req2 = post_recv(rc, buf, kMsg);
      int done = 0;
      ASSERT_EQ(net().test(req2, &done, nullptr), ncclSuccess);
      ASSERT_EQ(done, 0);
    }
    const int warns0 = g_warns.load();
    sluice::rdmatest::ExpectWarns expect;
    const auto killed = Clock::now();
    EXPECT_EQ(ch.kill_now(), 128 + SIGKILL);
    ncclResult_t r = ncclSuccess;
    int done = 0;
    if (in_flight) {
      r = call_test_until_error(req2, killed, &done);
    } else {
      usleep(300 * 1000);  // idle for a while: nothing posted, nothing polled
      while (r == ncclSuccess && Clock::now() - killed < 2 * kBound) {
        void* data = buf.data() + kMsg;
        void* mh = buf.mh();
        size_t cap = kMsg;
        int tag = kTag;
        void* q = nullptr;
        r = net().irecv(rc, 1, &data, &cap, &tag, &mh, &q);
        if (r == ncclSuccess && q != nullptr) r = call_test_until_error(q, killed, &done);
        EXPECT_EQ(done, 0) << "a receive completed from a dead sender";
      }
    }
    const auto took = duration_cast<milliseconds>(Clock::now() - killed);
    EXPECT_EQ(done, 0);
    expect_peer_death_reported(r, took, bed().dev_b);
    EXPECT_EQ(g_warns.load(), warns0 + 1) << "one WARN for the failure";
    // The failed comm keeps failing fast with the same reason: the same call again is not WARNed
    // again (same text), the other calls fail with the same reason.
    const std::string first = reason_of(last_warn());
    void* data = buf.data();
    void* mh = buf.mh();
    size_t cap = kMsg;
    int tag = kTag;
    void* q = nullptr;
    const auto again = Clock::now();
    if (in_flight) {
      EXPECT_EQ(net().test(req2, &done, nullptr), ncclRemoteError);
      EXPECT_EQ(g_warns.load(), warns0 + 1) << "the reason changed: " << last_warn();
      EXPECT_EQ(net().irecv(rc, 1, &data, &cap, &tag, &mh, &q), ncclRemoteError);
    } else {
      EXPECT_EQ(net().irecv(rc, 1, &data, &cap, &tag, &mh, &q), ncclRemoteError);
      EXPECT_EQ(g_warns.load(), warns0 + 1) << "the reason changed: " << last_warn();
    }
    EXPECT_EQ(reason_of(last_warn()), first);
    EXPECT_LT(duration_cast<milliseconds>(Clock::now() - again).count(), 100);
  }
  expect_other_comm_works(other);
  EXPECT_EQ(net().close_recv(rc), ncclSuccess);
  EXPECT_TRUE(close_conn(net(), &other));
  expect_released(before);
}

// ---- Receiver killed: the parent sends
// --------------------------------------------------------------

// WaitingForCts: the sender's isend has no clear-to-send (returns no request) when the receiver
// dies. SendInFlight: the receiver published a second receive; the parent writes into it after the
// receiver died (its QP is gone: nothing acknowledges), and test must fail.
class ReceiverKilled : public ::testing::TestWithParam<bool> {};  // param: send in flight
INSTANTIATE_TEST_SUITE_P(Faults, ReceiverKilled, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "SendInFlight" : "WaitingForCts";
                         });

TEST_P(ReceiverKilled, SenderFailsWithinTheBound) {
  REQUIRE_BED();
  const bool in_flight = GetParam();
  const Counts before = Counts::now();
  Conn other;
  ASSERT_TRUE(open_conn(net(), bed().dev_a, bed().dev_b, &other));
  Child ch;
  ASSERT_TRUE(spawn_child(in_flight ? "recv-cts-kill" : "recv-kill", bed().dev_b, &ch));
  void* sc = nullptr;
  ASSERT_TRUE(connect_to_child(ch, bed().dev_a, &sc));
  {
    RegBuf buf;
    ASSERT_TRUE(buf.allocate(&net(), sc, kMsg));
    fill_pattern(buf.data(), kMsg, seed_of(1));
    void* req = nullptr;
    ASSERT_TRUE(post_until("isend", &req, [&](void** r) {
      return net().isend(sc, buf.data(), kMsg, kTag, buf.mh(), r);
    }));
    ASSERT_TRUE(wait_done(net(), "send", req, nullptr));
    char b = 0;
    ASSERT_TRUE(read_full(ch.from, &b, 1, wait_limit()) && b == kReady);
    const int warns0 = g_warns.load();
    sluice::rdmatest::ExpectWarns expect;
    const auto killed = Clock::now();
    EXPECT_EQ(ch.kill_now(), 128 + SIGKILL);
    ncclResult_t r = ncclSuccess;
    int done = 0;
    void* q = nullptr;
    while (r == ncclSuccess && Clock::now() - killed < 2 * kBound) {
      q = nullptr;
      r = net().isend(sc, buf.data(), kMsg, kTag, buf.mh(), &q);
      if (r == ncclSuccess && q != nullptr) {
        EXPECT_TRUE(in_flight) << "isend found a clear-to-send nobody published";
        r = call_test_until_error(q, killed, &done);
        EXPECT_EQ(done, 0) << "a send to a dead receiver completed";
        break;
      }
      usleep(200);
    }
    const auto took = duration_cast<milliseconds>(Clock::now() - killed);
    expect_peer_death_reported(r, took, bed().dev_a);
    EXPECT_EQ(g_warns.load(), warns0 + 1) << "one WARN for the failure";
    const std::string first = reason_of(last_warn());
    const auto again = Clock::now();
    void* q2 = nullptr;
    if (q != nullptr) {  // test failed first: test again, then isend
      EXPECT_EQ(net().test(q, &done, nullptr), ncclRemoteError);
      EXPECT_EQ(g_warns.load(), warns0 + 1) << "the reason changed: " << last_warn();
      EXPECT_EQ(net().isend(sc, buf.data(), kMsg, kTag, buf.mh(), &q2), ncclRemoteError);
    } else {
      EXPECT_EQ(net().isend(sc, buf.data(), kMsg, kTag, buf.mh(), &q2), ncclRemoteError);
      EXPECT_EQ(g_warns.load(), warns0 + 1) << "the reason changed: " << last_warn();
    }
    EXPECT_EQ(reason_of(last_warn()), first);
    EXPECT_LT(duration_cast<milliseconds>(Clock::now() - again).count(), 100);
  }
  expect_other_comm_works(other);
  EXPECT_EQ(net().close_send(sc), ncclSuccess);
  EXPECT_TRUE(close_conn(net(), &other));
  expect_released(before);
}

// ---- Normal close: no error on a comm with nothing more to do
// -----------------------------------------------

// The child sends one message and closes its comm normally; the parent tests its receive only
// after the child has exited and a liveness poll is due, so the goodbye and EOF are read before the
// completion is polled: the receive is still done, with the right bytes, and nothing is WARNed.
// New work on the comm then fails, saying the peer closed its comm.
TEST(CleanClose, SenderClosesFirst) {
  REQUIRE_BED();
  const Counts before = Counts::now();
  Conn other;
  ASSERT_TRUE(open_conn(net(), bed().dev_a, bed().dev_b, &other));
  Child ch;
  ASSERT_TRUE(spawn_child("send-close", bed().dev_a, &ch));
  void* rc = nullptr;
  ASSERT_TRUE(accept_from_child(ch, bed().dev_b, &rc));
  const int warns0 = g_warns.load();
  {
    RegBuf buf;
    ASSERT_TRUE(buf.allocate(&net(), rc, 2 * kMsg));
    std::memset(buf.data(), 0, 2 * kMsg);
    void* req = post_recv(rc, buf, 0);
    // Publish the clear-to-send without testing `req`: any test in the process publishes staged
    // receives (here the other comm's traffic).
    expect_other_comm_works(other);
    EXPECT_EQ(ch.reap(), 0) << "the child failed (its stderr is above)";
    usleep(3 * 100 * 1000);  // three liveness polls (SLUICE_LIVENESS_POLL_MS=100)
    int done = 0, size = -1;
    ASSERT_EQ(net().test(req, &done, &size), ncclSuccess) << last_warn();
    EXPECT_EQ(done, 1);
    EXPECT_EQ(size, static_cast<int>(kMsg));
    EXPECT_EQ(check_pattern(buf.data(), kMsg, seed_of(1)), "");
    EXPECT_EQ(g_warns.load(), warns0) << last_warn();
    // New work cannot complete: it fails, naming the normal close.
    sluice::rdmatest::ExpectWarns expect;
    void* data = buf.data() + kMsg;
    void* mh = buf.mh();
    size_t cap = kMsg;
    int tag = kTag;
    void* q = nullptr;
    EXPECT_EQ(net().irecv(rc, 1, &data, &cap, &tag, &mh, &q), ncclRemoteError);
    EXPECT_TRUE(contains(last_warn(), "closed its comm normally")) << last_warn();
  }
  EXPECT_EQ(net().close_recv(rc), ncclSuccess);
  EXPECT_TRUE(close_conn(net(), &other));
  expect_released(before);
}

// The child receives one message and closes normally; the parent tests its send only after the
// child exited: done, no WARN; closing raises nothing either.
TEST(CleanClose, ReceiverClosesFirst) {
  REQUIRE_BED();
  const Counts before = Counts::now();
  Child ch;
  ASSERT_TRUE(spawn_child("recv-close", bed().dev_b, &ch));
  void* sc = nullptr;
  ASSERT_TRUE(connect_to_child(ch, bed().dev_a, &sc));
  const int warns0 = g_warns.load();
  {
    RegBuf buf;
    ASSERT_TRUE(buf.allocate(&net(), sc, kMsg));
    fill_pattern(buf.data(), kMsg, seed_of(1));
    void* req = nullptr;
    ASSERT_TRUE(post_until("isend", &req, [&](void** r) {
      return net().isend(sc, buf.data(), kMsg, kTag, buf.mh(), r);
    }));
    EXPECT_EQ(ch.reap(), 0) << "the child failed (its stderr is above)";
    usleep(3 * 100 * 1000);
    int done = 0;
    ASSERT_EQ(net().test(req, &done, nullptr), ncclSuccess) << last_warn();
    EXPECT_EQ(done, 1);
  }
  EXPECT_EQ(net().close_send(sc), ncclSuccess);
  EXPECT_EQ(g_warns.load(), warns0) << last_warn();
  expect_released(before);
}

// ---- The peer link: one socket for every comm to a process, each comm's end on its own
// ---------------------------------------------------------------------------------------------

// Posts a kMsg send on sc and tests it until the call fails; the result of the failing call.
ncclResult_t send_until_error(void* sc, RegBuf& buf, Clock::time_point since) {
  void* req = nullptr;
  ncclResult_t r = ncclSuccess;
  while (req == nullptr && r == ncclSuccess && Clock::now() - since < 2 * kBound) {
    r = net().isend(sc, buf.data(), kMsg, kTag, buf.mh(), &req);
    if (r == ncclSuccess && req == nullptr) usleep(200);
  }
  if (r != ncclSuccess) return r;
  int done = 0;
  r = call_test_until_error(req, since, &done);
  EXPECT_EQ(done, 0) << "a send to a comm whose peer end is gone completed";
  return r;
}

// Three send comms to one peer process hold one socket between them (its peer link, plus nothing
// per comm); the peer closing one of its comms fails that comm's new work only, naming the normal
// close, while the other two carry verified messages on; the peer killed then fails both with the
// process's death; closing everything returns every descriptor (the link goes with its last end).
TEST(PeerLink, CommsToOneProcessShareOneSocketAndEachEndsAlone) {
  REQUIRE_BED();
  if (const char* v = std::getenv("SLUICE_OOB_LINK"); v != nullptr && std::string(v) == "0")
    GTEST_FAIL() << "run with the peer link on (its default)";
  const Counts before = Counts::now();
  Conn other;  // this process's own loopback pair: what the first connection opens for all is open
  ASSERT_TRUE(open_conn(net(), bed().dev_a, bed().dev_b, &other));
  Child ch;
  ASSERT_TRUE(spawn_child("recv-three", bed().dev_b, &ch));
  const int fds0 = open_fd_count();
  void* sc[3] = {};
  for (void*& s : sc) ASSERT_TRUE(connect_to_child(ch, bed().dev_a, &s));
  const int fds1 = open_fd_count();
  EXPECT_EQ(fds1 - fds0, 1) << "three comms to one peer process should share one socket";
  {
    RegBuf bufs[3];
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(bufs[i].allocate(&net(), sc[i], kMsg));
      fill_pattern(bufs[i].data(), kMsg, seed_of(10 + i));
      void* req = nullptr;
      ASSERT_TRUE(post_until("isend", &req, [&](void** r) {
        return net().isend(sc[i], bufs[i].data(), kMsg, kTag, bufs[i].mh(), r);
      }));
      ASSERT_TRUE(wait_done(net(), "send", req, nullptr)) << last_warn();
    }
    char c = 0;
    ASSERT_TRUE(read_full(ch.from, &c, 1, wait_limit())) << "child exit " << ch.kill_now();
    ASSERT_EQ(c, 'C');
    {
      sluice::rdmatest::ExpectWarns expect;
      const ncclResult_t r = send_until_error(sc[0], bufs[0], Clock::now());
      EXPECT_EQ(r, ncclRemoteError);
      EXPECT_TRUE(contains(last_warn(), "closed its comm normally")) << last_warn();
    }
    for (int i = 1; i < 3; ++i) {  // the link and the other comms' ends are untouched
      fill_pattern(bufs[i].data(), kMsg, seed_of(20 + i));
      void* req = nullptr;
      ASSERT_TRUE(post_until("isend", &req, [&](void** r) {
        return net().isend(sc[i], bufs[i].data(), kMsg, kTag, bufs[i].mh(), r);
      }));
      ASSERT_TRUE(wait_done(net(), "send", req, nullptr)) << last_warn();
    }
    ASSERT_TRUE(read_full(ch.from, &c, 1, wait_limit())) << "child exit " << ch.kill_now();
    ASSERT_EQ(c, kReady) << "the child's messages did not verify (exit " << ch.kill_now() << ")";
    EXPECT_EQ(ch.kill_now(), 128 + SIGKILL);
    const auto killed = Clock::now();
    for (int i = 1; i < 3; ++i) {
      sluice::rdmatest::ExpectWarns expect;
      const ncclResult_t r = send_until_error(sc[i], bufs[i], killed);
      expect_peer_death_reported(r, duration_cast<milliseconds>(Clock::now() - killed),
                                 bed().dev_a);
      EXPECT_TRUE(contains(last_warn(), "peer link")) << last_warn();
    }
  }
  for (void* s : sc) EXPECT_EQ(net().close_send(s), ncclSuccess);
  EXPECT_EQ(open_fd_count(), fds0) << "the link outlived its last comm";
  EXPECT_TRUE(close_conn(net(), &other));
  expect_released(before);
}

// ---- Port down, then up again
// ---------------------------------------------------------------------------

bool port_active(const sluice::rdmatest::TestPort& p) {
  for (const auto& a : sluice::rdmatest::active_rdma_ports())
    if (a.dev == p.dev && a.port == p.port) return true;
  return false;
}

// Only where the port's netdev is the bed's own veth (label bed: left out on real NICs).
// `ip link set <netdev> down` raises IBV_EVENT_PORT_ERR: every comm on the port fails at its next
// call, naming the event; after `up`, a new comm on the port works.
TEST(PortDown, CommsOnThePortFailNewCommsWorkAfterUp) {
  REQUIRE_BED();
  const auto pair = sluice::rdmatest::test_pair();
  const auto& pa = pair.a();
  const std::string nd = read_line("/sys/class/infiniband/" + pa.dev + "/ports/" +
                                   std::to_string(pa.port) + "/gid_attrs/ndevs/0");
  if (nd.rfind("veth", 0) != 0 || geteuid() != 0) {
    FAIL() << "needs the bed's Soft-RoCE on a veth and root (netdev of " << pa.label() << " is '"
           << nd << "'); run through scripts/rdma-bed";
  }
  const Counts before = Counts::now();
  Conn c;
  ASSERT_TRUE(open_conn(net(), bed().dev_a, bed().dev_b, &c));
  {
    RegBuf s, r;
    ASSERT_TRUE(s.allocate(&net(), c.send, 4096));
    ASSERT_TRUE(r.allocate(&net(), c.recv, 4096));
    int got = -1;
    fill_pattern(s.data(), 4096, 5);
    ASSERT_TRUE(send_recv(net(), c, s, 4096, r, 4096, 1, &got));
    sluice::rdmatest::ExpectWarns expect;
    const auto down = Clock::now();
    ASSERT_EQ(std::system(("ip link set " + nd + " down").c_str()), 0);
    ncclResult_t res = ncclSuccess;
    while (res == ncclSuccess && Clock::now() - down < 2 * kBound) {
      void* q = nullptr;
      res = net().isend(c.send, s.data(), 4096, 1, s.mh(), &q);
      if (res == ncclSuccess && q != nullptr) {
        int done = 0;
        res = call_test_until_error(q, down, &done);
      }
      usleep(1000);
    }
    const auto took = duration_cast<milliseconds>(Clock::now() - down);
    const int up_rc = std::system(("ip link set " + nd + " up").c_str());
    EXPECT_EQ(up_rc, 0);
    EXPECT_NE(res, ncclSuccess);
    EXPECT_LT(took.count(), kBound.count());
    const std::string w = last_warn();
    EXPECT_TRUE(contains(w, "port went down")) << w;
    EXPECT_TRUE(contains(w, "likely cause")) << w;
    EXPECT_TRUE(contains(w, "qpn ")) << w;
    std::fprintf(stderr, "port down detected in %lld ms: %s\n",
                 static_cast<long long>(took.count()), w.c_str());
  }
  EXPECT_TRUE(close_conn(net(), &c));
  // Up again: wait for the port, then a new comm works.
  const auto up = Clock::now();
  while (!port_active(pa) && Clock::now() - up < wait_limit()) usleep(50 * 1000);
  ASSERT_TRUE(port_active(pa)) << pa.label() << " not ACTIVE again";
  usleep(500 * 1000);  // the GID table is refilled when the link comes back
  Conn fresh;
  ASSERT_TRUE(open_conn(net(), bed().dev_a, bed().dev_b, &fresh));
  expect_other_comm_works(fresh);
  EXPECT_TRUE(close_conn(net(), &fresh));
  expect_released(before);
}

}  // namespace

// Two hosts, link down and up (plugin_faults_two_host.cc).
int two_host_main(int host, const std::string& phase);

}  // namespace nettest

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--faults-child") {
    return nettest::child_main(argv[2], std::atoi(argv[3]));
  }
  if ((argc == 3 || argc == 4) && std::string(argv[1]) == "--two-host-peer") {
    return nettest::two_host_main(std::atoi(argv[2]), argc == 4 ? argv[3] : "idle");
  }
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new nettest::BedEnvironment);
  return RUN_ALL_TESTS();
}
