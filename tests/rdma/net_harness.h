// Test harness for the plugin's exported tables: loads libnccl-net-sluice.so exactly as NCCL does
// (dlopen RTLD_NOW | RTLD_LOCAL, dlsym "ncclNetPlugin_vN"), wraps one table version behind a
// version-neutral `Net`, and provides bounded helpers (connect a pair, registered buffers,
// send/receive with verification). Every wait has a deadline and fails with a message.
#pragma once

#include <dirent.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "rdma_env.h"
#include "sluice/nccl_net_abi.h"

#ifndef SLUICE_PLUGIN_PATH
#error "SLUICE_PLUGIN_PATH must name the built plugin"
#endif

namespace nettest {

using Clock = std::chrono::steady_clock;

// Bound on every wait (connect, post, completion). SLUICE_TEST_DEADLINE_S overrides 60 s.
inline std::chrono::milliseconds wait_limit() {
  static const long s = [] {
    const char* v = std::getenv("SLUICE_TEST_DEADLINE_S");
    long x = v != nullptr ? std::strtol(v, nullptr, 10) : 0;
    return x > 0 ? x : 60L;
  }();
  return std::chrono::milliseconds(s * 1000);
}

inline long env_long(const char* name, long dflt) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return dflt;
  return std::strtol(v, nullptr, 10);
}

inline long long ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count();
}
inline long long ms_since(Clock::time_point t) {
  return ms_between(t, Clock::now());
}

// ---- Logger
// --------------------------------------------------------------------------------------

inline std::atomic<int> g_warns{0};
inline std::mutex g_last_warn_mu;
inline std::string g_last_warn;  // the text of the latest WARN (guarded by g_last_warn_mu)

inline std::vector<std::string> g_recent_warns;  // the latest 32 WARNs, oldest first (same lock)

inline std::string last_warn() {
  std::lock_guard<std::mutex> lk(g_last_warn_mu);
  return g_last_warn;
}

// The latest WARN that contains `part` (a call's own WARN, e.g. "NET/Sluice : connect:",
// whatever another thread, such as the async event thread, logged after it); "" when none.
inline std::string last_warn_with(const std::string& part) {
  std::lock_guard<std::mutex> lk(g_last_warn_mu);
  for (auto it = g_recent_warns.rbegin(); it != g_recent_warns.rend(); ++it) {
    if (it->find(part) != std::string::npos) return *it;
  }
  return "";
}

// INFO lines are kept (besides the level shown) while g_keep_info is set: tests that assert what
// the plugin logged at INFO read them with kept_info().
inline std::atomic<bool> g_keep_info{false};
inline std::mutex g_info_mu;
inline std::vector<std::string> g_info;  // guarded by g_info_mu

inline std::vector<std::string> kept_info() {
  std::lock_guard<std::mutex> lk(g_info_mu);
  return g_info;
}

// How many INFO lines are kept so far: a mark for info_with.
inline size_t info_size() {
  std::lock_guard<std::mutex> lk(g_info_mu);
  return g_info.size();
}

// The kept INFO lines from index `from` on that contain `text`.
inline std::vector<std::string> info_with(size_t from, const std::string& text) {
  std::lock_guard<std::mutex> lk(g_info_mu);
  std::vector<std::string> out;
  for (size_t i = from; i < g_info.size(); ++i)
    if (g_info[i].find(text) != std::string::npos) out.push_back(g_info[i]);
  return out;
}

inline void test_logger(ncclDebugLogLevel level, unsigned long /*flags*/, const char* file,
                        int line, const char* fmt, ...) {
  static const int max_level = env_long("SLUICE_TEST_LOG_LEVEL", NCCL_LOG_WARN);
  if (level == NCCL_LOG_WARN) g_warns.fetch_add(1);
  const bool keep = level == NCCL_LOG_INFO && g_keep_info.load();
  if (level > max_level && level != NCCL_LOG_WARN && level != NCCL_LOG_INFO) return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (level == NCCL_LOG_INFO) sluice::rdmatest::count_cm_choice(msg);
  if (level > max_level && level != NCCL_LOG_WARN && !keep) return;
  if (level == NCCL_LOG_WARN) {
    std::lock_guard<std::mutex> lk(g_last_warn_mu);
    g_last_warn = msg;
    if (g_recent_warns.size() == 32) g_recent_warns.erase(g_recent_warns.begin());
    g_recent_warns.emplace_back(msg);
  }
  if (keep) {
    std::lock_guard<std::mutex> lk(g_info_mu);
    g_info.emplace_back(msg);
  }
  if (level > max_level) return;
  // A WARN that the running test provokes on purpose (ExpectWarns scope) reads "[expected] ...".
  std::fprintf(stderr, "%s[nccl-log %d %s:%d] %s\n",
               level == NCCL_LOG_WARN ? sluice::rdmatest::warn_prefix() : "",
               static_cast<int>(level), file, line, msg);
}

// ---- Library
// -------------------------------------------------------------------------------------

struct Lib {
  void* handle = nullptr;
  std::string error;
  const ncclNet_v8_t* v8 = nullptr;
  const ncclNet_v9_t* v9 = nullptr;
  const ncclNet_v10_t* v10 = nullptr;
  const ncclNet_v11_t* v11 = nullptr;
  const ncclNet_v12_t* v12 = nullptr;

  // Loaded once per process and never closed (as NCCL keeps it while comms exist).
  static const Lib& get() {
    static const Lib lib = [] {
      Lib l;
      l.handle = dlopen(SLUICE_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
      if (l.handle == nullptr) {
        l.error = std::string("dlopen(" SLUICE_PLUGIN_PATH "): ") + dlerror();
        return l;
      }
      l.v8 = static_cast<const ncclNet_v8_t*>(dlsym(l.handle, "ncclNetPlugin_v8"));
      l.v9 = static_cast<const ncclNet_v9_t*>(dlsym(l.handle, "ncclNetPlugin_v9"));
      l.v10 = static_cast<const ncclNet_v10_t*>(dlsym(l.handle, "ncclNetPlugin_v10"));
      l.v11 = static_cast<const ncclNet_v11_t*>(dlsym(l.handle, "ncclNetPlugin_v11"));
      l.v12 = static_cast<const ncclNet_v12_t*>(dlsym(l.handle, "ncclNetPlugin_v12"));
      if (!l.v8 || !l.v9 || !l.v10 || !l.v11 || !l.v12) l.error = "a ncclNetPlugin_vN is missing";
      return l;
    }();
    return lib;
  }
};

// Version-neutral view of getProperties.
struct Props {
  std::string name;
  std::string pci_path;  // "" when NULL
  uint64_t guid = 0;
  int ptr_support = 0, reg_is_global = 0, force_flush = 0, speed = 0, port = 0;
  float latency = 0;
  int max_comms = 0, max_recvs = 0, dev_type = -1, dev_version = -1;
  int vndevs = -1, vdev0 = -1;
  std::vector<int> vdevs;  // vProps.devs[0..ndevs)
  size_t max_p2p = 0, max_coll = 0;
  int max_multi = -1, rail = -1, plane = -2;
};

template <typename T>
inline constexpr bool kHasCtx =
    std::is_same_v<T, ncclNet_v11_t> || std::is_same_v<T, ncclNet_v12_t>;

// The handles of NCCL's proxy steps (nccl_profiler_default.h): set on a Net, its isend / irecv
// pass them where phandle / phandles are NULL, and its test reports each request found done.
class StepHandles {
 public:
  virtual ~StepHandles() = default;
  virtual void* send_handle(void* comm) = 0;           // for an isend on comm (again if not taken)
  virtual void** recv_handles(void* comm, int n) = 0;  // for an irecv of n buffers on comm
  virtual void posted(void* comm, bool send, void* req, int n) = 0;  // a post took them
  virtual void done(void* req) = 0;                                  // test: req is done
};

// NCCL's proxy progresses every operation of its process in one loop: an isend that says "not now"
// is followed by the tests of the receives it has posted. A test that holds both ends of a
// connection in one thread must do the same, or a receiver that holds its clear-to-send back until
// its message lands in the eager ring (docs/eager.md, "Held clear-to-send") is never told that a
// send asks for it. So Net keeps the receives each thread posted and has not tested done, tests
// those of the calling thread when one of its isends is refused, and hands what such a test found
// (done, or an error) to the caller's own next test of the request. Each request is tested by one
// thread at a time; a comm's receives are forgotten when it is closed.
class PendingRecvs {
 public:
  static PendingRecvs& get() {
    static PendingRecvs p;
    return p;
  }
  void add(const void* net, void* comm, void* req, int n) {
    std::lock_guard<std::mutex> lk(mu_);
    // The plugin may hand out a request's address again once it was found done. One a progress
    // pass found (its result not yet taken by the caller) stays, ahead of the new one: the
    // caller's next test of that address is still of the old request (claim takes the oldest).
    // One not found was freed by a test that did not go through Net: it is gone.
    for (auto it = list_.begin(); it != list_.end();) {
      it = it->req == req && !it->busy && !it->found ? list_.erase(it) : std::next(it);
    }
    list_.push_back(Entry{net, comm, req, n, std::this_thread::get_id()});
  }
  // Before the caller tests `req`: kFound with its result (the entry is gone), kMine (the caller
  // tests it, then calls finish), or kUntracked.
  enum class Claim { kUntracked, kMine, kFound };
  Claim claim(void* req, ncclResult_t* r, int* sizes) {
    for (;;) {
      {
        std::lock_guard<std::mutex> lk(mu_);
        auto it = find(req);
        if (it == list_.end()) return Claim::kUntracked;
        if (!it->busy) {
          if (it->found) {
            *r = it->r;
            if (sizes != nullptr) std::memcpy(sizes, it->sizes, sizeof(int) * it->n);
            list_.erase(it);
            return Claim::kFound;
          }
          it->busy = true;
          return Claim::kMine;
        }
      }
      std::this_thread::yield();  // another thread's progress pass is testing it
    }
  }
  void finish(void* req, bool over) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = find(req);
    if (it == list_.end()) return;
    if (over) {
      list_.erase(it);
    } else {
      it->busy = false;
    }
  }
  // The progress pass of an isend said "not now": tests (with `test`) every receive this thread
  // posted on `net` that nobody is testing; returns the requests found done (for the step handles).
  template <typename Test>
  std::vector<void*> progress(const void* net, Test test) {
    std::vector<Entry*> mine;
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (Entry& e : list_) {
        if (e.net == net && !e.busy && !e.found && e.owner == std::this_thread::get_id()) {
          e.busy = true;
          mine.push_back(&e);
        }
      }
    }
    std::vector<void*> done_reqs;
    for (Entry* e : mine) {
      int done = 0;
      const ncclResult_t r = test(e->req, &done, e->sizes);
      std::lock_guard<std::mutex> lk(mu_);
      e->busy = false;
      if (r != ncclSuccess || done) {
        e->found = true;
        e->r = r;
        if (r == ncclSuccess) done_reqs.push_back(e->req);
      }
    }
    return done_reqs;
  }
  // closeRecv of `comm`, or the end of `net`: its receives are gone.
  void forget(const void* net, void* comm) {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto it = list_.begin(); it != list_.end();) {
      const bool gone = it->net == net && (comm == nullptr || it->comm == comm) && !it->busy;
      it = gone ? list_.erase(it) : std::next(it);
    }
  }

 private:
  struct Entry {
    const void* net;
    void* comm;
    void* req;
    int n;
    std::thread::id owner;
    bool busy = false;
    bool found = false;  // a progress pass saw it done (r: ncclSuccess) or failed (r: the error)
    ncclResult_t r = ncclSuccess;
    int sizes[NCCL_NET_MAX_REQUESTS] = {};
  };
  // The oldest entry of `req` (add keeps the order of posting).
  std::list<Entry>::iterator find(void* req) {
    return std::find_if(list_.begin(), list_.end(), [&](const Entry& e) { return e.req == req; });
  }
  std::mutex mu_;
  std::list<Entry> list_;
};

// One table version, with a per-comm ctx for v11/v12.
class Net {
 public:
  explicit Net(int version) : v_(version) {}
  Net(const Net&) = delete;
  Net& operator=(const Net&) = delete;
  ~Net() {
    if (ctx_ != nullptr) finalize();
    PendingRecvs::get().forget(this, nullptr);
  }

  int version() const { return v_; }
  void* ctx() const { return ctx_; }

  // v10+: the profiler callback init passes (set before init), and the profiler handles the next
  // isend / irecv pass (NCCL's phandle / phandles; NULL = none, as before).
  ncclProfilerCallback_t profiler = nullptr;
  void* phandle = nullptr;
  void** phandles = nullptr;
  StepHandles* steps = nullptr;  // v10+: NCCL's step handles where phandle(s) are NULL

  ncclResult_t init(uint64_t comm_id = 0x51u, int traffic_class = NCCL_NET_TRAFFIC_CLASS_UNDEF) {
    return call([&](auto t) -> ncclResult_t {
      using T = std::remove_cv_t<std::remove_pointer_t<decltype(t)>>;
      if constexpr (kHasCtx<T>) {
        ncclNetCommConfig_v11_t cfg{traffic_class};
        return t->init(&ctx_, comm_id, &cfg, test_logger, profiler);
      } else if constexpr (std::is_same_v<T, ncclNet_v10_t>) {
        return t->init(test_logger, profiler);
      } else {
        return t->init(test_logger);
      }
    });
  }

  ncclResult_t finalize() {
    return call([&](auto t) -> ncclResult_t {
      using T = std::remove_cv_t<std::remove_pointer_t<decltype(t)>>;
      if constexpr (kHasCtx<T>) {
        PendingRecvs::get().forget(this, nullptr);
        ncclResult_t r = t->finalize(ctx_);
        ctx_ = nullptr;
        return r;
      } else {
        return ncclSuccess;  // no finalize before v11
      }
    });
  }

  ncclResult_t devices(int* n) {
    return call([&](auto t) { return t->devices(n); });
  }

  ncclResult_t properties(int dev, Props* out) {
    return call([&](auto t) -> ncclResult_t {
      using T = std::remove_cv_t<std::remove_pointer_t<decltype(t)>>;
      if constexpr (std::is_same_v<T, ncclNet_v8_t>) {
        ncclNetProperties_v8_t p;
        ncclResult_t r = t->getProperties(dev, &p);
        if (r == ncclSuccess) copy_base(p, out);
        return r;
      } else if constexpr (std::is_same_v<T, ncclNet_v9_t> || std::is_same_v<T, ncclNet_v10_t>) {
        ncclNetProperties_v9_t p;
        ncclResult_t r = t->getProperties(dev, &p);
        if (r == ncclSuccess) copy_v9(p, out);
        return r;
      } else if constexpr (std::is_same_v<T, ncclNet_v11_t>) {
        ncclNetProperties_v11_t p;
        ncclResult_t r = t->getProperties(dev, &p);
        if (r == ncclSuccess) {
          copy_v9(p, out);
          out->max_multi = p.maxMultiRequestSize;
        }
        return r;
      } else {
        ncclNetProperties_v12_t p;
        ncclResult_t r = t->getProperties(dev, &p);
        if (r == ncclSuccess) {
          copy_v9(p, out);
          out->max_multi = p.maxMultiRequestSize;
          out->rail = p.railId;
          out->plane = p.planeId;
        }
        return r;
      }
    });
  }

  // makeVDevice (v9+; v8 has none: ncclInvalidUsage without calling the plugin). More members
  // than the version's vProps holds are passed as ndevs with the array truncated, as a caller
  // that overflowed it would.
  ncclResult_t make_vdevice(const std::vector<int>& devs, int* d) {
    return call([&](auto t) -> ncclResult_t {
      using T = std::remove_cv_t<std::remove_pointer_t<decltype(t)>>;
      if constexpr (std::is_same_v<T, ncclNet_v8_t>) {
        return ncclInvalidUsage;
      } else if constexpr (std::is_same_v<T, ncclNet_v12_t>) {
        ncclNetVDeviceProps_v12_t vp{};
        fill_vprops(devs, &vp);
        return t->makeVDevice(d, &vp);
      } else {
        ncclNetVDeviceProps_v9_t vp{};
        fill_vprops(devs, &vp);
        return t->makeVDevice(d, &vp);
      }
    });
  }

  ncclResult_t listen(int dev, void* handle, void** lc) {
    return call([&](auto t) -> ncclResult_t {
      using T = std::remove_cv_t<std::remove_pointer_t<decltype(t)>>;
      if constexpr (kHasCtx<T>) {
        return t->listen(ctx_, dev, handle, lc);
      } else {
        return t->listen(dev, handle, lc);
      }
    });
  }

  // dev_comm_ok: the plugin left *devComm NULL (HOST plugin).
  ncclResult_t connect(int dev, void* handle, void** sc, bool* dev_comm_ok = nullptr) {
    ncclNetDeviceHandle_v7_t* dc = nullptr;
    ncclResult_t r = call([&](auto t) -> ncclResult_t {
      using T = std::remove_cv_t<std::remove_pointer_t<decltype(t)>>;
      if constexpr (kHasCtx<T>) {
        return t->connect(ctx_, dev, handle, sc, &dc);
      } else if constexpr (std::is_same_v<T, ncclNet_v10_t>) {
        ncclNetCommConfig_v10_t cfg{NCCL_NET_TRAFFIC_CLASS_UNDEF};
        return t->connect(dev, &cfg, handle, sc, &dc);
      } else {
        return t->connect(dev, handle, sc, &dc);
      }
    });
    if (dev_comm_ok != nullptr) *dev_comm_ok = (dc == nullptr);
    return r;
  }

  ncclResult_t accept(void* lc, void** rc) {
    ncclNetDeviceHandle_v7_t* dc = nullptr;
    return call([&](auto t) { return t->accept(lc, rc, &dc); });
  }

  ncclResult_t reg_mr(void* comm, void* data, size_t size, void** mh) {
    return call([&](auto t) { return t->regMr(comm, data, size, NCCL_PTR_HOST, mh); });
  }
  ncclResult_t reg_mr_type(void* comm, void* data, size_t size, int type, void** mh) {
    return call([&](auto t) { return t->regMr(comm, data, size, type, mh); });
  }
  ncclResult_t reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                             void** mh) {
    return call([&](auto t) { return t->regMrDmaBuf(comm, data, size, type, offset, fd, mh); });
  }
  ncclResult_t dereg_mr(void* comm, void* mh) {
    return call([&](auto t) { return t->deregMr(comm, mh); });
  }

  // An isend refused ("not now": *req NULL) is followed by the tests of this thread's receives, as
  // NCCL's proxy would progress them (PendingRecvs).
  ncclResult_t isend(void* sc, void* data, size_t size, int tag, void* mh, void** req) {
    const ncclResult_t r = isend_once(sc, data, size, tag, mh, req);
    if (r == ncclSuccess && *req == nullptr) {
      const std::vector<void*> done = PendingRecvs::get().progress(
          this, [&](void* q, int* d, int* sz) { return test_once(q, d, sz); });
      if (steps != nullptr)
        for (void* q : done) steps->done(q);
    }
    return r;
  }
  ncclResult_t isend_once(void* sc, void* data, size_t size, int tag, void* mh, void** req) {
    return call([&](auto t) -> ncclResult_t {
      using T = std::remove_cv_t<std::remove_pointer_t<decltype(t)>>;
      if constexpr (std::is_same_v<T, ncclNet_v8_t>) {
        if (size > static_cast<size_t>(INT_MAX)) return ncclInvalidArgument;
        return t->isend(sc, data, static_cast<int>(size), tag, mh, req);
      } else if constexpr (std::is_same_v<T, ncclNet_v9_t>) {
        return t->isend(sc, data, size, tag, mh, req);
      } else {
        StepHandles* st = phandle == nullptr ? steps : nullptr;
        const ncclResult_t r =
            t->isend(sc, data, size, tag, mh, st != nullptr ? st->send_handle(sc) : phandle, req);
        if (st != nullptr && r == ncclSuccess && *req != nullptr) st->posted(sc, true, *req, 1);
        return r;
      }
    });
  }

  ncclResult_t irecv(void* rc, int n, void** data, size_t* sizes, int* tags, void** mhs,
                     void** req) {
    const ncclResult_t r = call([&](auto t) -> ncclResult_t {
      using T = std::remove_cv_t<std::remove_pointer_t<decltype(t)>>;
      if constexpr (std::is_same_v<T, ncclNet_v8_t>) {
        int isizes[NCCL_NET_MAX_REQUESTS];
        for (int i = 0; i < n && i < NCCL_NET_MAX_REQUESTS; ++i) {
          isizes[i] = sizes[i] > static_cast<size_t>(INT_MAX) ? -1 : static_cast<int>(sizes[i]);
        }
        return t->irecv(rc, n, data, isizes, tags, mhs, req);
      } else if constexpr (std::is_same_v<T, ncclNet_v9_t>) {
        return t->irecv(rc, n, data, sizes, tags, mhs, req);
      } else {
        StepHandles* st = phandles == nullptr ? steps : nullptr;
        const ncclResult_t r = t->irecv(rc, n, data, sizes, tags, mhs,
                                        st != nullptr ? st->recv_handles(rc, n) : phandles, req);
        if (st != nullptr && r == ncclSuccess && *req != nullptr) st->posted(rc, false, *req, n);
        return r;
      }
    });
    if (r == ncclSuccess && *req != nullptr) PendingRecvs::get().add(this, rc, *req, n);
    return r;
  }

  ncclResult_t iflush(void* rc, int n, void** data, int* sizes, void** mhs, void** req) {
    return call([&](auto t) { return t->iflush(rc, n, data, sizes, mhs, req); });
  }
  ncclResult_t test(void* req, int* done, int* sizes) {
    PendingRecvs& p = PendingRecvs::get();
    ncclResult_t r = ncclSuccess;
    const PendingRecvs::Claim c = p.claim(req, &r, sizes);
    if (c == PendingRecvs::Claim::kFound) {  // an isend's progress pass found it (done or failed)
      *done = r == ncclSuccess ? 1 : 0;
      return r;
    }
    r = test_once(req, done, sizes);
    if (c == PendingRecvs::Claim::kMine) p.finish(req, r != ncclSuccess || *done);
    if (steps != nullptr && r == ncclSuccess && *done) steps->done(req);
    return r;
  }
  ncclResult_t test_once(void* req, int* done, int* sizes) {
    return call([&](auto t) { return t->test(req, done, sizes); });
  }
  ncclResult_t close_send(void* c) {
    return call([&](auto t) { return t->closeSend(c); });
  }
  ncclResult_t close_recv(void* c) {
    PendingRecvs::get().forget(this, c);
    return call([&](auto t) { return t->closeRecv(c); });
  }
  ncclResult_t close_listen(void* c) {
    return call([&](auto t) { return t->closeListen(c); });
  }

 private:
  template <typename F>
  ncclResult_t call(F&& f) const {
    const Lib& l = Lib::get();
    switch (v_) {
      case 8:
        return f(l.v8);
      case 9:
        return f(l.v9);
      case 10:
        return f(l.v10);
      case 11:
        return f(l.v11);
      default:
        return f(l.v12);
    }
  }
  template <typename P>
  static void copy_base(const P& p, Props* o) {
    o->name = p.name != nullptr ? p.name : "";
    o->pci_path = p.pciPath != nullptr ? p.pciPath : "";
    o->guid = p.guid;
    o->ptr_support = p.ptrSupport;
    o->reg_is_global = p.regIsGlobal;
    o->speed = p.speed;
    o->port = p.port;
    o->latency = p.latency;
    o->max_comms = p.maxComms;
    o->max_recvs = p.maxRecvs;
    o->dev_type = p.netDeviceType;
    o->dev_version = p.netDeviceVersion;
  }
  template <typename V>
  static void fill_vprops(const std::vector<int>& devs, V* vp) {
    constexpr size_t kCap = sizeof(vp->devs) / sizeof(vp->devs[0]);
    vp->ndevs = static_cast<int>(devs.size());
    for (size_t i = 0; i < devs.size() && i < kCap; ++i) vp->devs[i] = devs[i];
  }
  template <typename P>
  static void copy_v9(const P& p, Props* o) {
    copy_base(p, o);
    o->force_flush = p.forceFlush;
    o->vndevs = p.vProps.ndevs;
    o->vdev0 = p.vProps.devs[0];
    constexpr int kCap = static_cast<int>(sizeof(p.vProps.devs) / sizeof(p.vProps.devs[0]));
    o->vdevs.assign(p.vProps.devs, p.vProps.devs + std::min(std::max(p.vProps.ndevs, 0), kCap));
    o->max_p2p = p.maxP2pBytes;
    o->max_coll = p.maxCollBytes;
  }

  int v_;
  void* ctx_ = nullptr;
};

// ---- Data pattern
// --------------------------------------------------------------------------------

// Deterministic bytes from (seed, offset): differs for every size, iteration and tag.
inline uint64_t pattern_word(uint64_t seed, size_t word) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + word * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return x;
}

inline uint64_t pattern_seed(size_t size, uint64_t iteration, int tag = 0) {
  return (static_cast<uint64_t>(size) << 24) ^ (iteration * 0x10001ull) ^
         (static_cast<uint64_t>(static_cast<uint32_t>(tag)) << 48);
}

inline void fill_pattern(uint8_t* p, size_t n, uint64_t seed) {
  size_t w = 0;
  for (; (w + 1) * 8 <= n; ++w) {
    uint64_t v = pattern_word(seed, w);
    std::memcpy(p + w * 8, &v, 8);
  }
  if (w * 8 < n) {
    uint64_t v = pattern_word(seed, w);
    std::memcpy(p + w * 8, &v, n - w * 8);
  }
}

// Empty string = match; else where the first difference is.
inline std::string check_pattern(const uint8_t* p, size_t n, uint64_t seed) {
  for (size_t w = 0; w * 8 < n; ++w) {
    uint64_t v = pattern_word(seed, w);
    size_t len = std::min<size_t>(8, n - w * 8);
    if (std::memcmp(p + w * 8, &v, len) != 0) {
      for (size_t i = 0; i < len; ++i) {
        uint8_t expect = reinterpret_cast<const uint8_t*>(&v)[i];
        if (p[w * 8 + i] != expect) {
          char buf[160];
          std::snprintf(buf, sizeof buf, "byte %zu of %zu is 0x%02x, expected 0x%02x", w * 8 + i, n,
                        p[w * 8 + i], expect);
          return buf;
        }
      }
    }
  }
  return {};
}

inline std::string check_fill(const uint8_t* p, size_t n, uint8_t value) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != value) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "guard byte %zu of %zu is 0x%02x, expected 0x%02x", i, n, p[i],
                    value);
      return buf;
    }
  }
  return {};
}

// ---- Resources
// -----------------------------------------------------------------------------------

// Page-aligned host memory, registered on one comm for its lifetime.
class RegBuf {
 public:
  RegBuf() = default;
  RegBuf(const RegBuf&) = delete;
  RegBuf& operator=(const RegBuf&) = delete;
  ~RegBuf() { reset(); }

  ::testing::AssertionResult allocate(Net* net, void* comm, size_t len) {
    reset();
    len_ = len;
    size_t alloc = ((len == 0 ? 1 : len) + 4095) / 4096 * 4096;
    p_ = static_cast<uint8_t*>(std::aligned_alloc(4096, alloc));
    if (p_ == nullptr) return ::testing::AssertionFailure() << "aligned_alloc(" << alloc << ")";
    std::memset(p_, 0, alloc);
    ncclResult_t r = net->reg_mr(comm, p_, alloc, &mh_);
    if (r != ncclSuccess || mh_ == nullptr) {
      return ::testing::AssertionFailure() << "regMr(" << alloc << " bytes) returned " << r;
    }
    net_ = net;
    comm_ = comm;
    return ::testing::AssertionSuccess();
  }
  void reset() {
    if (mh_ != nullptr && net_ != nullptr) {
      ncclResult_t r = net_->dereg_mr(comm_, mh_);
      if (r != ncclSuccess) ADD_FAILURE() << "deregMr returned " << r;
    }
    mh_ = nullptr;
    std::free(p_);
    p_ = nullptr;
  }
  uint8_t* data() const { return p_; }
  void* mh() const { return mh_; }
  size_t size() const { return len_; }

 private:
  Net* net_ = nullptr;
  void* comm_ = nullptr;
  uint8_t* p_ = nullptr;
  size_t len_ = 0;
  void* mh_ = nullptr;
};

struct Conn {
  void* send = nullptr;
  void* recv = nullptr;
};

// listen on recv_dev, then connect/accept alternately in this thread until both exist (the same
// pattern as NCCL's GDR probe: neither call may block).
inline ::testing::AssertionResult open_conn(Net& net, int send_dev, int recv_dev, Conn* out) {
  const sluice::rdmatest::CmCounts cm_before = sluice::rdmatest::cm_counts();
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* lc = nullptr;
  ncclResult_t r = net.listen(recv_dev, handle, &lc);
  if (r != ncclSuccess || lc == nullptr) {
    return ::testing::AssertionFailure() << "listen(dev " << recv_dev << ") returned " << r;
  }
  Conn c;
  const auto deadline = Clock::now() + wait_limit();
  while (c.send == nullptr || c.recv == nullptr) {
    if (c.send == nullptr) {
      bool dc_ok = true;
      r = net.connect(send_dev, handle, &c.send, &dc_ok);
      if (r != ncclSuccess) {
        net.close_recv(c.recv);
        net.close_listen(lc);
        return ::testing::AssertionFailure() << "connect(dev " << send_dev << ") returned " << r;
      }
      if (!dc_ok) return ::testing::AssertionFailure() << "connect wrote a device handle";
    }
    if (c.recv == nullptr) {
      r = net.accept(lc, &c.recv);
      if (r != ncclSuccess) {
        net.close_send(c.send);
        net.close_listen(lc);
        return ::testing::AssertionFailure() << "accept returned " << r;
      }
    }
    if (Clock::now() > deadline) {
      net.close_send(c.send);
      net.close_recv(c.recv);
      net.close_listen(lc);
      return ::testing::AssertionFailure()
             << "connect/accept did not complete within " << wait_limit().count() << " ms (send "
             << c.send << ", recv " << c.recv << ")";
    }
    if (c.send == nullptr || c.recv == nullptr) usleep(100);
  }
  r = net.close_listen(lc);
  if (r != ncclSuccess) {
    net.close_send(c.send);
    net.close_recv(c.recv);
    return ::testing::AssertionFailure() << "closeListen returned " << r;
  }
  // check_cm_used counts the process's log lines since cm_before: connections opened by other
  // threads meanwhile count too, so callers that connect from several threads at once must not
  // force a connection manager (SLUICE_CM) that it checks.
  const std::string cm = sluice::rdmatest::check_cm_used(cm_before);
  if (!cm.empty()) {
    net.close_send(c.send);
    net.close_recv(c.recv);
    return ::testing::AssertionFailure() << cm;
  }
  *out = c;
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult close_conn(Net& net, Conn* c) {
  ncclResult_t rs = net.close_send(c->send);
  ncclResult_t rr = net.close_recv(c->recv);
  c->send = c->recv = nullptr;
  if (rs != ncclSuccess || rr != ncclSuccess) {
    return ::testing::AssertionFailure() << "closeSend " << rs << ", closeRecv " << rr;
  }
  return ::testing::AssertionSuccess();
}

// Posts until the plugin accepts (a NULL request means "not now"), bounded.
template <typename Post>
::testing::AssertionResult post_until(const char* what, void** req, Post post) {
  const auto deadline = Clock::now() + wait_limit();
  for (;;) {
    *req = reinterpret_cast<void*>(uintptr_t{NCCL_NET_OPTIONAL_RECV_COMPLETION});  // never read
    ncclResult_t r = post(req);
    if (r != ncclSuccess) return ::testing::AssertionFailure() << what << " returned " << r;
    if (*req == reinterpret_cast<void*>(uintptr_t{NCCL_NET_OPTIONAL_RECV_COMPLETION})) {
      return ::testing::AssertionFailure() << what << " did not overwrite *request";
    }
    if (*req != nullptr) return ::testing::AssertionSuccess();
    if (Clock::now() > deadline) {
      return ::testing::AssertionFailure()
             << what << " got no request within " << wait_limit().count() << " ms";
    }
    usleep(50);
  }
}

// Tests until done, bounded.
inline ::testing::AssertionResult wait_done(Net& net, const char* what, void* req, int* sizes) {
  const auto deadline = Clock::now() + wait_limit();
  for (;;) {
    int done = 0;
    ncclResult_t r = net.test(req, &done, sizes);
    if (r != ncclSuccess) return ::testing::AssertionFailure() << what << ": test returned " << r;
    if (done) return ::testing::AssertionSuccess();
    if (Clock::now() > deadline) {
      return ::testing::AssertionFailure()
             << what << " not done within " << wait_limit().count() << " ms";
    }
  }
}

// Tests every request of `reqs` in turn until all are done, bounded, as NCCL's proxy tests all it
// posted (a send that joined a batch of eager sends goes at its comm's next test, and a failover
// needs both ends driven). sizes[i]: request i's size (one part), when not null.
inline ::testing::AssertionResult wait_all(Net& net, const char* what,
                                           const std::vector<void*>& reqs, int* sizes) {
  const auto deadline = Clock::now() + wait_limit();
  std::vector<bool> done(reqs.size(), false);
  size_t left = reqs.size();
  while (left > 0) {
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (done[i]) continue;
      int d = 0;
      int sz[NCCL_NET_MAX_REQUESTS] = {};
      ncclResult_t r = net.test(reqs[i], &d, sz);
      if (r != ncclSuccess)
        return ::testing::AssertionFailure() << what << " " << i << ": test returned " << r;
      if (!d) continue;
      done[i] = true;
      --left;
      if (sizes != nullptr) sizes[i] = sz[0];
    }
    if (left > 0 && Clock::now() > deadline) {
      return ::testing::AssertionFailure()
             << what << ": " << left << " not done within " << wait_limit().count() << " ms";
    }
  }
  return ::testing::AssertionSuccess();
}

// One message of `n` bytes from `src` (handle smh) into `dst` (handle rmh), as NCCL's proxy drives
// it: the send is tried first (it may go eagerly before the receive exists), the receive posted,
// and while either is open both are tested. Every byte checked. on_send_done() runs right
// after the send's test first said done.
template <typename OnSendDone = void (*)()>
::testing::AssertionResult send_first_message(
    Net& net, Conn& c, uint8_t* src, void* smh, uint8_t* dst, void* rmh, size_t n, int tag,
    uint64_t seed, OnSendDone on_send_done = [] {}) {
  fill_pattern(src, n, seed);
  std::memset(dst, 0, n);
  void* sreq = nullptr;
  void* rreq = nullptr;
  if (net.isend(c.send, src, n, tag, smh, &sreq) != ncclSuccess)
    return ::testing::AssertionFailure() << "isend failed: " << last_warn();
  void* rdata = dst;
  size_t cap = n;
  int rtag = tag;
  if (!post_until("irecv", &rreq,
                  [&](void** q) { return net.irecv(c.recv, 1, &rdata, &cap, &rtag, &rmh, q); }))
    return ::testing::AssertionFailure() << "irecv failed: " << last_warn();
  bool sdone = false, rdone = false;
  int rsize = -1;
  const auto deadline = Clock::now() + wait_limit();
  while (!sdone || !rdone) {
    if (Clock::now() > deadline) return ::testing::AssertionFailure() << "message not done";
    if (sreq == nullptr) {
      if (net.isend(c.send, src, n, tag, smh, &sreq) != ncclSuccess)
        return ::testing::AssertionFailure() << "isend failed: " << last_warn();
    } else if (!sdone) {
      int d = 0;
      if (net.test(sreq, &d, nullptr) != ncclSuccess)
        return ::testing::AssertionFailure() << "send test failed: " << last_warn();
      sdone = d != 0;
      if (sdone) on_send_done();
    }
    if (!rdone) {
      int d = 0;
      if (net.test(rreq, &d, &rsize) != ncclSuccess)
        return ::testing::AssertionFailure() << "receive test failed: " << last_warn();
      rdone = d != 0;
    }
  }
  if (rsize != static_cast<int>(n))
    return ::testing::AssertionFailure() << "received " << rsize << " bytes, sent " << n;
  const std::string bad = check_pattern(dst, n, seed);
  if (!bad.empty()) return ::testing::AssertionFailure() << bad;
  return ::testing::AssertionSuccess();
}

// One message: receive into rbuf (capacity rcap) what is sent from sbuf (ssize), both tested to
// completion; *received = size reported by the receiver's test.
inline ::testing::AssertionResult send_recv(Net& net, Conn& c, RegBuf& sbuf, size_t ssize,
                                            RegBuf& rbuf, size_t rcap, int tag, int* received,
                                            bool null_sizes = false) {
  void* rreq = nullptr;
  void* sreq = nullptr;
  void* rdata = rbuf.data();
  void* rmh = rbuf.mh();
  size_t cap = rcap;
  int rtag = tag;
  auto ok = post_until("irecv", &rreq, [&](void** req) {
    return net.irecv(c.recv, 1, &rdata, &cap, &rtag, &rmh, req);
  });
  if (!ok) return ok;
  ok = post_until("isend", &sreq, [&](void** req) {
    return net.isend(c.send, sbuf.data(), ssize, tag, sbuf.mh(), req);
  });
  if (!ok) return ok;
  int ssizes[1] = {-1};
  int rsizes[NCCL_NET_MAX_REQUESTS] = {};
  rsizes[0] = -1;
  ok = wait_done(net, "send", sreq, null_sizes ? nullptr : ssizes);
  if (!ok) return ok;
  ok = wait_done(net, "recv", rreq, null_sizes ? nullptr : rsizes);
  if (!ok) return ok;
  if (!null_sizes && ssizes[0] != static_cast<int>(ssize)) {
    return ::testing::AssertionFailure()
           << "send test reported " << ssizes[0] << " bytes, sent " << ssize;
  }
  if (received != nullptr) *received = null_sizes ? static_cast<int>(ssize) : rsizes[0];
  return ::testing::AssertionSuccess();
}

// ---- Process resources (leak checks)
// -------------------------------------------------------------

inline int open_fd_count() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n - 1;  // the DIR's own fd
}

// "fd -> target" for every open fd but the listing's own, one per line (to name a leak).
inline std::string open_fd_list() {
  std::string out;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return "(cannot list /proc/self/fd)";
  const int own = dirfd(d);
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.' || std::atoi(e->d_name) == own) continue;
    char target[512] = {};
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
    out += std::string(e->d_name) + " -> " +
           (n > 0 ? std::string(target, static_cast<size_t>(n)) : "?") + "\n";
  }
  closedir(d);
  return out;
}

inline long rss_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  long size = 0, resident = 0;
  int n = std::fscanf(f, "%ld %ld", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * sysconf(_SC_PAGESIZE) : -1;
}

// Number of verbs objects of `kind` (qp, cq, mr, pd) owned by this process per `rdma resource
// show`; -1 when the tool is unavailable.
inline int rdma_resource_count(const char* kind) {
  std::string cmd = std::string("rdma resource show ") + kind + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  const std::string needle = " pid " + std::to_string(getpid()) + " ";
  int n = 0;
  bool any = false;
  char line[1024];
  while (std::fgets(line, sizeof line, p) != nullptr) {
    any = true;
    std::string s = std::string(line);
    if (!s.empty() && s.back() == '\n') s.back() = ' ';
    if (s.find(needle) != std::string::npos) ++n;
  }
  int rc = pclose(p);
  if (rc != 0 && !any) return -1;
  return n;
}

// True when `part` occurs in `s` (WARN texts, log lines).
inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

using sluice::rdmatest::read_line;

// This process's QPs, CQs and MRs per `rdma resource show` (-1 each when it is unavailable).
struct Counts {
  int qp = 0, cq = 0, mr = 0;
  static Counts now() {
    return {rdma_resource_count("qp"), rdma_resource_count("cq"), rdma_resource_count("mr")};
  }
};

// Every QP, CQ and MR this process had at `before` and no more (not checked, said so on stderr,
// when `rdma resource show` is unavailable).
inline void expect_released(const Counts& before) {
  Counts after = Counts::now();
  if (before.qp < 0 || after.qp < 0) {
    std::fprintf(stderr, "rdma resource show unavailable: verbs object counts not checked\n");
    return;
  }
  EXPECT_EQ(after.qp, before.qp);
  EXPECT_EQ(after.cq, before.cq);
  EXPECT_EQ(after.mr, before.mr);
}

}  // namespace nettest
