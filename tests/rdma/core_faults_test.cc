// Faults of the peer's input and of the peer's address, through core's API over real verbs (labels
// rdma and faults; run inside scripts/rdma-bed, bounds set short in tests/rdma/faults.cmake):
//  * A misbehaving receiver rewrites a clear-to-send slot of the sender's FIFO: count 0, count
//  above
//    kEntriesPerSlot, an index out of range, a wrong seq, a size larger than the registered region,
//    a wrong rkey. The sender's comm fails (isend or test) with an error naming what was wrong (the
//    text the plugin WARNs), keeps failing fast with the same reason, nothing crashes (ASan runs
//    this binary in CI's sanitizer pass), nothing hangs, and closing releases every verbs object.
//    The "peer" is this test, through the NIC: it posts an RDMA WRITE of the bad entries on the
//    receive comm's QP (the QP the receiver's own clear-to-send WRITEs use) to the sender's FIFO
//    address with its rkey (core internals: RecvComm::remote_fifo / Conn::remote_mem_rkey), from a
//    small buffer registered on the receive comm, and waits for that WRITE's completion before the
//    sender reads the slot as it reads every clear-to-send. For the size and rkey cases the NIC
//    then really rejects the sender's RDMA WRITE.
//  * An IBV_EVENT_CQ_ERR (the receive comm's CQ overrun on purpose) fails that comm, naming it; a
//    completion with a wr_id that is not Sluice's fails the comm instead of indexing by it.
//  * Connect to a listener that is gone (its port refuses) and to an address that does not answer:
//    connect fails within SLUICE_CONNECT_TIMEOUT_MS with a message naming the address and the knob,
//    leaving no fd and no verbs object behind.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "core_pair.h"
#include "datapath/datapath_internal.h"
#include "rdma_env.h"
#include "sluice/core/api.h"
#include "sluice/core/base/config.h"
#include "sluice/core/wire/wire.h"

namespace {

using sluice::rdmatest::count_own;

using namespace sluice;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::mutex g_log_mu;
std::vector<std::string> g_warns;

void sink(int level, unsigned long, const char* file, int line, const char* fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (level == kLogWarn) {
    std::lock_guard<std::mutex> lk(g_log_mu);
    g_warns.push_back(msg);
  }
  if (level <= kLogWarn) {
    std::fprintf(stderr, "%ssluice WARN %s:%d %s\n", rdmatest::warn_prefix(), file, line, msg);
  }
}

using rdmatest::open_fd_count;

struct Leaks {
  long qp = count_own("qp"), cq = count_own("cq"), mr = count_own("mr");
  int fds = open_fd_count();
  void expect_same() const {
    EXPECT_EQ(open_fd_count(), fds) << "file descriptors leaked";
    if (qp < 0) {
      std::printf("`rdma resource show` unavailable: verbs objects not checked\n");
      return;
    }
    EXPECT_EQ(count_own("qp"), qp) << "QPs leaked";
    EXPECT_EQ(count_own("cq"), cq) << "CQs leaked";
    EXPECT_EQ(count_own("mr"), mr) << "MRs leaked";
  }
};

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

class CoreFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pair = rdmatest::test_pair();
    SLUICE_REQUIRE_PAIR(pair);
    Status st = engine_acquire(sink);
    ASSERT_TRUE(st.is_ok()) << st.message();
    acquired_ = true;
    ASSERT_TRUE(rdmatest::core_pair_devices(pair, &dev_a_, &dev_b_, &name_a_));
    // The first QP bring-up in the TCG bed takes ~1 s: one pair up front, so bounds measure faults.
    SendComm* s = nullptr;
    RecvComm* r = nullptr;
    ASSERT_NO_FATAL_FAILURE(open_pair(&s, &r));
    EXPECT_TRUE(close_send(s).is_ok());
    EXPECT_TRUE(close_recv(r).is_ok());
  }
  void TearDown() override {
    if (acquired_) engine_release();
  }

  void open_pair(SendComm** s, RecvComm** r) {
    char handle[kHandleSize] = {};
    ListenComm* l = nullptr;
    ASSERT_TRUE(listen(dev_b_, handle, &l).is_ok());
    *s = nullptr;
    *r = nullptr;
    const auto t0 = Clock::now();
    while (*s == nullptr || *r == nullptr) {
      ASSERT_LT(ms_since(t0), 60000) << "connect/accept did not complete";
      if (*s == nullptr) {
        Status st = connect(dev_a_, handle, CommConfig{}, s);
        ASSERT_TRUE(st.is_ok()) << st.message();
      }
      if (*r == nullptr) {
        Status st = accept(l, r);
        ASSERT_TRUE(st.is_ok()) << st.message();
      }
    }
    EXPECT_TRUE(close_listen(l).is_ok());
  }

  bool acquired_ = false;
  int dev_a_ = -1, dev_b_ = -1;
  std::string name_a_;
};

// ---- A clear-to-send slot rewritten by a misbehaving peer
// ---------------------------------------------------------------

constexpr size_t kMsg = 64 * 1024;
constexpr int kTag = 11;
// Detection bound: a corrupt slot fails at the isend that reads it; a write the NIC rejects fails
// at the test that polls its completion (a NAK, no retries): both well inside this.
constexpr double kBoundMs = 5000;

enum class Bad {
  kCountZero,
  kCountAboveLimit,
  kIndexOutOfRange,
  kWrongSeq,
  kSizeBeyondRegion,
  kWrongRkey
};

struct BadCase {
  Bad kind;
  const char* name;
  std::vector<std::string> expect;  // parts of the error (the WARN text), all required
};

std::vector<BadCase> bad_cases() {
  return {
      {Bad::kCountZero, "CountZero", {"corrupt clear-to-send entry (0 receives)"}},
      {Bad::kCountAboveLimit, "CountAboveLimit", {"corrupt clear-to-send entry (9 receives)"}},
      {Bad::kIndexOutOfRange,
       "IndexOutOfRange",
       {"corrupt clear-to-send slot: entry 1 says index 8 of 2"}},
      {Bad::kWrongSeq, "WrongSeq", {"corrupt clear-to-send slot: entry 0 has seq 5, expected 1"}},
      {Bad::kSizeBeyondRegion,
       "SizeBeyondRegion",
       {"send completion error", "remote access error", "address outside the peer's registered"}},
      {Bad::kWrongRkey,
       "WrongRkey",
       {"send completion error", "remote access error", "wrong rkey"}},
  };
}

class CtsRewrite : public CoreFaults, public ::testing::WithParamInterface<BadCase> {};
INSTANTIATE_TEST_SUITE_P(Faults, CtsRewrite, ::testing::ValuesIn(bad_cases()),
                         [](const ::testing::TestParamInfo<BadCase>& i) { return i.param.name; });

// A signaled RDMA WRITE on the receive comm's QP 0 into the sender's FIFO at `offset`, with the
// FIFO's rkey: of `sge` (nullptr: zero bytes). The ibv_post_send result.
int post_fifo_write(RecvComm* r, uint64_t wr_id, ibv_sge* sge, size_t offset = 0) {
  ibv_send_wr w{};
  w.wr_id = wr_id;
  w.sg_list = sge;
  w.num_sge = sge != nullptr ? 1 : 0;
  w.opcode = IBV_WR_RDMA_WRITE;
  w.send_flags = IBV_SEND_SIGNALED;
  w.wr.rdma.remote_addr = r->remote_fifo + offset;
  w.wr.rdma.rkey = r->c.remote_mem_rkey[0];
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(r->c.qp[0].get(), &w, &bad);
}

// The misbehaving peer's RDMA WRITE of n entries into the sender's FIFO from entry `first` of slot
// 0: posted on the receive comm's QP 0 (slot 0's clear-to-send goes there, so on RC this WRITE
// lands after the receiver's own), from `stage` (registered on the receive comm, mh), to the
// FIFO address and rkey the receiver's clear-to-send WRITEs use. Returns once its completion is
// polled from the receive comm's CQ (nothing else of the receiver completes meanwhile: its
// clear-to-send is unsignaled and no data has been sent).
constexpr uint64_t kPeerWrId = 0x7065657277726974ull;  // "peerwrit"
::testing::AssertionResult peer_rdma_writes(RecvComm* r, MemHandle* mh, wire::CtsEntry* stage,
                                            int first, const wire::CtsEntry* e, int n) {
  std::memcpy(stage, e, n * sizeof(wire::CtsEntry));
  ibv_sge sge{reinterpret_cast<uintptr_t>(stage), static_cast<uint32_t>(n * sizeof(*e)), mh->lkey};
  if (int rc = post_fifo_write(r, kPeerWrId, &sge, first * sizeof(wire::CtsEntry)); rc != 0)
    return ::testing::AssertionFailure() << "ibv_post_send of the peer's write: " << rc;
  const auto t0 = Clock::now();
  while (ms_since(t0) < 10000) {
    ibv_wc wc{};
    const int got = ibv_poll_cq(r->c.members[0].cq.get(), 1, &wc);
    if (got < 0) return ::testing::AssertionFailure() << "ibv_poll_cq failed";
    if (got == 0) {
      usleep(100);
      continue;
    }
    if (wc.wr_id != kPeerWrId)
      return ::testing::AssertionFailure() << "unexpected completion, wr_id " << wc.wr_id;
    if (wc.status != IBV_WC_SUCCESS)
      return ::testing::AssertionFailure()
             << "the peer's write failed: " << ibv_wc_status_str(wc.status);
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "the peer's write did not complete within 10 s";
}

TEST_P(CtsRewrite, SenderFailsNamingWhatWasWrong) {
  const BadCase& bc = GetParam();
  const Leaks before;
  SendComm* s = nullptr;
  RecvComm* r = nullptr;
  ASSERT_NO_FATAL_FAILURE(open_pair(&s, &r));
  // The receiver's buffer: 16 KiB registered out of a 64 KiB allocation (the rest is not its).
  void* rbuf = std::aligned_alloc(4096, kMsg);
  void* sbuf = std::aligned_alloc(4096, kMsg);
  ASSERT_TRUE(rbuf != nullptr && sbuf != nullptr);
  std::memset(rbuf, 0, kMsg);
  std::memset(sbuf, 0x5a, kMsg);
  // The peer's staging buffer for its bad entries, registered on the receive comm.
  auto* stage = static_cast<wire::CtsEntry*>(std::aligned_alloc(4096, 4096));
  ASSERT_TRUE(stage != nullptr);
  MemHandle *rmh = nullptr, *smh = nullptr, *pmh = nullptr;
  ASSERT_TRUE(reg_mr(r, rbuf, 16384, MemType::kHost, &rmh).is_ok());
  ASSERT_TRUE(reg_mr(s, sbuf, kMsg, MemType::kHost, &smh).is_ok());
  ASSERT_TRUE(reg_mr(r, stage, 4096, MemType::kHost, &pmh).is_ok());
  wire::CtsEntry* slot = s->fifo;  // head 0: slot 0, the receive with seq 1
  Request* rq = nullptr;
  const bool nic_case = bc.kind == Bad::kSizeBeyondRegion || bc.kind == Bad::kWrongRkey;
  if (nic_case) {
    // A real receive (its receive WR takes the closing WRITE_WITH_IMM), then the peer rewrites
    // the entry it published.
    void* d = rbuf;
    size_t cap = 16384;
    int tag = kTag;
    ASSERT_TRUE(irecv(r, 1, &d, &cap, &tag, &rmh, &rq).is_ok());
    ASSERT_NE(rq, nullptr);
    int done = 0;
    const auto t0 = Clock::now();
    while (std::atomic_ref<uint64_t>(slot[0].seq).load(std::memory_order_acquire) != 1) {
      ASSERT_TRUE(test(rq, &done, nullptr).is_ok());  // publishes
      ASSERT_LT(ms_since(t0), 10000) << "the receiver's clear-to-send never arrived";
      usleep(100);
    }
    // With the eager path on, its grant's WRITE (signaled) went before the entry: the comm polls
    // that completion itself (peer_rdma_writes expects only its own): every clear-to-send WRITE
    // still outstanding is then an unsignaled one.
    while (r->c.qp[0].cts_outstanding > r->c.qp[0].cts_unsignaled) {
      ASSERT_TRUE(test(rq, &done, nullptr).is_ok());
      ASSERT_LT(ms_since(t0), 10000) << "the receiver's clear-to-send WRITE never completed";
      usleep(100);
    }
    wire::CtsEntry e = slot[0];
    if (bc.kind == Bad::kSizeBeyondRegion) {
      e.size = kMsg;  // the whole allocation: 48 KiB beyond the registration
    } else {
      e.rkey ^= 0x5a5a00;
    }
    ASSERT_TRUE(peer_rdma_writes(r, pmh, stage, 0, &e, 1));
    ASSERT_EQ(std::memcmp(&slot[0], &e, sizeof e), 0) << "the peer's write did not land";
  } else {
    wire::CtsEntry e{};
    e.addr = reinterpret_cast<uintptr_t>(rbuf);
    e.rkey = rmh->rkey;
    e.size = 16384;
    e.tag = kTag;
    e.seq = 1;
    switch (bc.kind) {
      case Bad::kCountZero:
        e.nreqs = 0;
        break;
      case Bad::kCountAboveLimit:
        e.nreqs = wire::kEntriesPerSlot + 1;
        break;
      case Bad::kIndexOutOfRange:
        e.nreqs = 2;
        break;
      case Bad::kWrongSeq:
        e.nreqs = 1;
        e.seq = 5;  // neither 1 (this receive) nor 0 (the fresh slot)
        break;
      default:
        break;
    }
    wire::CtsEntry two[2] = {e, e};  // entry 1 only for kIndexOutOfRange
    two[1].index = wire::kEntriesPerSlot;
    const int n = bc.kind == Bad::kIndexOutOfRange ? 2 : 1;
    ASSERT_TRUE(peer_rdma_writes(r, pmh, stage, 0, two, n));
    ASSERT_EQ(std::memcmp(slot, two, n * sizeof(wire::CtsEntry)), 0)
        << "the peer's write did not land";
  }
  const size_t size = nic_case ? (bc.kind == Bad::kSizeBeyondRegion ? kMsg : 4096) : 4096;
  std::string reason;
  double took = 0;
  {
    rdmatest::ExpectWarns expected;
    const auto t0 = Clock::now();
    Request* sq = nullptr;
    Status st;
    while (st.is_ok() && sq == nullptr && ms_since(t0) < 2 * kBoundMs) {
      st = isend(s, sbuf, size, kTag, smh, &sq);
      if (st.is_again()) st = Status::ok();
    }
    if (nic_case) {
      ASSERT_TRUE(st.is_ok()) << st.message();
      ASSERT_NE(sq, nullptr) << "the sender did not post against the rewritten entry";
      int done = 0;
      while (st.is_ok() && !done && ms_since(t0) < 2 * kBoundMs) st = test(sq, &done, nullptr);
      EXPECT_EQ(done, 0) << "a write the peer's NIC must reject completed";
    } else {
      EXPECT_EQ(sq, nullptr) << "the sender posted against a corrupt slot";
    }
    took = ms_since(t0);
    ASSERT_FALSE(st.is_ok()) << "no error within " << 2 * kBoundMs << " ms";
    reason = st.message();
    EXPECT_EQ(st.code(), Code::kRemoteError) << reason;
    EXPECT_LT(took, kBoundMs);
    for (const auto& part : bc.expect) EXPECT_TRUE(has(reason, part)) << reason;
    EXPECT_TRUE(has(reason, "qpn ")) << reason;
    EXPECT_TRUE(has(reason, name_a_)) << reason;
    std::printf("%s: sender failed after %.1f ms: %s\n", bc.name, took, reason.c_str());
    // The failed comm keeps failing fast with the same reason.
    const auto t1 = Clock::now();
    Request* again = nullptr;
    Status st2 = isend(s, sbuf, 4096, kTag, smh, &again);
    EXPECT_EQ(again, nullptr);
    EXPECT_EQ(st2.message(), reason);
    EXPECT_LT(ms_since(t1), 100);
  }
  EXPECT_TRUE(dereg_mr(s, smh).is_ok());
  {
    rdmatest::ExpectWarns expected;  // the receiver may see its QP flushed by the sender's error
    if (nic_case) {
      // The receive the bad entry was published for is still pending: the sender's comm goes
      // first, and the receive fails once its peer is gone (liveness) or told it failed.
      EXPECT_TRUE(close_send(s).is_ok());
      s = nullptr;
      Status rs;
      int done = 0;
      const auto t0 = Clock::now();
      while (rs.is_ok() && !done && ms_since(t0) < 10000) {
        rs = test(rq, &done, nullptr);
        usleep(1000);
      }
      EXPECT_FALSE(rs.is_ok()) << "the pending receive did not fail after its peer closed";
      EXPECT_EQ(done, 0);
    }
    EXPECT_TRUE(dereg_mr(r, rmh).is_ok());
    EXPECT_TRUE(dereg_mr(r, pmh).is_ok());
    if (s != nullptr) {
      EXPECT_TRUE(close_send(s).is_ok());
    }
    EXPECT_TRUE(close_recv(r).is_ok());
  }
  std::free(rbuf);
  std::free(sbuf);
  std::free(stage);
  before.expect_same();
}

// ---- Connect to a listener that is gone, and to an address that does not answer
// -------------------------------------------------

int connect_timeout_ms() {
  const char* v = std::getenv("SLUICE_CONNECT_TIMEOUT_MS");
  return v != nullptr ? std::atoi(v) : Config{}.connect_timeout_ms;
}

// Drives connect until it fails; returns the error and the time it took.
Status connect_until_error(int dev, char* handle, double* took_ms) {
  const auto t0 = Clock::now();
  const double limit = connect_timeout_ms() + 10000.0;
  Status st;
  SendComm* s = nullptr;
  while (st.is_ok() && ms_since(t0) < limit) {
    st = connect(dev, handle, CommConfig{}, &s);
    EXPECT_EQ(s, nullptr) << "connected to nobody";
    if (s != nullptr) {
      EXPECT_TRUE(close_send(s).is_ok());
      return Status(Code::kInternalError, "connected to nobody");
    }
    usleep(1000);
  }
  *took_ms = ms_since(t0);
  return st;
}

void expect_connect_failure(const Status& st, double took, const std::string& address) {
  const int bound = connect_timeout_ms();
  EXPECT_EQ(st.code(), Code::kRemoteError) << st.message();
  EXPECT_TRUE(has(st.message(), "not established within SLUICE_CONNECT_TIMEOUT_MS=" +
                                    std::to_string(bound) + " ms"))
      << st.message();
  EXPECT_TRUE(has(st.message(), address))
      << "the error does not name " << address << ": " << st.message();
  EXPECT_GE(took, bound - 50) << "gave up before the bound";
  EXPECT_LT(took, bound + 2000.0) << "the bound is " << bound << " ms";
}

// The address part of a handle as core prints peers ("10.0.0.1:4711" / "[fe80::1%2]:4711").
std::string handle_text(const char* handle) {
  wire::Handle h;
  std::memcpy(&h, handle, sizeof h);
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(h.family, h.addr, buf, sizeof buf);
  return buf;
}

TEST_F(CoreFaults, ConnectToAListenerThatIsGoneFailsWithinTheBound) {
  char handle[kHandleSize] = {};
  ListenComm* l = nullptr;
  ASSERT_TRUE(listen(dev_b_, handle, &l).is_ok());
  ASSERT_TRUE(close_listen(l).is_ok());
  const Leaks before;
  double took = 0;
  Status st;
  {
    rdmatest::ExpectWarns expected;
    st = connect_until_error(dev_a_, handle, &took);
  }
  std::printf("listener gone: connect failed after %.0f ms (SLUICE_CONNECT_TIMEOUT_MS=%d): %s\n",
              took, connect_timeout_ms(), st.message().c_str());
  expect_connect_failure(st, took, handle_text(handle));
  EXPECT_TRUE(has(st.message(), "TCP attempts")) << st.message();
  // Refused at once, so retried with back-off: more than one attempt, all within the bound.
  EXPECT_FALSE(has(st.message(), "(1 TCP attempts)")) << st.message();
  before.expect_same();
}

// Every local address, as text: the rewritten address must not be one of them.
std::vector<std::string> local_addresses() {
  std::vector<std::string> out;
  ifaddrs* ifa = nullptr;
  if (getifaddrs(&ifa) != 0) return out;
  for (ifaddrs* p = ifa; p != nullptr; p = p->ifa_next) {
    if (p->ifa_addr == nullptr) continue;
    char buf[INET6_ADDRSTRLEN] = {};
    const int fam = p->ifa_addr->sa_family;
    if (fam == AF_INET)
      inet_ntop(fam, &reinterpret_cast<sockaddr_in*>(p->ifa_addr)->sin_addr, buf, sizeof buf);
    else if (fam == AF_INET6)
      inet_ntop(fam, &reinterpret_cast<sockaddr_in6*>(p->ifa_addr)->sin6_addr, buf, sizeof buf);
    else
      continue;
    out.push_back(buf);
  }
  freeifaddrs(ifa);
  return out;
}

TEST_F(CoreFaults, ConnectToAnAddressThatDoesNotAnswerFailsWithinTheBound) {
  char handle[kHandleSize] = {};
  ListenComm* l = nullptr;
  ASSERT_TRUE(listen(dev_b_, handle, &l).is_ok());
  // The listener's address with its last byte changed: same subnet and interface (IPv4 /16 of the
  // two-host bed, or an IPv6 link-local address on the bed's veth), so the SYN goes out on the link
  // and nobody answers (ARP / neighbour discovery fails, or the packet is dropped).
  wire::Handle h;
  std::memcpy(&h, handle, sizeof h);
  const size_t last = h.family == AF_INET ? 3 : 15;
  const auto locals = local_addresses();
  std::string text;
  for (int k = 1; k < 200; ++k) {
    h.addr[last] = static_cast<uint8_t>(h.addr[last] + 37);
    if (h.addr[last] == 0 || h.addr[last] == 255) continue;
    char buf[INET6_ADDRSTRLEN] = {};
    inet_ntop(h.family, h.addr, buf, sizeof buf);
    text = buf;
    bool local = false;
    for (const auto& a : locals) local = local || a == text;
    if (!local) break;
  }
  h.checksum = wire::handle_checksum(h);
  char silent[kHandleSize] = {};
  std::memcpy(silent, &h, sizeof h);
  std::printf("listener at %s; connecting to %s instead\n", handle_text(handle).c_str(),
              text.c_str());
  const Leaks before;
  double took = 0;
  Status st;
  {
    rdmatest::ExpectWarns expected;
    st = connect_until_error(dev_a_, silent, &took);
  }
  std::printf("no answer: connect failed after %.0f ms (SLUICE_CONNECT_TIMEOUT_MS=%d): %s\n", took,
              connect_timeout_ms(), st.message().c_str());
  expect_connect_failure(st, took, text);
  before.expect_same();
  // The real listener was never disturbed: a real peer still connects.
  SendComm* s = nullptr;
  RecvComm* r = nullptr;
  const auto t0 = Clock::now();
  while (s == nullptr || r == nullptr) {
    ASSERT_LT(ms_since(t0), 60000);
    if (s == nullptr) {
      ASSERT_TRUE(connect(dev_a_, handle, CommConfig{}, &s).is_ok());
    }
    if (r == nullptr) {
      ASSERT_TRUE(accept(l, &r).is_ok());
    }
  }
  EXPECT_TRUE(close_send(s).is_ok());
  EXPECT_TRUE(close_recv(r).is_ok());
  EXPECT_TRUE(close_listen(l).is_ok());
}

// ---- An asynchronous CQ error, mapped to the comm that owns the CQ
// --------------------------------------------------------------

// The receive comm's CQ shrunk to one entry (ibv_resize_cq), then four signaled zero-length WRITEs
// posted on its QP (with the wr_id of a signaled clear-to-send write covering no other write, so
// that the comm's own polling takes their completions as its own) and never polled: the NIC has
// more completions than the CQ holds, so it raises IBV_EVENT_CQ_ERR (rxe: "queue full"; a real NIC
// moves the CQ to error). The plugin's event thread maps the event to the comm that owns the CQ:
// that comm's next call fails naming the event, keeps failing with the same reason, the send comm
// of another pair keeps working, and closing the failed comm is bounded and releases every verbs
// object.
TEST_F(CoreFaults, CqErrorEventFailsTheCommThatOwnsTheCq) {
  const Leaks before;
  SendComm* s = nullptr;
  RecvComm* r = nullptr;
  ASSERT_NO_FATAL_FAILURE(open_pair(&s, &r));
  SendComm* s2 = nullptr;
  RecvComm* r2 = nullptr;
  ASSERT_NO_FATAL_FAILURE(open_pair(&s2, &r2));
  void* buf = std::aligned_alloc(4096, 4096);
  ASSERT_NE(buf, nullptr);
  std::memset(buf, 0, 4096);
  MemHandle* mh = nullptr;
  ASSERT_TRUE(reg_mr(r, buf, 4096, MemType::kHost, &mh).is_ok());
  // A pending receive: the failure must reach a request already in flight too.
  Request* rq = nullptr;
  void* d = buf;
  size_t cap = 4096;
  int tag = kTag;
  ASSERT_TRUE(irecv(r, 1, &d, &cap, &tag, &mh, &rq).is_ok());
  ASSERT_NE(rq, nullptr);
  int done = 0;
  ASSERT_TRUE(test(rq, &done, nullptr).is_ok());
  ASSERT_EQ(done, 0);
  // The event thread WARNs as soon as the CQ overruns.
  auto expecting = std::make_unique<rdmatest::ExpectWarns>();
  int rc = ibv_resize_cq(r->c.members[0].cq.get(), 1);
  if (rc != 0) {
    ADD_FAILURE() << "ibv_resize_cq(1) failed (" << rc << "): cannot overrun the CQ on this NIC";
  } else {
    std::printf("the receive comm's CQ now holds %d entries\n", r->c.members[0].cq.get()->cqe);
    for (int i = 0; i < 4; ++i) {
      // wr_id: as if a signaled clear-to-send write covering none: harmless.
      ASSERT_EQ(post_fifo_write(r, dp::kWrCts, nullptr), 0);
    }
  }
  std::string reason;
  double took = 0;
  {
    const auto t0 = Clock::now();
    Status st;
    while (st.is_ok() && ms_since(t0) < kBoundMs) {
      done = 0;
      st = test(rq, &done, nullptr);
      if (st.is_ok()) usleep(1000);
    }
    took = ms_since(t0);
    reason = st.message();
    ASSERT_FALSE(st.is_ok()) << "the comm did not fail within " << kBoundMs << " ms";
    // Fails fast with the same reason, for new work too.
    Request* rq2 = nullptr;
    Status again = irecv(r, 1, &d, &cap, &tag, &mh, &rq2);
    EXPECT_FALSE(again.is_ok());
    EXPECT_EQ(again.message(), reason);
  }
  expecting.reset();
  std::printf("CQ overrun: the receive comm failed %.1f ms after the writes: %s\n", took,
              reason.c_str());
  EXPECT_TRUE(has(reason, "async event CQ error")) << reason;
  EXPECT_TRUE(has(reason, "the completion queue overran")) << reason;
  EXPECT_TRUE(has(reason, "qpn ")) << reason;  // the comm's QP is named
  // The other pair is untouched: one message through it.
  {
    void* sb = std::aligned_alloc(4096, 4096);
    void* rb = std::aligned_alloc(4096, 4096);
    ASSERT_TRUE(sb != nullptr && rb != nullptr);
    std::memset(sb, 0x3c, 4096);
    std::memset(rb, 0, 4096);
    MemHandle *smh = nullptr, *rmh = nullptr;
    ASSERT_TRUE(reg_mr(s2, sb, 4096, MemType::kHost, &smh).is_ok());
    ASSERT_TRUE(reg_mr(r2, rb, 4096, MemType::kHost, &rmh).is_ok());
    Request *a = nullptr, *b = nullptr;
    void* rd = rb;
    size_t rcap = 4096;
    int rtag = kTag;
    ASSERT_TRUE(irecv(r2, 1, &rd, &rcap, &rtag, &rmh, &b).is_ok());
    const auto t0 = Clock::now();
    int sdone = 0, rdone = 0;
    while (!(sdone && rdone)) {
      ASSERT_LT(ms_since(t0), 10000) << "the other pair did not move one message";
      if (a == nullptr) {
        Status st = isend(s2, sb, 4096, kTag, smh, &a);
        ASSERT_TRUE(st.is_ok() || st.is_again()) << st.message();
      }
      if (a != nullptr && !sdone) {
        ASSERT_TRUE(test(a, &sdone, nullptr).is_ok());
      }
      if (!rdone) {
        ASSERT_TRUE(test(b, &rdone, nullptr).is_ok());
      }
    }
    EXPECT_EQ(std::memcmp(sb, rb, 4096), 0);
    EXPECT_TRUE(dereg_mr(s2, smh).is_ok());
    EXPECT_TRUE(dereg_mr(r2, rmh).is_ok());
    std::free(sb);
    std::free(rb);
  }
  {
    rdmatest::ExpectWarns expected;  // closing the failed comm may WARN what it could not drain
    const auto t0 = Clock::now();
    (void)dereg_mr(r, mh);  // the errors they may report are the comm's failure again
    (void)close_recv(r);
    (void)close_send(s);
    std::printf("closing the failed pair took %.1f ms\n", ms_since(t0));
  }
  EXPECT_TRUE(close_send(s2).is_ok());
  EXPECT_TRUE(close_recv(r2).is_ok());
  std::free(buf);
  before.expect_same();
}

// A completion whose wr_id none of Sluice's work requests carries (a WR posted on the comm's QP by
// someone else, or a Sluice bug): the comm fails naming it, and the wr_id is never used as an index
// (it used to be, for a wr_id with the clear-to-send bit: a write out of bounds, then a crash).
TEST_F(CoreFaults, ACompletionWithAForeignWrIdFailsTheComm) {
  const Leaks before;
  SendComm* s = nullptr;
  RecvComm* r = nullptr;
  ASSERT_NO_FATAL_FAILURE(open_pair(&s, &r));
  // kPeerWrId has the clear-to-send bit set, and a QP index far out of range.
  ASSERT_EQ(post_fifo_write(r, kPeerWrId, nullptr), 0);
  Status st;
  {
    rdmatest::ExpectWarns expected;
    void* buf = nullptr;
    size_t cap = 0;
    int tag = kTag;
    MemHandle* mh = nullptr;
    Request* rq = nullptr;
    const auto t0 = Clock::now();
    while (st.is_ok() && ms_since(t0) < kBoundMs) {  // a zero-byte receive polls the CQ
      if (rq == nullptr) {
        st = irecv(r, 1, &buf, &cap, &tag, &mh, &rq);
      } else {
        int done = 0;
        st = test(rq, &done, nullptr);
      }
      if (st.is_ok()) usleep(1000);
    }
  }
  ASSERT_FALSE(st.is_ok()) << "the foreign completion went unnoticed for " << kBoundMs << " ms";
  std::printf("foreign wr_id: %s\n", st.message().c_str());
  EXPECT_TRUE(has(st.message(), "completion with unknown wr_id " + std::to_string(kPeerWrId)))
      << st.message();
  {
    rdmatest::ExpectWarns expected;
    (void)close_recv(r);
  }
  EXPECT_TRUE(close_send(s).is_ok());
  before.expect_same();
}

}  // namespace
