// The benchmarks' stand-in for NCCL's profiler callback (profile.h).
#include "profile.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdio>

#include "sluice/nccl_profiler_abi.h"
#include "util.h"

namespace bench {
namespace {

ProfMode g_mode = ProfMode::kNone;
const sluiceNcclProfiler_v5_t* g_prof = nullptr;
void* g_ctx = nullptr;
int g_rank = 0;
std::atomic<uint64_t> g_starts{0}, g_stops{0};
// NCCL's phandle points at its proxy step's {step event handle, sub args}; ours only has to be a
// stable non-NULL address.
char g_parent_token;
char g_event_token;  // the handle `count` returns

ncclResult_t count_cb(void** eHandle, int type, void* pHandle, int64_t /*id*/, void* /*data*/) {
  if (type == ncclProfilerNetEventStart) {
    if (pHandle == nullptr) return ncclSuccess;  // NCCL would crash: counted as never started
    g_starts.fetch_add(1, std::memory_order_relaxed);
    *eHandle = &g_event_token;
  } else if (type == ncclProfilerNetEventStop) {
    if (*eHandle == &g_event_token) g_stops.fetch_add(1, std::memory_order_relaxed);
  }
  return ncclSuccess;
}

// NCCL's own callback with no profiler plugin loaded (src/plugin/profiler.cc tests
// `ncclProfiler != NULL` first): success, and the handle is left as the plugin gave it
// (tests/rdma/nccl_profiler_default.h has the same stand-in). Not even counted, as in NCCL.
ncclResult_t default_cb(void** /*eHandle*/, int /*type*/, void* /*pHandle*/, int64_t /*id*/,
                        void* /*data*/) {
  return ncclSuccess;
}

ncclResult_t trace_cb(void** eHandle, int type, void* pHandle, int64_t id, void* data) {
  if (type == ncclProfilerNetEventStart) {
    if (pHandle == nullptr) return ncclSuccess;
    sluiceNcclProfilerEventDescr_v5_t d{};
    d.type = SLUICE_NCCL_PROFILE_NET_PLUGIN;
    d.parentObj = nullptr;  // no proxy-step events here
    d.rank = g_rank;
    d.netPlugin.id = id;
    d.netPlugin.data = data;
    g_starts.fetch_add(1, std::memory_order_relaxed);
    (void)g_prof->startEvent(g_ctx, eHandle, &d);
  } else if (type == ncclProfilerNetEventStop) {
    g_stops.fetch_add(1, std::memory_order_relaxed);
    (void)g_prof->stopEvent(*eHandle);
  }
  return ncclSuccess;
}

}  // namespace

void prof_setup(ProfMode mode, const std::string& lib, int rank) {
  g_mode = mode;
  g_rank = rank;
  if (mode != ProfMode::kTrace) return;
  void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) fail("cannot load the profiler plugin %s: %s", lib.c_str(), dlerror());
  g_prof = static_cast<const sluiceNcclProfiler_v5_t*>(dlsym(h, SLUICE_NCCL_PROFILER_V5_SYMBOL));
  if (g_prof == nullptr) fail("%s exports no %s", lib.c_str(), SLUICE_NCCL_PROFILER_V5_SYMBOL);
  int mask = 0;
  if (g_prof->init(&g_ctx, 0x5b5b, &mask, "sluice-bench", 1, 2, rank, nullptr) != ncclSuccess)
    fail("profiler %s: init failed", lib.c_str());
  if ((mask & SLUICE_NCCL_PROFILE_NET_PLUGIN) == 0)
    fail("profiler %s does not ask for net plugin events (mask 0x%x)", lib.c_str(), mask);
}

ProfMode prof_mode() {
  return g_mode;
}

ncclProfilerCallback_t prof_callback() {
  switch (g_mode) {
    case ProfMode::kCount:
      return &count_cb;
    case ProfMode::kTrace:
      return &trace_cb;
    case ProfMode::kDefault:
      return &default_cb;
    default:
      return nullptr;
  }
}

void* prof_parent() {
  return g_mode == ProfMode::kNone ? nullptr : &g_parent_token;
}

void prof_finish() {
  if (g_prof != nullptr && g_ctx != nullptr) (void)g_prof->finalize(g_ctx);
  g_ctx = nullptr;
}

ProfCounts prof_counts() {
  return ProfCounts{g_starts.load(), g_stops.load()};
}

}  // namespace bench
