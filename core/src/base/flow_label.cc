// RoCE v2 flow labels per QP (flow_label.h).
#include "sluice/core/base/flow_label.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>

namespace sluice::flow {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t hash(uint64_t seed, uint64_t key, uint64_t a = 0, uint64_t b = 0) {
  return mix(mix(mix(mix(seed) ^ key) ^ a) ^ b);
}

constexpr uint64_t kTagBase = 0x62617365;  // "base"
constexpr uint64_t kTagHigh = 0x68696768;  // "high"
constexpr uint64_t kTagMove = 0x6d6f7665;  // "move"

uint32_t slot_start(uint32_t index, uint32_t count) {
  return static_cast<uint32_t>((uint64_t{index} * kSportSpace) / count);
}

// Offset of QP `index` inside its slot at `generation`: 0 first, then each re-roll a different one.
uint32_t slot_offset(uint64_t seed, uint64_t key, uint32_t index, uint32_t width,
                     uint32_t generation) {
  if (width < 2) return 0;
  uint32_t off = 0;
  for (uint32_t g = 1; g <= generation; ++g) {
    off = static_cast<uint32_t>(
        (off + 1 + hash(seed, key, (kTagMove << 32) | index, g) % (width - 1)) % width);
  }
  return off;
}

}  // namespace

uint16_t label_to_udp_sport(uint32_t label) {
  const uint32_t low = label & 0x3FFFu;
  const uint32_t high = (label & 0xFC000u) >> 14;
  return static_cast<uint16_t>((low ^ high) | kSportMin);
}

uint32_t qpn_flow_label(uint32_t lqpn, uint32_t rqpn) {
  uint64_t v = uint64_t{lqpn} * rqpn;
  v ^= v >> 20;
  v ^= v >> 40;
  return static_cast<uint32_t>(v & kLabelMask);
}

uint16_t kernel_udp_sport(uint32_t label, uint32_t lqpn, uint32_t rqpn) {
  if (label == 0) label = qpn_flow_label(lqpn, rqpn);
  return label_to_udp_sport(label);
}

Result<Policy> parse_policy(std::string_view knob) {
  std::string v;
  for (char ch : knob) v += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  Policy p;
  if (v.empty() || v == "auto") return p;
  if (v == "off" || v == "0" || v == "no" || v == "false") {
    p.on = false;
    return p;
  }
  int base = 10;
  std::string_view digits = v;
  if (digits.size() > 2 && digits.substr(0, 2) == "0x") {
    base = 16;
    digits.remove_prefix(2);
  }
  uint64_t seed = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), seed, base);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size()) {
    return Status(Code::kInvalidUsage,
                  "not auto, off, or a seed (an unsigned 64-bit integer, decimal or 0x hex)");
  }
  p.seed = seed;
  p.automatic = false;
  return p;
}

std::string policy_text(const Policy& p) {
  if (!p.on) return "off";
  if (p.automatic) return "auto";
  char buf[40];
  std::snprintf(buf, sizeof buf, "seed 0x%llx", static_cast<unsigned long long>(p.seed));
  return buf;
}

std::string port_text(const Policy& p, bool roce) {
  if (!roce) return "do not apply (InfiniBand: no UDP source port)";
  if (!p.on) {
    return "off: UDP source ports from the kernel's hash of the QP numbers (rdma_cm: from its "
           "route's label)";
  }
  return policy_text(p) +
         ": each connection's QPs get a spread set, UDP source ports evenly spaced over "
         "0xC000..0xFFFF (one INFO line per connection lists them)";
}

uint64_t conn_key(uint32_t local_qpn0, uint32_t remote_qpn0) {
  const uint32_t lo = std::min(local_qpn0, remote_qpn0);
  const uint32_t hi = std::max(local_qpn0, remote_qpn0);
  return (uint64_t{hi} << 32) | lo;
}

uint32_t flow_label(uint64_t seed, uint64_t key, uint32_t index, uint32_t count,
                    uint32_t generation) {
  count = std::clamp<uint32_t>(count, 1, kSportSpace);
  index %= count;
  const uint32_t base = static_cast<uint32_t>(hash(seed, key, kTagBase) % kSportSpace);
  const uint32_t start = slot_start(index, count);
  const uint32_t width = slot_start(index + 1, count) - start;  // slot_start(count) = 16384
  const uint32_t folded =
      (base + start + slot_offset(seed, key, index, width, generation)) % kSportSpace;
  // 6 high bits in 1..63, so the label is never 0; the low 14 bits fold back to `folded`.
  const uint32_t high =
      1 + static_cast<uint32_t>(hash(seed, key, (kTagHigh << 32) | index, generation) % 63);
  return (high << 14) | (folded ^ high);
}

LabelSet::LabelSet(uint64_t seed, uint64_t key, uint32_t count)
    : seed_(seed), key_(key), gen_(std::min(count, kSportSpace), 0) {}

uint32_t LabelSet::label(uint32_t index) const {
  if (index >= count()) return 0;
  return flow_label(seed_, key_, index, count(), gen_[index]);
}

uint32_t LabelSet::generation(uint32_t index) const {
  return index < count() ? gen_[index] : 0;
}

uint32_t LabelSet::reroll(std::span<const uint32_t> indexes) {
  std::vector<bool> moved(count(), false);
  uint32_t n = 0;
  for (uint32_t i : indexes) {
    if (i >= count() || moved[i]) continue;
    moved[i] = true;
    ++gen_[i];
    ++n;
  }
  return n;
}

}  // namespace sluice::flow
