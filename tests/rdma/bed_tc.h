// Faults on the bed's RoCE path with tc, for the rdma tests that run as root inside
// scripts/rdma-bed: drop every RoCE v2 packet (RoceDrop) or pass them through a netem qdisc
// (RoceNetem: a rate, a delay). Both act on `lo` and on the test ports' netdevs: rxe between two
// local addresses of one VM goes through `lo`; RoceDrop::install_on acts on the netdevs named (the
// two-host bed's links). RoceDelay puts a netem on one netdev's RoCE path, at its egress or,
// through an ifb device, at its ingress, and changes it in place. Each removes what it installed
// when it goes.
#pragma once

#include <gtest/gtest.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "rdma_env.h"

namespace sluice::rdmatest {

inline int run(const std::string& cmd) {
  std::fprintf(stderr, "+ %s\n", cmd.c_str());
  return std::system(cmd.c_str());
}

// `ip link set IF up|down` in-process (SIOCSIFFLAGS), printing nothing: a fork + exec took over a
// second on a loaded TCG VM (docs/test-bed.md). bed_link.h's set_link prints the command first.
inline bool set_if_up(const std::string& ifname, bool up) {
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

// `tc -batch` of `lines`, one tc command (without "tc") a line: one fork + exec for them all (each
// took ~0.7 s in a loaded TCG VM). "" or what failed.
inline std::string tc_batch(const std::string& lines) {
  char path[] = "/tmp/bed_tc.XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return "mkstemp";
  size_t at = 0;
  while (at < lines.size()) {
    const ssize_t w = write(fd, lines.data() + at, lines.size() - at);
    if (w <= 0) break;
    at += static_cast<size_t>(w);
  }
  close(fd);
  const int rc = at == lines.size() ? run(std::string("tc -batch ") + path) : -1;
  unlink(path);
  return rc == 0 ? std::string() : "tc -batch failed:\n" + lines;
}

// The tc commands (without "tc") that give `dev` a clsact qdisc and, on its ingress, a u32 filter
// per IP version that applies `action` ("drop", "mirred egress redirect dev ifb0") to RoCE v2 (UDP
// dport 4791).
inline std::vector<std::string> roce_ingress_filters(const std::string& dev,
                                                     const std::string& action) {
  const std::string f = "filter add dev " + dev + " ingress protocol ";
  return {
      "qdisc add dev " + dev + " clsact",
      f + "ipv6 prio 1 u32 match ip6 protocol 17 0xff match ip6 dport 4791 0xffff action " + action,
      f + "ip prio 2 u32 match ip protocol 17 0xff match ip dport 4791 0xffff action " + action};
}

// A netem qdisc's arguments (e.g. "rate 4mbit", "delay 300ms") with its queue limit far above what
// rxe keeps in flight, so that nothing is dropped at egress (an egress drop makes rxe resend at
// once): the packets are only late.
inline std::string netem(const std::string& args) {
  return "netem " + args + " limit 100000";
}

// `lo` and the netdev of each test port.
inline ::testing::AssertionResult roce_netdevs(std::set<std::string>* devs) {
  devs->insert("lo");
  for (const auto& p : test_pair().ports) {
    const std::string nd = read_line("/sys/class/infiniband/" + p.dev + "/ports/" +
                                     std::to_string(p.port) + "/gid_attrs/ndevs/0");
    if (nd.empty()) return ::testing::AssertionFailure() << "no netdev for " << p.label();
    devs->insert(nd);
  }
  return ::testing::AssertionSuccess();
}

// Drops RoCE v2 (UDP 4791, IPv4 and IPv6) arriving on `lo` and the test ports' netdevs.
class RoceDrop {
 public:
  ::testing::AssertionResult install() {
    std::set<std::string> devs;
    if (auto ok = roce_netdevs(&devs); !ok) return ok;
    for (const char* m : {"sch_ingress", "cls_u32", "act_gact"}) {
      if (run(std::string("modprobe ") + m) != 0)
        return ::testing::AssertionFailure() << "modprobe " << m << " failed";
    }
    for (const auto& d : devs) {
      bool ok = true;
      for (const auto& c : roce_ingress_filters(d, "drop")) ok = ok && run("tc " + c) == 0;
      devs_.push_back(d);
      if (!ok) return ::testing::AssertionFailure() << "tc filter on " << d << " failed";
    }
    return ::testing::AssertionSuccess();
  }
  // The same on the netdevs named (not `lo`, not the test ports': the two-host bed's links), in one
  // `tc -batch` (one command per filter took 5 s for two links in a loaded TCG VM). "" or what
  // failed.
  std::string install_on(const std::vector<std::string>& devs) {
    if (run("modprobe -a sch_ingress cls_u32 act_gact") != 0)
      return "modprobe sch_ingress cls_u32 act_gact failed";
    std::string batch;
    for (const auto& d : devs) {
      for (const auto& c : roce_ingress_filters(d, "drop")) batch += c + "\n";
      devs_.push_back(d);
    }
    return tc_batch(batch);
  }
  // Packets the filters dropped so far ("dropped N" of each gact action).
  long dropped() const {
    long sum = 0;
    for (const auto& d : devs_) {
      FILE* p = popen(("tc -s filter show dev " + d + " ingress 2>/dev/null").c_str(), "r");
      if (p == nullptr) continue;
      char line[512];
      while (std::fgets(line, sizeof line, p) != nullptr) {
        const char* x = std::strstr(line, "(dropped ");
        if (x != nullptr) sum += std::strtol(x + 9, nullptr, 10);
      }
      pclose(p);
    }
    return sum;
  }
  bool remove() {
    bool ok = true;
    for (const auto& d : devs_) ok = run("tc qdisc del dev " + d + " clsact") == 0 && ok;
    devs_.clear();
    return ok;
  }
  ~RoceDrop() { remove(); }

 private:
  std::vector<std::string> devs_;
};

// `tc qdisc ... root netem <args>` (e.g. "rate 4mbit", "delay 300ms") on the egress of `lo` and of
// the test ports' netdevs. netem's queue limit is set far above what rxe keeps in flight, so
// nothing is dropped at egress (an egress drop makes rxe resend at once); the packets are only
// late.
class RoceNetem {
 public:
  ::testing::AssertionResult install(const std::string& args) {
    std::set<std::string> devs;
    if (auto ok = roce_netdevs(&devs); !ok) return ok;
    if (run("modprobe sch_netem") != 0) return ::testing::AssertionFailure() << "no sch_netem";
    for (const auto& d : devs) {
      if (run("tc qdisc add dev " + d + " root " + netem(args)) != 0)
        return ::testing::AssertionFailure() << "tc netem " << args << " on " << d << " failed";
      devs_.push_back(d);
    }
    return ::testing::AssertionSuccess();
  }
  bool remove() {
    bool ok = true;
    for (const auto& d : devs_) ok = run("tc qdisc del dev " + d + " root") == 0 && ok;
    devs_.clear();
    return ok;
  }
  ~RoceNetem() { remove(); }

 private:
  std::vector<std::string> devs_;
};

// A netem qdisc on one netdev's RoCE path, changed in place by change() (one `qdisc change`: the
// new arguments apply from that command on, where installing filters took a second or more to
// return on a loaded VM). With no ifb named it sits at the netdev's egress (every packet it sends);
// with one, at its ingress: RoCE v2 arriving on the netdev is redirected (roce_ingress_filters) to
// the ifb device, added here, whose egress has the netem (netem acts on egress only); the ifb's
// tx_packets then counts what went through it. remove() takes the qdiscs away; the destructor
// does what remove() has not and deletes the ifb. change() and remove() may run in a thread of
// their own while the test goes on (one at a time, joined before the destructor).
class RoceDelay {
 public:
  // "" or what failed (what was installed is still removed when it goes).
  std::string install(const std::string& dev, const std::string& ifb, const std::string& args) {
    dev_ = dev;
    ifb_ = ifb;
    std::string batch;
    if (ifb.empty()) {
      if (run("modprobe sch_netem") != 0) return "no sch_netem";
      batch = "qdisc add dev " + dev + " root " + netem(args) + "\n";
    } else {
      if (run("modprobe -a ifb sch_netem act_mirred cls_u32 sch_ingress") != 0 ||
          run("ip link add " + ifb + " type ifb") != 0)
        return "modprobe ifb sch_netem act_mirred cls_u32 or ip link add";
      ifb_added_ = true;
      std::fprintf(stderr, "+ ip link set %s up\n", ifb.c_str());
      if (!set_if_up(ifb, true)) return ifb + " up";
      batch = "qdisc add dev " + ifb + " root " + netem(args) + "\n";
      for (const auto& c : roce_ingress_filters(dev, "mirred egress redirect dev " + ifb))
        batch += c + "\n";
    }
    installed_ = true;
    return tc_batch(batch);
  }
  std::string change(const std::string& args) const {
    return tc_batch("qdisc change dev " + (ifb_.empty() ? dev_ : ifb_) + " root " + netem(args) +
                    "\n");
  }
  std::string remove() {
    if (!installed_) return {};
    installed_ = false;
    return tc_batch(ifb_.empty()
                        ? "qdisc del dev " + dev_ + " root\n"
                        : "qdisc del dev " + dev_ + " clsact\nqdisc del dev " + ifb_ + " root\n");
  }
  ~RoceDelay() {
    remove();
    if (ifb_added_) run("ip link del " + ifb_);
  }

 private:
  std::string dev_, ifb_;
  bool installed_ = false, ifb_added_ = false;
};

}  // namespace sluice::rdmatest
