// Links and ports of the two-host bed (scripts/rdma-bed --two-host, docs/test-bed.md "Two links"):
// a link taken down and up in-process, and the wait for its RDMA port to be ACTIVE again with its
// GID back. Used by plugin_failover_two_host.cc and plugin_standby_two_host.cc.
#pragma once

#include <arpa/inet.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "net_harness.h"

namespace nettest {

// `ip link set IF up|down` in-process (SIOCSIFFLAGS): a fork + exec took over a second on a loaded
// TCG VM (docs/test-bed.md). `host` names the VM in the line it prints.
inline bool set_link(int host, const std::string& ifname, bool up) {
  std::fprintf(stderr, "host%d: + ip link set %s %s\n", host, ifname.c_str(), up ? "up" : "down");
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  ifreq ifr{};
  std::snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", ifname.c_str());
  bool ok = ioctl(fd, SIOCGIFFLAGS, &ifr) == 0;
  if (ok) {
    ifr.ifr_flags = static_cast<short>(up ? (ifr.ifr_flags | IFF_UP) : (ifr.ifr_flags & ~IFF_UP));
    ok = ioctl(fd, SIOCSIFFLAGS, &ifr) == 0;
  }
  if (!ok) std::fprintf(stderr, "SIOCSIFFLAGS %s: %s\n", ifname.c_str(), std::strerror(errno));
  close(fd);
  return ok;
}

// Takes a link up again when it goes out of scope while down (a failed step).
struct LinkGuard {
  std::string ifname;
  bool down = false;
  int host = -1;
  ~LinkGuard() {
    if (down) set_link(host, ifname, true);
  }
};

// The sysfs folder of a device's port, by the plugin's name ("rxe0", "mlx5_0:1" -> mlx5_0).
inline std::string port_dir(const Props& p) {
  return "/sys/class/infiniband/" + p.name.substr(0, p.name.find(':')) + "/ports/" +
         std::to_string(p.port > 0 ? p.port : 1) + "/";
}

// The port is ACTIVE and the IPv4-mapped GID of `addr` is in its table (sysfs writes GIDs as 8
// groups of 4 hex digits).
inline bool port_back(const Props& p, const std::string& addr) {
  if (!contains(read_line(port_dir(p) + "state"), "ACTIVE")) return false;
  in_addr a{};
  if (inet_pton(AF_INET, addr.c_str(), &a) != 1) return false;
  const uint32_t v = ntohl(a.s_addr);
  char want[64];
  std::snprintf(want, sizeof want, "0000:0000:0000:0000:0000:ffff:%04x:%04x", v >> 16, v & 0xffff);
  for (int i = 0; i < 16; ++i)
    if (read_line(port_dir(p) + "gids/" + std::to_string(i)).rfind(want, 0) == 0) return true;
  return false;
}

}  // namespace nettest
