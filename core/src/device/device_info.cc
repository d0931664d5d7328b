#include "sluice/core/device/device_info.h"

#include <dirent.h>
#include <ifaddrs.h>

#include <algorithm>
#include <cstring>
#include <fstream>

namespace sluice {

namespace {

// The IP addresses of the network interfaces `nets`, in getifaddrs order.
std::vector<PortAddr> addresses_of(const std::vector<std::string>& nets) {
  std::vector<PortAddr> out;
  ifaddrs* ifa = nullptr;
  if (nets.empty() || getifaddrs(&ifa) != 0) return out;
  for (ifaddrs* a = ifa; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr) continue;
    const int fam = a->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    if (std::find(nets.begin(), nets.end(), a->ifa_name) == nets.end()) continue;
    PortAddr p;
    // getifaddrs fills sin6_scope_id for link-local addresses; copying keeps it. Port 0.
    std::memcpy(&p.addr, a->ifa_addr, fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    out.push_back(p);
  }
  freeifaddrs(ifa);
  return out;
}

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  if (!f || !std::getline(f, s)) return "";
  return s;
}

// The IPoIB netdevs of an InfiniBand device's port (sysfs device/net/*; dev_port is the port
// number - 1 where the kernel has the file).
std::vector<std::string> ipoib_netdevs(const std::string& dev, int port) {
  std::vector<std::string> nets;
  const std::string dir = "/sys/class/infiniband/" + dev + "/device/net";
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      const std::string dp = read_line(dir + "/" + e->d_name + "/dev_port");
      if (!dp.empty() && dp != std::to_string(port - 1)) continue;
      nets.push_back(e->d_name);
    }
    closedir(d);
  }
  return nets;
}

}  // namespace

std::vector<PortAddr> port_addresses(const std::string& dev, int port, bool ethernet, bool iwarp,
                                     const std::vector<GidEntry>& gids) {
  if (iwarp) {
    const std::string net = read_line("/sys/class/infiniband/" + dev + "/ports/" +
                                      std::to_string(port) + "/gid_attrs/ndevs/0");
    return net.empty() ? std::vector<PortAddr>{} : addresses_of({net});
  }
  if (!ethernet) return addresses_of(ipoib_netdevs(dev, port));
  std::vector<PortAddr> out;
  for (const GidEntry& e : gids) {
    if (gid_is_zero(e.gid)) continue;
    PortAddr p;
    p.addr = gid_to_sockaddr(e.gid);
    p.gid_index = e.index;
    p.link_local = gid_is_link_local(e.gid);
    const bool seen = std::any_of(out.begin(), out.end(),
                                  [&](const PortAddr& x) { return same_address(x.addr, p.addr); });
    if (!seen) out.push_back(p);
  }
  return out;
}

int port_speed_mbps(uint8_t active_speed, uint8_t active_width) {
  int lane = 0;
  switch (active_speed) {
    case 1:
      lane = 2500;
      break;  // SDR
    case 2:
      lane = 5000;
      break;  // DDR
    case 4:   // QDR
    case 8:
      lane = 10000;
      break;  // FDR10
    case 16:
      lane = 14000;
      break;  // FDR
    case 32:
      lane = 25000;
      break;  // EDR
    case 64:
      lane = 50000;
      break;  // HDR
    case 128:
      lane = 100000;
      break;  // NDR
    default:
      lane = 10000;
      break;  // unknown encoding: NCCL's default
  }
  int lanes = 1;
  switch (active_width) {
    case 1:
      lanes = 1;
      break;
    case 2:
      lanes = 4;
      break;
    case 4:
      lanes = 8;
      break;
    case 8:
      lanes = 12;
      break;
    case 16:
      lanes = 2;
      break;
    default:
      lanes = 1;
      break;
  }
  return lane * lanes;
}

std::string gid_type_text(const std::string& dev, int port, int index) {
  return read_line("/sys/class/infiniband/" + dev + "/ports/" + std::to_string(port) +
                   "/gid_attrs/types/" + std::to_string(index));
}

int roce_version_of(const std::string& t) {
  if (t.find("v2") != std::string::npos) return 2;
  if (t.find("v1") != std::string::npos || t.find("IB/RoCE") != std::string::npos) return 1;
  return 0;
}

std::vector<GidEntry> read_gid_table(ibv_context* ctx, const std::string& dev, uint8_t port,
                                     int tbl_len) {
  std::vector<GidEntry> out;
  for (int i = 0; i < tbl_len; ++i) {
    ibv_gid g{};
    if (ibv_query_gid(ctx, port, i, &g) != 0) continue;
    GidEntry e;
    e.index = i;
    std::copy(std::begin(g.raw), std::end(g.raw), e.gid.begin());
    if (gid_is_zero(e.gid)) continue;
    e.roce_version = roce_version_of(gid_type_text(dev, port, i));
    out.push_back(e);
  }
  return out;
}

const char* transport_name(ibv_transport_type t) {
  switch (t) {
    case IBV_TRANSPORT_IB:
      return "InfiniBand";
    case IBV_TRANSPORT_IWARP:
      return "iWARP";
    case IBV_TRANSPORT_USNIC:
      return "usNIC";
    case IBV_TRANSPORT_USNIC_UDP:
      return "usNIC UDP";
    case IBV_TRANSPORT_UNSPECIFIED:
      return "unspecified";
    default:
      return "unknown";
  }
}

std::string unusable_transport_reason(ibv_transport_type t, const std::string& dev) {
  if (t != IBV_TRANSPORT_IWARP) return "";
  return dev +
         " is an iWARP device: it has no RDMA WRITE with immediate data, with which Sluice "
         "completes every receive, so Sluice does not use it; use a RoCE or InfiniBand port "
         "(NCCL_IB_HCA), or NCCL's socket transport (NCCL_NET=Socket) over its Ethernet interface";
}

GidPolicy gid_policy(const Config& cfg) {
  GidPolicy p;
  p.forced_index = cfg.gid_index;
  p.family = cfg.addr_family;
  p.range = cfg.addr_range;
  p.roce_version = cfg.roce_version;
  return p;
}

}  // namespace sluice
