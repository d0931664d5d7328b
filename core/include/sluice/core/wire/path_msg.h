// Path control messages: what the two ends of a multi-path comm tell each other on the comm's
// kept out-of-band socket when one of its paths fails and when it comes back (failover, issue 20;
// the state machine that sends and takes them is core/src/health/failover.h). They travel beside
// the failure notice (wire.h) and are checksummed the same way. Layout, little-endian:
//   [0] kPathMsgMagic  [1] version  [2] type  [3] path (< kMaxMetaMembers)
//   [4..8) epoch: the path's incarnation (0 at connect, +1 at each recovery attempt)
//   [8] nqps (1..kMaxQps): the path's QPs   [9] kFence: the substitute path + 1 (0: none; never
//   the path itself), else 0   [10..12) body bytes b
//   [12 .. 12+b) the body   [12+b .. 16+b) FNV-1a-32 of every byte before it
// Bodies (version 1):
//   kFence   nqps x u64: for each of the path's QPs, how many closing immediates this side
//            polled on it since the comm connected (the receiver), or how many chains it posted
//            there (the sender). Sent only once this side's QPs of the path are in ERROR and
//            their drain markers have flushed: from then on the path can place no byte in this
//            side's memory (health/failover.h argues the fence). The receiver's names the
//            substitute path ([9]) on which it has posted the receive WRs of every close the
//            path still owes: the sender replays and redirects the path's chains there. Then one
//            u64: the receiver's first receive whose paths leave the failed path out (every later
//            one does, until the path is back); the sender's is 0. The sender offers a recovery
//            only once it consumed every receive before it: none in flight names the old path.
//   kOffer   a MemberInfo (the member's address, GID re-read after the flap) then nqps x
//   kAnswer  {u32 qpn, u32 psn}: the fresh QPs of a recovery attempt; the offer starts the
//            attempt (its epoch is the new incarnation), the answer accepts it with the other
//            side's QPs.
//   kChecked no body: the sender's zero-byte check completed on every fresh QP of the path's
//            epoch, so the path works both ways (the check's immediate proves only sender to
//            receiver; its completion needs the receiver's ACK). The receiver puts the path back
//            in its receives only on this word and its own check immediates.
// A later version may append body bytes (b above its type's size, up to kPathMsgMaxBytes in all)
// inside the checksum; a version-1 reader takes the part it knows. An unknown type is refused:
// the comm then fails as a protocol mismatch, never waits. A peer that speaks no path messages
// never gets one (the metadata's feature bit says who does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "sluice/core/wire/wire.h"

namespace sluice::wire {

inline constexpr uint8_t kPathMsgMagic =
    0xf3;  // not the goodbye (0xb7), ready (0x5a), notice (0xf7)
inline constexpr uint8_t kPathMsgVersion = 1;
inline constexpr size_t kPathMsgHeaderBytes = 12;
inline constexpr size_t kPathMsgMaxBytes = 256;  // any version: what a reader may have to hold
// The shortest message of any version (a header and the checksum: CHECKED): a reader that takes
// n bytes completes at most ceil(n / kPathMsgMinBytes) messages (liveness.cc's backpressure).
inline constexpr size_t kPathMsgMinBytes = kPathMsgHeaderBytes + 4;
inline constexpr uint64_t kNoSeq = ~uint64_t{0};

enum class PathMsgType : uint8_t { kFence = 1, kOffer = 2, kAnswer = 3, kChecked = 4 };
// Offers and answers carry an address and QPs; the others do not.
inline bool path_msg_has_qps(PathMsgType t) {
  return t == PathMsgType::kOffer || t == PathMsgType::kAnswer;
}

struct PathQp {
  uint32_t qpn = 0;  // 1 .. 2^24 - 1
  uint32_t psn = 0;  // < 2^24
};

struct PathMsg {
  PathMsgType type = PathMsgType::kFence;
  uint8_t path = 0;
  uint32_t epoch = 0;
  uint8_t nqps = 0;
  uint8_t sub = 0;                  // kFence: substitute path + 1 (0: none)
  uint64_t last_seq[kMaxQps] = {};  // kFence: closes polled (receiver) / chains posted (sender)
  uint64_t from_seq = 0;            // kFence: the receiver's first receive without the path
  MemberInfo member = {};           // kOffer, kAnswer (path_msg_has_qps)
  PathQp qps[kMaxQps] = {};         // kOffer, kAnswer
};

// The body size of version 1 for a type and QP count.
size_t path_msg_body_bytes(PathMsgType type, int nqps);
static_assert(kPathMsgHeaderBytes + sizeof(MemberInfo) + sizeof(PathQp) * kMaxQps + 4 <=
                  kPathMsgMaxBytes,
              "the largest version-1 message fits what a reader holds");
static_assert(kPathMsgHeaderBytes + 8 * kMaxQps + 8 + 4 <= kPathMsgMaxBytes);
static_assert(sizeof(PathQp) == 8);

// Encodes m (version 1) into out[0..kPathMsgMaxBytes); returns the bytes written, or 0 when m
// itself is not valid (a path, QP count or address that decode_path_msg would refuse).
size_t encode_path_msg(const PathMsg& m, uint8_t* out);

// Decodes the first n bytes a peer sent (starting with kPathMsgMagic). kIncomplete: a valid prefix,
// more bytes needed; kBad: not a valid path message (*why says why); kOk: *out holds it and *used
// is its length.
enum class PathMsgParse { kIncomplete, kBad, kOk };
PathMsgParse decode_path_msg(const uint8_t* p, size_t n, PathMsg* out, std::string* why,
                             size_t* used);

const char* path_msg_type_name(PathMsgType t);

}  // namespace sluice::wire
