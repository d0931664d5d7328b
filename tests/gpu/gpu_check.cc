// gpu-check: the CUDA-side checks of tests/gpu/run.sh, on a machine with a real GPU.
//
//   gpu-check cuda                 cuInit; cuMemAlloc and NCCL's allocator (cuMemCreate/cuMemMap,
//   two
//                                  chunks of one reservation): H->D->H bytes, dma-buf export of
//                                  each, the cuMem* one over the chunk boundary
//   gpu-check plugin PLUGIN.so     the above, then through the plugin's v12 table on ONE device,
//   the
//                                  plugin device nearest the GPU (loopback), with that device's
//                                  ptrSupport: GPU -> GPU transfers with every byte verified and a
//                                  forced flush (NCCL_NET_FORCE_FLUSH=1) through a regMrDmaBuf
//                                  handle over both cuMem* chunks (NCCL's call) and through regMr
//                                  of cuMemAlloc memory (peermem); staged through host memory, as
//                                  NCCL would, where ptrSupport has no CUDA
//
// Built with cuda.h for types and constants only; libcuda.so.1 is dlopened at run time
// (SLUICE_CUDA_LIBRARY overrides the name, as for the plugin). Prints one "CHECK <name>: PASS|FAIL|
// SKIP <detail>" line per check. Exit: 0 every check passed and GPU memory moved zero-copy; 1 a
// check failed; 77 no GPU, or the plugin's GPU steps were skipped (no RDMA device, or ptrSupport
// without CUDA): the SKIP lines say why.
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "nearest_nic.h"
#include "sluice/nccl_net_abi.h"
#include "sluice/sluice_ext.h"

namespace {

int g_failed = 0;
int g_skipped = 0;  // a plugin GPU step that could not run

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
  decltype(&cuDeviceGetPCIBusId) bus_id = nullptr;
  decltype(&cuMemAddressReserve) reserve = nullptr;
  decltype(&cuMemAddressFree) addr_free = nullptr;
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemSetAccess) set_access = nullptr;
  decltype(&cuMemGetAllocationGranularity) granularity = nullptr;

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
    SYM(bus_id, "cuDeviceGetPCIBusId");
    SYM(reserve, "cuMemAddressReserve");
    SYM(addr_free, "cuMemAddressFree");
    SYM(create, "cuMemCreate");
    SYM(release, "cuMemRelease");
    SYM(map, "cuMemMap");
    SYM(unmap, "cuMemUnmap");
    SYM(set_access, "cuMemSetAccess");
    SYM(granularity, "cuMemGetAllocationGranularity");
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
  std::string pci_path;  // sysfs path of the GPU's PCI function, "" when unknown
};

// NCCL's allocator: one reservation, two physical chunks mapped back to back (cuMemCreate +
// cuMemMap + cuMemSetAccess), so a range over the middle spans two mappings.
struct VmmBuf {
  const Cuda* cu = nullptr;
  CUdeviceptr base = 0;
  size_t chunk = 0;
  CUmemGenericAllocationHandle h[2] = {0, 0};
  bool mapped[2] = {false, false};
  ~VmmBuf() {
    if (cu == nullptr) return;
    for (int i = 0; i < 2; ++i) {
      if (mapped[i]) cu->unmap(base + i * chunk, chunk);
      if (h[i] != 0) cu->release(h[i]);
    }
    if (base != 0) cu->addr_free(base, 2 * chunk);
  }
  // "" on success, else the failing call.
  std::string allocate(const Cuda& c, CUdevice dev, size_t min_chunk) {
    cu = &c;
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    prop.allocFlags.gpuDirectRDMACapable = 1;  // as NCCL asks when the GPU supports it
    size_t g = 0;
    if (CUresult r = c.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM); r != CUDA_SUCCESS)
      return "cuMemGetAllocationGranularity: " + c.err(r);
    chunk = (min_chunk + g - 1) / g * g;
    if (CUresult r = c.reserve(&base, 2 * chunk, g, 0, 0); r != CUDA_SUCCESS) {
      base = 0;
      return "cuMemAddressReserve: " + c.err(r);
    }
    for (int i = 0; i < 2; ++i) {
      if (CUresult r = c.create(&h[i], chunk, &prop, 0); r != CUDA_SUCCESS) {
        h[i] = 0;
        return "cuMemCreate(" + std::to_string(chunk) + "): " + c.err(r);
      }
      if (CUresult r = c.map(base + i * chunk, chunk, 0, h[i], 0); r != CUDA_SUCCESS)
        return "cuMemMap: " + c.err(r);
      mapped[i] = true;
    }
    CUmemAccessDesc acc{};
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (CUresult r = c.set_access(base, 2 * chunk, &acc, 1); r != CUDA_SUCCESS)
      return "cuMemSetAccess: " + c.err(r);
    return "";
  }
  // The range NCCL-like users register: the second half of chunk 0 and the first of chunk 1.
  CUdeviceptr span() const { return base + chunk / 2; }
  size_t span_len() const { return chunk; }
};

std::string gpu_pci_path(const Gpu& g) {
  char bus[32] = {};
  if (g.cu.bus_id(bus, sizeof bus, g.dev) != CUDA_SUCCESS) return "";
  std::string b = bus;
  for (auto& c : b) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  char real[PATH_MAX];
  const std::string link = "/sys/bus/pci/devices/" + b;
  return realpath(link.c_str(), real) != nullptr ? real : "";
}

// cuda: allocations (cuMemAlloc and cuMem*), copies, dma-buf export. False when the GPU is
// unusable.
bool cuda_checks(Gpu& g) {
  char name[256] = {};
  g.cu.get(&g.dev, 0);
  g.cu.name(name, sizeof name, g.dev);
  g.name = name;
  g.pci_path = gpu_pci_path(g);
  int v = 0;
  if (g.cu.attr(&v, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, g.dev) == CUDA_SUCCESS)
    g.dmabuf_attr = v != 0;
  v = 0;
  if (g.cu.attr(&v, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, g.dev) == CUDA_SUCCESS)
    g.rdma_attr = v != 0;
  check("cuda_device", "PASS",
        std::string(name) + ", DMA_BUF_SUPPORTED=" + std::to_string(g.dmabuf_attr) +
            ", GPU_DIRECT_RDMA_SUPPORTED=" + std::to_string(g.rdma_attr) + ", PCI " +
            (g.pci_path.empty() ? "unknown" : g.pci_path));
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
  size_t bad = count_diff(in, out);
  check("cuda_copy", bad == 0 ? "PASS" : "FAIL",
        std::to_string(n) + " bytes host -> GPU -> host (cuMemAlloc), " + std::to_string(bad) +
            " differ");
  VmmBuf vm;
  if (std::string why = vm.allocate(g.cu, g.dev, size_t{2} << 20); !why.empty()) {
    check("cuda_vmm", "FAIL", "NCCL's allocator: " + why);
    return false;
  }
  std::vector<uint8_t> vin(vm.span_len()), vout(vm.span_len(), 0);
  fill(vin, 0x3c);
  r1 = g.cu.htod(vm.span(), vin.data(), vin.size());
  r2 = g.cu.dtoh(vout.data(), vm.span(), vout.size());
  bad = count_diff(vin, vout);
  check("cuda_vmm", r1 == CUDA_SUCCESS && r2 == CUDA_SUCCESS && bad == 0 ? "PASS" : "FAIL",
        "cuMemCreate/cuMemMap, 2 chunks of " + std::to_string(vm.chunk) + " bytes; " +
            std::to_string(vin.size()) + " bytes over the chunk boundary host -> GPU -> host, " +
            std::to_string(bad) + " differ (" + g.cu.err(r1) + ", " + g.cu.err(r2) + ")");
  if (g.cu.get_handle == nullptr) {
    check("dmabuf_export", "SKIP", "driver has no cuMemGetHandleForAddressRange (older than 11.7)");
    return true;
  }
  struct Range {
    const char* what;
    CUdeviceptr p;
    size_t len;
  } ranges[] = {{"cuMemAlloc buffer", b.p, b.alloc},
                {"cuMem* range over two chunks", vm.span(), vm.span_len()}};
  for (const Range& rg : ranges) {
    int fd = -1;
    CUresult r = g.cu.get_handle(&fd, rg.p, rg.len, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    if (r == CUDA_SUCCESS && fd >= 0) {
      check("dmabuf_export", "PASS",
            std::string(rg.what) + ": fd " + std::to_string(fd) + " for " + std::to_string(rg.len) +
                " bytes of GPU memory");
      close(fd);
    } else {
      // A GPU that says it supports dma-buf must export; one that says not may refuse.
      check("dmabuf_export", g.dmabuf_attr ? "FAIL" : "SKIP",
            std::string(rg.what) + ": cuMemGetHandleForAddressRange: " + g.cu.err(r) +
                (g.dmabuf_attr ? " although DMA_BUF_SUPPORTED=1" : " (DMA_BUF_SUPPORTED=0)"));
    }
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

std::string ptr_text(int ptr) {
  return std::string("HOST") + (ptr & NCCL_PTR_CUDA ? "|CUDA" : "") +
         (ptr & NCCL_PTR_DMABUF ? "|DMABUF" : "");
}

// NCCL's profiler side as the plugin meets it with no profiler plugin loaded: from net v10 NCCL
// passes ncclProfilerCallback to every init (src/plugin/net.cc), and it returns ncclSuccess and
// does nothing else; every isend / irecv of its proxy gets the handle of its step
// (&sub->pHandles[step % NCCL_STEPS]), never NULL. gpu-check drives the plugin that way, so the
// plugin's profiler branch runs here as it does under NCCL; the calls are counted and printed.
long long g_prof_calls = 0;
ncclResult_t nccl_default_profiler(void** /*eHandle*/, int /*type*/, void* /*pHandle*/,
                                   int64_t /*pluginId*/, void* /*extData*/) {
  ++g_prof_calls;
  return ncclSuccess;
}
constexpr int kNcclSteps = 8;         // NCCL_STEPS
void* g_step_handles[kNcclSteps][2];  // what &sub->pHandles[step % NCCL_STEPS] points to
int g_step = 0;
void* next_phandle() {
  return &g_step_handles[g_step++ % kNcclSteps];
}

struct Loop {
  ncclNet_v12_t* net = nullptr;
  void* sc = nullptr;
  void* rc = nullptr;
};

// One transfer of `n` bytes from `sdata` to `rdata` (registered as smh/rmh), then a flush when
// `flush`. "" on success, else what failed.
std::string transfer(Loop& l, void* sdata, void* rdata, size_t n, void* smh, void* rmh, bool flush,
                     bool* flushed) {
  ncclNet_v12_t* net = l.net;
  void *rreq = nullptr, *sreq = nullptr;
  size_t cap = n;
  int tag = 1;
  void* sph = next_phandle();  // each post its own step's handle, as NCCL's proxy gives them
  void* rph = next_phandle();
  bool ok = poll_until([&] {
    if (rreq == nullptr &&
        net->irecv(l.rc, 1, &rdata, &cap, &tag, &rmh, &rph, &rreq) != ncclSuccess)
      return true;
    if (rreq != nullptr && sreq == nullptr &&
        net->isend(l.sc, sdata, n, tag, smh, sph, &sreq) != ncclSuccess)
      return true;
    return rreq != nullptr && sreq != nullptr;
  });
  if (!ok || rreq == nullptr || sreq == nullptr) return "isend/irecv were not accepted";
  int sdone = 0, rdone = 0, sizes[NCCL_NET_MAX_REQUESTS] = {};
  int ssize = 0;
  ok = poll_until([&] {
    if (!sdone && net->test(sreq, &sdone, &ssize) != ncclSuccess) return true;
    if (!rdone && net->test(rreq, &rdone, sizes) != ncclSuccess) return true;
    return sdone && rdone;
  });
  if (!ok || !sdone || !rdone || sizes[0] != static_cast<int>(n))
    return "send/receive did not complete with " + std::to_string(n) + " bytes (got " +
           std::to_string(sizes[0]) + ")";
  *flushed = false;
  if (!flush) return "";
  void* freq = nullptr;
  int fsize = static_cast<int>(n);
  if (net->iflush(l.rc, 1, &rdata, &fsize, &rmh, &freq) != ncclSuccess) return "iflush failed";
  if (freq == nullptr)
    return "iflush returned no request for a GPU receive with NCCL_NET_FORCE_FLUSH=1";
  int fdone = 0;
  poll_until([&] { return net->test(freq, &fdone, nullptr) != ncclSuccess || fdone; });
  if (!fdone) return "the flush did not complete";
  *flushed = true;
  return "";
}

// A send comm and a receive comm on `dev`, connected to each other (loopback), NCCL's way: the
// listen closed after the accept. False when they did not come up.
bool open_loop(ncclNet_v12_t* net, void* ctx, int dev, Loop* l) {
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* lc = nullptr;
  l->net = net;
  if (net->listen(ctx, dev, handle, &lc) != ncclSuccess) return false;
  const bool up = poll_until([&] {
    ncclNetDeviceHandle_v12_t* dh = nullptr;
    if (l->sc == nullptr && net->connect(ctx, dev, handle, &l->sc, &dh) != ncclSuccess) return true;
    if (l->rc == nullptr && net->accept(lc, &l->rc, &dh) != ncclSuccess) return true;
    return l->sc != nullptr && l->rc != nullptr;
  });
  net->closeListen(lc);
  return up && l->sc != nullptr && l->rc != nullptr;
}

// One small message as NCCL's proxy may drive it with the eager path on: the send first (it may go
// eagerly before the receive exists), then the receive, both tested to completion. "" on success.
std::string small_message(Loop& l, void* sdata, void* rdata, size_t n, void* smh, void* rmh) {
  ncclNet_v12_t* net = l.net;
  void *rreq = nullptr, *sreq = nullptr;
  size_t cap = n;
  int tag = 2;
  void* sph = next_phandle();  // each post its own step's handle, as NCCL's proxy gives them
  void* rph = next_phandle();
  if (net->isend(l.sc, sdata, n, tag, smh, sph, &sreq) != ncclSuccess) return "isend failed";
  int sdone = 0, rdone = 0, sizes[NCCL_NET_MAX_REQUESTS] = {};
  const bool ok = poll_until([&] {
    if (rreq == nullptr &&
        net->irecv(l.rc, 1, &rdata, &cap, &tag, &rmh, &rph, &rreq) != ncclSuccess)
      return true;
    if (sreq == nullptr && net->isend(l.sc, sdata, n, tag, smh, sph, &sreq) != ncclSuccess)
      return true;
    if (sreq != nullptr && !sdone && net->test(sreq, &sdone, nullptr) != ncclSuccess) return true;
    if (rreq != nullptr && !rdone && net->test(rreq, &rdone, sizes) != ncclSuccess) return true;
    return sdone && rdone;
  });
  if (!ok || !sdone || !rdone || sizes[0] != static_cast<int>(n))
    return "a " + std::to_string(n) + "-byte message did not complete (its WARN above says why)";
  return "";
}

// The eager path beside GPU memory (docs/eager.md "GPU memory"), NCCL's mix with GPUDirect on a
// fresh connection: each comm has a host buffer (NCCL's LL) and a GPU buffer (SIMPLE), all
// registered before the first message. 16 small messages, host -> host first (the receiver's
// first receive is in host memory), then alternating host -> GPU and GPU -> host. None may go
// eagerly: the CPU can copy neither out of the ring into GPU memory nor from GPU memory into
// staging (before, the first host -> GPU message failed the comm, and a GPU -> host one was a CPU
// copy from a device pointer). Every byte arrives.
void eager_check(Gpu& g, ncclNet_v12_t* net, void* ctx, int dev, void* lib,
                 const std::string& tagline) {
  const char* max = std::getenv("SLUICE_EAGER_MAX");
  if (max == nullptr || std::atol(max) <= 0) {
    check("gpu_eager", "SKIP", "SLUICE_EAGER_MAX is 0: the eager path is off");
    return;
  }
  const auto* ext = static_cast<const sluiceExt_v1_t*>(dlsym(lib, SLUICE_EXT_SYMBOL));
  if (ext == nullptr) {
    check("gpu_eager", "FAIL", "the plugin exports no sluiceExt_v1 (its eager count)");
    return;
  }
  Loop l;
  if (!open_loop(net, ctx, dev, &l)) {
    check("gpu_eager", "FAIL", "listen/connect/accept did not complete");
    return;
  }
  constexpr size_t kMax = 2048;
  DevBuf gs, gr;
  std::vector<uint8_t> hs(kMax), hr(kMax), in(kMax), out(kMax);
  void *hsmh = nullptr, *hrmh = nullptr, *gsmh = nullptr, *grmh = nullptr;
  std::string why;
  if (gs.allocate(g.cu, kMax) != CUDA_SUCCESS || gr.allocate(g.cu, kMax) != CUDA_SUCCESS)
    why = "cuMemAlloc failed";
  if (why.empty() &&
      (net->regMr(l.sc, hs.data(), kMax, NCCL_PTR_HOST, &hsmh) != ncclSuccess ||
       net->regMr(l.rc, hr.data(), kMax, NCCL_PTR_HOST, &hrmh) != ncclSuccess ||
       net->regMr(l.sc, reinterpret_cast<void*>(gs.p), kMax, NCCL_PTR_CUDA, &gsmh) != ncclSuccess ||
       net->regMr(l.rc, reinterpret_cast<void*>(gr.p), kMax, NCCL_PTR_CUDA, &grmh) != ncclSuccess))
    why = "regMr failed (its WARN above says why)";
  size_t bad = 0;
  int msgs = 0;
  for (int i = 0; i < 16 && why.empty(); ++i, ++msgs) {
    const size_t n = size_t{8} << (i % 9);   // 8 B .. 2 KiB
    const int kind = i < 4 ? 0 : 1 + i % 2;  // 0 host -> host, 1 host -> GPU, 2 GPU -> host
    in.assign(n, 0);
    fill(in, 0x31 + i);
    std::memcpy(hs.data(), in.data(), n);
    g.cu.htod(gs.p, in.data(), n);
    std::fill(hr.begin(), hr.end(), 0);
    why = small_message(l, kind == 2 ? reinterpret_cast<void*>(gs.p) : hs.data(),
                        kind == 1 ? reinterpret_cast<void*>(gr.p) : hr.data(), n,
                        kind == 2 ? gsmh : hsmh, kind == 1 ? grmh : hrmh);
    if (!why.empty()) break;
    out.assign(n, 0);
    if (kind == 1)
      g.cu.dtoh(out.data(), gr.p, n);
    else
      std::memcpy(out.data(), hr.data(), n);
    bad += count_diff(in, out);
  }
  sluiceCommStats_v1_t st{};
  const bool counted = ext->commStats(l.sc, &st) == 0;
  for (void* mh : {hsmh, gsmh})
    if (mh != nullptr) net->deregMr(l.sc, mh);
  for (void* mh : {hrmh, grmh})
    if (mh != nullptr) net->deregMr(l.rc, mh);
  net->closeSend(l.sc);
  net->closeRecv(l.rc);
  if (!why.empty()) {
    check("gpu_eager", "FAIL", why);
    return;
  }
  const bool pass = bad == 0 && counted && st.eagerMessages == 0;
  check("gpu_eager", pass ? "PASS" : "FAIL",
        tagline + std::to_string(msgs) + " messages of 8 B..2 KiB (SLUICE_EAGER_MAX=" + max +
            ") on one connection with host and GPU buffers registered on both comms (host -> " +
            "host, host -> GPU, GPU -> host): " + std::to_string(bad) + " bytes differ, " +
            (counted ? std::to_string(st.eagerMessages) : std::string("?")) +
            " went eagerly (none may: the receive comm gets no eager ring)");
}

// plugin: GPU -> GPU through the plugin's v12 table, loopback on the device nearest the GPU.
void plugin_checks(Gpu& g, const char* plugin_path) {
  // NCCL sets this on Hopper and later when it wants the flush; force it so the flush runs.
  setenv("NCCL_NET_FORCE_FLUSH", "1", 0);
  // The eager path on (unless set): its check below runs small messages beside GPU memory.
  setenv("SLUICE_EAGER_MAX", "4096", 0);
  void* lib = dlopen(plugin_path, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    check("plugin_load", "FAIL", std::string("dlopen: ") + dlerror());
    return;
  }
  Loop l;
  l.net = static_cast<ncclNet_v12_t*>(dlsym(lib, "ncclNetPlugin_v12"));
  if (l.net == nullptr) {
    check("plugin_load", "FAIL", "no ncclNetPlugin_v12");
    return;
  }
  ncclNet_v12_t* net = l.net;
  void* ctx = nullptr;
  ncclNetCommConfig_v12_t cfg{};
  cfg.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF;
  int ndev = 0;
  if (net->init(&ctx, 0x67, &cfg, logger, nccl_default_profiler) != ncclSuccess ||
      net->devices(&ndev) != ncclSuccess || ndev < 1) {
    check("plugin_init", "SKIP",
          "no RDMA device: the plugin's init failed or found no device (its WARN above says "
          "why), so no GPU memory can cross a NIC here");
    g_skipped = 1;
    return;
  }
  std::vector<std::string> paths;
  std::vector<ncclNetProperties_v12_t> props(ndev);
  for (int i = 0; i < ndev; ++i) {
    net->getProperties(i, &props[i]);
    paths.push_back(props[i].pciPath != nullptr ? props[i].pciPath : "");
  }
  const int dev = gpucheck::nearest_nic(g.pci_path, paths);
  const ncclNetProperties_v12_t& p = props[dev];
  const int ptr = p.ptrSupport;
  check("plugin_init", "PASS",
        std::to_string(ndev) + " device(s); loopback on device " + std::to_string(dev) + " " +
            p.name + " (nearest the GPU; PCI " + (paths[dev].empty() ? "unknown" : paths[dev]) +
            "), its ptrSupport " + ptr_text(ptr) +
            " (the decision and its reasons are in the INFO lines above); init got NCCL's "
            "default profiler callback, as NCCL passes it from net v10");
  if (!open_loop(net, ctx, dev, &l)) {
    check("plugin_connect", "FAIL", "listen/connect/accept did not complete");
    return;
  }
  check("plugin_connect", "PASS", std::string(p.name) + " -> itself");
  const bool standin = g.name.find("stand-in") != std::string::npos;
  const std::string tagline = standin ? "[stand-in driver, not a GPU] " : "";

  // 1. NCCL's route: regMrDmaBuf of a range over two cuMem* chunks, both ways.
  if (!(ptr & NCCL_PTR_DMABUF)) {
    check("gpu_dmabuf_transfer", "SKIP",
          std::string(p.name) + " was not offered for dma-buf (ptrSupport " + ptr_text(ptr) +
              "; the INFO lines above say why)");
    g_skipped = 1;
  } else {
    VmmBuf src, dst;
    std::string why = src.allocate(g.cu, g.dev, size_t{4} << 20);
    if (why.empty()) why = dst.allocate(g.cu, g.dev, size_t{4} << 20);
    const size_t n = src.span_len();
    int sfd = -1, rfd = -1;
    void *smh = nullptr, *rmh = nullptr;
    if (why.empty() && g.cu.get_handle(&sfd, src.span(), n, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                                       0) != CUDA_SUCCESS)
      why = "cuMemGetHandleForAddressRange of the send range failed";
    if (why.empty() && g.cu.get_handle(&rfd, dst.span(), n, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                                       0) != CUDA_SUCCESS)
      why = "cuMemGetHandleForAddressRange of the receive range failed";
    if (why.empty() && net->regMrDmaBuf(l.sc, reinterpret_cast<void*>(src.span()), n, NCCL_PTR_CUDA,
                                        0, sfd, &smh) != ncclSuccess)
      why = "regMrDmaBuf (send) failed (its WARN above says why)";
    if (why.empty() && net->regMrDmaBuf(l.rc, reinterpret_cast<void*>(dst.span()), n, NCCL_PTR_CUDA,
                                        0, rfd, &rmh) != ncclSuccess)
      why = "regMrDmaBuf (receive) failed (its WARN above says why)";
    if (sfd >= 0) close(sfd);  // as NCCL does, right after the call
    if (rfd >= 0) close(rfd);
    bool flushed = false;
    std::vector<uint8_t> in(n), out(n, 0), zero(n, 0);
    if (why.empty()) {
      fill(in, 0xd1);
      g.cu.htod(src.span(), in.data(), n);
      g.cu.htod(dst.span(), zero.data(), n);
      why = transfer(l, reinterpret_cast<void*>(src.span()), reinterpret_cast<void*>(dst.span()), n,
                     smh, rmh, true, &flushed);
    }
    if (why.empty()) {
      g.cu.dtoh(out.data(), dst.span(), n);
      const size_t bad = count_diff(in, out);
      check("gpu_dmabuf_transfer", bad == 0 ? "PASS" : "FAIL",
            tagline + std::to_string(n) + " bytes GPU -> GPU zero-copy through regMrDmaBuf " +
                "handles over two cuMem* chunks each, forced flush done, " + std::to_string(bad) +
                " bytes differ");
    } else {
      check("gpu_dmabuf_transfer", "FAIL", why);
    }
    if (smh != nullptr) net->deregMr(l.sc, smh);
    if (rmh != nullptr) net->deregMr(l.rc, rmh);
  }

  // 2. regMr of cuMemAlloc memory (peermem, or dma-buf exported by the plugin), or staged.
  const size_t n = (size_t{8} << 20) + 3;
  DevBuf src, dst;
  if (src.allocate(g.cu, n) != CUDA_SUCCESS || dst.allocate(g.cu, n) != CUDA_SUCCESS) {
    check("gpu_transfer", "FAIL", "cuMemAlloc failed");
    return;
  }
  std::vector<uint8_t> in(n), out(n, 0), zero(n, 0);
  fill(in, 0xa7);
  g.cu.htod(src.p, in.data(), n);
  g.cu.htod(dst.p, zero.data(), n);
  const bool direct = (ptr & NCCL_PTR_CUDA) != 0;
  std::vector<uint8_t> hs, hr;
  void *smh = nullptr, *rmh = nullptr;
  void* sdata = reinterpret_cast<void*>(src.p);
  void* rdata = reinterpret_cast<void*>(dst.p);
  if (direct) {
    if (net->regMr(l.sc, sdata, n, NCCL_PTR_CUDA, &smh) != ncclSuccess ||
        net->regMr(l.rc, rdata, n, NCCL_PTR_CUDA, &rmh) != ncclSuccess) {
      check("gpu_transfer", "FAIL", "regMr of CUDA memory failed although ptrSupport has CUDA");
      return;
    }
  } else {
    hs.resize(n);
    hr.resize(n);
    g.cu.dtoh(hs.data(), src.p, n);
    sdata = hs.data();
    rdata = hr.data();
    if (net->regMr(l.sc, sdata, n, NCCL_PTR_HOST, &smh) != ncclSuccess ||
        net->regMr(l.rc, rdata, n, NCCL_PTR_HOST, &rmh) != ncclSuccess) {
      check("gpu_transfer", "FAIL", "regMr of host staging buffers failed");
      return;
    }
  }
  bool flushed = false;
  if (std::string why = transfer(l, sdata, rdata, n, smh, rmh, direct, &flushed); !why.empty()) {
    check("gpu_transfer", "FAIL", why);
    return;
  }
  if (!direct) g.cu.htod(dst.p, hr.data(), n);
  g.cu.dtoh(out.data(), dst.p, n);
  const size_t bad = count_diff(in, out);
  check("gpu_transfer", bad == 0 ? "PASS" : "FAIL",
        tagline + std::to_string(n) + " bytes GPU -> GPU " +
            (direct ? "zero-copy (regMr of cuMemAlloc memory)" : "staged through host memory") +
            ", " + (flushed ? "forced flush done" : "no flush (host buffers)") + ", " +
            std::to_string(bad) + " bytes differ");
  if (direct) eager_check(g, net, ctx, dev, lib, tagline);
  if (!direct) {
    check("gpu_register", "SKIP",
          std::string(p.name) + " ptrSupport " + ptr_text(ptr) +
              ": GPU memory cannot be registered on it (the INFO lines above say why); only the "
              "staged route ran");
    g_skipped = 1;
  }
  net->deregMr(l.sc, smh);
  net->deregMr(l.rc, rmh);
  net->closeSend(l.sc);
  net->closeRecv(l.rc);
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
  if (mode == "plugin") {
    plugin_checks(g, argv[2]);
    std::printf("gpu-check: NCCL's default profiler callback was called %lld times\n",
                g_prof_calls);
  }
  if (g_failed) return 1;
  return g_skipped ? 77 : 0;
}
