#include "sluice/core/base/net_addr.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <optional>
#include <string>
#include <tuple>

#include "base/text.h"
#include "sluice/core/base/hca_filter.h"

namespace sluice {
namespace {

using text::trim;

std::string family_name(int family) {
  switch (family) {
    case AF_INET:
      return "AF_INET";
    case AF_INET6:
      return "AF_INET6";
    case 0:
      return "any";
  }
  return "family " + std::to_string(family);
}

}  // namespace

bool prefix_equal(const uint8_t* a, const uint8_t* b, int bits) {
  const int whole = bits / 8;
  if (std::memcmp(a, b, static_cast<size_t>(whole)) != 0) return false;
  const int rest = bits % 8;
  if (rest == 0) return true;
  const auto mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (a[whole] & mask) == (b[whole] & mask);
}

// ---------------------------------------------------------------------------------------------
// CIDR and GIDs

Result<Cidr> Cidr::parse(std::string_view text) {
  const std::string_view t = trim(text);
  auto bad = [&](std::string_view why) {
    return Status(Code::kInvalidUsage,
                  "\"" + std::string(text) + "\" is not a CIDR range (" + std::string(why) + ")");
  };
  const auto slash = t.find('/');
  if (slash == std::string_view::npos) return bad("expected address/prefix-length");
  const std::string addr(trim(t.substr(0, slash)));
  const std::string_view len = trim(t.substr(slash + 1));

  Cidr c;
  if (inet_pton(AF_INET, addr.c_str(), c.addr.data()) == 1) {
    c.family = AF_INET;
  } else if (inet_pton(AF_INET6, addr.c_str(), c.addr.data()) == 1) {
    c.family = AF_INET6;
  } else {
    return bad("\"" + addr + "\" is neither an IPv4 nor an IPv6 address");
  }
  const int max_len = c.family == AF_INET ? 32 : 128;
  int value = -1;
  const auto [end, ec] = std::from_chars(len.data(), len.data() + len.size(), value);
  if (len.empty() || ec != std::errc() || end != len.data() + len.size() || value < 0 ||
      value > max_len) {
    return bad("prefix length must be an integer in 0.." + std::to_string(max_len));
  }
  c.prefix_len = value;
  // Clear host bits so the stored address is the network address.
  for (int bit = value; bit < max_len; ++bit) {
    c.addr[static_cast<size_t>(bit / 8)] &= static_cast<uint8_t>(~(0x80 >> (bit % 8)));
  }
  return c;
}

bool Cidr::contains_gid(const GidBytes& gid) const {
  if (family == AF_INET) {
    return gid_is_ipv4_mapped(gid) && prefix_equal(addr.data(), gid.data() + 12, prefix_len);
  }
  if (family == AF_INET6) return prefix_equal(addr.data(), gid.data(), prefix_len);
  return false;
}

std::string gid_to_string(const GidBytes& gid) {
  char buf[INET6_ADDRSTRLEN];
  if (gid_is_ipv4_mapped(gid)) {
    inet_ntop(AF_INET, gid.data() + 12, buf, sizeof buf);
  } else {
    inet_ntop(AF_INET6, gid.data(), buf, sizeof buf);
  }
  return buf;
}

bool gid_is_zero(const GidBytes& gid) {
  return std::all_of(gid.begin(), gid.end(), [](uint8_t b) { return b == 0; });
}

bool gid_is_ipv4_mapped(const GidBytes& gid) {
  for (int i = 0; i < 10; ++i) {
    if (gid[static_cast<size_t>(i)] != 0) return false;
  }
  return gid[10] == 0xff && gid[11] == 0xff;
}

sockaddr_storage gid_to_sockaddr(const GidBytes& g) {
  sockaddr_storage sa{};
  if (gid_is_ipv4_mapped(g)) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&sa);
    sin->sin_family = AF_INET;
    std::memcpy(&sin->sin_addr, g.data() + 12, 4);
  } else {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&sa);
    sin6->sin6_family = AF_INET6;
    std::memcpy(&sin6->sin6_addr, g.data(), 16);
  }
  return sa;
}

bool gid_is_link_local(const GidBytes& gid) {
  return gid[0] == 0xfe && (gid[1] & 0xc0) == 0x80;
}

// ---------------------------------------------------------------------------------------------
// RoCE GID choice

namespace {

std::string valid_indexes(const std::vector<GidEntry>& gids) {
  std::string s;
  for (const GidEntry& g : gids) {
    if (gid_is_zero(g.gid)) continue;
    if (!s.empty()) s += ", ";
    s += std::to_string(g.index);
  }
  return s.empty() ? "none (every GID is zero)" : s;
}

std::string describe_gid(const GidEntry& g) {
  std::string s =
      g.roce_version == 0 ? "RoCE version unknown" : "RoCE v" + std::to_string(g.roce_version);
  if (gid_is_link_local(g.gid)) {
    s += ", link-local ";
  } else {
    s += gid_is_ipv4_mapped(g.gid) ? ", IPv4 " : ", IPv6 ";
  }
  return s + gid_to_string(g.gid);
}

int gid_family(const GidBytes& gid) {
  return gid_is_ipv4_mapped(gid) ? AF_INET : AF_INET6;
}

}  // namespace

Result<GidChoice> choose_roce_gid(const std::vector<GidEntry>& gids, const GidPolicy& policy) {
  if (policy.forced_index >= 0) {
    const std::string what = "NCCL_IB_GID_INDEX=" + std::to_string(policy.forced_index);
    const auto it = std::find_if(gids.begin(), gids.end(),
                                 [&](const GidEntry& g) { return g.index == policy.forced_index; });
    if (it == gids.end()) {
      return Status(Code::kInvalidUsage, what + ": the port has no GID at index " +
                                             std::to_string(policy.forced_index) +
                                             "; valid indexes: " + valid_indexes(gids));
    }
    if (gid_is_zero(it->gid)) {
      return Status(Code::kInvalidUsage,
                    what + ": GID index " + std::to_string(policy.forced_index) +
                        " is all zeros (not configured); valid indexes: " + valid_indexes(gids));
    }
    return GidChoice{it->index, it->gid,
                     "index " + std::to_string(it->index) + ": " + describe_gid(*it) +
                         " (forced by " + what + ")"};
  }

  std::optional<Cidr> range;
  if (!policy.range.empty()) {
    auto r = Cidr::parse(policy.range);
    if (!r.is_ok()) return r.status().with_context("NCCL_IB_ADDR_RANGE");
    range = r.value();
  }

  // Preference, most important first: routable (not link-local), RoCE version == policy, family
  // == policy, inside the range; the lowest index breaks ties. Link-local GIDs therefore win only
  // when nothing else is configured.
  struct Score {
    bool routable, version, family, in_range;
    auto key() const { return std::make_tuple(routable, version, family, in_range); }
  };
  const GidEntry* best = nullptr;
  Score best_score{};
  for (const GidEntry& g : gids) {
    if (gid_is_zero(g.gid)) continue;
    const Score s{!gid_is_link_local(g.gid), g.roce_version == policy.roce_version,
                  gid_family(g.gid) == policy.family, !range || range->contains_gid(g.gid)};
    if (best == nullptr || s.key() > best_score.key() ||
        (s.key() == best_score.key() && g.index < best->index)) {
      best = &g;
      best_score = s;
    }
  }
  if (best == nullptr) {
    return Status(Code::kSystemError,
                  gids.empty() ? std::string("the port's GID table is empty")
                               : "every one of the port's " + std::to_string(gids.size()) +
                                     " GIDs is all zeros (no IP address configured on the "
                                     "netdev?)");
  }

  const std::string want_ver = "RoCE v" + std::to_string(policy.roce_version);
  const std::string want_fam = family_name(policy.family);
  std::string reason = "index " + std::to_string(best->index) + ": " + describe_gid(*best);
  if (range) {
    reason += (best_score.in_range ? " in " : " outside ") + std::string("NCCL_IB_ADDR_RANGE=") +
              policy.range;
  }
  // Name the first preference that nothing could satisfy (the later ones were judged only among
  // GIDs that failed it as well).
  std::string note;
  if (!best_score.routable) {
    note = "only link-local GIDs are configured";
  } else if (!best_score.version) {
    note = "no routable " + want_ver + " GID";
  } else if (!best_score.family) {
    note = "no routable " + want_ver + " GID of family " + want_fam;
  } else if (!best_score.in_range) {
    note =
        "no routable " + want_ver + " " + want_fam + " GID in NCCL_IB_ADDR_RANGE=" + policy.range;
  }
  if (!note.empty()) reason += " (" + note + ")";
  return GidChoice{best->index, best->gid, std::move(reason)};
}

// ---------------------------------------------------------------------------------------------
// Interfaces for the out-of-band socket

namespace {

bool is_v6_link_local(const IfAddr& a) {
  if (a.family != AF_INET6) return false;
  const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(&a.addr);
  return IN6_IS_ADDR_LINKLOCAL(&sin6->sin6_addr);
}

// NCCL's automatic order (src/misc/socket.cc): ib*, anything else, docker*, lo, virbr*.
int interface_class(const IfAddr& a) {
  const std::string_view n = a.name;
  if (n.starts_with("ib")) return 0;
  if (n.starts_with("docker")) return 2;
  if (n.starts_with("lo") || a.loopback) return 3;
  if (n.starts_with("virbr")) return 4;
  return 1;
}

int family_rank(const IfAddr& a) {
  if (a.family == AF_INET) return 0;
  return is_v6_link_local(a) ? 2 : 1;
}

}  // namespace

Result<IfAddr> choose_interface(const std::vector<IfAddr>& addrs, std::string_view ifname_spec,
                                int family) {
  auto filter = HcaFilter::parse(ifname_spec);
  if (!filter.is_ok()) {
    return filter.status().with_context("NCCL_SOCKET_IFNAME=\"" + std::string(ifname_spec) + "\"");
  }
  const bool by_name = !filter.value().empty();

  const IfAddr* best = nullptr;
  std::tuple<int, int> best_key{};
  for (const IfAddr& a : addrs) {
    if (!a.up || (a.family != AF_INET && a.family != AF_INET6)) continue;
    if (family != 0 && a.family != family) continue;
    if (by_name && !filter.value().accepts(a.name, -1)) continue;
    // A user list only filters; the automatic class order still ranks what it lets through.
    const std::tuple<int, int> key{interface_class(a), family_rank(a)};
    if (best == nullptr || key < best_key) {  // strict: the earlier interface wins ties
      best = &a;
      best_key = key;
    }
  }
  if (best != nullptr) return *best;

  std::string seen;
  for (const IfAddr& a : addrs) {
    if (!seen.empty()) seen += ", ";
    seen += a.name + " " + address_to_string(a.addr);
    if (!a.up) seen += " (down)";
  }
  std::string msg = "no IP interface for the out-of-band socket matches";
  msg +=
      by_name ? " NCCL_SOCKET_IFNAME=\"" + std::string(ifname_spec) + "\"" : " (automatic choice)";
  if (family != 0) msg += " with NCCL_SOCKET_FAMILY=" + family_name(family);
  msg += "; interfaces seen: " + (seen.empty() ? std::string("none") : seen);
  return Status(by_name || family != 0 ? Code::kInvalidUsage : Code::kSystemError, std::move(msg));
}

std::vector<IfAddr> list_interfaces() {
  std::vector<IfAddr> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (const ifaddrs* p = list; p != nullptr; p = p->ifa_next) {
    if (p->ifa_addr == nullptr || (p->ifa_flags & IFF_UP) == 0) continue;
    const int fam = p->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    IfAddr a;
    a.name = p->ifa_name;
    a.family = fam;
    a.up = true;
    a.loopback = (p->ifa_flags & IFF_LOOPBACK) != 0;
    // getifaddrs fills sin6_scope_id for link-local addresses; copying keeps it.
    std::memcpy(&a.addr, p->ifa_addr, fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    if (fam == AF_INET) {
      reinterpret_cast<sockaddr_in*>(&a.addr)->sin_port = 0;
    } else {
      reinterpret_cast<sockaddr_in6*>(&a.addr)->sin6_port = 0;
    }
    out.push_back(std::move(a));
  }
  freeifaddrs(list);
  return out;
}

std::string sockaddr_to_string(const sockaddr_storage& sa) {
  char buf[INET6_ADDRSTRLEN];
  if (sa.ss_family == AF_INET) {
    const auto* sin = reinterpret_cast<const sockaddr_in*>(&sa);
    inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof buf);
    return std::string(buf) + ":" + std::to_string(ntohs(sin->sin_port));
  }
  if (sa.ss_family == AF_INET6) {
    const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(&sa);
    inet_ntop(AF_INET6, &sin6->sin6_addr, buf, sizeof buf);
    std::string s = "[";
    s += buf;
    if (sin6->sin6_scope_id != 0) {
      char name[IF_NAMESIZE];
      s += '%';
      s += if_indextoname(sin6->sin6_scope_id, name) != nullptr
               ? std::string(name)
               : std::to_string(sin6->sin6_scope_id);
    }
    return s + "]:" + std::to_string(ntohs(sin6->sin6_port));
  }
  return "<address family " + std::to_string(sa.ss_family) + ">";
}

std::string address_to_string(const sockaddr_storage& sa) {
  std::string s = sockaddr_to_string(sa);
  // Strip the ":port" suffix, and the brackets of IPv6.
  const auto colon = s.rfind(':');
  if (colon != std::string::npos) s.resize(colon);
  if (s.size() >= 2 && s.front() == '[' && s.back() == ']') s = s.substr(1, s.size() - 2);
  return s;
}

bool same_address(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in*>(&a)->sin_addr,
                       &reinterpret_cast<const sockaddr_in*>(&b)->sin_addr, 4) == 0;
  }
  return a.ss_family == AF_INET6 &&
         std::memcmp(&reinterpret_cast<const sockaddr_in6*>(&a)->sin6_addr,
                     &reinterpret_cast<const sockaddr_in6*>(&b)->sin6_addr, 16) == 0;
}

namespace {

CmAddrChoice pick_cm_address(const std::vector<PortAddr>& addrs, const sockaddr_storage& keep,
                             int family, bool strict, int gid_index) {
  const int n = static_cast<int>(addrs.size());
  for (int i = 0; i < n; ++i) {
    if (keep.ss_family == family && same_address(addrs[i].addr, keep))
      return {i, true, "the out-of-band address " + address_to_string(keep) + " is on this port"};
  }
  const std::string fam = family == AF_INET6 ? "IPv6" : "IPv4";
  int first = -1, other = -1;
  for (int i = 0; i < n; ++i) {
    if (addrs[i].link_local) continue;
    if (addrs[i].addr.ss_family != family) {
      if (other < 0) other = i;
      continue;
    }
    if (gid_index >= 0 && addrs[i].gid_index == gid_index) {
      return {i, false,
              "this port's " + fam + " address of its GID index " + std::to_string(gid_index)};
    }
    if (first < 0) first = i;
  }
  if (first >= 0) return {first, false, "this port's first " + fam + " address"};
  if (other < 0) {
    return {-1, false,
            "this port has no IP address but link-local ones (no address on its network "
            "interface)"};
  }
  if (strict) return {-1, false, "this port has no " + fam + " address"};
  return {other, false, "this port's first address (it has no " + fam + " address)"};
}

}  // namespace

CmAddrChoice choose_cm_address(const std::vector<PortAddr>& addrs, const sockaddr_storage& keep,
                               int family, bool strict, int gid_index) {
  CmAddrChoice c = pick_cm_address(addrs, keep, family, strict, gid_index);
  if (c.index >= 0) c.addr = c.kept ? keep : addrs[static_cast<size_t>(c.index)].addr;
  return c;
}

}  // namespace sluice
