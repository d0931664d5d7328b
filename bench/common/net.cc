#include "net.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <random>

#include "profile.h"

#ifndef SLUICE_PLUGIN_DEFAULT_PATH
#define SLUICE_PLUGIN_DEFAULT_PATH "libnccl-net-sluice.so"
#endif

namespace bench {

namespace {

int g_log_level = -1;  // NCCL_DEBUG as a ncclDebugLogLevel; WARN by default

void logger(ncclDebugLogLevel level, unsigned long /*flags*/, const char* file, int line,
            const char* fmt, ...) {
  if (g_log_level < 0) {
    const char* d = getenv("NCCL_DEBUG");
    g_log_level = NCCL_LOG_WARN;
    if (d && !strcasecmp(d, "INFO")) g_log_level = NCCL_LOG_INFO;
    if (d && !strcasecmp(d, "TRACE")) g_log_level = NCCL_LOG_TRACE;
    if (d && !strcasecmp(d, "VERSION")) g_log_level = NCCL_LOG_VERSION;
  }
  if (level > g_log_level) return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char* lv = level == NCCL_LOG_WARN ? "WARN" : level == NCCL_LOG_INFO ? "INFO" : "TRACE";
  fprintf(stderr, "[pid %d] NET %s %s:%d %s\n", static_cast<int>(getpid()), lv, file ? file : "?",
          line, msg);
}

}  // namespace

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
  t_ = static_cast<const ncclNet_v11_t*>(dlsym(lib_, "ncclNetPlugin_v11"));
  if (!t_) fail("%s exports no ncclNetPlugin_v11", path_.c_str());
  ext_ = static_cast<const sluiceExt_v1_t*>(dlsym(lib_, SLUICE_EXT_SYMBOL));
  if (ext_ && (ext_->version < 1 || !ext_->commStats)) ext_ = nullptr;
  ext2_ = static_cast<const sluiceExt_v2_t*>(dlsym(lib_, SLUICE_EXT_V2_SYMBOL));
  if (ext2_ && (ext2_->version < 2 || !ext2_->commStatsV2)) ext2_ = nullptr;
  ncclNetCommConfig_v11_t cfg{};
  cfg.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF;
  std::random_device rd;
  uint64_t comm_id = (static_cast<uint64_t>(rd()) << 32) | rd();
  check(t_->init(&ctx_, comm_id, &cfg, logger, prof_callback()),
        "init(&ctx, commId, {tc=-1}, logger, profiler)");
  inited_ = true;
  check(t_->devices(&ndev_), "devices()");
  if (ndev_ <= 0) fail("plugin %s reports %d devices", path_.c_str(), ndev_);
  props_.resize(ndev_);
  for (int d = 0; d < ndev_; ++d) {
    memset(&props_[d], 0, sizeof props_[d]);
    check(t_->getProperties(d, &props_[d]), strf("getProperties(%d)", d));
  }
  // sluice-bench --fuse a,b (SLUICE_BENCH_FUSE): fuse those devices as NCCL would (makeVDevice,
  // devices() again, getProperties of the new one); the fused device is then named "a+b".
  if (const char* fuse = getenv("SLUICE_BENCH_FUSE"); fuse != nullptr && *fuse != '\0') {
    if (t_->makeVDevice == nullptr) fail("--fuse: plugin %s has no makeVDevice", path_.c_str());
    ncclNetVDeviceProps_v11_t vp{};
    std::string list = fuse;
    size_t at = 0;
    while (at <= list.size()) {
      size_t end = list.find(',', at);
      if (end == std::string::npos) end = list.size();
      if (vp.ndevs >= NCCL_NET_MAX_DEVS_PER_NIC_V11) fail("--fuse: too many devices in %s", fuse);
      vp.devs[vp.ndevs++] = find_device(list.substr(at, end - at));
      at = end + 1;
    }
    int d = -1;
    check(t_->makeVDevice(&d, &vp), strf("makeVDevice(%s)", fuse));
    check(t_->devices(&ndev_), "devices() after makeVDevice");
    props_.resize(ndev_);
    for (int k = 0; k < ndev_; ++k) {
      memset(&props_[k], 0, sizeof props_[k]);
      check(t_->getProperties(k, &props_[k]), strf("getProperties(%d)", k));
    }
  }
}

Net::~Net() {
  if (inited_ && t_) {
    ncclResult_t r = t_->finalize(ctx_);
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
    fail("plugin %s: %s returned %s (%d)", t_ && t_->name ? t_->name : "?", call.c_str(),
         nccl_result_str(r), static_cast<int>(r));
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
  check(t_->listen(ctx_, dev, h.bytes, lc), strf("listen(ctx, dev=%d)", dev));
  if (!*lc) fail("listen(dev=%d) returned ncclSuccess with a NULL listenComm", dev);
  return h;
}

void* Net::connect_once(int dev, Handle* h) {
  void* c = nullptr;
  ncclNetDeviceHandle_v11_t* dh = nullptr;
  check(t_->connect(ctx_, dev, h->bytes, &c, &dh), strf("connect(ctx, dev=%d, handle)", dev));
  return c;
}

void* Net::accept_once(void* lc) {
  void* c = nullptr;
  ncclNetDeviceHandle_v11_t* dh = nullptr;
  check(t_->accept(lc, &c, &dh), "accept(listenComm)");
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
  check(t_->regMr(comm, data, size, NCCL_PTR_HOST, &mh),
        strf("regMr(comm, %p, %zu, NCCL_PTR_HOST)", data, size));
  return mh;
}

void Net::dereg(void* comm, void* mh) {
  check(t_->deregMr(comm, mh), "deregMr");
}

void* Net::isend(void* comm, void* data, size_t size, int tag, void* mh) {
  void* req = nullptr;
  check(t_->isend(comm, data, size, tag, mh, prof_parent(), &req),
        strf("isend(comm, %p, %zu, tag=%d)", data, size, tag));
  return req;
}

void* Net::irecv(void* comm, void* data, size_t size, int tag, void* mh) {
  void* req = nullptr;
  size_t sz = size;
  int tg = tag;
  void* d = data;
  void* m = mh;
  void* ph = prof_parent();
  check(t_->irecv(comm, 1, &d, &sz, &tg, &m, ph != nullptr ? &ph : nullptr, &req),
        strf("irecv(comm, n=1, %p, %zu, tag=%d)", data, size, tag));
  return req;
}

bool Net::test(void* req, size_t* size) {
  int done = 0;
  int sizes[64] = {};  // NCCL passes an int[NCCL_NET_MAX_REQUESTS]-sized array
  check(t_->test(req, &done, sizes), "test(request)");
  if (done && size) *size = static_cast<size_t>(sizes[0]);
  return done != 0;
}

void Net::close_send(void* c) {
  check(t_->closeSend(c), "closeSend");
}
void Net::close_recv(void* c) {
  check(t_->closeRecv(c), "closeRecv");
}
void Net::close_listen(void* c) {
  check(t_->closeListen(c), "closeListen");
}

}  // namespace bench
