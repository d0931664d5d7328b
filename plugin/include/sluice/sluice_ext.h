/* Sluice's own extension table, beside NCCL's ncclNetPlugin_vN tables. C, so a C program can dlsym
 * it. Tools that load the plugin (sluice-bench, tests) find it with dlsym("sluiceExt_v1"); NCCL
 * never looks at it. A plugin without it simply has no statistics to give.
 *
 * commStats: cumulative counters of one send or receive comm (the void* NCCL got from
 * connect/accept), valid until the comm is closed. Deterministic counts, not timings, so a
 * regression in the cost of a message shows in a single run. */
#ifndef SLUICE_EXT_H_
#define SLUICE_EXT_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  uint64_t messages;    /* sends posted (send comm) or receives completed (receive comm) */
  uint64_t wrs;         /* work requests posted on the comm's QPs, data and clear-to-send */
  uint64_t doorbells;   /* ibv_post_send/ibv_post_recv calls */
  uint64_t ctsWrites;   /* clear-to-send RDMA WRITEs (receive comm) */
  uint64_t ctsEntries;  /* receives those writes published (receive comm) */
  uint64_t ctsProbes;   /* the progress watchdog's zero-length clear-to-send probes (receive comm;
                           counted in wrs, not in ctsWrites); was reserved[0], always 0 before */
  uint64_t arImmWrites; /* zero-length WRITE_WITH_IMMs that close a message above
                           NCCL_IB_AR_THRESHOLD in adaptive-routing mode, one per lane carrying
                           data (send comm; counted in wrs); was reserved[0], always 0 before */
  uint64_t reserved[1];
} sluiceCommStats_v1_t;

typedef struct {
  int version; /* 1 */
  /* 0 on success; non-zero when comm is not a live send/receive comm. */
  int (*commStats)(void* comm, sluiceCommStats_v1_t* out);
} sluiceExt_v1_t;

#define SLUICE_EXT_SYMBOL "sluiceExt_v1"

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_EXT_H_ */
