// NCCL_IB_HCA parsing and matching, with NCCL's full syntax:
//   "mlx5"             prefix match: every port of mlx5, mlx5_1, mlx5_10, ...
//   "mlx5_0:1,mlx5_1"  list; ":port" limits to that port
//   "=mlx5_0"          exact device names (the '=' applies to the whole list)
//   "^mlx5_1"          exclude list ('^' first, then optional '=')
//   "^=mlx5_1:1"       exclude exactly mlx5_1 port 1
// Empty string = accept everything. At most 32 entries.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "sluice/core/base/status.h"

namespace sluice {

class HcaFilter {
 public:
  struct Entry {
    std::string name;
    int port = -1;  // -1 = any port
  };

  static Result<HcaFilter> parse(std::string_view spec);

  bool accepts(std::string_view device, int port) const;
  bool empty() const { return entries_.empty(); }
  bool exclude() const { return exclude_; }
  bool exact() const { return exact_; }
  const std::vector<Entry>& entries() const { return entries_; }
  // Canonical spelling ("^=mlx5_0:1,mlx5_1"): parse(to_string()) gives an equal filter.
  std::string to_string() const;
  // Entries that matched no device (for a WARN naming unknown HCA names).
  std::vector<std::string> unmatched(const std::vector<std::pair<std::string, int>>& ports) const;

 private:
  std::vector<Entry> entries_;
  bool exclude_ = false;
  bool exact_ = false;
};

}  // namespace sluice
