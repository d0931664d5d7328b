// The flush of a receive comm (NCCL's iflush): a 1-byte RDMA READ from the last non-empty received
// buffer into a host bounce word, over a QP of the receive comm's device connected to itself; on a
// comm over a fused device, one such READ through each member adapter (any of them may have
// written part of the message, and a NIC's READ orders only that NIC's writes). A
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
  uint16_t index = 0;   // position in the pool (the READs' wr_id)
  uint8_t pending = 0;  // READs not yet completed (one per member adapter)
  void* ev = nullptr;   // its READ's profiler event (wr_events.h)
};

// Counters a test can check (never read on the data path).
struct FlushStats {
  bool created = false;
  uint64_t reads_posted = 0;
  uint64_t reads_completed = 0;  // READ completions polled from the flush CQ
  uint8_t bounce = 0;            // the byte the last completed READ brought in
  uint32_t qpn = 0;              // the loopback QP (of member 0's adapter)
  int lanes = 0;                 // loopback QPs: one per member adapter of the comm
};

// Called by iflush after its argument checks. *out = nullptr when nothing needs flushing.
Status flush_post(RecvComm& r, int n, void* const* data, const int* sizes, MemHandle* const* mhs,
                  Request** out);
// Called by test for a request with is_flush set.
Status flush_test(Request* req, int* done);

FlushStats flush_stats(const RecvComm& r);
// At close: stops the profiler events of flush READs that never completed (wr_events.h).
void flush_stop_events(RecvComm& r);

}  // namespace sluice
