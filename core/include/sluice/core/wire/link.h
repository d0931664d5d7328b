// The peer link (issue 32): one out-of-band TCP socket per peer process carries every comm's
// liveness, failure notice and failover path messages, multiplexed by channel
// (core/src/health/peer_link.h drives it). What travels:
//  * the listener's process id, in NCCL's 128-byte handle right after wire::Handle (HandleLink):
//    a connector that finds it may offer the link;
//  * the handshake's link extension (MetaLink, after the other parts of each side's metadata, when
//    Meta::features has kMetaFeatureLink): the connector's offer (its process, its channel for the
//    comm, and a link to that process it already has, if any), the acceptor's verdict (use that
//    link, or adopt this connection's socket as a new one) with its own channel;
//  * then, on the link, frames (LinkFrame): a goodbye (the sender closed its end of the comm), a
//    failure notice (wire.h's notice, whole), or a path message (path_msg.h's, whole), each naming
//    the receiver's channel;
//  * and, when the listener's handle says it takes them (kHandleLinkHello), the handshake of a new
//    comm between two processes that already have a link: the connector's metadata and offer
//    (kHello, naming the connector's channel), the listener's answer (kHsReply) and the ready mark
//    (kHsReady), so a connect to a known peer makes no TCP connection at all.
// Pure: no sockets, no state.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "sluice/core/base/status.h"
#include "sluice/core/wire/path_msg.h"
#include "sluice/core/wire/wire.h"

namespace sluice::wire {

// ---- In the listen handle -----------------------------------------------------------------------

inline constexpr uint32_t kHandleLinkMagic = 0x4b4c4c53;  // "SLLK"
inline constexpr uint8_t kHandleLinkVersion = 1;
// HandleLink::flags: the listener's process takes handshakes on the link (kHello). A listener of
// an older Sluice writes 0 here (reserved), and is then reached by TCP as before.
inline constexpr uint8_t kHandleLinkHello = 0x01;
struct HandleLink {
  uint32_t magic;
  uint8_t version;
  uint8_t flags;  // kHandleLinkHello
  uint8_t reserved[2];
  Nonce proc;  // the listener's process
};
static_assert(sizeof(HandleLink) == 24 && std::is_trivially_copyable_v<HandleLink>);
inline constexpr size_t kHandleLinkOffset = sizeof(Handle);
static_assert(kHandleLinkOffset + sizeof(HandleLink) <= kNcclHandleMaxSize,
              "the link's part of the handle fits NCCL_NET_HANDLE_MAXSIZE");
// Writes the listener's process id into NCCL's handle (kNcclHandleMaxSize bytes).
void put_handle_link(void* handle, const Nonce& proc, uint8_t flags);
// The listener's process id, when the handle has one (a listener with the link on), and its flags.
bool handle_link(const void* handle, Nonce* proc, uint8_t* flags = nullptr);

// ---- In the handshake ---------------------------------------------------------------------------

// Meta::features: this side speaks the link; its MetaLink follows its other metadata parts. The
// connector sets it only when the handle advertised the listener's process (HandleLink), the
// acceptor only in answer to a connector that set it.
inline constexpr uint8_t kMetaFeatureLink = 0x20;
static_assert((kMetaFeatureLink & (kMetaFeatureEagerBatch | kMetaFeatureEagerFused |
                                   kMetaFeatureEager | kMetaFeatureMembers)) == 0);

// MetaLink::verdict. The connector sends kLinkOffer; the acceptor answers kLinkUse (the link the
// connector named: both close this connection's socket once the handshake is done) or kLinkAdopt
// (the connection's socket becomes the link `link_id`).
inline constexpr uint8_t kLinkOffer = 0;
inline constexpr uint8_t kLinkUse = 1;
inline constexpr uint8_t kLinkAdopt = 2;
// The two ends of a link: the one made by the handshake's connector, and the acceptor's. An offer
// names the role of the connector's end of the link it proposes, so an acceptor finds its own end
// (the other role) even when both ends live in one process (a loopback connection).
inline constexpr uint8_t kLinkEndConnector = 0;
inline constexpr uint8_t kLinkEndAcceptor = 1;

inline constexpr uint32_t kMetaLinkMagic = 0x4b4e4c53;  // "SLNK"
inline constexpr uint8_t kMetaLinkVersion = 1;
// MetaLink::flags of an offer. kLinkOfferTakesTheirs: this connector takes, for an offer of no
// link (link_id 0), an answer kLinkUse naming a link of the listener's choice (end_role: the
// listener's end of it), and waits for its own end of that link. An older connector writes 0 here
// (reserved) and is answered as before. The listener uses it when first connects cross (each
// process connecting to the other with no link yet): the process with the larger id waits for
// the link its own connect makes, and names it, so that the two processes share one link.
inline constexpr uint8_t kLinkOfferTakesTheirs = 0x01;
struct MetaLink {
  uint32_t magic;
  uint8_t version;
  uint8_t verdict;   // kLinkOffer, kLinkUse, kLinkAdopt
  uint8_t end_role;  // offer: the role of the proposer's end of link_id; a kLinkUse answer to an
                     // offer of none: the listener's end of the link it names; otherwise 0
  uint8_t flags;     // an offer's kLinkOffer* flags; 0 in an answer
  Nonce proc;        // the sender's process
  uint64_t link_id;  // offer: a link the connector has to the listener's process (0 = none)
  uint32_t chan;     // the sender's channel for this comm (non-zero)
  uint32_t reserved2;
};
static_assert(sizeof(MetaLink) == 40 && std::is_trivially_copyable_v<MetaLink>);

MetaLink make_meta_link(const Nonce& proc, uint8_t verdict, uint64_t link_id, uint8_t end_role,
                        uint32_t chan);
// The connector's offer as an acceptor reads it.
Status validate_link_offer(const MetaLink& m);
// The acceptor's answer as the connector reads it: `offered` is the link id the connector proposed
// (0 = none), `listener` the process the handle named, `takes_theirs` whether the offer carried
// kLinkOfferTakesTheirs (then a kLinkUse answer to an offer of none is valid).
Status validate_link_answer(const MetaLink& m, uint64_t offered, const Nonce& listener,
                            bool takes_theirs);

// ---- On the link --------------------------------------------------------------------------------

inline constexpr uint8_t kLinkFrameMagic = 0xa5;  // none of the goodbye, ready or notice bytes
// kHello .. kHsReady: a handshake on the link. kHello carries what the connector would have sent on
// its TCP connection ([Meta][MetaMembers when fused][MetaLink offer]) and names the *sender's*
// channel (the listener has none for the comm yet); kHsReply carries the listener's answer
// ([Meta][MetaMembers][MetaCmAddrs][MetaLink answer], the parts its features name) to that
// channel; kHsReady (no payload) is the connector's last word, the ready byte's place.
enum class LinkFrameType : uint8_t {
  kGoodbye = 1,
  kNotice = 2,
  kPath = 3,
  kHello = 4,
  kHsReply = 5,
  kHsReady = 6
};
inline constexpr uint8_t kLinkFrameTypeLast = static_cast<uint8_t>(LinkFrameType::kHsReady);
// [0] kLinkFrameMagic  [1] type  [2..3] payload length n  [4..7] the receiver's channel (kHello:
// the sender's)  [8 .. 8+n) the payload: none (goodbye, ready), a notice (encode_notice), a path
// message, or a handshake's metadata parts (at most kLinkHsMaxPayload).
inline constexpr size_t kLinkFrameHeaderBytes = 8;
inline constexpr size_t kLinkHsMaxPayload =
    sizeof(Meta) + sizeof(MetaMembers) + sizeof(MetaCmAddrs) + sizeof(MetaLink);
inline constexpr size_t kLinkFrameMaxPayload =
    std::max({kNoticeMaxBytes, kPathMsgMaxBytes, kLinkHsMaxPayload});
static_assert(kLinkFrameMaxPayload <= 0xffff, "the length field is 16 bits");
inline constexpr size_t kLinkFrameMaxBytes = kLinkFrameHeaderBytes + kLinkFrameMaxPayload;

// Encodes a frame into out[0..kLinkFrameMaxBytes); returns its length, 0 when the payload is too
// long or a goodbye has one.
size_t encode_link_frame(LinkFrameType t, uint32_t chan, const uint8_t* payload, size_t n,
                         uint8_t* out);

struct LinkFrame {
  LinkFrameType type = LinkFrameType::kGoodbye;
  uint32_t chan = 0;
  bool bad = false;  // a well-formed frame whose notice or path message is not valid (why says)
  std::string text;  // kNotice: the reason
  PathMsg path{};    // kPath
  std::vector<uint8_t> bytes;  // kHello, kHsReply: the handshake's metadata parts, as sent
};
// A handshake frame's parts (kHello, kHsReply) read in order: each take copies the next n bytes;
// false when fewer are left. done(): every byte was taken (a frame carries its parts exactly).
class HsParts {
 public:
  explicit HsParts(const std::vector<uint8_t>& b) : b_(b) {}
  bool take(void* dst, size_t n) {
    if (b_.size() - at_ < n) return false;
    std::memcpy(dst, b_.data() + at_, n);
    at_ += n;
    return true;
  }
  bool done() const { return at_ == b_.size(); }
  size_t size() const { return b_.size(); }

 private:
  const std::vector<uint8_t>& b_;
  size_t at_ = 0;
};

// Decodes the first n bytes of what the link delivered. kIncomplete: a valid prefix; kBad: not a
// frame (*why says why): the link carries nothing more that can be trusted; kOk: *out holds the
// frame (out->bad: its payload was refused, which concerns its channel only) and *used its length.
enum class LinkParse { kIncomplete, kBad, kOk };
LinkParse decode_link_frame(const uint8_t* p, size_t n, LinkFrame* out, std::string* why,
                            size_t* used);

}  // namespace sluice::wire
