// The two per-device lists of NIC fusion (docs/configuration.md, docs/fusion.md), parsed here so
// that config.cc can refuse a malformed value at init and core, the plugin and sluice-info read
// them the same way. Both follow NCCL_IB_HCA's naming: comma-separated entries, each a verbs
// device name with an optional ":port", then '=' and a value.
//
//   SLUICE_NIC_RAILS     name[:port]=rail[/plane],...   e.g. "mlx5_0=0,mlx5_1=1,mlx5_2:1=2/0"
//   SLUICE_FUSION_WEIGHTS name[:port]=weight,...        e.g. "mlx5_0=3,mlx5_1=1" (0 = fallback)
//
// Names match a device's verbs name exactly (no prefix match: a rail is a fact about one NIC);
// an entry with ":port" matches that port only and wins over one without. Whitespace around tokens
// is ignored. At most 64 entries; a name may appear once per port (or once without a port).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/core/base/status.h"

namespace sluice {

// NCCL's "undefined" for railId/planeId (NCCL_NET_ID_UNDEF in nccl's net_v12.h).
inline constexpr int kNetIdUndef = -1;
inline constexpr int kMaxRailId = 32767;       // railId and planeId are int16_t in v12
inline constexpr int kMaxPlaneId = 14;         // fused planeId is a bitmask of planes (int16_t)
inline constexpr uint32_t kMaxWeight = 10000;  // SLUICE_FUSION_WEIGHTS upper bound

struct NamedEntry {
  std::string name;
  int port = -1;            // -1 = any port
  int value = 0;            // the rail, or the weight
  int plane = kNetIdUndef;  // SLUICE_NIC_RAILS only: "/plane", -1 = not given
};

class NamedList {
 public:
  enum class Kind { kRails, kWeights };
  static Result<NamedList> parse(std::string_view spec, Kind kind);
  // The entry for device `name` port `port`: the ":port" one first, then the one without; null
  // when the list does not name it.
  const NamedEntry* find(std::string_view name, int port) const;
  const std::vector<NamedEntry>& entries() const { return entries_; }
  bool empty() const { return entries_.empty(); }
  std::string to_string() const;  // canonical spelling; parse(to_string()) gives the same list

 private:
  Kind kind_ = Kind::kRails;
  std::vector<NamedEntry> entries_;
};

}  // namespace sluice
