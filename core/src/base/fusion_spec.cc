#include "sluice/core/base/fusion_spec.h"

#include <charconv>

#include "base/text.h"

namespace sluice {
namespace {

constexpr size_t kMaxEntries = 64;

using text::trim;

bool parse_int(std::string_view s, long long lo, long long hi, int* out) {
  s = trim(s);
  if (s.empty()) return false;
  long long v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

Status bad(std::string_view entry, const std::string& why) {
  return Status(Code::kInvalidArgument, "entry '" + std::string(entry) + "': " + why);
}

}  // namespace

Result<NamedList> NamedList::parse(std::string_view spec, Kind kind) {
  NamedList out;
  out.kind_ = kind;
  if (trim(spec).empty()) return out;
  const char* what = kind == Kind::kRails ? "rail[/plane]" : "weight";
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string_view::npos) comma = spec.size();
    const std::string_view raw = trim(spec.substr(pos, comma - pos));
    pos = comma + 1;
    if (raw.empty()) return Status(Code::kInvalidArgument, "empty entry (two commas in a row?)");
    const size_t eq = raw.find('=');
    if (eq == std::string_view::npos) return bad(raw, std::string("expected name[:port]=") + what);
    std::string_view lhs = trim(raw.substr(0, eq));
    const std::string_view rhs = trim(raw.substr(eq + 1));
    NamedEntry e;
    if (const size_t colon = lhs.find(':'); colon != std::string_view::npos) {
      if (!parse_int(lhs.substr(colon + 1), 1, 255, &e.port))
        return bad(raw, "port must be 1..255");
      lhs = trim(lhs.substr(0, colon));
    }
    if (lhs.empty()) return bad(raw, "no device name before '='");
    e.name = std::string(lhs);
    if (kind == Kind::kRails) {
      std::string_view rail = rhs;
      if (const size_t slash = rhs.find('/'); slash != std::string_view::npos) {
        rail = rhs.substr(0, slash);
        if (!parse_int(rhs.substr(slash + 1), 0, kMaxPlaneId, &e.plane))
          return bad(raw, "plane must be 0.." + std::to_string(kMaxPlaneId));
      }
      if (!parse_int(rail, 0, kMaxRailId, &e.value))
        return bad(raw, "rail must be 0.." + std::to_string(kMaxRailId));
    } else if (!parse_int(rhs, 0, kMaxWeight, &e.value)) {
      return bad(raw, "weight must be 0.." + std::to_string(kMaxWeight) + " (0 = fallback only)");
    }
    for (const auto& o : out.entries_) {
      if (o.name == e.name && o.port == e.port) return bad(raw, "names this device twice");
    }
    if (out.entries_.size() == kMaxEntries)
      return Status(Code::kInvalidArgument,
                    "more than " + std::to_string(kMaxEntries) + " entries");
    out.entries_.push_back(std::move(e));
    if (comma == spec.size()) break;
  }
  return out;
}

const NamedEntry* NamedList::find(std::string_view name, int port) const {
  const NamedEntry* any = nullptr;
  for (const auto& e : entries_) {
    if (e.name != name) continue;
    if (e.port == port) return &e;
    if (e.port == -1) any = &e;
  }
  return any;
}

std::string NamedList::to_string() const {
  std::string s;
  for (const auto& e : entries_) {
    if (!s.empty()) s += ",";
    s += e.name;
    if (e.port >= 0) s += ":" + std::to_string(e.port);
    s += "=" + std::to_string(e.value);
    if (kind_ == Kind::kRails && e.plane >= 0) s += "/" + std::to_string(e.plane);
  }
  return s;
}

}  // namespace sluice
