// The exported ABI: NCCL's versioned ncclNetPlugin_vN tables and the per-version shims that adapt
// each signature onto the validating layer in api.cc. Nothing else in the plugin is exported
// (exports.map). NCCL picks the highest version it knows: 2.30+ v12, 2.28/2.29 v11,
// 2.26/2.27 v10, 2.24/2.25 v9, 2.20..2.23 v8.
//
// NULL entries, deliberately:
//  * getDeviceMr, irecvConsumed - only for device-side (UNPACK) plugins; Sluice is a HOST plugin
//    (netDeviceType HOST), and irecvConsumed would be called with already-completed requests.
//
// makeVDevice (v9..v12; v8 has none) fuses devices (docs/fusion.md): at most 4 members before v12,
// 8 from it; a physical device keeps vProps {1, {dev}}. A refused fusion returns
// ncclInvalidArgument with its reason, and NCCL keeps the devices separate (ncclInvalidUsage only
// before init: the topology code of some NCCL releases fails init on it). isend/irecv on a comm
// over a fused device stripe each message over the members' paths by their weights
// (core/src/datapath).
#include "api.h"
#include "sluice/nccl_net_abi.h"

namespace sluice::plugin {
namespace {

constexpr const char* kPluginName = "Sluice";

// ---- Properties --------------------------------------------------------------------------------

template <typename P>
void copy_base(const NetProps& s, P* d) {
  d->name = s.name;
  d->pciPath = s.pci_path;
  d->guid = s.guid;
  d->ptrSupport = s.ptr_support;
  d->regIsGlobal = s.reg_is_global;
  d->speed = s.speed;
  d->port = s.port;
  d->latency = s.latency;
  d->maxComms = s.max_comms;
  d->maxRecvs = s.max_recvs;
  d->netDeviceType = s.net_device_type;
  d->netDeviceVersion = s.net_device_version;
}

template <typename P>
void copy_v9(const NetProps& s, P* d) {
  copy_base(s, d);
  d->forceFlush = s.force_flush;
  constexpr int kCap = static_cast<int>(sizeof(d->vProps.devs) / sizeof(d->vProps.devs[0]));
  d->vProps.ndevs = s.vdev_count < kCap ? s.vdev_count : kCap;  // make_vdevice keeps it <= kCap
  for (int i = 0; i < d->vProps.ndevs; ++i) d->vProps.devs[i] = s.vdevs[i];
  d->maxP2pBytes = s.max_p2p_bytes;
  d->maxCollBytes = s.max_coll_bytes;
}

template <typename P, typename Fill>
ncclResult_t get_props(int dev, P* props, Fill fill) {
  NetProps p;
  const ncclResult_t r = get_properties(dev, props != nullptr ? &p : nullptr);
  if (r != ncclSuccess) return r;
  *props = P{};  // every field not set below (vProps.devs[1..], padding) is zero
  fill(p, props);
  return ncclSuccess;
}

ncclResult_t get_properties_v8(int dev, ncclNetProperties_v8_t* props) {
  return get_props(dev, props,
                   [](const NetProps& s, ncclNetProperties_v8_t* d) { copy_base(s, d); });
}

ncclResult_t get_properties_v9(int dev, ncclNetProperties_v9_t* props) {
  return get_props(dev, props, [](const NetProps& s, ncclNetProperties_v9_t* d) { copy_v9(s, d); });
}

ncclResult_t get_properties_v11(int dev, ncclNetProperties_v11_t* props) {
  return get_props(dev, props, [](const NetProps& s, ncclNetProperties_v11_t* d) {
    copy_v9(s, d);
    d->maxMultiRequestSize = s.max_multi_request_size;
  });
}

ncclResult_t get_properties_v12(int dev, ncclNetProperties_v12_t* props) {
  return get_props(dev, props, [](const NetProps& s, ncclNetProperties_v12_t* d) {
    copy_v9(s, d);
    d->maxMultiRequestSize = s.max_multi_request_size;
    d->railId = s.rail_id;
    d->planeId = s.plane_id;
  });
}

// ---- Version shims -----------------------------------------------------------------------------

ncclResult_t init_v8(ncclDebugLogger_t logger) {
  return init_process(logger, nullptr);
}

ncclResult_t init_v10(ncclDebugLogger_t logger, ncclProfilerCallback_t profiler) {
  return init_process(logger, profiler);
}

ncclResult_t init_v11(void** ctx, uint64_t comm_id, ncclNetCommConfig_v11_t* config,
                      ncclDebugLogger_t logger, ncclProfilerCallback_t profiler) {
  return init_comm(ctx, comm_id, config, logger, profiler);
}

ncclResult_t connect_v8(int dev, void* handle, void** send_comm,
                        ncclNetDeviceHandle_v8_t** send_dev_comm) {
  return connect_config(dev, nullptr, handle, send_comm, send_dev_comm);
}

ncclResult_t connect_v10(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** send_comm,
                         ncclNetDeviceHandle_v10_t** send_dev_comm) {
  return connect_config(dev, config, handle, send_comm, send_dev_comm);
}

ncclResult_t irecv_v8(void* recv_comm, int n, void** data, int* sizes, int* tags, void** mhandles,
                      void** request) {
  return irecv_int(recv_comm, n, data, sizes, tags, mhandles, request);
}

ncclResult_t irecv_v9(void* recv_comm, int n, void** data, size_t* sizes, int* tags,
                      void** mhandles, void** request) {
  return irecv(recv_comm, n, data, sizes, tags, mhandles, request);
}

// v10+: the profiler handles become the parents of the messages' work-request events
// (profiler.h, docs/profiler.md).
ncclResult_t isend_v10(void* send_comm, void* data, size_t size, int tag, void* mhandle,
                       void* phandle, void** request) {
  return isend_p(send_comm, data, size, tag, mhandle, phandle, request);
}

ncclResult_t irecv_v10(void* recv_comm, int n, void** data, size_t* sizes, int* tags,
                       void** mhandles, void** phandles, void** request) {
  return irecv_p(recv_comm, n, data, sizes, tags, mhandles, phandles, request);
}

ncclResult_t iflush_any(void* recv_comm, int n, void** data, int* sizes, void** mhandles,
                        void** request) {
  return iflush(recv_comm, n, data, sizes, mhandles, request);
}

template <typename V>
ncclResult_t make_vdevice_any(int* d, V* props) {
  constexpr int kCap = static_cast<int>(sizeof(props->devs) / sizeof(props->devs[0]));
  if (props == nullptr) return make_vdevice(d, 0, nullptr, kCap);
  return make_vdevice(d, props->ndevs, props->devs, kCap);
}
ncclResult_t make_vdevice_v9(int* d, ncclNetVDeviceProps_v9_t* props) {
  return make_vdevice_any(d, props);
}
ncclResult_t make_vdevice_v12(int* d, ncclNetVDeviceProps_v12_t* props) {
  return make_vdevice_any(d, props);
}

ncclResult_t set_net_attr_v11(void* ctx, ncclNetAttr_v11_t* attr) {
  return set_net_attr(ctx, attr);
}

}  // namespace
}  // namespace sluice::plugin

namespace sp = sluice::plugin;

#define SLUICE_EXPORT __attribute__((visibility("default")))

extern "C" SLUICE_EXPORT const ncclNet_v12_t ncclNetPlugin_v12 = {
    .name = sp::kPluginName,
    .init = sp::init_v11,
    .devices = sp::devices,
    .getProperties = sp::get_properties_v12,
    .listen = sp::listen_ctx,
    .connect = sp::connect_ctx,
    .accept = sp::accept,
    .regMr = sp::reg_mr,
    .regMrDmaBuf = sp::reg_mr_dmabuf,
    .deregMr = sp::dereg_mr,
    .isend = sp::isend_v10,
    .irecv = sp::irecv_v10,
    .iflush = sp::iflush_any,
    .test = sp::test,
    .closeSend = sp::close_send,
    .closeRecv = sp::close_recv,
    .closeListen = sp::close_listen,
    .getDeviceMr = nullptr,
    .irecvConsumed = nullptr,
    .makeVDevice = sp::make_vdevice_v12,
    .finalize = sp::finalize,
    .setNetAttr = sp::set_net_attr_v11,
};

extern "C" SLUICE_EXPORT const ncclNet_v11_t ncclNetPlugin_v11 = {
    .name = sp::kPluginName,
    .init = sp::init_v11,
    .devices = sp::devices,
    .getProperties = sp::get_properties_v11,
    .listen = sp::listen_ctx,
    .connect = sp::connect_ctx,
    .accept = sp::accept,
    .regMr = sp::reg_mr,
    .regMrDmaBuf = sp::reg_mr_dmabuf,
    .deregMr = sp::dereg_mr,
    .isend = sp::isend_v10,
    .irecv = sp::irecv_v10,
    .iflush = sp::iflush_any,
    .test = sp::test,
    .closeSend = sp::close_send,
    .closeRecv = sp::close_recv,
    .closeListen = sp::close_listen,
    .getDeviceMr = nullptr,
    .irecvConsumed = nullptr,
    .makeVDevice = sp::make_vdevice_v9,
    .finalize = sp::finalize,
    .setNetAttr = sp::set_net_attr_v11,
};

extern "C" SLUICE_EXPORT const ncclNet_v10_t ncclNetPlugin_v10 = {
    .name = sp::kPluginName,
    .init = sp::init_v10,
    .devices = sp::devices,
    .getProperties = sp::get_properties_v9,
    .listen = sp::listen,
    .connect = sp::connect_v10,
    .accept = sp::accept,
    .regMr = sp::reg_mr,
    .regMrDmaBuf = sp::reg_mr_dmabuf,
    .deregMr = sp::dereg_mr,
    .isend = sp::isend_v10,
    .irecv = sp::irecv_v10,
    .iflush = sp::iflush_any,
    .test = sp::test,
    .closeSend = sp::close_send,
    .closeRecv = sp::close_recv,
    .closeListen = sp::close_listen,
    .getDeviceMr = nullptr,
    .irecvConsumed = nullptr,
    .makeVDevice = sp::make_vdevice_v9,
};

extern "C" SLUICE_EXPORT const ncclNet_v9_t ncclNetPlugin_v9 = {
    .name = sp::kPluginName,
    .init = sp::init_v8,
    .devices = sp::devices,
    .getProperties = sp::get_properties_v9,
    .listen = sp::listen,
    .connect = sp::connect_v8,
    .accept = sp::accept,
    .regMr = sp::reg_mr,
    .regMrDmaBuf = sp::reg_mr_dmabuf,
    .deregMr = sp::dereg_mr,
    .isend = sp::isend,
    .irecv = sp::irecv_v9,
    .iflush = sp::iflush_any,
    .test = sp::test,
    .closeSend = sp::close_send,
    .closeRecv = sp::close_recv,
    .closeListen = sp::close_listen,
    .getDeviceMr = nullptr,
    .irecvConsumed = nullptr,
    .makeVDevice = sp::make_vdevice_v9,
};

// Sluice's own extension tables (sluice/sluice_ext.h): statistics for sluice-bench and tests.
extern "C" SLUICE_EXPORT const sluiceExt_v1_t sluiceExt_v1 = {
    .version = 1,
    .commStats = sp::comm_stats,
};

extern "C" SLUICE_EXPORT const sluiceExt_v2_t sluiceExt_v2 = {
    .version = 2,
    .commStats = sp::comm_stats,
    .commStatsV2 = sp::comm_stats_v2,
};

extern "C" SLUICE_EXPORT const ncclNet_v8_t ncclNetPlugin_v8 = {
    .name = sp::kPluginName,
    .init = sp::init_v8,
    .devices = sp::devices,
    .getProperties = sp::get_properties_v8,
    .listen = sp::listen,
    .connect = sp::connect_v8,
    .accept = sp::accept,
    .regMr = sp::reg_mr,
    .regMrDmaBuf = sp::reg_mr_dmabuf,
    .deregMr = sp::dereg_mr,
    .isend = sp::isend_int,
    .irecv = sp::irecv_v8,
    .iflush = sp::iflush_any,
    .test = sp::test,
    .closeSend = sp::close_send,
    .closeRecv = sp::close_recv,
    .closeListen = sp::close_listen,
    .getDeviceMr = nullptr,
    .irecvConsumed = nullptr,
};
