// getProperties' maxComms (issue 32): what a device holds at this configuration, not its max_qp.
#include "sluice/core/base/comm_capacity.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

CapacityInput one(int max_qp, int max_cq, int qpp) {
  CapacityInput in;
  in.adapters = {{"mlx5_0", max_qp, max_cq}};
  in.qps_per_path = qpp;
  return in;
}

TEST(CommCapacity, OneDeviceIsMaxQpOverItsQpsPerConnection) {
  EXPECT_EQ(comm_capacity(one(131072, 16777216, 1)).max_comms, 131072);
  EXPECT_EQ(comm_capacity(one(131072, 16777216, 2)).max_comms, 65536);
  EXPECT_EQ(comm_capacity(one(131072, 16777216, 4)).max_comms, 32768);
  const Capacity c = comm_capacity(one(1000, 100000, 3));
  EXPECT_EQ(c.max_comms, 333) << "rounded down: 334 comms would need 1002 QPs";
  EXPECT_EQ(c.qps_per_comm, 3);
  EXPECT_EQ(c.cqs_per_comm, 1);
  EXPECT_NE(c.text.find("mlx5_0: max_qp 1000"), std::string::npos) << c.text;
}

TEST(CommCapacity, TheFlushQpAndCqOfAReceiveCommCount) {
  CapacityInput in = one(1000, 100000, 1);
  in.flush = true;
  const Capacity c = comm_capacity(in);
  EXPECT_EQ(c.qps_per_comm, 2);
  EXPECT_EQ(c.cqs_per_comm, 2);
  EXPECT_EQ(c.max_comms, 500);
  EXPECT_NE(c.text.find("flush"), std::string::npos) << c.text;
}

// A fused device of two ports of one adapter: both paths' QPs and both members' CQs there.
TEST(CommCapacity, FusedMembersAndStandbysMultiplyTheQps) {
  CapacityInput in = one(1024, 100000, 2);
  in.members = 2;
  in.paths = 2;
  EXPECT_EQ(comm_capacity(in).max_comms, 256);
  in.flush = true;  // one flush lane per adapter: one adapter here
  EXPECT_EQ(comm_capacity(in).qps_per_comm, 5);
  EXPECT_EQ(comm_capacity(in).max_comms, 204);
  // Two members on two adapters (a device and its standby on another NIC): the tighter adapter,
  // each counting every QP of the comm, and a flush lane on each.
  CapacityInput two;
  two.adapters = {{"mlx5_0", 1000, 100000}, {"mlx5_1", 600, 100000}};
  two.members = 2;
  two.paths = 2;
  two.qps_per_path = 1;
  EXPECT_EQ(comm_capacity(two).max_comms, 300);
  two.flush = true;
  EXPECT_EQ(comm_capacity(two).qps_per_comm, 4);
  EXPECT_EQ(comm_capacity(two).max_comms, 150);
}

TEST(CommCapacity, CqsBoundItWhereTheDeviceHasFewerCqsThanQps) {
  CapacityInput in = one(1000, 300, 1);
  in.members = 2;  // two CQs per comm
  in.paths = 2;
  const Capacity c = comm_capacity(in);
  EXPECT_EQ(c.max_comms, 150);
  EXPECT_NE(c.text.find("bound by CQs"), std::string::npos) << c.text;
}

TEST(CommCapacity, NothingToCountIsZeroWithAReason) {
  CapacityInput in;
  EXPECT_EQ(comm_capacity(in).max_comms, 0);
  EXPECT_FALSE(comm_capacity(in).text.empty());
  in = one(0, 0, 1);
  EXPECT_EQ(comm_capacity(in).max_comms, 0);
  in = one(100, 100, 0);
  EXPECT_EQ(comm_capacity(in).max_comms, 0);
}

}  // namespace
}  // namespace sluice
