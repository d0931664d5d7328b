#include "sluice/core/base/hca_filter.h"

#include <charconv>
#include <string>
#include <utility>

#include "base/text.h"

namespace sluice {
namespace {

constexpr size_t kMaxEntries = 32;  // NCCL's MAX_IB_DEVS; NCCL silently drops the rest
constexpr int kMaxPort = 255;       // ibv port numbers are uint8_t

using text::trim;

std::string entry_text(const HcaFilter::Entry& e) {
  return e.port < 0 ? e.name : e.name + ":" + std::to_string(e.port);
}

// One list entry: "name" or "name:port".
Result<HcaFilter::Entry> parse_entry(std::string_view text) {
  HcaFilter::Entry e;
  const auto colon = text.find(':');
  e.name = std::string(trim(text.substr(0, colon)));
  if (e.name.empty()) {
    return Status(Code::kInvalidUsage, "entry \"" + std::string(text) + "\" has no device name");
  }
  if (e.name.find_first_of("^=") != std::string::npos) {
    return Status(Code::kInvalidUsage,
                  "entry \"" + std::string(text) +
                      "\": '^' and '=' apply to the whole list and may only lead it");
  }
  if (colon != std::string_view::npos) {
    const std::string_view port = trim(text.substr(colon + 1));
    int value = -1;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value < 0 ||
        value > kMaxPort) {
      return Status(Code::kInvalidUsage, "entry \"" + std::string(text) +
                                             "\": port must be an integer in 0.." +
                                             std::to_string(kMaxPort));
    }
    e.port = value;
  }
  return e;
}

}  // namespace

Result<HcaFilter> HcaFilter::parse(std::string_view spec) {
  HcaFilter f;
  spec = trim(spec);
  if (!spec.empty() && spec.front() == '^') {
    f.exclude_ = true;
    spec = trim(spec.substr(1));
  }
  if (!spec.empty() && spec.front() == '=') {
    f.exact_ = true;
    spec = trim(spec.substr(1));
  }
  size_t count = 0;
  while (true) {
    const auto comma = spec.find(',');
    const std::string_view item = trim(spec.substr(0, comma));
    if (!item.empty()) {
      if (++count > kMaxEntries) {
        return Status(Code::kInvalidUsage,
                      "too many entries: at most " + std::to_string(kMaxEntries) + " are allowed");
      }
      auto entry = parse_entry(item);
      if (!entry.is_ok()) return entry.status();
      f.entries_.push_back(std::move(entry).value());
    }
    if (comma == std::string_view::npos) break;
    spec.remove_prefix(comma + 1);
  }
  return f;
}

namespace {

bool entry_matches(const HcaFilter::Entry& e, bool exact, std::string_view device, int port) {
  const bool name_ok = exact ? device == e.name : device.starts_with(e.name);
  // As NCCL's matchPort: an unspecified port on either side matches any port.
  const bool port_ok = e.port < 0 || port < 0 || e.port == port;
  return name_ok && port_ok;
}

}  // namespace

std::string HcaFilter::to_string() const {
  std::string out = exclude_ ? "^" : "";
  if (exact_) out += '=';
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (i > 0) out += ',';
    out += entry_text(entries_[i]);
  }
  return out;
}

bool HcaFilter::accepts(std::string_view device, int port) const {
  if (entries_.empty()) return true;
  bool matched = false;
  for (const Entry& e : entries_) {
    if (entry_matches(e, exact_, device, port)) {
      matched = true;
      break;
    }
  }
  return exclude_ ? !matched : matched;
}

std::vector<std::string> HcaFilter::unmatched(
    const std::vector<std::pair<std::string, int>>& ports) const {
  std::vector<std::string> out;
  for (const Entry& e : entries_) {
    bool seen = false;
    for (const auto& [device, port] : ports) {
      if (entry_matches(e, exact_, device, port)) {
        seen = true;
        break;
      }
    }
    if (!seen) out.push_back(entry_text(e));
  }
  return out;
}

}  // namespace sluice
