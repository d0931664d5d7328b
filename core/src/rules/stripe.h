// NIC fusion's data-path layout (issue 24, step 2), as pure rules both ends derive alike: which
// paths of a fused comm carry a receive, and which bytes of a message each path carries. No verbs;
// tests/unit/stripe_test.cc tests these alone; the data path (send.cc, recv.cc) calls them on every
// comm (a one-path comm: one path, the whole message on it).
//
// The rules, from what both ends know before any byte moves:
//  * the paths' weights: path p joins the sender's member p % ns and the receiver's member p % nr
//    (wire.h); each side's member weights travel in MetaMembers. A path's weight is the smaller
//    of its two ends' shares (each member's share of its side's total, split evenly over the
//    paths that member serves), so a path is idle (weight 0) when either end is fallback-only,
//    and both ends compute the same integers from the same two lists;
//  * the receive's posted capacity (the sum of its clear-to-send entries' sizes) and its sequence
//    number. A receive whose capacity reaches the stripe threshold is striped over every path of
//    non-zero weight; a smaller one travels whole on one of them, the (seq % active)-th, so small
//    messages still spread over the paths and each path's chain stays in order. The receiver thus
//    knows, at irecv, how many closing immediates to expect: one per lane of every path in the
//    mask, whatever size the sender sends (a path whose part is empty closes with a zero-length
//    WRITE_WITH_IMM).
//  * a striped message of `size` bytes is cut by the path weights at kSplitAlign (128 B)
//    boundaries, in path order, the last active path taking the rest; so every byte is on exactly
//    one path, and a message smaller than the stripe lands where the cuts put it (possibly all on
//    the first paths, the others closing empty).
// No write after finish: each path's part is one chain on that path's QP(s), closed by its own
// WRITE_WITH_IMM after its data WRITEs on the same QP (RC executes a QP's WRITEs in order), and the
// receive completes only when every path in its mask has delivered its close: no data WRITE of the
// receive can land after its completion.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cts_match.h"  // same folder (base)
#include "sluice/core/wire/wire.h"

namespace sluice::stripe {

inline constexpr int kMaxPaths = wire::kMaxMetaMembers;  // npaths = max(ns, nr) <= 4
static_assert(kMaxPaths <= 32, "a receive's paths fit a 32-bit mask");
static_assert(wire::kMaxMetaMembers * 1 <= wire::kMaxQps, "every path has a QP");
// Capacity from which a receive is striped over every active path; below it, one path.
inline constexpr size_t kDefaultThreshold = size_t{64} << 10;
// The scale of a path's weight: a side's member shares sum to this.
inline constexpr uint32_t kShareScale = 1u << 16;

// A fused comm's paths with their weights (path_weights()).
struct Paths {
  int npaths = 1;
  uint32_t weight[kMaxPaths] = {kShareScale};
  uint32_t active_mask() const;
};

// The paths of a connection of ns sender members (weights ws[0..ns)) and nr receiver members
// (wr[0..nr)), npaths = max(ns, nr). Error (as a Paths of zero weights: active_mask() == 0) when
// no path has both ends at a non-zero weight; validate_members refuses a side whose weights are
// all zero, so with 1..kMaxPaths members per side some path is always active.
Paths path_weights(const uint16_t* ws, int ns, const uint16_t* wr, int nr);

// The paths that carry receive `seq` whose entries' capacities sum to `posted_total`: every
// active path at posted_total >= threshold (and more than one active), else one active path,
// the (seq % active)-th; with `weighted` (some path carries only a part of its weight: a path
// ramping back in), the one whose cumulative weight covers a point that seq spreads over the
// total, so each path gets its weight's part of the small receives too. 0 only if no path is
// active.
uint32_t paths_of(const Paths& p, uint64_t seq, size_t posted_total, size_t threshold,
                  bool weighted = false);

// The weights a receive's bytes are cut by (part_of, plan_path): each path's weight times its
// share in `shares` (wire::CtsMembers: byte p a percentage while path p ramps back in, 0 = all of
// it), at least 1 where the weight is not 0. shares 0: p itself.
Paths with_shares(const Paths& p, uint32_t shares);
// The bytes of a shares word that belong to the paths of `mask`.
inline uint32_t share_mask(uint32_t mask) {
  uint32_t m = 0;
  for (int p = 0; p < 4; ++p)
    if (mask >> p & 1u) m |= 0xffu << (8 * p);
  return m;
}

// Bytes [*off, *off + *len) of a message of `size` bytes that `path` carries when the receive's
// paths are `mask` (paths_of). One path in the mask: all of it. *len = 0 for a path outside the
// mask or one the cuts leave empty.
void part_of(const Paths& p, uint32_t mask, size_t size, int path, size_t* off, size_t* len);

// Chains. A receive's paths each carry `lanes` chains (NCCL_IB_SPLIT_DATA_ON_QPS per member:
// split = every QP of the path, lanes = qps_per_path; otherwise one, on the path's QP
// seq % qps_per_path), each closed by its own WRITE_WITH_IMM; the receiver expects closes() of
// them before the receive completes.
inline int lanes_per_path(bool split, int qps_per_path) {
  return split ? qps_per_path : 1;
}
inline int closes(uint32_t mask, bool split, int qps_per_path) {
  return __builtin_popcount(mask) * lanes_per_path(split, qps_per_path);
}
// The QP (Conn::qps index) of chain `lane` of `path` for receive `seq`.
inline int qp_of(int path, int lane, bool split, int qps_per_path, uint64_t seq) {
  return path * qps_per_path +
         (split ? lane : static_cast<int>(seq % static_cast<uint64_t>(qps_per_path)));
}
// Whether QP q carries a chain (and so a closing immediate) of receive `seq` whose paths are
// `mask`: the inverse of qp_of, which the receiver uses to post its receive WRs.
inline bool carries(uint32_t mask, bool split, int qps_per_path, uint64_t seq, int q) {
  if ((mask >> (q / qps_per_path) & 1u) == 0) return false;
  return split || static_cast<int>(seq % static_cast<uint64_t>(qps_per_path)) == q % qps_per_path;
}
// The chain of `lane` of `path` for a group sizes[0..n) whose receive's paths are `mask`:
// cts::plan_lane over the path's parts of the messages (part_of), with offsets into the whole
// message (LaneWr::off), so a chain of every path in the mask ends with its close even where its
// part is empty. 0 WRs for a path outside the mask. out: cts::kMaxLaneWrs entries or null; the
// tail/seg outputs as plan_lane's.
uint32_t plan_path(const Paths& p, uint32_t mask, const size_t* sizes, int n, int path, int lane,
                   int nlanes, size_t ar_threshold, cts::LaneWr* out, uint32_t* tail_wrs = nullptr,
                   uint64_t* tail_bytes = nullptr, uint64_t* seg_max = nullptr);

}  // namespace sluice::stripe
