#include "sluice/core/wire/wire.h"

#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "sluice/core/base/net_addr.h"
#include "sluice/core/base/verbs.h"

namespace sluice::wire {

bool same_nonce(const Nonce& a, const Nonce& b) {
  // Every byte is read whatever the earlier ones were; the empty asm keeps the compiler from
  // turning the accumulation into an early exit.
  unsigned diff = 0;
  for (size_t i = 0; i < kNonceBytes; ++i) {
    diff |= static_cast<unsigned>(a.bytes[i] ^ b.bytes[i]);
    asm volatile("" : "+r"(diff));
  }
  return diff == 0;
}

Status new_nonce(Nonce* out) {
  return new_nonce_from(out, &::getrandom, kRandomSeedWaitMs);
}

Status new_nonce_from(Nonce* out, RandomSource source, int wait_ms) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = Clock::now();
  size_t got = 0;
  while (got < sizeof out->bytes) {
    // The urandom source. It has data once the kernel's pool was first seeded, at boot; before
    // that, getrandom without GRND_NONBLOCK would block for as long as seeding takes (over 60 s
    // seen in a TCG VM without RDRAND: a listen that never returned), so it is polled here
    // within wait_ms instead.
    const ssize_t n = source(out->bytes + got, sizeof out->bytes - got, GRND_NONBLOCK);
    if (n > 0) {
      got += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      const auto waited =
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
      if (waited >= wait_ms) {
        return Status(Code::kSystemError,
                      "cannot draw a nonce: the kernel's random pool is still not initialized "
                      "after " +
                          std::to_string(waited) +
                          " ms (getrandom(2): EAGAIN; early boot on a host without a hardware "
                          "random source such as RDRAND, a TPM or a virtio-rng device: wait for "
                          "\"random: crng init done\" in dmesg, or seed it with rngd; Sluice uses "
                          "no weaker source)");
      }
      const timespec pause{0, kRandomSeedPollNs};
      nanosleep(&pause, nullptr);
      continue;
    }
    const int err = n < 0 ? errno : EIO;
    return errno_status(Code::kSystemError,
                        "listen: cannot read the listener's nonce from the OS's random source "
                        "(getrandom(2); Linux 3.17 or later, and a seccomp profile that allows "
                        "it, are needed; Sluice uses no weaker source)",
                        err);
  }
  return Status::ok();
}

uint64_t nonce_fold(const Nonce& n) {
  uint64_t lo = 0, hi = 0;
  std::memcpy(&lo, n.bytes, 8);
  std::memcpy(&hi, n.bytes + 8, 8);
  return lo ^ hi;
}

uint32_t handle_checksum(const Handle& h) {
  const auto* p = reinterpret_cast<const uint8_t*>(&h);
  uint32_t x = 2166136261u;
  for (size_t i = 0; i < offsetof(Handle, checksum); ++i) {
    x ^= p[i];
    x *= 16777619u;
  }
  return x;
}

Status validate_handle(const Handle& h) {
  if (h.magic != kHandleMagic) {
    return Status(Code::kInvalidArgument,
                  "connection handle is not a Sluice handle (bad magic): corrupt handle, or the "
                  "listener uses a different network plugin");
  }
  if (h.version != kVersion)
    return Status(Code::kInvalidArgument, version_mismatch("connection handle", h.version));
  if (handle_checksum(h) != h.checksum)
    return Status(Code::kInvalidArgument, "connection handle checksum mismatch: corrupt handle");
  if (h.family != AF_INET && h.family != AF_INET6)
    return Status(Code::kInvalidArgument, "connection handle has an unknown address family");
  if (h.cm_family != AF_UNSPEC && h.cm_family != AF_INET && h.cm_family != AF_INET6) {
    return Status(
        Code::kInvalidArgument,
        "connection handle has an unknown rdma_cm address family " + std::to_string(h.cm_family));
  }
  if (h.port == 0) return Status(Code::kInvalidArgument, "connection handle has port 0");
  if (h.members > kMaxMetaMembers) {
    return Status(Code::kInvalidArgument, "connection handle names " + std::to_string(h.members) +
                                              " member devices (at most " +
                                              std::to_string(kMaxMetaMembers) + ")");
  }
  return Status::ok();
}

std::string version_mismatch(const char* what, unsigned theirs) {
  return std::string(what) + " has Sluice wire version " + std::to_string(theirs) +
         ", this Sluice speaks " + std::to_string(kVersion) +
         ": the peer runs another Sluice wire version; run the same Sluice release on every host "
         "of the job";
}

Handle encode_handle(const sockaddr_storage& sa, uint32_t listen_dev, const Nonce& nonce,
                     uint16_t cm_port, const sockaddr_storage* cm_addr, uint16_t members) {
  Handle h{};
  h.cm_port = cm_port;
  h.members = members;
  h.magic = kHandleMagic;
  h.version = kVersion;
  h.family = sa.ss_family;
  if (sa.ss_family == AF_INET) {
    const auto* s4 = reinterpret_cast<const sockaddr_in*>(&sa);
    h.port = s4->sin_port;
    std::memcpy(h.addr, &s4->sin_addr, 4);
  } else {
    const auto* s6 = reinterpret_cast<const sockaddr_in6*>(&sa);
    h.port = s6->sin6_port;
    std::memcpy(h.addr, &s6->sin6_addr, 16);
    h.scope_id = s6->sin6_scope_id;
  }
  if (cm_port != 0 && cm_addr != nullptr && !same_address(*cm_addr, sa)) {
    h.cm_family = cm_addr->ss_family;
    if (cm_addr->ss_family == AF_INET)
      std::memcpy(h.cm_addr, &reinterpret_cast<const sockaddr_in*>(cm_addr)->sin_addr, 4);
    else
      std::memcpy(h.cm_addr, &reinterpret_cast<const sockaddr_in6*>(cm_addr)->sin6_addr, 16);
  }
  h.listen_dev = listen_dev;
  h.nonce = nonce;
  h.checksum = handle_checksum(h);
  return h;
}

void handle_address(const Handle& h, sockaddr_storage* sa, socklen_t* len) {
  std::memset(sa, 0, sizeof *sa);
  if (h.family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(sa);
    a->sin_family = AF_INET;
    a->sin_port = h.port;
    std::memcpy(&a->sin_addr, h.addr, 4);
    *len = sizeof(sockaddr_in);
  } else {
    auto* a = reinterpret_cast<sockaddr_in6*>(sa);
    a->sin6_family = AF_INET6;
    a->sin6_port = h.port;
    std::memcpy(&a->sin6_addr, h.addr, 16);
    a->sin6_scope_id = h.scope_id;
    *len = sizeof(sockaddr_in6);
  }
}

bool handle_cm_address(const Handle& h, sockaddr_storage* sa) {
  if (h.cm_port == 0) return false;
  socklen_t len = 0;
  handle_address(h, sa, &len);  // cm_family 0: at the out-of-band address (scope id included)
  if (h.cm_family == AF_INET) {
    std::memset(sa, 0, sizeof *sa);
    auto* a = reinterpret_cast<sockaddr_in*>(sa);
    a->sin_family = AF_INET;
    std::memcpy(&a->sin_addr, h.cm_addr, 4);
  } else if (h.cm_family == AF_INET6) {
    std::memset(sa, 0, sizeof *sa);
    auto* a = reinterpret_cast<sockaddr_in6*>(sa);
    a->sin6_family = AF_INET6;
    std::memcpy(&a->sin6_addr, h.cm_addr, 16);
  }
  // The port is at the same offset in sockaddr_in and sockaddr_in6.
  reinterpret_cast<sockaddr_in*>(sa)->sin_port = h.cm_port;
  return true;
}

Status check_meta_prefix(const void* bytes, size_t n) {
  const auto* p = static_cast<const uint8_t*>(bytes);
  uint8_t magic[sizeof kMetaMagic];
  std::memcpy(magic, &kMetaMagic, sizeof magic);
  for (size_t i = 0; i < std::min(n, sizeof magic); ++i) {
    if (p[i] != magic[i]) {
      char what[96];
      std::snprintf(what, sizeof what, "byte %zu is 0x%02x, expected 0x%02x", i, p[i], magic[i]);
      return Status(
          Code::kRemoteError,
          std::string("not a Sluice peer: bad magic in its connection metadata (") + what + ")");
    }
  }
  if (n < kMetaHeaderBytes) return Status::ok();
  uint16_t version;
  std::memcpy(&version, p + offsetof(Meta, version), sizeof version);
  if (version != kVersion)
    return Status(Code::kRemoteError, version_mismatch("the peer's connection metadata", version));
  return Status::ok();
}

Status validate_meta(const Meta& m, uint8_t expected_role, const Nonce& nonce) {
  if (m.magic != kMetaMagic)
    return Status(Code::kRemoteError, "peer sent no Sluice connection metadata (bad magic)");
  if (m.version != kVersion)
    return Status(Code::kRemoteError,
                  version_mismatch("the peer's connection metadata", m.version));
  if (m.role != expected_role)
    return Status(Code::kRemoteError, "peer metadata has the wrong role");
  if (!same_nonce(m.nonce, nonce))
    return Status(Code::kRemoteError, "peer metadata is for another listener (nonce mismatch)");
  if (m.nqps == 0 || m.nqps > kMaxQps)
    return Status(Code::kRemoteError, "peer metadata has " + std::to_string(m.nqps) + " QPs");
  if (m.cm > kMetaCmRdmacm) {
    return Status(Code::kRemoteError,
                  "peer metadata has connection manager " + std::to_string(m.cm) + " (0 or 1)");
  }
  if (m.split_data > 1) {
    return Status(Code::kRemoteError,
                  "peer metadata has split_data = " + std::to_string(m.split_data));
  }
  if (m.fifo_slots != static_cast<uint32_t>(kFifoSlots))
    return Status(Code::kRemoteError, "peer uses a FIFO depth of " + std::to_string(m.fifo_slots));
  if (m.dev_name[sizeof m.dev_name - 1] != '\0')
    return Status(Code::kRemoteError, "peer metadata device name is not terminated");
  if ((m.features & kMetaFeatureEce) != 0 &&
      std::memchr(m.dev_name, '\0', kMetaNameBytesEce) == nullptr) {
    return Status(Code::kRemoteError,
                  "peer metadata carries ECE but its device name is not terminated within " +
                      std::to_string(kMetaNameBytesEce) + " bytes");
  }
  // connect_qps() uses it as an enum ibv_mtu (IBV_MTU_256 = 1 .. IBV_MTU_4096 = 5).
  if (m.mtu < 1 || m.mtu > 5)
    return Status(Code::kRemoteError, "peer metadata has an invalid path MTU code " +
                                          std::to_string(m.mtu) + " (expected 1..5)");
  return Status::ok();
}

static_assert(kMetaNameBytesEce + 3 * sizeof(uint32_t) == sizeof(Meta::dev_name));

bool put_meta_ece(Meta* m, const MetaEce& e) {
  if (e.comp_mask > 0xffffffu) return false;
  m->dev_name[kMetaNameBytesEce - 1] = '\0';
  std::memcpy(m->dev_name + kMetaNameBytesEce, &e.vendor_id, 4);
  std::memcpy(m->dev_name + kMetaNameBytesEce + 4, &e.options, 4);
  std::memcpy(m->dev_name + kMetaNameBytesEce + 8, &e.comp_mask, 4);
  m->features |= kMetaFeatureEce;
  return true;
}

bool meta_ece(const Meta& m, MetaEce* out) {
  if ((m.features & kMetaFeatureEce) == 0) return false;
  std::memcpy(&out->vendor_id, m.dev_name + kMetaNameBytesEce, 4);
  std::memcpy(&out->options, m.dev_name + kMetaNameBytesEce + 4, 4);
  std::memcpy(&out->comp_mask, m.dev_name + kMetaNameBytesEce + 8, 4);
  return true;
}

Status check_peer_meta(const Meta& local, const Meta& remote, const std::string& local_dev) {
  if (remote.link_layer != local.link_layer) {
    return Status(Code::kInvalidUsage,
                  "cannot connect " + local_dev + " (" + verbs::link_layer_name(local.link_layer) +
                      ") to " + remote.dev_name + " (" + verbs::link_layer_name(remote.link_layer) +
                      "): select NICs of one link type with NCCL_IB_HCA");
  }
  if (remote.nqps != local.nqps) {
    return Status(Code::kRemoteError, "peer has " + std::to_string(remote.nqps) +
                                          " QPs for this connection, we have " +
                                          std::to_string(local.nqps));
  }
  return Status::ok();
}

void init_members(MetaMembers* ext, int nmembers, int npaths, int qps_per_path) {
  std::memset(ext, 0, sizeof *ext);
  ext->magic = kMembersMagic;
  ext->version = kMembersVersion;
  ext->nmembers = static_cast<uint8_t>(nmembers);
  ext->npaths = static_cast<uint8_t>(npaths);
  ext->qps_per_path = static_cast<uint8_t>(qps_per_path);
}

Status validate_members(const Meta& m, const MetaMembers& x) {
  const auto bad = [](const std::string& what) {
    return Status(Code::kRemoteError, "peer's member metadata (fused device) " + what);
  };
  if (x.magic != kMembersMagic) return bad("has a bad magic");
  if (x.version != kMembersVersion) {
    return bad("has version " + std::to_string(x.version) + ", this Sluice reads " +
               std::to_string(kMembersVersion) + ": run the same Sluice release on every host");
  }
  if (x.nmembers < 1 || x.nmembers > kMaxMetaMembers)
    return bad("has " + std::to_string(x.nmembers) + " members (1.." +
               std::to_string(kMaxMetaMembers) + ")");
  if (x.npaths < x.nmembers || x.npaths > kMaxMetaMembers)
    return bad("has " + std::to_string(x.npaths) + " paths for " + std::to_string(x.nmembers) +
               " members (members.." + std::to_string(kMaxMetaMembers) + ")");
  if (x.qps_per_path < 1 || x.npaths * x.qps_per_path != m.nqps)
    return bad("has " + std::to_string(x.npaths) + " paths of " + std::to_string(x.qps_per_path) +
               " QPs, but the connection has " + std::to_string(m.nqps) + " QPs");
  for (uint8_t b : x.reserved)
    if (b != 0) return bad("has non-zero reserved bytes");
  if ((x.flags & ~kMembersFlagsKnown) != 0)
    return bad("has unknown flags 0x" + std::to_string(x.flags));
  bool any_weight = false;
  for (int i = 0; i < kMaxMetaMembers; ++i) {
    const MemberInfo& e = x.members[i];
    if (i >= x.nmembers) {  // unused records are zero, so a later version can use them
      static const MemberInfo zero{};
      if (std::memcmp(&e, &zero, sizeof e) != 0)
        return bad("has bytes in the record of member " + std::to_string(i) + " it does not have");
      continue;
    }
    const std::string who = "member " + std::to_string(i);
    if (e.mtu < 1 || e.mtu > 5)
      return bad("gives " + who + " an invalid path MTU code " + std::to_string(e.mtu));
    if (e.link_layer != m.link_layer)
      return bad("mixes link layers: " + who + " is " + verbs::link_layer_name(e.link_layer) +
                 ", member 0 " + verbs::link_layer_name(m.link_layer));
    if (e.reserved != 0) return bad("has non-zero reserved bytes in " + who);
    any_weight = any_weight || e.weight > 0;
  }
  const MemberInfo& z = x.members[0];
  if (std::memcmp(z.gid, m.gid, 16) != 0 || z.lid != m.lid || z.port != m.port || z.mtu != m.mtu ||
      z.gid_index != m.gid_index || z.buf_rkey != m.buf_rkey)
    return bad("disagrees with its own metadata about member 0");
  if (!any_weight) return bad("gives every member weight 0");
  return Status::ok();
}

Status check_peer_members(const MetaMembers& local, const MetaMembers& remote) {
  const int want = std::max(local.nmembers, remote.nmembers);
  if (local.npaths != want || remote.npaths != want || local.qps_per_path != remote.qps_per_path) {
    return Status(Code::kRemoteError,
                  "fused connection: the peer has " + std::to_string(remote.nmembers) +
                      " member(s) and " + std::to_string(remote.npaths) + " path(s) of " +
                      std::to_string(remote.qps_per_path) + " QP(s), we have " +
                      std::to_string(local.nmembers) + " and " + std::to_string(local.npaths) +
                      " of " + std::to_string(local.qps_per_path) + " (expected " +
                      std::to_string(want) + " paths on both sides)");
  }
  return Status::ok();
}

MetaMembers members_of_meta(const Meta& m) {
  MetaMembers x;
  init_members(&x, 1, 1, m.nqps);
  MemberInfo& z = x.members[0];
  std::memcpy(z.gid, m.gid, 16);
  z.lid = m.lid;
  z.port = m.port;
  z.mtu = m.mtu;
  z.gid_index = m.gid_index;
  z.link_layer = m.link_layer;
  z.weight = 1;
  z.buf_rkey = m.buf_rkey;
  return x;
}

void encode_cm_addrs(const sockaddr_storage* addrs, int n, MetaCmAddrs* x) {
  std::memset(x, 0, sizeof *x);
  x->magic = kCmAddrsMagic;
  x->version = kCmAddrsVersion;
  x->nmembers = static_cast<uint8_t>(n);
  for (int m = 0; m < n && m < kMaxMetaMembers; ++m) {
    CmMemberAddr& a = x->members[m];
    a.family = addrs[m].ss_family;
    if (a.family == AF_INET) {
      const auto* v4 = reinterpret_cast<const sockaddr_in*>(&addrs[m]);
      std::memcpy(a.addr, &v4->sin_addr, 4);
      a.port = v4->sin_port;
    } else {
      const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&addrs[m]);
      std::memcpy(a.addr, &v6->sin6_addr, 16);
      a.port = v6->sin6_port;
      a.scope_id = v6->sin6_scope_id;
    }
  }
}

Status validate_cm_addrs(const MetaMembers& members, const MetaCmAddrs& x) {
  const auto bad = [](const std::string& what) {
    return Status(Code::kRemoteError, "peer's rdma_cm addresses of its members " + what);
  };
  if (x.magic != kCmAddrsMagic) return bad("have a bad magic");
  if (x.version != kCmAddrsVersion)
    return bad("have version " + std::to_string(x.version) + ", this Sluice reads " +
               std::to_string(kCmAddrsVersion) + ": run the same Sluice release on every host");
  if (x.nmembers != members.nmembers)
    return bad("name " + std::to_string(x.nmembers) + " members, its metadata " +
               std::to_string(members.nmembers));
  if (x.reserved != 0) return bad("have a non-zero reserved byte");
  for (int m = 0; m < kMaxMetaMembers; ++m) {
    const CmMemberAddr& a = x.members[m];
    if (m >= x.nmembers) {
      static const CmMemberAddr zero{};
      if (std::memcmp(&a, &zero, sizeof a) != 0)
        return bad("have bytes in the record of member " + std::to_string(m) + " it does not have");
      continue;
    }
    const std::string who = "member " + std::to_string(m);
    if (a.family != AF_INET && a.family != AF_INET6)
      return bad("give " + who + " address family " + std::to_string(a.family));
    if (a.port == 0) return bad("give " + who + " port 0");
    if (a.family == AF_INET) {
      for (int b = 4; b < 16; ++b)
        if (a.addr[b] != 0) return bad("give " + who + " an IPv4 address with trailing bytes");
      if (a.scope_id != 0) return bad("give " + who + " an IPv4 address with a scope id");
    }
  }
  return Status::ok();
}

sockaddr_storage cm_member_address(const MetaCmAddrs& x, int m) {
  sockaddr_storage sa{};
  const CmMemberAddr& a = x.members[m];
  if (a.family == AF_INET) {
    auto* v4 = reinterpret_cast<sockaddr_in*>(&sa);
    v4->sin_family = AF_INET;
    v4->sin_port = a.port;
    std::memcpy(&v4->sin_addr, a.addr, 4);
  } else {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&sa);
    v6->sin6_family = AF_INET6;
    v6->sin6_port = a.port;
    std::memcpy(&v6->sin6_addr, a.addr, 16);
    v6->sin6_scope_id = a.scope_id;
  }
  return sa;
}

Status validate_cm_token(const void* data, size_t len, const Nonce& nonce, CmToken* out) {
  if (data == nullptr || len < sizeof(CmToken)) {
    return Status(Code::kRemoteError, "rdma_cm request carries " + std::to_string(len) +
                                          " bytes of private data, not a Sluice token (" +
                                          std::to_string(sizeof(CmToken)) + ")");
  }
  std::memcpy(out, data, sizeof *out);
  if (out->magic != kCmTokenMagic)
    return Status(Code::kRemoteError, "rdma_cm request is not from Sluice (bad token magic)");
  if (out->version != kVersion)
    return Status(Code::kRemoteError, version_mismatch("rdma_cm request token", out->version));
  if (out->nqps == 0 || out->nqps > kMaxQps || out->qp_index >= out->nqps) {
    return Status(Code::kRemoteError, "rdma_cm request token names QP " +
                                          std::to_string(out->qp_index) + " of " +
                                          std::to_string(out->nqps));
  }
  if (!same_nonce(out->nonce, nonce))
    return Status(Code::kRemoteError, "rdma_cm request for another listener (nonce mismatch)");
  return Status::ok();
}

uint32_t fnv1a32(const uint8_t* p, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 16777619u;
  }
  return h;
}

namespace {

char printable(uint8_t b) {
  return b >= 0x20 && b < 0x7f ? static_cast<char>(b) : '?';
}

}  // namespace

size_t encode_notice(const std::string& reason, uint8_t* out) {
  const std::string text = reason.empty() ? std::string("unspecified") : reason;
  const size_t n = std::min(text.size(), kNoticeMaxText);
  out[0] = kNoticeMagic;
  out[1] = kNoticeVersion;
  out[2] = static_cast<uint8_t>(n & 0xff);
  out[3] = static_cast<uint8_t>(n >> 8);
  for (size_t i = 0; i < n; ++i)
    out[kNoticeHeaderBytes + i] = static_cast<uint8_t>(printable(static_cast<uint8_t>(text[i])));
  const uint32_t h = fnv1a32(out, kNoticeHeaderBytes + n);
  for (int k = 0; k < 4; ++k) out[kNoticeHeaderBytes + n + k] = static_cast<uint8_t>(h >> (8 * k));
  return kNoticeHeaderBytes + n + 4;
}

NoticeParse decode_notice(const uint8_t* p, size_t n, std::string* text, size_t* used) {
  *used = 0;
  if (n == 0) return NoticeParse::kIncomplete;
  if (p[0] != kNoticeMagic) {
    *text = "not a failure notice (first byte " + std::to_string(p[0]) + ")";
    return NoticeParse::kBad;
  }
  if (n < 2) return NoticeParse::kIncomplete;
  if (p[1] == 0) {
    *text = "failure notice of version 0";
    return NoticeParse::kBad;
  }
  if (n < kNoticeHeaderBytes) return NoticeParse::kIncomplete;
  const size_t len = p[2] | (static_cast<size_t>(p[3]) << 8);
  if (len == 0 || len > kNoticeMaxText) {
    *text = "failure notice with a text length of " + std::to_string(len) + " bytes (1.." +
            std::to_string(kNoticeMaxText) + ")";
    return NoticeParse::kBad;
  }
  const size_t total = kNoticeHeaderBytes + len + 4;
  if (n < total) return NoticeParse::kIncomplete;
  uint32_t h = 0;
  for (int k = 0; k < 4; ++k)
    h |= static_cast<uint32_t>(p[kNoticeHeaderBytes + len + k]) << (8 * k);
  if (h != fnv1a32(p, kNoticeHeaderBytes + len)) {
    *text = "failure notice with a bad checksum (corrupt)";
    return NoticeParse::kBad;
  }
  // Version 1 writes printable ASCII only (encode_notice): a version-1 text with any other byte,
  // under a good checksum, came from no Sluice and is refused, so that a reason is always quoted
  // exactly as the peer sent it. A later version's text is made printable ('?').
  if (p[1] == kNoticeVersion) {
    for (size_t i = 0; i < len; ++i) {
      const uint8_t b = p[kNoticeHeaderBytes + i];
      if (printable(b) != static_cast<char>(b)) {
        *text = "failure notice of version 1 with a non-printable byte (" + std::to_string(b) +
                ") at " + std::to_string(i) + " of its text";
        return NoticeParse::kBad;
      }
    }
  }
  text->assign(len, '?');
  for (size_t i = 0; i < len; ++i) (*text)[i] = printable(p[kNoticeHeaderBytes + i]);
  *used = total;
  return NoticeParse::kOk;
}

}  // namespace sluice::wire
