// SLUICE_CM's decision (cm_choice.h): what auto picks, and the errors of a forced mode that cannot
// work, each with its reason.
#include "sluice/core/connect/cm_choice.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace sluice {
namespace {

using R = CmFacts::Route;

CmFacts facts(CmMode knob, bool offers, R route = R::kNotTried, bool iwarp = false) {
  CmFacts f;
  f.knob = knob;
  f.peer_offers = offers;
  f.route = route;
  f.iwarp = iwarp;
  f.device = "devA";
  f.peer = "10.1.2.3:5000";
  if (route == R::kOtherDevice) f.route_detail = "devB";
  if (route == R::kFailed) f.route_detail = "RDMA_CM_EVENT_ADDR_ERROR";
  return f;
}

TEST(CmChoice, OobKnobKeepsTheHandshakeWithoutResolving) {
  for (bool offers : {false, true}) {
    CmDecision d = choose_cm(facts(CmMode::kOob, offers));
    EXPECT_EQ(d.verdict, CmDecision::kOob);
    EXPECT_EQ(d.reason, "SLUICE_CM=oob");
  }
}

TEST(CmChoice, AutoResolvesFirstWhenTheListenerOffersRdmaCm) {
  CmDecision d = choose_cm(facts(CmMode::kAuto, true));
  EXPECT_EQ(d.verdict, CmDecision::kResolveFirst);
  EXPECT_NE(d.reason.find("10.1.2.3:5000"), std::string::npos);
}

TEST(CmChoice, AutoPicksRdmaCmWhenThePeerRoutesThroughThisDevice) {
  CmDecision d = choose_cm(facts(CmMode::kAuto, true, R::kThisDevice));
  EXPECT_EQ(d.verdict, CmDecision::kRdmacm);
  EXPECT_EQ(d.reason, "SLUICE_CM=auto: 10.1.2.3:5000 routes through devA");
}

TEST(CmChoice, AutoFallsBackToOobWhenTheRouteUsesAnotherDeviceOrFails) {
  CmDecision d = choose_cm(facts(CmMode::kAuto, true, R::kOtherDevice));
  EXPECT_EQ(d.verdict, CmDecision::kOob);
  EXPECT_NE(d.reason.find("routes through devB, not devA"), std::string::npos) << d.reason;
  d = choose_cm(facts(CmMode::kAuto, true, R::kFailed));
  EXPECT_EQ(d.verdict, CmDecision::kOob);
  EXPECT_NE(d.reason.find("RDMA_CM_EVENT_ADDR_ERROR"), std::string::npos) << d.reason;
}

TEST(CmChoice, AutoUsesOobWhenTheListenerOffersNoRdmaCm) {
  // InfiniBand without IPoIB: the listener's device has no address, so it offers no port.
  CmDecision d = choose_cm(facts(CmMode::kAuto, false));
  EXPECT_EQ(d.verdict, CmDecision::kOob);
  EXPECT_NE(d.reason.find("offers no rdma_cm port"), std::string::npos) << d.reason;
}

TEST(CmChoice, ForcedRdmaCmThatCannotWorkIsAnErrorWithAFix) {
  CmDecision d = choose_cm(facts(CmMode::kRdmacm, false));
  EXPECT_EQ(d.verdict, CmDecision::kError);
  EXPECT_NE(d.reason.find("rdma_ucm"), std::string::npos) << d.reason;
  EXPECT_NE(d.reason.find("SLUICE_CM=oob"), std::string::npos) << d.reason;
  d = choose_cm(facts(CmMode::kRdmacm, true, R::kOtherDevice));
  EXPECT_EQ(d.verdict, CmDecision::kError);
  EXPECT_NE(d.reason.find("NCCL_IB_HCA"), std::string::npos) << d.reason;
  d = choose_cm(facts(CmMode::kRdmacm, true, R::kThisDevice));
  EXPECT_EQ(d.verdict, CmDecision::kRdmacm);
}

TEST(CmChoice, IwarpAlwaysNeedsRdmaCm) {
  CmDecision d = choose_cm(facts(CmMode::kAuto, true, R::kThisDevice, true));
  EXPECT_EQ(d.verdict, CmDecision::kRdmacm);
  EXPECT_NE(d.reason.find("iWARP"), std::string::npos);
  for (CmFacts f : {facts(CmMode::kOob, true, R::kNotTried, true),
                    facts(CmMode::kAuto, false, R::kNotTried, true),
                    facts(CmMode::kAuto, true, R::kFailed, true)}) {
    d = choose_cm(f);
    EXPECT_EQ(d.verdict, CmDecision::kError) << d.reason;
    EXPECT_NE(d.reason.find("iWARP"), std::string::npos) << d.reason;
    EXPECT_EQ(d.reason.find("SLUICE_CM=oob"), std::string::npos)
        << "no oob fix for iWARP: " << d.reason;
  }
}

TEST(CmChoice, TheDevicesOwnRdmaCmAddressIsNamedBesideTheListenersAddress) {
  // The listener's rdma_cm listener is on its device's own address, not the out-of-band one.
  CmFacts f = facts(CmMode::kAuto, true, R::kThisDevice);
  f.cm_peer = "10.77.0.1:6000";
  f.local_addr = "10.77.0.2";
  CmDecision d = choose_cm(f);
  EXPECT_EQ(d.verdict, CmDecision::kRdmacm);
  EXPECT_EQ(d.reason,
            "SLUICE_CM=auto: 10.77.0.1:6000 (the rdma_cm address of the listener at "
            "10.1.2.3:5000) routes through devA (from 10.77.0.2)");
  f.route = R::kFailed;
  d = choose_cm(f);
  EXPECT_EQ(d.verdict, CmDecision::kOob);
  EXPECT_NE(d.reason.find("cannot resolve 10.77.0.1:6000"), std::string::npos) << d.reason;
  f.knob = CmMode::kRdmacm;
  d = choose_cm(f);
  EXPECT_EQ(d.verdict, CmDecision::kError);
  for (const char* want :
       {"10.77.0.1:6000", "10.1.2.3:5000", "from 10.77.0.2",
        "address in the subnet of 10.77.0.1:6000", "NCCL_IB_HCA", "SLUICE_CM=oob"})
    EXPECT_NE(d.reason.find(want), std::string::npos) << want << " in " << d.reason;
  // The same address as the out-of-band one reads as before.
  f = facts(CmMode::kAuto, true, R::kThisDevice);
  f.cm_peer = f.peer;
  EXPECT_EQ(choose_cm(f).reason, "SLUICE_CM=auto: 10.1.2.3:5000 routes through devA");
}

TEST(CmChoice, PerPortViewForSluiceInfo) {
  EXPECT_EQ(cm_for_port(CmMode::kAuto, false, true).verdict, CmDecision::kRdmacm);
  CmDecision d = cm_for_port(CmMode::kAuto, false, false);
  EXPECT_EQ(d.verdict, CmDecision::kOob);
  EXPECT_NE(d.reason.find("no IP address"), std::string::npos) << d.reason;
  EXPECT_EQ(cm_for_port(CmMode::kAuto, true, false).verdict, CmDecision::kRdmacm);
  EXPECT_EQ(cm_for_port(CmMode::kOob, false, true).verdict, CmDecision::kOob);
  EXPECT_EQ(cm_for_port(CmMode::kOob, true, true).verdict, CmDecision::kError);
  EXPECT_EQ(cm_for_port(CmMode::kRdmacm, false, false).verdict, CmDecision::kError);
}

// rdmacm address resolution is tried again only after a timeout (no neighbour answer yet), and
// only while an attempt still fits in the bound; any other error (no route, no device) is final.
TEST(CmChoice, AddressResolutionIsTriedAgainOnlyAfterATimeoutWithTimeLeft) {
  static_assert(kCmResolveMinAttemptMs < kCmResolveAttemptMs);
  EXPECT_TRUE(cm_resolve_again(-ETIMEDOUT, 4000));
  EXPECT_TRUE(cm_resolve_again(-ETIMEDOUT, kCmResolveMinAttemptMs));
  EXPECT_FALSE(cm_resolve_again(-ETIMEDOUT, kCmResolveMinAttemptMs - 1));
  EXPECT_FALSE(cm_resolve_again(-ETIMEDOUT, 0));
  EXPECT_FALSE(cm_resolve_again(-ETIMEDOUT, -50));
  for (int status : {-ENETUNREACH, -EHOSTUNREACH, -ENODEV, -EADDRNOTAVAIL, -ENODATA, 0, ETIMEDOUT})
    EXPECT_FALSE(cm_resolve_again(status, 4000)) << status;
}

}  // namespace
}  // namespace sluice
