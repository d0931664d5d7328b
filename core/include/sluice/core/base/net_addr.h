// Addresses: CIDR ranges, GID classification and automatic RoCE GID choice, and the choice of the
// IP interface for the out-of-band TCP socket. Pure functions, unit-tested without verbs.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/core/base/status.h"

namespace sluice {

using GidBytes = std::array<uint8_t, 16>;

// "10.0.0.0/16", "fd00::/8". Family AF_INET or AF_INET6.
struct Cidr {
  int family = 0;
  std::array<uint8_t, 16> addr{};  // network byte order; IPv4 uses the first 4 bytes
  int prefix_len = 0;
  static Result<Cidr> parse(std::string_view text);
  bool contains_gid(const GidBytes& gid) const;  // IPv4-mapped GIDs compare as IPv4
};

// "fe80::1", "::ffff:10.0.0.1" -> "10.0.0.1" for IPv4-mapped.
std::string gid_to_string(const GidBytes& gid);
bool gid_is_zero(const GidBytes& gid);
bool gid_is_ipv4_mapped(const GidBytes& gid);  // ::ffff:a.b.c.d
bool gid_is_link_local(const GidBytes& gid);   // fe80::/10
// The IP address a GID is (IPv4 for IPv4-mapped, else IPv6), port 0.
sockaddr_storage gid_to_sockaddr(const GidBytes& gid);
// True when the first `bits` bits of a and b agree (an address prefix, a subnet).
bool prefix_equal(const uint8_t* a, const uint8_t* b, int bits);

struct GidEntry {
  int index = 0;
  GidBytes gid{};
  int roce_version = 0;  // 1, 2, or 0 = unknown (sysfs gid_attrs/types unreadable)
};

struct GidPolicy {
  int forced_index = -1;  // NCCL_IB_GID_INDEX (>= 0 wins outright, if it exists in `gids`)
  int family = AF_INET;   // NCCL_IB_ADDR_FAMILY
  std::string range;      // NCCL_IB_ADDR_RANGE ("" = any)
  int roce_version = 2;   // NCCL_IB_ROCE_VERSION_NUM
};

struct GidChoice {
  int index = -1;
  GidBytes gid{};
  std::string reason;  // one line, e.g. "RoCEv2 IPv4 10.0.0.1 (NCCL_IB_ADDR_FAMILY=AF_INET)"
};

// RoCE: forced index if set (error if absent or zero); else preference order: RoCE version ==
// policy, family == policy (IPv4-mapped = AF_INET), inside range, not link-local; link-local only
// when nothing else exists; lowest index breaks ties. Empty or all-zero table -> error.
Result<GidChoice> choose_roce_gid(const std::vector<GidEntry>& gids, const GidPolicy& policy);

struct IfAddr {
  std::string name;
  int family = 0;
  sockaddr_storage addr{};  // port 0
  bool up = true;
  bool loopback = false;
};

// NCCL_SOCKET_IFNAME syntax (same prefix / '=' / '^' rules as NCCL_IB_HCA, no ports); family 0 =
// any. Auto order (spec empty): "ib*", then anything but docker*/lo/virbr*, then docker*, lo,
// virbr*. Within a class: IPv4 before IPv6 unless family says otherwise; IPv6 link-local last.
Result<IfAddr> choose_interface(const std::vector<IfAddr>& addrs, std::string_view ifname_spec,
                                int family);
std::vector<IfAddr> list_interfaces();  // getifaddrs(), up interfaces only
std::string sockaddr_to_string(
    const sockaddr_storage& sa);  // "10.0.0.1:4711", "[fe80::1%eth0]:4711"
std::string address_to_string(const sockaddr_storage& sa);  // "10.0.0.1", "fe80::1%eth0"
// The same IP address (family and address bytes; port and IPv6 scope ignored).
bool same_address(const sockaddr_storage& a, const sockaddr_storage& b);

// An IP address of a verbs port (device_info.h, port_addresses).
struct PortAddr {
  sockaddr_storage addr{};  // port 0
  int gid_index = -1;       // RoCE: the GID that is this address; -1: read from the netdev
  bool link_local = false;  // an IPv6 link-local RoCE GID: no scope here, chosen only as `keep`
};

struct CmAddrChoice {
  int index = -1;           // into the port's addresses; -1 = none fits
  bool kept = false;        // it is `keep`: bind `keep` itself (it has the IPv6 scope a GID lacks)
  std::string reason;       // why this one (INFO), or why none
  sockaddr_storage addr{};  // what to bind: `keep` when kept, else addrs[index]; port 0
};

// The address of a port (`addrs`, port_addresses order) that rdma_cm binds for it: the listener's
// rdma_cm listener, or a connector's source. `keep` itself when it is one of them and of `family`
// (the listener's out-of-band address on its own device: the address it always used; link-local
// too); else one of `family`, the address of GID `gid_index` (the port's chosen GID) first, else
// the first; else, unless `strict`, the first address of another family; never a link-local one.
// None when nothing fits.
CmAddrChoice choose_cm_address(const std::vector<PortAddr>& addrs, const sockaddr_storage& keep,
                               int family, bool strict, int gid_index);

}  // namespace sluice
