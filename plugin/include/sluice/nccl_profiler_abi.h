/* Our own declarations of the part of NCCL's profiler plugin ABI (ncclProfiler_v5, NCCL 2.28)
 * that Sluice's tools use: a profiler that shows net-plugin events (tools/trace_profiler.cc) and
 * sluice-bench, which stands in for NCCL's core when it drives such a profiler without NCCL.
 * Layouts match NCCL's; only the descriptor members a net event uses are spelled out (the union
 * is padded to the size of NCCL's largest member, so a descriptor we fill is as large as NCCL's).
 * C, so a C profiler can include it. See docs/profiler.md. */
#ifndef SLUICE_NCCL_PROFILER_ABI_H_
#define SLUICE_NCCL_PROFILER_ABI_H_

#include <stddef.h>
#include <stdint.h>

#include "sluice/nccl_net_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Event types (eDescr->type, and the bits of *eActivationMask). */
#define SLUICE_NCCL_PROFILE_PROXY_STEP (1 << 4)
#define SLUICE_NCCL_PROFILE_NET_PLUGIN (1 << 7)

typedef struct {
  uint64_t type;   /* SLUICE_NCCL_PROFILE_NET_PLUGIN for net events (uint8_t before v5) */
  void* parentObj; /* the handle the profiler returned for the parent proxy step, or NULL */
  int rank;
  union {
    struct {
      int64_t id; /* pluginId: NCCL_PROFILER_NET_TYPE_* | descriptor version */
      void* data; /* e.g. ncclProfilerNetIbDescr_v1_t*, valid during startEvent only */
    } netPlugin;
    char reserved[96]; /* NCCL's larger members (coll, p2p, ...) */
  };
} sluiceNcclProfilerEventDescr_v5_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t commId, int* eActivationMask, const char* commName,
                       int nNodes, int nranks, int rank, ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle,
                             sluiceNcclProfilerEventDescr_v5_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, int eState, void* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} sluiceNcclProfiler_v5_t;

#define SLUICE_NCCL_PROFILER_V5_SYMBOL "ncclProfiler_v5"

#if defined(__LP64__) || defined(_LP64)
SLUICE_ABI_OFFSET(sluiceNcclProfilerEventDescr_v5_t, parentObj, 8);
SLUICE_ABI_OFFSET(sluiceNcclProfilerEventDescr_v5_t, rank, 16);
SLUICE_ABI_OFFSET(sluiceNcclProfilerEventDescr_v5_t, netPlugin.id, 24);
SLUICE_ABI_OFFSET(sluiceNcclProfilerEventDescr_v5_t, netPlugin.data, 32);
#endif

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_NCCL_PROFILER_ABI_H_ */
