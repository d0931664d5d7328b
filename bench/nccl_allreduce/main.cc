// nccl-allreduce: NCCL's own ncclAllReduce over the Sluice net plugin (NCCL_NET_PLUGIN=sluice
// unless set), one GPU per rank, printing the same columns as bench/allreduce. Built only where
// the CUDA runtime and NCCL are installed. Launch like allreduce (torchrun-style env or mpirun,
// or bench/launch-allreduce --nccl).
//
// It proves that Sluice carried the traffic before it prints a single figure: NCCL's own INFO log
// (NCCL_DEBUG=INFO into NCCL_DEBUG_FILE) must say "NET/Plugin: Loaded net plugin Sluice" and
// "Using network Sluice" on every rank, and with more than one rank every channel NCCL connected
// must be "via NET/Sluice/" (none via P2P, SHM or another network). Ranks sharing a node get
// NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1, or NCCL would bypass the network between them.
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
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

// NCCL 2.28's INFO lines that prove the plugin was loaded, chosen, and carried each channel.
constexpr const char* kLoaded = "NET/Plugin: Loaded net plugin Sluice";
constexpr const char* kUsing = "Using network Sluice";
constexpr const char* kViaSluice = " via NET/Sluice/";

// NCCL_DEBUG_FILE as NCCL expands it: %h = host name up to the first '.', %p = pid.
std::string expand_debug_file(const std::string& f) {
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  std::string h = host;
  h = h.substr(0, h.find('.'));
  std::string out;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] == '%' && i + 1 < f.size() && (f[i + 1] == 'h' || f[i + 1] == 'p')) {
      out += f[i + 1] == 'h' ? h : std::to_string(getpid());
      ++i;
    } else {
      out += f[i];
    }
  }
  return out;
}

// What one rank's NCCL log shows.
struct Proof {
  int32_t log_read = 0, loaded = 0, using_sluice = 0, pad = 0;
  int64_t via_sluice = 0, via_other = 0;  // channel lines via NET/Sluice / via anything else
};
Proof read_proof(const std::string& path) {
  Proof p;
  std::ifstream in(path);
  if (!in) return p;
  p.log_read = 1;
  std::string line;
  while (std::getline(in, line)) {
    if (line.find(kLoaded) != std::string::npos) p.loaded = 1;
    if (line.find(kUsing) != std::string::npos) p.using_sluice = 1;
    if (line.find("Channel ") == std::string::npos || line.find(" via ") == std::string::npos)
      continue;
    if (line.find(kViaSluice) != std::string::npos) {
      ++p.via_sluice;
    } else {
      ++p.via_other;
    }
  }
  return p;
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

  // Ranks on one node: NCCL would use P2P or SHM between them, not the network.
  struct Host {
    char name[256];
  } me{};
  gethostname(me.name, sizeof me.name - 1);
  std::vector<Host> hosts(n);
  allgather(&me, sizeof me, hosts.data());
  int same_node = 0;
  for (int r = 0; r < n; ++r) same_node += r != rank && strcmp(hosts[r].name, me.name) == 0;
  if (same_node) {
    setenv("NCCL_P2P_DISABLE", "1", 1);
    setenv("NCCL_SHM_DISABLE", "1", 1);
  }
  // NCCL's own account of which network it used, in a file per rank.
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "INIT,NET,ENV", 0);
  if (!env("NCCL_DEBUG_FILE")) {
    std::string dir = env("SLUICE_NCCL_LOG_DIR") ? env("SLUICE_NCCL_LOG_DIR") : "/tmp";
    setenv("NCCL_DEBUG_FILE",
           strf("%s/nccl-allreduce.rank%d.%d.log", dir.c_str(), rank, static_cast<int>(getpid()))
               .c_str(),
           1);
  }
  const std::string debug_file = expand_debug_file(getenv("NCCL_DEBUG_FILE"));
  if (rank == 0)
    fprintf(stderr,
            "nccl-allreduce: %d ranks, %s; NCCL_DEBUG=INFO into %s (rank 0; one file per rank)\n",
            n,
            same_node ? "ranks share a node: NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1"
                      : "one rank per node",
            debug_file.c_str());

  int ngpu = 0;
  cudaError_t ce = cudaGetDeviceCount(&ngpu);
  if (ce != cudaSuccess || ngpu < 1)
    fail("no usable GPU (cudaGetDeviceCount: %s, %d devices): nccl-allreduce needs one per rank",
         ce == cudaSuccess ? "ok" : cudaGetErrorString(ce), ngpu);
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

  // Figures are held back until NCCL's log proves where the bytes went.
  std::vector<std::string> rows;
  rows.push_back(strf("# %10s %12s %8s %6s %6s %10s %8s %8s %7s", "size", "count", "type", "redop",
                      "root", "time", "algbw", "busbw", "#wrong"));
  rows.push_back(strf("# %10s %12s %8s %6s %6s %10s %8s %8s %7s", "(B)", "(elements)", "", "", "",
                      "(us)", "(GB/s)", "(GB/s)", ""));
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
      rows.push_back(strf("  %10zu %12zu %8s %6s %6d %10.2f %8.3f %8.3f %7llu",
                          count * sizeof(float), count, "float", "sum", -1, tmax * 1e6, algbw,
                          algbw * 2.0 * (n - 1) / n, (unsigned long long)wsum));
      fprintf(stderr, "nccl-allreduce: %s done\n", format_size(count * sizeof(float)).c_str());
    }
  }
  cudaFree(dsend);
  cudaFree(drecv);
  ncclCommDestroy(comm);

  // The proof, from every rank's log.
  Proof mine_p = read_proof(debug_file);
  std::vector<Proof> proofs(n);
  allgather(&mine_p, sizeof mine_p, proofs.data());
  if (rank == 0) {
    int64_t via = 0, other = 0;
    std::string why;
    for (int r = 0; r < n; ++r) {
      const Proof& p = proofs[r];
      via += p.via_sluice;
      other += p.via_other;
      if (!p.log_read)
        why += strf("; rank %d: NCCL's log could not be read", r);
      else if (!p.loaded)
        why += strf("; rank %d: no \"%s\"", r, kLoaded);
      else if (!p.using_sluice)
        why += strf("; rank %d: no \"%s\"", r, kUsing);
      if (p.via_other)
        why += strf("; rank %d: %lld channel(s) not via NET/Sluice", r,
                    static_cast<long long>(p.via_other));
    }
    if (n > 1 && via == 0) why += "; no channel line \"via NET/Sluice/\" on any rank";
    printf("# nccl-allreduce: NCCL %d, NCCL_NET_PLUGIN=%s, %d ranks%s\n", NCCL_VERSION_CODE,
           getenv("NCCL_NET_PLUGIN"), n,
           same_node ? ", NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 (ranks share a node)" : "");
    if (!why.empty()) {
      printf("# REFUSED: NCCL's log does not prove that Sluice carried the traffic%s\n",
             why.c_str());
      printf("# (logs: NCCL_DEBUG_FILE, rank 0's is %s); no figures printed\n", debug_file.c_str());
      failed = 2;
    } else {
      printf(
          "# proof (NCCL's INFO log, every rank): \"%s\", \"%s\"; %lld channel connection(s) "
          "via NET/Sluice, %lld via anything else\n",
          kLoaded, kUsing, static_cast<long long>(via), static_cast<long long>(other));
      if (n == 1) printf("# one rank: nothing crossed the network\n");
      for (auto& r : rows) printf("%s\n", r.c_str());
    }
  }
  // Every rank exits with rank 0's verdict on the proof (and its own on the sums).
  int verdict = rank == 0 ? failed : 0;
  std::vector<int> verdicts(n);
  allgather(&verdict, sizeof verdict, verdicts.data());
  failed = std::max(failed, verdicts[0]);
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
