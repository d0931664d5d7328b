// allreduce: a ring allreduce (float32 sum) among N ranks, each rank a process talking to its ring
// neighbours only through the Sluice plugin's exported table. Prints nccl-tests' all_reduce_perf
// columns. Launch: torchrun-style environment (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE), or
// mpirun when built as allreduce-mpi. See docs/benchmarks.md.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "bootstrap.h"
#include "net.h"
#include "ring.h"
#include "util.h"

#ifdef SLUICE_BENCH_WITH_MPI
#include <mpi.h>
#endif

namespace bench {
namespace {

const char* kUsage = R"(usage: allreduce [options]

Ring allreduce (reduce-scatter + all-gather, float32 sum, pipelined in chunks) among N ranks, one
process each, through the Sluice net plugin's exported table. Results are checked every iteration.

Launch (one of)
  torchrun-style env     MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE [, LOCAL_RANK]
  mpirun -np N allreduce-mpi ...   (allreduce-mpi exists when the build found MPI)
  --rank R --world-size N --master-addr A --master-port P   (override the environment)
Sizes (as nccl-tests)
  -b, --minbytes S       smallest size (default 8)
  -e, --maxbytes S       largest size (default 256M)
  -f, --stepfactor F     multiply the size by F (default 2)
  -n, --iters N          timed iterations per size (default 20)
  -w, --warmup_iters N   untimed iterations per size (default 2)
  --max-iter-bytes S     cap iterations so iters x size <= S per size (default 0 = no cap)
Ring
  --chunk S              pipeline chunk (default 512K)
  --window N             chunks in flight each way (default 8)
  --dev D                plugin device (index or name); default $SLUICE_BENCH_DEV, else
                         local rank % number of devices
  --plugin P             plugin path or name (default $NCCL_NET_PLUGIN, else the built one)
  --spin                 poll without ever yielding the CPU (default: sched_yield after 128
                         idle polls, as NCCL's proxy does when idle)
  --idle-sleep US        sleep US microseconds instead of yielding after those idle polls
                         (more ranks than CPUs, or an emulated NIC: the TCG bed; main-job: 200)
  --inplace              also run the in-place variant (extra columns, as nccl-tests)
Output
  --csv FILE  --json FILE  (rank 0)
  --timeout S            bound on every phase (connection, each iteration), default 120
  -q, --quiet            no progress line
Exit status: 0 when every result was right; 1 on a wrong result or any error.
)";

struct Options {
  uint64_t minbytes = 8, maxbytes = 256ull << 20;
  double step = 2;
  int iters = 20, warmup = 2;
  uint64_t max_iter_bytes = 0;
  uint64_t chunk = 512 << 10;
  int window = 8;
  std::string dev, plugin, csv, json;
  bool inplace = false;
  double timeout = 120;
  bool quiet = false;
  bool spin = false;
  int idle_sleep_us = 0;
  int rank = -1, world = -1;
  std::string master_addr;
  int master_port = -1;
};

Options parse_args(int argc, char** argv) {
  Options o;
  auto need = [&](int& i) -> std::string {
    if (i + 1 >= argc) fail("%s needs a value (see --help)", argv[i]);
    return argv[++i];
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      fputs(kUsage, stdout);
      exit(0);
    } else if (a == "-b" || a == "--minbytes") {
      o.minbytes = parse_size(need(i));
    } else if (a == "-e" || a == "--maxbytes") {
      o.maxbytes = parse_size(need(i));
    } else if (a == "-f" || a == "--stepfactor") {
      o.step = atof(need(i).c_str());
    } else if (a == "-n" || a == "--iters") {
      o.iters = atoi(need(i).c_str());
    } else if (a == "-w" || a == "--warmup_iters") {
      o.warmup = atoi(need(i).c_str());
    } else if (a == "--max-iter-bytes") {
      o.max_iter_bytes = parse_size(need(i));
    } else if (a == "-c" || a == "--check") {
      if (atoi(need(i).c_str()) == 0) fail("results are always checked (-c 0 is not supported)");
    } else if (a == "--chunk") {
      o.chunk = parse_size(need(i));
    } else if (a == "--window") {
      o.window = atoi(need(i).c_str());
    } else if (a == "--dev") {
      o.dev = need(i);
    } else if (a == "--plugin") {
      o.plugin = need(i);
    } else if (a == "--inplace") {
      o.inplace = true;
    } else if (a == "--csv") {
      o.csv = need(i);
    } else if (a == "--json") {
      o.json = need(i);
    } else if (a == "--timeout") {
      o.timeout = atof(need(i).c_str());
    } else if (a == "-q" || a == "--quiet") {
      o.quiet = true;
    } else if (a == "--spin") {
      o.spin = true;
    } else if (a == "--idle-sleep") {
      o.idle_sleep_us = atoi(need(i).c_str());
    } else if (a == "--rank") {
      o.rank = atoi(need(i).c_str());
    } else if (a == "--world-size") {
      o.world = atoi(need(i).c_str());
    } else if (a == "--master-addr") {
      o.master_addr = need(i);
    } else if (a == "--master-port") {
      o.master_port = atoi(need(i).c_str());
    } else {
      fail("unknown option '%s' (see --help)", a.c_str());
    }
  }
  if (o.iters < 1 || o.warmup < 0) fail("-n must be >= 1 and -w >= 0");
  if (o.window < 1 || o.window > NCCL_NET_MAX_REQUESTS)
    fail("--window must be 1..%d", NCCL_NET_MAX_REQUESTS);
  if (o.chunk < 4) fail("--chunk must be >= 4 bytes");
  if (o.maxbytes < o.minbytes) fail("-e must be >= -b");
  if (o.timeout <= 0) fail("--timeout must be > 0");
  return o;
}

// Last line of defence against a hang the deadlines cannot see (e.g. inside MPI or the plugin):
// kills the process with a message when the current phase overruns by far.
class Watchdog {
 public:
  Watchdog() : t_([this] { loop(); }) {}
  ~Watchdog() {
    stop_ = true;
    t_.join();
  }
  void arm(double seconds, std::string what) {
    std::lock_guard<std::mutex> g(m_);
    what_ = std::move(what);
    until_ = seconds > 0 ? now_s() + seconds : 0;  // 0 disarms
  }

 private:
  void loop() {
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      std::lock_guard<std::mutex> g(m_);
      if (until_ > 0 && now_s() > until_) {
        fprintf(stderr, "allreduce: watchdog: stuck %s; giving up\n", what_.c_str());
        fflush(stderr);
        _exit(3);
      }
    }
  }
  std::atomic<bool> stop_{false};
  std::mutex m_;
  std::string what_;
  double until_ = 0;
  std::thread t_;
};

// Rendezvous: allgather + barrier over TCP (rank 0 at MASTER_ADDR:MASTER_PORT) or MPI.
class Boot {
 public:
  virtual ~Boot() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;
  virtual void allgather(const void* in, size_t n, void* out, double timeout) = 0;
  virtual void barrier(double timeout) = 0;
  virtual const char* how() const = 0;
};

const char* env(const char* n) {
  const char* v = getenv(n);
  return v && *v ? v : nullptr;
}

class TcpBoot : public Boot {
 public:
  TcpBoot(const Options& o) {
    const char* r = env("RANK");
    const char* w = env("WORLD_SIZE");
    const char* a = env("MASTER_ADDR");
    const char* p = env("MASTER_PORT");
    int rank = o.rank >= 0 ? o.rank : r ? atoi(r) : 0;
    int world = o.world > 0 ? o.world : w ? atoi(w) : 1;
    std::string addr = !o.master_addr.empty() ? o.master_addr : a ? a : "127.0.0.1";
    int port = o.master_port > 0 ? o.master_port : p ? atoi(p) : 29500;
    if (world > 1 && !r && o.rank < 0)
      fail(
          "WORLD_SIZE=%d but no RANK: set RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (torchrun "
          "style), "
          "use --rank, or launch allreduce-mpi with mpirun",
          world);
    const char* lr = env("LOCAL_RANK");
    local_ = lr ? atoi(lr) : rank;
    b_ = std::make_unique<Bootstrap>(rank, world, addr, port, o.timeout);
    how_ = strf("tcp %s:%d", addr.c_str(), port);
  }
  int rank() const override { return b_->rank(); }
  int size() const override { return b_->size(); }
  int local_rank() const override { return local_; }
  void allgather(const void* in, size_t n, void* out, double t) override {
    b_->allgather(in, n, out, t);
  }
  void barrier(double t) override { b_->barrier(t); }
  const char* how() const override { return how_.c_str(); }

 private:
  std::unique_ptr<Bootstrap> b_;
  int local_ = 0;
  std::string how_;
};

#ifdef SLUICE_BENCH_WITH_MPI
bool launched_by_mpi() {
  return env("OMPI_COMM_WORLD_SIZE") || env("PMIX_RANK") || env("PMI_SIZE") || env("PMI_RANK");
}

class MpiBoot : public Boot {
 public:
  MpiBoot() {
    MPI_Init(nullptr, nullptr);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &local_);
    MPI_Comm_free(&local);
  }
  ~MpiBoot() override { MPI_Finalize(); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_; }
  void allgather(const void* in, size_t n, void* out, double) override {
    MPI_Allgather(in, static_cast<int>(n), MPI_BYTE, out, static_cast<int>(n), MPI_BYTE,
                  MPI_COMM_WORLD);
  }
  void barrier(double) override { MPI_Barrier(MPI_COMM_WORLD); }
  const char* how() const override { return "mpi"; }

 private:
  int rank_ = 0, size_ = 1, local_ = 0;
};
#endif

struct RankInfo {
  int32_t pid;
  int32_t dev;
  char host[64];
  char dev_name[64];
};

struct SizeResult {
  uint64_t bytes;
  size_t count;
  int iters;
  double time_us[2];  // out-of-place, in-place (max over ranks of the mean per iteration)
  uint64_t wrong[2];
};

class Progress {
 public:
  explicit Progress(bool on) : on_(on), tty_(isatty(2)) {}
  void show(const std::string& s, bool force = false) {
    if (!on_) return;
    double t = now_s();
    if (!force && t - last_ < (tty_ ? 0.2 : 5.0)) return;
    last_ = t;
    if (tty_) {
      fprintf(stderr, "\r\033[K%s", s.c_str());
    } else {
      fprintf(stderr, "%s\n", s.c_str());
    }
    dirty_ = tty_;
  }
  void done() {
    if (dirty_) fprintf(stderr, "\r\033[K");
    dirty_ = false;
  }

 private:
  bool on_, tty_;
  bool dirty_ = false;
  double last_ = 0;
};

int run(int argc, char** argv) {
  Options o = parse_args(argc, argv);
  Watchdog dog;
  dog.arm(o.timeout * 3, "in the rendezvous");
  std::unique_ptr<Boot> boot;
#ifdef SLUICE_BENCH_WITH_MPI
  if (launched_by_mpi()) boot = std::make_unique<MpiBoot>();
#endif
  if (!boot) boot = std::make_unique<TcpBoot>(o);
  const int rank = boot->rank(), n = boot->size();
  const bool root = rank == 0;

  dog.arm(o.timeout * 3, "loading the plugin");
  Net net(o.plugin);
  int dev;
  if (!o.dev.empty()) {
    dev = net.find_device(o.dev);
  } else if (const char* e = env("SLUICE_BENCH_DEV")) {
    dev = net.find_device(e);
  } else {
    dev = boot->local_rank() % net.devices();
  }

  RankInfo me{};
  me.pid = getpid();
  me.dev = dev;
  gethostname(me.host, sizeof me.host - 1);
  snprintf(me.dev_name, sizeof me.dev_name, "%s", net.props(dev).name ? net.props(dev).name : "?");
  std::vector<RankInfo> ranks(n);
  boot->allgather(&me, sizeof me, ranks.data(), o.timeout);

  if (root) {
    printf("# sluice allreduce: ring over the %s plugin (%s), %d ranks, rendezvous %s\n",
           net.name(), net.path().c_str(), n, boot->how());
    printf("# chunk %s, window %d, iters %d, warmup %d; float32 sum, every iteration verified\n",
           format_size(o.chunk).c_str(), o.window, o.iters, o.warmup);
    for (int r = 0; r < n; ++r)
      printf("#  Rank %2d Pid %7d on %10s device %2d [%s]\n", r, ranks[r].pid, ranks[r].host,
             ranks[r].dev, ranks[r].dev_name);
  }

  // Ring connections: listen, swap handles, connect to rank+1 while accepting from rank-1.
  dog.arm(o.timeout * 2, "connecting the ring");
  void* send_comm = nullptr;
  void* recv_comm = nullptr;
  if (n > 1) {
    void* lc = nullptr;
    Handle h = net.listen(dev, &lc);
    std::vector<Handle> all(n);
    boot->allgather(&h, sizeof h, all.data(), o.timeout);
    Handle next = all[(rank + 1) % n];
    Deadline dl(o.timeout, strf("connecting the ring (rank %d -> %d, accepting from %d)", rank,
                                (rank + 1) % n, (rank + n - 1) % n));
    unsigned spins = 0;
    while (!send_comm || !recv_comm) {
      if (!send_comm) send_comm = net.connect_once(dev, &next);
      if (!recv_comm) {
        recv_comm = net.accept_once(lc);
        if (recv_comm) net.close_listen(lc);
      }
      if ((++spins & 255) == 0) dl.check();
    }
  }

  std::vector<uint64_t> sizes = size_sweep(std::max<uint64_t>(o.minbytes, 4), o.maxbytes, o.step);
  const size_t max_count = o.maxbytes / sizeof(float);
  int failed = 0;
  std::vector<SizeResult> results;
  {
    Ring ring(net, send_comm, recv_comm, rank, n, o.chunk, o.window, max_count);
    ring.set_pure_spin(o.spin);
    ring.set_idle_sleep_us(o.idle_sleep_us);
    boot->barrier(o.timeout);
    if (root) {
      printf("#\n");
      printf("# %10s %12s %8s %6s %6s %10s %8s %8s %7s", "", "", "", "", "", "out-of-place", "", "",
             "");
      if (o.inplace) printf(" %10s %8s %8s %7s", "in-place", "", "", "");
      printf("\n# %10s %12s %8s %6s %6s %10s %8s %8s %7s", "size", "count", "type", "redop", "root",
             "time", "algbw", "busbw", "#wrong");
      if (o.inplace) printf(" %10s %8s %8s %7s", "time", "algbw", "busbw", "#wrong");
      printf("\n# %10s %12s %8s %6s %6s %10s %8s %8s %7s", "(B)", "(elements)", "", "", "", "(us)",
             "(GB/s)", "(GB/s)", "");
      if (o.inplace) printf(" %10s %8s %8s %7s", "(us)", "(GB/s)", "(GB/s)", "");
      printf("\n");
    }
    Progress prog(root && !o.quiet);
    const double t_start = now_s();
    for (size_t si = 0; si < sizes.size(); ++si) {
      const size_t count = sizes[si] / sizeof(float);
      const uint64_t bytes = count * sizeof(float);
      int iters = o.iters;
      if (o.max_iter_bytes && bytes * iters > o.max_iter_bytes)
        iters = static_cast<int>(std::max<uint64_t>(1, o.max_iter_bytes / bytes));
      SizeResult res{bytes, count, iters, {0, 0}, {0, 0}};
      for (int variant = 0; variant < (o.inplace ? 2 : 1); ++variant) {
        const bool in_place = variant == 1;
        double total = 0;
        uint64_t wrong = 0;
        const int warm = std::min(o.warmup, iters);
        for (int it = 0; it < warm + iters; ++it) {
          const int tag = it + variant * 1000003 + static_cast<int>(si) * 7919;
          float* input = in_place ? ring.out() : ring.in();
          for (size_t i = 0; i < count; ++i) input[i] = input_value(rank, i, tag);
          if (!in_place)
            for (size_t i = 0; i < count; ++i) ring.out()[i] = NAN;
          dog.arm(o.timeout * 2, strf("in the allreduce of %s", format_size(bytes).c_str()));
          boot->barrier(o.timeout);
          Deadline dl(o.timeout,
                      strf("allreduce of %s, iteration %d", format_size(bytes).c_str(), it));
          double t0 = now_s();
          ring.allreduce(count, in_place, dl);
          double t1 = now_s();
          if (it >= warm) total += t1 - t0;
          uint64_t bad = 0;
          for (size_t i = 0; i < count; ++i) {
            const float want = expected_value(n, i, tag);
            if (ring.out()[i] != want) {
              if (bad < 3)
                fprintf(stderr,
                        "allreduce: rank %d: %s iteration %d element %zu = %g, expected %g\n", rank,
                        format_size(bytes).c_str(), it, i, static_cast<double>(ring.out()[i]),
                        static_cast<double>(want));
              ++bad;
            }
          }
          wrong += bad;
          prog.show(strf("[allreduce] %s (%zu/%zu) %s iter %d/%d, %.0f s elapsed",
                         format_size(bytes).c_str(), si + 1, sizes.size(),
                         in_place ? "in-place" : "out-of-place", it + 1, warm + iters,
                         now_s() - t_start));
        }
        // Time: the slowest rank's mean per iteration. #wrong: summed over ranks.
        struct {
          double t;
          uint64_t wrong;
        } mine{total / iters, wrong}, *all = nullptr;
        std::vector<decltype(mine)> v(n);
        all = v.data();
        boot->allgather(&mine, sizeof mine, all, o.timeout);
        double tmax = 0;
        uint64_t wsum = 0;
        for (int r = 0; r < n; ++r) {
          tmax = std::max(tmax, all[r].t);
          wsum += all[r].wrong;
        }
        res.time_us[variant] = tmax * 1e6;
        res.wrong[variant] = wsum;
        if (wsum) failed = 1;
      }
      prog.done();
      if (root) {
        printf("  %10llu %12zu %8s %6s %6d", (unsigned long long)bytes, count, "float", "sum", -1);
        for (int variant = 0; variant < (o.inplace ? 2 : 1); ++variant) {
          double algbw = bytes / (res.time_us[variant] * 1e-6) / 1e9;
          double busbw = algbw * 2.0 * (n - 1) / n;
          printf(" %10.2f %8.3f %8.3f %7llu", res.time_us[variant], algbw, busbw,
                 (unsigned long long)res.wrong[variant]);
        }
        printf("\n");
        fflush(stdout);
      }
      results.push_back(res);
    }
    dog.arm(o.timeout * 2, "closing the ring");
    boot->barrier(o.timeout);
  }
  if (n > 1) {
    net.close_send(send_comm);
    net.close_recv(recv_comm);
  }

  if (root) {
    auto algbw = [&](const SizeResult& r, int v) { return r.bytes / (r.time_us[v] * 1e-6) / 1e9; };
    auto busbw = [&](const SizeResult& r, int v) { return algbw(r, v) * 2.0 * (n - 1) / n; };
    double sum = 0, peak = 0;
    uint64_t wrong = 0;
    for (auto& r : results) {
      sum += busbw(r, 0);
      peak = std::max(peak, busbw(r, 0));
      wrong += r.wrong[0] + r.wrong[1];
    }
    printf("# Out of bounds values : %llu %s\n", (unsigned long long)wrong,
           wrong ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %.4f\n", results.empty() ? 0.0 : sum / results.size());
    printf("# Peak bus bandwidth   : %.4f GB/s\n", peak);
    for (auto& r : results)
      if (r.bytes == (64ull << 20)) printf("# busbw at 64 MiB      : %.4f GB/s\n", busbw(r, 0));
    printf("# %d ranks, %zu sizes, %s\n", n, results.size(),
           wrong ? "WRONG RESULTS" : "all results verified");
    std::vector<std::string> cols = {"size",    "count",     "type",      "redop", "root",
                                     "time_us", "algbw_GBs", "busbw_GBs", "wrong"};
    if (o.inplace)
      for (const char* c : {"ip_time_us", "ip_algbw_GBs", "ip_busbw_GBs", "ip_wrong"})
        cols.push_back(c);
    cols.push_back("nranks");
    Table t("allreduce", cols);
    for (auto& r : results) {
      std::vector<Table::Cell> row = {Table::integer(r.bytes), Table::integer(r.count),
                                      Table::text("float"), Table::text("sum"), Table::integer(-1)};
      for (int v = 0; v < (o.inplace ? 2 : 1); ++v) {
        row.push_back(Table::num(r.time_us[v]));
        row.push_back(Table::num(algbw(r, v), "%.4f"));
        row.push_back(Table::num(busbw(r, v), "%.4f"));
        row.push_back(Table::integer(static_cast<long long>(r.wrong[v])));
      }
      row.push_back(Table::integer(n));
      t.add(std::move(row));
    }
    if (!o.csv.empty()) t.write_csv(o.csv);
    if (!o.json.empty()) {
      FILE* f = fopen(o.json.c_str(), "w");
      if (!f) fail("cannot write %s", o.json.c_str());
      fprintf(f,
              "{\"tool\": \"allreduce\", \"nranks\": %d, \"plugin\": %s, \"chunk\": %llu, "
              "\"window\": %d,\n",
              n, json_escape(net.path()).c_str(), (unsigned long long)o.chunk, o.window);
      fprintf(f, " \"table\": %s}\n", t.json().c_str());
      fclose(f);
    }
  }
  dog.arm(0, "");
  return failed;
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    return bench::run(argc, argv);
  } catch (const std::exception& e) {
    fprintf(stderr, "allreduce: error: %s\n", e.what());
    fflush(stderr);
    // Other ranks notice through their deadlines; do not wait for them here.
    _exit(1);
  }
}
