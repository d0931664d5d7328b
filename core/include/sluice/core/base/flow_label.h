// RoCE v2 flow labels that Sluice chooses, per QP (issue 24): pure logic, no verbs.
//
// On RoCE v2 the UDP source port of a QP's packets, which ECMP switches and bonds hash on, comes
// from the flow label in the QP's address vector. The kernel (include/rdma/ib_verbs.h, used by rxe
// in rxe_modify_qp and by mlx5 in mlx5_set_path for RC/UC/XRC QPs on a RoCE v2 GID) folds the
// 20-bit label into the 14 low bits of a port in 0xC000..0xFFFF:
//     sport = 0xC000 | ((label & 0x3FFF) ^ ((label >> 14) & 0x3F))   rdma_flow_label_to_udp_sport
// and, where the label is 0, first derives one from the two QP numbers:
//     v = lqpn * rqpn (64 bit); v ^= v >> 20; v ^= v >> 40; label = v & 0xFFFFF
//                                                                      rdma_calc_flow_label
// so without a label, which uplink a QP takes is luck and two QPs of one connection can collide.
// (rxe sets a QPN-only hash at create, replaced at the first modify that carries an address
// vector; rdma_cm's route carries a label of its own, hashed from the rdma_cm ports.)
//
// Sluice gives the QPs of a connection a spread set instead: the 14-bit folded values (the ports'
// variable bits, i.e. the input of the switches' hash) are spaced evenly around their circle of
// 16384 from a base drawn from (seed, connection key); each label's 6 high bits are drawn too and
// never all zero, so no label is 0 (0 would mean "use the QPN hash"). Labels are distinct, their
// ports are distinct, and spaced 16384/count apart (floor or ceiling). QP i owns the slot
// [i*16384/count, (i+1)*16384/count) after the base; a re-roll moves a QP to another port inside
// its own slot, so the set stays distinct whatever is re-rolled, and the others do not move.
// The connection key is symmetric in the two ends' QP numbers, so with the same seed both ends
// label QP i alike and its data and ACKs share one port, as the kernel's symmetric QPN hash does.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/core/base/status.h"

namespace sluice::flow {

inline constexpr uint32_t kLabelMask = 0xFFFFFu;  // IB_GRH_FLOWLABEL_MASK
inline constexpr uint32_t kSportMin = 0xC000u;    // IB_ROCE_UDP_ENCAP_VALID_PORT_MIN
inline constexpr uint32_t kSportSpace = 0x4000u;  // 14 variable bits
// The seed "auto" stands for: a built-in constant, so both ends of a connection agree.
inline constexpr uint64_t kAutoSeed = 0x5115ce0f10a7be15ULL;

// The kernel's mapping of a (non-zero) label to the UDP source port.
uint16_t label_to_udp_sport(uint32_t label);
// The kernel's label from the QP numbers (used where the label is 0).
uint32_t qpn_flow_label(uint32_t lqpn, uint32_t rqpn);
// The port the kernel puts on a QP's packets for this label and QP pair (rdma_get_udp_sport).
uint16_t kernel_udp_sport(uint32_t label, uint32_t lqpn, uint32_t rqpn);

// SLUICE_FLOW_LABEL: "auto" (default), "off", or a seed (decimal, or 0x hex; 64 bits).
struct Policy {
  bool on = true;
  uint64_t seed = kAutoSeed;
  bool automatic = true;  // the seed is the built-in one
};
Result<Policy> parse_policy(std::string_view knob);
std::string policy_text(const Policy& p);  // "auto", "off", "seed 0x2a"
// What the policy does on a port (sluice-info): RoCE or InfiniBand.
std::string port_text(const Policy& p, bool roce);

// The connection's key, the same on both ends: from the first QP of each end (on a fused comm:
// the first QP of the first member).
uint64_t conn_key(uint32_t local_qpn0, uint32_t remote_qpn0);

// The label of QP `index` (0-based, over every QP of every member of the connection) of `count`
// (1..16384), at re-roll generation `generation` (0 = as first chosen).
uint32_t flow_label(uint64_t seed, uint64_t key, uint32_t index, uint32_t count,
                    uint32_t generation = 0);

// A connection's labels, stable for its life, with re-rolls. Empty (count 0) = none chosen.
class LabelSet {
 public:
  LabelSet() = default;
  LabelSet(uint64_t seed, uint64_t key, uint32_t count);
  uint32_t count() const { return static_cast<uint32_t>(gen_.size()); }
  uint32_t label(uint32_t index) const;  // 0 when index >= count
  uint32_t generation(uint32_t index) const;
  // Gives each listed QP (out-of-range indexes are ignored, repeats count once) a new label in its
  // own slot, different from its current one; the others keep theirs. Returns the QPs moved.
  uint32_t reroll(std::span<const uint32_t> indexes);

 private:
  uint64_t seed_ = 0, key_ = 0;
  std::vector<uint32_t> gen_;
};

}  // namespace sluice::flow
