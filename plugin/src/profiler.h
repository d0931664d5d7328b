// The bridge from core's neutral work-request events (sluice/core/api.h ProfilerHook) to NCCL's
// profiler callback (net v10+): each event becomes a NET/IB QP event (ncclProfilerNetIbDescr_v1_t,
// pluginId NCCL_PROFILER_NET_TYPE_IB | 1), so a profiler written for NET/IB shows Sluice's work
// requests unchanged. docs/profiler.md states the contract.
#pragma once

#include "sluice/core/base/status.h"
#include "sluice/nccl_net_abi.h"

namespace sluice::plugin {

// The callback NCCL passed to a v10 (process-wide) init; NULL before, or from v8/v9.
void set_process_profiler(ncclProfilerCallback_t cb);
ncclProfilerCallback_t process_profiler();

// Attaches `cb` to a new send or receive comm (nothing for NULL).
Status attach_profiler(void* comm, ncclProfilerCallback_t cb);

// accept() has no ctx: the callback of the ctx a listen comm was created under is remembered
// until closeListen.
void remember_listen(void* listen_comm, ncclProfilerCallback_t cb);
ncclProfilerCallback_t listen_profiler(void* listen_comm);
void forget_listen(void* listen_comm);

}  // namespace sluice::plugin
