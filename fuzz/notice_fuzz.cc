// The failure notice a peer sends on the kept out-of-band socket (wire.h encode_notice /
// decode_notice) and the socket's grammar around it (liveness.h feed_peer_bytes), over any bytes.
// Contract:
//  * decode_notice on every prefix: once a prefix is refused (kBad) every longer one is too; a
//    prefix of an accepted notice is kIncomplete; an accepted notice is at most kNoticeMaxBytes,
//    its text is 1..kNoticeMaxText printable bytes, and encoding that text again gives the same
//    bytes (version 1) - so a reason is quoted exactly as the peer sent it;
//  * feed_peer_bytes, with the input cut into pieces at the first byte's choice, reaches the same
//    verdict and text as feeding it whole, never keeps more than kNoticeMaxBytes, and answers
//    kNotice only with the decoder's text;
//  * decode_path_msg (path_msg.h, failover's messages on the same socket) on every prefix: the
//    same prefix rules as the notice; an accepted message is at most kPathMsgMaxBytes, its path,
//    QP count and (offer, answer) QP numbers and PSNs are in range, and a version-1 message
//    encodes again to the same bytes;
//  * decode_link_frame (link.h, the peer link's frames) on every prefix: the same prefix rules; an
//    accepted frame is a header and its stated payload for a non-zero channel, and a frame whose
//    payload was not refused encodes again to the same bytes (a handshake's frame carries its
//    payload as bytes, whole).
#include <algorithm>
#include <cstring>
#include <string>

#include "fuzz_check.h"
#include "health/liveness.h"
#include "sluice/core/wire/link.h"
#include "sluice/core/wire/path_msg.h"
#include "sluice/core/wire/wire.h"

using namespace sluice;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t cut = data[0];  // piece size for the split feed (1..16)
  const uint8_t* p = data + 1;
  const size_t n = size - 1;

  bool refused = false;
  size_t accepted_at = 0;
  std::string accepted_text;
  for (size_t k = 0; k <= std::min(n, wire::kNoticeMaxBytes + 8); ++k) {
    std::string text;
    size_t used = 0;
    const wire::NoticeParse r = wire::decode_notice(p, k, &text, &used);
    FUZZ_CHECK(!refused || r == wire::NoticeParse::kBad, "prefix %zu accepted after a refusal", k);
    if (r == wire::NoticeParse::kBad) {
      FUZZ_CHECK(!text.empty(), "refusal without a reason");
      FUZZ_CHECK(used == 0, "refused but used %zu", used);
      refused = true;
    } else if (r == wire::NoticeParse::kOk) {
      FUZZ_CHECK(used <= k && used <= wire::kNoticeMaxBytes, "used %zu of %zu", used, k);
      FUZZ_CHECK(!text.empty() && text.size() <= wire::kNoticeMaxText, "text of %zu bytes",
                 text.size());
      for (char ch : text) FUZZ_CHECK(ch >= 0x20 && ch < 0x7f, "unprintable byte %d", ch);
      if (accepted_at == 0) {
        accepted_at = used;
        accepted_text = text;
        FUZZ_CHECK(used == k, "a notice accepted before its last byte (%zu < %zu)", used, k);
        if (p[1] == wire::kNoticeVersion) {
          uint8_t again[wire::kNoticeMaxBytes];
          const size_t m = wire::encode_notice(text, again);
          FUZZ_CHECK(m == used && std::memcmp(again, p, m) == 0, "re-encoding differs");
        }
      }
      FUZZ_CHECK(used == accepted_at && text == accepted_text, "longer input changed the notice");
    } else {
      FUZZ_CHECK(accepted_at == 0 && !refused, "incomplete after a verdict at %zu", k);
    }
  }

  // Failover's path messages.
  {
    bool pm_refused = false;
    size_t pm_at = 0;
    for (size_t k = 0; k <= std::min(n, wire::kPathMsgMaxBytes + 8); ++k) {
      wire::PathMsg m;
      std::string why;
      size_t used = 0;
      const wire::PathMsgParse r = wire::decode_path_msg(p, k, &m, &why, &used);
      FUZZ_CHECK(!pm_refused || r == wire::PathMsgParse::kBad,
                 "path msg prefix %zu after a refusal", k);
      if (r == wire::PathMsgParse::kBad) {
        FUZZ_CHECK(!why.empty() && used == 0, "path msg refusal: reason %zu, used %zu", why.size(),
                   used);
        pm_refused = true;
      } else if (r == wire::PathMsgParse::kOk) {
        FUZZ_CHECK(used <= k && used <= wire::kPathMsgMaxBytes, "path msg used %zu of %zu", used,
                   k);
        FUZZ_CHECK(m.path < wire::kMaxMetaMembers && m.nqps >= 1 && m.nqps <= wire::kMaxQps,
                   "path %u, %u QPs", m.path, m.nqps);
        if (wire::path_msg_has_qps(m.type)) {
          for (int q = 0; q < m.nqps; ++q)
            FUZZ_CHECK(m.qps[q].qpn > 0 && m.qps[q].qpn < (1u << 24) && m.qps[q].psn < (1u << 24),
                       "QP %d: qpn %u psn %u", q, m.qps[q].qpn, m.qps[q].psn);
        }
        if (pm_at == 0) {
          pm_at = used;
          FUZZ_CHECK(used == k, "a path msg accepted before its last byte");
          if (p[1] == wire::kPathMsgVersion) {
            uint8_t again[wire::kPathMsgMaxBytes];
            const size_t e = wire::encode_path_msg(m, again);
            FUZZ_CHECK(e == used && std::memcmp(again, p, e) == 0, "path msg re-encoding differs");
          }
        }
        FUZZ_CHECK(used == pm_at, "a longer input changed the path msg");
      } else {
        FUZZ_CHECK(pm_at == 0 && !pm_refused, "path msg incomplete after a verdict at %zu", k);
      }
    }
  }

  // The peer link's frames (link.h), on the same bytes: the prefix rules again; an accepted frame
  // is its header plus its stated payload, at most kLinkFrameMaxBytes, for a channel other than 0;
  // a payload refused inside a good frame says why; a good one encodes again to the same bytes.
  {
    bool lf_refused = false;
    size_t lf_at = 0;
    for (size_t k = 0; k <= std::min(n, wire::kLinkFrameMaxBytes + 8); ++k) {
      wire::LinkFrame f;
      std::string why;
      size_t used = 0;
      const wire::LinkParse r = wire::decode_link_frame(p, k, &f, &why, &used);
      FUZZ_CHECK(!lf_refused || r == wire::LinkParse::kBad, "link frame prefix %zu after a refusal",
                 k);
      if (r == wire::LinkParse::kBad) {
        FUZZ_CHECK(!why.empty(), "link frame refused without a reason");
        lf_refused = true;
      } else if (r == wire::LinkParse::kOk) {
        FUZZ_CHECK(
            used >= wire::kLinkFrameHeaderBytes && used <= k && used <= wire::kLinkFrameMaxBytes,
            "link frame used %zu of %zu", used, k);
        FUZZ_CHECK(f.chan != 0, "a frame for channel 0");
        FUZZ_CHECK(!f.bad || !f.text.empty(), "a payload refused without a reason");
        if (f.type == wire::LinkFrameType::kHello || f.type == wire::LinkFrameType::kHsReply) {
          const size_t len = used - wire::kLinkFrameHeaderBytes;
          FUZZ_CHECK(len > 0 && len <= wire::kLinkHsMaxPayload && f.bytes.size() == len &&
                         std::memcmp(f.bytes.data(), p + wire::kLinkFrameHeaderBytes, len) == 0,
                     "a handshake frame's bytes are not its payload");
        } else {
          FUZZ_CHECK(f.bytes.empty(), "bytes on a frame that carries no handshake");
        }
        if (lf_at == 0) {
          lf_at = used;
          FUZZ_CHECK(used == k, "a link frame accepted before its last byte");
          if (!f.bad) {
            uint8_t again[wire::kLinkFrameMaxBytes];
            const size_t e =
                wire::encode_link_frame(f.type, f.chan, p + wire::kLinkFrameHeaderBytes,
                                        used - wire::kLinkFrameHeaderBytes, again);
            FUZZ_CHECK(e == used && std::memcmp(again, p, e) == 0,
                       "link frame re-encoding differs");
          }
        }
        FUZZ_CHECK(used == lf_at, "a longer input changed the link frame");
      } else {
        FUZZ_CHECK(lf_at == 0 && !lf_refused, "link frame incomplete after a verdict at %zu", k);
      }
    }
  }

  // The socket's grammar, whole and in pieces.
  uint8_t rx1[wire::kNoticeMaxBytes], rx2[wire::kNoticeMaxBytes];
  uint16_t len1 = 0, len2 = 0;
  std::string t1, t2;
  const SocketSeen whole = n > 0 ? feed_peer_bytes(rx1, &len1, p, n, &t1) : SocketSeen::kNothing;
  SocketSeen split = SocketSeen::kNothing;
  bool goodbye = false;
  const size_t piece = 1 + cut % 16;
  for (size_t at = 0; at < n; at += piece) {
    split = feed_peer_bytes(rx2, &len2, p + at, std::min(piece, n - at), &t2);
    FUZZ_CHECK(len2 <= wire::kNoticeMaxBytes, "kept %u bytes", len2);
    if (split == SocketSeen::kGoodbye) goodbye = true;
    if (split == SocketSeen::kNotice || split == SocketSeen::kBadNotice ||
        split == SocketSeen::kGarbage)
      break;
  }
  if (split == SocketSeen::kNothing && goodbye) split = SocketSeen::kGoodbye;
  const bool final_whole = whole == SocketSeen::kNotice || whole == SocketSeen::kBadNotice ||
                           whole == SocketSeen::kGarbage;
  if (final_whole) {
    // A goodbye byte then notice bytes across two reads may be taken as a late notice: the
    // verdict may differ only there (both fail the comm).
    if (whole == split) FUZZ_CHECK(whole != SocketSeen::kNotice || t1 == t2, "texts differ");
  }
  if (whole == SocketSeen::kNotice) {
    FUZZ_CHECK(p[0] == wire::kNoticeMagic || p[0] == kGoodbyeByte, "notice from byte %d", p[0]);
    FUZZ_CHECK(!t1.empty() && t1.size() <= wire::kNoticeMaxText, "notice text %zu", t1.size());
  }
  return 0;
}
