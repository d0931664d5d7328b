// GPUDirect detection and the loopback flush over real verbs, through core's API with the gpu/
// layer attached as the plugin attaches it. Each test sets the environment it needs before the
// engine starts (configuration is read at engine start), so force-flush and the default run in one
// process. Internals (flush counters, MR access flags) are read through core/src headers.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "comm/engine.h"
#include "datapath/flush.h"
#include "rdma_env.h"
#include "sluice/core/api.h"
#include "sluice/gpu/cuda_driver.h"
#include "sluice/gpu/gdr.h"

namespace {

using sluice::rdmatest::count_own;

using namespace sluice;
using Clock = std::chrono::steady_clock;

class CoreGdr : public ::testing::Test {
 protected:
  void TearDown() override {
    if (acquired_) engine_release();
    unsetenv("NCCL_NET_FORCE_FLUSH");
    unsetenv("NCCL_GDR_FLUSH_DISABLE");
  }
  // Starts the engine with the gpu/ layer after setting `force_flush` / `flush_disable`.
  void start(bool force_flush, bool flush_disable = false) {
    auto devs = rdmatest::active_rdma_devices();
    SLUICE_REQUIRE_DEVICES(devs, 1);
    setenv("NCCL_NET_FORCE_FLUSH", force_flush ? "1" : "0", 1);
    setenv("NCCL_GDR_FLUSH_DISABLE", flush_disable ? "1" : "0", 1);
    Status st = engine_acquire(nullptr, {}, {}, &gpu::make_gpu_ops);
    ASSERT_TRUE(st.is_ok()) << st.message();
    acquired_ = true;
    ASSERT_GE(device_count(), 1);
  }
  void open_pair(SendComm** s, RecvComm** r) {
    const int dev_r = device_count() > 1 ? 1 : 0;
    char handle[kHandleSize];
    ListenComm* l = nullptr;
    Status st = listen(dev_r, handle, &l);
    ASSERT_TRUE(st.is_ok()) << st.message();
    *s = nullptr;
    *r = nullptr;
    auto deadline = Clock::now() + std::chrono::seconds(60);
    while (*s == nullptr || *r == nullptr) {
      ASSERT_LT(Clock::now(), deadline) << "connection not established";
      if (*s == nullptr) {
        ASSERT_TRUE(connect(0, handle, CommConfig{}, s).is_ok());
      }
      if (*r == nullptr) {
        ASSERT_TRUE(accept(l, r).is_ok());
      }
    }
    ASSERT_TRUE(close_listen(l).is_ok());
  }
  Status wait(Request* req, size_t* sizes) {
    auto deadline = Clock::now() + std::chrono::seconds(60);
    int done = 0;
    while (!done) {
      if (Clock::now() > deadline) return Status(Code::kInternalError, "request timed out");
      SLUICE_RETURN_IF_ERROR(test(req, &done, sizes));
    }
    return Status::ok();
  }
  // Sends `n` bytes of `src` into `dst` over s -> r.
  void transfer(SendComm* s, RecvComm* r, void* src, MemHandle* smh, void* dst, MemHandle* rmh,
                size_t n) {
    Request* rreq = nullptr;
    Request* sreq = nullptr;
    size_t cap = n;
    int tag = 7;
    auto deadline = Clock::now() + std::chrono::seconds(60);
    while (rreq == nullptr) {
      ASSERT_LT(Clock::now(), deadline);
      Status st = irecv(r, 1, &dst, &cap, &tag, &rmh, &rreq);
      ASSERT_TRUE(st.is_ok() || st.is_again()) << st.message();
    }
    while (sreq == nullptr) {
      ASSERT_LT(Clock::now(), deadline);
      Status st = isend(s, src, n, tag, smh, &sreq);
      ASSERT_TRUE(st.is_ok() || st.is_again()) << st.message();
    }
    size_t got[kMaxRecvs] = {};
    ASSERT_TRUE(wait(sreq, nullptr).is_ok());
    Status st = wait(rreq, got);
    ASSERT_TRUE(st.is_ok()) << st.message();
    ASSERT_EQ(got[0], n);
  }
  bool acquired_ = false;
};

// No CUDA driver here: every device says HOST only, without an error, and the decision text names
// the missing driver and the NIC's own answer to the dma-buf probe, which ran for real.
TEST_F(CoreGdr, DetectionExplainsItselfWithoutADriver) {
  ASSERT_NO_FATAL_FAILURE(start(false));
  if (gpu::CudaDriver::instance().available()) {
    GTEST_SKIP() << "a CUDA driver is present here; tests/gpu/run.sh covers this machine";
  }
  for (int i = 0; i < device_count(); ++i) {
    DeviceProperties p;
    ASSERT_TRUE(device_properties(i, &p).is_ok());
    EXPECT_EQ(p.ptr_support, kPtrHost) << p.name;
    ASSERT_NE(p.gdr_summary, nullptr);
    const std::string summary = p.gdr_summary;
    std::fprintf(stderr, "%s: %s\n", p.name, summary.c_str());
    EXPECT_NE(summary.find("GPUDirect RDMA off"), std::string::npos) << summary;
    EXPECT_NE(summary.find("NCCL stages GPU data through host memory"), std::string::npos);
    EXPECT_NE(summary.find("no CUDA driver: "), std::string::npos) << summary;
    const DmabufProbe& probe = engine()->device(i)->adapter->dmabuf;
    EXPECT_EQ(probe.text.rfind("ibv_reg_dmabuf_mr(fd -1) on ", 0), 0u) << probe.text;
    if (!probe.supported) {
      EXPECT_NE(summary.find("dmabuf: " + probe.text), std::string::npos) << summary;
    }
  }
}

// The probe is a real verbs call: asking again gives the same answer, and a NIC that says
// "unsupported" names the errno it answered with.
TEST_F(CoreGdr, DmabufProbeIsRealAndStable) {
  ASSERT_NO_FATAL_FAILURE(start(false));
  for (int i = 0; i < device_count(); ++i) {
    Adapter* a = engine()->device(i)->adapter;
    DmabufProbe again = probe_dmabuf(a->pd.get(), a->name);
    EXPECT_EQ(again.supported, a->dmabuf.supported) << again.text;
    EXPECT_EQ(again.text, a->dmabuf.text);
    std::fprintf(stderr, "%s\n", again.text.c_str());
    if (!again.supported) {
      EXPECT_TRUE(again.text.find("EOPNOTSUPP") != std::string::npos ||
                  again.text.find("EPROTONOSUPPORT") != std::string::npos ||
                  again.text.find("ENOSYS") != std::string::npos ||
                  again.text.find("errno") != std::string::npos)
          << again.text;
    } else {
      EXPECT_NE(again.text.find("EBADF"), std::string::npos) << again.text;
    }
  }
}

// NCCL_NET_FORCE_FLUSH on host buffers: iflush posts a loopback READ of the received buffer's first
// byte, and test() reports the flush done only in (or after) the call that polled the READ's
// completion; the bounce word then holds the byte that was received, so the READ really ran.
TEST_F(CoreGdr, ForcedFlushOnHostBuffersGatesTest) {
  ASSERT_NO_FATAL_FAILURE(start(true));
  SendComm* s;
  RecvComm* r;
  ASSERT_NO_FATAL_FAILURE(open_pair(&s, &r));
  const size_t n = 65537;
  std::vector<uint8_t> src(n), dst(n, 0);
  MemHandle* smh = nullptr;
  MemHandle* rmh = nullptr;
  ASSERT_TRUE(reg_mr(s, src.data(), n, MemType::kHost, &smh).is_ok());
  ASSERT_TRUE(reg_mr(r, dst.data(), n, MemType::kHost, &rmh).is_ok());
  EXPECT_TRUE(rmh->access & IBV_ACCESS_REMOTE_READ) << "force flush needs remote read";
  EXPECT_FALSE(flush_stats(*r).created) << "the loopback QP is created lazily";
  uint64_t completed_before = 0;
  for (int round = 0; round < 4; ++round) {
    const uint8_t marker = static_cast<uint8_t>(0x51 + 17 * round);
    for (size_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(marker + i);
    ASSERT_NO_FATAL_FAILURE(transfer(s, r, src.data(), smh, dst.data(), rmh, n));
    ASSERT_EQ(dst[0], marker);
    void* data = dst.data();
    int size = static_cast<int>(n);
    Request* freq = nullptr;
    Status st = iflush(r, 1, &data, &size, &rmh, &freq);
    ASSERT_TRUE(st.is_ok()) << st.message();
    ASSERT_NE(freq, nullptr) << "NCCL_NET_FORCE_FLUSH=1 must flush host buffers";
    FlushStats fs = flush_stats(*r);
    ASSERT_TRUE(fs.created);
    EXPECT_EQ(fs.reads_posted, static_cast<uint64_t>(round + 1));
    ASSERT_EQ(fs.reads_completed, completed_before) << "nothing polls the flush CQ but test()";
    int done = 0;
    int calls = 0;
    auto deadline = Clock::now() + std::chrono::seconds(60);
    while (!done) {
      ASSERT_LT(Clock::now(), deadline) << "flush never completed";
      const uint64_t before = flush_stats(*r).reads_completed;
      ASSERT_EQ(before, completed_before) << "only test() polls the flush CQ";
      st = test(freq, &done, nullptr);
      ASSERT_TRUE(st.is_ok()) << st.message();
      ++calls;
      const uint64_t after = flush_stats(*r).reads_completed;
      if (done) {
        // The READ's completion was consumed by now: done never runs ahead of the CQ.
        EXPECT_EQ(after, completed_before + 1) << "test reported done without the READ";
        (void)before;
      } else {
        EXPECT_EQ(after, completed_before) << "a completion was polled but test said not done";
      }
    }
    completed_before += 1;
    EXPECT_EQ(flush_stats(*r).bounce, marker) << "the READ did not bring the received byte";
    std::fprintf(stderr, "round %d: flush done after %d test call(s), bounce 0x%02x\n", round,
                 calls, flush_stats(*r).bounce);
  }
  // Empty receives need no flush.
  void* data = dst.data();
  int zero = 0;
  Request* freq = nullptr;
  ASSERT_TRUE(iflush(r, 1, &data, &zero, &rmh, &freq).is_ok());
  EXPECT_EQ(freq, nullptr);
  EXPECT_TRUE(dereg_mr(s, smh).is_ok());
  EXPECT_TRUE(dereg_mr(r, rmh).is_ok());
  EXPECT_TRUE(close_send(s).is_ok());
  EXPECT_TRUE(close_recv(r).is_ok());
}

// The loopback QP, its CQ and bounce MR exist while the receive comm lives and are all returned at
// close (counted by the kernel, not by us).
TEST_F(CoreGdr, FlushObjectsAreReleasedAtClose) {
  ASSERT_NO_FATAL_FAILURE(start(true));
  const long qp0 = count_own("qp"), cq0 = count_own("cq"), mr0 = count_own("mr");
  ASSERT_GE(qp0, 0) << "`rdma resource show` failed (iproute2's rdma tool is needed)";
  for (int cycle = 0; cycle < 2; ++cycle) {
    SendComm* s;
    RecvComm* r;
    ASSERT_NO_FATAL_FAILURE(open_pair(&s, &r));
    std::vector<uint8_t> src(8192, 0x2c), dst(8192, 0);
    MemHandle* smh = nullptr;
    MemHandle* rmh = nullptr;
    ASSERT_TRUE(reg_mr(s, src.data(), src.size(), MemType::kHost, &smh).is_ok());
    ASSERT_TRUE(reg_mr(r, dst.data(), dst.size(), MemType::kHost, &rmh).is_ok());
    ASSERT_NO_FATAL_FAILURE(transfer(s, r, src.data(), smh, dst.data(), rmh, src.size()));
    const long qp_open = count_own("qp"), cq_open = count_own("cq"), mr_open = count_own("mr");
    void* data = dst.data();
    int size = static_cast<int>(dst.size());
    Request* freq = nullptr;
    ASSERT_TRUE(iflush(r, 1, &data, &size, &rmh, &freq).is_ok());
    ASSERT_NE(freq, nullptr);
    ASSERT_TRUE(wait(freq, nullptr).is_ok());
    EXPECT_EQ(count_own("qp"), qp_open + 1) << "one loopback QP per receive comm";
    EXPECT_EQ(count_own("cq"), cq_open + 1);
    EXPECT_EQ(count_own("mr"), mr_open + 1) << "the bounce word's MR";
    EXPECT_TRUE(dereg_mr(s, smh).is_ok());
    EXPECT_TRUE(dereg_mr(r, rmh).is_ok());
    EXPECT_TRUE(close_send(s).is_ok());
    EXPECT_TRUE(close_recv(r).is_ok());
    EXPECT_EQ(count_own("qp"), qp0) << "cycle " << cycle;
    EXPECT_EQ(count_own("cq"), cq0) << "cycle " << cycle;
    EXPECT_EQ(count_own("mr"), mr0) << "cycle " << cycle;
  }
}

// Default: host buffers need no flush, get no remote read, and no loopback QP is created.
TEST_F(CoreGdr, HostBuffersNeedNoFlushByDefault) {
  ASSERT_NO_FATAL_FAILURE(start(false));
  SendComm* s;
  RecvComm* r;
  ASSERT_NO_FATAL_FAILURE(open_pair(&s, &r));
  std::vector<uint8_t> src(4096, 0x33), dst(4096, 0);
  MemHandle* smh = nullptr;
  MemHandle* rmh = nullptr;
  ASSERT_TRUE(reg_mr(s, src.data(), src.size(), MemType::kHost, &smh).is_ok());
  ASSERT_TRUE(reg_mr(r, dst.data(), dst.size(), MemType::kHost, &rmh).is_ok());
  EXPECT_FALSE(rmh->access & IBV_ACCESS_REMOTE_READ) << "least access: no remote read on host";
  ASSERT_NO_FATAL_FAILURE(transfer(s, r, src.data(), smh, dst.data(), rmh, src.size()));
  void* data = dst.data();
  int size = 4096;
  Request* freq = nullptr;
  ASSERT_TRUE(iflush(r, 1, &data, &size, &rmh, &freq).is_ok());
  EXPECT_EQ(freq, nullptr);
  EXPECT_FALSE(flush_stats(*r).created);
  EXPECT_TRUE(dereg_mr(s, smh).is_ok());
  EXPECT_TRUE(dereg_mr(r, rmh).is_ok());
  EXPECT_TRUE(close_send(s).is_ok());
  EXPECT_TRUE(close_recv(r).is_ok());
}

// NCCL_GDR_FLUSH_DISABLE wins over NCCL_NET_FORCE_FLUSH.
TEST_F(CoreGdr, FlushDisableWins) {
  ASSERT_NO_FATAL_FAILURE(start(true, true));
  SendComm* s;
  RecvComm* r;
  ASSERT_NO_FATAL_FAILURE(open_pair(&s, &r));
  std::vector<uint8_t> dst(4096, 0);
  MemHandle* rmh = nullptr;
  ASSERT_TRUE(reg_mr(r, dst.data(), dst.size(), MemType::kHost, &rmh).is_ok());
  EXPECT_FALSE(rmh->access & IBV_ACCESS_REMOTE_READ);
  void* data = dst.data();
  int size = 4096;
  Request* freq = nullptr;
  ASSERT_TRUE(iflush(r, 1, &data, &size, &rmh, &freq).is_ok());
  EXPECT_EQ(freq, nullptr);
  EXPECT_FALSE(flush_stats(*r).created);
  EXPECT_TRUE(dereg_mr(r, rmh).is_ok());
  EXPECT_TRUE(close_send(s).is_ok());
  EXPECT_TRUE(close_recv(r).is_ok());
}

}  // namespace
