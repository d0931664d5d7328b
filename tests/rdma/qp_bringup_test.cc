// Proves the test bed and the queue-pair bring-up on real verbs: two RC QPs on two devices (rxe0
// and rxe1 in the bed), RESET -> INIT -> RTR -> RTS with every attribute each step needs, the state
// checked after each step, then a 1 MiB RDMA WRITE WITH IMM verified byte for byte.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "rdma_env.h"
#include "sluice/core/qp.h"
#include "sluice/core/verbs.h"

namespace {

using namespace sluice;

struct Side {
  std::string name;
  verbs::Context ctx;
  ibv_port_attr port{};
  ibv_gid gid{};
  verbs::Pd pd;
  verbs::Cq cq;
  std::vector<uint8_t> buf;
  verbs::Mr mr;
  verbs::Qp qp;
  uint32_t psn = 0;
};

void open_side(Side& s, const std::string& name, size_t bytes) {
  int n = 0;
  verbs::DeviceList list(ibv_get_device_list(&n));
  ASSERT_TRUE(list) << "ibv_get_device_list failed";
  ibv_device* dev = nullptr;
  for (int i = 0; i < n; ++i)
    if (name == ibv_get_device_name(list.get()[i])) dev = list.get()[i];
  ASSERT_NE(dev, nullptr) << name;
  s.name = name;
  s.ctx.reset(ibv_open_device(dev));
  ASSERT_TRUE(s.ctx) << "ibv_open_device(" << name << ")";
  list.reset();  // the context outlives the list
  ASSERT_EQ(ibv_query_port(s.ctx.get(), 1, &s.port), 0);
  ASSERT_EQ(s.port.state, IBV_PORT_ACTIVE) << name << " port 1 not active";
  ASSERT_EQ(ibv_query_gid(s.ctx.get(), 1, 0, &s.gid), 0);
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

void bring_up(Side& self, const Side& peer) {
  ASSERT_TRUE(qp_to_init(self.qp.get(), InitParams{1, 0, IBV_ACCESS_REMOTE_WRITE}).is_ok());
  EXPECT_EQ(qp_query_state(self.qp.get()), IBV_QPS_INIT);
  RtrParams r;
  r.path_mtu = std::min(self.port.active_mtu, peer.port.active_mtu);
  r.dest_qpn = peer.qp->qp_num;
  r.rq_psn = peer.psn;  // crossed: my receive PSN is the peer's send PSN
  r.max_dest_rd_atomic = 1;
  r.min_rnr_timer = 12;
  r.port = 1;
  r.is_global = self.port.link_layer == IBV_LINK_LAYER_ETHERNET;
  r.dgid = peer.gid;
  r.sgid_index = 0;
  r.dlid = peer.port.lid;
  Status st = qp_to_rtr(self.qp.get(), r);
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(qp_query_state(self.qp.get()), IBV_QPS_RTR);
  st = qp_to_rts(self.qp.get(), RtsParams{self.psn, 14, 7, 7, 1});
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
  auto devs = rdmatest::active_rdma_devices();
  SLUICE_REQUIRE_DEVICES(devs, 1);
  // Two devices when there are two (rxe0 -> rxe1 in the bed), else loopback on one.
  std::string a = devs[0], b = devs.size() > 1 ? devs[1] : devs[0];
  std::printf("devices: %s -> %s\n", a.c_str(), b.c_str());
  constexpr size_t kBytes = 1 << 20;
  Side tx, rx;
  ASSERT_NO_FATAL_FAILURE(open_side(tx, a, kBytes));
  ASSERT_NO_FATAL_FAILURE(open_side(rx, b, kBytes));
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

TEST(QpBringup, WrongGidIndexFailsAtRtrNamingTheStep) {
  auto devs = rdmatest::active_rdma_devices();
  SLUICE_REQUIRE_DEVICES(devs, 1);
  Side tx, rx;
  ASSERT_NO_FATAL_FAILURE(open_side(tx, devs[0], 4096));
  ASSERT_NO_FATAL_FAILURE(open_side(rx, devs.size() > 1 ? devs[1] : devs[0], 4096));
  if (tx.port.link_layer != IBV_LINK_LAYER_ETHERNET) GTEST_SKIP() << "GID index only on RoCE";
  ASSERT_TRUE(qp_to_init(tx.qp.get(), InitParams{}).is_ok());
  RtrParams r;
  r.path_mtu = tx.port.active_mtu;
  r.dest_qpn = rx.qp->qp_num;
  r.dgid = rx.gid;
  r.sgid_index = 200;  // far beyond any GID table
  Status st = qp_to_rtr(tx.qp.get(), r);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("INIT->RTR"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("sgid_index 200"), std::string::npos) << st.message();
  EXPECT_EQ(qp_query_state(tx.qp.get()), IBV_QPS_INIT);
}

TEST(QpBringup, RtsBeforeRtrIsRefused) {
  auto devs = rdmatest::active_rdma_devices();
  SLUICE_REQUIRE_DEVICES(devs, 1);
  Side s;
  ASSERT_NO_FATAL_FAILURE(open_side(s, devs[0], 4096));
  ASSERT_TRUE(qp_to_init(s.qp.get(), InitParams{}).is_ok());
  Status st = qp_to_rts(s.qp.get(), RtsParams{});
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("RTR->RTS"), std::string::npos) << st.message();
}

}  // namespace
