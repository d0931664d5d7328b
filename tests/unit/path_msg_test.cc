// The path control messages of failover (sluice/core/wire/path_msg.h): each type round-trips,
// every proper prefix is incomplete, every field is validated with a reason, a later version's
// longer body is read, and the encoder refuses what the decoder would.
#include "sluice/core/wire/path_msg.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace sluice::wire {
namespace {

PathMsg fence(int nqps) {
  PathMsg m;
  m.type = PathMsgType::kFence;
  m.path = 1;
  m.epoch = 7;
  m.nqps = static_cast<uint8_t>(nqps);
  m.sub = 1;  // path 0 (+ 1)
  m.from_seq = 0x123456789aull;
  for (int q = 0; q < nqps; ++q) m.last_seq[q] = q == 0 ? kNoSeq : 1000 + q;
  return m;
}

PathMsg offer(PathMsgType t, int nqps) {
  PathMsg m;
  m.type = t;
  m.path = 3;
  m.epoch = 0x01020304;
  m.nqps = static_cast<uint8_t>(nqps);
  for (int i = 0; i < 16; ++i) m.member.gid[i] = static_cast<uint8_t>(0xa0 + i);
  m.member.lid = 0;
  m.member.port = 1;
  m.member.mtu = 3;
  m.member.gid_index = 1;
  m.member.link_layer = 2;
  m.member.weight = 100;
  m.member.buf_rkey = 0x1234;
  for (int q = 0; q < nqps; ++q) m.qps[q] = {static_cast<uint32_t>(17 + q), 0xabcdefu - q};
  return m;
}

std::vector<uint8_t> enc(const PathMsg& m) {
  std::vector<uint8_t> b(kPathMsgMaxBytes);
  b.resize(encode_path_msg(m, b.data()));
  return b;
}

PathMsgParse dec(const std::vector<uint8_t>& b, PathMsg* m, std::string* why, size_t* used) {
  return decode_path_msg(b.data(), b.size(), m, why, used);
}

// Rewrites the checksum after a test edits a byte (so the edit itself is what is refused).
void reseal(std::vector<uint8_t>& b) {
  const size_t n = b.size() - 4;
  const uint32_t h = fnv1a32(b.data(), n);
  for (int k = 0; k < 4; ++k) b[n + k] = static_cast<uint8_t>(h >> (8 * k));
}

TEST(PathMsg, FenceRoundTripsWithEveryPrefixIncomplete) {
  for (int nqps : {1, 4, kMaxQps}) {
    const PathMsg m = fence(nqps);
    const auto b = enc(m);
    ASSERT_EQ(b.size(), kPathMsgHeaderBytes + 8u * nqps + 8 + 4);
    PathMsg out;
    std::string why;
    size_t used = 0;
    for (size_t k = 0; k < b.size(); ++k)
      ASSERT_EQ(decode_path_msg(b.data(), k, &out, &why, &used), PathMsgParse::kIncomplete)
          << "prefix " << k;
    ASSERT_EQ(dec(b, &out, &why, &used), PathMsgParse::kOk) << why;
    EXPECT_EQ(used, b.size());
    EXPECT_EQ(out.type, PathMsgType::kFence);
    EXPECT_EQ(out.path, 1);
    EXPECT_EQ(out.epoch, 7u);
    EXPECT_EQ(out.nqps, nqps);
    EXPECT_EQ(out.sub, 1);
    EXPECT_EQ(out.from_seq, m.from_seq);
    for (int q = 0; q < nqps; ++q) EXPECT_EQ(out.last_seq[q], m.last_seq[q]);
  }
}

TEST(PathMsg, AFenceNamesItsSubstituteOrNone) {
  PathMsg m = fence(2);
  for (uint8_t sub : {0, 1, 3, 4}) {
    m.sub = sub;
    const auto b = enc(m);
    PathMsg out;
    std::string why;
    size_t used = 0;
    ASSERT_EQ(dec(b, &out, &why, &used), PathMsgParse::kOk) << why;
    EXPECT_EQ(out.sub, sub);
  }
  uint8_t buf[kPathMsgMaxBytes];
  m.sub = 2;  // path 1 itself
  EXPECT_EQ(encode_path_msg(m, buf), 0u);
  m.sub = kMaxMetaMembers + 1;
  EXPECT_EQ(encode_path_msg(m, buf), 0u);
}

TEST(PathMsg, OfferAndAnswerRoundTrip) {
  for (PathMsgType t : {PathMsgType::kOffer, PathMsgType::kAnswer}) {
    const PathMsg m = offer(t, 2);
    auto b = enc(m);
    ASSERT_EQ(b.size(), kPathMsgHeaderBytes + sizeof(MemberInfo) + 16 + 4);
    b.push_back(0x5a);  // the next message's first byte: not part of this one
    PathMsg out;
    std::string why;
    size_t used = 0;
    ASSERT_EQ(dec(b, &out, &why, &used), PathMsgParse::kOk) << why;
    EXPECT_EQ(used, b.size() - 1);
    EXPECT_EQ(out.type, t);
    EXPECT_EQ(out.epoch, 0x01020304u);
    EXPECT_EQ(std::memcmp(&out.member, &m.member, sizeof m.member), 0);
    EXPECT_EQ(out.qps[1].qpn, 18u);
    EXPECT_EQ(out.qps[1].psn, 0xabcdefu - 1);
  }
}

// The sender's word that its check completed: a header and a checksum, no body; a body (of
// version 1) or a substitute byte is refused.
TEST(PathMsg, CheckedRoundTripsWithNoBody) {
  PathMsg m;
  m.type = PathMsgType::kChecked;
  m.path = 1;
  m.epoch = 9;
  m.nqps = 2;
  auto b = enc(m);
  ASSERT_EQ(b.size(), kPathMsgHeaderBytes + 4);
  PathMsg out;
  std::string why;
  size_t used = 0;
  for (size_t k = 0; k < b.size(); ++k)
    ASSERT_EQ(decode_path_msg(b.data(), k, &out, &why, &used), PathMsgParse::kIncomplete) << k;
  ASSERT_EQ(dec(b, &out, &why, &used), PathMsgParse::kOk) << why;
  EXPECT_EQ(used, b.size());
  EXPECT_EQ(out.type, PathMsgType::kChecked);
  EXPECT_EQ(out.path, 1);
  EXPECT_EQ(out.epoch, 9u);
  EXPECT_EQ(out.nqps, 2);
  EXPECT_STREQ(path_msg_type_name(out.type), "path checked");
  EXPECT_FALSE(path_msg_has_qps(PathMsgType::kChecked));
  auto sub = b;
  sub[9] = 1;
  reseal(sub);
  EXPECT_EQ(dec(sub, &out, &why, &used), PathMsgParse::kBad);
  EXPECT_NE(why.find("substitute"), std::string::npos) << why;
  auto body = b;
  body[10] = 8;  // 8 body bytes claimed, in version 1
  body.insert(body.begin() + kPathMsgHeaderBytes, 8, 0);
  reseal(body);
  EXPECT_EQ(dec(body, &out, &why, &used), PathMsgParse::kBad);
  EXPECT_NE(why.find("expected 0"), std::string::npos) << why;
  auto unknown = b;
  unknown[2] = 5;
  reseal(unknown);
  EXPECT_EQ(dec(unknown, &out, &why, &used), PathMsgParse::kBad);
  EXPECT_NE(why.find("unknown type 5"), std::string::npos) << why;
}

struct Edit {
  const char* name;
  size_t at;
  uint8_t value;
  const char* why;
};

TEST(PathMsg, EveryHeaderFieldIsValidated) {
  const Edit edits[] = {
      {"magic", 0, 0xf7, "expected, first byte 247"},
      {"version 0", 1, 0, "of version 0"},
      {"type 0", 2, 0, "of unknown type 0"},
      {"type 5", 2, 5, "of unknown type 5"},
      {"path 4", 3, 4, "for path 4"},
      {"no QPs", 8, 0, "with 0 QPs"},
      {"17 QPs", 8, 17, "with 17 QPs"},
      {"substitute past the paths", 9, 5, "bad substitute path byte 5"},
      {"substitute is the path itself", 9, 2, "bad substitute path byte 2"},  // fence(1): path 1
      {"body length", 10, 9, "with a body of 9 bytes, expected 16"},
  };
  for (const Edit& e : edits) {
    auto b = enc(fence(1));
    b[e.at] = e.value;
    reseal(b);
    PathMsg out;
    std::string why;
    size_t used = 7;
    EXPECT_EQ(dec(b, &out, &why, &used), PathMsgParse::kBad) << e.name;
    EXPECT_NE(why.find(e.why), std::string::npos) << e.name << ": " << why;
    EXPECT_EQ(used, 0u) << e.name;
  }
}

TEST(PathMsg, CorruptChecksumIsRefused) {
  auto b = enc(fence(2));
  b[kPathMsgHeaderBytes + 3] ^= 0x40;
  PathMsg out;
  std::string why;
  size_t used = 0;
  EXPECT_EQ(dec(b, &out, &why, &used), PathMsgParse::kBad);
  EXPECT_NE(why.find("bad checksum"), std::string::npos) << why;
}

TEST(PathMsg, OfferAddressIsValidated) {
  struct AddrEdit {
    const char* name;
    void (*edit)(PathMsg&);
    const char* why;
  };
  const AddrEdit edits[] = {
      {"mtu", [](PathMsg& m) { m.member.mtu = 6; }, "invalid path MTU code 6"},
      {"link layer", [](PathMsg& m) { m.member.link_layer = 0; }, "unknown link layer 0"},
      {"reserved", [](PathMsg& m) { m.member.reserved = 1; }, "reserved bytes in its address"},
      {"qpn 0", [](PathMsg& m) { m.qps[1].qpn = 0; }, "QP 1 with QP number 0"},
      {"qpn 2^24", [](PathMsg& m) { m.qps[0].qpn = 1u << 24; }, "QP 0 with QP number 16777216"},
      {"psn", [](PathMsg& m) { m.qps[1].psn = 1u << 24; }, "QP 1 with a PSN of 16777216"},
  };
  for (const AddrEdit& e : edits) {
    PathMsg m = offer(PathMsgType::kOffer, 2);
    e.edit(m);
    uint8_t raw[kPathMsgMaxBytes];
    EXPECT_EQ(encode_path_msg(m, raw), 0u) << "the encoder refuses " << e.name;
    // The same bytes from a peer: the decoder refuses them with the reason.
    auto b = enc(offer(PathMsgType::kOffer, 2));
    std::memcpy(b.data() + kPathMsgHeaderBytes, &m.member, sizeof m.member);
    for (int q = 0; q < 2; ++q) {
      uint8_t* at = b.data() + kPathMsgHeaderBytes + sizeof(MemberInfo) + 8 * q;
      for (int k = 0; k < 4; ++k) {
        at[k] = static_cast<uint8_t>(m.qps[q].qpn >> (8 * k));
        at[4 + k] = static_cast<uint8_t>(m.qps[q].psn >> (8 * k));
      }
    }
    reseal(b);
    PathMsg out;
    std::string why;
    size_t used = 0;
    EXPECT_EQ(dec(b, &out, &why, &used), PathMsgParse::kBad) << e.name;
    EXPECT_NE(why.find(e.why), std::string::npos) << e.name << ": " << why;
  }
}

TEST(PathMsg, ALaterVersionsLongerBodyIsRead) {
  auto b = enc(fence(2));
  // Version 2 with 8 more body bytes (and a reserved byte in use): version 1 reads its part.
  b[1] = 2;
  b[9] = 0x11;
  const size_t body = 16 + 8 + 8;
  b[10] = static_cast<uint8_t>(body);
  b.resize(kPathMsgHeaderBytes + body + 4, 0xee);
  reseal(b);
  PathMsg out;
  std::string why;
  size_t used = 0;
  ASSERT_EQ(dec(b, &out, &why, &used), PathMsgParse::kOk) << why;
  EXPECT_EQ(used, b.size());
  EXPECT_EQ(out.last_seq[1], 1001u);
  // But never beyond what a reader holds.
  auto big = enc(fence(2));
  big[1] = 2;
  const size_t huge = kPathMsgMaxBytes - kPathMsgHeaderBytes - 4 + 1;
  big[10] = static_cast<uint8_t>(huge);
  big[11] = static_cast<uint8_t>(huge >> 8);
  big.resize(kPathMsgHeaderBytes + huge + 4, 0);
  reseal(big);
  EXPECT_EQ(dec(big, &out, &why, &used), PathMsgParse::kBad);
}

TEST(PathMsg, EncoderRefusesBadHeaders) {
  uint8_t raw[kPathMsgMaxBytes];
  PathMsg m = fence(1);
  m.path = kMaxMetaMembers;
  EXPECT_EQ(encode_path_msg(m, raw), 0u);
  m = fence(1);
  m.nqps = 0;
  EXPECT_EQ(encode_path_msg(m, raw), 0u);
  m.nqps = kMaxQps + 1;
  EXPECT_EQ(encode_path_msg(m, raw), 0u);
  m = fence(1);
  m.type = static_cast<PathMsgType>(9);
  EXPECT_EQ(encode_path_msg(m, raw), 0u);
}

}  // namespace
}  // namespace sluice::wire
