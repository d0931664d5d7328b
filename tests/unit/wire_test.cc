// Wire formats: the listen handle and connection metadata are validated before anything trusts
// them, so a corrupt or foreign handle is a clean error, never a crash or a hang.
#include "sluice/core/wire/wire.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>
#include <vector>

namespace sluice::wire {
namespace {

// A nonce whose bytes are seed, seed + 7, seed + 14, ... (every byte differs between seeds).
Nonce N(uint8_t seed) {
  Nonce n{};
  for (size_t i = 0; i < kNonceBytes; ++i) n.bytes[i] = static_cast<uint8_t>(seed + 7 * i);
  return n;
}

Handle good_handle() {
  Handle h{};
  h.magic = kHandleMagic;
  h.version = kVersion;
  h.family = AF_INET;
  h.port = 0x1234;
  h.addr[0] = 127;
  h.addr[3] = 1;
  h.nonce = N(0xab);
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
  h.connect_check = 42 ^ nonce_fold(h.nonce) ^ kHandleMagic;
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
  m.nonce = N(77);
  std::strcpy(m.dev_name, "rxe0");
  return m;
}

TEST(Meta, GoodMetaValidates) {
  EXPECT_TRUE(validate_meta(good_meta(0), 0, N(77)).is_ok());
}

TEST(Meta, ConnectionManagerIsOobOrRdmacm) {
  Meta m = good_meta(0);
  m.cm = kMetaCmRdmacm;
  EXPECT_TRUE(validate_meta(m, 0, N(77)).is_ok());
  m.cm = 2;
  EXPECT_NE(validate_meta(m, 0, N(77)).message().find("connection manager"), std::string::npos);
}

CmToken good_token() {
  CmToken t{};
  t.magic = kCmTokenMagic;
  t.version = kVersion;
  t.qp_index = 1;
  t.nqps = 2;
  t.nonce = N(77);
  t.fifo_addr = 0x1000;
  t.fifo_rkey = 5;
  return t;
}

TEST(CmToken, ValidatesStrictlyAndAcceptsPaddedPrivateData) {
  uint8_t padded[kCmPrivateDataMax] = {};  // IB pads the REQ's private data
  CmToken t = good_token(), out{};
  std::memcpy(padded, &t, sizeof t);
  ASSERT_TRUE(validate_cm_token(padded, sizeof padded, N(77), &out).is_ok());
  EXPECT_EQ(out.fifo_addr, 0x1000u);
  EXPECT_FALSE(validate_cm_token(padded, sizeof t - 1, N(77), &out).is_ok());  // short
  EXPECT_FALSE(validate_cm_token(nullptr, 0, N(77), &out).is_ok());
  EXPECT_NE(validate_cm_token(&t, sizeof t, N(78), &out).message().find("nonce"),
            std::string::npos);
  for (auto bad : {+[](CmToken& x) { x.magic ^= 1; }, +[](CmToken& x) { x.version = 99; },
                   +[](CmToken& x) { x.qp_index = 2; }, +[](CmToken& x) { x.nqps = 0; },
                   +[](CmToken& x) { x.nqps = kMaxQps + 1; }}) {
    CmToken b = good_token();
    bad(b);
    EXPECT_FALSE(validate_cm_token(&b, sizeof b, N(77), &out).is_ok());
  }
}

// The nonce is the listener's only guard against a stranger who reaches its port: a connector's
// metadata or rdma_cm token whose nonce differs from the listener's in any one bit of any byte is
// refused, and so is one that echoes only part of it (the 64 bits of wire version 2).
TEST(Nonce, AWrongNonceInAnyByteIsRefused) {
  const Nonce listener = N(0x31);
  ASSERT_TRUE(validate_meta(good_meta(0), 0, N(77)).is_ok());
  for (size_t i = 0; i < kNonceBytes; ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      Nonce wrong = listener;
      wrong.bytes[i] ^= static_cast<uint8_t>(1u << bit);
      EXPECT_FALSE(same_nonce(wrong, listener)) << "byte " << i << " bit " << bit;
      Meta m = good_meta(0);
      m.nonce = wrong;
      const Status st = validate_meta(m, 0, listener);
      EXPECT_EQ(st.code(), Code::kRemoteError) << "byte " << i << " bit " << bit;
      EXPECT_NE(st.message().find("nonce mismatch"), std::string::npos) << st.message();
      CmToken t = good_token(), out{};
      t.nonce = wrong;
      const Status ct = validate_cm_token(&t, sizeof t, listener, &out);
      EXPECT_NE(ct.message().find("nonce mismatch"), std::string::npos)
          << "byte " << i << " bit " << bit << ": " << ct.message();
    }
  }
  Meta half = good_meta(0);  // the low 64 bits right, the rest zero
  half.nonce = Nonce{};
  std::memcpy(half.nonce.bytes, listener.bytes, 8);
  EXPECT_FALSE(validate_meta(half, 0, listener).is_ok());
  Meta right = good_meta(0);
  right.nonce = listener;
  EXPECT_TRUE(validate_meta(right, 0, listener).is_ok());
  EXPECT_TRUE(same_nonce(listener, N(0x31)));
}

// new_nonce reads the OS's CSPRNG: 128 bits, a fresh value each time.
TEST(Nonce, FreshNoncesFromTheOsAreDistinct) {
  static_assert(kNonceBytes * 8 >= 128);
  std::vector<Nonce> seen;
  for (int i = 0; i < 256; ++i) {
    Nonce n{};
    const Status st = new_nonce(&n);
    ASSERT_TRUE(st.is_ok()) << st.message();
    for (const Nonce& o : seen) ASSERT_FALSE(same_nonce(o, n)) << "a nonce repeated after " << i;
    seen.push_back(n);
  }
  // Every byte position takes many values over 256 draws (a generator that left bytes fixed, e.g.
  // a 64-bit value widened with zeroes, fails here).
  for (size_t b = 0; b < kNonceBytes; ++b) {
    std::set<uint8_t> values;
    for (const Nonce& n : seen) values.insert(n.bytes[b]);
    EXPECT_GT(values.size(), 100u) << "byte " << b << " takes only " << values.size() << " values";
  }
}

// The kernel's pool not seeded yet (early boot): getrandom(GRND_NONBLOCK) says EAGAIN. new_nonce
// waits for the seed within its bound and then draws; past the bound it fails, naming the cause,
// instead of blocking in getrandom for as long as seeding takes.
int g_unseeded_reads = 0;   // EAGAIN answers left before the pool is "seeded"
unsigned g_flags_seen = 0;  // the flags of the last read
int g_reads = 0;
ssize_t unseeded_then_seeded(void* buf, size_t len, unsigned flags) {
  ++g_reads;
  g_flags_seen = flags;
  if (g_unseeded_reads > 0) {
    --g_unseeded_reads;
    errno = EAGAIN;
    return -1;
  }
  const size_t n = std::min<size_t>(len, 5);  // short reads, as getrandom may give
  std::memset(buf, 0x5a, n);
  return static_cast<ssize_t>(n);
}

TEST(Nonce, AnUnseededPoolIsWaitedForWithinTheBoundNeverBlockedOn) {
  g_unseeded_reads = 3;
  g_reads = 0;
  Nonce n{};
  const Status st = new_nonce_from(&n, &unseeded_then_seeded, 5000);
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(g_flags_seen & GRND_NONBLOCK, static_cast<unsigned>(GRND_NONBLOCK));
  EXPECT_EQ(g_reads, 3 + 4);  // 3 refused, then 16 bytes in reads of 5, 5, 5, 1
  for (uint8_t b : n.bytes) EXPECT_EQ(b, 0x5a);
}

TEST(Nonce, APoolStillUnseededAtTheBoundFailsNamingTheCause) {
  g_unseeded_reads = 1 << 30;
  g_reads = 0;
  Nonce n{};
  const auto t0 = std::chrono::steady_clock::now();
  const Status st = new_nonce_from(&n, &unseeded_then_seeded, 200);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("random pool is still not initialized"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("EAGAIN"), std::string::npos) << st.message();
  EXPECT_GE(ms, 200);
  EXPECT_LT(ms, 5000);  // the bound, not a blocked read
  // Polled, not spun: about one read per kRandomSeedPollNs.
  EXPECT_LE(g_reads, 200 / (kRandomSeedPollNs / 1'000'000) + 2);
  EXPECT_GE(g_reads, 2);
}

TEST(Nonce, TheHandleCarriesAll128BitsUnderItsChecksum) {
  sockaddr_storage sa{};
  auto* s4 = reinterpret_cast<sockaddr_in*>(&sa);
  s4->sin_family = AF_INET;
  s4->sin_port = htons(9);
  const Handle h = encode_handle(sa, 0, N(0x55));
  ASSERT_TRUE(validate_handle(h).is_ok());
  EXPECT_EQ(std::memcmp(h.nonce.bytes, N(0x55).bytes, kNonceBytes), 0);
  for (size_t i = 0; i < kNonceBytes; ++i) {  // a handle altered in its nonce fails its checksum
    Handle c = h;
    c.nonce.bytes[i] ^= 0x80;
    EXPECT_FALSE(validate_handle(c).is_ok()) << "nonce byte " << i;
  }
  EXPECT_LE(sizeof(Handle), kNcclHandleMaxSize);
}

TEST(Meta, RejectsWrongRoleNonceQpsDepthAndName) {
  EXPECT_FALSE(validate_meta(good_meta(1), 0, N(77)).is_ok());
  EXPECT_NE(validate_meta(good_meta(0), 0, N(78)).message().find("nonce"), std::string::npos);
  Meta m = good_meta(0);
  m.nqps = 0;
  EXPECT_FALSE(validate_meta(m, 0, N(77)).is_ok());
  m.nqps = kMaxQps + 1;
  EXPECT_FALSE(validate_meta(m, 0, N(77)).is_ok());
  m = good_meta(0);
  m.fifo_slots = kFifoSlots * 2;
  EXPECT_FALSE(validate_meta(m, 0, N(77)).is_ok());
  m = good_meta(0);
  std::memset(m.dev_name, 'x', sizeof m.dev_name);
  EXPECT_FALSE(validate_meta(m, 0, N(77)).is_ok());
  m = good_meta(0);
  for (uint8_t mtu : {0, 6, 255}) {
    m.mtu = mtu;
    EXPECT_NE(validate_meta(m, 0, N(77)).message().find("MTU"), std::string::npos) << int(mtu);
  }
  m = good_meta(0);
  m.magic ^= 1;
  EXPECT_EQ(validate_meta(m, 0, N(77)).code(), Code::kRemoteError);
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
  const Handle h = encode_handle(sa, 2, N(0x12));
  ASSERT_TRUE(validate_handle(h).is_ok());
  EXPECT_EQ(h.listen_dev, 2u);
  EXPECT_TRUE(same_nonce(h.nonce, N(0x12)));
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
  handle_address(encode_handle(v4, 0, N(1)), &back, &len);
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
  const Handle h = encode_handle(oob, 1, N(0x99), htons(6000), &dev);
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
  const Handle h6 = encode_handle(oob, 1, N(0x99), htons(6001), &dev6);
  ASSERT_TRUE(validate_handle(h6).is_ok());
  ASSERT_TRUE(handle_cm_address(h6, &cm));
  ASSERT_EQ(cm.ss_family, AF_INET6);
  EXPECT_EQ(std::memcmp(&reinterpret_cast<sockaddr_in6*>(&cm)->sin6_addr, &s6->sin6_addr, 16), 0);
  EXPECT_EQ(ntohs(reinterpret_cast<sockaddr_in6*>(&cm)->sin6_port), 6001);
}

TEST(Handle, RdmaCmAtTheOutOfBandAddressOrNone) {
  const sockaddr_storage oob = v4_addr("169.254.0.1", 4711);
  // The out-of-band address is on the device: the rdma_cm listener is there (cm_family 0).
  Handle h = encode_handle(oob, 0, N(7), htons(5000), &oob);
  ASSERT_TRUE(validate_handle(h).is_ok());
  EXPECT_EQ(h.cm_family, AF_UNSPEC);
  sockaddr_storage cm{};
  ASSERT_TRUE(handle_cm_address(h, &cm));
  const sockaddr_storage want = v4_addr("169.254.0.1", 5000);
  EXPECT_EQ(std::memcmp(&cm, &want, sizeof(sockaddr_in)), 0);
  // No rdma_cm listener: no address either, whatever was passed.
  const sockaddr_storage dev = v4_addr("10.77.0.1", 0);
  h = encode_handle(oob, 0, N(7), 0, &dev);
  EXPECT_EQ(h.cm_family, AF_UNSPEC);
  EXPECT_FALSE(handle_cm_address(h, &cm));
}

TEST(Handle, ChecksumCoversTheRdmaCmAddress) {
  const sockaddr_storage oob = v4_addr("192.168.1.5", 4711);
  const sockaddr_storage dev = v4_addr("10.77.0.1", 0);
  const Handle h = encode_handle(oob, 1, N(0x99), htons(6000), &dev);
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
  // A version-2 handle (its nonce 64 bits) is refused the same way: its layout differs after the
  // version.
  EXPECT_GE(kVersion, 3) << "the 128-bit nonce changed the handle: the version must say so";
  h = good_handle();
  h.version = 2;
  EXPECT_NE(validate_handle(h).message().find("wire version 2, this Sluice speaks"),
            std::string::npos);

  Meta m{};
  m.magic = kMetaMagic;
  m.version = 1;
  EXPECT_NE(validate_meta(m, 0, N(0)).message().find("the peer runs another Sluice wire version"),
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
