// How many comms a device can hold at this configuration: getProperties' maxComms (issue 32). It
// was the device's max_qp, whatever the QPs each comm takes. A comm takes
// NCCL_IB_QPS_PER_CONNECTION QPs on every path (a fused device's members, or a device and its
// standby with SLUICE_STANDBY: one path each), one CQ per member, and a receive comm may add a
// loopback flush QP and CQ per member adapter (GPUDirect receives, NCCL_NET_FORCE_FLUSH). Every QP
// and CQ of a comm is counted against each adapter it uses: exact when the members share an adapter
// (a dual-port fusion), and right on average for standbys, whose adapters host the standby paths of
// other devices' comms in turn. Pure arithmetic.
#pragma once

#include <string>
#include <vector>

namespace sluice {

struct CapacityAdapter {
  std::string name;  // for the reason text
  int max_qp = 0;    // ibv_device_attr
  int max_cq = 0;
};

struct CapacityInput {
  std::vector<CapacityAdapter> adapters;  // the distinct adapters the comm's members are on
  int members = 1;                        // the comm's members (one CQ each)
  int paths = 1;                          // = members (both sides alike)
  int qps_per_path = 1;                   // NCCL_IB_QPS_PER_CONNECTION
  bool flush = false;                     // a receive comm may create its flush lanes
};

struct Capacity {
  int max_comms = 0;
  int qps_per_comm = 0;
  int cqs_per_comm = 0;
  std::string text;  // "4 QPs and 2 CQs per comm (...); mlx5_0: max_qp 131072, max_cq ... -> N"
};

Capacity comm_capacity(const CapacityInput& in);

}  // namespace sluice
