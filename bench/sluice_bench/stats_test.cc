// sluice-bench's pure logic: statistics over repetitions, noise-aware verdicts, perftest parsers.
#include "stats.h"

#include <gtest/gtest.h>

#include "sluice_bench.h"

namespace bench {
namespace {

TEST(BenchStats, SpreadIsMinMedianMaxOfFiniteValues) {
  Spread s = spread({3, 1, 2});
  EXPECT_EQ(s.lo, 1);
  EXPECT_EQ(s.med, 2);
  EXPECT_EQ(s.hi, 3);
  EXPECT_EQ(s.n, 3);
  Spread e = spread({4, 1, NAN, 2, 3, INFINITY});  // a failed repetition is left out
  EXPECT_EQ(e.n, 4);
  EXPECT_DOUBLE_EQ(e.med, 2.5);
  EXPECT_TRUE(std::isnan(spread({NAN}).med));
  EXPECT_TRUE(std::isnan(spread({}).lo));
}

TEST(BenchStats, RatioIsMedianOverMedianWithTheExtremesTheSpreadsAllow) {
  Spread r = ratio(spread({8, 9, 10}), spread({10, 12, 20}));
  EXPECT_DOUBLE_EQ(r.med, 9.0 / 12);
  EXPECT_DOUBLE_EQ(r.lo, 8.0 / 20);
  EXPECT_DOUBLE_EQ(r.hi, 10.0 / 10);
  EXPECT_TRUE(std::isnan(ratio(spread({1}), spread({0})).med));
  EXPECT_TRUE(std::isnan(ratio(spread({1}), spread({NAN})).med));
}

TEST(BenchStats, VerdictIsWithinNoiseWhenTheSpreadStraddlesTheBound) {
  Spread s;
  s.lo = 0.9;
  s.med = 1.0;
  s.hi = 1.1;
  EXPECT_EQ(judge(s, false, 0.95), Verdict::kNoise);  // >= 0.95: median meets it, spread does not
  EXPECT_EQ(judge(s, false, 0.85), Verdict::kMet);
  EXPECT_EQ(judge(s, false, 1.2), Verdict::kShort);
  EXPECT_EQ(judge(s, true, 1.2), Verdict::kMet);  // <= 1.2
  EXPECT_EQ(judge(s, true, 1.05), Verdict::kNoise);
  EXPECT_EQ(judge(s, true, 0.5), Verdict::kShort);
  EXPECT_EQ(judge(Spread{}, true, 1), Verdict::kNone);
  // One repetition: no spread, so MET or SHORT.
  EXPECT_EQ(judge(ratio(spread({9}), spread({10})), false, 0.95), Verdict::kShort);
  EXPECT_STREQ(verdict_str(Verdict::kNoise), "within noise");
}

TEST(BenchStats, RowsCombineToTheWorstVerdict) {
  EXPECT_EQ(combine(Verdict::kNone, Verdict::kMet), Verdict::kMet);
  EXPECT_EQ(combine(Verdict::kMet, Verdict::kNoise), Verdict::kNoise);
  EXPECT_EQ(combine(Verdict::kShort, Verdict::kNoise), Verdict::kShort);
  EXPECT_EQ(combine(Verdict::kMet, Verdict::kNone), Verdict::kMet);
}

TEST(BenchStats, ParsesPerftestResultLines) {
  // perftest 24.x: MB/sec are 2^20 B/s.
  RawBw bw = parse_ib_write_bw(
      " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
      " 131072     128              32.73              11.57  \t\t   0.000093\n");
  ASSERT_TRUE(bw.ok);
  EXPECT_NEAR(bw.avg_gbs, 11.57 * 1048576 / 1e9, 1e-12);
  EXPECT_NEAR(bw.peak_gbs, 32.73 * 1048576 / 1e9, 1e-12);
  EXPECT_DOUBLE_EQ(bw.mpps, 0.000093);
  // A client that died after its header has no result.
  EXPECT_FALSE(parse_ib_write_bw(" #bytes     #iterations    BW peak[MB/sec]    BW "
                                 "average[MB/sec]   MsgRate[Mpps]\n")
                   .ok);
  // ib_write_lat and ib_send_lat print the same columns.
  RawLat lat = parse_ib_write_lat(
      " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    "
      "t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n"
      " 8       500          10.23          50.10        14.10            15.90          2.10     "
      "         20.30                45.00   \n");
  ASSERT_TRUE(lat.ok);
  EXPECT_DOUBLE_EQ(lat.typical_us, 14.10);
  EXPECT_DOUBLE_EQ(lat.avg_us, 15.90);
  EXPECT_DOUBLE_EQ(lat.p99_us, 20.30);
  EXPECT_STREQ(raw_tool(Op::kRawSendLat), "ib_send_lat");
}

}  // namespace
}  // namespace bench
