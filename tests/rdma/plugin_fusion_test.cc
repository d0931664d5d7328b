// NIC fusion through the exported tables, in NCCL's order of calls (src/graph/topo.cc): init,
// devices, getProperties of each, makeVDevice, devices again, getProperties of the new device; then
// listen/connect/accept on the new index and verified messages over it. Driven through the v9,
// v10, v11 and v12 tables (v8 has no makeVDevice), in the one-VM bed's two ports (rxe0 + rxe1).
// FusedDevice.SharesByPacketCount* check that the members carry the bytes by their weights,
// counted in packets on each member's port; they need a fresh v12 engine each, so they run in a
// process of their own (plugin_fusion_shares), not after the v9/v10 cases.
//
// Versions run v12, v11 first (their init holds the engine per ctx, so each starts from a fresh
// engine), then v10, v9 (their init holds it for the process: v9 sees v10's fused device). The
// test counts the physical devices from vProps, as NCCL knows them from its first devices().
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "plugin_bed.h"  // device_sent_packets, kGuard (and net_harness.h)

namespace nettest {
namespace {

constexpr int kVersions[] = {12, 11, 10, 9};

struct Fused {
  int nphys = 0;  // physical devices (vProps {1, {dev}})
  int ndev = 0;   // devices() before makeVDevice
  int a = -1, b = -1;
  int vdev = -1;
  std::vector<Props> props;  // of every device before makeVDevice
  Props fused;
};

// init .. getProperties of the new device, asserting on the way.
::testing::AssertionResult fuse_in_nccl_order(Net& n, Fused* f) {
  if (ncclResult_t r = n.init(0xf00 + n.version()); r != ncclSuccess)
    return ::testing::AssertionFailure() << "init returned " << r;
  if (n.devices(&f->ndev) != ncclSuccess || f->ndev < 2)
    return ::testing::AssertionFailure() << "devices: " << f->ndev << " (need 2 ports)";
  f->props.resize(f->ndev);
  for (int d = 0; d < f->ndev; ++d) {
    if (n.properties(d, &f->props[d]) != ncclSuccess)
      return ::testing::AssertionFailure() << "getProperties(" << d << ") failed";
    const Props& p = f->props[d];
    if (p.vndevs == 1 && p.vdevs == std::vector<int>{d}) {
      ++f->nphys;
      if (f->a < 0) {
        f->a = d;
      } else if (f->b < 0) {
        f->b = d;
      }
    }
  }
  if (f->b < 0) return ::testing::AssertionFailure() << "fewer than 2 physical devices";
  if (ncclResult_t r = n.make_vdevice({f->a, f->b}, &f->vdev); r != ncclSuccess)
    return ::testing::AssertionFailure()
           << "makeVDevice({" << f->a << "," << f->b << "}) returned " << r << ": " << last_warn();
  int after = 0;
  if (n.devices(&after) != ncclSuccess) return ::testing::AssertionFailure() << "devices again";
  // A new device after all others; or, if this engine fused the same pair already (v9 after v10,
  // one process-wide engine), that same device.
  const bool again = f->vdev < f->ndev && f->props[f->vdev].vdevs == std::vector<int>{f->a, f->b};
  if (!again && (f->vdev != f->ndev || after != f->ndev + 1)) {
    return ::testing::AssertionFailure() << "makeVDevice gave index " << f->vdev << ", devices "
                                         << after << " (had " << f->ndev << ")";
  }
  if (n.properties(f->vdev, &f->fused) != ncclSuccess)
    return ::testing::AssertionFailure() << "getProperties of the fused device failed";
  return ::testing::AssertionSuccess();
}

// The verbs device name of a plugin device name ("mlx5_0:1" -> "mlx5_0").
std::string adapter_of(const std::string& name) {
  return name.substr(0, name.find(':'));
}

// Sets an environment variable for one v12 engine (v12's init holds the engine per ctx, and the
// configuration is read when the engine starts). Runs first in this binary: v9/v10 hold the engine
// for the process.
struct ScopedEnv {
  std::string name;
  ScopedEnv(const char* n, const std::string& v) : name(n) { setenv(n, v.c_str(), 1); }
  ~ScopedEnv() { unsetenv(name.c_str()); }
};

TEST(FusedDevice, KnobsMergeNicsRailsAndWeightsOnV12) {
  SLUICE_REQUIRE_DEVICES(sluice::rdmatest::active_rdma_devices(), 2);
  std::string a_name, b_name;
  {
    Net n(12);
    ASSERT_EQ(n.init(0xf10), ncclSuccess);
    Props pa, pb;
    ASSERT_EQ(n.properties(0, &pa), ncclSuccess);
    ASSERT_EQ(n.properties(1, &pb), ncclSuccess);
    a_name = adapter_of(pa.name);
    b_name = adapter_of(pb.name);
  }
  {  // NCCL_IB_MERGE_NICS=0: refused, saying so; the devices stay as they are.
    ScopedEnv env("NCCL_IB_MERGE_NICS", "0");
    Net n(12);
    ASSERT_EQ(n.init(0xf11), ncclSuccess);
    int before = 0, after = 0, d = -1;
    ASSERT_EQ(n.devices(&before), ncclSuccess);
    {
      sluice::rdmatest::ExpectWarns expected;
      EXPECT_EQ(n.make_vdevice({0, 1}, &d), ncclInvalidArgument);
      EXPECT_NE(last_warn().find("NCCL_IB_MERGE_NICS=0"), std::string::npos) << last_warn();
    }
    ASSERT_EQ(n.devices(&after), ncclSuccess);
    EXPECT_EQ(after, before);
  }
  {  // SLUICE_NIC_RAILS: the members' rail and planes, and the fused device's shared rail.
    ScopedEnv env("SLUICE_NIC_RAILS", a_name + "=3/0," + b_name + "=3/1");
    Net n(12);
    ASSERT_EQ(n.init(0xf12), ncclSuccess);
    Props pa, pb, pf;
    ASSERT_EQ(n.properties(0, &pa), ncclSuccess);
    ASSERT_EQ(n.properties(1, &pb), ncclSuccess);
    EXPECT_EQ(pa.rail, 3);
    EXPECT_EQ(pa.plane, 0);
    EXPECT_EQ(pb.rail, 3);
    EXPECT_EQ(pb.plane, 1);
    int d = -1;
    ASSERT_EQ(n.make_vdevice({0, 1}, &d), ncclSuccess);
    ASSERT_EQ(n.properties(d, &pf), ncclSuccess);
    EXPECT_EQ(pf.rail, 3);
    EXPECT_EQ(pf.plane, 0b11);
  }
  {  // SLUICE_FUSION_WEIGHTS naming one member only: refused with the other's name.
    ScopedEnv env("SLUICE_FUSION_WEIGHTS", a_name + "=1");
    Net n(12);
    ASSERT_EQ(n.init(0xf13), ncclSuccess);
    int d = -1;
    sluice::rdmatest::ExpectWarns expected;
    EXPECT_EQ(n.make_vdevice({0, 1}, &d), ncclInvalidArgument);
    EXPECT_NE(last_warn().find("names some members but not"), std::string::npos) << last_warn();
  }
  {  // ... naming both, one as fallback: the fused speed counts the carrier only.
    ScopedEnv env("SLUICE_FUSION_WEIGHTS", a_name + "=1," + b_name + "=0");
    Net n(12);
    ASSERT_EQ(n.init(0xf14), ncclSuccess);
    Props pa, pf;
    ASSERT_EQ(n.properties(0, &pa), ncclSuccess);
    int d = -1;
    ASSERT_EQ(n.make_vdevice({0, 1}, &d), ncclSuccess);
    ASSERT_EQ(n.properties(d, &pf), ncclSuccess);
    EXPECT_EQ(pf.speed, pa.speed);
  }
}

TEST(FusedDevice, NcclOrderOfCallsAndMergedPropertiesEveryVersion) {
  SLUICE_REQUIRE_DEVICES(sluice::rdmatest::active_rdma_devices(), 2);
  for (int v : kVersions) {
    SCOPED_TRACE("v" + std::to_string(v));
    Net n(v);
    Fused f;
    ASSERT_TRUE(fuse_in_nccl_order(n, &f));
    const Props& pa = f.props[f.a];
    const Props& pb = f.props[f.b];
    const Props& p = f.fused;
    EXPECT_EQ(p.name, pa.name + "+" + pb.name);
    EXPECT_EQ(p.vndevs, 2);
    EXPECT_EQ(p.vdevs, (std::vector<int>{f.a, f.b}));
    // Both bed ports are Soft-RoCE without a PCI parent: the topology does not know them, so both
    // carry (weights by port speed) and the speed is the sum.
    EXPECT_EQ(p.speed, pa.speed + pb.speed);
    EXPECT_EQ(p.ptr_support, pa.ptr_support & pb.ptr_support);
    // maxComms is what each adapter holds at this configuration (issue 32): a fused comm has two
    // paths of NCCL_IB_QPS_PER_CONNECTION QPs and two CQs, counted against each member's adapter,
    // so half of what a one-member comm of the tighter member holds.
    EXPECT_EQ(p.max_comms, std::min(pa.max_comms, pb.max_comms) / 2);
    EXPECT_GT(p.max_comms, 0);
    EXPECT_EQ(p.max_recvs, std::min(pa.max_recvs, pb.max_recvs));
    EXPECT_EQ(p.reg_is_global, pa.reg_is_global & pb.reg_is_global);
    EXPECT_EQ(p.guid, pa.guid);
    EXPECT_EQ(p.dev_type, NCCL_NET_DEVICE_HOST);
    EXPECT_EQ(p.max_p2p, std::min(pa.max_p2p, pb.max_p2p));
    if (v == 12) {
      EXPECT_EQ(p.rail, -1);  // NCCL_NET_ID_UNDEF: no SLUICE_NIC_RAILS here
      EXPECT_EQ(p.plane, -1);
    }
    // The members are still there, unchanged.
    Props again;
    ASSERT_EQ(n.properties(f.a, &again), ncclSuccess);
    EXPECT_EQ(again.vdevs, std::vector<int>{f.a});
    EXPECT_EQ(again.name, pa.name);

    // Refusals, each with its reason, and the device list unchanged by them.
    int before = 0, after = 0, d = -1;
    ASSERT_EQ(n.devices(&before), ncclSuccess);
    {
      sluice::rdmatest::ExpectWarns expected;
      EXPECT_EQ(n.make_vdevice({f.a, f.a}, &d), ncclInvalidArgument);
      EXPECT_NE(last_warn().find("named twice"), std::string::npos) << last_warn();
      EXPECT_EQ(n.make_vdevice({f.a, 999}, &d), ncclInvalidArgument);
      EXPECT_NE(last_warn().find("device 999 is unknown"), std::string::npos) << last_warn();
      EXPECT_EQ(n.make_vdevice({f.a, f.vdev}, &d), ncclInvalidArgument);
      EXPECT_NE(last_warn().find("itself a fused device"), std::string::npos) << last_warn();
      const int cap = v == 12 ? 8 : 4;
      std::vector<int> many(cap + 1, f.a);
      for (int i = 0; i <= cap; ++i) many[i] = i % 2 ? f.b : f.a;
      EXPECT_EQ(n.make_vdevice(many, &d), ncclInvalidArgument);
      EXPECT_NE(last_warn().find("at most " + std::to_string(cap)), std::string::npos)
          << last_warn();
    }
    ASSERT_EQ(n.devices(&after), ncclSuccess);
    EXPECT_EQ(after, before);
    // The same pair again is the same device (a second communicator asks again).
    ASSERT_EQ(n.make_vdevice({f.a, f.b}, &d), ncclSuccess);
    EXPECT_EQ(d, f.vdev);
    ASSERT_EQ(n.devices(&after), ncclSuccess);
    EXPECT_EQ(after, before);
    {
      sluice::rdmatest::ExpectWarns expected;
      Props none;
      EXPECT_EQ(n.properties(after, &none), ncclInvalidArgument);
    }
  }
  // v8: no makeVDevice in its table (the harness refuses without calling the plugin).
  Net n8(8);
  ASSERT_EQ(n8.init(), ncclSuccess);
  int d = -1;
  EXPECT_EQ(n8.make_vdevice({0, 1}, &d), ncclInvalidUsage);
}

// Fused to fused, fused to a single port, and a single port to fused (the two sides' member
// counts differ), on every version: messages of 0, 1, 64 KiB + 3 (at the stripe threshold: striped
// over both paths, an odd tail) and 4 MiB + 1 bytes, each posted at exactly its size with a guard
// region after it, every byte verified.
TEST(FusedDevice, ConnectAndMessagesEveryVersion) {
  SLUICE_REQUIRE_DEVICES(sluice::rdmatest::active_rdma_devices(), 2);
  constexpr size_t kMsgSizes[] = {0, 1, (size_t{64} << 10) + 3, (size_t{4} << 20) + 1};
  constexpr size_t kMax = (size_t{4} << 20) + 1;
  for (int v : kVersions) {
    SCOPED_TRACE("v" + std::to_string(v));
    Net n(v);
    Fused f;
    ASSERT_TRUE(fuse_in_nccl_order(n, &f));
    const std::pair<int, int> pairs[] = {{f.vdev, f.vdev}, {f.vdev, f.a}, {f.b, f.vdev}};
    for (const auto& [sdev, rdev] : pairs) {
      SCOPED_TRACE("send dev " + std::to_string(sdev) + " -> recv dev " + std::to_string(rdev));
      Conn c;
      ASSERT_TRUE(open_conn(n, sdev, rdev, &c));
      {
        RegBuf sbuf, rbuf;
        ASSERT_TRUE(sbuf.allocate(&n, c.send, kMax));
        // The registration covers the guard: the NIC could write there if the plugin let it.
        ASSERT_TRUE(rbuf.allocate(&n, c.recv, kMax + kGuard));
        for (size_t size : kMsgSizes) {
          SCOPED_TRACE("size " + std::to_string(size));
          const uint64_t seed = pattern_seed(size, static_cast<uint64_t>(v), sdev * 16 + rdev);
          fill_pattern(sbuf.data(), size, seed);
          std::memset(rbuf.data(), kGuardByte, size + kGuard);
          int got = -1;
          ASSERT_TRUE(send_recv(n, c, sbuf, size, rbuf, size, 7, &got));
          EXPECT_EQ(got, static_cast<int>(size));
          EXPECT_EQ(check_pattern(rbuf.data(), size, seed), "");
          EXPECT_EQ(check_fill(rbuf.data() + size, kGuard, kGuardByte), "") << "written past size";
        }
      }
      ASSERT_TRUE(close_conn(n, &c));
    }
  }
}

// Each member's share of the packets, fused -> fused over v12: 64 messages of 4 MiB (each striped
// over both paths, every byte verified), with each member's port counter (rxe: sent_pkts) read
// before and after. What it compares: in the one-VM bed a fused -> fused connection's path p joins
// sender member p and receiver member p (rxe0 -> rxe0, rxe1 -> rxe1), so member p's counter holds
// path p's data packets, the ACKs its responder sends for them (same device) and the few
// clear-to-send writes on it; the ACKs go with the data packets (RC acknowledges per data
// packets), so member p's share of the packets the two counters gained tracks its share of the
// bytes, which the stripe rule makes its weight share (weight_p / sum of weights; a path's weight
// is the smaller of its two ends' shares, here the same member's on both sides). Asserted within
// 10 points. Measured in the bed (MTU 4096): equal weights, 33344 packets on each member, i.e. 521
// per message: its 512 data packets of 2 MiB and 9 more (ACKs, clear-to-send); weights 3 : 1,
// 50098 and 16704 (75.0 / 25.0 %).
constexpr int kShareMessages = 64;
constexpr size_t kShareSize = size_t{4} << 20;
constexpr double kShareTolerance = 0.10;

long long member_packets(const Props& p) {
  return device_sent_packets(p.name, p.port > 0 ? p.port : 1);
}

// Runs the 64 messages on a fresh v12 engine (it reads SLUICE_FUSION_WEIGHTS at init) and checks
// the members' packet shares against the weights makeVDevice logged for the fused device, which
// must be wa : wb when given (0 : 0: whatever the plugin chose; in the bed, equal).
void check_shares(int wa = 0, int wb = 0) {
  Net n(12);
  Fused f;
  g_keep_info = true;
  const bool fused = fuse_in_nccl_order(n, &f);
  g_keep_info = false;
  ASSERT_TRUE(fused);
  const Props& pa = f.props[f.a];
  const Props& pb = f.props[f.b];
  {  // the weights the fused device got: the ones this run expects (the bed's, or the override)
    const std::vector<std::string> info = kept_info();
    const long la = weight_logged(info, f.fused.name, pa.name);
    const long lb = weight_logged(info, f.fused.name, pb.name);
    // makeVDevice logs them when it makes the device: a fresh engine, unless an earlier test left
    // a comm open (finalize then keeps the engine and its fused device).
    ASSERT_GE(la, 0) << "no weight logged for " << pa.name << " of " << f.fused.name;
    ASSERT_GE(lb, 0) << "no weight logged for " << pb.name << " of " << f.fused.name;
    ASSERT_GT(la + lb, 0) << "every member of " << f.fused.name << " weighs 0";
    if (wa + wb > 0) {
      ASSERT_EQ(la * wb, lb * wa) << "makeVDevice weighed " << pa.name << "=" << la << ", "
                                  << pb.name << "=" << lb << "; this test expects " << wa << ":"
                                  << wb;
    }
    wa = static_cast<int>(la);
    wb = static_cast<int>(lb);
  }
  Conn c;
  ASSERT_TRUE(open_conn(n, f.vdev, f.vdev, &c));
  {
    RegBuf sbuf, rbuf;
    ASSERT_TRUE(sbuf.allocate(&n, c.send, kShareSize));
    ASSERT_TRUE(rbuf.allocate(&n, c.recv, kShareSize + kGuard));
    usleep(30 * 1000);  // ib_core caches hw_counters for 10 ms
    const long long a0 = member_packets(pa), b0 = member_packets(pb);
    ASSERT_GE(a0, 0) << "cannot read the sent packets of " << pa.name;
    ASSERT_GE(b0, 0) << "cannot read the sent packets of " << pb.name;
    for (int i = 0; i < kShareMessages; ++i) {
      SCOPED_TRACE("message " + std::to_string(i));
      const uint64_t seed = pattern_seed(kShareSize, static_cast<uint64_t>(i), wa * 16 + wb);
      fill_pattern(sbuf.data(), kShareSize, seed);
      std::memset(rbuf.data(), kGuardByte, kShareSize + kGuard);
      int got = -1;
      ASSERT_TRUE(send_recv(n, c, sbuf, kShareSize, rbuf, kShareSize, 9, &got));
      ASSERT_EQ(got, static_cast<int>(kShareSize));
      ASSERT_EQ(check_pattern(rbuf.data(), kShareSize, seed), "");
      ASSERT_EQ(check_fill(rbuf.data() + kShareSize, kGuard, kGuardByte), "");
    }
    usleep(30 * 1000);
    const long long a1 = member_packets(pa), b1 = member_packets(pb);
    const long long da = a1 - a0, db = b1 - b0;
    ASSERT_GT(da + db, 0) << "no packets counted on " << pa.name << " or " << pb.name;
    const double share_a = double(da) / double(da + db);
    const double want_a = double(wa) / double(wa + wb);
    std::fprintf(stderr,
                 "[shares] weights %s=%d %s=%d, %d x %zu MiB fused -> fused: %s sent %lld "
                 "packets (%.1f %%), %s %lld (%.1f %%); expected %.1f %% / %.1f %% +- %.0f points "
                 "(%.1f packets per MiB)\n",
                 pa.name.c_str(), wa, pb.name.c_str(), wb, kShareMessages, kShareSize >> 20,
                 pa.name.c_str(), da, 100 * share_a, pb.name.c_str(), db, 100 * (1 - share_a),
                 100 * want_a, 100 * (1 - want_a), 100 * kShareTolerance,
                 double(da + db) / double(kShareMessages * (kShareSize >> 20)));
    EXPECT_NEAR(share_a, want_a, kShareTolerance)
        << pa.name << " sent " << da << " packets, " << pb.name << " " << db;
  }
  ASSERT_TRUE(close_conn(n, &c));
}

TEST(FusedDevice, SharesByPacketCountDerivedWeights) {
  SLUICE_REQUIRE_DEVICES(sluice::rdmatest::active_rdma_devices(), 2);
  // The weights the plugin derives (the bed's members are Soft-RoCE ports of one speed without a
  // PCI parent: equal, 50 % each).
  check_shares();
}

TEST(FusedDevice, SharesByPacketCountWeights3To1) {
  SLUICE_REQUIRE_DEVICES(sluice::rdmatest::active_rdma_devices(), 2);
  std::string a_name, b_name;
  {  // the members' names as the plugin spells them ("rxe0", or "mlx5_0:1" for one port of two)
    Net n(12);
    Fused f;
    ASSERT_TRUE(fuse_in_nccl_order(n, &f));
    a_name = f.props[f.a].name;
    b_name = f.props[f.b].name;
  }
  // SLUICE_FUSION_WEIGHTS=rxe0=3,rxe1=1 (the members by name, whatever the bed calls them), read
  // by the next v12 engine's init.
  ScopedEnv env("SLUICE_FUSION_WEIGHTS", a_name + "=3," + b_name + "=1");
  check_shares(3, 1);
}

}  // namespace
}  // namespace nettest
