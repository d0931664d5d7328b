// Links and ports of the two-host bed (scripts/rdma-bed --two-host, docs/test-bed.md "Two links"):
// a link taken down and up in-process, the wait for its RDMA port to be ACTIVE again with its GID
// back, and the packet counters of the devices on the two links. Used by
// plugin_failover_*.cc, plugin_standby_two_host.cc and plugin_faults_two_host.cc.
#pragma once

#include <arpa/inet.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "bed_tc.h"
#include "plugin_bed.h"

namespace nettest {

// `ip link set IF up|down` in-process (bed_tc.h's set_if_up, SIOCSIFFLAGS): a fork + exec took
// over a second on a loaded TCG VM (docs/test-bed.md). `host` names the VM in the line it prints.
inline bool set_link(int host, const std::string& ifname, bool up) {
  std::fprintf(stderr, "host%d: + ip link set %s %s\n", host, ifname.c_str(), up ? "up" : "down");
  return sluice::rdmatest::set_if_up(ifname, up);
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

// The sysfs folder of a device's port.
inline std::string port_dir(const std::string& dev, int port) {
  return "/sys/class/infiniband/" + dev + "/ports/" + std::to_string(port) + "/";
}
// The same by the plugin's name ("rxe0", "mlx5_0:1" -> mlx5_0).
inline std::string port_dir(const Props& p) {
  return port_dir(p.name.substr(0, p.name.find(':')), p.port > 0 ? p.port : 1);
}

// The IPv4-mapped GID of `addr` is in the GID table of the port whose sysfs folder is `dir` (sysfs
// writes GIDs as 8 groups of 4 hex digits).
inline bool gid_listed(const std::string& dir, const std::string& addr) {
  in_addr a{};
  if (inet_pton(AF_INET, addr.c_str(), &a) != 1) return false;
  const uint32_t v = ntohl(a.s_addr);
  char want[64];
  std::snprintf(want, sizeof want, "0000:0000:0000:0000:0000:ffff:%04x:%04x", v >> 16, v & 0xffff);
  for (int i = 0; i < 16; ++i)
    if (read_line(dir + "gids/" + std::to_string(i)).rfind(want, 0) == 0) return true;
  return false;
}

// The port is ACTIVE and the IPv4-mapped GID of `addr` is in its table.
inline bool port_back(const Props& p, const std::string& addr) {
  if (!contains(read_line(port_dir(p) + "state"), "ACTIVE")) return false;
  return gid_listed(port_dir(p), addr);
}

// Waits (polling every poll_ms) until port_back(p, addr), at most limit_ms; *took_ms: how long.
inline bool wait_port_back(const Props& p, const std::string& addr, long long* took_ms,
                           int poll_ms = 5, long long limit_ms = 20000) {
  const auto t = Clock::now();
  while (!port_back(p, addr)) {
    if (ms_since(t) > limit_ms) return false;
    usleep(static_cast<useconds_t>(poll_ms) * 1000);
  }
  *took_ms = ms_since(t);
  return true;
}

// The packets sent and received by the two devices of a test ([0], [1]: one on each link).
struct LinkCounters {
  long long sent[2] = {}, rcvd[2] = {};
};
// fresh: past ib_core's 10 ms cache of hw_counters (a 30 ms pause); else maybe 10 ms old (for marks
// taken mid-stream that must not stall the stream they measure).
inline LinkCounters link_counters(const Props (&m)[2], bool fresh = true) {
  if (fresh) usleep(30 * 1000);
  LinkCounters c;
  for (int i = 0; i < 2; ++i) {
    const int port = m[i].port > 0 ? m[i].port : 1;
    c.sent[i] = device_sent_packets(m[i].name, port);
    c.rcvd[i] = device_rcvd_packets(m[i].name, port);
  }
  return c;
}
// Device `member`'s packets between two readings: sent, else received.
inline long long delta(const LinkCounters& a, const LinkCounters& b, bool sent, int member) {
  return sent ? b.sent[member] - a.sent[member] : b.rcvd[member] - a.rcvd[member];
}

}  // namespace nettest
