#include "sluice/core/wire/link.h"

#include <cstring>

namespace sluice::wire {

namespace {

bool zero_proc(const Nonce& n) {
  uint8_t any = 0;
  for (uint8_t b : n.bytes) any |= b;
  return any == 0;
}

bool no_payload(LinkFrameType t) {
  return t == LinkFrameType::kGoodbye || t == LinkFrameType::kHsReady;
}

bool carries_hs(LinkFrameType t) {
  return t == LinkFrameType::kHello || t == LinkFrameType::kHsReply;
}

}  // namespace

void put_handle_link(void* handle, const Nonce& proc, uint8_t flags) {
  HandleLink hl{};
  hl.magic = kHandleLinkMagic;
  hl.version = kHandleLinkVersion;
  hl.flags = flags;
  hl.proc = proc;
  std::memcpy(static_cast<uint8_t*>(handle) + kHandleLinkOffset, &hl, sizeof hl);
}

bool handle_link(const void* handle, Nonce* proc, uint8_t* flags) {
  HandleLink hl;
  std::memcpy(&hl, static_cast<const uint8_t*>(handle) + kHandleLinkOffset, sizeof hl);
  if (hl.magic != kHandleLinkMagic || hl.version != kHandleLinkVersion || zero_proc(hl.proc))
    return false;
  *proc = hl.proc;
  if (flags != nullptr) *flags = hl.flags;
  return true;
}

MetaLink make_meta_link(const Nonce& proc, uint8_t verdict, uint64_t link_id, uint8_t end_role,
                        uint32_t chan) {
  MetaLink m{};
  m.magic = kMetaLinkMagic;
  m.version = kMetaLinkVersion;
  m.verdict = verdict;
  m.end_role = end_role;
  m.proc = proc;
  m.link_id = link_id;
  m.chan = chan;
  return m;
}

namespace {

Status common_checks(const MetaLink& m, const char* whose) {
  if (m.magic != kMetaLinkMagic)
    return Status(Code::kRemoteError, std::string(whose) + " link extension has a bad magic");
  if (m.version != kMetaLinkVersion) {
    return Status(Code::kRemoteError, std::string(whose) + " link extension is version " +
                                          std::to_string(m.version) + " (this Sluice speaks " +
                                          std::to_string(kMetaLinkVersion) + ")");
  }
  if (m.chan == 0)
    return Status(Code::kRemoteError, std::string(whose) + " link extension names channel 0");
  if (zero_proc(m.proc))
    return Status(Code::kRemoteError, std::string(whose) + " link extension names no process");
  return Status::ok();
}

}  // namespace

Status validate_link_offer(const MetaLink& m) {
  SLUICE_RETURN_IF_ERROR(common_checks(m, "the connector's"));
  if (m.verdict != kLinkOffer) {
    return Status(Code::kRemoteError, "the connector's link extension is not an offer (verdict " +
                                          std::to_string(m.verdict) + ")");
  }
  if (m.end_role > kLinkEndAcceptor) {
    return Status(Code::kRemoteError,
                  "the connector's link extension names end role " + std::to_string(m.end_role));
  }
  return Status::ok();
}

Status validate_link_answer(const MetaLink& m, uint64_t offered, const Nonce& listener,
                            bool takes_theirs) {
  SLUICE_RETURN_IF_ERROR(common_checks(m, "the listener's"));
  if (!same_nonce(m.proc, listener)) {
    return Status(Code::kRemoteError,
                  "the listener's link extension names another process than its handle");
  }
  if (m.verdict == kLinkUse && offered == 0 && takes_theirs) {  // a link of the listener's choice
    if (m.link_id == 0) return Status(Code::kRemoteError, "the listener named link id 0 to use");
    if (m.end_role > kLinkEndAcceptor) {
      return Status(Code::kRemoteError,
                    "the listener's link extension names end role " + std::to_string(m.end_role));
    }
    return Status::ok();
  }
  if (m.verdict == kLinkUse) {
    if (offered == 0 || m.link_id != offered) {
      return Status(Code::kRemoteError,
                    "the listener answered to use a link this connector did not offer");
    }
    return Status::ok();
  }
  if (m.verdict == kLinkAdopt) {
    if (m.link_id == 0) return Status(Code::kRemoteError, "the listener's new link has id 0");
    return Status::ok();
  }
  return Status(Code::kRemoteError,
                "the listener's link extension has verdict " + std::to_string(m.verdict));
}

size_t encode_link_frame(LinkFrameType t, uint32_t chan, const uint8_t* payload, size_t n,
                         uint8_t* out) {
  if (n > kLinkFrameMaxPayload || (no_payload(t) && n != 0) || (carries_hs(t) && n == 0)) return 0;
  out[0] = kLinkFrameMagic;
  out[1] = static_cast<uint8_t>(t);
  out[2] = static_cast<uint8_t>(n & 0xff);
  out[3] = static_cast<uint8_t>(n >> 8);
  for (int i = 0; i < 4; ++i) out[4 + i] = static_cast<uint8_t>(chan >> (8 * i));
  if (n > 0) std::memcpy(out + kLinkFrameHeaderBytes, payload, n);
  return kLinkFrameHeaderBytes + n;
}

LinkParse decode_link_frame(const uint8_t* p, size_t n, LinkFrame* out, std::string* why,
                            size_t* used) {
  if (n == 0) return LinkParse::kIncomplete;
  if (p[0] != kLinkFrameMagic) {
    *why = "a byte that starts no link frame";
    return LinkParse::kBad;
  }
  if (n >= 2 &&
      (p[1] < static_cast<uint8_t>(LinkFrameType::kGoodbye) || p[1] > kLinkFrameTypeLast)) {
    *why = "a link frame of unknown type " + std::to_string(p[1]);
    return LinkParse::kBad;
  }
  if (n < kLinkFrameHeaderBytes) return LinkParse::kIncomplete;
  const auto type = static_cast<LinkFrameType>(p[1]);
  const size_t len = static_cast<size_t>(p[2]) | static_cast<size_t>(p[3]) << 8;
  if (len > kLinkFrameMaxPayload || (no_payload(type) && len != 0) ||
      (carries_hs(type) && (len == 0 || len > kLinkHsMaxPayload))) {
    *why = "a link frame with a payload of " + std::to_string(len) + " bytes";
    return LinkParse::kBad;
  }
  uint32_t chan = 0;
  for (int i = 0; i < 4; ++i) chan |= static_cast<uint32_t>(p[4 + i]) << (8 * i);
  if (chan == 0) {
    *why = "a link frame for channel 0";
    return LinkParse::kBad;
  }
  if (n < kLinkFrameHeaderBytes + len) return LinkParse::kIncomplete;
  *out = LinkFrame{};
  out->type = type;
  out->chan = chan;
  const uint8_t* body = p + kLinkFrameHeaderBytes;
  size_t got = 0;
  std::string text;
  switch (type) {
    case LinkFrameType::kGoodbye:
    case LinkFrameType::kHsReady:
      break;
    case LinkFrameType::kHello:
    case LinkFrameType::kHsReply:
      out->bytes.assign(body, body + len);  // the handshake's parts: connect/ reads them
      break;
    case LinkFrameType::kNotice: {
      const NoticeParse r = len > 0 && body[0] == kNoticeMagic
                                ? decode_notice(body, len, &text, &got)
                                : NoticeParse::kBad;
      if (r == NoticeParse::kOk && got == len) {
        out->text = text;
      } else {
        out->bad = true;
        out->text = r == NoticeParse::kBad ? "a failure notice: " + text
                                           : "a failure notice cut short inside its frame";
      }
      break;
    }
    case LinkFrameType::kPath: {
      std::string w;
      const PathMsgParse r = len > 0 && body[0] == kPathMsgMagic
                                 ? decode_path_msg(body, len, &out->path, &w, &got)
                                 : PathMsgParse::kBad;
      if (r != PathMsgParse::kOk || got != len) {
        out->bad = true;
        out->text = r == PathMsgParse::kBad ? "a path message: " + w
                                            : "a path message cut short inside its frame";
      }
      break;
    }
  }
  *used = kLinkFrameHeaderBytes + len;
  return LinkParse::kOk;
}

}  // namespace sluice::wire
