// NIC fusion's data-path layout: the pure rules of stripe.h.
#include "rules/stripe.h"

#include <algorithm>
#include <bit>

namespace sluice::stripe {
namespace {

static_assert(wire::kMaxMessageBytes <= (~uint64_t{0}) / (uint64_t{kMaxPaths} * kShareScale),
              "part_of's size * weights cannot overflow");

// Each member's share of its side's total, split evenly over the paths it serves (path p is on
// member p % n), per path. All zero when the side's weights are.
void path_shares(const uint16_t* w, int n, int npaths, uint64_t* out) {
  uint64_t sum = 0;
  for (int m = 0; m < n; ++m) sum += w[m];
  for (int p = 0; p < npaths; ++p) {
    const int m = wire::path_member(p, n);
    int serves = 0;
    for (int q = 0; q < npaths; ++q) serves += wire::path_member(q, n) == m;
    out[p] = sum == 0 ? 0 : uint64_t{w[m]} * kShareScale / sum / static_cast<uint64_t>(serves);
  }
}

}  // namespace

uint32_t Paths::active_mask() const {
  uint32_t mask = 0;
  for (int p = 0; p < npaths; ++p)
    if (weight[p] > 0) mask |= 1u << p;
  return mask;
}

Paths path_weights(const uint16_t* ws, int ns, const uint16_t* wr, int nr) {
  Paths out;
  out.npaths = std::clamp(std::max(ns, nr), 1, kMaxPaths);
  if (ns < 1 || nr < 1 || ns > kMaxPaths || nr > kMaxPaths) {
    for (auto& w : out.weight) w = 0;
    return out;
  }
  uint64_t s[kMaxPaths] = {}, r[kMaxPaths] = {};
  path_shares(ws, ns, out.npaths, s);
  path_shares(wr, nr, out.npaths, r);
  for (int p = 0; p < kMaxPaths; ++p)
    out.weight[p] = p < out.npaths ? static_cast<uint32_t>(std::min(s[p], r[p])) : 0;
  return out;
}

uint32_t paths_of(const Paths& p, uint64_t seq, size_t posted_total, size_t threshold,
                  bool weighted) {
  const uint32_t mask = p.active_mask();
  const int n = std::popcount(mask);
  if (n == 0) return 0;
  if (n > 1 && posted_total >= threshold) return mask;
  if (weighted && n > 1) {
    uint64_t total = 0;
    for (int q = 0; q < p.npaths; ++q) total += p.weight[q];
    // A point in [0, total) that successive seqs spread evenly (Fibonacci hashing).
    const uint64_t point = ((seq + 1) * 0x9e3779b97f4a7c15ull >> 16) % total;
    uint64_t cum = 0;
    for (int q = 0; q < p.npaths; ++q) {
      cum += p.weight[q];
      if (point < cum) return 1u << q;
    }
  }
  // The k-th active path.
  uint32_t rest = mask;
  for (uint64_t k = seq % static_cast<uint64_t>(n); k > 0; --k) rest &= rest - 1;
  return rest & (~rest + 1);
}

Paths with_shares(const Paths& p, uint32_t shares) {
  if (shares == 0) return p;
  Paths out = p;
  for (int q = 0; q < p.npaths && q < 4; ++q) {
    const uint32_t pct = wire::share_pct_of(shares, q);
    if (p.weight[q] == 0 || pct >= 100) continue;
    out.weight[q] = std::max<uint32_t>(1, static_cast<uint32_t>(uint64_t{p.weight[q]} * pct / 100));
  }
  return out;
}

void part_of(const Paths& p, uint32_t mask, size_t size, int path, size_t* off, size_t* len) {
  *off = 0;
  *len = 0;
  if (path < 0 || path >= p.npaths || (mask & (1u << path)) == 0) return;
  if (std::popcount(mask) == 1) {
    *len = size;
    return;
  }
  uint64_t total = 0;
  for (int q = 0; q < p.npaths; ++q)
    if (mask & (1u << q)) total += p.weight[q];
  const int last = 31 - std::countl_zero(mask);
  // Cut points in path order: the end of path q's part is size * (weights up to q) / total,
  // rounded up to kSplitAlign and at most size; the last path's end is size.
  const auto end_of = [&](int q) -> size_t {
    if (q == last || total == 0) return size;
    uint64_t cum = 0;
    for (int k = 0; k <= q; ++k)
      if (mask & (1u << k)) cum += p.weight[k];
    const uint64_t raw = static_cast<uint64_t>(size) * cum / total;
    const uint64_t up = (raw + cts::kSplitAlign - 1) / cts::kSplitAlign * cts::kSplitAlign;
    return static_cast<size_t>(std::min<uint64_t>(up, size));
  };
  size_t begin = 0;
  for (int q = 0; q < path; ++q)
    if (mask & (1u << q)) begin = end_of(q);
  const size_t end = end_of(path);
  *off = begin;
  *len = end > begin ? end - begin : 0;
}

uint32_t plan_path(const Paths& p, uint32_t mask, const size_t* sizes, int n, int path, int lane,
                   int nlanes, size_t ar_threshold, cts::LaneWr* out, uint32_t* tail_wrs,
                   uint64_t* tail_bytes, uint64_t* seg_max) {
  if (tail_wrs != nullptr) *tail_wrs = 0;
  if (tail_bytes != nullptr) *tail_bytes = 0;
  if (seg_max != nullptr) *seg_max = 0;
  if (path < 0 || path >= p.npaths || (mask & (1u << path)) == 0 || n < 1 ||
      n > wire::kEntriesPerSlot)
    return 0;
  size_t off[wire::kEntriesPerSlot], len[wire::kEntriesPerSlot];
  for (int i = 0; i < n; ++i) part_of(p, mask, sizes[i], path, &off[i], &len[i]);
  const uint32_t nw =
      cts::plan_lane(len, n, lane, nlanes, ar_threshold, out, tail_wrs, tail_bytes, seg_max);
  if (out != nullptr) {
    for (uint32_t k = 0; k < nw; ++k)
      if (out[k].msg >= 0) out[k].off += off[out[k].msg];
  }
  return nw;
}

}  // namespace sluice::stripe
