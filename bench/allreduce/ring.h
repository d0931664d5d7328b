// Ring allreduce (float32 sum) over two plugin connections: a send comm to rank+1 and a recv comm
// from rank-1. Reduce-scatter then all-gather, N-1 steps each, every segment pipelined in chunks
// with up to `window` requests in flight each way. Buffers are host memory registered once.
//
// Streams: both directions carry the same ordered list of (step, chunk) messages, so rank r's
// send stream matches rank r+1's receive stream element for element. Send (s, c) for s >= 1
// forwards what receive (s-1, c) produced (reduced partial sum, or a gathered final chunk), so it
// may only be posted once that receive has been processed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "net.h"
#include "util.h"

namespace bench {

class Ring {
 public:
  // Allocates and registers in/out (max_count floats each) and the staging slots.
  Ring(Net& net, void* send_comm, void* recv_comm, int rank, int nranks, size_t chunk_bytes,
       int window, size_t max_count);
  ~Ring();
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  float* in() { return in_; }
  float* out() { return out_; }
  // out[0..count) = sum over ranks of in[0..count). in_place: the input is in out().
  void allreduce(size_t count, bool in_place, const Deadline& dl);
  // true: poll without ever yielding (default: sched_yield after 128 idle polls, as NCCL's proxy).
  void set_pure_spin(bool on) { pure_spin_ = on; }
  // > 0: sleep this many microseconds instead of yielding after the idle polls.
  void set_idle_sleep_us(int us) { idle_sleep_us_ = us; }

 private:
  struct Op {
    char* ptr;  // send source / receive destination
    size_t bytes;
    size_t offset;  // element offset of the chunk (reduce-scatter receives)
    int64_t dep;    // sends: index of the receive that must be processed first (-1: none)
    bool reduce;    // receives: add into out (reduce-scatter) rather than land in place
  };
  void plan(size_t count, bool in_place);

  Net& net_;
  void* send_;
  void* recv_;
  int rank_, n_;
  size_t chunk_elems_;
  int window_;
  size_t max_count_;
  bool pure_spin_ = false;
  int idle_sleep_us_ = 0;
  float* in_ = nullptr;
  float* out_ = nullptr;
  float* stage_ = nullptr;
  void* mh_in_send_ = nullptr;
  void* mh_out_send_ = nullptr;
  void* mh_out_recv_ = nullptr;
  void* mh_stage_recv_ = nullptr;
  std::vector<Op> sends_, recvs_;
  std::vector<void*> sreq_, rreq_;
};

// Deterministic test data: rank r's element i of iteration `it`, and the exact sum over n ranks.
// Small integers: every partial sum is exact in float32 for n up to ~1000.
inline float input_value(int r, size_t i, int it) {
  return static_cast<float>((r + 1) * static_cast<int>(i % 13 + 1) + it % 7);
}
inline float expected_value(int n, size_t i, int it) {
  return static_cast<float>(static_cast<int>(i % 13 + 1) * n * (n + 1) / 2 + n * (it % 7));
}

}  // namespace bench
