// The GPUDirect decision is pure logic: every combination of configuration, GPU facts and the NIC's
// dma-buf answer gives the right ptrSupport and names every "no" with its reason.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

#include "sluice/core/api.h"
#include "sluice/core/memory/gdr.h"
#include "sluice/gpu/cuda_driver.h"
#include "sluice/gpu/gdr.h"

namespace sluice {
namespace {

GpuFacts all_good() {
  GpuFacts f;
  f.driver = f.gpu_rdma = f.gpu_dmabuf = f.peermem = true;
  f.peermem_reason = "loaded (/sys/module/nvidia_peermem/version exists)";
  return f;
}
DmabufProbe nic(bool ok) {
  return {ok, ok ? "ibv_reg_dmabuf_mr(fd -1) on mlx5_0: EBADF, so ..."
                 : "ibv_reg_dmabuf_mr(fd -1) on rxe0: EOPNOTSUPP: no dma-buf"};
}
bool has(const GdrDecision& d, const std::string& s) {
  return d.summary.find(s) != std::string::npos;
}

TEST(GdrDecision, EverythingSupportedOffersCudaAndDmabuf) {
  Config cfg;
  auto d = decide_gdr(cfg, all_good(), nic(true), "mlx5_0");
  EXPECT_EQ(d.ptr_support, kPtrHost | kPtrCuda | kPtrDmabuf);
  EXPECT_TRUE(d.dmabuf && d.peermem && d.cuda);
  EXPECT_TRUE(d.reasons.empty()) << d.summary;
  EXPECT_TRUE(has(d, "GPUDirect RDMA on mlx5_0 (zero-copy")) << d.summary;
}

TEST(GdrDecision, NoDriverIsHostOnlyAndStillReportsTheNic) {
  Config cfg;
  GpuFacts f;
  f.driver_reason = "libcuda.so.1 not found: no NVIDIA driver";
  f.peermem_reason = "nvidia_peermem not loaded";
  auto d = decide_gdr(cfg, f, nic(false), "rxe0");
  EXPECT_EQ(d.ptr_support, kPtrHost);
  EXPECT_FALSE(d.cuda || d.dmabuf || d.peermem);
  EXPECT_TRUE(has(d, "GPUDirect RDMA off on rxe0: NCCL stages GPU data through host memory"));
  EXPECT_TRUE(has(d, "no CUDA driver: libcuda.so.1 not found")) << d.summary;
  EXPECT_TRUE(has(d, "dmabuf: ibv_reg_dmabuf_mr(fd -1) on rxe0: EOPNOTSUPP")) << d.summary;
  EXPECT_TRUE(has(d, "peermem: nvidia_peermem not loaded")) << d.summary;
}

TEST(GdrDecision, NicWithoutDmabufFallsBackToPeermem) {
  Config cfg;
  auto d = decide_gdr(cfg, all_good(), nic(false), "rxe0");
  EXPECT_EQ(d.ptr_support, kPtrHost | kPtrCuda);
  EXPECT_TRUE(d.peermem);
  EXPECT_FALSE(d.dmabuf);
  EXPECT_TRUE(has(d, "through peermem")) << d.summary;
  EXPECT_TRUE(has(d, "dmabuf: ibv_reg_dmabuf_mr(fd -1) on rxe0")) << d.summary;
}

TEST(GdrDecision, DmabufEnableZeroMeansPeermemOnly) {
  Config cfg;
  cfg.dmabuf_enable = false;
  auto d = decide_gdr(cfg, all_good(), nic(true), "mlx5_0");
  EXPECT_EQ(d.ptr_support, kPtrHost | kPtrCuda);
  EXPECT_TRUE(has(d, "dmabuf: NCCL_DMABUF_ENABLE=0")) << d.summary;
}

TEST(GdrDecision, DmabufOnlyWithoutPeermem) {
  Config cfg;
  GpuFacts f = all_good();
  f.peermem = false;
  f.peermem_reason = "nvidia_peermem not loaded";
  auto d = decide_gdr(cfg, f, nic(true), "mlx5_0");
  EXPECT_EQ(d.ptr_support, kPtrHost | kPtrCuda | kPtrDmabuf);
  EXPECT_FALSE(d.peermem);
  EXPECT_TRUE(has(d, "through dma-buf;")) << d.summary;
  EXPECT_TRUE(has(d, "peermem: nvidia_peermem not loaded")) << d.summary;
}

TEST(GdrDecision, GpuWithoutRdmaAttributeAndNoDmabufIsHostOnly) {
  Config cfg;
  GpuFacts f = all_good();
  f.gpu_rdma = false;
  f.gpu_rdma_reason = "GPU_DIRECT_RDMA_SUPPORTED is 0 on GPU 0";
  f.gpu_dmabuf = false;
  f.gpu_dmabuf_reason = "DMA_BUF_SUPPORTED is 0 on GPU 0";
  auto d = decide_gdr(cfg, f, nic(true), "mlx5_0");
  EXPECT_EQ(d.ptr_support, kPtrHost);
  EXPECT_TRUE(has(d, "GPU: GPU_DIRECT_RDMA_SUPPORTED is 0")) << d.summary;
  EXPECT_TRUE(has(d, "dmabuf: DMA_BUF_SUPPORTED is 0")) << d.summary;
}

TEST(GdrDecision, OffWinsOverEverything) {
  Config cfg;
  cfg.gdr_mode = static_cast<int>(GdrMode::kOff);
  auto d = decide_gdr(cfg, all_good(), nic(true), "mlx5_0");
  EXPECT_EQ(d.ptr_support, kPtrHost);
  EXPECT_TRUE(has(d, "SLUICE_GDR=off")) << d.summary;
}

TEST(GdrDecision, ForceOffersCudaOnlyWithADriver) {
  Config cfg;
  cfg.gdr_mode = static_cast<int>(GdrMode::kForce);
  GpuFacts f = all_good();
  f.peermem = false;
  f.peermem_reason = "nvidia_peermem not loaded";
  auto d = decide_gdr(cfg, f, nic(false), "rxe0");
  EXPECT_EQ(d.ptr_support, kPtrHost | kPtrCuda);
  EXPECT_TRUE(d.peermem);
  EXPECT_TRUE(has(d, "SLUICE_GDR=force")) << d.summary;
  GpuFacts none;
  none.driver_reason = "libcuda.so.1 not found";
  auto n = decide_gdr(cfg, none, nic(false), "rxe0");
  EXPECT_EQ(n.ptr_support, kPtrHost);
  EXPECT_TRUE(has(n, "no CUDA driver")) << n.summary;
}

TEST(Peermem, DetectedFromAnyPathAndEveryPathNamedWhenAbsent) {
  char dir[] = "/tmp/sluice-peermem-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string a = std::string(dir) + "/nvidia_peermem_version";
  const std::string b = std::string(dir) + "/nv_peer_mem_version";
  std::string why;
  EXPECT_FALSE(gpu::peermem_loaded({a, b}, &why));
  EXPECT_NE(why.find(a), std::string::npos) << why;
  EXPECT_NE(why.find(b), std::string::npos) << why;
  EXPECT_NE(why.find("modprobe nvidia_peermem"), std::string::npos) << why;
  FILE* f = std::fopen(b.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  EXPECT_TRUE(gpu::peermem_loaded({a, b}, &why));
  EXPECT_NE(why.find(b), std::string::npos) << why;
  std::remove(b.c_str());
  rmdir(dir);
}

TEST(Peermem, KnowsTheModernAndLegacyPaths) {
  const auto& p = gpu::peermem_paths();
  auto has_path = [&](const std::string& s) {
    for (const auto& x : p)
      if (x == s) return true;
    return false;
  };
  EXPECT_TRUE(has_path("/sys/module/nvidia_peermem/version"));
  EXPECT_TRUE(has_path("/sys/kernel/mm/memory_peers/nv_mem/version"));
}

// The probe's errno, as NCCL reads it: EBADF supported, EOPNOTSUPP/EPROTONOSUPPORT not, anything
// else (EINVAL on a VF) supported with a WARN naming the errno.
TEST(DmabufProbe, ClassifiesEveryAnswerAsNcclDoes) {
  auto ebadf = classify_dmabuf_probe(EBADF, false, "mlx5_0");
  EXPECT_TRUE(ebadf.supported);
  EXPECT_FALSE(ebadf.warn);
  EXPECT_NE(ebadf.text.find("on mlx5_0: EBADF"), std::string::npos) << ebadf.text;
  for (int e : {EOPNOTSUPP, EPROTONOSUPPORT}) {
    auto p = classify_dmabuf_probe(e, false, "rxe0");
    EXPECT_FALSE(p.supported) << p.text;
    EXPECT_FALSE(p.warn) << p.text;
    EXPECT_NE(p.text.find("has no dma-buf registration"), std::string::npos) << p.text;
  }
  auto einval = classify_dmabuf_probe(EINVAL, false, "mlx5_3");
  EXPECT_TRUE(einval.supported) << einval.text;
  EXPECT_TRUE(einval.warn) << einval.text;
  EXPECT_NE(einval.text.find("EINVAL"), std::string::npos) << einval.text;
  EXPECT_NE(einval.text.find("as NCCL does"), std::string::npos) << einval.text;
  auto other = classify_dmabuf_probe(EACCES, false, "mlx5_3");
  EXPECT_TRUE(other.warn);
  EXPECT_NE(other.text.find("errno " + std::to_string(EACCES)), std::string::npos) << other.text;
  // Supported with a WARN still lets the decision offer DMABUF.
  Config cfg;
  auto d = decide_gdr(cfg, all_good(), einval, "mlx5_3");
  EXPECT_TRUE(d.ptr_support & kPtrDmabuf) << d.summary;
}

// NCCL's rule for CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE: a C2C GPU (driver 12.8+) and a NIC
// on the GPU's PCIe tree (sharing its root port); a NIC that reaches it through the CPU, a
// PCIe-only GPU or an older driver get 0.
TEST(DmabufExport, PcieMappingOnlyForC2cGpuWithANicOnItsPcieTree) {
  const std::string gpu = "/sys/devices/pci0009:00/0009:00:00.0/0009:01:00.0";
  const std::string nic_same_port = "/sys/devices/pci0009:00/0009:00:00.0/0009:01:00.1";
  const std::string nic_cpu = "/sys/devices/pci0000:00/0000:00:00.0/0000:01:00.0";
  const std::string nic_other_port = "/sys/devices/pci0009:00/0009:00:02.0/0009:03:00.0";
  EXPECT_EQ(gpu::dmabuf_export_flags(true, 13000, gpu, nic_same_port), gpu::kDmabufMappingPcie);
  EXPECT_EQ(gpu::dmabuf_export_flags(true, 12080, gpu, nic_same_port), gpu::kDmabufMappingPcie);
  EXPECT_EQ(gpu::dmabuf_export_flags(true, 12070, gpu, nic_same_port), 0u) << "needs 12.8";
  EXPECT_EQ(gpu::dmabuf_export_flags(false, 13000, gpu, nic_same_port), 0u) << "PCIe-only GPU";
  EXPECT_EQ(gpu::dmabuf_export_flags(true, 13000, gpu, nic_cpu), 0u) << "NIC behind the CPU";
  EXPECT_EQ(gpu::dmabuf_export_flags(true, 13000, gpu, nic_other_port), 0u);
  EXPECT_EQ(gpu::dmabuf_export_flags(true, 13000, gpu, ""), 0u) << "unknown NIC path";
  EXPECT_EQ(gpu::dmabuf_export_flags(true, 13000, "", nic_same_port), 0u);
  EXPECT_TRUE(gpu::share_pcie_root_port(gpu, nic_same_port));
  EXPECT_FALSE(gpu::share_pcie_root_port(gpu, nic_other_port));
  EXPECT_FALSE(gpu::share_pcie_root_port("/sys/devices/virtual/net/rxe0", gpu));
}

}  // namespace
}  // namespace sluice
