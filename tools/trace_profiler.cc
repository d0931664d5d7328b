// libsluice-trace-profiler.so: a small NCCL profiler plugin (ncclProfiler_v5, our own declarations
// in sluice/nccl_profiler_abi.h) that records the net plugin's NET/IB QP events (Sluice's, or
// NET/IB's when NCCL is built with NET_PROFILER=1) and writes them as a Chrome trace (JSON object
// format, which chrome://tracing and Perfetto open): one process per rank, one track per QP, one
// complete ("X") event per work request from its start to its stop.
//
//   NCCL_PROFILER_PLUGIN=/path/libsluice-trace-profiler.so SLUICE_TRACE_FILE=trace.json ...
//   sluice-bench --trace trace.json ...   (sluice-bench stands in for NCCL's core)
//
// SLUICE_TRACE_FILE: where finalize writes ("%p" becomes the pid; default
// sluice-trace-<pid>.json). SLUICE_TRACE_MAX_EVENTS: events kept (default 262144; later ones are
// counted as dropped). Events are stored in one array allocated at the first init: start/stop
// never allocate or lock. Timestamps are the steady clock (CLOCK_MONOTONIC) in microseconds, the
// same in every process of a machine, so the traces of several ranks line up.
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "sluice/nccl_profiler_abi.h"

namespace {

struct Event {
  int64_t start_ns = 0;
  std::atomic<int64_t> stop_ns{0};
  int rank = 0;
  int device = 0;
  int opcode = 0;
  int qpn = 0;
  uint64_t wr_id = 0;
  size_t length = 0;
};

struct Ctx {
  uint64_t comm_id = 0;
  int rank = 0;
};

std::mutex g_mu;  // init / finalize only
int g_ctxs = 0;
Event* g_events = nullptr;
size_t g_cap = 0;
std::atomic<size_t> g_next{0};
std::atomic<uint64_t> g_dropped{0};
std::atomic<uint64_t> g_other{0};  // net events of a plugin type or version not understood

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const char* opcode_name(int op) {
  switch (op) {
    case 0:
      return "RDMA_WRITE";
    case 1:
      return "RDMA_WRITE_WITH_IMM";
    case 2:
      return "SEND";
    case 3:
      return "SEND_WITH_IMM";
    case 4:
      return "RDMA_READ";
    default:
      return "WR";
  }
}

std::string out_path() {
  const char* v = std::getenv("SLUICE_TRACE_FILE");
  std::string p = v != nullptr && *v != '\0' ? v : "sluice-trace-%p.json";
  const size_t at = p.find("%p");
  if (at != std::string::npos) p.replace(at, 2, std::to_string(getpid()));
  return p;
}

void write_trace() {
  const std::string path = out_path();
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "sluice-trace-profiler: cannot write %s: %s\n", path.c_str(),
                 std::strerror(errno));
    return;
  }
  const size_t n = std::min(g_next.load(), g_cap);
  const int pid = static_cast<int>(getpid());
  std::set<std::pair<int, int>> tracks;  // (rank, qpn)
  std::fprintf(f,
               "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"source\":\"sluice-trace-profiler\","
               "\"dropped\":%llu,\"unknown\":%llu},\"traceEvents\":[\n",
               static_cast<unsigned long long>(g_dropped.load()),
               static_cast<unsigned long long>(g_other.load()));
  bool first = true;
  size_t open = 0;
  for (size_t i = 0; i < n; ++i) {
    const Event& e = g_events[i];
    const int64_t stop = e.stop_ns.load(std::memory_order_acquire);
    if (stop == 0) {
      ++open;
      continue;
    }
    tracks.insert({e.rank, e.qpn});
    std::fprintf(f,
                 "%s{\"name\":\"%s %zu B\",\"cat\":\"net\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
                 "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"rank\":%d,\"device\":%d,\"qp\":%d,"
                 "\"wr_id\":\"0x%llx\",\"opcode\":%d,\"length\":%zu}}",
                 first ? "" : ",\n", opcode_name(e.opcode), e.length, e.rank, e.qpn,
                 e.start_ns / 1e3, (stop - e.start_ns) / 1e3, e.rank, e.device, e.qpn,
                 static_cast<unsigned long long>(e.wr_id), e.opcode, e.length);
    first = false;
  }
  std::set<int> ranks;
  for (const auto& [rank, qpn] : tracks) {
    if (ranks.insert(rank).second) {
      std::fprintf(f,
                   "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":"
                   "\"rank %d (pid %d)\"}}",
                   first ? "" : ",\n", rank, rank, pid);
      first = false;
    }
    std::fprintf(f,
                 "%s{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{"
                 "\"name\":\"QP %d\"}}",
                 first ? "" : ",\n", rank, qpn, qpn);
    first = false;
  }
  std::fprintf(f, "\n]}\n");
  std::fclose(f);
  std::fprintf(stderr,
               "sluice-trace-profiler: wrote %s: %zu work requests on %zu QP track(s) (%zu never "
               "stopped, %llu dropped)\n",
               path.c_str(), n - open, tracks.size(), open,
               static_cast<unsigned long long>(g_dropped.load()));
}

ncclResult_t init(void** context, uint64_t comm_id, int* mask, const char* /*name*/, int /*nnodes*/,
                  int /*nranks*/, int rank, ncclDebugLogger_t /*log*/) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_events == nullptr) {
    const char* v = std::getenv("SLUICE_TRACE_MAX_EVENTS");
    const long cap = v != nullptr ? std::strtol(v, nullptr, 10) : 0;
    g_cap = cap > 0 ? static_cast<size_t>(cap) : size_t{262144};
    g_events = new (std::nothrow) Event[g_cap];
    if (g_events == nullptr) return ncclSystemError;  // NCCL then runs without this profiler
  }
  auto* c = new (std::nothrow) Ctx{comm_id, rank};
  if (c == nullptr) return ncclSystemError;
  ++g_ctxs;
  *context = c;
  *mask = SLUICE_NCCL_PROFILE_NET_PLUGIN;  // net events only; other types are never started
  return ncclSuccess;
}

ncclResult_t start_event(void* context, void** handle, sluiceNcclProfilerEventDescr_v5_t* d) {
  *handle = nullptr;
  if (d == nullptr || d->type != SLUICE_NCCL_PROFILE_NET_PLUGIN) return ncclSuccess;
  const int64_t id = d->netPlugin.id;
  if ((id & NCCL_PROFILER_NET_TYPE_MASK) != NCCL_PROFILER_NET_TYPE_IB ||
      (id & NCCL_PROFILER_NET_VER_MASK) != NCCL_PROFILER_NET_IB_VER ||
      d->netPlugin.data == nullptr) {
    g_other.fetch_add(1, std::memory_order_relaxed);
    return ncclSuccess;
  }
  const auto* ib = static_cast<const ncclProfilerNetIbDescr_v1_t*>(d->netPlugin.data);
  if (ib->type != ncclProfileQp) return ncclSuccess;
  const size_t i = g_next.fetch_add(1, std::memory_order_relaxed);
  if (i >= g_cap) {
    g_dropped.fetch_add(1, std::memory_order_relaxed);
    return ncclSuccess;
  }
  Event& e = g_events[i];
  e.rank = context != nullptr ? static_cast<Ctx*>(context)->rank : d->rank;
  e.device = ib->qp.device;
  e.opcode = ib->qp.opcode;
  e.qpn = ib->qp.qpNum;
  e.wr_id = ib->qp.wr_id;
  e.length = ib->qp.length;
  e.start_ns = now_ns();
  *handle = &e;
  return ncclSuccess;
}

ncclResult_t stop_event(void* handle) {
  if (handle == nullptr) return ncclSuccess;
  static_cast<Event*>(handle)->stop_ns.store(now_ns(), std::memory_order_release);
  return ncclSuccess;
}

ncclResult_t record_state(void* /*handle*/, int /*state*/, void* /*args*/) {
  return ncclSuccess;
}

ncclResult_t finalize(void* context) {
  std::lock_guard<std::mutex> lk(g_mu);
  delete static_cast<Ctx*>(context);
  if (--g_ctxs == 0) write_trace();  // the events stay: a later init keeps appending
  return ncclSuccess;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const sluiceNcclProfiler_v5_t ncclProfiler_v5 = {
    .name = "sluice-trace",
    .init = init,
    .startEvent = start_event,
    .stopEvent = stop_event,
    .recordEventState = record_state,
    .finalize = finalize,
};
