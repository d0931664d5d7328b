// Flow labels per QP (core/src/base/flow_label.cc), without verbs: the kernel's label -> UDP
// source port mapping and QPN fallback, the spread set (distinct, evenly spaced ports, stable,
// seeded), the symmetric connection key, re-rolls, and the SLUICE_FLOW_LABEL spellings.
#include "sluice/core/base/flow_label.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

namespace {

using namespace sluice::flow;

// Circular distance of two 14-bit port values.
uint32_t circ(uint32_t a, uint32_t b) {
  const uint32_t d = (a > b ? a - b : b - a) % kSportSpace;
  return std::min(d, kSportSpace - d);
}

std::vector<uint32_t> ports_of(uint64_t seed, uint64_t key, uint32_t n) {
  std::vector<uint32_t> p;
  for (uint32_t i = 0; i < n; ++i) p.push_back(label_to_udp_sport(flow_label(seed, key, i, n)));
  return p;
}

TEST(FlowLabel, KernelFoldOfTheLabel) {
  // ib_verbs.h: low 14 bits XOR the 6 high bits, in 0xC000..0xFFFF.
  EXPECT_EQ(label_to_udp_sport(0x00001), 0xC001);
  EXPECT_EQ(label_to_udp_sport(0x03FFF), 0xFFFF);
  EXPECT_EQ(label_to_udp_sport(0x04000), 0xC001);  // high bit 14 folds onto bit 0
  EXPECT_EQ(label_to_udp_sport(0xFC000), 0xC03F);
  EXPECT_EQ(label_to_udp_sport(0xFFFFF), 0xFFC0);
  EXPECT_EQ(label_to_udp_sport(0x12345), 0xC000 | ((0x12345 & 0x3FFF) ^ (0x12345 >> 14)));
}

TEST(FlowLabel, KernelQpnHashWhenNoLabel) {
  // rdma_calc_flow_label: fold of the 64-bit product, symmetric in the two QPNs.
  const uint32_t a = 0x11, b = 0x12;
  uint64_t v = uint64_t{a} * b;
  v ^= v >> 20;
  v ^= v >> 40;
  EXPECT_EQ(qpn_flow_label(a, b), static_cast<uint32_t>(v & 0xFFFFF));
  EXPECT_EQ(qpn_flow_label(a, b), qpn_flow_label(b, a));
  EXPECT_EQ(qpn_flow_label(0xABCDEF, 0x123456), qpn_flow_label(0x123456, 0xABCDEF));
  const uint64_t big = uint64_t{0xABCDEF} * 0x123456;
  uint64_t w = big ^ (big >> 20);
  w ^= w >> 40;
  EXPECT_EQ(qpn_flow_label(0xABCDEF, 0x123456), static_cast<uint32_t>(w & 0xFFFFF));
  // label 0 -> the QPN hash; any other label -> the label alone
  EXPECT_EQ(kernel_udp_sport(0, a, b), label_to_udp_sport(qpn_flow_label(a, b)));
  EXPECT_EQ(kernel_udp_sport(0x4242, a, b), label_to_udp_sport(0x4242));
  EXPECT_EQ(kernel_udp_sport(0x4242, a, b), kernel_udp_sport(0x4242, 999, 1000));
}

TEST(FlowLabel, SpreadSetIsDistinctNonZeroAndEvenlySpaced) {
  for (uint32_t n : {1u, 2u, 3u, 4u, 5u, 7u, 8u, 16u, 24u, 64u, 128u, 1000u}) {
    for (uint64_t key : {0ull, 1ull, 0x1100000012ull, 0xdeadbeefcafeull}) {
      std::set<uint32_t> labels;
      for (uint32_t i = 0; i < n; ++i) {
        const uint32_t l = flow_label(kAutoSeed, key, i, n);
        EXPECT_NE(l, 0u);
        EXPECT_EQ(l & ~kLabelMask, 0u);
        labels.insert(l);
      }
      EXPECT_EQ(labels.size(), n) << "labels not distinct, n " << n;
      std::vector<uint32_t> p = ports_of(kAutoSeed, key, n);
      for (uint32_t x : p) {
        EXPECT_GE(x, kSportMin);
        EXPECT_LE(x, 0xFFFFu);
      }
      // Consecutive QPs are floor or ceil(16384 / n) apart on the circle, and so the set's
      // smallest circular gap is floor(16384 / n).
      const uint32_t lo = kSportSpace / n, hi = (kSportSpace + n - 1) / n;
      for (uint32_t i = 0; n > 1 && i < n; ++i) {
        const uint32_t next = p[(i + 1) % n] - kSportMin, cur = p[i] - kSportMin;
        const uint32_t step = (next + kSportSpace - cur) % kSportSpace;
        EXPECT_TRUE(step == lo || step == hi) << "n " << n << " i " << i << " step " << step;
      }
      std::vector<uint32_t> s = p;
      std::sort(s.begin(), s.end());
      EXPECT_EQ(std::unique(s.begin(), s.end()), s.end()) << "ports not distinct, n " << n;
    }
  }
}

TEST(FlowLabel, FourQpsAreAQuarterApart) {
  const std::vector<uint32_t> p = ports_of(kAutoSeed, conn_key(17, 18), 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(((p[(i + 1) % 4] - p[i]) + kSportSpace) % kSportSpace, 4096u);
    EXPECT_EQ(circ(p[i], p[(i + 2) % 4]), 8192u);
  }
}

TEST(FlowLabel, StableAndSeeded) {
  const uint64_t key = conn_key(0x21, 0x40);
  for (uint32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(flow_label(7, key, i, 4), flow_label(7, key, i, 4));
  }
  // Another seed or another connection: another base (for these inputs; a collision of two
  // 14-bit bases is possible in general, not here).
  EXPECT_NE(ports_of(7, key, 4), ports_of(8, key, 4));
  EXPECT_NE(ports_of(7, key, 4), ports_of(7, conn_key(0x22, 0x41), 4));
  // Over many connections the bases cover the circle: no hot region.
  std::vector<int> bucket(16, 0);
  for (uint32_t q = 0; q < 4096; ++q)
    ++bucket[(ports_of(kAutoSeed, conn_key(q, q + 1), 1)[0] - kSportMin) / 1024];
  for (int b : bucket) EXPECT_GT(b, 4096 / 16 / 2);
}

TEST(FlowLabel, ConnectionKeyIsTheSameOnBothEnds) {
  EXPECT_EQ(conn_key(17, 18), conn_key(18, 17));
  EXPECT_NE(conn_key(17, 18), conn_key(17, 19));
  // so both ends label QP i alike
  for (uint32_t i = 0; i < 4; ++i)
    EXPECT_EQ(flow_label(kAutoSeed, conn_key(0x51, 0x99), i, 4),
              flow_label(kAutoSeed, conn_key(0x99, 0x51), i, 4));
}

TEST(FlowLabel, FusedCountExtendsTheSet) {
  // Two members of 4 QPs each: one set of 8 over the connection's key, index = member * 4 + q.
  const uint64_t key = conn_key(100, 200);
  std::set<uint32_t> ports;
  for (uint32_t i = 0; i < 8; ++i) ports.insert(label_to_udp_sport(flow_label(1, key, i, 8)));
  EXPECT_EQ(ports.size(), 8u);
  LabelSet s(1, key, 8);
  for (uint32_t i = 0; i < 8; ++i) EXPECT_EQ(s.label(i), flow_label(1, key, i, 8));
  EXPECT_EQ(s.label(8), 0u);
}

TEST(FlowLabel, RerollMovesOnlyTheGivenQpsAndKeepsTheSetDistinct) {
  LabelSet s(kAutoSeed, conn_key(5, 6), 8);
  std::vector<uint32_t> before;
  for (uint32_t i = 0; i < 8; ++i) before.push_back(s.label(i));
  const std::vector<uint32_t> moved = {1, 6, 6, 42};
  EXPECT_EQ(s.reroll(moved), 2u);  // repeats once, out-of-range ignored
  EXPECT_EQ(s.generation(1), 1u);
  EXPECT_EQ(s.generation(6), 1u);
  EXPECT_EQ(s.generation(0), 0u);
  for (uint32_t i = 0; i < 8; ++i) {
    if (i == 1 || i == 6) {
      EXPECT_NE(s.label(i), before[i]);
      EXPECT_NE(label_to_udp_sport(s.label(i)), label_to_udp_sport(before[i]));
      EXPECT_EQ(s.label(i), flow_label(kAutoSeed, conn_key(5, 6), i, 8, 1));
    } else {
      EXPECT_EQ(s.label(i), before[i]);
    }
  }
  // Many re-rolls of everything: every generation's set stays distinct, each QP inside its own
  // slot (never nearer its neighbours' first ports than its slot allows), never repeating its
  // previous port.
  const uint32_t base = label_to_udp_sport(before[0]) - kSportMin;
  for (int round = 0; round < 200; ++round) {
    std::vector<uint32_t> prev;
    for (uint32_t i = 0; i < 8; ++i) prev.push_back(label_to_udp_sport(s.label(i)));
    const std::vector<uint32_t> all = {0, 1, 2, 3, 4, 5, 6, 7};
    s.reroll(all);
    std::set<uint32_t> ports;
    for (uint32_t i = 0; i < 8; ++i) {
      const uint32_t p = label_to_udp_sport(s.label(i));
      EXPECT_NE(p, prev[i]);
      ports.insert(p);
      const uint32_t rel = (p - kSportMin + kSportSpace - base) % kSportSpace;
      EXPECT_EQ(rel / 2048, i) << "QP " << i << " left its slot";
      EXPECT_NE(s.label(i), 0u);
    }
    EXPECT_EQ(ports.size(), 8u);
  }
}

TEST(FlowLabel, PolicySpellings) {
  auto a = parse_policy("auto");
  ASSERT_TRUE(a.is_ok());
  EXPECT_TRUE(a.value().on);
  EXPECT_TRUE(a.value().automatic);
  EXPECT_EQ(a.value().seed, kAutoSeed);
  EXPECT_EQ(policy_text(a.value()), "auto");
  auto off = parse_policy("OFF");
  ASSERT_TRUE(off.is_ok());
  EXPECT_FALSE(off.value().on);
  EXPECT_EQ(policy_text(off.value()), "off");
  auto d = parse_policy("42");
  ASSERT_TRUE(d.is_ok());
  EXPECT_TRUE(d.value().on);
  EXPECT_FALSE(d.value().automatic);
  EXPECT_EQ(d.value().seed, 42u);
  EXPECT_EQ(policy_text(d.value()), "seed 0x2a");
  auto h = parse_policy("0xFFFFFFFFFFFFFFFF");
  ASSERT_TRUE(h.is_ok());
  EXPECT_EQ(h.value().seed, ~0ull);
  for (const char* bad : {"-1", "0x", "12a", "on", "0x1ffffffffffffffff", "1.5"})
    EXPECT_FALSE(parse_policy(bad).is_ok()) << bad;
}

}  // namespace
