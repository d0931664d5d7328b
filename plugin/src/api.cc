// The validating layer: NCCL's arguments in, sluice core calls out (see api.h for the contract).
#include "api.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <unordered_set>

#include "placement.h"
#include "profiler.h"
#include "sluice/core/api.h"
#include "sluice/core/base/fd_limit.h"
#include "sluice/core/base/log.h"
#include "sluice/core/base/status.h"
#include "sluice/core/wire/wire.h"
#include "sluice/gpu/cuda_driver.h"
#include "sluice/gpu/gdr.h"

namespace sluice::plugin {
namespace {

// Largest single transfer we advertise (maxP2pBytes / maxCollBytes). NCCL accepts (0, 1 TiB], but
// test() reports received sizes through `int`, so a receive must stay below 2^31: 1 GiB is the
// largest power of two that does (and the value NCCL's compat layers use for older plugins).
constexpr size_t kMaxTransferBytes = size_t{1} << 30;
static_assert(kMaxTransferBytes == wire::kMaxMessageBytes, "core refuses larger sends");
// listen writes wire::Handle into NCCL's handle memory (char[NCCL_NET_HANDLE_MAXSIZE]).
static_assert(kHandleSize == NCCL_NET_HANDLE_MAXSIZE && wire::kNcclHandleMaxSize == kHandleSize);
static_assert(sizeof(wire::Handle) <= NCCL_NET_HANDLE_MAXSIZE, "the listen handle fits NCCL's");

// ---- Per-communicator context (v11/v12) --------------------------------------------------------

struct CommCtx {
  uint64_t comm_id = 0;
  CommConfig config;                          // trafficClass from ncclNetCommConfig
  ncclProfilerCallback_t profiler = nullptr;  // NCCL's profiler callback (profiler.h)
};

// Guards the lifecycle bookkeeping below (init/finalize/ctx lookups run on control paths only).
std::mutex g_mu;
// Live contexts. finalize() and ctx lookups only trust pointers found here: NCCL 2.28 may pass an
// unset ctx to finalize after a failed init, and such a pointer is never dereferenced.
std::unordered_set<CommCtx*>* g_ctxs = nullptr;  // leaked on purpose: no static destructor races
bool g_process_init = false;  // v8..v10 init holds one engine reference for the process
// Engine references held by this layer (process init + one per live ctx). Read without the lock
// by the device checks: while a caller holds a comm or a ctx the count cannot drop to zero.
std::atomic<int> g_refs{0};

// ---- Logging bridge ----------------------------------------------------------------------------

std::atomic<ncclDebugLogger_t> g_logger{nullptr};

// sluice's sink: forwards to NCCL's logger. Levels and subsystem bits have NCCL's numeric values.
// Formats here and passes "%s" so the message is never re-interpreted as a format string.
void log_bridge(int level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  ncclDebugLogger_t logger = g_logger.load(std::memory_order_acquire);
  if (logger == nullptr) return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  logger(static_cast<ncclDebugLogLevel>(level), flags, file, line, "%s", msg);
}

void install_logger(ncclDebugLogger_t logger) {
  if (logger == nullptr) return;  // keep whatever an earlier init installed
  g_logger.store(logger, std::memory_order_release);
  set_log_sink(&log_bridge);
}

LogSink current_sink() {
  return g_logger.load(std::memory_order_acquire) != nullptr ? &log_bridge : nullptr;
}

// ---- Errors ------------------------------------------------------------------------------------

ncclResult_t to_nccl(Code code) {
  switch (code) {
    case Code::kOk:
    case Code::kAgain:
      return ncclSuccess;
    case Code::kInvalidArgument:
      return ncclInvalidArgument;
    case Code::kInvalidUsage:
      return ncclInvalidUsage;
    case Code::kSystemError:
      return ncclSystemError;
    case Code::kInternalError:
      return ncclInternalError;
    case Code::kRemoteError:
      return ncclRemoteError;
  }
  return ncclInternalError;
}

// WARNs a failure once. A comm that failed keeps returning the same reason on every later call;
// identical consecutive messages are logged once, not once per poll. A comm's failure (its message
// names a QP) is logged once as long as it is among the last kRecentWarns such messages: NCCL polls
// several failed comms in turn when a peer host dies, and each would otherwise WARN at every poll.
constexpr size_t kRecentWarns = 64;

ncclResult_t fail(const char* fn, Code code, const char* msg) noexcept {
  const ncclResult_t res = to_nccl(code);
  try {
    static std::mutex mu;
    // Leaked: usable during static destruction.
    static auto* last = new std::string();
    static auto* recent = new std::deque<std::string>();
    // Core's messages usually name the call already ("isend: ..."); don't say it twice.
    const std::string prefix = std::string(fn) + ": ";
    std::string line =
        std::string_view(msg).substr(0, prefix.size()) == prefix ? std::string(msg) : prefix + msg;
    bool repeat = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      repeat = *last == line;
      if (line.find("qpn ") != std::string::npos) {
        repeat = repeat || std::find(recent->begin(), recent->end(), line) != recent->end();
        if (!repeat) {
          if (recent->size() == kRecentWarns) recent->pop_front();
          recent->push_back(line);
        }
      }
      *last = line;
    }
    if (!repeat) {
      const std::string_view name = code_name(code);
      SLUICE_WARN("%s (%.*s)", line.c_str(), static_cast<int>(name.size()), name.data());
    }
  } catch (...) {
    // Out of memory while reporting: the result code still tells NCCL what happened.
  }
  return res;
}

ncclResult_t finish(const char* fn, const Status& st) noexcept {
  if (st.is_ok() || st.is_again()) return ncclSuccess;
  return fail(fn, st.code(), st.message().c_str());
}

// Runs `body` (returning Status) so that no exception can escape into NCCL.
template <typename F>
ncclResult_t guard(const char* fn, F&& body) noexcept {
  try {
    return finish(fn, body());
  } catch (const std::bad_alloc&) {
    return fail(fn, Code::kSystemError, "out of memory");
  } catch (const std::exception& e) {
    return fail(fn, Code::kInternalError, e.what());
  } catch (...) {
    return fail(fn, Code::kInternalError, "unknown exception");
  }
}

Status invalid(std::string msg) {
  return Status(Code::kInvalidArgument, std::move(msg));
}
Status usage(std::string msg) {
  return Status(Code::kInvalidUsage, std::move(msg));
}

Status check_engine() {
  if (g_refs.load(std::memory_order_acquire) <= 0) {
    return usage("called before init (or after the last finalize)");
  }
  return Status::ok();
}

Status check_dev(int dev) {
  SLUICE_RETURN_IF_ERROR(check_engine());
  const int n = device_count();
  if (dev < 0 || dev >= n) {
    return invalid("device " + std::to_string(dev) + " out of range [0, " + std::to_string(n) +
                   ")");
  }
  return Status::ok();
}

Status check_n(int n) {
  if (n < 1 || n > kMaxRecvs) {
    return invalid("n = " + std::to_string(n) + " outside 1.." + std::to_string(kMaxRecvs));
  }
  return Status::ok();
}

Status to_mem_type(int type, MemType* out) {
  if (type == NCCL_PTR_HOST) {
    *out = MemType::kHost;
    return Status::ok();
  }
  if (type == NCCL_PTR_CUDA) {
    // ptrSupport offers CUDA only where the GPUDirect decision says so (core checks it per
    // device); without a driver, say so here.
    const auto& cuda = gpu::CudaDriver::instance();
    if (!cuda.available()) {
      return usage("CUDA memory registration requested but the CUDA driver is unavailable: " +
                   cuda.reason());
    }
    *out = MemType::kCuda;
    return Status::ok();
  }
  return invalid("memory type " + std::to_string(type) +
                 " is neither NCCL_PTR_HOST nor NCCL_PTR_CUDA");
}

// Copies NCCL's void* mhandle array into typed pointers (n <= kMaxRecvs, no allocation).
Status copy_mhandles(int n, void* const* mhandles, MemHandle** out) {
  for (int i = 0; i < n; ++i) {
    if (mhandles[i] == nullptr) return invalid("mhandles[" + std::to_string(i) + "] is NULL");
    out[i] = static_cast<MemHandle*>(mhandles[i]);
  }
  return Status::ok();
}

// ---- Engine lifecycle --------------------------------------------------------------------------

// Takes one engine reference. Caller holds g_mu.
Status acquire_engine() {
  SLUICE_RETURN_IF_ERROR(engine_acquire(current_sink(), make_locality_provider(),
                                        make_order_provider(), &gpu::make_gpu_ops,
                                        make_weight_provider(), make_nearness_provider()));
  if (device_count() <= 0) {
    engine_release();
    // NCCL: "If no device is present or usable, init should not return ncclSuccess".
    return Status(Code::kSystemError,
                  "no usable RDMA device (no active port, or none matches NCCL_IB_HCA)");
  }
  // Every comm keeps a socket for its life: a soft limit of 1,024 is passed by a job of a thousand
  // GPUs. Once per process, with the engine's log sink set (issue 32).
  raise_fd_limit_at_init();
  g_refs.fetch_add(1, std::memory_order_acq_rel);
  return Status::ok();
}

// Drops one engine reference. Caller holds g_mu.
void release_engine() {
  g_refs.fetch_sub(1, std::memory_order_acq_rel);
  engine_release();
}

// Looks a v11/v12 ctx up among the live ones and copies its config out.
Status lookup_ctx(void* ctx, CommConfig* config, ncclProfilerCallback_t* profiler = nullptr) {
  if (ctx == nullptr) return invalid("ctx is NULL (init did not succeed?)");
  std::lock_guard<std::mutex> lock(g_mu);
  auto* c = static_cast<CommCtx*>(ctx);
  if (g_ctxs == nullptr || g_ctxs->count(c) == 0) {
    return invalid("unknown ctx (not returned by init, or already finalized)");
  }
  *config = c->config;
  if (profiler != nullptr) *profiler = c->profiler;
  return Status::ok();
}

Status connect_impl(int dev, const CommConfig& config, void* handle, void** send_comm,
                    ncclNetDeviceHandle_v11_t** dev_comm, ncclProfilerCallback_t profiler) {
  if (send_comm == nullptr) return invalid("sendComm is NULL");
  *send_comm = nullptr;
  // HOST plugin: no device-side handle. NCCL passes a pointer to NULL, or NULL itself.
  if (dev_comm != nullptr) *dev_comm = nullptr;
  if (handle == nullptr) return invalid("handle is NULL");
  SLUICE_RETURN_IF_ERROR(check_dev(dev));
  SendComm* comm = nullptr;
  Status st = sluice::connect(dev, handle, config, &comm);
  if (st.is_again()) return Status::ok();  // still connecting: *sendComm stays NULL
  SLUICE_RETURN_IF_ERROR(st);
  if (Status p = attach_profiler(comm, profiler); !p.is_ok()) {
    (void)sluice::close_send(comm);
    return p;
  }
  *send_comm = comm;
  return Status::ok();
}

Status listen_impl(int dev, void* handle, void** listen_comm, ncclProfilerCallback_t profiler) {
  if (listen_comm == nullptr) return invalid("listenComm is NULL");
  *listen_comm = nullptr;
  if (handle == nullptr) return invalid("handle is NULL");
  SLUICE_RETURN_IF_ERROR(check_dev(dev));
  ListenComm* comm = nullptr;
  SLUICE_RETURN_IF_ERROR(sluice::listen(dev, handle, &comm));
  if (comm == nullptr) return Status(Code::kInternalError, "listen returned no comm");
  remember_listen(comm, profiler);
  *listen_comm = comm;
  return Status::ok();
}

Status irecv_impl(void* recv_comm, int n, void** data, const size_t* sizes, const int* tags,
                  void** mhandles, void** phandles, void** request) {
  if (recv_comm == nullptr) return invalid("recvComm is NULL");
  SLUICE_RETURN_IF_ERROR(check_n(n));
  if (data == nullptr || tags == nullptr || mhandles == nullptr) {
    return invalid("data, tags or mhandles array is NULL");
  }
  MemHandle* mhs[kMaxRecvs];
  SLUICE_RETURN_IF_ERROR(copy_mhandles(n, mhandles, mhs));
  for (int i = 0; i < n; ++i) {
    if (data[i] == nullptr && sizes[i] > 0) {
      return invalid("data[" + std::to_string(i) + "] is NULL");
    }
  }
  Request* req = nullptr;
  Status st =
      sluice::irecv(static_cast<RecvComm*>(recv_comm), n, data, sizes, tags, mhs, &req, phandles);
  if (st.is_again()) return Status::ok();  // cannot post yet: *request stays NULL
  SLUICE_RETURN_IF_ERROR(st);
  *request = req;
  return Status::ok();
}

}  // namespace

// ---- Lifecycle ---------------------------------------------------------------------------------

ncclResult_t init_comm(void** ctx, uint64_t comm_id, const ncclNetCommConfig_v11_t* config,
                       ncclDebugLogger_t logger, ncclProfilerCallback_t profiler) noexcept {
  install_logger(logger);
  return guard("init", [&]() -> Status {
    if (ctx == nullptr) return invalid("ctx is NULL");
    *ctx = nullptr;  // finalize after a failed init then sees NULL and does nothing
    auto c = std::make_unique<CommCtx>();
    c->comm_id = comm_id;
    c->config.traffic_class = config != nullptr ? config->trafficClass : -1;
    c->profiler = profiler;
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_ctxs == nullptr) g_ctxs = new std::unordered_set<CommCtx*>();
    g_ctxs->reserve(g_ctxs->size() + 1);  // the insert below then cannot throw
    SLUICE_RETURN_IF_ERROR(acquire_engine());
    g_ctxs->insert(c.get());
    SLUICE_INFO(kSubInit | kSubNet, "init comm 0x%llx, trafficClass %d, %d device(s)",
                static_cast<unsigned long long>(comm_id), c->config.traffic_class, device_count());
    *ctx = c.release();
    return Status::ok();
  });
}

ncclResult_t init_process(ncclDebugLogger_t logger, ncclProfilerCallback_t profiler) noexcept {
  install_logger(logger);
  set_process_profiler(profiler);
  return guard("init", [&]() -> Status {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_process_init) return Status::ok();
    // Held for the process lifetime: the v8..v10 ABIs have no finalize.
    SLUICE_RETURN_IF_ERROR(acquire_engine());
    g_process_init = true;
    return Status::ok();
  });
}

ncclResult_t finalize(void* ctx) noexcept {
  return guard("finalize", [&]() -> Status {
    if (ctx == nullptr) return Status::ok();  // failed/unfinished init (NCCL 2.28 calls anyway)
    auto* c = static_cast<CommCtx*>(ctx);
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_ctxs == nullptr || g_ctxs->erase(c) == 0) {
      return invalid("unknown ctx (not returned by init, or already finalized)");
    }
    SLUICE_INFO(kSubInit | kSubNet, "finalize comm 0x%llx",
                static_cast<unsigned long long>(c->comm_id));
    delete c;
    release_engine();
    return Status::ok();
  });
}

ncclResult_t devices(int* ndev) noexcept {
  return guard("devices", [&]() -> Status {
    if (ndev == nullptr) return invalid("ndev is NULL");
    *ndev = 0;
    SLUICE_RETURN_IF_ERROR(check_engine());
    *ndev = device_count();
    return Status::ok();
  });
}

ncclResult_t get_properties(int dev, NetProps* props) noexcept {
  return guard("getProperties", [&]() -> Status {
    if (props == nullptr) return invalid("props is NULL");
    SLUICE_RETURN_IF_ERROR(check_dev(dev));
    DeviceProperties p;
    SLUICE_RETURN_IF_ERROR(device_properties(dev, &p));
    if (p.name == nullptr) return Status(Code::kInternalError, "device has no name");
    if (p.max_recvs < 1 || p.max_recvs > kMaxRecvs) {
      return Status(Code::kInternalError, "device maxRecvs " + std::to_string(p.max_recvs) +
                                              " outside 1.." + std::to_string(kMaxRecvs));
    }
    auto bound = [](size_t v) { return v == 0 || v > kMaxTransferBytes ? kMaxTransferBytes : v; };
    NetProps out;
    out.name = const_cast<char*>(p.name);          // valid until the last engine release
    out.pci_path = const_cast<char*>(p.pci_path);  // NULL for virtual devices (rxe)
    out.guid = p.guid;
    out.ptr_support = p.ptr_support;
    out.reg_is_global = p.reg_is_global;
    out.force_flush = p.force_flush;
    out.speed = p.speed_mbps;
    out.port = p.port;
    out.latency = p.latency_us;
    // What the device holds at this configuration, not its max_qp (issue 32).
    int max_comms = 0;
    std::string how;
    SLUICE_RETURN_IF_ERROR(device_max_comms(dev, &max_comms, &how));
    out.max_comms = max_comms;
    {
      static std::mutex said_mu;
      static std::unordered_set<int> said;
      std::lock_guard<std::mutex> lk(said_mu);
      if (said.insert(dev).second) {
        SLUICE_INFO(kSubInit, "%s: maxComms %d (device max_qp alone: %d): %s", p.name, max_comms,
                    p.max_comms, how.c_str());
      }
    }
    out.max_recvs = p.max_recvs;
    out.net_device_type = NCCL_NET_DEVICE_HOST;
    out.net_device_version = 0;
    out.vdev_count = std::clamp(p.n_members, 1, NCCL_NET_MAX_DEVS_PER_NIC_V12);
    for (int i = 0; i < out.vdev_count; ++i) out.vdevs[i] = p.members[i];
    out.max_p2p_bytes = bound(p.max_p2p_bytes);
    out.max_coll_bytes = bound(p.max_coll_bytes);
    out.max_multi_request_size = 1;
    // v12: NCCL_NET_ID_UNDEF (-1) unless SLUICE_NIC_RAILS names the device (core checked the
    // range: rail 0..32767, a fused plane is a bitmask of planes 0..14).
    out.rail_id = static_cast<int16_t>(p.rail_id);
    out.plane_id = static_cast<int16_t>(p.plane_id);
    *props = out;
    return Status::ok();
  });
}

ncclResult_t make_vdevice(int* d, int ndevs, const int* devs, int max_members) noexcept {
  return guard("makeVDevice", [&]() -> Status {
    if (d == nullptr) return invalid("d is NULL");
    SLUICE_RETURN_IF_ERROR(check_engine());
    // NCCL never passes more than its vProps holds; a larger ndevs is refused in core with the
    // version's limit named.
    return sluice::make_vdevice(devs, ndevs, d, max_members);
  });
}

// ---- Connection setup --------------------------------------------------------------------------

ncclResult_t listen_ctx(void* ctx, int dev, void* handle, void** listen_comm) noexcept {
  return guard("listen", [&]() -> Status {
    if (listen_comm != nullptr) *listen_comm = nullptr;
    CommConfig unused;
    ncclProfilerCallback_t profiler = nullptr;
    SLUICE_RETURN_IF_ERROR(lookup_ctx(ctx, &unused, &profiler));
    return listen_impl(dev, handle, listen_comm, profiler);
  });
}

ncclResult_t listen(int dev, void* handle, void** listen_comm) noexcept {
  return guard("listen", [&]() -> Status {
    return listen_impl(dev, handle, listen_comm, process_profiler());
  });
}

ncclResult_t connect_ctx(void* ctx, int dev, void* handle, void** send_comm,
                         ncclNetDeviceHandle_v11_t** send_dev_comm) noexcept {
  return guard("connect", [&]() -> Status {
    if (send_comm != nullptr) *send_comm = nullptr;
    CommConfig config;
    ncclProfilerCallback_t profiler = nullptr;
    SLUICE_RETURN_IF_ERROR(lookup_ctx(ctx, &config, &profiler));
    return connect_impl(dev, config, handle, send_comm, send_dev_comm, profiler);
  });
}

ncclResult_t connect_config(int dev, const ncclNetCommConfig_v10_t* config, void* handle,
                            void** send_comm, ncclNetDeviceHandle_v10_t** send_dev_comm) noexcept {
  return guard("connect", [&]() -> Status {
    CommConfig cfg;
    if (config != nullptr) cfg.traffic_class = config->trafficClass;
    return connect_impl(dev, cfg, handle, send_comm, send_dev_comm, process_profiler());
  });
}

ncclResult_t accept(void* listen_comm, void** recv_comm,
                    ncclNetDeviceHandle_v11_t** recv_dev_comm) noexcept {
  return guard("accept", [&]() -> Status {
    if (recv_comm == nullptr) return invalid("recvComm is NULL");
    *recv_comm = nullptr;
    if (recv_dev_comm != nullptr) *recv_dev_comm = nullptr;
    if (listen_comm == nullptr) return invalid("listenComm is NULL");
    RecvComm* comm = nullptr;
    Status st = sluice::accept(static_cast<ListenComm*>(listen_comm), &comm);
    if (st.is_again()) return Status::ok();  // still accepting: *recvComm stays NULL
    SLUICE_RETURN_IF_ERROR(st);
    if (Status p = attach_profiler(comm, listen_profiler(listen_comm)); !p.is_ok()) {
      (void)sluice::close_recv(comm);
      return p;
    }
    *recv_comm = comm;
    return Status::ok();
  });
}

// ---- Memory registration -----------------------------------------------------------------------

ncclResult_t reg_mr(void* comm, void* data, size_t size, int type, void** mhandle) noexcept {
  return guard("regMr", [&]() -> Status {
    if (mhandle == nullptr) return invalid("mhandle is NULL");
    *mhandle = nullptr;
    if (comm == nullptr) return invalid("comm is NULL");
    if (data == nullptr) return invalid("data is NULL");
    if (size == 0) return invalid("size is 0");
    MemType mt;
    SLUICE_RETURN_IF_ERROR(to_mem_type(type, &mt));
    MemHandle* mh = nullptr;
    SLUICE_RETURN_IF_ERROR(sluice::reg_mr(comm, data, size, mt, &mh));
    *mhandle = mh;
    return Status::ok();
  });
}

ncclResult_t reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                           void** mhandle) noexcept {
  return guard("regMrDmaBuf", [&]() -> Status {
    if (mhandle == nullptr) return invalid("mhandle is NULL");
    *mhandle = nullptr;
    if (comm == nullptr) return invalid("comm is NULL");
    if (data == nullptr) return invalid("data is NULL");
    if (size == 0) return invalid("size is 0");
    if (fd < 0) return invalid("fd " + std::to_string(fd) + " is not a file descriptor");
    MemType mt;
    SLUICE_RETURN_IF_ERROR(to_mem_type(type, &mt));
    MemHandle* mh = nullptr;
    SLUICE_RETURN_IF_ERROR(sluice::reg_mr_dmabuf(comm, data, size, mt, offset, fd, &mh));
    *mhandle = mh;
    return Status::ok();
  });
}

ncclResult_t dereg_mr(void* comm, void* mhandle) noexcept {
  return guard("deregMr", [&]() -> Status {
    if (comm == nullptr) return invalid("comm is NULL");
    if (mhandle == nullptr) return invalid("mhandle is NULL");
    return sluice::dereg_mr(comm, static_cast<MemHandle*>(mhandle));
  });
}

// ---- Data path ---------------------------------------------------------------------------------
// No allocation, no lock, no log on success: validation is a handful of branches.

ncclResult_t isend(void* send_comm, void* data, size_t size, int tag, void* mhandle,
                   void** request) noexcept {
  return isend_p(send_comm, data, size, tag, mhandle, nullptr, request);
}

ncclResult_t isend_p(void* send_comm, void* data, size_t size, int tag, void* mhandle,
                     void* phandle, void** request) noexcept {
  return guard("isend", [&]() -> Status {
    if (request == nullptr) return invalid("request is NULL");
    *request = nullptr;
    if (send_comm == nullptr) return invalid("sendComm is NULL");
    if (mhandle == nullptr) return invalid("mhandle is NULL");
    if (data == nullptr && size > 0) return invalid("data is NULL");
    Request* req = nullptr;
    Status st = sluice::isend(static_cast<SendComm*>(send_comm), data, size, tag,
                              static_cast<MemHandle*>(mhandle), &req, phandle);
    if (st.is_again()) return Status::ok();  // no credit yet: *request stays NULL
    SLUICE_RETURN_IF_ERROR(st);
    *request = req;
    return Status::ok();
  });
}

ncclResult_t isend_int(void* send_comm, void* data, int size, int tag, void* mhandle,
                       void** request) noexcept {
  if (size < 0) {
    if (request != nullptr) *request = nullptr;
    return fail("isend", Code::kInvalidArgument, "negative size");
  }
  return isend(send_comm, data, static_cast<size_t>(size), tag, mhandle, request);
}

ncclResult_t irecv(void* recv_comm, int n, void** data, const size_t* sizes, const int* tags,
                   void** mhandles, void** request) noexcept {
  return irecv_p(recv_comm, n, data, sizes, tags, mhandles, nullptr, request);
}

ncclResult_t irecv_p(void* recv_comm, int n, void** data, const size_t* sizes, const int* tags,
                     void** mhandles, void** phandles, void** request) noexcept {
  return guard("irecv", [&]() -> Status {
    if (request == nullptr) return invalid("request is NULL");
    *request = nullptr;  // may hold the 0x1 completion hint: never read, always overwritten
    if (sizes == nullptr) return invalid("sizes is NULL");
    return irecv_impl(recv_comm, n, data, sizes, tags, mhandles, phandles, request);
  });
}

ncclResult_t irecv_int(void* recv_comm, int n, void** data, const int* sizes, const int* tags,
                       void** mhandles, void** request) noexcept {
  return guard("irecv", [&]() -> Status {
    if (request == nullptr) return invalid("request is NULL");
    *request = nullptr;
    if (sizes == nullptr) return invalid("sizes is NULL");
    SLUICE_RETURN_IF_ERROR(check_n(n));
    size_t wide[kMaxRecvs];
    for (int i = 0; i < n; ++i) {
      if (sizes[i] < 0) return invalid("sizes[" + std::to_string(i) + "] is negative");
      wide[i] = static_cast<size_t>(sizes[i]);
    }
    return irecv_impl(recv_comm, n, data, wide, tags, mhandles, nullptr, request);
  });
}

ncclResult_t iflush(void* recv_comm, int n, void** data, const int* sizes, void** mhandles,
                    void** request) noexcept {
  return guard("iflush", [&]() -> Status {
    if (request == nullptr) return invalid("request is NULL");
    *request = nullptr;  // NULL = nothing to flush, complete
    if (recv_comm == nullptr) return invalid("recvComm is NULL");
    SLUICE_RETURN_IF_ERROR(check_n(n));
    if (data == nullptr || sizes == nullptr || mhandles == nullptr) {
      return invalid("data, sizes or mhandles array is NULL");
    }
    MemHandle* mhs[kMaxRecvs];
    SLUICE_RETURN_IF_ERROR(copy_mhandles(n, mhandles, mhs));
    for (int i = 0; i < n; ++i) {
      if (sizes[i] < 0) return invalid("sizes[" + std::to_string(i) + "] is negative");
    }
    Request* req = nullptr;
    SLUICE_RETURN_IF_ERROR(
        sluice::iflush(static_cast<RecvComm*>(recv_comm), n, data, sizes, mhs, &req));
    *request = req;
    return Status::ok();
  });
}

ncclResult_t test(void* request, int* done, int* sizes) noexcept {
  return guard("test", [&]() -> Status {
    if (done == nullptr) return invalid("done is NULL");
    *done = 0;
    if (request == nullptr) return invalid("request is NULL");
    // Core fills sizes[0..n) (n = receives in the request, 1 for a send) and we do not know n
    // here; NCCL's array may be a single int for sends. Unwritten slots keep the sentinel.
    constexpr size_t kUnset = SIZE_MAX;
    size_t wide[kMaxRecvs];
    for (size_t& w : wide) w = kUnset;
    SLUICE_RETURN_IF_ERROR(
        sluice::test(static_cast<Request*>(request), done, sizes != nullptr ? wide : nullptr));
    if (*done && sizes != nullptr) {
      for (int i = 0; i < kMaxRecvs && wide[i] != kUnset; ++i) {
        if (wide[i] > static_cast<size_t>(INT_MAX)) {
          return Status(Code::kInternalError,
                        "received size " + std::to_string(wide[i]) + " does not fit in int");
        }
        sizes[i] = static_cast<int>(wide[i]);
      }
    }
    return Status::ok();
  });
}

// ---- Teardown ----------------------------------------------------------------------------------
// Closing NULL is a no-op, as in NCCL's own IB plugin (NCCL's error paths close "if any").

// sluiceExt_v1.commStats: counters of a live send/receive comm. 0 = success.
int comm_stats(void* comm, sluiceCommStats_v1_t* out) noexcept {
  try {
    if (comm == nullptr || out == nullptr) return 1;
    sluice::CommStats st;
    if (!sluice::comm_stats(comm, &st).is_ok()) return 1;
    *out = sluiceCommStats_v1_t{};
    out->messages = st.messages;
    out->wrs = st.wrs;
    out->doorbells = st.doorbells;
    out->ctsWrites = st.cts_writes;
    out->ctsEntries = st.cts_entries;
    out->ctsProbes = st.cts_probes;
    out->arImmWrites = st.ar_imm_writes;
    out->eagerMessages = st.eager;
    return 0;
  } catch (...) {
    return 1;
  }
}

int comm_stats_v2(void* comm, sluiceCommStats_v2_t* out) noexcept {
  try {
    if (comm == nullptr || out == nullptr) return 1;
    const size_t room = out->size;
    if (room < offsetof(sluiceCommStats_v2_t, nMembers)) return 1;
    if (comm_stats(comm, &out->comm) != 0) return 1;
    sluice::CommStatsV2 st;
    if (!sluice::comm_stats_v2(comm, &st).is_ok()) return 1;
    sluiceCommStats_v2_t full{};
    full.size = room;
    full.comm = out->comm;
    full.nMembers = std::min(st.nmembers, SLUICE_EXT_MAX_MEMBERS);
    for (int m = 0; m < full.nMembers; ++m) {
      const sluice::MemberStats& s = st.members[m];
      sluiceMemberStats_v2_t& d = full.members[m];
      d.dev = s.dev;
      std::snprintf(d.name, sizeof d.name, "%s", s.name != nullptr ? s.name : "");
      d.bytes = s.bytes;
      d.wrs = s.wrs;
      d.doorbells = s.doorbells;
      d.completions = s.completions;
      static_assert(SLUICE_EXT_LATENCY_BUCKETS == sluice::kLatencyBuckets);
      for (int b = 0; b < SLUICE_EXT_LATENCY_BUCKETS; ++b) d.latency[b] = s.latency[b];
      d.nQps = s.nqps;
      for (int q = 0; q < s.nqps; ++q) d.qpNum[q] = s.qpn[q];
    }
    full.flushQpNum = st.flush_qpn;
    static_assert(SLUICE_PATH_UP == 0 && SLUICE_PATH_RAMPING == 5,
                  "PathStats::state numbers (core/include/sluice/core/api.h)");
    full.failover = st.failover ? 1 : 0;
    full.nPaths = std::min(st.npaths, SLUICE_EXT_MAX_MEMBERS);
    for (int p = 0; p < full.nPaths; ++p) {
      const sluice::PathStats& s = st.paths[p];
      sluicePathStats_v2_t& d = full.paths[p];
      d.state = s.state;
      d.localMember = s.local_member;
      d.remoteMember = s.remote_member;
      d.sharePct = s.share_pct;
      d.epoch = s.epoch;
      d.failovers = s.failovers;
      d.failbacks = s.failbacks;
      d.attempts = s.attempts;
      d.bytesReplayed = s.bytes_replayed;
      d.chainsReplayed = s.chains_replayed;
      d.lastStallMs = s.last_stall_ms;
    }
    static_assert(SLUICE_EAGER_OFF == static_cast<int>(sluice::EagerState::kOff) &&
                  SLUICE_EAGER_WITHOUT == static_cast<int>(sluice::EagerState::kWithout));
    full.eager = static_cast<int>(st.eager);
    full.eagerReplays = st.eager_replays;
    std::memcpy(out, &full, std::min(room, sizeof full));
    return 0;
  } catch (...) {
    return 1;
  }
}

ncclResult_t close_send(void* send_comm) noexcept {
  return guard("closeSend", [&]() -> Status {
    if (send_comm == nullptr) return Status::ok();
    return sluice::close_send(static_cast<SendComm*>(send_comm));
  });
}

ncclResult_t close_recv(void* recv_comm) noexcept {
  return guard("closeRecv", [&]() -> Status {
    if (recv_comm == nullptr) return Status::ok();
    return sluice::close_recv(static_cast<RecvComm*>(recv_comm));
  });
}

ncclResult_t close_listen(void* listen_comm) noexcept {
  return guard("closeListen", [&]() -> Status {
    if (listen_comm == nullptr) return Status::ok();
    forget_listen(listen_comm);
    return sluice::close_listen(static_cast<ListenComm*>(listen_comm));
  });
}

// Hints only (peers, flows, op/algo/proto). Sluice sizes nothing from them yet, like NCCL's IB.
ncclResult_t set_net_attr(void* ctx, const ncclNetAttr_v11_t* attr) noexcept {
  return guard("setNetAttr", [&]() -> Status {
    if (ctx == nullptr) return invalid("ctx is NULL");
    if (attr == nullptr) return invalid("netAttr is NULL");
    return Status::ok();
  });
}

}  // namespace sluice::plugin
