// sluice-bench's statistics over repetitions: min / median / max, ratios with the extremes the
// spreads allow, and verdicts that say "within noise" when a spread straddles a target's bound.
// Header-only pure logic (unit-tested in bench/sluice_bench/stats_test.cc).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace bench {

// min / median / max of the finite values (NaN when there is none).
struct Spread {
  double lo = NAN, med = NAN, hi = NAN;
  int n = 0;
};
inline Spread spread(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
  Spread s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.n = static_cast<int>(v.size());
  s.lo = v.front();
  s.hi = v.back();
  size_t m = v.size() / 2;
  s.med = v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
  return s;
}

// The ratio a/b: median over median, and the extremes the spreads allow.
inline Spread ratio(const Spread& a, const Spread& b) {
  Spread r;
  if (!(b.lo > 0) || std::isnan(a.med) || std::isnan(b.med)) return r;
  r.med = a.med / b.med;
  r.lo = a.lo / b.hi;
  r.hi = a.hi / b.lo;
  r.n = std::min(a.n, b.n);
  return r;
}

// A target `x <= bound` (le) or `x >= bound` over the spread [lo, hi]: MET when all of it
// meets the bound, SHORT when none of it does, "within noise" when the spread straddles it.
enum class Verdict { kNone, kMet, kNoise, kShort };
inline Verdict judge(const Spread& x, bool le, double bound) {
  if (std::isnan(x.lo) || std::isnan(x.hi)) return Verdict::kNone;
  bool lo_ok = le ? x.lo <= bound : x.lo >= bound;
  bool hi_ok = le ? x.hi <= bound : x.hi >= bound;
  if (lo_ok && hi_ok) return Verdict::kMet;
  if (!lo_ok && !hi_ok) return Verdict::kShort;
  return Verdict::kNoise;
}
// Several rows against one target: any SHORT is SHORT, else any noise is noise, else MET.
inline Verdict combine(Verdict a, Verdict b) {
  if (a == Verdict::kNone) return b;
  if (b == Verdict::kNone) return a;
  return std::max(a, b);
}
inline const char* verdict_str(Verdict v) {
  switch (v) {
    case Verdict::kMet:
      return "MET";
    case Verdict::kNoise:
      return "within noise";
    case Verdict::kShort:
      return "SHORT";
    default:
      return "n/a";
  }
}

}  // namespace bench
