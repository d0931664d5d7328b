// The plugin as NCCL sees it: dlopen the library, find its newest table NCCL 2.28+ knows
// (`ncclNetPlugin_v12` as NCCL 2.30 does, else `ncclNetPlugin_v11`), and call through it. Nothing
// in bench/ links the plugin or core; every call goes through this exported table. Each wrapper
// throws BenchError naming the call, its arguments and the ncclResult_t on failure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sluice/nccl_net_abi.h"
#include "sluice/sluice_ext.h"
#include "util.h"

namespace bench {

struct Handle {
  char bytes[NCCL_NET_HANDLE_MAXSIZE];
};

class Net {
 public:
  // `spec`: a path, a file name, or a short name resolved as NCCL does (libnccl-net-<name>.so).
  // Empty = $NCCL_NET_PLUGIN, else the plugin built next to the benchmark.
  explicit Net(const std::string& spec);
  ~Net();
  Net(const Net&) = delete;
  Net& operator=(const Net&) = delete;

  const std::string& path() const { return path_; }
  const char* name() const { return t_ ? t_->name : t12_->name; }
  int version() const { return t12_ ? 12 : 11; }  // the table used
  int devices() const { return ndev_; }
  const ncclNetProperties_v11_t& props(int dev) const { return props_.at(dev); }
  // Device by index ("1") or by name ("rxe1"); throws when unknown.
  int find_device(const std::string& spec) const;

  Handle listen(int dev, void** listen_comm);
  // One non-blocking attempt each; return the comm or nullptr (call again with the same handle).
  void* connect_once(int dev, Handle* h);
  void* accept_once(void* listen_comm);
  // Polls until established.
  void* connect(int dev, Handle* h, const Deadline& dl);
  void* accept(void* listen_comm, const Deadline& dl);

  void* reg(void* comm, void* data, size_t size);
  void dereg(void* comm, void* mh);
  // nullptr = cannot post yet (try again later).
  void* isend(void* comm, void* data, size_t size, int tag, void* mh);
  void* irecv(void* comm, void* data, size_t size, int tag, void* mh);
  // true when done; *size gets the byte count (receives) when non-null.
  bool test(void* req, size_t* size);
  void close_send(void* c);
  void close_recv(void* c);
  void close_listen(void* c);
  // Sluice's own statistics table (dlsym "sluiceExt_v1"); nullptr when the plugin has none.
  const sluiceExt_v1_t* ext() const { return ext_; }
  // Cumulative counters of a live send/receive comm; false when there is no table or it refuses.
  bool comm_stats(void* comm, sluiceCommStats_v1_t* out) const;
  // Thread CPU time of the plugin calls isend, irecv and test while timing is on
  // (clock_gettime(CLOCK_THREAD_CPUTIME_ID) around each call; the clock's own cost is in it, see
  // cpu_clock_cost_ns). Off by default.
  struct CallCpu {
    enum Kind { kIsend, kIrecv, kTest, kKinds };
    uint64_t calls[kKinds] = {}, ns[kKinds] = {};
  };
  void time_calls(bool on) {
    timing_ = on;
    if (on) cpu_ = CallCpu{};
  }
  const CallCpu& call_cpu() const { return cpu_; }
  // sluiceExt_v2: per-member (rail) counters and the post-to-completion histogram; false when the
  // plugin has no v2 table or it refuses.
  bool comm_stats_v2(void* comm, sluiceCommStats_v2_t* out) const;

 private:
  void check(ncclResult_t r, const std::string& call) const;
  void props_of(int dev, ncclNetProperties_v11_t* p) const;
  void* lib_ = nullptr;
  const ncclNet_v11_t* t_ = nullptr;  // one of these two is set
  const ncclNet_v12_t* t12_ = nullptr;
  const sluiceExt_v1_t* ext_ = nullptr;
  const sluiceExt_v2_t* ext2_ = nullptr;
  void* ctx_ = nullptr;
  bool inited_ = false;
  int ndev_ = 0;
  std::string path_;
  std::vector<ncclNetProperties_v11_t> props_;
  bool timing_ = false;
  CallCpu cpu_;
};

const char* nccl_result_str(ncclResult_t r);
// The plugin's last WARN line (its logger), "" when none yet: names a failure the result code
// does not.
std::string last_plugin_warn();
// Nanoseconds the thread CPU clock itself adds to one timed call (two reads back to back, median).
double cpu_clock_cost_ns();

}  // namespace bench
