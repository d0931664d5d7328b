// The kernel's count of TCP connections this network namespace opened actively (connect) and
// passively (accept): /proc/net/snmp's "Tcp:" lines, names then values. Header-only: the scale
// benchmark (sluice-bench) and the rdma tests (core_peer_link) count with it.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace bench {

struct TcpOpens {
  int64_t active = -1;   // ActiveOpens; -1 when the file or the field is absent
  int64_t passive = -1;  // PassiveOpens; likewise
};

inline TcpOpens tcp_opens() {
  std::ifstream f("/proc/net/snmp");
  std::string names, values, line;
  while (std::getline(f, line)) {
    if (line.rfind("Tcp:", 0) != 0) continue;
    if (names.empty()) {
      names = line;
    } else {
      values = line;
      break;
    }
  }
  TcpOpens t;
  std::istringstream n(names), v(values);
  std::string name, value;
  while (n >> name && v >> value) {
    if (name == "ActiveOpens") t.active = std::atoll(value.c_str());
    if (name == "PassiveOpens") t.passive = std::atoll(value.c_str());
  }
  return t;
}

}  // namespace bench
