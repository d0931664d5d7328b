/* NCCL network-plugin ABI, versions v8 .. v12, as Sluice's own declarations.
 *
 * Written from the facts in docs/nccl-net-api.md (field order and types of NCCL's
 * src/include/plugin/net/net_v8.h .. net_v12.h, nccl_common.h, nccl_device/net_device.h and
 * nccl.h.in); nothing here is copied from NCCL's headers, and no NCCL header is included.
 *
 * C-compatible: plain C99/C11 or C++; usable from a C translation unit (tests/abi/dlopen_c_test.c).
 * Names follow NCCL's spelling (ncclNet_v11_t, ...) so code reads like NCCL's documentation.
 * Including this header together with NCCL's own headers in one translation unit is not supported,
 * except nccl.h: ncclResult_t is only declared here when nccl.h (guard NCCL_H_) was not included
 * first - the values are identical.
 *
 * Every struct's size and field offsets are checked below for x86_64 / aarch64 LP64, computed
 * from the documented field order. A failing check means this file no longer matches NCCL's ABI.
 */
#ifndef SLUICE_NCCL_NET_ABI_H_
#define SLUICE_NCCL_NET_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Result codes (nccl.h.in) ---------------------------------------------------------------- */
#ifndef NCCL_H_
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;
#endif

/* ---- Logging (nccl_common.h) ----------------------------------------------------------------- */
typedef enum {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5
} ncclDebugLogLevel;

typedef enum {
  NCCL_INIT = 0x1,
  NCCL_COLL = 0x2,
  NCCL_P2P = 0x4,
  NCCL_SHM = 0x8,
  NCCL_NET = 0x10,
  NCCL_GRAPH = 0x20,
  NCCL_TUNING = 0x40,
  NCCL_ENV = 0x80,
  NCCL_ALLOC = 0x100,
  NCCL_CALL = 0x200,
  NCCL_PROXY = 0x400,
  NCCL_NVLS = 0x800,
  NCCL_BOOTSTRAP = 0x1000,
  NCCL_REG = 0x2000,
  NCCL_PROFILE = 0x4000,
  NCCL_RAS = 0x8000,
  NCCL_ALL = ~0
} ncclDebugLogSubSys;

/* NCCL passes __FILE__ in `file` for WARN and __func__ for INFO/TRACE. */
typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char* file,
                                  int line, const char* fmt, ...);

/* ---- Profiler callback (v10+) ---------------------------------------------------------------- */
enum {
  ncclProfilerNetEventStart = 0,
  ncclProfilerNetEventStop = 1,
  ncclProfilerNetEventUpdate = 2,
  ncclProfilerNetEventUpdateAndStop = 3
};
/* pluginId = plugin type (upper 16 bits) | descriptor version (lower 16 bits). */
#define NCCL_PROFILER_NET_TYPE_IB (1 << 16)
#define NCCL_PROFILER_NET_TYPE_SOCK (2 << 16)
typedef ncclResult_t (*ncclProfilerCallback_t)(void** eHandle, int type, void* pHandle,
                                               int64_t pluginId, void* extData);

/* The NET/IB event descriptor, version 1 (NCCL 2.26+ src/include/plugin/profiler/net_ib_v1.h):
 * what a net plugin passes as extData with pluginId NCCL_PROFILER_NET_TYPE_IB |
 * NCCL_PROFILER_NET_IB_VER. NCCL hands the pointer to the profiler's startEvent as
 * eDescr->netPlugin.data, during the start call only. Layout must match NCCL's. */
#define NCCL_PROFILER_NET_IB_VER 1
#define NCCL_PROFILER_NET_VER_MASK 0xffffu
#define NCCL_PROFILER_NET_TYPE_MASK 0xffff0000u
enum { ncclProfileQp = (1 << 0) };
typedef struct {
  uint8_t type; /* ncclProfileQp */
  union {
    struct {
      int device;     /* index of the device within the (virtual) net device: 0 unless fused */
      uint64_t wr_id; /* the work request's wr_id */
      int opcode;     /* enum ibv_wr_opcode */
      int qpNum;      /* local QP number */
      size_t length;  /* bytes the work request carries */
    } qp;
  };
} ncclProfilerNetIbDescr_v1_t;

/* ---- Constants (plugin/nccl_net.h) ----------------------------------------------------------- */
#define NCCL_NET_HANDLE_MAXSIZE 128
#define NCCL_PTR_HOST 0x1
#define NCCL_PTR_CUDA 0x2
#define NCCL_PTR_DMABUF 0x4
#define NCCL_NET_MAX_REQUESTS 32
#define NCCL_NET_MAX_DEVS_PER_NIC_V11 4       /* vProps.devs[] in v9, v10, v11 */
#define NCCL_NET_MAX_DEVS_PER_NIC_V12 8       /* vProps.devs[] in v12 */
#define NCCL_MAX_NET_SIZE_BYTES (1ull << 40)  /* bound on maxP2pBytes / maxCollBytes: (0, 1 TiB] */
#define NCCL_NET_OPTIONAL_RECV_COMPLETION 0x1 /* may appear in *request before irecv (v9+) */
#define NCCL_NET_MULTI_REQUEST 0x2
#define NCCL_NET_TRAFFIC_CLASS_UNDEF (-1)
#define NCCL_NET_ATTR_UNDEF (-1)
#define NCCL_NET_MAX_PLUGINS 16

/* ---- Device handle (nccl_device/net_device.h) ------------------------------------------------ */
typedef enum {
  NCCL_NET_DEVICE_HOST = 0,
  NCCL_NET_DEVICE_UNPACK = 1,
  NCCL_NET_DEVICE_GIN_PROXY = 2,
  NCCL_NET_DEVICE_GIN_GDAKI = 3
} ncclNetDeviceType;
#define NCCL_NET_DEVICE_INVALID_VERSION 0x0
#define NCCL_NET_MTU_SIZE 4096
#define NCCL_NET_DEVICE_UNPACK_VERSION 0x7

typedef struct {
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  void* handle;
  size_t size;
  int needsProxyProgress;
} ncclNetDeviceHandle_v7_t;
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v8_t;
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v9_t;
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v10_t;
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v11_t;
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v12_t;

/* ---- Virtual (fused) device list ------------------------------------------------------------- */
typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC_V11];
} ncclNetVDeviceProps_v9_t;
typedef ncclNetVDeviceProps_v9_t ncclNetVDeviceProps_v10_t;
typedef ncclNetVDeviceProps_v9_t ncclNetVDeviceProps_v11_t;

typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC_V12];
} ncclNetVDeviceProps_v12_t;

/* ---- Per-communicator config (v10: connect argument; v11+: init argument) -------------------- */
typedef struct {
  int trafficClass; /* NCCL_NET_TRAFFIC_CLASS_UNDEF when the user did not set it */
} ncclNetCommConfig_v10_t;
typedef ncclNetCommConfig_v10_t ncclNetCommConfig_v11_t;
typedef ncclNetCommConfig_v10_t ncclNetCommConfig_v12_t;

/* ---- setNetAttr hints (v11+) ----------------------------------------------------------------- */
typedef struct {
  int32_t maxConcurrentPeers;
  int32_t minConcurrentPeers;
  int32_t maxFlowsPerPeer;
  int32_t minFlowsPerPeer;
} ncclNetCommAttr_v11_t;

typedef struct {
  ncclNetCommAttr_v11_t sendCommAttr;
  ncclNetCommAttr_v11_t recvCommAttr;
  uint32_t op;    /* bitmask of ncclFunc_t */
  uint32_t algo;  /* bitmask of algorithms */
  uint32_t proto; /* bitmask of protocols */
} ncclNetAttr_v11_t;
typedef ncclNetCommAttr_v11_t ncclNetCommAttr_v12_t;
typedef ncclNetAttr_v11_t ncclNetAttr_v12_t;

/* ---- Device properties ----------------------------------------------------------------------- */
typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int speed; /* Mbps */
  int port;
  float latency; /* microseconds */
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
} ncclNetProperties_v8_t;

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v9_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
} ncclNetProperties_v9_t;
typedef ncclNetProperties_v9_t ncclNetProperties_v10_t;

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v11_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
} ncclNetProperties_v11_t;

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v12_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
  int16_t railId;
  int16_t planeId;
} ncclNetProperties_v12_t;

/* ---- Function tables ------------------------------------------------------------------------- */
typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v8_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v8_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v8_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle,
                        void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles,
                        void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
} ncclNet_v8_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v9_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v9_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v9_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v9_t* props);
} ncclNet_v9_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v10_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v10_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm,
                         ncclNetDeviceHandle_v10_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** phandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v10_t* props);
} ncclNet_v10_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, ncclNetCommConfig_v11_t* config,
                       ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v11_t* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* ctx, int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v11_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm,
                         ncclNetDeviceHandle_v11_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** phandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v11_t* props);
  ncclResult_t (*finalize)(void* ctx);
  ncclResult_t (*setNetAttr)(void* ctx, ncclNetAttr_v11_t* netAttr);
} ncclNet_v11_t;

/* v12 (NCCL 2.30): the v11 table with v12 property / vDevice types. */
typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, ncclNetCommConfig_v12_t* config,
                       ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v12_t* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* ctx, int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v12_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm,
                         ncclNetDeviceHandle_v12_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** phandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v12_t* props);
  ncclResult_t (*finalize)(void* ctx);
  ncclResult_t (*setNetAttr)(void* ctx, ncclNetAttr_v12_t* netAttr);
} ncclNet_v12_t;

#ifdef __cplusplus
} /* extern "C" */
#endif

/* ---- Layout checks (LP64: x86_64, aarch64) --------------------------------------------------- */
#ifdef __cplusplus
#define SLUICE_ABI_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define SLUICE_ABI_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif
#define SLUICE_ABI_SIZE(T, n) SLUICE_ABI_ASSERT(sizeof(T) == (n), "sizeof(" #T ") != " #n)
#define SLUICE_ABI_OFFSET(T, f, n) \
  SLUICE_ABI_ASSERT(offsetof(T, f) == (n), "offsetof(" #T ", " #f ") != " #n)

#if defined(__LP64__) || defined(_LP64)
SLUICE_ABI_SIZE(ncclResult_t, 4);
SLUICE_ABI_SIZE(ncclDebugLogLevel, 4);
SLUICE_ABI_SIZE(ncclNetDeviceType, 4);

SLUICE_ABI_SIZE(ncclNetDeviceHandle_v7_t, 32);
SLUICE_ABI_OFFSET(ncclNetDeviceHandle_v7_t, netDeviceType, 0);
SLUICE_ABI_OFFSET(ncclNetDeviceHandle_v7_t, netDeviceVersion, 4);
SLUICE_ABI_OFFSET(ncclNetDeviceHandle_v7_t, handle, 8);
SLUICE_ABI_OFFSET(ncclNetDeviceHandle_v7_t, size, 16);
SLUICE_ABI_OFFSET(ncclNetDeviceHandle_v7_t, needsProxyProgress, 24);

/* NET/IB profiler descriptor v1 with `device` (NCCL's current net_ib_v1.h). */
SLUICE_ABI_SIZE(ncclProfilerNetIbDescr_v1_t, 40);
SLUICE_ABI_OFFSET(ncclProfilerNetIbDescr_v1_t, qp.device, 8);
SLUICE_ABI_OFFSET(ncclProfilerNetIbDescr_v1_t, qp.wr_id, 16);
SLUICE_ABI_OFFSET(ncclProfilerNetIbDescr_v1_t, qp.opcode, 24);
SLUICE_ABI_OFFSET(ncclProfilerNetIbDescr_v1_t, qp.qpNum, 28);
SLUICE_ABI_OFFSET(ncclProfilerNetIbDescr_v1_t, qp.length, 32);

SLUICE_ABI_SIZE(ncclNetVDeviceProps_v9_t, 20);
SLUICE_ABI_OFFSET(ncclNetVDeviceProps_v9_t, ndevs, 0);
SLUICE_ABI_OFFSET(ncclNetVDeviceProps_v9_t, devs, 4);
SLUICE_ABI_SIZE(ncclNetVDeviceProps_v12_t, 36);
SLUICE_ABI_OFFSET(ncclNetVDeviceProps_v12_t, ndevs, 0);
SLUICE_ABI_OFFSET(ncclNetVDeviceProps_v12_t, devs, 4);

SLUICE_ABI_SIZE(ncclNetCommConfig_v10_t, 4);
SLUICE_ABI_OFFSET(ncclNetCommConfig_v10_t, trafficClass, 0);

SLUICE_ABI_SIZE(ncclNetCommAttr_v11_t, 16);
SLUICE_ABI_OFFSET(ncclNetCommAttr_v11_t, maxConcurrentPeers, 0);
SLUICE_ABI_OFFSET(ncclNetCommAttr_v11_t, minConcurrentPeers, 4);
SLUICE_ABI_OFFSET(ncclNetCommAttr_v11_t, maxFlowsPerPeer, 8);
SLUICE_ABI_OFFSET(ncclNetCommAttr_v11_t, minFlowsPerPeer, 12);
SLUICE_ABI_SIZE(ncclNetAttr_v11_t, 44);
SLUICE_ABI_OFFSET(ncclNetAttr_v11_t, sendCommAttr, 0);
SLUICE_ABI_OFFSET(ncclNetAttr_v11_t, recvCommAttr, 16);
SLUICE_ABI_OFFSET(ncclNetAttr_v11_t, op, 32);
SLUICE_ABI_OFFSET(ncclNetAttr_v11_t, algo, 36);
SLUICE_ABI_OFFSET(ncclNetAttr_v11_t, proto, 40);

SLUICE_ABI_SIZE(ncclNetProperties_v8_t, 64);
SLUICE_ABI_OFFSET(ncclNetProperties_v8_t, name, 0);
SLUICE_ABI_OFFSET(ncclNetProperties_v8_t, pciPath, 8);
SLUICE_ABI_OFFSET(ncclNetProperties_v8_t, guid, 16);
SLUICE_ABI_OFFSET(ncclNetProperties_v8_t, ptrSupport, 24);
SLUICE_ABI_OFFSET(ncclNetProperties_v8_t, regIsGlobal, 28);
SLUICE_ABI_OFFSET(ncclNetProperties_v8_t, speed, 32);
SLUICE_ABI_OFFSET(ncclNetProperties_v8_t, port, 36);
SLUICE_ABI_OFFSET(ncclNetProperties_v8_t, latency, 40);
SLUICE_ABI_OFFSET(ncclNetProperties_v8_t, maxComms, 44);
SLUICE_ABI_OFFSET(ncclNetProperties_v8_t, maxRecvs, 48);
SLUICE_ABI_OFFSET(ncclNetProperties_v8_t, netDeviceType, 52);
SLUICE_ABI_OFFSET(ncclNetProperties_v8_t, netDeviceVersion, 56);

SLUICE_ABI_SIZE(ncclNetProperties_v9_t, 104);
SLUICE_ABI_OFFSET(ncclNetProperties_v9_t, name, 0);
SLUICE_ABI_OFFSET(ncclNetProperties_v9_t, pciPath, 8);
SLUICE_ABI_OFFSET(ncclNetProperties_v9_t, guid, 16);
SLUICE_ABI_OFFSET(ncclNetProperties_v9_t, ptrSupport, 24);
SLUICE_ABI_OFFSET(ncclNetProperties_v9_t, regIsGlobal, 28);
SLUICE_ABI_OFFSET(ncclNetProperties_v9_t, forceFlush, 32);
SLUICE_ABI_OFFSET(ncclNetProperties_v9_t, speed, 36);
SLUICE_ABI_OFFSET(ncclNetProperties_v9_t, port, 40);
SLUICE_ABI_OFFSET(ncclNetProperties_v9_t, latency, 44);
SLUICE_ABI_OFFSET(ncclNetProperties_v9_t, maxComms, 48);
SLUICE_ABI_OFFSET(ncclNetProperties_v9_t, maxRecvs, 52);
SLUICE_ABI_OFFSET(ncclNetProperties_v9_t, netDeviceType, 56);
SLUICE_ABI_OFFSET(ncclNetProperties_v9_t, netDeviceVersion, 60);
SLUICE_ABI_OFFSET(ncclNetProperties_v9_t, vProps, 64);
SLUICE_ABI_OFFSET(ncclNetProperties_v9_t, maxP2pBytes, 88);
SLUICE_ABI_OFFSET(ncclNetProperties_v9_t, maxCollBytes, 96);

SLUICE_ABI_SIZE(ncclNetProperties_v11_t, 112);
SLUICE_ABI_OFFSET(ncclNetProperties_v11_t, name, 0);
SLUICE_ABI_OFFSET(ncclNetProperties_v11_t, pciPath, 8);
SLUICE_ABI_OFFSET(ncclNetProperties_v11_t, guid, 16);
SLUICE_ABI_OFFSET(ncclNetProperties_v11_t, ptrSupport, 24);
SLUICE_ABI_OFFSET(ncclNetProperties_v11_t, regIsGlobal, 28);
SLUICE_ABI_OFFSET(ncclNetProperties_v11_t, forceFlush, 32);
SLUICE_ABI_OFFSET(ncclNetProperties_v11_t, speed, 36);
SLUICE_ABI_OFFSET(ncclNetProperties_v11_t, port, 40);
SLUICE_ABI_OFFSET(ncclNetProperties_v11_t, latency, 44);
SLUICE_ABI_OFFSET(ncclNetProperties_v11_t, maxComms, 48);
SLUICE_ABI_OFFSET(ncclNetProperties_v11_t, maxRecvs, 52);
SLUICE_ABI_OFFSET(ncclNetProperties_v11_t, netDeviceType, 56);
SLUICE_ABI_OFFSET(ncclNetProperties_v11_t, netDeviceVersion, 60);
SLUICE_ABI_OFFSET(ncclNetProperties_v11_t, vProps, 64);
SLUICE_ABI_OFFSET(ncclNetProperties_v11_t, maxP2pBytes, 88);
SLUICE_ABI_OFFSET(ncclNetProperties_v11_t, maxCollBytes, 96);
SLUICE_ABI_OFFSET(ncclNetProperties_v11_t, maxMultiRequestSize, 104);

SLUICE_ABI_SIZE(ncclNetProperties_v12_t, 128);
SLUICE_ABI_OFFSET(ncclNetProperties_v12_t, name, 0);
SLUICE_ABI_OFFSET(ncclNetProperties_v12_t, pciPath, 8);
SLUICE_ABI_OFFSET(ncclNetProperties_v12_t, guid, 16);
SLUICE_ABI_OFFSET(ncclNetProperties_v12_t, ptrSupport, 24);
SLUICE_ABI_OFFSET(ncclNetProperties_v12_t, regIsGlobal, 28);
SLUICE_ABI_OFFSET(ncclNetProperties_v12_t, forceFlush, 32);
SLUICE_ABI_OFFSET(ncclNetProperties_v12_t, speed, 36);
SLUICE_ABI_OFFSET(ncclNetProperties_v12_t, port, 40);
SLUICE_ABI_OFFSET(ncclNetProperties_v12_t, latency, 44);
SLUICE_ABI_OFFSET(ncclNetProperties_v12_t, maxComms, 48);
SLUICE_ABI_OFFSET(ncclNetProperties_v12_t, maxRecvs, 52);
SLUICE_ABI_OFFSET(ncclNetProperties_v12_t, netDeviceType, 56);
SLUICE_ABI_OFFSET(ncclNetProperties_v12_t, netDeviceVersion, 60);
SLUICE_ABI_OFFSET(ncclNetProperties_v12_t, vProps, 64);
SLUICE_ABI_OFFSET(ncclNetProperties_v12_t, maxP2pBytes, 104);
SLUICE_ABI_OFFSET(ncclNetProperties_v12_t, maxCollBytes, 112);
SLUICE_ABI_OFFSET(ncclNetProperties_v12_t, maxMultiRequestSize, 120);
SLUICE_ABI_OFFSET(ncclNetProperties_v12_t, railId, 124);
SLUICE_ABI_OFFSET(ncclNetProperties_v12_t, planeId, 126);

/* Tables: `name` then one pointer per entry point, in the documented order. */
SLUICE_ABI_SIZE(ncclNet_v8_t, 19 * 8);
SLUICE_ABI_OFFSET(ncclNet_v8_t, name, 0);
SLUICE_ABI_OFFSET(ncclNet_v8_t, init, 8);
SLUICE_ABI_OFFSET(ncclNet_v8_t, devices, 16);
SLUICE_ABI_OFFSET(ncclNet_v8_t, getProperties, 24);
SLUICE_ABI_OFFSET(ncclNet_v8_t, listen, 32);
SLUICE_ABI_OFFSET(ncclNet_v8_t, connect, 40);
SLUICE_ABI_OFFSET(ncclNet_v8_t, accept, 48);
SLUICE_ABI_OFFSET(ncclNet_v8_t, regMr, 56);
SLUICE_ABI_OFFSET(ncclNet_v8_t, regMrDmaBuf, 64);
SLUICE_ABI_OFFSET(ncclNet_v8_t, deregMr, 72);
SLUICE_ABI_OFFSET(ncclNet_v8_t, isend, 80);
SLUICE_ABI_OFFSET(ncclNet_v8_t, irecv, 88);
SLUICE_ABI_OFFSET(ncclNet_v8_t, iflush, 96);
SLUICE_ABI_OFFSET(ncclNet_v8_t, test, 104);
SLUICE_ABI_OFFSET(ncclNet_v8_t, closeSend, 112);
SLUICE_ABI_OFFSET(ncclNet_v8_t, closeRecv, 120);
SLUICE_ABI_OFFSET(ncclNet_v8_t, closeListen, 128);
SLUICE_ABI_OFFSET(ncclNet_v8_t, getDeviceMr, 136);
SLUICE_ABI_OFFSET(ncclNet_v8_t, irecvConsumed, 144);

SLUICE_ABI_SIZE(ncclNet_v9_t, 20 * 8);
SLUICE_ABI_OFFSET(ncclNet_v9_t, isend, 80);
SLUICE_ABI_OFFSET(ncclNet_v9_t, irecv, 88);
SLUICE_ABI_OFFSET(ncclNet_v9_t, test, 104);
SLUICE_ABI_OFFSET(ncclNet_v9_t, irecvConsumed, 144);
SLUICE_ABI_OFFSET(ncclNet_v9_t, makeVDevice, 152);

SLUICE_ABI_SIZE(ncclNet_v10_t, 20 * 8);
SLUICE_ABI_OFFSET(ncclNet_v10_t, init, 8);
SLUICE_ABI_OFFSET(ncclNet_v10_t, connect, 40);
SLUICE_ABI_OFFSET(ncclNet_v10_t, isend, 80);
SLUICE_ABI_OFFSET(ncclNet_v10_t, irecv, 88);
SLUICE_ABI_OFFSET(ncclNet_v10_t, makeVDevice, 152);

SLUICE_ABI_SIZE(ncclNet_v11_t, 22 * 8);
SLUICE_ABI_OFFSET(ncclNet_v11_t, name, 0);
SLUICE_ABI_OFFSET(ncclNet_v11_t, init, 8);
SLUICE_ABI_OFFSET(ncclNet_v11_t, devices, 16);
SLUICE_ABI_OFFSET(ncclNet_v11_t, getProperties, 24);
SLUICE_ABI_OFFSET(ncclNet_v11_t, listen, 32);
SLUICE_ABI_OFFSET(ncclNet_v11_t, connect, 40);
SLUICE_ABI_OFFSET(ncclNet_v11_t, accept, 48);
SLUICE_ABI_OFFSET(ncclNet_v11_t, regMr, 56);
SLUICE_ABI_OFFSET(ncclNet_v11_t, regMrDmaBuf, 64);
SLUICE_ABI_OFFSET(ncclNet_v11_t, deregMr, 72);
SLUICE_ABI_OFFSET(ncclNet_v11_t, isend, 80);
SLUICE_ABI_OFFSET(ncclNet_v11_t, irecv, 88);
SLUICE_ABI_OFFSET(ncclNet_v11_t, iflush, 96);
SLUICE_ABI_OFFSET(ncclNet_v11_t, test, 104);
SLUICE_ABI_OFFSET(ncclNet_v11_t, closeSend, 112);
SLUICE_ABI_OFFSET(ncclNet_v11_t, closeRecv, 120);
SLUICE_ABI_OFFSET(ncclNet_v11_t, closeListen, 128);
SLUICE_ABI_OFFSET(ncclNet_v11_t, getDeviceMr, 136);
SLUICE_ABI_OFFSET(ncclNet_v11_t, irecvConsumed, 144);
SLUICE_ABI_OFFSET(ncclNet_v11_t, makeVDevice, 152);
SLUICE_ABI_OFFSET(ncclNet_v11_t, finalize, 160);
SLUICE_ABI_OFFSET(ncclNet_v11_t, setNetAttr, 168);

SLUICE_ABI_SIZE(ncclNet_v12_t, 22 * 8);
SLUICE_ABI_OFFSET(ncclNet_v12_t, getProperties, 24);
SLUICE_ABI_OFFSET(ncclNet_v12_t, makeVDevice, 152);
SLUICE_ABI_OFFSET(ncclNet_v12_t, finalize, 160);
SLUICE_ABI_OFFSET(ncclNet_v12_t, setNetAttr, 168);
#endif /* LP64 */

#endif /* SLUICE_NCCL_NET_ABI_H_ */
