// Proves the test bed and the queue-pair bring-up on real verbs: two RC QPs on the test pair of
// ports (SLUICE_TEST_DEVICES, else the first two active ports; see rdma_env.h), RESET -> INIT ->
// RTR -> RTS with every attribute each step needs, the state checked after each step, then a 1 MiB
// RDMA WRITE WITH IMM verified byte for byte.
//
// The address follows the link layer, as in the plugin's connect: RoCE has no LIDs, so the address
// vector carries a GRH (is_global) with the peer's GID, the local GID index chosen as the plugin
// chooses it; InfiniBand addresses the peer by its LID with no GRH (is_global 0, dlid = the peer
// port's LID, assigned by the subnet manager; both ports are on one subnet). After RTR the QP's
// address vector is read back (ibv_query_qp IBV_QP_AV) and checked against that.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "bed_tc.h"
#include "rdma_env.h"
#include "sluice/core/base/config.h"
#include "sluice/core/base/qp.h"
#include "sluice/core/base/verbs.h"
#include "sluice/core/device/device_info.h"

namespace {

using namespace sluice;

struct Side {
  std::string name;
  uint8_t port_num = 1;
  verbs::Context ctx;
  ibv_port_attr port{};
  ibv_gid gid{};      // RoCE: the chosen GID; InfiniBand: unused (LID addressing)
  int gid_index = 0;  // RoCE only
  verbs::Pd pd;
  verbs::Cq cq;
  std::vector<uint8_t> buf;
  verbs::Mr mr;
  verbs::Qp qp;
  uint32_t psn = 0;
  bool roce() const { return port.link_layer == IBV_LINK_LAYER_ETHERNET; }
};

void open_side(Side& s, const rdmatest::TestPort& tp, size_t bytes) {
  int n = 0;
  verbs::DeviceList list(ibv_get_device_list(&n));
  ASSERT_TRUE(list) << "ibv_get_device_list failed";
  ibv_device* dev = nullptr;
  for (int i = 0; i < n; ++i)
    if (tp.dev == ibv_get_device_name(list.get()[i])) dev = list.get()[i];
  ASSERT_NE(dev, nullptr) << tp.dev;
  s.name = tp.label();
  s.port_num = static_cast<uint8_t>(tp.port);
  s.ctx.reset(ibv_open_device(dev));
  ASSERT_TRUE(s.ctx) << "ibv_open_device(" << tp.dev << ")";
  list.reset();  // the context outlives the list
  ASSERT_EQ(ibv_query_port(s.ctx.get(), s.port_num, &s.port), 0);
  ASSERT_EQ(s.port.state, IBV_PORT_ACTIVE) << s.name << " not active";
  if (s.roce()) {
    // The GID the plugin would use (automatic choice; NCCL_IB_GID_INDEX etc. are honoured).
    auto cfg = load_config_from_environment();
    ASSERT_TRUE(cfg.is_ok()) << cfg.status().message();
    auto gids = read_gid_table(s.ctx.get(), tp.dev, s.port_num, s.port.gid_tbl_len);
    auto choice = choose_roce_gid(gids, gid_policy(cfg.value()));
    ASSERT_TRUE(choice.is_ok()) << s.name << ": " << choice.status().message();
    s.gid_index = choice.value().index;
    std::copy(choice.value().gid.begin(), choice.value().gid.end(), s.gid.raw);
    ibv_gid check{};
    ASSERT_EQ(ibv_query_gid(s.ctx.get(), s.port_num, s.gid_index, &check), 0);
    EXPECT_EQ(std::memcmp(check.raw, s.gid.raw, sizeof check.raw), 0) << s.name;
    std::printf("%s: RoCE, GID index %d (%s)\n", s.name.c_str(), s.gid_index,
                choice.value().reason.c_str());
  } else {
    ASSERT_EQ(s.port.link_layer, IBV_LINK_LAYER_INFINIBAND) << s.name << ": unknown link layer";
    // An ACTIVE InfiniBand port has a unicast LID from the subnet manager.
    ASSERT_GT(s.port.lid, 0) << s.name << ": no LID (is a subnet manager running?)";
    ASSERT_LT(s.port.lid, 0xC000) << s.name << ": LID " << s.port.lid << " is not unicast";
    std::printf("%s: InfiniBand, LID %u, SM LID %u\n", s.name.c_str(), s.port.lid, s.port.sm_lid);
  }
  s.pd.reset(ibv_alloc_pd(s.ctx.get()));
  ASSERT_TRUE(s.pd);
  s.cq.reset(ibv_create_cq(s.ctx.get(), 16, nullptr, nullptr, 0));
  ASSERT_TRUE(s.cq);
  s.buf.assign(bytes, 0);
  s.mr.reset(ibv_reg_mr(s.pd.get(), s.buf.data(), s.buf.size(),
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
  ASSERT_TRUE(s.mr);
  auto qp = create_rc_qp(s.pd.get(), s.cq.get(), QpCaps{16, 16, 1, 1, 0});
  ASSERT_TRUE(qp.is_ok()) << qp.status().message();
  s.qp = std::move(qp).value();
  EXPECT_EQ(qp_query_state(s.qp.get()), IBV_QPS_RESET);
  s.psn = random_psn();
}

// The RTR parameters for `self` to reach `peer`, addressed as the link layer requires.
RtrParams rtr_params(const Side& self, const Side& peer) {
  RtrParams r;
  r.path_mtu = std::min(self.port.active_mtu, peer.port.active_mtu);
  r.dest_qpn = peer.qp->qp_num;
  r.rq_psn = peer.psn;  // crossed: my receive PSN is the peer's send PSN
  r.max_dest_rd_atomic = 1;
  r.min_rnr_timer = 12;
  r.port = self.port_num;
  r.is_global = self.roce();
  if (self.roce()) {
    r.dgid = peer.gid;
    r.sgid_index = static_cast<uint8_t>(self.gid_index);
  } else {
    r.dlid = peer.port.lid;
    r.sl = 0;
  }
  return r;
}

// After RTR: the QP's address vector is the one the link layer needs (no GRH on InfiniBand).
void expect_address_vector(const Side& self, const Side& peer) {
  ibv_qp_attr a{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(self.qp.get(), &a, IBV_QP_AV | IBV_QP_DEST_QPN, &init), 0);
  EXPECT_EQ(a.dest_qp_num, peer.qp->qp_num);
  EXPECT_EQ(a.ah_attr.port_num, self.port_num);
  if (self.roce()) {
    EXPECT_EQ(a.ah_attr.is_global, 1) << self.name << ": RoCE needs a GRH";
    EXPECT_EQ(std::memcmp(a.ah_attr.grh.dgid.raw, peer.gid.raw, sizeof peer.gid.raw), 0);
    EXPECT_EQ(a.ah_attr.grh.sgid_index, self.gid_index);
  } else {
    EXPECT_EQ(a.ah_attr.is_global, 0) << self.name << ": InfiniBand on one subnet needs no GRH";
    EXPECT_EQ(a.ah_attr.dlid, peer.port.lid) << self.name << ": LID addressing";
  }
}

void bring_up(Side& self, const Side& peer, uint8_t timeout = 14) {
  ASSERT_TRUE(
      qp_to_init(self.qp.get(), InitParams{self.port_num, 0, IBV_ACCESS_REMOTE_WRITE, MqpRetry{}})
          .is_ok());
  EXPECT_EQ(qp_query_state(self.qp.get()), IBV_QPS_INIT);
  Status st = qp_to_rtr(self.qp.get(), rtr_params(self, peer));
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(qp_query_state(self.qp.get()), IBV_QPS_RTR);
  ASSERT_NO_FATAL_FAILURE(expect_address_vector(self, peer));
  st = qp_to_rts(self.qp.get(), RtsParams{self.psn, timeout, 7, 7, 1, MqpRetry{}});
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(qp_query_state(self.qp.get()), IBV_QPS_RTS);
}

bool poll_one(ibv_cq* cq, ibv_wc* wc, std::chrono::seconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    int n = ibv_poll_cq(cq, 1, wc);
    if (n < 0) return false;
    if (n == 1) return true;
  }
  return false;
}

TEST(QpBringup, WriteWithImmOneMiBBetweenTwoDevices) {
  auto pair = rdmatest::test_pair();
  SLUICE_REQUIRE_PAIR(pair);
  // Two ports when there are two, else loopback on one.
  std::printf("ports: %s\n", pair.describe().c_str());
  std::string a = pair.a().label(), b = pair.b().label();
  constexpr size_t kBytes = 1 << 20;
  Side tx, rx;
  ASSERT_NO_FATAL_FAILURE(open_side(tx, pair.a(), kBytes));
  ASSERT_NO_FATAL_FAILURE(open_side(rx, pair.b(), kBytes));
  ASSERT_EQ(tx.roce(), rx.roce()) << "the pair mixes RoCE and InfiniBand: no path between them";
  ASSERT_NO_FATAL_FAILURE(bring_up(tx, rx));
  ASSERT_NO_FATAL_FAILURE(bring_up(rx, tx));

  for (size_t i = 0; i < kBytes; ++i) tx.buf[i] = static_cast<uint8_t>((i * 131 + 7) ^ (i >> 11));
  std::fill(rx.buf.begin(), rx.buf.end(), 0xee);

  ibv_recv_wr rwr{}, *bad_r = nullptr;
  rwr.wr_id = 42;
  ASSERT_EQ(ibv_post_recv(rx.qp.get(), &rwr, &bad_r), 0);

  ibv_sge sge{reinterpret_cast<uintptr_t>(tx.buf.data()), kBytes, tx.mr->lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = 7;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(0xC0FFEE01u);
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(rx.buf.data());
  wr.wr.rdma.rkey = rx.mr->rkey;
  ASSERT_EQ(ibv_post_send(tx.qp.get(), &wr, &bad), 0);

  ibv_wc wc{};
  ASSERT_TRUE(poll_one(tx.cq.get(), &wc, std::chrono::seconds(60))) << "no send completion";
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  EXPECT_EQ(wc.wr_id, 7u);
  ASSERT_TRUE(poll_one(rx.cq.get(), &wc, std::chrono::seconds(60))) << "no receive completion";
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(wc.wr_id, 42u);
  ASSERT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(ntohl(wc.imm_data), 0xC0FFEE01u);
  EXPECT_EQ(wc.byte_len, kBytes);
  size_t mismatches = 0;
  for (size_t i = 0; i < kBytes; ++i)
    if (rx.buf[i] != tx.buf[i]) ++mismatches;
  EXPECT_EQ(mismatches, 0u);
  std::printf("1 MiB RDMA WRITE WITH IMM %s -> %s verified (qpn %u -> %u, mtu %d)\n", a.c_str(),
              b.c_str(), tx.qp->qp_num, rx.qp->qp_num,
              verbs::mtu_bytes(std::min(tx.port.active_mtu, rx.port.active_mtu)));
}

// RoCE: an unknown GID index is refused at INIT->RTR, and the message names the step and the index.
// InfiniBand: the GID table plays no part (Sluice's RTR carries no GRH there, so the same nonsense
// index is never handed to the device); what is true there is that RTR succeeds and the QP's
// address vector is the peer's LID, without a GRH.
TEST(QpBringup, AddressingFollowsTheLinkLayer) {
  auto pair = rdmatest::test_pair();
  SLUICE_REQUIRE_PAIR(pair);
  Side tx, rx;
  ASSERT_NO_FATAL_FAILURE(open_side(tx, pair.a(), 4096));
  ASSERT_NO_FATAL_FAILURE(open_side(rx, pair.b(), 4096));
  ASSERT_TRUE(
      qp_to_init(tx.qp.get(), InitParams{tx.port_num, 0, IBV_ACCESS_REMOTE_WRITE, MqpRetry{}})
          .is_ok());
  RtrParams r = rtr_params(tx, rx);
  r.sgid_index = 200;  // far beyond any GID table
  Status st = qp_to_rtr(tx.qp.get(), r);
  if (tx.roce()) {
    std::printf("%s: RoCE, GID index 200 must be refused\n", tx.name.c_str());
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("INIT->RTR"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("sgid_index 200"), std::string::npos) << st.message();
    EXPECT_EQ(qp_query_state(tx.qp.get()), IBV_QPS_INIT);
  } else {
    std::printf("%s: InfiniBand, LID %u -> LID %u, no GRH\n", tx.name.c_str(), tx.port.lid,
                rx.port.lid);
    ASSERT_FALSE(r.is_global);
    ASSERT_TRUE(st.is_ok()) << st.message();
    EXPECT_EQ(qp_query_state(tx.qp.get()), IBV_QPS_RTR);
    ASSERT_NO_FATAL_FAILURE(expect_address_vector(tx, rx));
  }
}

TEST(QpBringup, RtsBeforeRtrIsRefused) {
  auto pair = rdmatest::test_pair();
  SLUICE_REQUIRE_PAIR(pair);
  Side s;
  ASSERT_NO_FATAL_FAILURE(open_side(s, pair.a(), 4096));
  ASSERT_TRUE(qp_to_init(s.qp.get(), InitParams{s.port_num, 0, IBV_ACCESS_REMOTE_WRITE, MqpRetry{}})
                  .is_ok());
  Status st = qp_to_rts(s.qp.get(), RtsParams{});
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("RTR->RTS"), std::string::npos) << st.message();
}

// ---- The fence of failover (fence_qp, health/failover.h): no late write lands ----------------
// The sender's packets are held back by `tc netem delay` (they are in the network, not yet at the
// receiver) when the receiver fences its QP: ERROR, then the drain marker, polled. Every byte
// that arrives after that must be dropped: the receiver's buffer stays exactly as it was at the
// fence. The control runs the same without the fence and must see the late bytes land, so the
// delay really had them in flight. Needs root in the bed (tc): ctest qp_fence, label bed.

constexpr size_t kFenceBytes = size_t{2} << 20;
constexpr size_t kFenceWrite = size_t{256} << 10;

// Posts kFenceBytes of WRITEs tx -> rx (the last one signaled), waits `before_ms`, fences rx's QP
// when `fence`, then waits `after_ms` more. *landed_early: bytes of rx's buffer already written at
// the fence point; *changed_late: bytes that changed after it.
void late_writes(bool fence, int before_ms, int after_ms, size_t* landed_early,
                 size_t* changed_late, size_t* wrong) {
  auto pair = rdmatest::test_pair();
  Side tx, rx;
  ASSERT_NO_FATAL_FAILURE(open_side(tx, pair.a(), kFenceBytes));
  ASSERT_NO_FATAL_FAILURE(open_side(rx, pair.b(), kFenceBytes));
  // RC's ACK timeout above the delayed round trip: the data is sent once, not resent.
  ASSERT_NO_FATAL_FAILURE(bring_up(tx, rx, 20));
  ASSERT_NO_FATAL_FAILURE(bring_up(rx, tx, 20));
  for (size_t i = 0; i < kFenceBytes; ++i) tx.buf[i] = static_cast<uint8_t>(1 + (i * 7) % 251);
  std::fill(rx.buf.begin(), rx.buf.end(), 0);
  constexpr int kWrites = static_cast<int>(kFenceBytes / kFenceWrite);
  ibv_sge sges[kWrites];
  ibv_send_wr wrs[kWrites];
  for (int k = 0; k < kWrites; ++k) {
    sges[k] = {reinterpret_cast<uintptr_t>(tx.buf.data() + k * kFenceWrite),
               static_cast<uint32_t>(kFenceWrite), tx.mr->lkey};
    wrs[k] = ibv_send_wr{};
    wrs[k].wr_id = 100 + k;
    wrs[k].sg_list = &sges[k];
    wrs[k].num_sge = 1;
    wrs[k].opcode = IBV_WR_RDMA_WRITE;
    wrs[k].send_flags = k + 1 == kWrites ? IBV_SEND_SIGNALED : 0;
    wrs[k].wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(rx.buf.data() + k * kFenceWrite);
    wrs[k].wr.rdma.rkey = rx.mr->rkey;
    wrs[k].next = k + 1 < kWrites ? &wrs[k + 1] : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(tx.qp.get(), wrs, &bad), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(before_ms));
  if (fence) {
    constexpr uint64_t kMarker = 0xfe9ce;
    const Status st = fence_qp(rx.qp.get(), kMarker);
    ASSERT_TRUE(st.is_ok()) << st.message();
    bool marker = false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!marker && std::chrono::steady_clock::now() < deadline) {
      ibv_wc wc{};
      const int n = ibv_poll_cq(rx.cq.get(), 1, &wc);
      ASSERT_GE(n, 0);
      if (n == 1) {
        EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR) << ibv_wc_status_str(wc.status);
        marker = is_fence_marker(wc, rx.qp->qp_num, kMarker);
      }
    }
    ASSERT_TRUE(marker) << "the drain marker did not flush within 10 s";
    EXPECT_EQ(qp_query_state(rx.qp.get()), IBV_QPS_ERR);
  }
  const std::vector<uint8_t> at_fence = rx.buf;
  std::this_thread::sleep_for(std::chrono::milliseconds(after_ms));
  *landed_early = *changed_late = *wrong = 0;
  for (size_t i = 0; i < kFenceBytes; ++i) {
    *landed_early += at_fence[i] != 0 ? 1 : 0;
    *changed_late += rx.buf[i] != at_fence[i] ? 1 : 0;
    *wrong += rx.buf[i] != 0 && rx.buf[i] != tx.buf[i] ? 1 : 0;
  }
}

TEST(QpFence, NoLateWriteLandsAfterTheFence) {
  auto pair = rdmatest::test_pair();
  SLUICE_REQUIRE_PAIR(pair);
  if (geteuid() != 0) GTEST_FAIL() << "needs root inside scripts/rdma-bed (tc netem)";
  constexpr int kDelayMs = 400, kBeforeMs = 100, kAfterMs = 2000;
  rdmatest::RoceNetem netem;
  ASSERT_TRUE(netem.install("delay " + std::to_string(kDelayMs) + "ms"));
  size_t early = 0, late = 0, wrong = 0;
  // Control: without the fence the delayed bytes land after the snapshot point.
  ASSERT_NO_FATAL_FAILURE(late_writes(false, kBeforeMs, kAfterMs, &early, &late, &wrong));
  std::printf("control (no fence): %zu bytes landed in the first %d ms, %zu after\n", early,
              kBeforeMs, late);
  EXPECT_GT(late, kFenceBytes / 2) << "the delay did not hold the writes in flight: the test "
                                      "shows nothing";
  EXPECT_EQ(wrong, 0u);
  // With the fence: nothing lands after it.
  ASSERT_NO_FATAL_FAILURE(late_writes(true, kBeforeMs, kAfterMs, &early, &late, &wrong));
  std::printf("fenced at %d ms: %zu bytes had landed, %zu changed in the %d ms after the fence\n",
              kBeforeMs, early, late, kAfterMs);
  EXPECT_EQ(late, 0u) << "bytes landed after the receiver's QP was fenced";
  EXPECT_EQ(wrong, 0u);
  EXPECT_LT(early, kFenceBytes) << "everything landed before the fence: it was not tested";
}

}  // namespace
