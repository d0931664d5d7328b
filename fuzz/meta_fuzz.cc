// Connection metadata as connect() and accept() read it from the out-of-band socket (232 bytes
// the peer wrote). Drives the two checks the handshake applies, in its order: validate_meta()
// (format, role, nonce, limits) and check_peer_meta() against this side's metadata; before them,
// the listener's check_meta_prefix() on every prefix as the bytes arrive.
// Contract: each rejects with a non-empty message, or the values the QP bring-up then uses are in
// range (1..kMaxQps QPs, matching ours, a terminated device name, the right FIFO depth), and an
// ECE only with the feature bit, the name ending before it, comp_mask within 24 bits; behind it
// (fusion) the members' extension and the members' rdma_cm addresses, each checked in turn.
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "fuzz_check.h"
#include "sluice/core/base/net_addr.h"
#include "sluice/core/base/verbs.h"
#include "sluice/core/wire/wire.h"

using namespace sluice;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  wire::Meta m{};
  if (size > 0) std::memcpy(&m, data, std::min(size, sizeof m));
  // Bytes past the metadata choose the side that reads it and whether the nonce is the one this
  // listener handed out (the common case for a real peer) or a stray's: one bit off in the byte
  // that ctl's top three bits choose.
  const uint8_t ctl = size > sizeof m ? data[sizeof m] : 0;
  const uint8_t role = ctl & 1;
  wire::Nonce nonce = m.nonce;
  if (ctl & 2) nonce.bytes[((ctl >> 5) & 7) * 2 + 1] ^= 0x20;

  // The listener's early check on every prefix as it arrives: once a prefix is refused every
  // longer one is too, and metadata that validate_meta() accepts passes it at every length.
  bool refused = false;
  for (size_t n = 0; n <= std::min(size, sizeof m); ++n) {
    const Status p = wire::check_meta_prefix(data, n);
    FUZZ_CHECK(!refused || !p.is_ok(), "prefix of %zu bytes accepted after a shorter one refused",
               n);
    if (!p.is_ok()) {
      FUZZ_CHECK(!p.message().empty(), "prefix rejection without a reason");
      refused = true;
    }
  }

  const Status st = wire::validate_meta(m, role, nonce);
  if (!st.is_ok()) {
    FUZZ_CHECK(!st.message().empty(), "rejection without a reason");
    return 0;
  }
  FUZZ_CHECK(!refused, "validate_meta accepts what the listener's prefix check refused");
  FUZZ_CHECK(m.magic == wire::kMetaMagic && m.version == wire::kVersion, "foreign format");
  FUZZ_CHECK(m.role == role && wire::same_nonce(m.nonce, nonce), "role/nonce");
  FUZZ_CHECK(std::memcmp(m.nonce.bytes, nonce.bytes, sizeof nonce.bytes) == 0, "nonce differs");
  FUZZ_CHECK(m.nqps >= 1 && m.nqps <= wire::kMaxQps, "nqps %u", m.nqps);
  FUZZ_CHECK(m.fifo_slots == static_cast<uint32_t>(wire::kFifoSlots), "fifo %u", m.fifo_slots);
  FUZZ_CHECK(std::strlen(m.dev_name) < sizeof m.dev_name, "device name not terminated");
  // ECE (features bit): accepted only with the name ending before the ECE bytes; a peer without
  // the bit (older Sluice) has no ECE, whatever its name's last bytes hold.
  wire::MetaEce ece;
  const bool has_ece = wire::meta_ece(m, &ece);
  FUZZ_CHECK(has_ece == ((m.features & wire::kMetaFeatureEce) != 0), "ECE without the feature");
  if (has_ece) {
    FUZZ_CHECK(std::strlen(m.dev_name) < wire::kMetaNameBytesEce, "name runs into the ECE");
    FUZZ_CHECK(ece.comp_mask <= 0xffffffu, "comp_mask beyond the layout's 24 bits");
    wire::Meta again = m;  // what our side would send back carries the same ECE
    FUZZ_CHECK(wire::put_meta_ece(&again, ece), "an accepted ECE does not round-trip");
  }
  // connect_qps() converts it to enum ibv_mtu: a code outside the enum is undefined behaviour
  FUZZ_CHECK(m.mtu >= IBV_MTU_256 && m.mtu <= IBV_MTU_4096, "MTU code %u accepted", m.mtu);

  // This side: what fill_local_meta() writes for an Ethernet (RoCE) port with the peer's QP count
  // or, when ctl says so, one QP fewer / the other link layer.
  wire::Meta local{};
  local.magic = wire::kMetaMagic;
  local.version = wire::kVersion;
  local.role = static_cast<uint8_t>(1 - role);
  local.link_layer = (ctl & 4) ? IBV_LINK_LAYER_INFINIBAND : IBV_LINK_LAYER_ETHERNET;
  local.nqps = (ctl & 8) ? static_cast<uint8_t>(m.nqps - 1) : m.nqps;
  local.fifo_slots = wire::kFifoSlots;
  local.nonce = nonce;
  std::strcpy(local.dev_name, "local0");
  const Status peer = wire::check_peer_meta(local, m, "local0");
  if (!peer.is_ok()) {
    FUZZ_CHECK(!peer.message().empty(), "rejection without a reason");
    FUZZ_CHECK(m.link_layer != local.link_layer || m.nqps != local.nqps, "good peer rejected");
    return 0;
  }
  FUZZ_CHECK(m.link_layer == local.link_layer && m.nqps == local.nqps, "mismatch accepted");
  // What the bring-up prints and stores from the accepted metadata.
  GidBytes gid;
  std::memcpy(gid.data(), m.gid, sizeof m.gid);
  FUZZ_CHECK(!gid_to_string(gid).empty(), "GID prints as nothing");
  const std::string dev = m.dev_name;
  FUZZ_CHECK(dev.size() < sizeof m.dev_name, "device name");
  FUZZ_CHECK(verbs::link_layer_name(m.link_layer) != nullptr, "link layer name");

  // NIC fusion: with kMetaFeatureMembers the bytes after the control byte are the peer's
  // MetaMembers (the handshake reads them right after its Meta). Accepted: 1..kMaxMetaMembers
  // members, npaths from the member count to kMaxMetaMembers, npaths * qps_per_path = nqps, every
  // QP on a member it has, one link layer, member 0 = the Meta's own, some weight non-zero.
  if ((m.features & wire::kMetaFeatureMembers) == 0) return 0;
  wire::MetaMembers x{};
  const size_t at = sizeof m + 1;
  if (size > at) std::memcpy(&x, data + at, std::min(size - at, sizeof x));
  const Status mx = wire::validate_members(m, x);
  if (!mx.is_ok()) {
    FUZZ_CHECK(!mx.message().empty(), "members rejection without a reason");
    return 0;
  }
  FUZZ_CHECK(x.nmembers >= 1 && x.nmembers <= wire::kMaxMetaMembers, "%u members", x.nmembers);
  FUZZ_CHECK(x.npaths >= x.nmembers && x.npaths <= wire::kMaxMetaMembers, "%u paths", x.npaths);
  FUZZ_CHECK(x.qps_per_path >= 1 && x.npaths * x.qps_per_path == m.nqps, "QP layout");
  bool weight = false;
  for (int q = 0; q < m.nqps; ++q)
    FUZZ_CHECK(wire::qp_member(q, x.qps_per_path, x.nmembers) < x.nmembers, "QP off its members");
  for (int i = 0; i < x.nmembers; ++i) {
    FUZZ_CHECK(x.members[i].link_layer == m.link_layer, "mixed link layers accepted");
    FUZZ_CHECK(x.members[i].mtu >= IBV_MTU_256 && x.members[i].mtu <= IBV_MTU_4096, "member MTU");
    weight = weight || x.members[i].weight > 0;
  }
  FUZZ_CHECK(weight, "no member carries bytes");
  FUZZ_CHECK(x.members[0].buf_rkey == m.buf_rkey && x.members[0].port == m.port, "member 0");
  // Against this side: one member (ctl bit 16) or two, with the paths both sides must count.
  wire::MetaMembers mine{};
  const int nl = (ctl & 16) ? 1 : 2;
  const int want = std::max<int>(nl, x.nmembers);
  wire::init_members(&mine, nl, want, x.qps_per_path);
  const Status agree = wire::check_peer_members(mine, x);
  FUZZ_CHECK(agree.is_ok() == (x.npaths == want), "paths %u accepted against %d: %s", x.npaths,
             want, agree.message().c_str());

  // Fused over rdma_cm: the acceptor's members' rdma_cm addresses follow its MetaMembers. Accepted:
  // one record per member, each AF_INET (no bytes past the 4 of the address, no scope) or
  // AF_INET6 with a port, unused records zero; each converts to the address connect() resolves.
  wire::MetaCmAddrs ca{};
  const size_t at2 = at + sizeof x;
  if (size > at2) std::memcpy(&ca, data + at2, std::min(size - at2, sizeof ca));
  const Status cs = wire::validate_cm_addrs(x, ca);
  if (!cs.is_ok()) {
    FUZZ_CHECK(!cs.message().empty(), "rdma_cm addresses rejection without a reason");
    return 0;
  }
  FUZZ_CHECK(ca.nmembers == x.nmembers, "%u addresses for %u members", ca.nmembers, x.nmembers);
  for (int i = 0; i < ca.nmembers; ++i) {
    const sockaddr_storage sa = wire::cm_member_address(ca, i);
    FUZZ_CHECK(sa.ss_family == AF_INET || sa.ss_family == AF_INET6, "member %d family", i);
    FUZZ_CHECK(reinterpret_cast<const sockaddr_in*>(&sa)->sin_port != 0, "member %d port 0", i);
    wire::MetaCmAddrs back{};
    wire::encode_cm_addrs(&sa, 1, &back);
    FUZZ_CHECK(std::memcmp(&back.members[0], &ca.members[i], sizeof back.members[0]) == 0,
               "member %d's address does not round-trip", i);
  }
  return 0;
}
