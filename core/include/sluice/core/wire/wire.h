// Everything Sluice puts on a wire or into memory a peer writes: the 128-byte listen handle, the
// connection metadata exchanged over the out-of-band TCP socket, the clear-to-send (CTS) FIFO
// entries and the completion records. Both ends are Sluice of the same wire version; integers are
// little-endian host order (x86_64/aarch64), checked by the version and magic fields.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "sluice/core/base/status.h"

namespace sluice::wire {

inline constexpr uint64_t kHandleMagic = 0x45434955'4c53ull;  // "SLUICE"
inline constexpr uint64_t kMetaMagic = 0x4154454d'434c53ull;  // "SLCMETA"
// 2: the handle carries the rdma_cm listener's own address (cm_addr, cm_family).
// 3: the listener's nonce is 128 bits (Nonce) in the handle, the metadata and the rdma_cm token.
inline constexpr uint16_t kVersion = 3;
inline constexpr int kMaxQps = 16;         // NCCL_IB_QPS_PER_CONNECTION upper bound
inline constexpr int kFifoSlots = 32;      // = receives in flight per comm (NCCL_NET_MAX_REQUESTS)
inline constexpr int kEntriesPerSlot = 8;  // = maxRecvs

// The listener's nonce: 128 bits from the OS's CSPRNG (new_nonce), handed out in the listen handle
// and echoed by the connector in its metadata and rdma_cm tokens. It is the only thing that keeps
// a stranger who can reach the listener's port from getting a QP in our protection domain, so it
// is compared in constant time (same_nonce) and has no operator==.
inline constexpr size_t kNonceBytes = 16;
struct Nonce {
  uint8_t bytes[kNonceBytes];
};
static_assert(sizeof(Nonce) == kNonceBytes && alignof(Nonce) == 1);
static_assert(std::is_trivially_copyable_v<Nonce>);
// True when a and b are equal; the time taken does not depend on where they differ.
bool same_nonce(const Nonce& a, const Nonce& b);
// A fresh nonce from getrandom(2). Fails (naming the errno and the likely cause) when the kernel's
// random source cannot be read, or when its pool is still not seeded (early boot) after
// kRandomSeedWaitMs; never falls back to a predictable generator.
Status new_nonce(Nonce* out);
inline constexpr int kRandomSeedWaitMs = 10000;
inline constexpr long kRandomSeedPollNs = 10'000'000;  // between reads while the pool is unseeded
// new_nonce with getrandom's stand-in (tests) and its own bound on the wait for the seed.
using RandomSource = ssize_t (*)(void* buf, size_t len, unsigned flags);
Status new_nonce_from(Nonce* out, RandomSource source, int wait_ms);
// The nonce folded to 64 bits (for the connector's own guard, Handle::connect_check).
uint64_t nonce_fold(const Nonce& n);

// The listen handle (first bytes of NCCL's 128-byte handle). The connector keeps a reference to its
// in-progress state in `connect_state` (NCCL passes the same handle memory on every connect call).
//
// Two addresses: `addr`/`port` is the out-of-band TCP listener (the NCCL_SOCKET_IFNAME interface);
// the rdma_cm listener is at `cm_addr`/`cm_port`, an IP address of the listening device's own
// network interface. cm_family AF_UNSPEC (0) says the rdma_cm listener is at `addr` itself: the
// out-of-band address is on the listening device, which then keeps it (handle_cm_address).
struct Handle {
  uint64_t magic;
  uint16_t version;
  uint16_t family;   // AF_INET / AF_INET6
  uint16_t port;     // network byte order
  uint16_t cm_port;  // network byte order: the listener's rdma_cm port; 0 = none
  uint8_t addr[16];  // IPv4 in the first 4 bytes
  uint32_t scope_id;
  uint32_t listen_dev;
  Nonce nonce;          // random per listener; the connector echoes it so strays are rejected
  uint8_t cm_addr[16];  // the rdma_cm listener's address when cm_family != 0 (IPv4: first 4 bytes)
  uint16_t cm_family;   // AF_UNSPEC = the rdma_cm listener is at `addr`; AF_INET / AF_INET6
  uint16_t members;     // the listener's member devices (fusion); 0 = a Sluice before fusion
  uint32_t checksum;    // FNV-1a over the bytes above
  uint64_t connect_state;  // connector-private: id of its state machine (0 = not started)
  uint64_t connect_check;  // connect_state ^ nonce_fold(nonce) ^ kHandleMagic: guards garbage
};
static_assert(sizeof(Handle) == 96);
static_assert(offsetof(Handle, version) == 8, "the version stays where wire version 1 had it");
static_assert(offsetof(Handle, nonce) == 40);
static_assert(offsetof(Handle, cm_addr) == 56 && offsetof(Handle, cm_family) == 72);
static_assert(offsetof(Handle, members) == 74);
static_assert(offsetof(Handle, checksum) == 76,
              "the checksum covers the nonce and rdma_cm address");
static_assert(offsetof(Handle, connect_state) == 80);
// NCCL_NET_HANDLE_MAXSIZE (nccl_net.h: ncclNetHandle_t is char[128]); api.h's kHandleSize.
inline constexpr size_t kNcclHandleMaxSize = 128;
static_assert(sizeof(Handle) <= kNcclHandleMaxSize, "must fit NCCL_NET_HANDLE_MAXSIZE");
static_assert(std::is_trivially_copyable_v<Handle>);

uint32_t handle_checksum(const Handle& h);
// Verifies magic, version (another one: the listener runs another Sluice wire version), checksum,
// family, port and the rdma_cm address family. The error names what is wrong.
Status validate_handle(const Handle& h);
// The handle of a listener bound to `sa` (AF_INET or AF_INET6) on device `listen_dev`, checksum
// set, connector fields zero; `cm_port` (network order) = its rdma_cm listener's port, 0 = none,
// bound to `cm_addr` (its port ignored); nullptr or the address of `sa` = at `sa` (cm_family 0).
// `members`: the listener's member devices (1 for a physical device; fusion).
Handle encode_handle(const sockaddr_storage& sa, uint32_t listen_dev, const Nonce& nonce,
                     uint16_t cm_port = 0, const sockaddr_storage* cm_addr = nullptr,
                     uint16_t members = 1);
// The listener's address in a validated handle, and its length for connect().
void handle_address(const Handle& h, sockaddr_storage* sa, socklen_t* len);
// The rdma_cm listener's address and port in a validated handle; false when it offers none.
bool handle_cm_address(const Handle& h, sockaddr_storage* sa);
// "peer runs another Sluice wire version (N; this Sluice speaks M): ..." for every versioned thing
// a peer sends (`what`: "connection handle", "connection metadata", ...).
std::string version_mismatch(const char* what, unsigned theirs);

struct QpInfo {
  uint32_t qpn;
  uint32_t psn;  // the sender's initial sq_psn for this QP; the peer uses it as rq_psn
};

// Connection metadata: sent by the connector (sender side), answered by the acceptor.
struct Meta {
  uint64_t magic;
  uint16_t version;
  uint8_t role;  // 0 = sender (connector), 1 = receiver (acceptor)
  uint8_t link_layer;
  uint8_t port;
  uint8_t mtu;  // enum ibv_mtu of the port's active MTU
  uint8_t gid_index;
  uint8_t nqps;
  uint16_t lid;
  uint8_t traffic_class;
  uint8_t service_level;
  uint32_t fifo_slots;  // kFifoSlots
  Nonce nonce;          // the listener's nonce, echoed
  uint8_t gid[16];
  uint64_t buf_addr;  // sender: its CTS FIFO; receiver: its completion-record array
  uint32_t buf_rkey;
  uint8_t split_data;  // connector's NCCL_IB_SPLIT_DATA_ON_QPS (0/1); the acceptor follows it
  uint8_t cm;          // connector's connection manager: kMetaCmOob or kMetaCmRdmacm (cm_choice.h)
  uint8_t features;    // kMetaFeature* bits; 0 from Sluice before ECE (this byte was reserved)
  uint8_t reserved;
  // For messages, NUL-terminated. With kMetaFeatureEce the name ends within its first
  // kMetaNameBytesEce bytes and the rest carries the ECE (put_meta_ece); a peer without the
  // feature ignores it and still reads a terminated name.
  char dev_name[32];
  QpInfo qps[kMaxQps];
};
static_assert(sizeof(Meta) == 232);
static_assert(offsetof(Meta, nonce) == 24 && offsetof(Meta, gid) == 40);
static_assert(offsetof(Meta, qps) == 104);
static_assert(std::is_trivially_copyable_v<Meta>);

static_assert(offsetof(Meta, split_data) == 68);
static_assert(offsetof(Meta, cm) == 69);
inline constexpr uint8_t kMetaCmOob = 0;     // QPs to RTR/RTS by hand from the metadata
inline constexpr uint8_t kMetaCmRdmacm = 1;  // each QP established through rdma_cm (CmToken)
static_assert(offsetof(Meta, features) == 70);

// Enhanced Connection Establishment (NCCL_IB_ECE_ENABLE): bytes kMetaNameBytesEce.. of dev_name
// hold the sender's ECE as three little-endian uint32 (vendor_id, options, comp_mask). Wire version
// 2 without it (older Sluice, or a provider without ECE) has features = 0, and both ends then
// connect without ECE. The last byte of dev_name stays 0 (validate_meta), so comp_mask < 2^24.
inline constexpr uint8_t kMetaFeatureEce = 0x1;
inline constexpr size_t kMetaNameBytesEce = 20;
struct MetaEce {
  uint32_t vendor_id = 0;
  uint32_t options = 0;
  uint32_t comp_mask = 0;
};
// Sets the feature and the ECE, shortening the device name to kMetaNameBytesEce - 1 characters;
// false (nothing changed) when comp_mask does not fit the 24 bits the layout leaves.
bool put_meta_ece(Meta* m, const MetaEce& e);
// The peer's ECE, when its metadata has the feature.
bool meta_ece(const Meta& m, MetaEce* out);

// Failover's path messages (path_msg.h) come in sets; each side offers the highest it speaks in
// its Meta's features and both use the lower of the two (connect/comm_setup.cc set_paths), so
// peers of different releases agree at connect instead of failing at the first failback:
//  set 1 (no feature bit: every Sluice with failover before it): FENCE, OFFER, ANSWER; the
//        receiver takes a recovered path back on its check immediates alone;
//  set 2 (kMetaFeaturePathSet2): also CHECKED (the receiver takes a path back only with the
//        sender's CHECKED), and a fused clear-to-send entry's CtsMembers::shares (the byte split
//        of a receive follows the ramp of a path coming back).
// A Sluice before the bit ignores it (features bits it does not know are not checked), so the bit
// never costs a connection.
inline constexpr uint8_t kMetaFeaturePathSet2 = 0x4;
// The eager path (docs/eager.md, SLUICE_EAGER_MAX > 0): this side takes eager messages and
// resolved clear-to-send entries; on a one-path comm where both ends set it. 0x10 is its second
// format (held clear-to-send and asks, any tag value with the receiver's kCtsNumbered marks, the
// sender's head in each slot header); 0x8, the first (tags below 64, no asks), is never set any
// more: a peer that offers only it gets clear-to-send only (a receiver holding its clear-to-send
// back for a sender that never asks would wait for ever).
inline constexpr uint8_t kMetaFeatureEagerV1 = 0x8;
inline constexpr uint8_t kMetaFeatureEager = 0x10;
static_assert(((kMetaFeatureEagerV1 | kMetaFeatureEager) & kMetaFeaturePathSet2) == 0 &&
              (kMetaFeatureEagerV1 & kMetaFeatureEager) == 0);
// The eager path on a fused comm too (more than one path: NIC fusion, a standby), where both ends
// set it beside kMetaFeatureEager: the grant names the ring's key on each of the receiver's
// members (eager.h EagerGrant::keys), eager WRITEs follow failover's routes, and a failover
// replays those it did not see complete (docs/eager.md). A Sluice without it keeps a fused comm
// clear-to-send only, and never meets a grant with member keys.
inline constexpr uint8_t kMetaFeatureEagerFused = 0x40;
static_assert((kMetaFeatureEagerFused & (kMetaFeatureEagerV1 | kMetaFeatureEager |
                                         kMetaFeaturePathSet2 | kMetaFeatureEce)) == 0);
// Batches (eager.h kEagerMore): this side reads several eager messages in one WRITE. A sender
// batches only for a receiver that sets it; a Sluice without it is sent one message per WRITE.
inline constexpr uint8_t kMetaFeatureEagerBatch = 0x80;
static_assert((kMetaFeatureEagerBatch &
               (kMetaFeatureEagerFused | kMetaFeatureEagerV1 | kMetaFeatureEager |
                kMetaFeaturePathSet2 | kMetaFeatureEce)) == 0);
inline constexpr int kPathMsgSetNewest = 2;

// The private data of each rdma_cm connect request in SLUICE_CM=rdmacm mode: the listener matches
// it to the TCP handshake whose metadata it accepted (nonce, the connector's FIFO address and rkey,
// and the QP number the CM request names for QP `qp_index`). IB/RoCE REQs carry at most 56 bytes
// of private data (rdma_connect(3)), so the full Meta travels over TCP.
inline constexpr uint32_t kCmTokenMagic = 0x4d434c53;  // "SLCM"
inline constexpr size_t kCmPrivateDataMax = 56;
struct CmToken {
  uint32_t magic;
  uint16_t version;
  uint8_t qp_index;
  uint8_t nqps;
  Nonce nonce;         // the listener's, echoed
  uint64_t fifo_addr;  // = the connector's Meta::buf_addr
  uint32_t fifo_rkey;  // = the connector's Meta::buf_rkey
  uint32_t reserved;
};
static_assert(sizeof(CmToken) == 40 && sizeof(CmToken) <= kCmPrivateDataMax);
static_assert(std::is_trivially_copyable_v<CmToken>);
// Checks `len` bytes of a CM request's private data (providers may pad it) against the listener's
// nonce: magic, version, qp_index < nqps <= kMaxQps.
Status validate_cm_token(const void* data, size_t len, const Nonce& nonce, CmToken* out);

// The leading bytes of Meta that tell a Sluice peer: the magic, then the version.
inline constexpr size_t kMetaHeaderBytes = offsetof(Meta, version) + sizeof(uint16_t);
static_assert(offsetof(Meta, magic) == 0 && kMetaHeaderBytes == 10);
// ---- NIC fusion: the members' extension of Meta -------------------------------------------------
// A comm over a fused device runs over several member devices (ports, on one adapter or several).
// Its QPs are laid over paths: path p joins the sender's member p % ns and the receiver's member
// p % nr, for p < npaths = max(ns, nr) (so 2 to 1 and 1 to 2 connect), and carries
// qps_per_path QPs (NCCL_IB_QPS_PER_CONNECTION, per member as NCCL's): QP q is on path
// q / qps_per_path, so Meta::nqps = npaths * qps_per_path <= kMaxQps and Meta::qps stays the one
// list of QP numbers. Versioning, so that a Sluice from before fusion still connects:
//  * the listener says how many members it has in Handle::members (0 from an older Sluice, which
//    is one member and knows no extension);
//  * the connector sends MetaMembers right after its Meta, announced by kMetaFeatureMembers, when
//    either side has more than one member (and the listener is not an older Sluice); the acceptor
//    answers with its own extension exactly when the connector's Meta announced one;
//  * two one-member sides exchange the plain Meta, byte for byte as before fusion.
// Meta's own port, GID, LID and MTU are member 0's.
inline constexpr uint8_t kMetaFeatureMembers = 0x2;
static_assert((kMetaFeatureMembers & kMetaFeatureEagerBatch) == 0);
inline constexpr int kMaxMetaMembers = 4;              // per side (= CommStatsV2's kMaxMembers)
inline constexpr uint32_t kMembersMagic = 0x4d424d53;  // "SMBM"
// 2: a fused comm's clear-to-send entries carry CtsMembers (below). Version 1 (a Sluice whose fused
// comms connected but carried no data) is refused: its entries have no per-member keys.
// 3: a fused comm's every close names its receive's slot in its immediate (kImmSlotShift below),
// so a close is told apart whatever QP it arrives on (failover redirects a failed path's closes);
// and the flags below.
inline constexpr uint16_t kMembersVersion = 3;
// MetaMembers::flags: this side runs failover (SLUICE_FAILOVER); a comm fails over only when both
// sides do.
inline constexpr uint8_t kMembersFlagFailover = 0x1;
inline constexpr uint8_t kMembersFlagsKnown = kMembersFlagFailover;
struct MemberInfo {
  uint8_t gid[16];
  uint16_t lid;
  uint8_t port;
  uint8_t mtu;  // enum ibv_mtu of the port's active MTU
  uint8_t gid_index;
  uint8_t link_layer;  // every member's is Meta::link_layer (a fused device does not mix them)
  uint16_t weight;     // relative share of the bytes this member sends or receives; 0 = fallback
  uint32_t buf_rkey;   // its registration of Meta::buf_addr (member 0's = Meta::buf_rkey)
  uint32_t reserved;   // zero
};
static_assert(sizeof(MemberInfo) == 32);
struct MetaMembers {
  uint32_t magic;    // kMembersMagic
  uint16_t version;  // kMembersVersion
  uint8_t nmembers;  // 1..kMaxMetaMembers
  uint8_t npaths;    // max(sender's, receiver's members): both sides must agree
  uint8_t qps_per_path;
  uint8_t flags;        // kMembersFlag*
  uint8_t reserved[6];  // zero
  MemberInfo members[kMaxMetaMembers];
};
static_assert(sizeof(MetaMembers) == 16 + 32 * kMaxMetaMembers);
static_assert(std::is_trivially_copyable_v<MetaMembers>);
static_assert(kMaxMetaMembers * 1 <= kMaxQps, "every path has at least one QP");
// The path's member on each side (sender member, receiver member).
inline int path_member(int path, int nmembers) {
  return path % nmembers;
}
// The local member that QP q lives on.
inline int qp_member(int q, int qps_per_path, int nmembers) {
  return path_member(q / qps_per_path, nmembers);
}
// Fills ext's header; the caller fills members[0..nmembers).
void init_members(MetaMembers* ext, int nmembers, int npaths, int qps_per_path);
// Checks a peer's extension against its validated Meta `m`: magic, version, 1..kMaxMetaMembers
// members, npaths in max(nmembers, 1)..kMaxMetaMembers, npaths * qps_per_path == m.nqps, each
// member's MTU code and link layer (= m's), member 0 = Meta's own port/GID/LID/MTU and rkey, a
// non-zero weight somewhere, zero reserved bytes.
Status validate_members(const Meta& m, const MetaMembers& ext);
// Both sides' extensions agree: the same npaths = max(both member counts) and qps_per_path.
Status check_peer_members(const MetaMembers& local, const MetaMembers& remote);
// The one-member extension a plain Meta stands for (a peer that sent none): member 0 from m.
MetaMembers members_of_meta(const Meta& m);

// Fusion over rdma_cm (SLUICE_CM=rdmacm, or iWARP): each of the acceptor's members has its own
// rdma_cm listener, bound to an address of that member's interface; the handle names only member
// 0's. The acceptor sends this right behind its MetaMembers exactly when the connector's Meta chose
// rdmacm and announced kMetaFeatureMembers, so that the connector resolves every path's ids from
// its own member's address to the acceptor member's (and rdma_cm checks each route).
inline constexpr uint32_t kCmAddrsMagic = 0x41434d53;  // "SMCA"
inline constexpr uint16_t kCmAddrsVersion = 1;
struct CmMemberAddr {
  uint8_t addr[16];  // IPv4 in the first 4 bytes
  uint16_t family;   // AF_INET / AF_INET6
  uint16_t port;     // network byte order; never 0
  uint32_t scope_id;
};
static_assert(sizeof(CmMemberAddr) == 24);
struct MetaCmAddrs {
  uint32_t magic;  // kCmAddrsMagic
  uint16_t version;
  uint8_t nmembers;  // = the sender's MetaMembers::nmembers
  uint8_t reserved;  // zero
  CmMemberAddr members[kMaxMetaMembers];
};
static_assert(sizeof(MetaCmAddrs) == 8 + 24 * kMaxMetaMembers);
static_assert(std::is_trivially_copyable_v<MetaCmAddrs>);
// Fills x for `n` members from their listeners' addresses (port included, network order).
void encode_cm_addrs(const sockaddr_storage* addrs, int n, MetaCmAddrs* x);
// Checks a peer's MetaCmAddrs against its validated MetaMembers: magic, version, the same member
// count, each used record AF_INET/AF_INET6 with a port, unused records and reserved bytes zero.
Status validate_cm_addrs(const MetaMembers& members, const MetaCmAddrs& x);
// Member m's rdma_cm listener address (port included) in a validated MetaCmAddrs.
sockaddr_storage cm_member_address(const MetaCmAddrs& x, int m);

// Checks the first `n` bytes that arrived of a Meta (any n, also fewer than kMetaHeaderBytes): each
// arrived byte of the magic, and the version once it is complete. ok() = nothing wrong so far, so
// a stray or foreign connection is refused at its first wrong byte.
Status check_meta_prefix(const void* bytes, size_t n);
// Verifies magic, version, role, nqps, split_data, fifo_slots, the MTU code and the echoed nonce.
Status validate_meta(const Meta& m, uint8_t expected_role, const Nonce& nonce);
// The peer's validated metadata against ours (`local_dev` names our device in the error): the same
// link layer and the same number of QPs.
Status check_peer_meta(const Meta& local, const Meta& remote, const std::string& local_dev);

// A clear-to-send entry: the receiver describes one posted buffer. Written by the receiver into the
// sender's FIFO (slot = seq % kFifoSlots, entry = index in the grouped receive) with one RDMA WRITE
// per irecv. `seq` is the receive's sequence number + 1 and sits at the end so that a sender that
// reads the expected seq in every entry of a slot reads complete entries (a WRITE lands in order);
// while it lands, seq may read as a byte mix of the old and new values (rules/cts_match.cc mix_of),
// which the sender waits out. The sender never writes the FIFO. Sizes are 32-bit: a message is
// below 2^31 bytes (maxP2pBytes), so a larger posted capacity is recorded as UINT32_MAX.
struct alignas(32) CtsEntry {
  uint64_t addr;
  uint32_t rkey;
  uint32_t size;
  int32_t tag;
  uint8_t nreqs;  // receives in this group (same in every entry of the slot)
  uint8_t index;  // this entry's position in the group
  uint16_t reserved;
  uint64_t seq;
};
static_assert(sizeof(CtsEntry) == 32);
static_assert(offsetof(CtsEntry, seq) == 24);
// The eager path (docs/eager.md, kMetaFeatureEager): nreqs bit 7 says the receive was completed
// from the eager ring before its entries were written (every part came eagerly; the sender posts
// nothing for it), in every entry of the slot; `reserved` carries the receiver's eager credit
// (its limit modulo 2^16, wire/eager.h credit_of). Both zero without the feature.
inline constexpr uint8_t kCtsResolved = 0x80;
inline constexpr uint8_t kCtsCountMask = 0x7f;
// And `index` bit 7: the receiver numbers this part's tag (rules/eager_book.h TagTable), so the
// sender may send that tag eagerly once it numbers it too.
inline constexpr uint8_t kCtsNumbered = 0x80;
inline constexpr uint8_t kCtsIndexMask = 0x7f;

// NIC fusion (MetaMembers version 2): on a comm of more than one path every clear-to-send entry is
// a pair of 32-byte cells, this extension first and the CtsEntry second, so one RDMA WRITE still
// publishes a run of slots and the entry's seq stays the last thing in each pair. It carries the
// receive buffer's rkey on each receiver member (its registration on that member's adapter; rkey[0]
// = the entry's rkey) and the paths the receiver expects this receive on (stripe.h's paths_of: the
// sender follows this mask, never its own view, so both ends count the same closing immediates).
// With path-message set 2 (kMetaFeaturePathSet2) `shares` says how much of its weight each path
// in the mask carries of this receive's bytes: byte p = a percentage 1..99 while path p ramps back
// in after a failback, 0 = its whole share (and 0 for paths outside the mask); both ends cut the
// receive's bytes by those weights (stripe.h), so the ramp reaches the bytes. Zero with set 1.
struct alignas(32) CtsMembers {
  uint32_t rkey[kMaxMetaMembers];
  uint32_t paths;        // bit p: path p carries a part of this receive (same in every entry)
  uint32_t shares;       // set 2: byte p = path p's share of its weight in percent, 0 = all of it
  uint32_t reserved[2];  // zero
};
inline uint32_t share_pct_of(uint32_t shares, int path) {
  const uint32_t b = shares >> (8 * path) & 0xffu;
  return b == 0 ? 100u : b;
}
static_assert(sizeof(CtsMembers) == sizeof(CtsEntry), "a fused entry is two cells of one size");
static_assert(std::is_trivially_copyable_v<CtsMembers>);
// Cells per clear-to-send entry: 1 on a one-path comm (byte for byte as before fusion), 2 fused.
inline int cts_cells(int npaths) {
  return npaths > 1 ? 2 : 1;
}

// Completion record: written by the sender into the receiver's array (one per FIFO slot) with the
// closing WRITE_WITH_IMM of a grouped send or of an error notice; read by the receiver only after
// every QP's immediate for that slot arrived (same-QP ordering makes it visible by then).
struct alignas(64) DoneRecord {
  uint32_t sizes[kEntriesPerSlot];  // bytes sent into each entry (attempted size on error)
  uint32_t status;                  // kRecordOk, kRecordTooLarge or kRecordOverLimit
  uint32_t bad_index;               // on error: the entry the refused send was matched to
  uint64_t seq;
};
static_assert(sizeof(DoneRecord) == 64);
inline constexpr uint32_t kRecordOk = 0;
inline constexpr uint32_t kRecordTooLarge = 1;   // the send was larger than the posted buffer
inline constexpr uint32_t kRecordOverLimit = 2;  // the send was larger than kMaxMessageBytes
// The largest message (maxP2pBytes / maxCollBytes): test() reports received sizes through `int`,
// so a message must stay below 2^31; 1 GiB is the largest power of two that does.
inline constexpr size_t kMaxMessageBytes = size_t{1} << 30;

// Immediate data of the closing WRITE_WITH_IMM (host order, converted with htonl/ntohl):
//  bit 31 clear: single receive, the value is the byte count (< 2^31, we never allow more);
//  bit 31 set:   read the completion record of slot (value & 0xffff).
inline constexpr uint32_t kImmRecord = 0x80000000u;
// The eager path (docs/eager.md; one-path comms only, where bits 30..26 name no slot): bits 30
// and 29 both set in a single receive's close say its message came through the eager ring (its
// size in bits 28..0), and bit 31 of a completion record's size says the same of that part. A
// message is at most 2^30 bytes (kMaxMessageBytes, 0x40000000, bit 29 clear), so neither pattern
// is ever a size.
inline constexpr uint32_t kImmEager = 0x60000000u;
inline constexpr uint32_t kImmEagerSizeMask = 0x1fffffffu;
inline constexpr uint32_t kRecordEager = 0x80000000u;
// A fused comm (kMembersVersion 3) names the receive in every close, so that failover can take a
// close on any QP: a single receive's close carries its slot above the byte count when the whole
// message is below 64 MiB (bits 30..26 the slot, 25..0 the bytes); a larger one, and a grouped
// receive, closes with a separate WRITE_WITH_IMM of kImmRecord | slot and the completion record.
inline constexpr int kImmSlotShift = 26;
inline constexpr uint32_t kImmFusedSizeMax = (1u << kImmSlotShift) - 1;
static_assert(kFifoSlots <= (1 << (31 - kImmSlotShift)), "a slot fits bits 30..26");
// Failback's check of a fresh path (a zero-length WRITE_WITH_IMM): names no receive.
inline constexpr uint32_t kImmPathCheck = 0xffffffffu;
inline uint32_t fused_imm(uint32_t slot, uint32_t bytes) {
  return slot << kImmSlotShift | bytes;
}

// The failure notice: what a comm that failed on its own side (watchdog, completion error, async
// event) sends its peer on the kept out-of-band socket, once, so the peer's next call fails with
// the reason instead of waiting (liveness.cc). The socket otherwise carries only the goodbye byte
// (0xb7) at a normal close. Layout, little-endian:
//   [0] kNoticeMagic  [1] version  [2..3] text length n (1..kNoticeMaxText)
//   [4 .. 4+n) the reason (printable ASCII)  [4+n .. 8+n) FNV-1a-32 of every byte before it.
// A later version keeps this prefix (it may append bytes inside the checksummed length only by
// raising the version, which a reader of version 1 still decodes as the text it can quote). An
// older Sluice that knows only the goodbye byte reads the magic as unexpected bytes and fails the
// comm as a protocol mismatch: it fails too, never waits.
// FNV-1a, 32 bits: the checksum of the kept socket's messages (the notice, path_msg.h).
uint32_t fnv1a32(const uint8_t* p, size_t n);

inline constexpr uint8_t kNoticeMagic = 0xf7;  // neither the goodbye (0xb7) nor ready (0x5a) byte
inline constexpr uint8_t kNoticeVersion = 1;
inline constexpr size_t kNoticeHeaderBytes = 4;
inline constexpr size_t kNoticeMaxText = 480;
inline constexpr size_t kNoticeMaxBytes = kNoticeHeaderBytes + kNoticeMaxText + 4;

// Encodes `reason` (cut to kNoticeMaxText, non-printable bytes as '?', an empty one as
// "unspecified") into out[0..kNoticeMaxBytes); returns the bytes written.
size_t encode_notice(const std::string& reason, uint8_t* out);

// Decodes the first n bytes a peer sent (starting with kNoticeMagic). kIncomplete: a valid prefix,
// more bytes needed; kBad: not a valid notice (*text says why; a version-1 text with a byte that
// is not printable ASCII is refused); kOk: *text is the reason (a later version's bytes made
// printable) and *used the notice's length.
enum class NoticeParse { kIncomplete, kBad, kOk };
NoticeParse decode_notice(const uint8_t* p, size_t n, std::string* text, size_t* used);

}  // namespace sluice::wire
