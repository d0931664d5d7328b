// Path control messages (sluice/core/wire/path_msg.h): encoding and strict decoding.
#include "sluice/core/wire/path_msg.h"

#include <cstring>
#include <type_traits>

namespace sluice::wire {
namespace {

void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void put32(uint8_t* p, uint32_t v) {
  for (int k = 0; k < 4; ++k) p[k] = static_cast<uint8_t>(v >> (8 * k));
}
void put64(uint8_t* p, uint64_t v) {
  for (int k = 0; k < 8; ++k) p[k] = static_cast<uint8_t>(v >> (8 * k));
}
uint16_t get16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
uint32_t get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int k = 0; k < 4; ++k) v |= static_cast<uint32_t>(p[k]) << (8 * k);
  return v;
}
uint64_t get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int k = 0; k < 8; ++k) v |= static_cast<uint64_t>(p[k]) << (8 * k);
  return v;
}

bool known(uint8_t t) {
  return t >= static_cast<uint8_t>(PathMsgType::kFence) &&
         t <= static_cast<uint8_t>(PathMsgType::kChecked);
}

constexpr uint32_t k24 = 1u << 24;

// What makes an offer's or answer's address and QPs unusable ("" = fine).
std::string bad_address(const PathMsg& m) {
  const MemberInfo& e = m.member;
  if (e.mtu < 1 || e.mtu > 5) return "an invalid path MTU code " + std::to_string(e.mtu);
  if (e.link_layer != 1 && e.link_layer != 2)
    return "an unknown link layer " + std::to_string(e.link_layer);
  if (e.reserved != 0) return "non-zero reserved bytes in its address";
  for (int q = 0; q < m.nqps; ++q) {
    if (m.qps[q].qpn == 0 || m.qps[q].qpn >= k24)
      return "QP " + std::to_string(q) + " with QP number " + std::to_string(m.qps[q].qpn);
    if (m.qps[q].psn >= k24)
      return "QP " + std::to_string(q) + " with a PSN of " + std::to_string(m.qps[q].psn) +
             " (24 bits)";
  }
  return "";
}

}  // namespace

const char* path_msg_type_name(PathMsgType t) {
  switch (t) {
    case PathMsgType::kFence:
      return "fence";
    case PathMsgType::kOffer:
      return "recovery offer";
    case PathMsgType::kAnswer:
      return "recovery answer";
    case PathMsgType::kChecked:
      return "path checked";
  }
  return "unknown";
}

size_t path_msg_body_bytes(PathMsgType type, int nqps) {
  const size_t n = static_cast<size_t>(nqps);
  if (type == PathMsgType::kFence) return 8 * n + 8;
  return path_msg_has_qps(type) ? sizeof(MemberInfo) + sizeof(PathQp) * n : 0;
}

size_t encode_path_msg(const PathMsg& m, uint8_t* out) {
  if (!known(static_cast<uint8_t>(m.type)) || m.path >= kMaxMetaMembers || m.nqps < 1 ||
      m.nqps > kMaxQps)
    return 0;
  if (path_msg_has_qps(m.type) && !bad_address(m).empty()) return 0;
  if (m.type == PathMsgType::kFence && (m.sub > kMaxMetaMembers || m.sub == m.path + 1)) return 0;
  const size_t b = path_msg_body_bytes(m.type, m.nqps);
  out[0] = kPathMsgMagic;
  out[1] = kPathMsgVersion;
  out[2] = static_cast<uint8_t>(m.type);
  out[3] = m.path;
  put32(out + 4, m.epoch);
  out[8] = m.nqps;
  out[9] = m.type == PathMsgType::kFence ? m.sub : 0;
  put16(out + 10, static_cast<uint16_t>(b));
  uint8_t* body = out + kPathMsgHeaderBytes;
  if (m.type == PathMsgType::kFence) {
    for (int q = 0; q < m.nqps; ++q) put64(body + 8 * q, m.last_seq[q]);
    put64(body + 8 * m.nqps, m.from_seq);
  } else if (path_msg_has_qps(m.type)) {
    static_assert(std::is_trivially_copyable_v<MemberInfo>);
    std::memcpy(body, &m.member, sizeof m.member);  // its fields are little-endian on the hosts
    for (int q = 0; q < m.nqps; ++q) {
      put32(body + sizeof(MemberInfo) + 8 * q, m.qps[q].qpn);
      put32(body + sizeof(MemberInfo) + 8 * q + 4, m.qps[q].psn);
    }
  }
  put32(body + b, fnv1a32(out, kPathMsgHeaderBytes + b));
  return kPathMsgHeaderBytes + b + 4;
}

PathMsgParse decode_path_msg(const uint8_t* p, size_t n, PathMsg* out, std::string* why,
                             size_t* used) {
  *used = 0;
  auto bad = [&](std::string w) {
    *why = "path message " + w;
    return PathMsgParse::kBad;
  };
  if (n == 0) return PathMsgParse::kIncomplete;
  if (p[0] != kPathMsgMagic) return bad("expected, first byte " + std::to_string(p[0]));
  if (n < 2) return PathMsgParse::kIncomplete;
  if (p[1] == 0) return bad("of version 0");
  if (n < 3) return PathMsgParse::kIncomplete;
  if (!known(p[2])) return bad("of unknown type " + std::to_string(p[2]));
  if (n < 4) return PathMsgParse::kIncomplete;
  if (p[3] >= kMaxMetaMembers)
    return bad("for path " + std::to_string(p[3]) + " (a comm has at most " +
               std::to_string(kMaxMetaMembers) + ")");
  if (n < 9) return PathMsgParse::kIncomplete;
  if (p[8] < 1 || p[8] > kMaxQps)
    return bad("with " + std::to_string(p[8]) + " QPs (1.." + std::to_string(kMaxQps) + ")");
  if (n < 10) return PathMsgParse::kIncomplete;
  // [9]: a FENCE's substitute path + 1 (0: none); zero in the other types.
  if (p[1] == kPathMsgVersion && (static_cast<PathMsgType>(p[2]) == PathMsgType::kFence
                                      ? p[9] > kMaxMetaMembers || p[9] == p[3] + 1
                                      : p[9] != 0))
    return bad("with a bad substitute path byte " + std::to_string(p[9]));
  if (n < kPathMsgHeaderBytes) return PathMsgParse::kIncomplete;
  const auto type = static_cast<PathMsgType>(p[2]);
  const size_t b = get16(p + 10);
  const size_t need = path_msg_body_bytes(type, p[8]);
  if (b < need || (p[1] == kPathMsgVersion && b != need) ||
      kPathMsgHeaderBytes + b + 4 > kPathMsgMaxBytes)
    return bad("(" + std::string(path_msg_type_name(type)) + ") with a body of " +
               std::to_string(b) + " bytes, expected " + std::to_string(need));
  const size_t total = kPathMsgHeaderBytes + b + 4;
  if (n < total) return PathMsgParse::kIncomplete;
  if (get32(p + kPathMsgHeaderBytes + b) != fnv1a32(p, kPathMsgHeaderBytes + b))
    return bad("with a bad checksum (corrupt)");
  PathMsg m;
  m.type = type;
  m.path = p[3];
  m.epoch = get32(p + 4);
  m.nqps = p[8];
  const uint8_t* body = p + kPathMsgHeaderBytes;
  if (type == PathMsgType::kFence) {
    // A later version's [9] is its own: only a version-1 substitute is read.
    m.sub = p[1] == kPathMsgVersion ? p[9] : 0;
    for (int q = 0; q < m.nqps; ++q) m.last_seq[q] = get64(body + 8 * q);
    m.from_seq = get64(body + 8 * m.nqps);
  } else if (path_msg_has_qps(type)) {
    std::memcpy(&m.member, body, sizeof m.member);
    for (int q = 0; q < m.nqps; ++q) {
      m.qps[q].qpn = get32(body + sizeof(MemberInfo) + 8 * q);
      m.qps[q].psn = get32(body + sizeof(MemberInfo) + 8 * q + 4);
    }
    if (std::string w = bad_address(m); !w.empty())
      return bad("(" + std::string(path_msg_type_name(type)) + ") with " + w);
  }
  *out = m;
  *used = total;
  return PathMsgParse::kOk;
}

}  // namespace sluice::wire
