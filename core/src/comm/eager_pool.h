// The eager path's rings (docs/eager.md): one registered slab per adapter, cut into rings of
// SLUICE_EAGER_SLOTS slots of 32 + SLUICE_EAGER_MAX bytes (rounded to 64). A receive comm borrows a
// ring for its sender to write into; a send comm borrows one as its staging memory. Comms borrow at
// their first small message (on the data path: a lock-free bitmap, no allocation, no lock) and
// return at close, after their QPs are destroyed, so no WRITE lands in a ring after its return.
// The pool is made when an adapter's first comm negotiates the eager path (connect or accept), and
// freed when the last comm that negotiated it is torn down (so every open/close cycle returns its
// registration), or with the adapter. It bounds the eager memory whatever the comms open.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "comm/comm.h"
#include "sluice/core/wire/eager.h"

namespace sluice {

class EagerPool {
 public:
  // rings of `slots` slots of `stride` bytes on the adapter's PD, preferring `numa`; messages of
  // at most `max_bytes` (SLUICE_EAGER_MAX: the stride may hold more, rounded to 64).
  static Result<std::unique_ptr<EagerPool>> create(Adapter& a, uint32_t rings, uint32_t slots,
                                                   size_t stride, size_t max_bytes, int numa);
  // A free ring's index, or -1: none free (the comm goes without eager). Lock-free.
  int acquire();
  void release(int ring);
  char* ring(int i) const { return base_ + static_cast<size_t>(i) * ring_bytes_; }
  uint32_t lkey() const { return mr_->lkey; }
  uint32_t rkey() const { return mr_->rkey; }
  uint32_t slots() const { return slots_; }
  size_t stride() const { return stride_; }
  size_t max_bytes() const { return max_bytes_; }
  uint32_t rings() const { return rings_; }
  size_t bytes() const { return mem_.size(); }
  uint32_t in_use() const { return used_.load(std::memory_order_relaxed); }
  // A generation for the next grant: a ring lent again never shows its previous comm's slots.
  uint32_t next_grant() { return grant_.fetch_add(1, std::memory_order_relaxed) + 1; }

 private:
  EagerPool() = default;
  NumaBuffer mem_;
  verbs::Mr mr_;
  char* base_ = nullptr;
  uint32_t rings_ = 0;
  uint32_t slots_ = 0;
  size_t stride_ = 0;
  size_t max_bytes_ = 0;
  size_t ring_bytes_ = 0;
  std::unique_ptr<std::atomic<uint64_t>[]> free_;  // bit set: ring free
  size_t words_ = 0;
  std::atomic<uint32_t> used_{0};
  std::atomic<uint32_t> grant_{0};
};

// The adapter's pool, made on first need with the engine's configuration (SLUICE_EAGER_*); null
// when eager is off or SLUICE_EAGER_RINGS is 0. A non-null pool is a reference the comm gives back
// with eager_pool_unref once its leases are returned. Setup and teardown paths only (the
// adapter's mutex).
Result<EagerPool*> eager_pool_of(Adapter& a, int numa);
void eager_pool_unref(Adapter& a);

}  // namespace sluice
