#include "net.h"

#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <vector>

#include "profile.h"

#ifndef SLUICE_PLUGIN_DEFAULT_PATH
#define SLUICE_PLUGIN_DEFAULT_PATH "libnccl-net-sluice.so"
#endif

namespace bench {

namespace {

int g_log_level = -1;  // NCCL_DEBUG as a ncclDebugLogLevel; WARN by default
std::mutex g_warn_mu;
std::string g_last_warn;

void logger(ncclDebugLogLevel level, unsigned long /*flags*/, const char* file, int line,
            const char* fmt, ...) {
  if (g_log_level < 0) {
    const char* d = getenv("NCCL_DEBUG");
    g_log_level = NCCL_LOG_WARN;
    if (d && !strcasecmp(d, "INFO")) g_log_level = NCCL_LOG_INFO;
    if (d && !strcasecmp(d, "TRACE")) g_log_level = NCCL_LOG_TRACE;
    if (d && !strcasecmp(d, "VERSION")) g_log_level = NCCL_LOG_VERSION;
  }
  if (level > g_log_level && level != NCCL_LOG_WARN) return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (level == NCCL_LOG_WARN) {
    std::lock_guard<std::mutex> lk(g_warn_mu);
    g_last_warn = msg;
  }
  if (level > g_log_level) return;
  const char* lv = level == NCCL_LOG_WARN ? "WARN" : level == NCCL_LOG_INFO ? "INFO" : "TRACE";
  fprintf(stderr, "[pid %d] NET %s %s:%d %s\n", static_cast<int>(getpid()), lv, file ? file : "?",
          line, msg);
}

uint64_t thread_cpu_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

// Every call of the table, through whichever version was found (the signatures differ only in
// the property and vDevice types, which these calls do not pass).
#define SLUICE_NET_CALL(fn, ...) (t12_ != nullptr ? t12_->fn(__VA_ARGS__) : t_->fn(__VA_ARGS__))

std::string last_plugin_warn() {
  std::lock_guard<std::mutex> lk(g_warn_mu);
  return g_last_warn;
}

double cpu_clock_cost_ns() {
  std::vector<uint64_t> d(1001);
  for (auto& v : d) {
    const uint64_t a = thread_cpu_ns();
    v = thread_cpu_ns() - a;
  }
  std::nth_element(d.begin(), d.begin() + d.size() / 2, d.end());
  return static_cast<double>(d[d.size() / 2]);
}

const char* nccl_result_str(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "ncclSuccess";
    case ncclUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case ncclSystemError:
      return "ncclSystemError";
    case ncclInternalError:
      return "ncclInternalError";
    case ncclInvalidArgument:
      return "ncclInvalidArgument";
    case ncclInvalidUsage:
      return "ncclInvalidUsage";
    case ncclRemoteError:
      return "ncclRemoteError";
    case ncclInProgress:
      return "ncclInProgress";
    default:
      return "ncclResult(?)";
  }
}

Net::Net(const std::string& spec_in) {
  std::string spec = spec_in;
  if (spec.empty()) {
    const char* e = getenv("NCCL_NET_PLUGIN");
    spec = e && *e ? e : SLUICE_PLUGIN_DEFAULT_PATH;
  }
  // NCCL's rule: dlopen the entry as given; if that fails and it has no '/' and is not lib*.so,
  // try libnccl-net-<entry>.so.
  std::string tried = spec;
  lib_ = dlopen(spec.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::string err = lib_ ? "" : dlerror();
  path_ = spec;
  bool plain =
      spec.find('/') == std::string::npos && !(spec.rfind("lib", 0) == 0 && spec.size() > 3 &&
                                               spec.compare(spec.size() - 3, 3, ".so") == 0);
  if (!lib_ && plain) {
    path_ = "libnccl-net-" + spec + ".so";
    lib_ = dlopen(path_.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib_) err += std::string("; ") + dlerror();
    tried += ", " + path_;
  }
  if (!lib_) fail("cannot load the net plugin (tried %s): %s", tried.c_str(), err.c_str());
  // NCCL 2.30 takes the newest table it knows: v12, else v11 (2.28, 2.29).
  t12_ = static_cast<const ncclNet_v12_t*>(dlsym(lib_, "ncclNetPlugin_v12"));
  if (t12_ == nullptr) t_ = static_cast<const ncclNet_v11_t*>(dlsym(lib_, "ncclNetPlugin_v11"));
  if (!t_ && !t12_)
    fail("%s exports neither ncclNetPlugin_v12 nor ncclNetPlugin_v11", path_.c_str());
  ext_ = static_cast<const sluiceExt_v1_t*>(dlsym(lib_, SLUICE_EXT_SYMBOL));
  if (ext_ && (ext_->version < 1 || !ext_->commStats)) ext_ = nullptr;
  ext2_ = static_cast<const sluiceExt_v2_t*>(dlsym(lib_, SLUICE_EXT_V2_SYMBOL));
  if (ext2_ && (ext2_->version < 2 || !ext2_->commStatsV2)) ext2_ = nullptr;
  ncclNetCommConfig_v11_t cfg{};
  cfg.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF;
  std::random_device rd;
  uint64_t comm_id = (static_cast<uint64_t>(rd()) << 32) | rd();
  check(SLUICE_NET_CALL(init, &ctx_, comm_id, &cfg, logger, prof_callback()),
        "init(&ctx, commId, {tc=-1}, logger, profiler)");
  inited_ = true;
  check(SLUICE_NET_CALL(devices, &ndev_), "devices()");
  if (ndev_ <= 0) fail("plugin %s reports %d devices", path_.c_str(), ndev_);
  props_.resize(ndev_);
  for (int d = 0; d < ndev_; ++d) props_of(d, &props_[d]);
  // sluice-bench --fuse a,b (SLUICE_BENCH_FUSE): fuse those devices as NCCL would (makeVDevice,
  // devices() again, getProperties of the new one); the fused device is then named "a+b".
  if (const char* fuse = getenv("SLUICE_BENCH_FUSE"); fuse != nullptr && *fuse != '\0') {
    if ((t12_ ? t12_->makeVDevice == nullptr : t_->makeVDevice == nullptr))
      fail("--fuse: plugin %s has no makeVDevice", path_.c_str());
    ncclNetVDeviceProps_v12_t vp{};
    std::string list = fuse;
    size_t at = 0;
    while (at <= list.size()) {
      size_t end = list.find(',', at);
      if (end == std::string::npos) end = list.size();
      const int most = t12_ ? NCCL_NET_MAX_DEVS_PER_NIC_V12 : NCCL_NET_MAX_DEVS_PER_NIC_V11;
      if (vp.ndevs >= most) fail("--fuse: too many devices in %s", fuse);
      vp.devs[vp.ndevs++] = find_device(list.substr(at, end - at));
      at = end + 1;
    }
    int d = -1;
    if (t12_ != nullptr) {
      check(t12_->makeVDevice(&d, &vp), strf("makeVDevice(%s)", fuse));
    } else {
      ncclNetVDeviceProps_v11_t v11{};
      v11.ndevs = vp.ndevs;
      for (int k = 0; k < vp.ndevs; ++k) v11.devs[k] = vp.devs[k];
      check(t_->makeVDevice(&d, &v11), strf("makeVDevice(%s)", fuse));
    }
    check(SLUICE_NET_CALL(devices, &ndev_), "devices() after makeVDevice");
    props_.resize(ndev_);
    for (int k = 0; k < ndev_; ++k) props_of(k, &props_[k]);
  }
}

// v12's properties differ from v11's only in vProps (8 members instead of 4).
void Net::props_of(int dev, ncclNetProperties_v11_t* p) const {
  memset(p, 0, sizeof *p);
  if (t12_ == nullptr) {
    check(t_->getProperties(dev, p), strf("getProperties(%d)", dev));
    return;
  }
  ncclNetProperties_v12_t q;
  memset(&q, 0, sizeof q);
  check(t12_->getProperties(dev, &q), strf("getProperties(%d)", dev));
  p->name = q.name;
  p->pciPath = q.pciPath;
  p->guid = q.guid;
  p->ptrSupport = q.ptrSupport;
  p->regIsGlobal = q.regIsGlobal;
  p->forceFlush = q.forceFlush;
  p->speed = q.speed;
  p->port = q.port;
  p->latency = q.latency;
  p->maxComms = q.maxComms;
  p->maxRecvs = q.maxRecvs;
  p->netDeviceType = q.netDeviceType;
  p->netDeviceVersion = q.netDeviceVersion;
  p->vProps.ndevs = std::min(q.vProps.ndevs, NCCL_NET_MAX_DEVS_PER_NIC_V11);
  for (int k = 0; k < p->vProps.ndevs; ++k) p->vProps.devs[k] = q.vProps.devs[k];
  p->maxP2pBytes = q.maxP2pBytes;
  p->maxCollBytes = q.maxCollBytes;
  p->maxMultiRequestSize = q.maxMultiRequestSize;
}

Net::~Net() {
  if (inited_ && (t_ || t12_)) {
    ncclResult_t r = SLUICE_NET_CALL(finalize, ctx_);
    if (r != ncclSuccess) fprintf(stderr, "warning: finalize returned %s\n", nccl_result_str(r));
  }
  // Like NCCL (NCCL_NET_PLUGIN_REF_COUNT=0) we unload the library after the last finalize.
  if (lib_) dlclose(lib_);
}

bool Net::comm_stats(void* comm, sluiceCommStats_v1_t* out) const {
  *out = sluiceCommStats_v1_t{};
  return ext_ && comm && ext_->commStats(comm, out) == 0;
}

bool Net::comm_stats_v2(void* comm, sluiceCommStats_v2_t* out) const {
  *out = sluiceCommStats_v2_t{};
  out->size = sizeof *out;
  return ext2_ && comm && ext2_->commStatsV2(comm, out) == 0;
}

void Net::check(ncclResult_t r, const std::string& call) const {
  if (r != ncclSuccess)
    fail("plugin %s: %s returned %s (%d)", name() ? name() : "?", call.c_str(), nccl_result_str(r),
         static_cast<int>(r));
}

int Net::find_device(const std::string& spec) const {
  for (int d = 0; d < ndev_; ++d)
    if (props_[d].name && spec == props_[d].name) return d;
  char* end = nullptr;
  long v = strtol(spec.c_str(), &end, 10);
  if (!spec.empty() && end && *end == '\0' && v >= 0 && v < ndev_) return static_cast<int>(v);
  std::string names;
  for (int d = 0; d < ndev_; ++d) names += strf(" %d=%s", d, props_[d].name ? props_[d].name : "?");
  fail("unknown device '%s' (plugin devices:%s)", spec.c_str(), names.c_str());
}

Handle Net::listen(int dev, void** lc) {
  Handle h{};
  *lc = nullptr;
  check(SLUICE_NET_CALL(listen, ctx_, dev, h.bytes, lc), strf("listen(ctx, dev=%d)", dev));
  if (!*lc) fail("listen(dev=%d) returned ncclSuccess with a NULL listenComm", dev);
  return h;
}

void* Net::connect_once(int dev, Handle* h) {
  void* c = nullptr;
  ncclNetDeviceHandle_v11_t* dh = nullptr;
  check(SLUICE_NET_CALL(connect, ctx_, dev, h->bytes, &c, &dh),
        strf("connect(ctx, dev=%d, handle)", dev));
  return c;
}

void* Net::accept_once(void* lc) {
  void* c = nullptr;
  ncclNetDeviceHandle_v11_t* dh = nullptr;
  check(SLUICE_NET_CALL(accept, lc, &c, &dh), "accept(listenComm)");
  return c;
}

void* Net::connect(int dev, Handle* h, const Deadline& dl) {
  for (;;) {
    if (void* c = connect_once(dev, h)) return c;
    dl.check();
  }
}

void* Net::accept(void* lc, const Deadline& dl) {
  for (;;) {
    if (void* c = accept_once(lc)) return c;
    dl.check();
  }
}

void* Net::reg(void* comm, void* data, size_t size) {
  void* mh = nullptr;
  check(SLUICE_NET_CALL(regMr, comm, data, size, NCCL_PTR_HOST, &mh),
        strf("regMr(comm, %p, %zu, NCCL_PTR_HOST)", data, size));
  return mh;
}

void Net::dereg(void* comm, void* mh) {
  check(SLUICE_NET_CALL(deregMr, comm, mh), "deregMr");
}

void* Net::isend(void* comm, void* data, size_t size, int tag, void* mh) {
  void* req = nullptr;
  void* ph = prof_parent();
  const uint64_t t0 = timing_ ? thread_cpu_ns() : 0;
  const ncclResult_t r = SLUICE_NET_CALL(isend, comm, data, size, tag, mh, ph, &req);
  if (timing_) {
    cpu_.ns[CallCpu::kIsend] += thread_cpu_ns() - t0;
    ++cpu_.calls[CallCpu::kIsend];
  }
  if (r != ncclSuccess) check(r, strf("isend(comm, %p, %zu, tag=%d)", data, size, tag));
  return req;
}

void* Net::irecv(void* comm, void* data, size_t size, int tag, void* mh) {
  void* req = nullptr;
  size_t sz = size;
  int tg = tag;
  void* d = data;
  void* m = mh;
  void* ph = prof_parent();
  const uint64_t t0 = timing_ ? thread_cpu_ns() : 0;
  const ncclResult_t r =
      SLUICE_NET_CALL(irecv, comm, 1, &d, &sz, &tg, &m, ph != nullptr ? &ph : nullptr, &req);
  if (timing_) {
    cpu_.ns[CallCpu::kIrecv] += thread_cpu_ns() - t0;
    ++cpu_.calls[CallCpu::kIrecv];
  }
  if (r != ncclSuccess) check(r, strf("irecv(comm, n=1, %p, %zu, tag=%d)", data, size, tag));
  return req;
}

bool Net::test(void* req, size_t* size) {
  int done = 0;
  int sizes[64] = {};  // NCCL passes an int[NCCL_NET_MAX_REQUESTS]-sized array
  const uint64_t t0 = timing_ ? thread_cpu_ns() : 0;
  const ncclResult_t r = SLUICE_NET_CALL(test, req, &done, sizes);
  if (timing_) {
    cpu_.ns[CallCpu::kTest] += thread_cpu_ns() - t0;
    ++cpu_.calls[CallCpu::kTest];
  }
  check(r, "test(request)");
  if (done && size) *size = static_cast<size_t>(sizes[0]);
  return done != 0;
}

void Net::close_send(void* c) {
  check(SLUICE_NET_CALL(closeSend, c), "closeSend");
}
void Net::close_recv(void* c) {
  check(SLUICE_NET_CALL(closeRecv, c), "closeRecv");
}
void Net::close_listen(void* c) {
  check(SLUICE_NET_CALL(closeListen, c), "closeListen");
}

}  // namespace bench
