// Faults on the bed's RoCE path with tc, for the rdma tests that run as root inside
// scripts/rdma-bed: drop every RoCE v2 packet (RoceDrop) or pass them through a netem qdisc
// (RoceNetem: a rate, a delay). Both act on `lo` and on the test ports' netdevs: rxe between two
// local addresses of one VM goes through `lo`. Each removes what it installed when it goes.
#pragma once

#include <gtest/gtest.h>

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
      const std::string f = "tc filter add dev " + d + " ingress ";
      if (run("tc qdisc add dev " + d + " clsact") != 0 ||
          run(f + "protocol ipv6 prio 1 u32 match ip6 protocol 17 0xff match ip6 dport 4791 0xffff "
                  "action drop") != 0 ||
          run(f + "protocol ip prio 2 u32 match ip protocol 17 0xff match ip dport 4791 0xffff "
                  "action drop") != 0) {
        devs_.push_back(d);
        return ::testing::AssertionFailure() << "tc filter on " << d << " failed";
      }
      devs_.push_back(d);
    }
    return ::testing::AssertionSuccess();
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
      if (run("tc qdisc add dev " + d + " root netem " + args + " limit 100000") != 0)
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

}  // namespace sluice::rdmatest
