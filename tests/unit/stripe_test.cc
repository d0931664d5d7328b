// NIC fusion's data-path layout rules (core/src/rules/stripe.h): path weights from both ends'
// member weights, which paths carry a receive, and the bytes of each path's part.
#include "../../core/src/rules/stripe.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <random>
#include <vector>

#include "../../core/src/rules/cts_match.h"

namespace {

using namespace sluice;
using stripe::Paths;

// Every path's part of `size`: disjoint, contiguous in path order, covering [0, size), cut at
// 128-byte boundaries, nothing outside the mask. Returns each path's length.
std::vector<size_t> check_parts(const Paths& p, uint32_t mask, size_t size) {
  std::vector<size_t> lens(static_cast<size_t>(p.npaths), 0);
  size_t next = 0;
  for (int q = 0; q < p.npaths; ++q) {
    size_t off = 0, len = 0;
    stripe::part_of(p, mask, size, q, &off, &len);
    lens[static_cast<size_t>(q)] = len;
    if ((mask & (1u << q)) == 0) {
      EXPECT_EQ(len, 0u) << "path " << q << " is not in the mask";
      continue;
    }
    if (len == 0) continue;
    EXPECT_EQ(off, next) << "path " << q << " of size " << size;
    if (off + len != size) {
      EXPECT_EQ((off + len) % cts::kSplitAlign, 0u) << "path " << q;
    }
    next = off + len;
  }
  EXPECT_EQ(next, size) << "the parts do not cover the message";
  return lens;
}

std::vector<size_t> sizes_0_to_8mib() {
  std::vector<size_t> v = {0,
                           1,
                           127,
                           128,
                           129,
                           255,
                           256,
                           4095,
                           4096,
                           65535,
                           65536,
                           65537,
                           (1u << 20) - 1,
                           1u << 20,
                           (8u << 20) + 3};
  std::mt19937 rng(24);
  for (int i = 0; i < 200; ++i) v.push_back(rng() % ((8u << 20) + 4));
  return v;
}

TEST(StripePaths, EqualMembersShareEqually) {
  const uint16_t w[2] = {10, 10};
  const Paths p = stripe::path_weights(w, 2, w, 2);
  ASSERT_EQ(p.npaths, 2);
  EXPECT_EQ(p.weight[0], stripe::kShareScale / 2);
  EXPECT_EQ(p.weight[1], stripe::kShareScale / 2);
  EXPECT_EQ(p.active_mask(), 0b11u);
  for (size_t size : sizes_0_to_8mib()) {
    const auto lens = check_parts(p, 0b11u, size);
    // The cut is the half rounded to a 128-byte line: the parts differ by less than two lines.
    const size_t diff = lens[0] > lens[1] ? lens[0] - lens[1] : lens[1] - lens[0];
    EXPECT_LT(diff, 2 * cts::kSplitAlign) << size;
  }
  const auto mib = check_parts(p, 0b11u, 1u << 20);
  EXPECT_EQ(mib[0], 512u << 10);
  EXPECT_EQ(mib[1], 512u << 10);
}

TEST(StripePaths, TwoToOneAndOneToTwoUseBothPaths) {
  const uint16_t two[2] = {10, 10}, one[1] = {1};
  for (const Paths& p :
       {stripe::path_weights(two, 2, one, 1), stripe::path_weights(one, 1, two, 2)}) {
    ASSERT_EQ(p.npaths, 2);
    EXPECT_EQ(p.weight[0], p.weight[1]);
    EXPECT_EQ(p.active_mask(), 0b11u);
  }
}

TEST(StripePaths, OneMemberEachIsOnePathWithEverything) {
  const uint16_t one[1] = {7};
  const Paths p = stripe::path_weights(one, 1, one, 1);
  ASSERT_EQ(p.npaths, 1);
  EXPECT_EQ(p.active_mask(), 1u);
  for (uint64_t seq = 0; seq < 4; ++seq) EXPECT_EQ(stripe::paths_of(p, seq, 1u << 30, 1), 1u);
  size_t off = 1, len = 0;
  stripe::part_of(p, 1u, 12345, 0, &off, &len);
  EXPECT_EQ(off, 0u);
  EXPECT_EQ(len, 12345u);
}

// A fallback-only member (weight 0) on either end idles its path while another is up.
TEST(StripePaths, FallbackMemberCarriesNothing) {
  const uint16_t fb[2] = {10, 0}, eq[2] = {5, 5};
  for (const Paths& p : {stripe::path_weights(fb, 2, eq, 2), stripe::path_weights(eq, 2, fb, 2)}) {
    EXPECT_EQ(p.active_mask(), 0b01u);
    for (uint64_t seq = 0; seq < 8; ++seq) {
      const uint32_t big = stripe::paths_of(p, seq, 8u << 20, stripe::kDefaultThreshold);
      const uint32_t small = stripe::paths_of(p, seq, 100, stripe::kDefaultThreshold);
      EXPECT_EQ(big, 0b01u);
      EXPECT_EQ(small, 0b01u);
      const auto lens = check_parts(p, big, (8u << 20) + 3);
      EXPECT_EQ(lens[1], 0u);
    }
  }
  // Three members, the middle one fallback: small receives alternate over paths 0 and 2.
  const uint16_t three[3] = {10, 0, 10}, one[1] = {1};
  const Paths p = stripe::path_weights(three, 3, one, 1);
  EXPECT_EQ(p.active_mask(), 0b101u);
  EXPECT_EQ(stripe::paths_of(p, 0, 10, stripe::kDefaultThreshold), 0b001u);
  EXPECT_EQ(stripe::paths_of(p, 1, 10, stripe::kDefaultThreshold), 0b100u);
  EXPECT_EQ(stripe::paths_of(p, 2, 10, stripe::kDefaultThreshold), 0b001u);
  EXPECT_EQ(stripe::paths_of(p, 3, 1u << 20, stripe::kDefaultThreshold), 0b101u);
}

TEST(StripePaths, NoActivePathIsNoMask) {
  const uint16_t zero[2] = {0, 0}, eq[2] = {1, 1};
  const Paths p = stripe::path_weights(zero, 2, eq, 2);
  EXPECT_EQ(p.active_mask(), 0u);
  EXPECT_EQ(stripe::paths_of(p, 0, 1u << 20, 1), 0u);
  const Paths bad = stripe::path_weights(eq, 0, eq, 2);
  EXPECT_EQ(bad.active_mask(), 0u);
}

// Below the threshold a receive travels whole on one path, rotating with the sequence number;
// at it, on every active path. The receiver's count of closing immediates is popcount(mask).
TEST(StripePaths, ThresholdAndRotation) {
  const uint16_t w[2] = {1, 1};
  const Paths p = stripe::path_weights(w, 2, w, 2);
  const size_t t = stripe::kDefaultThreshold;
  for (uint64_t seq = 0; seq < 64; ++seq) {
    const uint32_t small = stripe::paths_of(p, seq, t - 1, t);
    EXPECT_EQ(std::popcount(small), 1);
    EXPECT_EQ(small, 1u << (seq % 2)) << seq;
    EXPECT_EQ(stripe::paths_of(p, seq, t, t), 0b11u);
    // A one-path receive's part is the whole message, whatever its size.
    const auto lens = check_parts(p, small, t - 1);
    EXPECT_EQ(lens[seq % 2], t - 1);
  }
}

// Issue 31: a path ramping back in after a failback carries its step's part of its weight: of a
// striped message's bytes (its share in the clear-to-send entry cuts them), and of the small
// messages each taken whole by one path.
TEST(StripePaths, APathRampingBackInCarriesItsShareOfTheBytes) {
  const uint16_t w[2] = {1, 1};
  const Paths p = stripe::path_weights(w, 2, w, 2);
  EXPECT_EQ(stripe::with_shares(p, 0).weight[1], p.weight[1]) << "no shares: the weights";
  for (uint32_t pct : {25u, 50u}) {
    SCOPED_TRACE(pct);
    const Paths q = stripe::with_shares(p, pct << 8);
    EXPECT_EQ(q.weight[0], p.weight[0]);
    EXPECT_EQ(q.weight[1], p.weight[1] * pct / 100);
    const size_t size = size_t{4} << 20;
    const auto lens = check_parts(q, 0b11, size);
    const double got = static_cast<double>(lens[1]) / static_cast<double>(size);
    const double want = static_cast<double>(pct) / (100.0 + pct);
    EXPECT_NEAR(got, want, 0.001) << "path 1's part of a striped message";
    // Small messages: each whole on one path, path 1 taking its ramped part of them.
    Paths live = p;
    live.weight[1] = q.weight[1];
    int on1 = 0;
    constexpr int kMsgs = 4000;
    for (uint64_t seq = 0; seq < kMsgs; ++seq) {
      const uint32_t m = stripe::paths_of(live, seq, 4096, stripe::kDefaultThreshold, true);
      ASSERT_EQ(std::popcount(m), 1);
      on1 += m == 0b10u;
    }
    EXPECT_NEAR(static_cast<double>(on1) / kMsgs, want, 0.03) << on1 << " of " << kMsgs;
  }
  // A weight that would round to 0 stays 1: the path still carries.
  const uint16_t big[2] = {10000, 1};
  const Paths b = stripe::path_weights(big, 2, big, 2);
  EXPECT_GE(stripe::with_shares(b, 1u << 8).weight[1], 1u);
}

// Unequal weights (the AWS p6-b200 GPU 4 case of docs/fusion.md: 200, 200, 32) split a message
// in proportion, each part within one 128-byte cut of its exact share.
TEST(StripePaths, UnequalWeightsSplitInProportion) {
  const uint16_t ws[3] = {200, 200, 32}, wr[3] = {1, 1, 1};
  const Paths p = stripe::path_weights(ws, 3, wr, 3);
  EXPECT_EQ(p.active_mask(), 0b111u);
  uint64_t total = 0;
  for (int q = 0; q < 3; ++q) total += p.weight[q];
  for (size_t size : sizes_0_to_8mib()) {
    const auto lens = check_parts(p, 0b111u, size);
    for (int q = 0; q < 3; ++q) {
      const double exact = static_cast<double>(size) * p.weight[q] / static_cast<double>(total);
      EXPECT_NEAR(static_cast<double>(lens[static_cast<size_t>(q)]), exact, 2.0 * cts::kSplitAlign)
          << "path " << q << " of " << size;
    }
  }
  // The receiver's weights bound the path too: the smaller share wins.
  const uint16_t rs[3] = {1, 1, 2};
  const Paths both = stripe::path_weights(wr, 3, rs, 3);
  EXPECT_EQ(both.weight[0], both.weight[1]);
  EXPECT_EQ(both.weight[2], stripe::kShareScale / 3);  // sender's third, below receiver's half
  EXPECT_LT(both.weight[0], both.weight[2]);
}

}  // namespace

namespace {

// Every (path, lane) chain of a group: each byte of each message written exactly once, at its
// own offset, only by chains of the receive's paths; every such chain ends with its close, and no
// chain overflows a send queue's worth of WRs. The receiver's closes() counts those chains.
void check_chains(const Paths& p, uint32_t mask, const std::vector<size_t>& sizes, bool split,
                  int qpp) {
  const int n = static_cast<int>(sizes.size());
  const int nl = stripe::lanes_per_path(split, qpp);
  std::vector<std::vector<uint8_t>> hit(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) hit[i].assign(sizes[i], 0);
  int chains = 0;
  for (int path = 0; path < p.npaths; ++path) {
    for (int lane = 0; lane < nl; ++lane) {
      cts::LaneWr plan[cts::kMaxLaneWrs];
      const uint32_t nw =
          stripe::plan_path(p, mask, sizes.data(), n, path, lane, nl, SIZE_MAX, plan);
      if ((mask & (1u << path)) == 0) {
        EXPECT_EQ(nw, 0u) << "path " << path << " is not the receive's";
        continue;
      }
      ASSERT_GE(nw, 1u);
      ASSERT_LE(nw, cts::kMaxLaneWrs);
      ++chains;
      const uint32_t want =
          stripe::plan_path(p, mask, sizes.data(), n, path, lane, nl, SIZE_MAX, nullptr);
      EXPECT_EQ(nw, want) << "the count without a plan differs";
      for (uint32_t k = 0; k < nw; ++k) {
        if (plan[k].msg < 0) {
          EXPECT_EQ(k, nw - 1) << "a separate close is the chain's last WR";
          continue;
        }
        ASSERT_LT(plan[k].msg, n);
        auto& h = hit[static_cast<size_t>(plan[k].msg)];
        ASSERT_LE(plan[k].off + plan[k].len, h.size());
        for (size_t b = plan[k].off; b < plan[k].off + plan[k].len; ++b) ++h[b];
      }
    }
  }
  EXPECT_EQ(chains, stripe::closes(mask, split, qpp));
  for (size_t i = 0; i < hit.size(); ++i) {
    size_t wrong = 0;
    for (uint8_t c : hit[i]) wrong += c != 1;
    EXPECT_EQ(wrong, 0u) << "message " << i << " of " << sizes[i] << " bytes: bytes not written "
                         << "exactly once";
  }
}

TEST(StripeChains, EveryByteOnceOverPathsAndLanes) {
  const uint16_t w2[2] = {3, 1}, w1[1] = {1};
  const Paths two = stripe::path_weights(w2, 2, w2, 2);
  const Paths two_one = stripe::path_weights(w2, 2, w1, 1);
  std::mt19937 rng(2024);
  const std::vector<size_t> singles = {0, 1, 128, 4099, 65536, (1u << 20) + 5, (8u << 20) + 3};
  for (const Paths* p : {&two, &two_one}) {
    for (bool split : {false, true}) {
      for (int qpp : {1, 4}) {
        for (size_t size : singles) {
          check_chains(*p, 0b11u, {size}, split, qpp);
          check_chains(*p, 0b10u, {size}, split, qpp);
        }
        for (int g = 0; g < 6; ++g) {  // grouped receives of 2..8 messages
          std::vector<size_t> group(2 + rng() % 7);
          for (auto& s : group) s = rng() % 3 == 0 ? 0 : rng() % (1u << 19);
          check_chains(*p, 0b11u, group, split, qpp);
          check_chains(*p, 0b01u, group, split, qpp);
        }
      }
    }
  }
}

TEST(StripeChains, QpsOfAPathStayOnThePath) {
  for (int qpp : {1, 2, 4}) {
    for (int path = 0; path < 4; ++path) {
      for (uint64_t seq = 0; seq < 9; ++seq) {
        for (int lane = 0; lane < qpp; ++lane) {
          const int q = stripe::qp_of(path, lane, true, qpp, seq);
          EXPECT_EQ(q / qpp, path);
          EXPECT_EQ(q % qpp, lane);
        }
        const int q = stripe::qp_of(path, 0, false, qpp, seq);
        EXPECT_EQ(q / qpp, path);
        EXPECT_EQ(q % qpp, static_cast<int>(seq % static_cast<uint64_t>(qpp)));
      }
    }
  }
  EXPECT_EQ(stripe::closes(0b101u, true, 4), 8);
  EXPECT_EQ(stripe::closes(0b101u, false, 4), 2);
}

// The receiver posts a receive WR on exactly the QPs the sender's chains use: carries() is the
// inverse of qp_of over every mask, and counts closes() QPs.
TEST(StripeChains, CarriesIsTheInverseOfQpOf) {
  for (bool split : {false, true}) {
    for (int qpp : {1, 2, 4}) {
      for (uint32_t mask = 1; mask < 16; ++mask) {
        for (uint64_t seq = 0; seq < 9; ++seq) {
          bool want[16] = {};
          for (int path = 0; path < 4; ++path) {
            if ((mask >> path & 1u) == 0) continue;
            for (int lane = 0; lane < stripe::lanes_per_path(split, qpp); ++lane)
              want[stripe::qp_of(path, lane, split, qpp, seq)] = true;
          }
          int n = 0;
          for (int q = 0; q < 4 * qpp; ++q) {
            EXPECT_EQ(stripe::carries(mask, split, qpp, seq, q), want[q])
                << "split " << split << " qpp " << qpp << " mask " << mask << " seq " << seq
                << " qp " << q;
            n += stripe::carries(mask, split, qpp, seq, q);
          }
          EXPECT_EQ(n, stripe::closes(mask, split, qpp));
        }
      }
    }
  }
}

}  // namespace
