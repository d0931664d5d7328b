// Small text helpers shared by the parsers of base/ (configuration, addresses, fusion and standby
// specs, the HCA filter): one definition each.
#pragma once

#include <string_view>

namespace sluice::text {

// s without leading and trailing blanks (space, tab, CR, LF); empty when s is only blanks.
inline std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t\r\n");
  return s.substr(first, last - first + 1);
}

}  // namespace sluice::text
