#include "sluice/core/base/standby.h"

#include <algorithm>
#include <cstdio>

#include "base/text.h"

namespace sluice::standby {
namespace {

using text::trim;

std::string hex(int v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%x", static_cast<unsigned>(v));
  return b;
}

// "RoCE " or "" (link layer unknown), to put before "device".
std::string layer(const Candidate& c) {
  return c.link.empty() ? std::string() : c.link + " ";
}

// Why `c` cannot stand by for `p` ("" = it can).
std::string ineligible(const Candidate& p, const Candidate& c) {
  if (c.link != p.link) return "link layer " + c.link + ", not " + p.link;
  if (!c.active) return "port not ACTIVE";
  if ((c.ptr_support & p.ptr_support) != p.ptr_support)
    return "does not take every kind of memory " + p.name + " takes (ptrSupport " +
           hex(c.ptr_support) + ", " + p.name + " " + hex(p.ptr_support) + ")";
  return {};
}

Nearness nearness_of(const std::vector<Candidate>& devs, const NearnessFn& near, int a, int b) {
  if (!devs[a].adapter.empty() && devs[a].adapter == devs[b].adapter) return Nearness::kSameNic;
  return near ? near(a, b) : Nearness::kUnknown;
}

}  // namespace

const char* nearness_text(Nearness n) {
  switch (n) {
    case Nearness::kSameNic:
      return "same NIC";
    case Nearness::kSwitch:
      return "same PCI switch";
    case Nearness::kHostBridge:
      return "same host bridge";
    case Nearness::kNuma:
      return "same NUMA node";
    case Nearness::kSocket:
      return "same socket";
    case Nearness::kFar:
      return "another socket";
    case Nearness::kUnknown:
      break;
  }
  return "nearness unknown";
}

Result<std::vector<MapEntry>> parse_map(std::string_view text) {
  std::vector<MapEntry> out;
  if (trim(text).empty()) return out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string_view item = trim(text.substr(at, comma - at));
    at = comma + 1;
    const size_t eq = item.find('=');
    const std::string_view p = eq == std::string_view::npos ? item : trim(item.substr(0, eq));
    const std::string_view s = eq == std::string_view::npos ? "" : trim(item.substr(eq + 1));
    if (eq == std::string_view::npos || p.empty() || s.empty() ||
        s.find('=') != std::string_view::npos) {
      return Status(Code::kInvalidArgument,
                    "entry '" + std::string(item) + "' is not primary=standby (or primary=none)");
    }
    if (p == s)
      return Status(Code::kInvalidArgument,
                    "entry '" + std::string(item) + "' makes a device its own standby");
    for (const auto& e : out)
      if (e.primary == p)
        return Status(Code::kInvalidArgument, "names " + std::string(p) + " twice");
    out.push_back({std::string(p), std::string(s)});
    if (out.size() > 64) return Status(Code::kInvalidArgument, "more than 64 entries");
  }
  return out;
}

std::vector<Choice> choose(const std::vector<Candidate>& devs, const NearnessFn& near,
                           const std::vector<MapEntry>& map) {
  const int n = static_cast<int>(devs.size());
  std::vector<Choice> out(devs.size());
  for (int a = 0; a < n; ++a) {
    const Candidate& p = devs[a];
    Choice& ch = out[a];
    if (!p.active) {
      ch.reason = "none: " + p.name + "'s port is not ACTIVE";
      continue;
    }
    const MapEntry* forced = nullptr;
    for (const auto& e : map)
      if (e.primary == p.name) forced = &e;
    if (forced != nullptr) {
      const std::string set = "SLUICE_STANDBY_MAP " + p.name + "=" + forced->standby;
      if (forced->standby == "none") {
        ch.reason = "none: " + set;
        continue;
      }
      int s = -1;
      for (int b = 0; b < n && s < 0; ++b)
        if (b != a && devs[b].name == forced->standby) s = b;
      if (s < 0) {
        ch.reason = "none: " + set + " names no usable device";
        continue;
      }
      if (std::string why = ineligible(p, devs[s]); !why.empty()) {
        ch.reason = "none: " + set + ", but " + devs[s].name + " cannot stand by: " + why;
        continue;
      }
      ch.standby = s;
      ch.nearness = nearness_of(devs, near, a, s);
      ch.reason = devs[s].name + ": " + set + " (" + nearness_text(ch.nearness) + ")";
      continue;
    }
    int eligible = 0, ties = 0;
    std::string skipped;
    for (int b = 0; b < n; ++b) {
      if (b == a) continue;
      if (std::string why = ineligible(p, devs[b]); !why.empty()) {
        skipped += (skipped.empty() ? "" : "; ") + devs[b].name + ": " + why;
        continue;
      }
      ++eligible;
      const Nearness x = nearness_of(devs, near, a, b);
      if (ch.standby < 0 || x < ch.nearness) {
        ch.standby = b;
        ch.nearness = x;
        ties = 1;
      } else if (x == ch.nearness) {
        ++ties;  // a later index: the earlier one stays
      }
    }
    const std::string ll = layer(p);
    if (ch.standby < 0) {
      ch.reason = "none: no other usable " + ll + "device" +
                  (skipped.empty() ? std::string() : " (" + skipped + ")");
      continue;
    }
    const Candidate& s = devs[ch.standby];
    std::string why;
    if (ch.nearness == Nearness::kUnknown) {
      why = eligible == 1
                ? "the only other " + ll + "device"
                : "the first of " + std::to_string(eligible) + " other " + ll + "devices by index";
      why += near ? " (nearness unknown: the topology does not place them)"
                  : " (nearness unknown: no topology)";
    } else {
      why = ch.nearness == Nearness::kFar
                ? "on another socket than " + p.name
                : std::string(nearness_text(ch.nearness)) + " as " + p.name;
      if (eligible == 1) {
        why += " (the only other " + ll + "device)";
      } else {
        why += " (nearest of " + std::to_string(eligible) + " other " + ll + "devices" +
               (ties > 1 ? ", first by index of " + std::to_string(ties) + " as near" : "") + ")";
      }
    }
    ch.reason = s.name + ": " + why;
  }
  return out;
}

std::vector<std::string> unmatched_primaries(const std::vector<Candidate>& devs,
                                             const std::vector<MapEntry>& map) {
  std::vector<std::string> out;
  for (const auto& e : map) {
    bool found = false;
    for (const auto& d : devs) found = found || d.name == e.primary;
    if (!found) out.push_back(e.primary);
  }
  return out;
}

}  // namespace sluice::standby
