// The peer link's wire (sluice/core/wire/link.h): the listener's process in the handle, the
// handshake's offer and answer, and the frames on the link: each round-trips, every proper prefix
// is incomplete, and what is malformed is refused with a reason, at the level it concerns (a bad
// frame header ends the link; a bad notice or path message inside a good frame concerns its
// channel only).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "sluice/core/wire/link.h"

namespace sluice::wire {
namespace {

Nonce proc_of(uint8_t seed) {
  Nonce n;
  for (size_t i = 0; i < kNonceBytes; ++i) n.bytes[i] = static_cast<uint8_t>(seed + i);
  return n;
}

std::vector<uint8_t> frame(LinkFrameType t, uint32_t chan, const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out(kLinkFrameMaxBytes);
  out.resize(encode_link_frame(t, chan, payload.data(), payload.size(), out.data()));
  return out;
}

std::vector<uint8_t> notice_bytes(const std::string& reason) {
  std::vector<uint8_t> b(kNoticeMaxBytes);
  b.resize(encode_notice(reason, b.data()));
  return b;
}

PathMsg checked_msg() {
  PathMsg m;
  m.type = PathMsgType::kChecked;
  m.path = 1;
  m.epoch = 9;
  m.nqps = 2;
  return m;
}

std::vector<uint8_t> path_bytes(const PathMsg& m) {
  std::vector<uint8_t> b(kPathMsgMaxBytes);
  b.resize(encode_path_msg(m, b.data()));
  EXPECT_FALSE(b.empty()) << "the test's path message did not encode";
  return b;
}

TEST(LinkHandle, TheListenersProcessRoundTripsAfterTheHandle) {
  uint8_t handle[kNcclHandleMaxSize] = {};
  Nonce got{};
  EXPECT_FALSE(handle_link(handle, &got)) << "a zeroed handle (an older listener) has no process";
  put_handle_link(handle, proc_of(7), 0);
  uint8_t flags = 0xff;
  ASSERT_TRUE(handle_link(handle, &got, &flags));
  EXPECT_TRUE(same_nonce(got, proc_of(7)));
  EXPECT_EQ(flags, 0) << "a listener that takes no handshakes on the link (an older one: reserved)";
  put_handle_link(handle, proc_of(7), kHandleLinkHello);
  ASSERT_TRUE(handle_link(handle, &got, &flags));
  EXPECT_EQ(flags, kHandleLinkHello);
  // Nothing of wire::Handle is touched: the link's part starts after it.
  for (size_t i = 0; i < sizeof(Handle); ++i) EXPECT_EQ(handle[i], 0) << "byte " << i;
  uint8_t bad[kNcclHandleMaxSize];
  std::memcpy(bad, handle, sizeof bad);
  bad[kHandleLinkOffset] ^= 1;  // magic
  EXPECT_FALSE(handle_link(bad, &got));
  std::memcpy(bad, handle, sizeof bad);
  bad[kHandleLinkOffset + 4] = kHandleLinkVersion + 1;
  EXPECT_FALSE(handle_link(bad, &got));
  put_handle_link(bad, Nonce{}, 0);  // a zero process id is none
  EXPECT_FALSE(handle_link(bad, &got));
}

TEST(LinkMeta, AnOfferIsValidatedWithAReason) {
  MetaLink m = make_meta_link(proc_of(1), kLinkOffer, 0, 0, 5);
  EXPECT_TRUE(validate_link_offer(m).is_ok());
  m = make_meta_link(proc_of(1), kLinkOffer, 0x1234, kLinkEndAcceptor, 5);
  EXPECT_TRUE(validate_link_offer(m).is_ok());
  struct Bad {
    const char* field;
    MetaLink m;
    const char* says;
  };
  MetaLink magic = m, version = m, verdict = m, chan = m, role = m, proc = m;
  magic.magic ^= 1;
  version.version = 9;
  verdict.verdict = kLinkUse;
  chan.chan = 0;
  role.end_role = 2;
  proc.proc = Nonce{};
  for (const Bad& b : {Bad{"magic", magic, "bad magic"}, Bad{"version", version, "version 9"},
                       Bad{"verdict", verdict, "not an offer"}, Bad{"chan", chan, "channel 0"},
                       Bad{"role", role, "end role 2"}, Bad{"proc", proc, "no process"}}) {
    Status st = validate_link_offer(b.m);
    EXPECT_FALSE(st.is_ok()) << b.field;
    EXPECT_NE(st.message().find(b.says), std::string::npos) << b.field << ": " << st.message();
  }
}

TEST(LinkMeta, AnAnswerUsesOnlyTheOfferedLinkOrAdoptsANewOne) {
  const Nonce listener = proc_of(3);
  // "use" names exactly the offered link.
  EXPECT_TRUE(
      validate_link_answer(make_meta_link(listener, kLinkUse, 42, 0, 9), 42, listener, false)
          .is_ok());
  Status st =
      validate_link_answer(make_meta_link(listener, kLinkUse, 43, 0, 9), 42, listener, false);
  EXPECT_NE(st.message().find("did not offer"), std::string::npos) << st.message();
  st = validate_link_answer(make_meta_link(listener, kLinkUse, 42, 0, 9), 0, listener, false);
  EXPECT_NE(st.message().find("did not offer"), std::string::npos) << st.message();
  // "adopt" names a new, non-zero link, whatever was offered.
  EXPECT_TRUE(
      validate_link_answer(make_meta_link(listener, kLinkAdopt, 77, 0, 9), 42, listener, false)
          .is_ok());
  st = validate_link_answer(make_meta_link(listener, kLinkAdopt, 0, 0, 9), 0, listener, false);
  EXPECT_NE(st.message().find("id 0"), std::string::npos) << st.message();
  // The answer comes from the process the handle named, with a known verdict.
  st = validate_link_answer(make_meta_link(proc_of(4), kLinkAdopt, 77, 0, 9), 0, listener, false);
  EXPECT_NE(st.message().find("another process"), std::string::npos) << st.message();
  st = validate_link_answer(make_meta_link(listener, kLinkOffer, 77, 0, 9), 0, listener, false);
  EXPECT_NE(st.message().find("verdict 0"), std::string::npos) << st.message();
}

TEST(LinkMeta, AConnectorThatTakesTheirsAcceptsUseOfALinkOfTheListenersChoice) {
  const Nonce listener = proc_of(3);
  // Crossed first connects: no link offered, the listener names the link its own connect made,
  // with its end's role; only a connector that said it takes that (kLinkOfferTakesTheirs).
  EXPECT_TRUE(validate_link_answer(make_meta_link(listener, kLinkUse, 77, kLinkEndConnector, 9), 0,
                                   listener, true)
                  .is_ok());
  EXPECT_TRUE(validate_link_answer(make_meta_link(listener, kLinkUse, 77, kLinkEndAcceptor, 9), 0,
                                   listener, true)
                  .is_ok());
  Status st =
      validate_link_answer(make_meta_link(listener, kLinkUse, 77, 0, 9), 0, listener, false);
  EXPECT_NE(st.message().find("did not offer"), std::string::npos) << st.message();
  st = validate_link_answer(make_meta_link(listener, kLinkUse, 0, 0, 9), 0, listener, true);
  EXPECT_NE(st.message().find("id 0"), std::string::npos) << st.message();
  st = validate_link_answer(make_meta_link(listener, kLinkUse, 77, 2, 9), 0, listener, true);
  EXPECT_NE(st.message().find("end role 2"), std::string::npos) << st.message();
  // With a link offered, "use" still names exactly that one, whatever the flag.
  st = validate_link_answer(make_meta_link(listener, kLinkUse, 43, 0, 9), 42, listener, true);
  EXPECT_NE(st.message().find("did not offer"), std::string::npos) << st.message();
  // The flag rides in a byte an older Sluice leaves 0, which an offer's checks do not read.
  MetaLink m = make_meta_link(listener, kLinkOffer, 0, 0, 9);
  EXPECT_EQ(m.flags, 0);
  m.flags = kLinkOfferTakesTheirs;
  EXPECT_TRUE(validate_link_offer(m).is_ok());
}

TEST(LinkFrame, EachTypeRoundTripsWithEveryPrefixIncomplete) {
  const std::vector<std::vector<uint8_t>> frames = {
      frame(LinkFrameType::kGoodbye, 0x01020304, {}),
      frame(LinkFrameType::kNotice, 7, notice_bytes("watchdog: no completion on qpn 12")),
      frame(LinkFrameType::kPath, 0xffffffff, path_bytes(checked_msg())),
      frame(LinkFrameType::kHello, 11, std::vector<uint8_t>(kLinkHsMaxPayload, 0x3c)),
      frame(LinkFrameType::kHsReply, 12, std::vector<uint8_t>(sizeof(Meta), 0x5d)),
      frame(LinkFrameType::kHsReady, 13, {})};
  for (const auto& f : frames) {
    ASSERT_GE(f.size(), kLinkFrameHeaderBytes);
    for (size_t n = 0; n < f.size(); ++n) {
      LinkFrame out;
      std::string why;
      size_t used = 0;
      EXPECT_EQ(decode_link_frame(f.data(), n, &out, &why, &used), LinkParse::kIncomplete)
          << "prefix " << n << " of " << f.size() << ": " << why;
    }
    // Two frames back to back: the first is read alone.
    std::vector<uint8_t> two = f;
    two.insert(two.end(), f.begin(), f.end());
    LinkFrame out;
    std::string why;
    size_t used = 0;
    ASSERT_EQ(decode_link_frame(two.data(), two.size(), &out, &why, &used), LinkParse::kOk) << why;
    EXPECT_EQ(used, f.size());
    EXPECT_FALSE(out.bad) << out.text;
  }
  LinkFrame out;
  std::string why;
  size_t used = 0;
  ASSERT_EQ(decode_link_frame(frames[0].data(), frames[0].size(), &out, &why, &used),
            LinkParse::kOk);
  EXPECT_EQ(out.type, LinkFrameType::kGoodbye);
  EXPECT_EQ(out.chan, 0x01020304u);
  ASSERT_EQ(decode_link_frame(frames[1].data(), frames[1].size(), &out, &why, &used),
            LinkParse::kOk);
  EXPECT_EQ(out.type, LinkFrameType::kNotice);
  EXPECT_EQ(out.chan, 7u);
  EXPECT_EQ(out.text, "watchdog: no completion on qpn 12");
  ASSERT_EQ(decode_link_frame(frames[2].data(), frames[2].size(), &out, &why, &used),
            LinkParse::kOk);
  EXPECT_EQ(out.type, LinkFrameType::kPath);
  EXPECT_EQ(out.chan, 0xffffffffu);
  EXPECT_EQ(out.path.type, PathMsgType::kChecked);
  EXPECT_EQ(out.path.path, 1);
  EXPECT_EQ(out.path.epoch, 9u);
  // A handshake's parts travel as bytes, whole, for connect/ to read (the hello names its sender).
  ASSERT_EQ(decode_link_frame(frames[3].data(), frames[3].size(), &out, &why, &used),
            LinkParse::kOk);
  EXPECT_EQ(out.type, LinkFrameType::kHello);
  EXPECT_EQ(out.chan, 11u);
  EXPECT_EQ(out.bytes, std::vector<uint8_t>(kLinkHsMaxPayload, 0x3c));
  ASSERT_EQ(decode_link_frame(frames[4].data(), frames[4].size(), &out, &why, &used),
            LinkParse::kOk);
  EXPECT_EQ(out.type, LinkFrameType::kHsReply);
  EXPECT_EQ(out.bytes.size(), sizeof(Meta));
  ASSERT_EQ(decode_link_frame(frames[5].data(), frames[5].size(), &out, &why, &used),
            LinkParse::kOk);
  EXPECT_EQ(out.type, LinkFrameType::kHsReady);
  EXPECT_TRUE(out.bytes.empty());
}

TEST(LinkFrame, ABadHeaderEndsTheLinkWithAReason) {
  const std::vector<uint8_t> good = frame(LinkFrameType::kGoodbye, 3, {});
  struct Bad {
    const char* what;
    size_t at;
    uint8_t value;
    const char* says;
  };
  for (const Bad& b : {Bad{"magic", 0, 0xb7, "starts no link frame"},
                       Bad{"type 0", 1, 0, "unknown type 0"}, Bad{"type 7", 1, 7, "unknown type 7"},
                       Bad{"goodbye with a payload", 2, 1, "payload of 1 bytes"},
                       Bad{"channel 0", 4, 0, "channel 0"}}) {
    std::vector<uint8_t> f = good;
    f[b.at] = b.value;
    if (b.at == 4) f[5] = f[6] = f[7] = 0;
    LinkFrame out;
    std::string why;
    size_t used = 0;
    EXPECT_EQ(decode_link_frame(f.data(), f.size(), &out, &why, &used), LinkParse::kBad) << b.what;
    EXPECT_NE(why.find(b.says), std::string::npos) << b.what << ": " << why;
  }
  // A payload longer than any frame may carry.
  std::vector<uint8_t> f = good;
  f[1] = static_cast<uint8_t>(LinkFrameType::kNotice);
  f[2] = 0xff;
  f[3] = 0xff;
  LinkFrame out;
  std::string why;
  size_t used = 0;
  EXPECT_EQ(decode_link_frame(f.data(), f.size(), &out, &why, &used), LinkParse::kBad);
  EXPECT_NE(why.find("65535"), std::string::npos) << why;
  // The encoder refuses what the decoder would.
  uint8_t buf[kLinkFrameMaxBytes];
  const uint8_t one = 1;
  EXPECT_EQ(encode_link_frame(LinkFrameType::kGoodbye, 3, &one, 1, buf), 0u);
  std::vector<uint8_t> big(kLinkFrameMaxPayload + 1, 0);
  EXPECT_EQ(encode_link_frame(LinkFrameType::kNotice, 3, big.data(), big.size(), buf), 0u);
  // A ready mark has no payload; a hello or reply has one, at most the handshake's parts.
  EXPECT_EQ(encode_link_frame(LinkFrameType::kHsReady, 3, &one, 1, buf), 0u);
  EXPECT_EQ(encode_link_frame(LinkFrameType::kHello, 3, nullptr, 0, buf), 0u);
  for (const auto& [what, type, len] :
       {std::tuple{"ready with a payload", LinkFrameType::kHsReady, size_t{1}},
        std::tuple{"empty hello", LinkFrameType::kHello, size_t{0}},
        std::tuple{"empty reply", LinkFrameType::kHsReply, size_t{0}}}) {
    std::vector<uint8_t> g = good;
    g[1] = static_cast<uint8_t>(type);
    g[2] = static_cast<uint8_t>(len);
    g.resize(kLinkFrameHeaderBytes + len, 0);
    EXPECT_EQ(decode_link_frame(g.data(), g.size(), &out, &why, &used), LinkParse::kBad) << what;
  }
}

TEST(LinkFrame, AHandshakesPartsAreTakenInOrderAndExactly) {
  std::vector<uint8_t> b(12);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i);
  HsParts parts(b);
  uint32_t a = 0;
  uint8_t rest[8] = {};
  ASSERT_TRUE(parts.take(&a, sizeof a));
  EXPECT_EQ(a, 0x03020100u);
  EXPECT_FALSE(parts.done());
  uint8_t too_many[9];
  EXPECT_FALSE(parts.take(too_many, sizeof too_many)) << "8 bytes are left, not 9";
  ASSERT_TRUE(parts.take(rest, sizeof rest)) << "a refused take consumes nothing";
  EXPECT_EQ(rest[7], 11);
  EXPECT_TRUE(parts.done());
  EXPECT_FALSE(parts.take(&a, 1));
}

TEST(LinkFrame, ABadNoticeOrPathMessageConcernsItsChannelOnly) {
  std::vector<uint8_t> n = notice_bytes("reason");
  n[n.size() - 1] ^= 0x5a;  // its checksum
  std::vector<uint8_t> p = path_bytes(checked_msg());
  p[p.size() - 1] ^= 0x5a;
  std::vector<uint8_t> short_notice = notice_bytes("reason");
  short_notice.pop_back();  // the frame's length ends inside the notice
  for (const auto& [what, f] :
       {std::pair{"notice checksum", frame(LinkFrameType::kNotice, 9, n)},
        std::pair{"path checksum", frame(LinkFrameType::kPath, 9, p)},
        std::pair{"notice cut short", frame(LinkFrameType::kNotice, 9, short_notice)},
        std::pair{"a path message in a notice frame",
                  frame(LinkFrameType::kNotice, 9, path_bytes(checked_msg()))}}) {
    LinkFrame out;
    std::string why;
    size_t used = 0;
    ASSERT_EQ(decode_link_frame(f.data(), f.size(), &out, &why, &used), LinkParse::kOk) << what;
    EXPECT_TRUE(out.bad) << what;
    EXPECT_FALSE(out.text.empty()) << what;
    EXPECT_EQ(out.chan, 9u) << what;
    EXPECT_EQ(used, f.size()) << what << ": the next frame is read after it";
  }
}

}  // namespace
}  // namespace sluice::wire
