// Wire formats: the listen handle and connection metadata are validated before anything trusts
// them, so a corrupt or foreign handle is a clean error, never a crash or a hang.
#include "sluice/core/base/wire.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

namespace sluice::wire {
namespace {

Handle good_handle() {
  Handle h{};
  h.magic = kHandleMagic;
  h.version = kVersion;
  h.family = AF_INET;
  h.port = 0x1234;
  h.addr[0] = 127;
  h.addr[3] = 1;
  h.nonce = 0xabcdef;
  h.checksum = handle_checksum(h);
  return h;
}

TEST(Handle, GoodHandleValidates) {
  EXPECT_TRUE(validate_handle(good_handle()).is_ok());
}

TEST(Handle, EveryCorruptedByteBeforeTheChecksumIsDetected) {
  const Handle h = good_handle();
  for (size_t i = 0; i < offsetof(Handle, checksum); ++i) {
    Handle c = h;
    reinterpret_cast<uint8_t*>(&c)[i] ^= 0x5a;
    Status st = validate_handle(c);
    EXPECT_FALSE(st.is_ok()) << "byte " << i;
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << "byte " << i;
  }
}

TEST(Handle, ConnectorScratchDoesNotAffectValidity) {
  Handle h = good_handle();
  h.connect_state = 42;
  h.connect_check = 42 ^ h.nonce ^ kHandleMagic;
  EXPECT_TRUE(validate_handle(h).is_ok());
}

TEST(Handle, MessagesNameTheProblem) {
  Handle h = good_handle();
  h.magic = 0;
  EXPECT_NE(validate_handle(h).message().find("bad magic"), std::string::npos);
  h = good_handle();
  h.version = kVersion + 1;
  h.checksum = handle_checksum(h);
  EXPECT_NE(validate_handle(h).message().find("wire version"), std::string::npos);
  h = good_handle();
  h.port = 0;
  h.checksum = handle_checksum(h);
  EXPECT_NE(validate_handle(h).message().find("port 0"), std::string::npos);
}

Meta good_meta(uint8_t role) {
  Meta m{};
  m.magic = kMetaMagic;
  m.version = kVersion;
  m.role = role;
  m.nqps = 1;
  m.mtu = 3;  // IBV_MTU_1024
  m.fifo_slots = kFifoSlots;
  m.nonce = 77;
  std::strcpy(m.dev_name, "rxe0");
  return m;
}

TEST(Meta, GoodMetaValidates) {
  EXPECT_TRUE(validate_meta(good_meta(0), 0, 77).is_ok());
}

TEST(Meta, ConnectionManagerIsOobOrRdmacm) {
  Meta m = good_meta(0);
  m.cm = kMetaCmRdmacm;
  EXPECT_TRUE(validate_meta(m, 0, 77).is_ok());
  m.cm = 2;
  EXPECT_NE(validate_meta(m, 0, 77).message().find("connection manager"), std::string::npos);
}

CmToken good_token() {
  CmToken t{};
  t.magic = kCmTokenMagic;
  t.version = kVersion;
  t.qp_index = 1;
  t.nqps = 2;
  t.nonce = 77;
  t.fifo_addr = 0x1000;
  t.fifo_rkey = 5;
  return t;
}

TEST(CmToken, ValidatesStrictlyAndAcceptsPaddedPrivateData) {
  uint8_t padded[kCmPrivateDataMax] = {};  // IB pads the REQ's private data
  CmToken t = good_token(), out{};
  std::memcpy(padded, &t, sizeof t);
  ASSERT_TRUE(validate_cm_token(padded, sizeof padded, 77, &out).is_ok());
  EXPECT_EQ(out.fifo_addr, 0x1000u);
  EXPECT_FALSE(validate_cm_token(padded, sizeof t - 1, 77, &out).is_ok());  // short
  EXPECT_FALSE(validate_cm_token(nullptr, 0, 77, &out).is_ok());
  EXPECT_NE(validate_cm_token(&t, sizeof t, 78, &out).message().find("nonce"), std::string::npos);
  for (auto bad : {+[](CmToken& x) { x.magic ^= 1; }, +[](CmToken& x) { x.version = 99; },
                   +[](CmToken& x) { x.qp_index = 2; }, +[](CmToken& x) { x.nqps = 0; },
                   +[](CmToken& x) { x.nqps = kMaxQps + 1; }}) {
    CmToken b = good_token();
    bad(b);
    EXPECT_FALSE(validate_cm_token(&b, sizeof b, 77, &out).is_ok());
  }
}

TEST(Meta, RejectsWrongRoleNonceQpsDepthAndName) {
  EXPECT_FALSE(validate_meta(good_meta(1), 0, 77).is_ok());
  EXPECT_NE(validate_meta(good_meta(0), 0, 78).message().find("nonce"), std::string::npos);
  Meta m = good_meta(0);
  m.nqps = 0;
  EXPECT_FALSE(validate_meta(m, 0, 77).is_ok());
  m.nqps = kMaxQps + 1;
  EXPECT_FALSE(validate_meta(m, 0, 77).is_ok());
  m = good_meta(0);
  m.fifo_slots = kFifoSlots * 2;
  EXPECT_FALSE(validate_meta(m, 0, 77).is_ok());
  m = good_meta(0);
  std::memset(m.dev_name, 'x', sizeof m.dev_name);
  EXPECT_FALSE(validate_meta(m, 0, 77).is_ok());
  m = good_meta(0);
  for (uint8_t mtu : {0, 6, 255}) {
    m.mtu = mtu;
    EXPECT_NE(validate_meta(m, 0, 77).message().find("MTU"), std::string::npos) << int(mtu);
  }
  m = good_meta(0);
  m.magic ^= 1;
  EXPECT_EQ(validate_meta(m, 0, 77).code(), Code::kRemoteError);
}

// The listener refuses a stray at its first byte that is not Sluice's, before the rest arrives.
TEST(Meta, HeaderPrefixIsCheckedByteByByte) {
  const Meta m = good_meta(0);
  const auto* bytes = reinterpret_cast<const uint8_t*>(&m);
  for (size_t n = 0; n <= sizeof m; ++n)
    EXPECT_TRUE(check_meta_prefix(bytes, n).is_ok()) << n << " good bytes";
  // A wrong byte anywhere in the magic is refused as soon as it arrived, whatever follows.
  for (size_t i = 0; i < sizeof m.magic; ++i) {
    Meta bad = m;
    reinterpret_cast<uint8_t*>(&bad)[i] ^= 0x01;
    const auto* b = reinterpret_cast<const uint8_t*>(&bad);
    EXPECT_TRUE(check_meta_prefix(b, i).is_ok()) << "bytes before the bad one are fine";
    Status st = check_meta_prefix(b, i + 1);
    EXPECT_EQ(st.code(), Code::kRemoteError);
    EXPECT_NE(st.message().find("bad magic"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("byte " + std::to_string(i)), std::string::npos) << st.message();
  }
  // "GET / HTTP/1.1": a health probe fails at byte 0.
  const char http[] = "GET / HTTP/1.1\r\n";
  EXPECT_FALSE(check_meta_prefix(http, 1).is_ok());
  // The version is judged once both of its bytes arrived.
  Meta v = m;
  v.version = kVersion + 1;
  const auto* vb = reinterpret_cast<const uint8_t*>(&v);
  EXPECT_TRUE(check_meta_prefix(vb, kMetaHeaderBytes - 1).is_ok());
  Status st = check_meta_prefix(vb, kMetaHeaderBytes);
  EXPECT_NE(st.message().find("wire version " + std::to_string(kVersion + 1)), std::string::npos)
      << st.message();
  EXPECT_FALSE(check_meta_prefix(vb, sizeof v).is_ok());
}

TEST(Handle, EncodeThenDecodeGivesTheListenersAddress) {
  sockaddr_storage sa{};
  auto* s6 = reinterpret_cast<sockaddr_in6*>(&sa);
  s6->sin6_family = AF_INET6;
  s6->sin6_port = htons(4711);
  s6->sin6_addr.s6_addr[15] = 1;
  s6->sin6_scope_id = 3;
  const Handle h = encode_handle(sa, 2, 0x1234);
  ASSERT_TRUE(validate_handle(h).is_ok());
  EXPECT_EQ(h.listen_dev, 2u);
  EXPECT_EQ(h.nonce, 0x1234u);
  EXPECT_EQ(h.connect_state, 0u);
  sockaddr_storage back{};
  socklen_t len = 0;
  handle_address(h, &back, &len);
  ASSERT_EQ(len, sizeof(sockaddr_in6));
  EXPECT_EQ(std::memcmp(&back, &sa, len), 0);

  sockaddr_storage v4{};
  auto* s4 = reinterpret_cast<sockaddr_in*>(&v4);
  s4->sin_family = AF_INET;
  s4->sin_port = htons(9);
  s4->sin_addr.s_addr = htonl(0x0a000001);
  handle_address(encode_handle(v4, 0, 1), &back, &len);
  ASSERT_EQ(len, sizeof(sockaddr_in));
  EXPECT_EQ(std::memcmp(&back, &v4, len), 0);
}

TEST(Meta, PeerCheckWantsTheSameLinkLayerAndQpCount) {
  Meta a = good_meta(0), b = good_meta(1);
  a.link_layer = b.link_layer = 2;
  a.nqps = b.nqps = 4;
  EXPECT_TRUE(check_peer_meta(a, b, "dev0").is_ok());
  b.nqps = 2;
  EXPECT_NE(check_peer_meta(a, b, "dev0").message().find("2 QPs"), std::string::npos);
  b.nqps = 4;
  b.link_layer = 1;
  const Status st = check_peer_meta(a, b, "dev0");
  EXPECT_EQ(st.code(), Code::kInvalidUsage);
  EXPECT_NE(st.message().find("dev0"), std::string::npos);
}

sockaddr_storage v4_addr(const char* text, uint16_t port) {
  sockaddr_storage sa{};
  auto* s4 = reinterpret_cast<sockaddr_in*>(&sa);
  s4->sin_family = AF_INET;
  s4->sin_port = htons(port);
  EXPECT_EQ(inet_pton(AF_INET, text, &s4->sin_addr), 1) << text;
  return sa;
}

TEST(Handle, CarriesTheRdmaCmListenersOwnAddress) {
  // The out-of-band listener on the management network, the rdma_cm listener on the device's own
  // interface: the handle carries both, and the connector resolves the second.
  const sockaddr_storage oob = v4_addr("192.168.1.5", 4711);
  const sockaddr_storage dev = v4_addr("10.77.0.1", 0);
  const Handle h = encode_handle(oob, 1, 0x99, htons(6000), &dev);
  ASSERT_TRUE(validate_handle(h).is_ok()) << validate_handle(h).message();
  EXPECT_EQ(h.cm_family, AF_INET);
  sockaddr_storage cm{};
  ASSERT_TRUE(handle_cm_address(h, &cm));
  EXPECT_EQ(cm.ss_family, AF_INET);
  const sockaddr_storage want = v4_addr("10.77.0.1", 6000);
  EXPECT_EQ(std::memcmp(&cm, &want, sizeof(sockaddr_in)), 0);
  sockaddr_storage tcp{};
  socklen_t len = 0;
  handle_address(h, &tcp, &len);  // the TCP listener stays where it was
  EXPECT_EQ(std::memcmp(&tcp, &oob, sizeof(sockaddr_in)), 0);

  // IPv6 rdma_cm address beside an IPv4 out-of-band one.
  sockaddr_storage dev6{};
  auto* s6 = reinterpret_cast<sockaddr_in6*>(&dev6);
  s6->sin6_family = AF_INET6;
  ASSERT_EQ(inet_pton(AF_INET6, "fd00::7", &s6->sin6_addr), 1);
  const Handle h6 = encode_handle(oob, 1, 0x99, htons(6001), &dev6);
  ASSERT_TRUE(validate_handle(h6).is_ok());
  ASSERT_TRUE(handle_cm_address(h6, &cm));
  ASSERT_EQ(cm.ss_family, AF_INET6);
  EXPECT_EQ(std::memcmp(&reinterpret_cast<sockaddr_in6*>(&cm)->sin6_addr, &s6->sin6_addr, 16), 0);
  EXPECT_EQ(ntohs(reinterpret_cast<sockaddr_in6*>(&cm)->sin6_port), 6001);
}

TEST(Handle, RdmaCmAtTheOutOfBandAddressOrNone) {
  const sockaddr_storage oob = v4_addr("169.254.0.1", 4711);
  // The out-of-band address is on the device: the rdma_cm listener is there (cm_family 0).
  Handle h = encode_handle(oob, 0, 7, htons(5000), &oob);
  ASSERT_TRUE(validate_handle(h).is_ok());
  EXPECT_EQ(h.cm_family, AF_UNSPEC);
  sockaddr_storage cm{};
  ASSERT_TRUE(handle_cm_address(h, &cm));
  const sockaddr_storage want = v4_addr("169.254.0.1", 5000);
  EXPECT_EQ(std::memcmp(&cm, &want, sizeof(sockaddr_in)), 0);
  // No rdma_cm listener: no address either, whatever was passed.
  const sockaddr_storage dev = v4_addr("10.77.0.1", 0);
  h = encode_handle(oob, 0, 7, 0, &dev);
  EXPECT_EQ(h.cm_family, AF_UNSPEC);
  EXPECT_FALSE(handle_cm_address(h, &cm));
}

TEST(Handle, ChecksumCoversTheRdmaCmAddress) {
  const sockaddr_storage oob = v4_addr("192.168.1.5", 4711);
  const sockaddr_storage dev = v4_addr("10.77.0.1", 0);
  const Handle h = encode_handle(oob, 1, 0x99, htons(6000), &dev);
  for (size_t i = offsetof(Handle, cm_addr); i < offsetof(Handle, checksum); ++i) {
    Handle c = h;
    reinterpret_cast<uint8_t*>(&c)[i] ^= 0x01;
    EXPECT_NE(handle_checksum(c), h.checksum) << "byte " << i;
    EXPECT_FALSE(validate_handle(c).is_ok()) << "byte " << i;
  }
  Handle c = h;  // a family that is none of the three, even with a valid checksum
  c.cm_family = 99;
  c.checksum = handle_checksum(c);
  EXPECT_NE(validate_handle(c).message().find("rdma_cm address family"), std::string::npos);
}

TEST(Handle, AnotherWireVersionSaysThePeerRunsAnotherSluice) {
  // A version-1 handle (before the rdma_cm address existed): the version sits where it always did
  // and is judged before the checksum, whose position moved.
  Handle h = good_handle();
  h.version = 1;
  const Status st = validate_handle(h);
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("the peer runs another Sluice wire version"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("wire version 1, this Sluice speaks " + std::to_string(kVersion)),
            std::string::npos)
      << st.message();
  EXPECT_GE(kVersion, 2) << "the rdma_cm address changed the handle: the version must say so";

  Meta m{};
  m.magic = kMetaMagic;
  m.version = 1;
  EXPECT_NE(validate_meta(m, 0, 0).message().find("the peer runs another Sluice wire version"),
            std::string::npos);
  EXPECT_NE(check_meta_prefix(&m, kMetaHeaderBytes)
                .message()
                .find("the peer runs another Sluice wire version"),
            std::string::npos);
}

TEST(Layout, EntriesNeverStraddleTheirAlignment) {
  // A CTS entry is written by one RDMA WRITE per slot; entries are aligned so none is split
  // across the 32-byte units a NIC may write out of order under relaxed ordering.
  EXPECT_EQ(sizeof(CtsEntry) % 32, 0u);
  EXPECT_EQ(alignof(CtsEntry), 32u);
  EXPECT_EQ(sizeof(DoneRecord), 64u);
  EXPECT_LE(sizeof(Handle), 128u);
  EXPECT_LT(kImmRecord, 0xffffffffu);
}

}  // namespace
}  // namespace sluice::wire
