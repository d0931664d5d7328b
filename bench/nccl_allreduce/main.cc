// nccl-allreduce: NCCL's own ncclAllReduce over the Sluice net plugin (NCCL_NET_PLUGIN=sluice
// unless set), one GPU per rank, printing the same columns as bench/allreduce. Built only where
// the CUDA runtime and NCCL are installed. Launch like allreduce (torchrun-style env or mpirun).
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bootstrap.h"
#include "util.h"

#ifdef SLUICE_BENCH_WITH_MPI
#include <mpi.h>
#endif

namespace bench {
namespace {

#define CUDA_OK(x)                                                            \
  do {                                                                        \
    cudaError_t e_ = (x);                                                     \
    if (e_ != cudaSuccess) fail("%s failed: %s", #x, cudaGetErrorString(e_)); \
  } while (0)
#define NCCL_OK(x)                                                            \
  do {                                                                        \
    ncclResult_t r_ = (x);                                                    \
    if (r_ != ncclSuccess) fail("%s failed: %s", #x, ncclGetErrorString(r_)); \
  } while (0)

const char* env(const char* n) {
  const char* v = getenv(n);
  return v && *v ? v : nullptr;
}

int run(int argc, char** argv) {
  uint64_t minb = 8, maxb = 256ull << 20;
  double step = 2;
  int iters = 20, warmup = 2;
  double timeout = 300;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto need = [&]() -> std::string {
      if (i + 1 >= argc) fail("%s needs a value", a.c_str());
      return argv[++i];
    };
    if (a == "-b") {
      minb = parse_size(need());
    } else if (a == "-e") {
      maxb = parse_size(need());
    } else if (a == "-f") {
      step = atof(need().c_str());
    } else if (a == "-n") {
      iters = atoi(need().c_str());
    } else if (a == "-w") {
      warmup = atoi(need().c_str());
    } else if (a == "--timeout") {
      timeout = atof(need().c_str());
    } else if (a == "-h" || a == "--help") {
      printf(
          "usage: nccl-allreduce [-b S] [-e S] [-f F] [-n iters] [-w warmup] [--timeout s]\n"
          "  ranks from mpirun, or RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT[/LOCAL_RANK]\n"
          "  NCCL_NET_PLUGIN defaults to sluice\n");
      return 0;
    } else {
      fail("unknown option %s", a.c_str());
    }
  }
  setenv("NCCL_NET_PLUGIN", "sluice", 0);

  int rank = 0, n = 1, local = 0;
  std::unique_ptr<Bootstrap> boot;
#ifdef SLUICE_BENCH_WITH_MPI
  const bool mpi = env("OMPI_COMM_WORLD_SIZE") || env("PMIX_RANK") || env("PMI_SIZE");
  if (mpi) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Comm lc;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &lc);
    MPI_Comm_rank(lc, &local);
    MPI_Comm_free(&lc);
  }
#else
  const bool mpi = false;
#endif
  if (!mpi) {
    rank = env("RANK") ? atoi(env("RANK")) : 0;
    n = env("WORLD_SIZE") ? atoi(env("WORLD_SIZE")) : 1;
    local = env("LOCAL_RANK") ? atoi(env("LOCAL_RANK")) : rank;
    boot =
        std::make_unique<Bootstrap>(rank, n, env("MASTER_ADDR") ? env("MASTER_ADDR") : "127.0.0.1",
                                    env("MASTER_PORT") ? atoi(env("MASTER_PORT")) : 29500, timeout);
  }
  auto allgather = [&](const void* in, size_t bytes, void* out) {
#ifdef SLUICE_BENCH_WITH_MPI
    if (mpi) {
      MPI_Allgather(in, static_cast<int>(bytes), MPI_BYTE, out, static_cast<int>(bytes), MPI_BYTE,
                    MPI_COMM_WORLD);
      return;
    }
#endif
    boot->allgather(in, bytes, out, timeout);
  };

  int ngpu = 0;
  CUDA_OK(cudaGetDeviceCount(&ngpu));
  if (ngpu < 1) fail("no CUDA device");
  CUDA_OK(cudaSetDevice(local % ngpu));
  ncclUniqueId id;
  if (rank == 0) NCCL_OK(ncclGetUniqueId(&id));
  std::vector<ncclUniqueId> ids(n);
  allgather(&id, sizeof id, ids.data());
  id = ids[0];
  ncclComm_t comm;
  NCCL_OK(ncclCommInitRank(&comm, n, id, rank));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  const size_t max_count = maxb / sizeof(float);
  float *dsend = nullptr, *drecv = nullptr;
  CUDA_OK(cudaMalloc(&dsend, max_count * sizeof(float)));
  CUDA_OK(cudaMalloc(&drecv, max_count * sizeof(float)));
  std::vector<float> host(max_count);

  if (rank == 0) {
    printf("# nccl-allreduce: NCCL %d, NCCL_NET_PLUGIN=%s, %d ranks\n", NCCL_VERSION_CODE,
           getenv("NCCL_NET_PLUGIN"), n);
    printf("# %10s %12s %8s %6s %6s %10s %8s %8s %7s\n", "size", "count", "type", "redop", "root",
           "time", "algbw", "busbw", "#wrong");
    printf("# %10s %12s %8s %6s %6s %10s %8s %8s %7s\n", "(B)", "(elements)", "", "", "", "(us)",
           "(GB/s)", "(GB/s)", "");
  }
  int failed = 0;
  for (uint64_t size : size_sweep(std::max<uint64_t>(minb, 4), maxb, step)) {
    const size_t count = size / sizeof(float);
    double total = 0;
    uint64_t wrong = 0;
    for (int it = 0; it < warmup + iters; ++it) {
      for (size_t i = 0; i < count; ++i)
        host[i] = static_cast<float>((rank + 1) * static_cast<int>(i % 13 + 1) + it % 7);
      CUDA_OK(cudaMemcpy(dsend, host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
      char c = 0, all[4096];
      allgather(&c, 1, all);  // barrier
      double t0 = now_s();
      NCCL_OK(ncclAllReduce(dsend, drecv, count, ncclFloat, ncclSum, comm, stream));
      CUDA_OK(cudaStreamSynchronize(stream));
      double t1 = now_s();
      if (it >= warmup) total += t1 - t0;
      CUDA_OK(cudaMemcpy(host.data(), drecv, count * sizeof(float), cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < count; ++i) {
        float want =
            static_cast<float>(static_cast<int>(i % 13 + 1) * n * (n + 1) / 2 + n * (it % 7));
        if (host[i] != want) ++wrong;
      }
    }
    struct {
      double t;
      uint64_t w;
    } mine{total / iters, wrong};
    std::vector<decltype(mine)> v(n);
    allgather(&mine, sizeof mine, v.data());
    double tmax = 0;
    uint64_t wsum = 0;
    for (auto& x : v) {
      tmax = std::max(tmax, x.t);
      wsum += x.w;
    }
    if (wsum) failed = 1;
    if (rank == 0) {
      double algbw = count * sizeof(float) / tmax / 1e9;
      printf("  %10zu %12zu %8s %6s %6d %10.2f %8.3f %8.3f %7llu\n", count * sizeof(float), count,
             "float", "sum", -1, tmax * 1e6, algbw, algbw * 2.0 * (n - 1) / n,
             (unsigned long long)wsum);
    }
  }
  cudaFree(dsend);
  cudaFree(drecv);
  ncclCommDestroy(comm);
#ifdef SLUICE_BENCH_WITH_MPI
  if (mpi) MPI_Finalize();
#endif
  return failed;
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  try {
    return bench::run(argc, argv);
  } catch (const std::exception& e) {
    fprintf(stderr, "nccl-allreduce: error: %s\n", e.what());
    return 1;
  }
}
