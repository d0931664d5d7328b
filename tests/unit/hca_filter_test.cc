#include "sluice/core/base/hca_filter.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace sluice {
namespace {

HcaFilter parse_ok(std::string_view spec) {
  auto f = HcaFilter::parse(spec);
  EXPECT_TRUE(f.is_ok()) << spec << ": " << f.status().message();
  return f.is_ok() ? f.value() : HcaFilter();
}

TEST(HcaFilter, EmptyAcceptsEverything) {
  for (std::string_view spec : {"", "   ", ",,", "^", "=", "^="}) {
    const HcaFilter f = parse_ok(spec);
    EXPECT_TRUE(f.empty()) << spec;
    EXPECT_TRUE(f.accepts("mlx5_0", 1)) << spec;
    EXPECT_TRUE(f.accepts("anything", 2)) << spec;
  }
}

TEST(HcaFilter, PrefixMatchesEveryPortOfEveryDeviceWithThatPrefix) {
  const HcaFilter f = parse_ok("mlx5");
  EXPECT_FALSE(f.exclude());
  EXPECT_FALSE(f.exact());
  ASSERT_EQ(f.entries().size(), 1u);
  EXPECT_EQ(f.entries()[0].name, "mlx5");
  EXPECT_EQ(f.entries()[0].port, -1);
  EXPECT_TRUE(f.accepts("mlx5_0", 1));
  EXPECT_TRUE(f.accepts("mlx5_10", 2));
  EXPECT_TRUE(f.accepts("mlx5", 1));
  EXPECT_FALSE(f.accepts("mlx4_0", 1));
  EXPECT_FALSE(f.accepts("rxe0", 1));
  EXPECT_FALSE(f.accepts("mlx", 1));  // the entry is a prefix of the device, not the reverse
}

TEST(HcaFilter, PrefixWithoutEqualsAlsoMatchesLongerNames) {
  const HcaFilter f = parse_ok("mlx5_1");
  EXPECT_TRUE(f.accepts("mlx5_1", 1));
  EXPECT_TRUE(f.accepts("mlx5_10", 1));
  EXPECT_TRUE(f.accepts("mlx5_19", 1));
  EXPECT_FALSE(f.accepts("mlx5_2", 1));
}

TEST(HcaFilter, ExactListWithPorts) {
  const HcaFilter f = parse_ok("=mlx5_0:1,mlx5_1:1");
  EXPECT_TRUE(f.exact());
  EXPECT_FALSE(f.exclude());
  ASSERT_EQ(f.entries().size(), 2u);
  EXPECT_EQ(f.entries()[1].name, "mlx5_1");
  EXPECT_EQ(f.entries()[1].port, 1);
  EXPECT_TRUE(f.accepts("mlx5_0", 1));
  EXPECT_TRUE(f.accepts("mlx5_1", 1));
  EXPECT_FALSE(f.accepts("mlx5_0", 2));
  EXPECT_FALSE(f.accepts("mlx5_10", 1));  // '=' disables prefix matching
  EXPECT_FALSE(f.accepts("mlx5_2", 1));
}

TEST(HcaFilter, ExcludeExact) {
  const HcaFilter f = parse_ok("^=mlx5_1,mlx5_4");
  EXPECT_TRUE(f.exclude());
  EXPECT_TRUE(f.exact());
  EXPECT_FALSE(f.accepts("mlx5_1", 1));
  EXPECT_FALSE(f.accepts("mlx5_4", 2));
  EXPECT_TRUE(f.accepts("mlx5_10", 1));  // exact: mlx5_10 is not mlx5_1
  EXPECT_TRUE(f.accepts("mlx5_0", 1));
}

TEST(HcaFilter, ExcludePrefixWithPort) {
  const HcaFilter f = parse_ok("^mlx5_1:2");
  EXPECT_TRUE(f.exclude());
  EXPECT_FALSE(f.exact());
  EXPECT_FALSE(f.accepts("mlx5_1", 2));
  EXPECT_FALSE(f.accepts("mlx5_10", 2));  // prefix
  EXPECT_TRUE(f.accepts("mlx5_1", 1));    // other port of the same device stays
  EXPECT_TRUE(f.accepts("mlx5_0", 2));
}

TEST(HcaFilter, ExcludePrefixMatchesLongerNames) {
  const HcaFilter f = parse_ok("^mlx5_1");
  EXPECT_FALSE(f.accepts("mlx5_1", 1));
  EXPECT_FALSE(f.accepts("mlx5_12", 1));
  EXPECT_TRUE(f.accepts("mlx5_2", 1));
}

TEST(HcaFilter, AnyPortOnEitherSideMatches) {
  // Interfaces are matched with port -1 (NCCL's matchPort): an entry's port then does not matter.
  const HcaFilter f = parse_ok("eth0:1");
  EXPECT_TRUE(f.accepts("eth0", -1));
  EXPECT_FALSE(f.accepts("eth0", 2));
}

TEST(HcaFilter, WhitespaceTrimmedAndEmptyEntriesIgnored) {
  const HcaFilter f = parse_ok("  ^ = mlx5_0 : 1 ,, , mlx5_3 ,");
  EXPECT_TRUE(f.exclude());
  EXPECT_TRUE(f.exact());
  ASSERT_EQ(f.entries().size(), 2u);
  EXPECT_EQ(f.entries()[0].name, "mlx5_0");
  EXPECT_EQ(f.entries()[0].port, 1);
  EXPECT_EQ(f.entries()[1].name, "mlx5_3");
  EXPECT_EQ(f.entries()[1].port, -1);
}

std::string list_of(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += (i ? ",dev" : "dev") + std::to_string(i);
  return s;
}

TEST(HcaFilter, AtMost32Entries) {
  EXPECT_EQ(parse_ok(list_of(32)).entries().size(), 32u);
  auto f = HcaFilter::parse(list_of(33));
  ASSERT_FALSE(f.is_ok());
  EXPECT_EQ(f.status().code(), Code::kInvalidUsage);
  EXPECT_NE(f.status().message().find("32"), std::string::npos) << f.status().message();
  // Empty entries do not count.
  EXPECT_TRUE(HcaFilter::parse(list_of(32) + ",,, ,").is_ok());
}

TEST(HcaFilter, MalformedEntriesAreErrors) {
  for (std::string_view spec : {"mlx5_0:", "mlx5_0:x", "mlx5_0:1x", "mlx5_0:-1", "mlx5_0:256", ":1",
                                "mlx5_0,^mlx5_1", "mlx5_0,=mlx5_1"}) {
    auto f = HcaFilter::parse(spec);
    EXPECT_FALSE(f.is_ok()) << spec;
    if (!f.is_ok()) {
      EXPECT_EQ(f.status().code(), Code::kInvalidUsage) << spec;
      EXPECT_FALSE(f.status().message().empty());
    }
  }
}

TEST(HcaFilter, UnmatchedNamesEntriesThatMatchNoPort) {
  const std::vector<std::pair<std::string, int>> ports = {
      {"mlx5_0", 1}, {"mlx5_1", 1}, {"mlx5_10", 1}};
  EXPECT_EQ(parse_ok("mlx5_0,mlx5_1").unmatched(ports), std::vector<std::string>{});
  EXPECT_EQ(parse_ok("mlx5_0:2,mlx5_7,mlx4,mlx5_1:1").unmatched(ports),
            (std::vector<std::string>{"mlx5_0:2", "mlx5_7", "mlx4"}));
  // Exact: "mlx5_1" matches only mlx5_1, which exists; "mlx5_" matches nothing exactly.
  EXPECT_EQ(parse_ok("=mlx5_1,mlx5_").unmatched(ports), std::vector<std::string>{"mlx5_"});
  // Exclude lists report names that excluded nothing, too.
  EXPECT_EQ(parse_ok("^mlx5_9,mlx5_1").unmatched(ports), std::vector<std::string>{"mlx5_9"});
  EXPECT_TRUE(parse_ok("").unmatched(ports).empty());
}

TEST(HcaFilter, ToStringIsCanonicalAndParsesToTheSameFilter) {
  EXPECT_EQ(parse_ok(" ^ = mlx5_0 : 01 ,, mlx5_1 ,").to_string(), "^=mlx5_0:1,mlx5_1");
  EXPECT_EQ(parse_ok("mlx5").to_string(), "mlx5");
  EXPECT_EQ(parse_ok("").to_string(), "");
  const HcaFilter f = parse_ok("^mlx5_0:2,rxe");
  const HcaFilter g = parse_ok(f.to_string());
  EXPECT_EQ(g.to_string(), f.to_string());
  EXPECT_TRUE(g.exclude());
  EXPECT_FALSE(g.exact());
  ASSERT_EQ(g.entries().size(), 2u);
  EXPECT_EQ(g.entries()[0].port, 2);
}

}  // namespace
}  // namespace sluice
