// The rdma tests' check that a connection used the connection manager SLUICE_CM asks for
// (tests/rdma/rdma_env.h, check_cm_used; run by plugin_rdma_rdmacm, plugin_rdma_qps1,
// core_datapath): it must fail when the logged choice or the rdma_cm channels disagree, so that the
// rdmacm and oob runs cannot pass in the wrong mode. No RDMA device needed: no rdma_cm channel is
// open in this process.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "../rdma/rdma_env.h"

namespace {

using namespace sluice::rdmatest;

class CmUsedCheck : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv("SLUICE_CM"); }
  static void log_choice(const char* cm) {
    const std::string line =
        std::string("NET/Sluice : connection manager for rxe0 -> [fe80::1%veth0]:4000: ") + cm +
        " (SLUICE_CM=" + cm + ": [fe80::1%veth0]:4000 routes through rxe0)";
    count_cm_choice(line.c_str());
  }
};

TEST_F(CmUsedCheck, CountsOnlyTheChoiceLines) {
  const CmCounts before = cm_counts();
  count_cm_choice("NET/Sluice : listening on 10.0.0.1:4000 for rxe0");
  count_cm_choice(
      "NET/Sluice : connection manager for rxe0 -> 10.0.0.1:4000: oob (SLUICE_CM=auto: the "
      "listener at 10.0.0.1:4000 offers no rdma_cm port (its rdma_cm listen failed: no IP address "
      "on its device, or rdma_ucm not loaded there))");
  log_choice("rdmacm");
  const CmCounts after = cm_counts();
  EXPECT_EQ(after.oob - before.oob, 1);
  EXPECT_EQ(after.rdmacm - before.rdmacm, 1);
}

TEST_F(CmUsedCheck, NothingCheckedInAuto) {
  const CmCounts before = cm_counts();
  log_choice("oob");
  EXPECT_EQ(check_cm_used(before), "");
  setenv("SLUICE_CM", "auto", 1);
  EXPECT_EQ(check_cm_used(before), "");
}

TEST_F(CmUsedCheck, OobPassesOnlyWithOneOobChoiceAndNoChannel) {
  setenv("SLUICE_CM", "oob", 1);
  ASSERT_EQ(rdma_cm_fd_count(), 0);
  CmCounts before = cm_counts();
  log_choice("oob");
  EXPECT_EQ(check_cm_used(before), "");
  before = cm_counts();
  log_choice("rdmacm");
  EXPECT_NE(check_cm_used(before).find("logged 1 rdmacm and 0 oob"), std::string::npos)
      << check_cm_used(before);
  before = cm_counts();
  EXPECT_NE(check_cm_used(before), "") << "no choice logged at all";
}

TEST_F(CmUsedCheck, RdmacmNeedsTheChoiceAndAChannel) {
  setenv("SLUICE_CM", "rdmacm", 1);
  CmCounts before = cm_counts();
  log_choice("oob");
  EXPECT_NE(check_cm_used(before).find("logged 0 rdmacm and 1 oob"), std::string::npos)
      << check_cm_used(before);
  before = cm_counts();
  log_choice("rdmacm");
  // The choice is logged, but no rdma_cm channel is open in this process.
  EXPECT_NE(check_cm_used(before).find("0 rdma_cm event channel(s)"), std::string::npos)
      << check_cm_used(before);
}

}  // namespace
