#include "sluice/core/base/comm_capacity.h"

#include <algorithm>
#include <climits>
#include <string>

namespace sluice {

Capacity comm_capacity(const CapacityInput& in) {
  Capacity c;
  if (in.adapters.empty() || in.members < 1 || in.paths < 1 || in.qps_per_path < 1) {
    c.text = "no adapter, member, path or QP to count";
    return c;
  }
  const int lanes = in.flush ? static_cast<int>(in.adapters.size()) : 0;
  c.qps_per_comm = in.paths * in.qps_per_path + lanes;
  c.cqs_per_comm = in.members + lanes;
  c.text = std::to_string(c.qps_per_comm) + " QPs and " + std::to_string(c.cqs_per_comm) +
           " CQs per comm (" + std::to_string(in.paths) + " path(s) of " +
           std::to_string(in.qps_per_path) + " QP(s), " + std::to_string(in.members) +
           " member CQ(s)" + (lanes > 0 ? ", " + std::to_string(lanes) + " flush QP+CQ" : "") + ")";
  int best = INT_MAX;
  for (const CapacityAdapter& a : in.adapters) {
    const int by_qp = std::max(a.max_qp, 0) / c.qps_per_comm;
    const int by_cq = std::max(a.max_cq, 0) / c.cqs_per_comm;
    const int n = std::min(by_qp, by_cq);
    c.text += "; " + a.name + ": max_qp " + std::to_string(a.max_qp) + ", max_cq " +
              std::to_string(a.max_cq) + " -> " + std::to_string(n) +
              (by_cq < by_qp ? " (bound by CQs)" : "");
    best = std::min(best, n);
  }
  c.max_comms = best;
  return c;
}

}  // namespace sluice
