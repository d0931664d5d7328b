// The flush of a receive comm (NCCL's iflush): a 1-byte RDMA READ from the last non-empty received
// buffer into a host bounce word, over a QP of the receive comm's device connected to itself. A
// NIC read issued after the peer's writes makes those writes visible in GPU memory before NCCL's
// kernel reads them. One Flush per receive comm, created at its first flush that needs one (GPU
// memory, or NCCL_NET_FORCE_FLUSH on host memory); test() reports a flush request done only when
// its READ completion has been polled from the flush CQ.
#pragma once

#include <cstdint>

#include "comm/comm.h"

namespace sluice {

// A flush request. Lives in its Flush's pool.
struct FlushReq : Request {
  uint16_t index = 0;  // position in the pool (the READ's wr_id)
};

// Counters a test can check (never read on the data path).
struct FlushStats {
  bool created = false;
  uint64_t reads_posted = 0;
  uint64_t reads_completed = 0;  // READ completions polled from the flush CQ
  uint8_t bounce = 0;            // the byte the last completed READ brought in
};

// Called by iflush after its argument checks. *out = nullptr when nothing needs flushing.
Status flush_post(RecvComm& r, int n, void* const* data, const int* sizes, MemHandle* const* mhs,
                  Request** out);
// Called by test for a request with is_flush set.
Status flush_test(Request* req, int* done);

FlushStats flush_stats(const RecvComm& r);

}  // namespace sluice
