// The eager path's rings (docs/eager.md): one registered slab per adapter, cut into rings of
// SLUICE_EAGER_SLOTS slots of 32 + SLUICE_EAGER_MAX bytes (rounded to 64). A receive comm borrows a
// ring for its sender to write into; a send comm borrows one as its staging memory. Comms borrow at
// their first small message (on the data path: a lock-free bitmap, no allocation, no lock) and
// return at close, after their QPs are destroyed, so no WRITE lands in a ring after its return.
// The pool is made when an adapter's first comm negotiates the eager path (connect or accept), and
// freed when the last comm that negotiated it is torn down (so every open/close cycle returns its
// registration), or with the adapter. It bounds the eager memory whatever the comms open.
//
// The books (rules/eager_book.h) are lent from here too, so that a comm's eager state does not
// exist until it uses the eager path, and the comms that hold one are bounded: a receive comm's
// book comes with its ring (the same index), a send comm's at its first use of the path
// (datapath/eager.cc: before it numbers anything), one of `rings` sender books.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "comm/comm.h"
#include "rules/eager_book.h"
#include "sluice/core/wire/eager.h"

namespace sluice {

// A lock-free set of free indices (bit set: free), for the rings and the sender books.
class FreeBits {
 public:
  void init(uint32_t n);
  int take();  // a free index, or -1
  void give(int i);

 private:
  std::unique_ptr<std::atomic<uint64_t>[]> free_;
  size_t words_ = 0;
  uint32_t n_ = 0;
};

class EagerPool {
 public:
  // rings of `slots` slots on the adapter's PD, preferring `numa`, for messages of at most
  // `max_bytes` (SLUICE_EAGER_MAX): a slot is wire::eager_stride(max_bytes) bytes (the header and
  // the payload, rounded to 64). As many receiver and sender books as rings.
  static Result<std::unique_ptr<EagerPool>> create(Adapter& a, uint32_t rings, uint32_t slots,
                                                   size_t max_bytes, int numa);
  // A free ring's index, or -1: none free (the comm goes without eager). Lock-free.
  int acquire() { return rings_free_.take(); }
  void release(int ring);
  char* ring(int i) const { return base_ + static_cast<size_t>(i) * ring_bytes_; }
  // Ring i's receiver book: lent with the ring (reset by the borrower).
  eager::ReceiverBook* recv_book(int i) const { return &recv_books_[i]; }
  // A free sender book's index, or -1: none free (the comm sends nothing eagerly). Lock-free.
  int acquire_send_book() { return books_free_.take(); }
  void release_send_book(int i);
  eager::SenderBook* send_book(int i) const { return &send_books_[i]; }
  // True the first time only: a comm found no ring or no book (said once per pool at INFO).
  bool first_empty() { return !said_empty_.exchange(true, std::memory_order_relaxed); }
  uint32_t lkey() const { return mr_->lkey; }
  uint32_t rkey() const { return mr_->rkey; }
  // The pool's keys on adapter `other`'s PD (a fused comm's other member: its QPs read staging and
  // write rings there): the pool's own on its adapter, else its memory registered there once, on
  // the first fused comm that spans both, and kept with the pool. Set-up path; the caller holds
  // the pool's adapter's eager_mu (eager_pool_keys).
  Status keys_on(Adapter& own, Adapter& other, uint32_t* lkey, uint32_t* rkey);
  uint32_t slots() const { return slots_; }
  size_t stride() const { return stride_; }
  size_t max_bytes() const { return max_bytes_; }
  uint32_t rings() const { return rings_; }
  size_t bytes() const { return mem_.size(); }  // the rings (registered)
  size_t book_bytes() const {
    return rings_ * (sizeof(eager::ReceiverBook) + sizeof(eager::SenderBook));
  }
  // A generation for the next grant: a ring lent again never shows its previous comm's slots.
  uint32_t next_grant() { return grant_.fetch_add(1, std::memory_order_relaxed) + 1; }

 private:
  EagerPool() = default;
  NumaBuffer mem_;
  verbs::Mr mr_;
  // The same memory on other adapters' PDs (keys_on), destroyed before mem_ is unmapped. Every
  // pool goes before any adapter (Engine::~Engine), so those PDs outlive these.
  std::vector<std::pair<Adapter*, verbs::Mr>> cross_;
  char* base_ = nullptr;
  uint32_t rings_ = 0;
  uint32_t slots_ = 0;
  size_t stride_ = 0;
  size_t max_bytes_ = 0;
  size_t ring_bytes_ = 0;
  FreeBits rings_free_;
  FreeBits books_free_;
  std::unique_ptr<eager::ReceiverBook[]> recv_books_;  // one per ring
  std::unique_ptr<eager::SenderBook[]> send_books_;    // `rings` of them
  std::atomic<uint32_t> grant_{0};
  std::atomic<bool> said_empty_{false};
};

// The adapter's pool, made on first need with the engine's configuration (SLUICE_EAGER_*); null
// when eager is off or SLUICE_EAGER_RINGS is 0, or when the pool could not be made (its memory or
// registration refused: said once at WARN, and not tried again). A non-null pool is a reference the
// comm gives back with eager_pool_unref once its leases are returned. Setup and teardown paths only
// (the adapter's mutex).
Result<EagerPool*> eager_pool_of(Adapter& a, int numa);
void eager_pool_unref(Adapter& a);
// EagerPool::keys_on under `own`'s eager_mu, for a comm holding a reference to own's pool. A
// refusal is kept in own.eager_refused and given again, with *remembered set, to every later ask
// for the same `other`, which is not tried again.
Status eager_pool_keys(Adapter& own, Adapter& other, uint32_t* lkey, uint32_t* rkey,
                       bool* remembered);

}  // namespace sluice
