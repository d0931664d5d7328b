// The leak check of the two-host tests: the process's open fds and the verbs objects it owns (QPs,
// CQs, MRs per `rdma resource show`), taken as a baseline after a warm-up and compared at the end.
// Used by plugin_faults_two_host.cc, plugin_failover_*.cc and plugin_standby_two_host.cc.
#pragma once

#include <string>

#include "net_harness.h"

namespace nettest {

struct Resources {
  int fds = 0;
  long qp = 0, cq = 0, mr = 0;
  static Resources now() {
    using sluice::rdmatest::count_own;
    return {open_fd_count(), count_own("qp"), count_own("cq"), count_own("mr")};
  }
  // What is not back at `base`, each part with a space before it (" fds 12 -> 13 qp 4 -> 6"); ""
  // when everything is. with_fds false: the verbs objects only.
  std::string diff(const Resources& base, bool with_fds = true) const {
    if (qp < 0 || base.qp < 0) return " (rdma resource show failed)";
    std::string d;
    if (with_fds && fds != base.fds)
      d += " fds " + std::to_string(base.fds) + " -> " + std::to_string(fds);
    if (qp != base.qp) d += " qp " + std::to_string(base.qp) + " -> " + std::to_string(qp);
    if (cq != base.cq) d += " cq " + std::to_string(base.cq) + " -> " + std::to_string(cq);
    if (mr != base.mr) d += " mr " + std::to_string(base.mr) + " -> " + std::to_string(mr);
    return d;
  }
};

}  // namespace nettest
