// GPU memory through the exported NCCL tables, with the stand-in CUDA driver (tests/gpu/
// standin_cuda_driver.cc: "device" memory is host pages) loaded through SLUICE_CUDA_LIBRARY. Runs
// on real verbs in the bed: the type dispatch of regMr, the peermem path (ibv_reg_mr of the
// "device" pointer), the cache keyed by memory type, the dma-buf path failing with its reason, and
// the flush of a receive into "GPU" memory. Nothing here measures anything.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "ext_stats.h"
#include "nccl_profiler_default.h"
#include "net_harness.h"

namespace {

using namespace nettest;

bool require_rdma() {
  const char* v = std::getenv("SLUICE_REQUIRE_RDMA");
  return v != nullptr && std::string(v) == "1";
}

struct StandIn {
  void* lib = nullptr;
  int (*alloc)(uintptr_t*, size_t) = nullptr;
  int (*free)(uintptr_t) = nullptr;
  // NCCL's allocator (cuMem*): the stand-in maps memfd chunks into a reserved range.
  int (*reserve)(uintptr_t*, size_t, size_t, uintptr_t, unsigned long long) = nullptr;
  int (*create)(unsigned long long*, size_t, const void*, unsigned long long) = nullptr;
  int (*map)(uintptr_t, size_t, size_t, unsigned long long, unsigned long long) = nullptr;
  int (*unmap)(uintptr_t, size_t) = nullptr;
  int (*release)(unsigned long long) = nullptr;
  int (*addr_free)(uintptr_t, size_t) = nullptr;
  std::string error;
  StandIn() {
    const char* path = std::getenv("SLUICE_CUDA_LIBRARY");
    if (path == nullptr || std::string(path).find("sluice-test-fake-cuda") == std::string::npos) {
      error = "SLUICE_CUDA_LIBRARY does not name the stand-in driver (run through ctest)";
      return;
    }
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);  // the same instance the plugin loads
    if (lib == nullptr) {
      error = std::string("dlopen(") + path + ") failed: " + dlerror();
      return;
    }
    alloc = reinterpret_cast<int (*)(uintptr_t*, size_t)>(dlsym(lib, "cuMemAlloc_v2"));
    free = reinterpret_cast<int (*)(uintptr_t)>(dlsym(lib, "cuMemFree_v2"));
    reserve = reinterpret_cast<decltype(reserve)>(dlsym(lib, "cuMemAddressReserve"));
    create = reinterpret_cast<decltype(create)>(dlsym(lib, "cuMemCreate"));
    map = reinterpret_cast<decltype(map)>(dlsym(lib, "cuMemMap"));
    unmap = reinterpret_cast<decltype(unmap)>(dlsym(lib, "cuMemUnmap"));
    release = reinterpret_cast<decltype(release)>(dlsym(lib, "cuMemRelease"));
    addr_free = reinterpret_cast<decltype(addr_free)>(dlsym(lib, "cuMemAddressFree"));
    if (alloc == nullptr || free == nullptr || reserve == nullptr || create == nullptr ||
        map == nullptr || unmap == nullptr || release == nullptr || addr_free == nullptr)
      error = "stand-in lacks cuMemAlloc_v2/cuMemFree_v2 or the cuMem* calls";
  }
};

StandIn& standin() {
  static StandIn s;
  return s;
}

// Starts a v12 ctx with SLUICE_GDR=`mode`; skips (or fails under SLUICE_REQUIRE_RDMA=1) without a
// device.
#define START(net, mode)                                                             \
  do {                                                                               \
    ASSERT_TRUE(standin().error.empty()) << standin().error;                         \
    setenv("SLUICE_GDR", mode, 1);                                                   \
    ASSERT_TRUE(Lib::get().error.empty()) << Lib::get().error;                       \
    if ((net).init(0x9d) != ncclSuccess) {                                           \
      if (require_rdma()) FAIL() << "plugin init failed with SLUICE_REQUIRE_RDMA=1"; \
      GTEST_SKIP() << "no usable RDMA device (run through scripts/rdma-bed)";        \
    }                                                                                \
  } while (0)

int pick_peer(Net& net) {
  int n = 0;
  net.devices(&n);
  return n > 1 ? 1 : 0;
}

// A "device" buffer from the stand-in driver.
struct DevBuf {
  uintptr_t p = 0;
  size_t n = 0;
  explicit DevBuf(size_t bytes) : n(bytes) {
    if (standin().alloc(&p, bytes) != 0) p = 0;
  }
  ~DevBuf() {
    if (p != 0) standin().free(p);
  }
  uint8_t* bytes() const { return reinterpret_cast<uint8_t*>(p); }
};

// Two chunks of 2 MiB mapped back to back into one reservation (cuMemCreate + cuMemMap).
struct VmmBuf {
  static constexpr size_t kChunk = size_t{2} << 20;
  uintptr_t base = 0;
  unsigned long long h[2] = {0, 0};
  bool ok = false;
  VmmBuf() {
    if (standin().reserve(&base, 2 * kChunk, 0, 0, 0) != 0) return;
    for (int i = 0; i < 2; ++i) {
      if (standin().create(&h[i], kChunk, nullptr, 0) != 0) return;
      if (standin().map(base + i * kChunk, kChunk, 0, h[i], 0) != 0) return;
    }
    ok = true;
  }
  ~VmmBuf() {
    for (int i = 0; i < 2; ++i) {
      if (h[i] != 0) {
        standin().unmap(base + i * kChunk, kChunk);
        standin().release(h[i]);
      }
    }
    if (base != 0) standin().addr_free(base, 2 * kChunk);
  }
  uint8_t* span() const { return reinterpret_cast<uint8_t*>(base + kChunk / 2); }
};

// NCCL's allocator: a range over two mapped chunks of one reservation is registered as CUDA
// memory (one MR over both mappings), moved, flushed (NCCL_NET_FORCE_FLUSH, as NCCL sets it on
// Hopper), and every byte arrives.
TEST(StandInGpu, RangeOverTwoCuMemChunksMovesAndFlushes) {
  setenv("NCCL_NET_FORCE_FLUSH", "1", 1);
  Net net(12);
  START(net, "force");
  Conn c;
  ASSERT_TRUE(open_conn(net, 0, pick_peer(net), &c));
  VmmBuf src, dst;
  ASSERT_TRUE(src.ok && dst.ok) << "cuMemAddressReserve/cuMemCreate/cuMemMap failed";
  const size_t n = VmmBuf::kChunk;  // the second half of chunk 0 and the first half of chunk 1
  void* smh = nullptr;
  void* rmh = nullptr;
  ASSERT_EQ(net.reg_mr_type(c.send, src.span(), n, NCCL_PTR_CUDA, &smh), ncclSuccess)
      << last_warn();
  ASSERT_EQ(net.reg_mr_type(c.recv, dst.span(), n, NCCL_PTR_CUDA, &rmh), ncclSuccess)
      << last_warn();
  for (size_t i = 0; i < n; ++i) src.span()[i] = static_cast<uint8_t>((i * 197) ^ (i >> 11));
  std::memset(dst.span(), 0, n);
  void* rreq = nullptr;
  void* sreq = nullptr;
  void* rdata = dst.span();
  size_t cap = n;
  int tag = 5;
  ASSERT_TRUE(post_until("irecv", &rreq, [&](void** req) {
    return net.irecv(c.recv, 1, &rdata, &cap, &tag, &rmh, req);
  }));
  ASSERT_TRUE(post_until(
      "isend", &sreq, [&](void** req) { return net.isend(c.send, src.span(), n, tag, smh, req); }));
  int ssize = -1;
  int rsizes[NCCL_NET_MAX_REQUESTS] = {};
  ASSERT_TRUE(wait_done(net, "send", sreq, &ssize));
  ASSERT_TRUE(wait_done(net, "recv", rreq, rsizes));
  ASSERT_EQ(rsizes[0], static_cast<int>(n));
  void* freq = nullptr;
  ASSERT_EQ(net.iflush(c.recv, 1, &rdata, rsizes, &rmh, &freq), ncclSuccess) << last_warn();
  ASSERT_NE(freq, nullptr) << "a GPU receive with NCCL_NET_FORCE_FLUSH=1 must be flushed";
  ASSERT_TRUE(wait_done(net, "flush", freq, nullptr));
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += dst.span()[i] != src.span()[i];
  EXPECT_EQ(bad, 0u) << "bytes differ across the chunk boundary";
  EXPECT_EQ(net.dereg_mr(c.send, smh), ncclSuccess);
  EXPECT_EQ(net.dereg_mr(c.recv, rmh), ncclSuccess);
  EXPECT_TRUE(close_conn(net, &c));
  EXPECT_EQ(net.finalize(), ncclSuccess);
  unsetenv("NCCL_NET_FORCE_FLUSH");
}

TEST(StandInGpu, ForceRegistersCudaThroughPeermemAndFlushes) {
  Net net(12);
  START(net, "force");
  const int peer = pick_peer(net);
  Props pa;
  ASSERT_EQ(net.properties(0, &pa), ncclSuccess);
  std::fprintf(stderr, "%s: ptrSupport 0x%x\n", pa.name.c_str(), pa.ptr_support);
  ASSERT_TRUE(pa.ptr_support & NCCL_PTR_CUDA) << "SLUICE_GDR=force with a driver offers CUDA";
  Conn c;
  ASSERT_TRUE(open_conn(net, 0, peer, &c));

  const size_t n = (size_t{1} << 20) + 4096;
  DevBuf src(n), dst(n);
  ASSERT_NE(src.p, 0u);
  ASSERT_NE(dst.p, 0u);
  void* smh = nullptr;
  void* rmh = nullptr;
  ASSERT_EQ(net.reg_mr_type(c.send, src.bytes(), n, NCCL_PTR_CUDA, &smh), ncclSuccess)
      << last_warn();
  ASSERT_EQ(net.reg_mr_type(c.recv, dst.bytes(), n, NCCL_PTR_CUDA, &rmh), ncclSuccess)
      << last_warn();

  // The cache is keyed by memory type: the same range as CUDA shares the MR (no new verbs MR),
  // as HOST it does not (one more MR). Each call still gets its own handle.
  const int mrs0 = rdma_resource_count("mr");
  ASSERT_GE(mrs0, 0) << "`rdma resource show mr` failed (iproute2's rdma tool is needed)";
  void* again = nullptr;
  void* as_host = nullptr;
  ASSERT_EQ(net.reg_mr_type(c.recv, dst.bytes() + 4096, 4096, NCCL_PTR_CUDA, &again), ncclSuccess);
  EXPECT_NE(again, rmh) << "every registration has its own handle";
  EXPECT_EQ(rdma_resource_count("mr"), mrs0)
      << "a CUDA range inside a live CUDA registration reuses its MR";
  ASSERT_EQ(net.reg_mr_type(c.recv, dst.bytes(), n, NCCL_PTR_HOST, &as_host), ncclSuccess);
  EXPECT_NE(as_host, rmh);
  EXPECT_EQ(rdma_resource_count("mr"), mrs0 + 1)
      << "a HOST registration never serves a CUDA one (or back)";
  EXPECT_EQ(net.dereg_mr(c.recv, again), ncclSuccess);
  EXPECT_EQ(net.dereg_mr(c.recv, as_host), ncclSuccess);

  for (size_t i = 0; i < n; ++i) src.bytes()[i] = static_cast<uint8_t>((i * 131) ^ (i >> 9));
  std::memset(dst.bytes(), 0, n);
  void* rreq = nullptr;
  void* sreq = nullptr;
  void* rdata = dst.bytes();
  size_t cap = n;
  int tag = 3;
  ASSERT_TRUE(post_until("irecv", &rreq, [&](void** req) {
    return net.irecv(c.recv, 1, &rdata, &cap, &tag, &rmh, req);
  }));
  ASSERT_TRUE(post_until("isend", &sreq, [&](void** req) {
    return net.isend(c.send, src.bytes(), n, tag, smh, req);
  }));
  int ssize = -1;
  int rsizes[NCCL_NET_MAX_REQUESTS] = {};
  ASSERT_TRUE(wait_done(net, "send", sreq, &ssize));
  ASSERT_TRUE(wait_done(net, "recv", rreq, rsizes));
  ASSERT_EQ(rsizes[0], static_cast<int>(n));
  // A receive into CUDA memory is flushed: iflush returns a request that test() completes.
  void* freq = nullptr;
  ASSERT_EQ(net.iflush(c.recv, 1, &rdata, rsizes, &rmh, &freq), ncclSuccess) << last_warn();
  ASSERT_NE(freq, nullptr) << "a GPU receive must be flushed";
  ASSERT_TRUE(wait_done(net, "flush", freq, nullptr));
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i)
    if (dst.bytes()[i] != src.bytes()[i]) ++bad;
  EXPECT_EQ(bad, 0u) << "bytes differ after the transfer into \"GPU\" memory";

  EXPECT_EQ(net.dereg_mr(c.send, smh), ncclSuccess);
  EXPECT_EQ(net.dereg_mr(c.recv, rmh), ncclSuccess);
  EXPECT_TRUE(close_conn(net, &c));
  EXPECT_EQ(net.finalize(), ncclSuccess);
}

// regMrDmaBuf with a file that is not a dma-buf (a memfd): fails cleanly, naming the call.
TEST(StandInGpu, DmabufRegistrationFailsWithItsReason) {
  Net net(12);
  START(net, "force");
  Conn c;
  ASSERT_TRUE(open_conn(net, 0, pick_peer(net), &c));
  DevBuf buf(1 << 16);
  ASSERT_NE(buf.p, 0u);
  int fd = memfd_create("not-a-dmabuf", 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 1 << 16), 0);
  void* mh = nullptr;
  const ncclResult_t r = net.reg_mr_dmabuf(c.recv, buf.bytes(), 1 << 16, NCCL_PTR_CUDA, 0, fd, &mh);
  close(fd);
  EXPECT_NE(r, ncclSuccess);
  EXPECT_EQ(mh, nullptr);
  const std::string w = last_warn();
  std::fprintf(stderr, "WARN: %s\n", w.c_str());
  EXPECT_NE(w.find("regMrDmaBuf"), std::string::npos) << w;
  EXPECT_NE(w.find("ibv_reg_dmabuf_mr failed"), std::string::npos) << w;
  // The comm still works for host memory afterwards.
  std::vector<uint8_t> host(4096);
  void* hmh = nullptr;
  EXPECT_EQ(net.reg_mr_type(c.recv, host.data(), host.size(), NCCL_PTR_HOST, &hmh), ncclSuccess);
  if (hmh != nullptr) {
    EXPECT_EQ(net.dereg_mr(c.recv, hmh), ncclSuccess);
  }
  EXPECT_TRUE(close_conn(net, &c));
  EXPECT_EQ(net.finalize(), ncclSuccess);
}

// SLUICE_GDR=auto with a driver but neither peermem nor a dma-buf-capable NIC: HOST only, and a
// CUDA regMr is refused with every reason.
TEST(StandInGpu, AutoExplainsWhyCudaIsRefused) {
  if (access("/sys/module/nvidia_peermem", F_OK) == 0) GTEST_SKIP() << "nvidia_peermem is loaded";
  Net net(12);
  START(net, "auto");
  Props pa;
  ASSERT_EQ(net.properties(0, &pa), ncclSuccess);
  if (pa.ptr_support & NCCL_PTR_DMABUF) {
    EXPECT_TRUE(pa.ptr_support & NCCL_PTR_CUDA);
    EXPECT_EQ(net.finalize(), ncclSuccess);
    GTEST_SKIP() << pa.name << " accepts dma-buf: the refusal path needs a NIC without it";
  }
  EXPECT_EQ(pa.ptr_support, NCCL_PTR_HOST);
  Conn c;
  ASSERT_TRUE(open_conn(net, 0, pick_peer(net), &c));
  DevBuf buf(1 << 16);
  void* mh = nullptr;
  EXPECT_NE(net.reg_mr_type(c.send, buf.bytes(), 1 << 16, NCCL_PTR_CUDA, &mh), ncclSuccess);
  const std::string w = last_warn();
  std::fprintf(stderr, "WARN: %s\n", w.c_str());
  EXPECT_NE(w.find("regMr of CUDA pointer"), std::string::npos) << w;
  EXPECT_NE(w.find("GPUDirect RDMA off"), std::string::npos) << w;
  EXPECT_NE(w.find("peermem: nvidia_peermem not loaded"), std::string::npos) << w;
  EXPECT_NE(w.find("dmabuf: ibv_reg_dmabuf_mr(fd -1)"), std::string::npos) << w;
  EXPECT_TRUE(close_conn(net, &c));
  EXPECT_EQ(net.finalize(), ncclSuccess);
}

// ---- The eager path (SLUICE_EAGER_MAX, docs/eager.md) with GPU memory on a comm

// Sets SLUICE_EAGER_MAX for one test (its init reads it), and unsets it after.
struct EagerOn {
  EagerOn() { setenv("SLUICE_EAGER_MAX", "4096", 1); }
  ~EagerOn() { unsetenv("SLUICE_EAGER_MAX"); }
};

uint64_t eager_count(void* comm) {
  sluiceCommStats_v1_t st{};
  return comm_stats(comm, &st) ? st.eagerMessages : ~uint64_t{0};
}

// NCCL's buffers with GPUDirect on one side of a connection: a host buffer registered on each
// comm (LL), and a "GPU" buffer on the send comm (gpu_on_send) or the receive comm (SIMPLE), all
// registered before the first message.
struct MixedConn {
  static constexpr size_t kMax = 2048;
  Conn c;
  DevBuf gpu{kMax};
  RegBuf send_host, recv_host;
  void* gpu_comm = nullptr;
  void* gmh = nullptr;
  ::testing::AssertionResult open(Net& net, bool gpu_on_send) {
    if (auto ok = open_conn(net, 0, pick_peer(net), &c); !ok) return ok;
    if (gpu.p == 0) return ::testing::AssertionFailure() << "the stand-in's cuMemAlloc failed";
    if (auto ok = send_host.allocate(&net, c.send, kMax); !ok) return ok;
    if (auto ok = recv_host.allocate(&net, c.recv, kMax); !ok) return ok;
    gpu_comm = gpu_on_send ? c.send : c.recv;
    if (net.reg_mr_type(gpu_comm, gpu.bytes(), kMax, NCCL_PTR_CUDA, &gmh) != ncclSuccess)
      return ::testing::AssertionFailure() << "regMr of CUDA memory: " << last_warn();
    return ::testing::AssertionSuccess();
  }
  // NCCL's order: deregMr, then close.
  ::testing::AssertionResult close(Net& net) {
    const bool dereg = net.dereg_mr(gpu_comm, gmh) == ncclSuccess;
    send_host.reset();
    recv_host.reset();
    if (auto ok = close_conn(net, &c); !ok) return ok;
    return dereg ? ::testing::AssertionSuccess() : ::testing::AssertionFailure() << "deregMr";
  }
};

// NCCL with GPUDirect on the receiver: the comm's LL buffer in host memory, its SIMPLE buffer in
// GPU memory, both registered before the first receive; the sender's buffers in host memory
// (NCCL_NET_GDR_READ off, NCCL's default on many machines). Small messages alternate between the
// two. The receive comm gets no eager ring (the CPU cannot copy into GPU memory): every message
// goes by rendezvous and arrives whole. Before, the first (host) receive took a ring, and the
// first small message sent eagerly for the GPU buffer failed the comm.
TEST(StandInGpuEager, NoRingForAReceiverWithGpuMemoryRegistered) {
  EagerOn eager;
  Net net(12);
  // As NCCL drives it: a profiler callback at init (a loaded profiler, its contract checked) and a
  // step handle per post.
  nccl_profiler::attach(net, nccl_profiler::Mode::kLoaded);
  g_keep_info = true;
  START(net, "force");
  const size_t info0 = info_size();
  MixedConn m;
  ASSERT_TRUE(m.open(net, false));
  Conn& c = m.c;
  for (int i = 0; i < 24; ++i) {
    const size_t n = size_t{64} << (i % 6);  // 64 B .. 2 KiB
    const bool to_gpu = i % 2 == 1;
    ASSERT_TRUE(send_first_message(net, c, m.send_host.data(), m.send_host.mh(),
                                   to_gpu ? m.gpu.bytes() : m.recv_host.data(),
                                   to_gpu ? m.gmh : m.recv_host.mh(), n, 3, 900 + i))
        << "message " << i << " (" << n << " bytes, into " << (to_gpu ? "GPU" : "host")
        << " memory)";
  }
  EXPECT_EQ(eager_count(c.send), 0u) << "nothing may go eagerly to a comm with GPU receives";
  EXPECT_EQ(eager_count(c.recv), 0u);
  EXPECT_FALSE(
      info_with(info0, "eager path off for this comm: GPU memory is registered on it").empty())
      << "the receiver says why its comm has no ring";
  g_keep_info = false;
  EXPECT_TRUE(m.close(net));
  EXPECT_EQ(nccl_profiler::check(true), "");
  EXPECT_EQ(net.finalize(), ncclSuccess);
}

// The sender with GPUDirect (its SIMPLE buffer in GPU memory, its LL buffer in host memory), the
// receiver without (every buffer in host memory: it has a ring). Sends from host memory go
// eagerly; sends from GPU memory never do (the CPU copies an eager message into staging), and
// still arrive whole while the receiver holds its clear-to-send back for eager traffic (the send
// asks for it).
TEST(StandInGpuEager, SendsFromGpuMemoryGoByRendezvous) {
  EagerOn eager;
  Net net(12);
  nccl_profiler::attach(net, nccl_profiler::Mode::kLoaded);  // as NCCL drives it (above)
  START(net, "force");
  MixedConn m;
  ASSERT_TRUE(m.open(net, true));
  Conn& c = m.c;
  RegBuf& host_src = m.send_host;
  RegBuf& dst = m.recv_host;
  // Host sends first: the receiver numbers the tag and its traffic turns eager.
  for (int i = 0; i < 8; ++i)
    ASSERT_TRUE(send_first_message(net, c, host_src.data(), host_src.mh(), dst.data(), dst.mh(),
                                   256, 4, 500 + i))
        << "host message " << i;
  const uint64_t eager_host = eager_count(c.send);
  EXPECT_GT(eager_host, 0u) << "host sends of 256 bytes go eagerly with SLUICE_EAGER_MAX=4096";
  uint64_t eager_mixed = 0;
  for (int i = 0; i < 16; ++i) {
    const bool from_gpu = i % 2 == 0;
    const size_t n = size_t{64} << (i % 6);
    const uint64_t before = eager_count(c.send);
    ASSERT_TRUE(send_first_message(net, c, from_gpu ? m.gpu.bytes() : host_src.data(),
                                   from_gpu ? m.gmh : host_src.mh(), dst.data(), dst.mh(), n, 4,
                                   700 + i))
        << "message " << i << " (" << n << " bytes, from " << (from_gpu ? "GPU" : "host")
        << " memory)";
    const uint64_t went = eager_count(c.send) - before;
    if (from_gpu) {
      EXPECT_EQ(went, 0u) << "message " << i << " (" << n << " bytes) from GPU memory went eagerly";
    } else {
      eager_mixed += went;
    }
  }
  EXPECT_GT(eager_mixed, 0u) << "host sends beside GPU ones still go eagerly";
  EXPECT_EQ(eager_count(c.recv), eager_count(c.send)) << "every eager message was copied out";
  EXPECT_TRUE(m.close(net));
  EXPECT_EQ(nccl_profiler::check(true), "");
  EXPECT_EQ(net.finalize(), ncclSuccess);
}

}  // namespace
