// gpu-check: the CUDA-side checks of tests/gpu/run.sh, on a machine with a real GPU.
//
//   gpu-check cuda                 cuInit, cuMemAlloc, H->D->H bytes, dma-buf export of the buffer
//   gpu-check plugin PLUGIN.so     the above, then through the plugin's v12 table: register GPU
//                                  buffers (regMrDmaBuf with an exported fd, and regMr CUDA), send
//                                  GPU -> GPU, flush, and verify every byte on the GPU
//
// Built with cuda.h for types and constants only; libcuda.so.1 is dlopened at run time
// (SLUICE_CUDA_LIBRARY overrides the name, as for the plugin). Prints one "CHECK <name>: PASS|FAIL|
// SKIP <detail>" line per check. Exit: 0 all passed (skips allowed), 1 a check failed, 77 no GPU.
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "sluice/nccl_net_abi.h"

namespace {

int g_failed = 0;

void check(const char* name, const char* verdict, const std::string& detail) {
  std::printf("CHECK %s: %s %s\n", name, verdict, detail.c_str());
  std::fflush(stdout);
  if (std::strcmp(verdict, "FAIL") == 0) g_failed = 1;
}

struct Cuda {
  void* lib = nullptr;
  decltype(&cuInit) init = nullptr;
  decltype(&cuDeviceGetCount) count = nullptr;
  decltype(&cuDeviceGet) get = nullptr;
  decltype(&cuDeviceGetName) name = nullptr;
  decltype(&cuDeviceGetAttribute) attr = nullptr;
  decltype(&cuDevicePrimaryCtxRetain) retain = nullptr;
  decltype(&cuCtxSetCurrent) set_current = nullptr;
  decltype(&cuMemAlloc) alloc = nullptr;
  decltype(&cuMemFree) free = nullptr;
  decltype(&cuMemcpyHtoD) htod = nullptr;
  decltype(&cuMemcpyDtoH) dtoh = nullptr;
  decltype(&cuMemGetHandleForAddressRange) get_handle = nullptr;
  decltype(&cuGetErrorString) error_string = nullptr;

  std::string err(CUresult r) const {
    const char* s = nullptr;
    if (error_string != nullptr && error_string(r, &s) == CUDA_SUCCESS && s != nullptr)
      return std::string(s) + " (" + std::to_string(static_cast<int>(r)) + ")";
    return "CUresult " + std::to_string(static_cast<int>(r));
  }

  // "" on success, else why CUDA is unusable.
  std::string load() {
    const char* path = std::getenv("SLUICE_CUDA_LIBRARY");
    if (path == nullptr || *path == '\0') path = "libcuda.so.1";
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return std::string(path) + " not loadable: " + dlerror();
#define SYM(field, sym)                                                           \
  field = reinterpret_cast<decltype(field)>(dlsym(lib, sym));                     \
  if (field == nullptr && std::strcmp(sym, "cuMemGetHandleForAddressRange") != 0) \
    return std::string(path) + " lacks " + sym;
    SYM(init, "cuInit");
    SYM(count, "cuDeviceGetCount");
    SYM(get, "cuDeviceGet");
    SYM(name, "cuDeviceGetName");
    SYM(attr, "cuDeviceGetAttribute");
    SYM(retain, "cuDevicePrimaryCtxRetain");
    SYM(set_current, "cuCtxSetCurrent");
    SYM(alloc, "cuMemAlloc_v2");
    SYM(free, "cuMemFree_v2");
    SYM(htod, "cuMemcpyHtoD_v2");
    SYM(dtoh, "cuMemcpyDtoH_v2");
    SYM(get_handle, "cuMemGetHandleForAddressRange");
    SYM(error_string, "cuGetErrorString");
#undef SYM
    if (CUresult r = init(0); r != CUDA_SUCCESS) return "cuInit failed: " + err(r);
    int n = 0;
    if (CUresult r = count(&n); r != CUDA_SUCCESS) return "cuDeviceGetCount failed: " + err(r);
    if (n < 1) return "cuDeviceGetCount: no GPU";
    return "";
  }
};

void fill(std::vector<uint8_t>& v, unsigned salt) {
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<uint8_t>(((i * 2654435761u) >> 11) ^ (i >> 13) ^ salt);
}

size_t count_diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  size_t d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += a[i] != b[i];
  return d;
}

// A device buffer rounded up to 2 MiB (the granularity dma-buf export needs).
struct DevBuf {
  const Cuda* cu = nullptr;
  CUdeviceptr p = 0;
  size_t alloc = 0;
  ~DevBuf() {
    if (p != 0) cu->free(p);
  }
  CUresult allocate(const Cuda& c, size_t n) {
    cu = &c;
    alloc = (n + (2u << 20) - 1) / (2u << 20) * (2u << 20);
    return c.alloc(&p, alloc);
  }
};

struct Gpu {
  Cuda cu;
  std::string name;
  CUdevice dev = 0;
  bool dmabuf_attr = false;
  bool rdma_attr = false;
};

// cuda: allocation, copies, dma-buf export. Returns false when the GPU is unusable.
bool cuda_checks(Gpu& g) {
  char name[256] = {};
  g.cu.get(&g.dev, 0);
  g.cu.name(name, sizeof name, g.dev);
  g.name = name;
  int v = 0;
  if (g.cu.attr(&v, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, g.dev) == CUDA_SUCCESS)
    g.dmabuf_attr = v != 0;
  v = 0;
  if (g.cu.attr(&v, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, g.dev) == CUDA_SUCCESS)
    g.rdma_attr = v != 0;
  check("cuda_device", "PASS",
        std::string(name) + ", DMA_BUF_SUPPORTED=" + std::to_string(g.dmabuf_attr) +
            ", GPU_DIRECT_RDMA_SUPPORTED=" + std::to_string(g.rdma_attr));
  CUcontext ctx = nullptr;
  if (CUresult r = g.cu.retain(&ctx, g.dev); r != CUDA_SUCCESS) {
    check("cuda_context", "FAIL", "cuDevicePrimaryCtxRetain: " + g.cu.err(r));
    return false;
  }
  g.cu.set_current(ctx);
  const size_t n = (size_t{8} << 20) + 3;
  DevBuf b;
  if (CUresult r = b.allocate(g.cu, n); r != CUDA_SUCCESS) {
    check("cuda_alloc", "FAIL", "cuMemAlloc(" + std::to_string(b.alloc) + "): " + g.cu.err(r));
    return false;
  }
  std::vector<uint8_t> in(n), out(n, 0);
  fill(in, 0x5a);
  CUresult r1 = g.cu.htod(b.p, in.data(), n);
  CUresult r2 = g.cu.dtoh(out.data(), b.p, n);
  if (r1 != CUDA_SUCCESS || r2 != CUDA_SUCCESS) {
    check("cuda_copy", "FAIL", "cuMemcpyHtoD: " + g.cu.err(r1) + ", cuMemcpyDtoH: " + g.cu.err(r2));
    return false;
  }
  const size_t bad = count_diff(in, out);
  check("cuda_copy", bad == 0 ? "PASS" : "FAIL",
        std::to_string(n) + " bytes host -> GPU -> host, " + std::to_string(bad) + " differ");
  if (g.cu.get_handle == nullptr) {
    check("dmabuf_export", "SKIP", "driver has no cuMemGetHandleForAddressRange (older than 11.7)");
    return true;
  }
  int fd = -1;
  CUresult r = g.cu.get_handle(&fd, b.p, b.alloc, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
  if (r == CUDA_SUCCESS && fd >= 0) {
    check("dmabuf_export", "PASS",
          "fd " + std::to_string(fd) + " for " + std::to_string(b.alloc) + " bytes of GPU memory");
    close(fd);
  } else {
    // A GPU that says it supports dma-buf must export; one that says not may refuse.
    check("dmabuf_export", g.dmabuf_attr ? "FAIL" : "SKIP",
          "cuMemGetHandleForAddressRange: " + g.cu.err(r) +
              (g.dmabuf_attr ? " although DMA_BUF_SUPPORTED=1" : " (DMA_BUF_SUPPORTED=0)"));
  }
  return true;
}

void logger(ncclDebugLogLevel level, unsigned long, const char*, int, const char* fmt, ...) {
  if (level > NCCL_LOG_INFO) return;
  char msg[4096];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "[plugin %s] %s\n", level == NCCL_LOG_WARN ? "WARN" : "INFO", msg);
}

using Clock = std::chrono::steady_clock;

template <typename F>
bool poll_until(F f, double seconds = 60) {
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end)
    if (f()) return true;
  return false;
}

// plugin: GPU -> GPU through the plugin's v12 table.
void plugin_checks(Gpu& g, const char* plugin_path) {
  void* lib = dlopen(plugin_path, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    check("plugin_load", "FAIL", std::string("dlopen: ") + dlerror());
    return;
  }
  auto* net = static_cast<ncclNet_v12_t*>(dlsym(lib, "ncclNetPlugin_v12"));
  if (net == nullptr) {
    check("plugin_load", "FAIL", "no ncclNetPlugin_v12");
    return;
  }
  void* ctx = nullptr;
  ncclNetCommConfig_v12_t cfg{};
  cfg.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF;
  if (net->init(&ctx, 0x67, &cfg, logger, nullptr) != ncclSuccess) {
    check("plugin_init", "FAIL", "init failed (see the WARN above)");
    return;
  }
  int ndev = 0;
  net->devices(&ndev);
  ncclNetProperties_v12_t props{};
  net->getProperties(0, &props);
  const int ptr = props.ptrSupport;
  std::string ptr_text = std::string("HOST") + (ptr & NCCL_PTR_CUDA ? "|CUDA" : "") +
                         (ptr & NCCL_PTR_DMABUF ? "|DMABUF" : "");
  check("plugin_init", "PASS",
        std::to_string(ndev) + " device(s); " + props.name + " ptrSupport " + ptr_text +
            " (the decision and its reasons are in the INFO lines above)");
  const int peer = ndev > 1 ? 1 : 0;
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void *lc = nullptr, *sc = nullptr, *rc = nullptr;
  if (net->listen(ctx, peer, handle, &lc) != ncclSuccess) {
    check("plugin_connect", "FAIL", "listen failed");
    return;
  }
  bool up = poll_until([&] {
    ncclNetDeviceHandle_v12_t* dh = nullptr;
    if (sc == nullptr && net->connect(ctx, 0, handle, &sc, &dh) != ncclSuccess) return true;
    if (rc == nullptr && net->accept(lc, &rc, &dh) != ncclSuccess) return true;
    return sc != nullptr && rc != nullptr;
  });
  net->closeListen(lc);
  if (!up || sc == nullptr || rc == nullptr) {
    check("plugin_connect", "FAIL", "connect/accept did not complete");
    return;
  }
  check("plugin_connect", "PASS", std::string(props.name) + " -> device " + std::to_string(peer));

  const size_t n = (size_t{8} << 20) + 3;
  DevBuf src, dst;
  if (src.allocate(g.cu, n) != CUDA_SUCCESS || dst.allocate(g.cu, n) != CUDA_SUCCESS) {
    check("gpu_transfer", "FAIL", "cuMemAlloc failed");
    return;
  }
  // dma-buf registration of an exported GPU buffer, where the NIC was offered for it.
  if (g.cu.get_handle != nullptr) {
    int fd = -1;
    CUresult r = g.cu.get_handle(&fd, dst.p, dst.alloc, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    if (r != CUDA_SUCCESS) {
      check("dmabuf_register", "SKIP", "no dma-buf to register: " + g.cu.err(r));
    } else {
      void* mh = nullptr;
      ncclResult_t rr = net->regMrDmaBuf(rc, reinterpret_cast<void*>(dst.p), dst.alloc,
                                         NCCL_PTR_CUDA, 0, fd, &mh);
      close(fd);  // as NCCL does, right after the call
      if (ptr & NCCL_PTR_DMABUF) {
        check("dmabuf_register", rr == ncclSuccess ? "PASS" : "FAIL",
              "regMrDmaBuf of " + std::to_string(dst.alloc) + " bytes returned " +
                  std::to_string(rr));
      } else {
        check("dmabuf_register", rr == ncclSuccess ? "PASS" : "SKIP",
              std::string(props.name) + " was not offered for dma-buf; regMrDmaBuf returned " +
                  std::to_string(rr) + (rr == ncclSuccess ? "" : " (its WARN says why)"));
      }
      if (mh != nullptr) net->deregMr(rc, mh);
    }
  }
  std::vector<uint8_t> in(n), out(n, 0);
  fill(in, 0xa7);
  g.cu.htod(src.p, in.data(), n);
  std::vector<uint8_t> zero(n, 0);
  g.cu.htod(dst.p, zero.data(), n);
  const bool direct = (ptr & NCCL_PTR_CUDA) != 0;
  // GPUDirect: register the GPU buffers. Otherwise stage through host buffers, as NCCL does.
  std::vector<uint8_t> hs, hr;
  void *smh = nullptr, *rmh = nullptr;
  void* sdata = reinterpret_cast<void*>(src.p);
  void* rdata = reinterpret_cast<void*>(dst.p);
  if (direct) {
    if (net->regMr(sc, sdata, n, NCCL_PTR_CUDA, &smh) != ncclSuccess ||
        net->regMr(rc, rdata, n, NCCL_PTR_CUDA, &rmh) != ncclSuccess) {
      check("gpu_transfer", "FAIL", "regMr of CUDA memory failed although ptrSupport has CUDA");
      return;
    }
  } else {
    hs.resize(n);
    hr.resize(n);
    g.cu.dtoh(hs.data(), src.p, n);
    sdata = hs.data();
    rdata = hr.data();
    if (net->regMr(sc, sdata, n, NCCL_PTR_HOST, &smh) != ncclSuccess ||
        net->regMr(rc, rdata, n, NCCL_PTR_HOST, &rmh) != ncclSuccess) {
      check("gpu_transfer", "FAIL", "regMr of host staging buffers failed");
      return;
    }
  }
  void *rreq = nullptr, *sreq = nullptr;
  size_t cap = n;
  int tag = 1;
  bool ok = poll_until([&] {
    if (rreq == nullptr) net->irecv(rc, 1, &rdata, &cap, &tag, &rmh, nullptr, &rreq);
    if (rreq != nullptr && sreq == nullptr) net->isend(sc, sdata, n, tag, smh, nullptr, &sreq);
    return rreq != nullptr && sreq != nullptr;
  });
  int sdone = 0, rdone = 0, sizes[NCCL_NET_MAX_REQUESTS] = {};
  int ssize = 0;
  ok = ok && poll_until([&] {
         if (!sdone && net->test(sreq, &sdone, &ssize) != ncclSuccess) return true;
         if (!rdone && net->test(rreq, &rdone, sizes) != ncclSuccess) return true;
         return sdone && rdone;
       });
  if (!ok || !sdone || !rdone || sizes[0] != static_cast<int>(n)) {
    check("gpu_transfer", "FAIL",
          "send/receive did not complete with " + std::to_string(n) + " bytes (got " +
              std::to_string(sizes[0]) + ")");
    return;
  }
  std::string flush_text = "no flush needed";
  if (direct) {
    void* freq = nullptr;
    int fsize = static_cast<int>(n);
    if (net->iflush(rc, 1, &rdata, &fsize, &rmh, &freq) != ncclSuccess) {
      check("gpu_flush", "FAIL", "iflush failed");
      return;
    }
    if (freq != nullptr) {
      int fdone = 0;
      poll_until([&] { return net->test(freq, &fdone, nullptr) != ncclSuccess || fdone; });
      check("gpu_flush", fdone ? "PASS" : "FAIL", "loopback READ flush of the GPU receive");
      flush_text = "flushed";
    } else {
      check("gpu_flush", "SKIP", "iflush returned no request (NCCL_GDR_FLUSH_DISABLE=1?)");
    }
  } else {
    g.cu.htod(dst.p, hr.data(), n);
  }
  g.cu.dtoh(out.data(), dst.p, n);
  const size_t bad = count_diff(in, out);
  // Under the tests' stand-in driver the "GPU" is host pages: say so on the result line.
  const bool standin = g.name.find("stand-in") != std::string::npos;
  check("gpu_transfer", bad == 0 ? "PASS" : "FAIL",
        std::string(standin ? "[stand-in driver, not a GPU] " : "") + std::to_string(n) +
            " bytes GPU -> GPU " +
            (direct ? "zero-copy (GPUDirect RDMA)" : "staged through host memory") + ", " +
            flush_text + ", " + std::to_string(bad) + " bytes differ");
  net->deregMr(sc, smh);
  net->deregMr(rc, rmh);
  net->closeSend(sc);
  net->closeRecv(rc);
  net->finalize(ctx);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "cuda" && !(mode == "plugin" && argc > 2)) {
    std::fprintf(stderr, "usage: gpu-check cuda | gpu-check plugin PATH/libnccl-net-sluice.so\n");
    return 2;
  }
  Gpu g;
  if (std::string why = g.cu.load(); !why.empty()) {
    check("cuda_init", "SKIP", why);
    return 77;
  }
  check("cuda_init", "PASS", "driver loaded, cuInit ok");
  if (!cuda_checks(g)) return 1;
  if (mode == "plugin") plugin_checks(g, argv[2]);
  return g_failed;
}
