// The registration cache's range index (memory/interval_index.h): regMr asks it which live
// registration contains a range on every call, so its cost must grow with log n, not n (issue 32).
// Checked against a brute-force scan, and counted in nodes visited, not time.
#include "memory/interval_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace sluice {
namespace {

struct Range {
  uintptr_t base, end;
  int32_t node;
  bool live;
};

bool contains(const Range& r, uintptr_t lo, uintptr_t hi) {
  return r.live && r.base <= lo && r.end >= hi;
}

TEST(IntervalIndex, FindsAContainingRangeExactlyWhenOneExists) {
  IntervalIndex ix;
  std::mt19937_64 rng(5);
  std::vector<Range> rs(3000);
  for (size_t i = 0; i < rs.size(); ++i) {
    const uintptr_t base = (rng() % 100000) * 4096;
    const uintptr_t len = (1 + rng() % 64) * 4096;
    rs[i] = {base, base + len, ix.insert(base, base + len, &rs[i]), true};
  }
  for (int round = 0; round < 3; ++round) {
    for (int q = 0; q < 3000; ++q) {
      const uintptr_t lo = (rng() % 100000) * 4096 + (rng() % 4096);
      const uintptr_t hi = lo + 1 + rng() % (8 * 4096);
      const bool any =
          std::any_of(rs.begin(), rs.end(), [&](const Range& r) { return contains(r, lo, hi); });
      const auto* got = static_cast<const Range*>(ix.find_containing(lo, hi));
      ASSERT_EQ(got != nullptr, any) << "round " << round << " query " << q;
      if (got != nullptr) {
        ASSERT_TRUE(contains(*got, lo, hi));
      }
    }
    // Erase a third of what is left, then query again.
    for (auto& r : rs) {
      if (r.live && rng() % 3 == 0) {
        ix.erase(r.node);
        r.live = false;
      }
    }
  }
  size_t live = 0;
  for (const auto& r : rs) live += r.live;
  EXPECT_EQ(ix.size(), live);
  // The same range registered twice (two users of one buffer) is two entries; erasing one leaves
  // the other.
  IntervalIndex two;
  int a = 0, b = 0;
  const int32_t na = two.insert(4096, 8192, &a);
  two.insert(4096, 8192, &b);
  two.erase(na);
  EXPECT_EQ(two.find_containing(4096, 8192), &b);
}

// 10,000 registrations (as many as a job's buffers on one adapter): each insert, query and erase
// visits O(log n) nodes, not n.
TEST(IntervalIndex, TenThousandRangesCostAboutLogNPerOperation) {
  constexpr int kN = 10000;
  IntervalIndex ix;
  std::vector<int32_t> nodes(kN);
  std::vector<int> payload(kN);
  uint64_t worst_insert = 0, worst_query = 0, worst_erase = 0;
  for (int i = 0; i < kN; ++i) {  // disjoint buffers, registered in address order
    const uint64_t before = ix.steps();
    nodes[i] =
        ix.insert(uintptr_t{1} << 32 | static_cast<uintptr_t>(i) << 16,
                  (uintptr_t{1} << 32 | static_cast<uintptr_t>(i) << 16) + 8192, &payload[i]);
    worst_insert = std::max(worst_insert, ix.steps() - before);
  }
  for (int i = 0; i < kN; ++i) {
    const uintptr_t lo = uintptr_t{1} << 32 | static_cast<uintptr_t>(i) << 16;
    const uint64_t before = ix.steps();
    EXPECT_EQ(ix.find_containing(lo + 100, lo + 4096), &payload[i]);
    EXPECT_EQ(ix.find_containing(lo + 100, lo + 8193), nullptr);  // one byte past it
    worst_query = std::max(worst_query, (ix.steps() - before) / 2);
  }
  for (int i = 0; i < kN; ++i) {
    const uint64_t before = ix.steps();
    ix.erase(nodes[i]);
    worst_erase = std::max(worst_erase, ix.steps() - before);
  }
  EXPECT_EQ(ix.size(), 0u);
  const double lg = std::log2(static_cast<double>(kN));
  std::printf(
      "%d ranges: worst insert %llu nodes, query %llu, erase %llu (log2 n = %.1f; a scan "
      "visits %d)\n",
      kN, static_cast<unsigned long long>(worst_insert),
      static_cast<unsigned long long>(worst_query), static_cast<unsigned long long>(worst_erase),
      lg, kN);
  EXPECT_LE(worst_insert, 8 * lg);
  EXPECT_LE(worst_query, 8 * lg);
  EXPECT_LE(worst_erase, 8 * lg);
}

}  // namespace
}  // namespace sluice
