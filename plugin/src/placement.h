// Where devices sit and in which order this process sees them: the glue between core's engine
// hooks and topology/ (hwloc). Only plugin/ depends on both.
#pragma once

#include "sluice/core/api.h"

namespace sluice::plugin {

// pciPath, NUMA node and local CPUs of each verbs device, from the live machine (or
// SLUICE_TOPO_FILE). A topology that fails to load gives unknown locality, not a failed init.
LocalityProvider make_locality_provider();

// SLUICE_NIC_AFFINITY=auto and SLUICE_GPU_NIC_MAP: nearest NICs first for this process's GPU (or,
// without one, its CPU binding). Off (the default) keeps discovery order. A malformed override, or
// one naming unknown GPUs/NICs, fails init with the reason.
DeviceOrderProvider make_order_provider();

// The members' weights of a fused device (make_vdevice) from this process's GPU's path to each
// (sluice/topology/fusion.h); without a topology, core weighs them by port speed.
FusionWeightProvider make_weight_provider();

// How near two verbs devices are (sluice/topology/standby.h), for each device's standby
// (SLUICE_STANDBY); without a topology every pair is of unknown nearness.
NearnessProvider make_nearness_provider();

}  // namespace sluice::plugin
