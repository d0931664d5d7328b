// NCCL profiler bridge (profiler.h).
#include "profiler.h"

#include <atomic>
#include <mutex>
#include <unordered_map>

#include "sluice/core/api.h"

namespace sluice::plugin {
namespace {

constexpr int64_t kIbPluginId = NCCL_PROFILER_NET_TYPE_IB | NCCL_PROFILER_NET_IB_VER;

std::atomic<ncclProfilerCallback_t> g_process{nullptr};

std::mutex g_listen_mu;
// Leaked on purpose (no static destructor races); control path only.
auto* g_listens = new std::unordered_map<void*, ncclProfilerCallback_t>();

ncclProfilerCallback_t callback_of(void* ctx) {
  return reinterpret_cast<ncclProfilerCallback_t>(ctx);
}

// core -> NCCL: start. NCCL's callback dereferences pHandle, so it is called only with the
// non-NULL parent core guarantees; it leaves *eHandle untouched when no profiler is loaded or the
// profiler's mask lacks ncclProfileNetPlugin, hence the NULL start value (= no event, no stop).
// The descriptor lives on the stack: NCCL passes it to the profiler's startEvent, which copies
// what it keeps (as for NET/IB).
void* start_event(void* ctx, void* parent, const WrEvent& ev) {
  ncclProfilerNetIbDescr_v1_t d{};
  d.type = ncclProfileQp;
  d.qp.device = ev.member;
  d.qp.wr_id = ev.wr_id;
  d.qp.opcode = ev.opcode;
  d.qp.qpNum = static_cast<int>(ev.qpn);
  d.qp.length = ev.length;
  void* handle = nullptr;
  (void)callback_of(ctx)(&handle, ncclProfilerNetEventStart, parent, kIbPluginId, &d);
  return handle;
}

// core -> NCCL: stop, only for a handle start returned (NCCL passes *eHandle to the profiler's
// stopEvent unchecked).
void stop_event(void* ctx, void* event) {
  void* handle = event;
  (void)callback_of(ctx)(&handle, ncclProfilerNetEventStop, nullptr, 0, nullptr);
}

}  // namespace

void set_process_profiler(ncclProfilerCallback_t cb) {
  if (cb != nullptr) g_process.store(cb, std::memory_order_release);
}

ncclProfilerCallback_t process_profiler() {
  return g_process.load(std::memory_order_acquire);
}

Status attach_profiler(void* comm, ncclProfilerCallback_t cb) {
  if (cb == nullptr || comm == nullptr) return Status::ok();
  ProfilerHook hook;
  hook.start = &start_event;
  hook.stop = &stop_event;
  hook.ctx = reinterpret_cast<void*>(cb);
  return set_profiler(comm, hook);
}

void remember_listen(void* listen_comm, ncclProfilerCallback_t cb) {
  if (listen_comm == nullptr || cb == nullptr) return;
  std::lock_guard<std::mutex> lock(g_listen_mu);
  (*g_listens)[listen_comm] = cb;
}

ncclProfilerCallback_t listen_profiler(void* listen_comm) {
  std::lock_guard<std::mutex> lock(g_listen_mu);
  auto it = g_listens->find(listen_comm);
  return it == g_listens->end() ? nullptr : it->second;
}

void forget_listen(void* listen_comm) {
  std::lock_guard<std::mutex> lock(g_listen_mu);
  g_listens->erase(listen_comm);
}

}  // namespace sluice::plugin
