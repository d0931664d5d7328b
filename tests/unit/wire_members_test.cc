// NIC fusion's metadata (issue 24): the members' extension of wire::Meta, its validation, the
// path layout both sides derive from it, and the handle's member count (0 = a Sluice before
// fusion, which must still connect).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>

#include <cstring>

#include "sluice/core/wire/wire.h"

namespace sluice::wire {
namespace {

Meta base_meta(int nqps) {
  Meta m{};
  m.magic = kMetaMagic;
  m.version = kVersion;
  m.role = 0;
  m.link_layer = IBV_LINK_LAYER_ETHERNET;
  m.port = 1;
  m.mtu = IBV_MTU_1024;
  m.gid_index = 1;
  m.lid = 0;
  m.nqps = static_cast<uint8_t>(nqps);
  m.fifo_slots = kFifoSlots;
  m.nonce = Nonce{{77}};
  m.gid[15] = 7;
  m.buf_rkey = 0x1111;
  std::strcpy(m.dev_name, "rxe0+rxe1");
  return m;
}

// Two members (rxe0, rxe1), `npaths` paths of `qpp` QPs, as a fused side fills it.
MetaMembers two_members(const Meta& m, int npaths, int qpp) {
  MetaMembers x;
  init_members(&x, 2, npaths, qpp);
  x.members[0] = members_of_meta(m).members[0];
  MemberInfo& b = x.members[1];
  b.gid[15] = 8;
  b.port = 1;
  b.mtu = IBV_MTU_1024;
  b.gid_index = 1;
  b.link_layer = IBV_LINK_LAYER_ETHERNET;
  b.weight = 1;
  b.buf_rkey = 0x2222;
  return x;
}

TEST(Members, TwoMembersOnFourQpsValidate) {
  const Meta m = base_meta(4);
  const MetaMembers x = two_members(m, 2, 2);
  EXPECT_TRUE(validate_members(m, x).is_ok()) << validate_members(m, x).message();
}

TEST(Members, PlainMetaStandsForOneMember) {
  const Meta m = base_meta(4);
  const MetaMembers x = members_of_meta(m);
  EXPECT_EQ(x.nmembers, 1);
  EXPECT_EQ(x.npaths, 1);
  EXPECT_EQ(x.qps_per_path, 4);
  EXPECT_EQ(x.members[0].buf_rkey, m.buf_rkey);
  EXPECT_EQ(x.members[0].weight, 1);
  EXPECT_TRUE(validate_members(m, x).is_ok()) << validate_members(m, x).message();
}

TEST(Members, QpCountMustBePathsTimesQpsPerPath) {
  const Meta m = base_meta(3);
  const Status st = validate_members(m, two_members(m, 2, 2));
  EXPECT_EQ(st.code(), Code::kRemoteError);
  EXPECT_NE(st.message().find("the connection has 3 QPs"), std::string::npos) << st.message();
}

TEST(Members, RejectsEachBrokenField) {
  const Meta m = base_meta(4);
  const MetaMembers good = two_members(m, 2, 2);
  struct Case {
    const char* what;
    void (*spoil)(MetaMembers*);
    const char* says;
  };
  const Case cases[] = {
      {"magic", [](MetaMembers* x) { x->magic ^= 1; }, "magic"},
      {"version", [](MetaMembers* x) { x->version = kMembersVersion + 1; }, "version"},
      {"no members", [](MetaMembers* x) { x->nmembers = 0; }, "members"},
      {"too many", [](MetaMembers* x) { x->nmembers = kMaxMetaMembers + 1; }, "members"},
      {"fewer paths than members", [](MetaMembers* x) { x->npaths = 1; }, "paths"},
      {"reserved", [](MetaMembers* x) { x->reserved[3] = 1; }, "reserved"},
      {"unknown flag", [](MetaMembers* x) { x->flags = 0x80; }, "unknown flags"},
      {"MTU", [](MetaMembers* x) { x->members[1].mtu = 9; }, "MTU"},
      {"link layer", [](MetaMembers* x) { x->members[1].link_layer = IBV_LINK_LAYER_INFINIBAND; },
       "link layers"},
      {"member reserved", [](MetaMembers* x) { x->members[1].reserved = 5; }, "reserved"},
      {"record past nmembers", [](MetaMembers* x) { x->members[2].port = 1; }, "member 2"},
      {"member 0 disagrees", [](MetaMembers* x) { x->members[0].buf_rkey ^= 1; }, "member 0"},
      {"no weight", [](MetaMembers* x) { x->members[0].weight = x->members[1].weight = 0; },
       "weight 0"},
  };
  for (const Case& c : cases) {
    MetaMembers x = good;
    c.spoil(&x);
    const Status st = validate_members(m, x);
    EXPECT_EQ(st.code(), Code::kRemoteError) << c.what;
    EXPECT_NE(st.message().find(c.says), std::string::npos) << c.what << ": " << st.message();
  }
}

TEST(Members, FallbackMemberWithWeightZeroIsValid) {
  const Meta m = base_meta(2);
  MetaMembers x = two_members(m, 2, 1);
  x.members[1].weight = 0;
  EXPECT_TRUE(validate_members(m, x).is_ok());
}

TEST(Members, BothSidesAgreeOnPathsTwoToOneAndOneToTwo) {
  const Meta fused = base_meta(2);
  const MetaMembers two = two_members(fused, 2, 1);
  // The one-member side of a fused connection still sends an extension, with npaths = 2.
  Meta single = base_meta(2);
  MetaMembers one = members_of_meta(single);
  one.npaths = 2;
  one.qps_per_path = 1;
  ASSERT_TRUE(validate_members(single, one).is_ok()) << validate_members(single, one).message();
  EXPECT_TRUE(check_peer_members(two, one).is_ok());
  EXPECT_TRUE(check_peer_members(one, two).is_ok());
  // A side that counted one path (it ignored the peer's members) is refused, either way round.
  MetaMembers wrong = members_of_meta(single);
  const Status st = check_peer_members(two, wrong);
  EXPECT_EQ(st.code(), Code::kRemoteError);
  EXPECT_NE(st.message().find("expected 2 paths"), std::string::npos) << st.message();
  EXPECT_FALSE(check_peer_members(wrong, two).is_ok());
  MetaMembers qpp = two;
  qpp.qps_per_path = 2;
  EXPECT_FALSE(check_peer_members(two, qpp).is_ok());
}

TEST(Members, PathLayoutPutsEachQpOnItsMember) {
  // 2 members, 2 paths of 2 QPs: QPs 0,1 on member 0, QPs 2,3 on member 1.
  EXPECT_EQ(qp_member(0, 2, 2), 0);
  EXPECT_EQ(qp_member(1, 2, 2), 0);
  EXPECT_EQ(qp_member(2, 2, 2), 1);
  EXPECT_EQ(qp_member(3, 2, 2), 1);
  // The one-member side of the same 2 paths: every QP on member 0.
  for (int q = 0; q < 4; ++q) EXPECT_EQ(qp_member(q, 2, 1), 0);
  // 3 members to 2: paths 0,1,2 -> sender members 0,1,2 and receiver members 0,1,0.
  EXPECT_EQ(path_member(2, 3), 2);
  EXPECT_EQ(path_member(2, 2), 0);
}

TEST(Members, HandleCarriesTheListenersMemberCount) {
  sockaddr_storage sa{};
  auto* s4 = reinterpret_cast<sockaddr_in*>(&sa);
  s4->sin_family = AF_INET;
  s4->sin_port = htons(4711);
  s4->sin_addr.s_addr = htonl(0x7f000001);
  Handle h = encode_handle(sa, 3, Nonce{{99}}, 0, nullptr, 2);
  ASSERT_TRUE(validate_handle(h).is_ok());
  EXPECT_EQ(h.members, 2);
  EXPECT_EQ(encode_handle(sa, 3, Nonce{{99}}).members, 1) << "a new listener always says its count";
  // A Sluice before fusion left the field zero: still a valid handle (one member, no extension).
  h.members = 0;
  h.checksum = handle_checksum(h);
  EXPECT_TRUE(validate_handle(h).is_ok());
  h.members = kMaxMetaMembers + 1;
  h.checksum = handle_checksum(h);
  EXPECT_NE(validate_handle(h).message().find("member devices"), std::string::npos);
}

TEST(Members, FeatureBitIsNotEces) {
  static_assert((kMetaFeatureMembers & kMetaFeatureEce) == 0);
  Meta m = base_meta(1);
  m.features = kMetaFeatureMembers;
  // A Meta announcing the extension is itself valid (the extension is checked on its own).
  const Status st = validate_meta(m, 0, Nonce{{77}});
  EXPECT_TRUE(st.is_ok()) << st.message();
  MetaEce e;
  EXPECT_FALSE(meta_ece(m, &e));
}

// Fusion over rdma_cm: the acceptor's members' listener addresses round-trip, and every malformed
// record is refused with the member named.
TEST(MembersCm, AddressesRoundTripAndMalformedOnesAreRefused) {
  const Meta m = base_meta(4);
  const MetaMembers mx = two_members(m, 2, 2);
  sockaddr_storage a[2]{};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&a[0]);
  v4->sin_family = AF_INET;
  v4->sin_port = htons(4791);
  inet_pton(AF_INET, "10.88.0.1", &v4->sin_addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&a[1]);
  v6->sin6_family = AF_INET6;
  v6->sin6_port = htons(18515);
  inet_pton(AF_INET6, "fe80::1", &v6->sin6_addr);
  v6->sin6_scope_id = 3;
  MetaCmAddrs x;
  encode_cm_addrs(a, 2, &x);
  Status st = validate_cm_addrs(mx, x);
  ASSERT_TRUE(st.is_ok()) << st.message();
  for (int i = 0; i < 2; ++i) {
    const sockaddr_storage back = cm_member_address(x, i);
    const size_t len = i == 0 ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    EXPECT_EQ(std::memcmp(&back, &a[i], len), 0) << "member " << i;
  }
  const auto refused = [&](MetaCmAddrs y, const char* what) {
    const Status r = validate_cm_addrs(mx, y);
    EXPECT_FALSE(r.is_ok()) << what;
    return r.message();
  };
  MetaCmAddrs y = x;
  y.magic ^= 1;
  EXPECT_NE(refused(y, "magic").find("magic"), std::string::npos);
  y = x;
  y.version = kCmAddrsVersion + 1;
  EXPECT_NE(refused(y, "version").find("same Sluice release"), std::string::npos);
  y = x;
  y.nmembers = 1;
  EXPECT_NE(refused(y, "count").find("its metadata 2"), std::string::npos);
  y = x;
  y.members[1].port = 0;
  EXPECT_NE(refused(y, "port").find("member 1 port 0"), std::string::npos);
  y = x;
  y.members[0].family = AF_UNIX;
  EXPECT_NE(refused(y, "family").find("member 0 address family"), std::string::npos);
  y = x;
  y.members[0].addr[7] = 1;
  EXPECT_NE(refused(y, "v4 tail").find("trailing bytes"), std::string::npos);
  y = x;
  y.members[2].port = 1;  // a member the peer does not have
  EXPECT_NE(refused(y, "unused").find("member 2"), std::string::npos);
  y = x;
  y.reserved = 1;
  EXPECT_NE(refused(y, "reserved").find("reserved"), std::string::npos);
}

}  // namespace
}  // namespace sluice::wire
