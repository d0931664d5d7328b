// One rdma_cm event channel for the whole process, shared by every rdma_cm id Sluice creates: the
// ids of rdmacm connections and listeners (cm_rdmacm.h) and of the oob route check (route_gid.h).
// A channel is a file descriptor (/dev/infiniband/rdma_cm); one per comm made a process with N
// rdmacm comms hold N more fds than in oob mode (256 connections ran out of the default
// `ulimit -n` of 1024 on the listening side). Now it is one while any id exists, none otherwise.
//
// Each user opens a CmMailbox and creates its ids with the mailbox's context. Reading events
// (next) drains the channel, which is O_NONBLOCK, and files every event in the mailbox its id's
// context names, copied and acknowledged at once (so destroying an id never waits on us); a
// connect request is filed with its listener (the new id inherits the listen id's context) until
// adopt() moves the new id to the mailbox of the comm it belongs to. Events of a mailbox that is
// gone are dropped; a connect request among them is rejected and its id destroyed. Thread-safe:
// NCCL may drive connects and accepts from different threads.
//
// Ownership: a mailbox's owner destroys its ids before the mailbox, and never while holding a
// lock the mailbox takes. The last mailbox closed closes the channel.
#pragma once

#include <rdma/rdma_cma.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "sluice/core/base/status.h"

namespace sluice {

// One rdma_cm event, copied out of librdmacm's (which is acknowledged when read).
struct CmEvent {
  rdma_cm_event_type type{};
  int status = 0;
  rdma_cm_id* id = nullptr;
  rdma_cm_id* listen_id = nullptr;
  uint32_t qp_num = 0;
  uint8_t pdata[256] = {};
  size_t pdata_len = 0;
};

class CmMailbox {
 public:
  // Opens the process's channel if no mailbox has it open. The error names `modprobe rdma_ucm`.
  static Result<std::unique_ptr<CmMailbox>> open();
  CmMailbox(const CmMailbox&) = delete;
  CmMailbox& operator=(const CmMailbox&) = delete;
  ~CmMailbox();

  rdma_event_channel* channel() const;
  void* context() const { return reinterpret_cast<void*>(static_cast<uintptr_t>(key_)); }
  // The next event of this mailbox's ids: true and *e set, false when none is pending.
  Result<bool> next(CmEvent* e);
  // `id` (a connect request's new id) reports to this mailbox from now on.
  void adopt(rdma_cm_id* id);
  // One attempt at resolving `dst`'s address (from `src`, or where the route goes when null) with
  // a fresh id of this mailbox in *id, destroying the one there (its attempt ended), for at most
  // kCmResolveAttemptMs and what is left until `until` (cm_choice.h says why each attempt gets a
  // fresh id). 0, or the errno of the call that failed with *what naming it; *id is null when its
  // creation failed. Each caller words its own error.
  int resolve_attempt(rdma_cm_id** id, const sockaddr_storage* src, const sockaddr_storage& dst,
                      std::chrono::steady_clock::time_point until, const char** what);

 private:
  explicit CmMailbox(uint64_t key) : key_(key) {}
  uint64_t key_;
};

}  // namespace sluice
