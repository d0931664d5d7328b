// The eager path's bookkeeping on both ends of a comm (docs/eager.md), as pure state without verbs:
// which send may go eager, how each end numbers sends and receive parts per tag so that both pair
// them alike whatever the timing, the ring's credits, and which eager message fills which part.
// The data path holds one SenderBook per send comm and one ReceiverBook per receive comm, and
// copies bytes and posts WRs as they say. Every call is bounded by the ring's slots (at most 64)
// and a receive's parts (at most 8) times the receives open (at most 32): never by the comms open.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sluice/core/base/status.h"
#include "sluice/core/wire/eager.h"
#include "sluice/core/wire/wire.h"

namespace sluice::eager {

inline bool numbered(int32_t tag) {
  return tag >= 0 && tag < wire::kEagerTags;
}
inline constexpr uint32_t kNoOrdinal = UINT32_MAX;

// ---- Sender -------------------------------------------------------------------------------------

struct SlotMatch {
  uint8_t eager = 0;                         // bit i: entry i's part was sent eagerly (matched now)
  uint16_t req[wire::kEntriesPerSlot] = {};  // the eager send's request, for each bit
  uint32_t size[wire::kEntriesPerSlot] = {};  // and its size
  int too_large = -1;      // an entry whose eager send is larger than its buffer (the comm fails)
  uint32_t sent_size = 0;  // that send's size
};

class SenderBook {
 public:
  // enabled: the comm negotiated the eager path, so sends and parts are numbered from the first
  // (whether or not a ring is ever lent). set_slots: the receiver's grant was read (W slots, a
  // power of two in wire::kEagerMinSlots..Max); nothing goes eagerly before.
  void reset(bool enabled);
  void set_slots(uint32_t slots) { slots_ = slots; }
  bool enabled() const { return enabled_; }
  uint32_t slots() const { return slots_; }

  // The ordinal the next send with `tag` takes (numbered tags; kNoOrdinal otherwise).
  uint32_t send_ordinal(int32_t tag) const;
  // Whether the next send with `tag` of `size` bytes may go eagerly now: eager on, a numbered tag,
  // size <= max, a credit (counter < limit), fewer than W sends waiting for their part, and its
  // part not in the slot the sender read last (then the clear-to-send is there: rendezvous).
  bool may_send(int32_t tag, size_t size, size_t max) const;
  // An eager send was posted: takes the send ordinal and the next counter (returned).
  uint64_t on_eager(int32_t tag, uint32_t size, uint16_t req);
  // A send matched an entry of the slot read (rendezvous): its tag's next send ordinal.
  void on_rendezvous(int32_t tag);

  // The slot at the FIFO's head, read once (cts::take_snapshot), with n entries of tags[i] and
  // sizes[i], `resolved` (wire::kCtsResolved) and its credit (CtsEntry::reserved). Numbers its
  // parts per tag and matches those already sent eagerly (*out). kRemoteError: a resolved slot
  // with a part this sender did not send eagerly, or a credit that moved back or further than W.
  Status on_slot(const int32_t* tags, const uint32_t* sizes, int n, bool resolved, uint16_t credit,
                 SlotMatch* out);

  uint64_t limit() const { return limit_; }   // eager counters below it have a free ring slot
  uint64_t counter() const { return next_; }  // eager messages sent
  int waiting() const { return waiting_; }    // sent eagerly, part not read yet

 private:
  struct Sent {
    int32_t tag = -1;  // -1: free
    uint32_t ordinal = 0;
    uint32_t size = 0;
    uint16_t req = 0;
  };
  bool enabled_ = false;
  uint32_t slots_ = 0;
  uint64_t next_ = 0;
  uint64_t limit_ = 0;
  int waiting_ = 0;
  uint32_t send_ord_[wire::kEagerTags] = {};
  uint32_t part_ord_[wire::kEagerTags] = {};  // parts numbered from the slots read
  Sent sent_[wire::kEagerMaxSlots];
};

// ---- Receiver -----------------------------------------------------------------------------------

class ReceiverBook {
 public:
  void reset(uint32_t slots);
  uint32_t slots() const { return slots_; }

  // Receive `seq` (the comm's receive sequence) was posted with n parts of tags[i]: numbers its
  // parts (ordinals[i], kNoOrdinal for a tag that is not numbered). Then fill_from_ring says which
  // of its parts already lie in the ring.
  void post(uint64_t seq, const int32_t* tags, int n, uint32_t* ordinals);
  // The eager messages in the ring for receive `seq`'s parts: counters[i] (or UINT64_MAX); returns
  // the mask of parts that have one. The caller copies each and calls consume.
  uint8_t fill_from_ring(uint64_t seq, uint64_t* counters) const;

  // Eager message `counter` arrived (read_eager_slot said ready) with its tag, ordinal and size.
  // *seq / *index: the posted part it fills (returns true), or false: held until its part is
  // posted. kRemoteError: a counter outside the credits given, a tag that is not numbered, an
  // ordinal whose part was already filled or finished.
  Status arrive(uint64_t counter, int32_t tag, uint32_t ordinal, uint32_t size, bool* posted,
                uint64_t* seq, int* index);
  // Its bytes were copied out: the ring slot is free.
  void consume(uint64_t counter);
  // Receive `seq` finished (completed or failed): its parts leave the open set.
  void finish(uint64_t seq);
  // Whether counter c has arrived (the data path polls the others in [prefix, published limit)).
  bool arrived(uint64_t c) const;

  uint64_t prefix() const { return prefix_; }  // every eager message below was copied out
  uint64_t limit() const { return prefix_ + slots_; }
  // The credit to write in an entry now (limit mod 2^16), and that it was written.
  uint16_t credit() const { return static_cast<uint16_t>(limit()); }
  void on_credit_written() { credited_ = limit(); }
  uint64_t credited() const {
    return credited_;
  }  // the last limit written: the sender may write below it
  // Whether held resolved entries should go out now: W/2 slots freed since the last credit.
  bool credit_due() const { return slots_ > 0 && limit() - credited_ >= slots_ / 2; }

 private:
  struct Slot {
    bool arrived = false;
    bool consumed = false;
    int32_t tag = -1;
    uint32_t ordinal = 0;
    uint32_t size = 0;
  };
  struct Part {
    int32_t tag = -1;
    uint32_t ordinal = kNoOrdinal;
    bool filled = false;  // by an eager message
  };
  struct Open {
    uint64_t seq = UINT64_MAX;  // UINT64_MAX: free
    int n = 0;
    Part part[wire::kEntriesPerSlot];
  };
  uint32_t slots_ = 0;
  uint64_t prefix_ = 0;
  uint64_t credited_ = 0;
  uint32_t part_ord_[wire::kEagerTags] = {};
  Slot ring_[wire::kEagerMaxSlots];
  Open open_[wire::kFifoSlots];
};

}  // namespace sluice::eager
