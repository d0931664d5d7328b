/* Sluice's own extension table, beside NCCL's ncclNetPlugin_vN tables. C, so a C program can dlsym
 * it. Tools that load the plugin (sluice-bench, tests) find it with dlsym("sluiceExt_v1"); NCCL
 * never looks at it. A plugin without it simply has no statistics to give.
 *
 * commStats: cumulative counters of one send or receive comm (the void* NCCL got from
 * connect/accept), valid until the comm is closed. Deterministic counts, not timings, so a
 * regression in the cost of a message shows in a single run. sluiceExt_v2 (below) adds per-member
 * counters and a post-to-completion histogram. */
#ifndef SLUICE_EXT_H_
#define SLUICE_EXT_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  uint64_t messages;      /* sends posted (send comm) or receives completed (receive comm) */
  uint64_t wrs;           /* work requests posted on the comm's QPs, data and clear-to-send */
  uint64_t doorbells;     /* ibv_post_send/ibv_post_recv calls */
  uint64_t ctsWrites;     /* clear-to-send RDMA WRITEs (receive comm) */
  uint64_t ctsEntries;    /* receives those writes published (receive comm) */
  uint64_t ctsProbes;     /* the progress watchdog's zero-length clear-to-send probes (receive comm;
                             counted in wrs, not in ctsWrites); was reserved[0], always 0 before */
  uint64_t arImmWrites;   /* zero-length WRITE_WITH_IMMs that close a message above
                             NCCL_IB_AR_THRESHOLD in adaptive-routing mode, one per lane carrying
                             data (send comm; counted in wrs); was reserved[0], always 0 before */
  uint64_t eagerMessages; /* messages that went through the eager ring (docs/eager.md): WRITEs into
                             it (send comm), messages copied out of it (receive comm); was
                             reserved[0], always 0 before */
} sluiceCommStats_v1_t;

typedef struct {
  int version; /* 1 */
  /* 0 on success; non-zero when comm is not a live send/receive comm. */
  int (*commStats)(void* comm, sluiceCommStats_v1_t* out);
} sluiceExt_v1_t;

#define SLUICE_EXT_SYMBOL "sluiceExt_v1"

/* ---- v2: per-member (rail) counters and a post-to-completion histogram ------------------------
 * dlsym("sluiceExt_v2"). sluiceExt_v1 stays exported unchanged.
 *
 * A comm spans one or more member devices (rails). Today every comm has exactly one member (NCCL
 * device fusion is not implemented); the array has room for SLUICE_EXT_MAX_MEMBERS so members can
 * be added without changing the layout. Growth rule: fields are only ever appended, and the caller
 * sets `size` to sizeof the struct it was compiled with; the plugin writes min(size, its own
 * sizeof) bytes, so an older caller keeps working with a newer plugin and vice versa. */
#define SLUICE_EXT_V2_SYMBOL "sluiceExt_v2"
#define SLUICE_EXT_LATENCY_BUCKETS 32
#define SLUICE_EXT_MAX_MEMBERS 4

typedef struct {
  int dev;              /* NCCL device index of this member */
  char name[32];        /* its device name, e.g. "rxe0" (truncated, NUL terminated) */
  uint64_t bytes;       /* payload posted (send comm) / received (receive comm) */
  uint64_t wrs;         /* work requests posted on its QPs */
  uint64_t doorbells;   /* ibv_post_send / ibv_post_recv calls */
  uint64_t completions; /* completions polled */
  /* latency[b]: work whose completion was polled 2^b .. 2^(b+1)-1 ns after its post (b = 0 also
   * holds 0 ns; the last bucket everything longer). Send comm: a group's chains posted -> their
   * closing completions polled. Receive comm: clear-to-send posted -> receive completed. */
  uint64_t latency[SLUICE_EXT_LATENCY_BUCKETS];
  int nQps;           /* the member's data QPs ... */
  uint32_t qpNum[16]; /* ... and their numbers (what profiler events carry as qpNum) */
} sluiceMemberStats_v2_t;

typedef struct {
  int state;               /* SLUICE_PATH_UP .. SLUICE_PATH_RAMPING */
  int localMember;         /* index into members[] of the member it runs on */
  int remoteMember;        /* the peer's member it faces */
  int sharePct;            /* of its weight it carries now (25, 50 while ramping back in) */
  uint32_t epoch;          /* its incarnation: +1 per recovery attempt */
  uint32_t failovers;      /* times it left the stripe */
  uint32_t failbacks;      /* times it came back in full */
  uint32_t attempts;       /* recovery attempts since it was last stable */
  uint64_t bytesReplayed;  /* send comm: bytes of its chains sent again on another path */
  uint64_t chainsReplayed; /* ... and how many chains */
  int64_t lastStallMs;     /* its last failover: fault -> replay posted (send) / receives published
                              again (receive); -1: none yet */
} sluicePathStats_v2_t;
#define SLUICE_PATH_UP 0
#define SLUICE_PATH_FENCING 1
#define SLUICE_PATH_DOWN 2
#define SLUICE_PATH_RECOVERING 3
#define SLUICE_PATH_CHECKING 4
#define SLUICE_PATH_RAMPING 5

typedef struct {
  size_t size;               /* in: sizeof(sluiceCommStats_v2_t) of the caller */
  sluiceCommStats_v1_t comm; /* the v1 counters of the comm */
  int nMembers;              /* members filled below (1 today) */
  sluiceMemberStats_v2_t members[SLUICE_EXT_MAX_MEMBERS];
  uint32_t flushQpNum; /* receive comm: its loopback flush QP (0 = none yet) */
  /* Appended (failover, docs/failover.md): a comm with more than one path (a fused device) keeps
   * working when one fails. Per path as this side sees it; a one-path comm reports its one path,
   * up, with failover 0. */
  int failover; /* 1: the comm fails over (more than one path, and both sides run failover) */
  int nPaths;
  sluicePathStats_v2_t paths[SLUICE_EXT_MAX_MEMBERS];
  /* Appended (the eager path, docs/eager.md): SLUICE_EAGER_OFF .. SLUICE_EAGER_WITHOUT. */
  int eager;
  /* Appended (eager on fused comms): send comm: eager WRITEs a failover posted again on another
   * path (their first WRITE's completion was not seen before its path was fenced); 0 otherwise. */
  uint64_t eagerReplays;
} sluiceCommStats_v2_t;
/* Not negotiated: SLUICE_EAGER_MAX=0 or SLUICE_EAGER_RINGS=0 on either end, SLUICE_EAGER_FUSED=0
 * on either end of a comm of more than one path (fusion, standby), or a peer without the
 * feature. */
#define SLUICE_EAGER_OFF 0
/* Negotiated, nothing lent yet: before the receive comm's first receive, or before the send comm
 * first reads a clear-to-send slot or finds the receiver's grant. */
#define SLUICE_EAGER_NEGOTIATED 1
/* On: the receive comm holds a ring and its book; the send comm holds a book (its staging ring
 * comes at its first eager send). */
#define SLUICE_EAGER_ON 2
/* Negotiated but without for good, clear-to-send only: the adapter's pool had no ring or book
 * left (SLUICE_EAGER_RINGS), GPU memory on the receive comm, or (send comm) no ring at the
 * receiver. */
#define SLUICE_EAGER_WITHOUT 3

typedef struct {
  int version;                                             /* 2 */
  int (*commStats)(void* comm, sluiceCommStats_v1_t* out); /* as in v1 */
  /* 0 on success; non-zero when comm is not a live send/receive comm or out->size is too small
   * to hold the v1 part. */
  int (*commStatsV2)(void* comm, sluiceCommStats_v2_t* out);
} sluiceExt_v2_t;

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_EXT_H_ */
