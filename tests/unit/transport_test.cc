// Which verbs transports Sluice uses (device_info.h): the one decision behind discovery's "not
// offered" and sluice-info's "not used", and the words of its WARN.
#include <gtest/gtest.h>

#include "sluice/core/device/device_info.h"

namespace sluice {
namespace {

TEST(Transport, InfiniBandTransportIsUsed) {
  // IB and RoCE ports both report the InfiniBand transport; the link layer tells them apart.
  EXPECT_EQ(unusable_transport_reason(IBV_TRANSPORT_IB, "devA"), "");
  EXPECT_STREQ(transport_name(IBV_TRANSPORT_IB), "InfiniBand");
}

TEST(Transport, IwarpIsRefusedWithTheMissingOperationAndWhatToUseInstead) {
  const std::string why = unusable_transport_reason(IBV_TRANSPORT_IWARP, "devW");
  EXPECT_EQ(why.rfind("devW is an iWARP device", 0), 0u) << why;
  EXPECT_NE(why.find("no RDMA WRITE with immediate data"), std::string::npos) << why;
  EXPECT_NE(why.find("NCCL_IB_HCA"), std::string::npos) << why;
  EXPECT_NE(why.find("NCCL_NET=Socket"), std::string::npos) << why;
  EXPECT_STREQ(transport_name(IBV_TRANSPORT_IWARP), "iWARP");
}

TEST(Transport, NamesEveryTransportVerbsReports) {
  EXPECT_STREQ(transport_name(IBV_TRANSPORT_USNIC), "usNIC");
  EXPECT_STREQ(transport_name(IBV_TRANSPORT_USNIC_UDP), "usNIC UDP");
  EXPECT_STREQ(transport_name(IBV_TRANSPORT_UNSPECIFIED), "unspecified");
  EXPECT_STREQ(transport_name(static_cast<ibv_transport_type>(99)), "unknown");
}

}  // namespace
}  // namespace sluice
