// The plugin's one validating layer between NCCL's C ABI and sluice's core (api.cc).
//
// Every function here:
//  * is noexcept: a try/catch around the body guarantees no exception reaches NCCL;
//  * validates every argument (NULL pointers, device index, n, negative int sizes, ...) before
//    core sees it;
//  * maps sluice::Code to ncclResult_t, WARNs the failure once through NCCL's logger, and turns
//    Code::kAgain into ncclSuccess with the out pointer set to NULL;
//  * always overwrites *request / *comm out-parameters when the pointer to them is valid
//    (NCCL may leave NCCL_NET_OPTIONAL_RECV_COMPLETION = 0x1 in *request: never read it).
//
// The functions take version-neutral shapes; tables.cc holds the per-version shims that adapt
// NCCL's ncclNet_v8_t .. ncclNet_v12_t signatures onto them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sluice/nccl_net_abi.h"
#include "sluice/sluice_ext.h"

namespace sluice::plugin {

// Superset of every properties version; tables.cc copies the fields each version has.
struct NetProps {
  char* name = nullptr;
  char* pci_path = nullptr;
  uint64_t guid = 0;
  int ptr_support = NCCL_PTR_HOST;
  int reg_is_global = 0;
  int force_flush = 0;
  int speed = 0;
  int port = 0;
  float latency = 0;
  int max_comms = 0;
  int max_recvs = 1;
  ncclNetDeviceType net_device_type = NCCL_NET_DEVICE_HOST;
  int net_device_version = 0;
  int vdev_count = 1;  // vProps: {1, {dev}} for a physical device, the members of a fused one
  int vdevs[NCCL_NET_MAX_DEVS_PER_NIC_V12] = {};
  size_t max_p2p_bytes = 0;
  size_t max_coll_bytes = 0;
  int max_multi_request_size = 1;
  int16_t rail_id = -1;  // NCCL_NET_ID_UNDEF unless SLUICE_NIC_RAILS names the device
  int16_t plane_id = -1;
};

// v11/v12: one call per communicator; *ctx receives a per-comm context (NULL on failure).
ncclResult_t init_comm(void** ctx, uint64_t comm_id, const ncclNetCommConfig_v11_t* config,
                       ncclDebugLogger_t logger, ncclProfilerCallback_t profiler) noexcept;
// v8..v10: process-wide, idempotent (those ABIs have no finalize).
ncclResult_t init_process(ncclDebugLogger_t logger, ncclProfilerCallback_t profiler) noexcept;
// v11/v12: ctx == NULL (failed or never completed init) is a successful no-op.
ncclResult_t finalize(void* ctx) noexcept;

ncclResult_t devices(int* ndev) noexcept;
ncclResult_t get_properties(int dev, NetProps* props) noexcept;
// makeVDevice (v9+): fuses props->devs[0..ndevs) into a new device, index in *d. max_members is
// the ABI's vProps size (4 on v9..v11, 8 on v12); ndevs must also fit it.
ncclResult_t make_vdevice(int* d, int ndevs, const int* devs, int max_members) noexcept;

// ctx: v11/v12 context (required). config: v10's connect argument (may be NULL).
ncclResult_t listen_ctx(void* ctx, int dev, void* handle, void** listen_comm) noexcept;
ncclResult_t listen(int dev, void* handle, void** listen_comm) noexcept;
ncclResult_t connect_ctx(void* ctx, int dev, void* handle, void** send_comm,
                         ncclNetDeviceHandle_v11_t** send_dev_comm) noexcept;
ncclResult_t connect_config(int dev, const ncclNetCommConfig_v10_t* config, void* handle,
                            void** send_comm, ncclNetDeviceHandle_v10_t** send_dev_comm) noexcept;
ncclResult_t accept(void* listen_comm, void** recv_comm,
                    ncclNetDeviceHandle_v11_t** recv_dev_comm) noexcept;

ncclResult_t reg_mr(void* comm, void* data, size_t size, int type, void** mhandle) noexcept;
ncclResult_t reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                           void** mhandle) noexcept;
ncclResult_t dereg_mr(void* comm, void* mhandle) noexcept;

ncclResult_t isend(void* send_comm, void* data, size_t size, int tag, void* mhandle,
                   void** request) noexcept;
ncclResult_t isend_int(void* send_comm, void* data, int size, int tag, void* mhandle,
                       void** request) noexcept;
ncclResult_t irecv(void* recv_comm, int n, void** data, const size_t* sizes, const int* tags,
                   void** mhandles, void** request) noexcept;
// v10+: with NCCL's profiler handles (phandle / phandles; NULL = no events).
ncclResult_t isend_p(void* send_comm, void* data, size_t size, int tag, void* mhandle,
                     void* phandle, void** request) noexcept;
ncclResult_t irecv_p(void* recv_comm, int n, void** data, const size_t* sizes, const int* tags,
                     void** mhandles, void** phandles, void** request) noexcept;
ncclResult_t irecv_int(void* recv_comm, int n, void** data, const int* sizes, const int* tags,
                       void** mhandles, void** request) noexcept;
ncclResult_t iflush(void* recv_comm, int n, void** data, const int* sizes, void** mhandles,
                    void** request) noexcept;
ncclResult_t test(void* request, int* done, int* sizes) noexcept;

int comm_stats(void* comm, sluiceCommStats_v1_t* out) noexcept;     // sluiceExt_v1
int comm_stats_v2(void* comm, sluiceCommStats_v2_t* out) noexcept;  // sluiceExt_v2
ncclResult_t close_send(void* send_comm) noexcept;
ncclResult_t close_recv(void* recv_comm) noexcept;
ncclResult_t close_listen(void* listen_comm) noexcept;

ncclResult_t set_net_attr(void* ctx, const ncclNetAttr_v11_t* attr) noexcept;

}  // namespace sluice::plugin
