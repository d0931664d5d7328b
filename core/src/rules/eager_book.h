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

inline constexpr uint32_t kNoOrdinal = UINT32_MAX;

// The tags one end of a comm numbers: the first wire::kEagerTags distinct values it meets, each for
// the comm's life (NCCL's tag is the sending rank, any value; a comm sees one, or a few on shared
// comms). A lookup is a scan of the tags met so far.
class TagTable {
 public:
  int find(int32_t tag) const {
    for (int i = 0; i < n_; ++i)
      if (tag_[i] == tag) return i;
    return -1;
  }
  // Its index, added if new and there is room; -1: the table is full (never numbered).
  int add(int32_t tag) {
    const int i = find(tag);
    if (i >= 0 || n_ == wire::kEagerTags) return i;
    tag_[n_] = tag;
    return n_++;
  }

 private:
  int n_ = 0;
  int32_t tag_[wire::kEagerTags] = {};
};
// Ordinals are 32-bit counters that wrap (a tag can see 2^32 sends in a long job): a before b in
// the order of one tag, for ordinals less than 2^31 apart (at most 32 receives are open).
inline bool ord_before(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(a - b) < 0;
}

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

  // Whether this end numbers `tag` (meeting it here if new), and the ordinal its next send takes.
  bool numbers(int32_t tag) { return enabled_ && tags_.add(tag) >= 0; }
  uint32_t send_ordinal(int32_t tag) const;
  // Whether the next send with `tag` of `size` bytes may go eagerly now: eager on, a tag numbered
  // on both ends (the receiver says so in its entries: wire::kCtsNumbered), size <= max, a credit
  // (counter < limit), fewer than W sends waiting for their part, and its part not in the slot the
  // sender read last (then the clear-to-send is there: rendezvous).
  bool may_send(int32_t tag, size_t size, size_t max);
  // An eager send was posted: takes the send ordinal and the next counter (returned).
  uint64_t on_eager(int32_t tag, uint32_t size, uint16_t req);
  // Whether the next send with `tag`, which may not go eagerly, should ask for its clear-to-send
  // through the ring (wire::kEagerAsk): a grant and a credit, its part not read yet, and not asked
  // already. A tag this end cannot number (its table is full) asks once for good
  // (wire::kEagerAskAll: the receiver stops holding). on_ask: the ask was posted; returns its
  // counter. A send that asked waits for its clear-to-send (it never goes eagerly after asking).
  bool may_ask(int32_t tag);
  uint64_t on_ask(int32_t tag);
  // Whether the receiver said it numbers `tag` (a send of it may go eagerly once a credit and a
  // free slot allow: waiting for those is no reason to ask).
  bool confirmed(int32_t tag) const {
    const int i = tags_.find(tag);
    return i >= 0 && confirmed_[i];
  }
  // A send matched an entry of the slot read (rendezvous): its tag's next send ordinal.
  void on_rendezvous(int32_t tag);

  // The slot at the FIFO's head, read once (cts::take_snapshot), with n entries of tags[i] and
  // sizes[i], bit i of `marks` (wire::kCtsNumbered: the receiver numbers that tag), `resolved`
  // (wire::kCtsResolved) and its credit (CtsEntry::reserved). Numbers its parts per tag and
  // matches those already sent eagerly (*out). kRemoteError: a resolved slot with a part this
  // sender did not send eagerly, or a credit that moved back or further than W.
  Status on_slot(const int32_t* tags, const uint32_t* sizes, uint8_t marks, int n, bool resolved,
                 uint16_t credit, SlotMatch* out);

  // Whether the ring's slots of counters [first, first + span) may be written now: every message
  // whose bytes lie in them was copied out (a batch packs later messages into its first slots, so
  // a slot can hold counters past its own). occupy: a WRITE of counters up to `last` was posted
  // into them (a message alone, an ask or a batch: wire::kEagerMore).
  bool ring_free(uint64_t first, uint32_t span) const;
  void occupy(uint64_t first, uint32_t span, uint64_t last);

  uint64_t limit() const { return limit_; }   // eager counters below it have a free ring slot
  uint64_t counter() const { return next_; }  // eager messages sent
  int waiting() const { return waiting_; }    // sent eagerly, part not read yet

 private:
  struct Sent {
    bool used = false;
    int32_t tag = 0;
    uint32_t ordinal = 0;
    uint32_t size = 0;
    uint16_t req = 0;
  };
  bool enabled_ = false;
  uint32_t slots_ = 0;
  uint64_t next_ = 0;
  uint64_t limit_ = 0;
  int waiting_ = 0;
  int ask_ = -1;  // the send that asked: its tag's index and send ordinal (-1: none)
  uint32_t ask_ord_ = 0;
  bool ask_all_ = false;  // asked with wire::kEagerAskAll (a tag this end cannot number)
  bool asked(int i) const { return i == ask_ && ask_ord_ == send_ord_[i]; }
  void sent(int i);
  TagTable tags_;
  uint32_t send_ord_[wire::kEagerTags] = {};
  uint32_t part_ord_[wire::kEagerTags] = {};  // parts numbered from the slots read
  bool confirmed_[wire::kEagerTags] = {};     // the receiver numbers it too (kCtsNumbered seen)
  Sent sent_[wire::kEagerMaxSlots];
  // Per ring slot (counter % W): 1 + the last counter whose bytes were written into it (0: none).
  uint64_t occupant_[wire::kEagerMaxSlots] = {};
};

// ---- Receiver -----------------------------------------------------------------------------------

class ReceiverBook {
 public:
  void reset(uint32_t slots);
  uint32_t slots() const { return slots_; }

  // Receive `seq` (the comm's receive sequence) was posted with n parts of tags[i]: numbers its
  // parts; returns the mask of those numbered (their entries say so: wire::kCtsNumbered). Then
  // fill_from_ring says which of its parts already lie in the ring.
  uint8_t post(uint64_t seq, const int32_t* tags, int n);
  // Whether every part of open receive `seq` is numbered (it may be held: publish_end).
  bool all_numbered(uint64_t seq) const;
  // The eager messages in the ring for receive `seq`'s parts: counters[i] (or UINT64_MAX); returns
  // the mask of parts that have one. The caller copies each and calls consume.
  uint8_t fill_from_ring(uint64_t seq, uint64_t* counters) const;

  // Eager message `counter` arrived (read_eager_slot said ready) with its tag, ordinal and size,
  // its payload `at` bytes into the ring (at(counter) gives it back to the copy).
  // *seq / *index: the posted part it fills (returns true), or false: held until its part is
  // posted. kRemoteError: a counter outside the credits given, a tag this end does not number, an
  // ordinal whose part was already filled or finished.
  Status arrive(uint64_t counter, int32_t tag, uint32_t ordinal, uint32_t size, uint32_t at,
                bool* posted, uint64_t* seq, int* index);
  // An arrived message's payload: its offset into the ring, and its size.
  uint32_t at(uint64_t counter) const { return ring_[counter % slots_].at; }
  uint32_t size(uint64_t counter) const { return ring_[counter % slots_].size; }
  // Ask `counter` arrived (wire::kEagerAsk) for part (tag, ordinal): its ring slot is free at once.
  // *asked_seq: the posted receive of that part whose clear-to-send must go now, or UINT64_MAX
  // (not posted yet: the ask is kept, and post() reports it; or the part was published and
  // completed already, or a tag this end cannot number (its table is full), whose receives are
  // never held: nothing to do; a tag met first here is numbered from here). An ask-all
  // (wire::kEagerAskAll) only frees its slot: the caller stops holding. kRemoteError: a counter
  // outside the credits given.
  Status arrive_ask(uint64_t counter, int32_t tag, uint32_t ordinal, bool all, uint64_t* asked_seq);
  // Whether the receive last posted (post()) has the part a kept ask names (the ask is then used).
  bool take_ask(uint64_t seq);
  // Its bytes were copied out into part `index` of receive `seq`: the ring slot is free, and that
  // part is filled. Constant time (the part is named, not looked for among the open receives).
  void consume(uint64_t counter, uint64_t seq, int index);
  // Receive `seq` finished (completed or failed): its parts leave the open set.
  void finish(uint64_t seq);
  // Whether counter c has arrived (the data path polls the others in [prefix, published limit)).
  bool arrived(uint64_t c) const;

  uint64_t prefix() const { return prefix_; }  // every eager message below was copied out
  uint64_t limit() const { return prefix_ + slots_; }
  // The credit to write in an entry now (limit mod 2^16), and that it was written.
  uint16_t credit() const { return static_cast<uint16_t>(limit()); }
  void on_credit_written() {
    credited_ = limit();
    batch_due_ = false;
  }
  uint64_t credited() const {
    return credited_;
  }  // the last limit written: the sender may write below it
  // Whether held resolved entries should go out now: W/2 slots freed since the last credit, or a
  // batch (several messages in one WRITE, wire::kEagerMore) was copied out whole since. A batch
  // packs later counters' bytes into its first slots, and its sender writes those slots again
  // only once the limit passed its last message by W (SenderBook::ring_free): it may be waiting
  // for that credit with fewer than W/2 slots freed.
  bool credit_due() const {
    return slots_ > 0 && (limit() - credited_ >= slots_ / 2 || (batch_due_ && limit() > credited_));
  }
  // The batch eager_poll found landing: message seq - 1's header and first message checked (seq
  // 0: none), and `records` of the records after them (wire::read_eager_batch's *checked). What
  // checked is final until the slot is credited again, so a later poll checks only the rest.
  struct Scan {
    uint64_t seq = 0;
    uint32_t records = 0;
  };
  Scan& scan() { return scan_; }
  // Messages c .. last came in one WRITE: once the prefix passes `last`, a credit is due.
  void batch_read(uint64_t last) {
    if (slots_ > 0 && last >= prefix_ && last < prefix_ + slots_)
      ring_[last % slots_].batch_end = true;
  }

 private:
  struct Slot {
    bool arrived = false;
    bool consumed = false;
    bool message = false;  // an eager message (not an ask)
    int32_t tag = 0;
    uint32_t ordinal = 0;
    uint32_t size = 0;
    uint32_t at = 0;
    bool batch_end = false;  // the last message of a batch (batch_read)
  };
  struct Part {
    bool numbered = false;
    bool filled = false;  // by an eager message
    int32_t tag = 0;
    uint32_t ordinal = 0;
    bool is(int32_t t, uint32_t k) const { return numbered && tag == t && ordinal == k; }
  };
  struct Open {
    uint64_t seq = UINT64_MAX;  // UINT64_MAX: free
    int n = 0;
    Part part[wire::kEntriesPerSlot];
  };
  uint32_t slots_ = 0;
  uint64_t prefix_ = 0;
  uint64_t credited_ = 0;
  bool batch_due_ = false;  // the prefix passed a batch's last message since the last credit
  Scan scan_;
  // Bit seq % kFifoSlots: open_[] holds an open receive (post sets it, finish clears it); the
  // scans for a message's part go over these only.
  uint32_t open_bits_ = 0;
  static_assert(wire::kFifoSlots <= 32, "open_bits_ has a bit per open receive");
  // Messages in the ring not copied out (arrived, not consumed): fill_from_ring has nothing to
  // look for while there are none (a receive posted before its message: the usual case).
  uint32_t unclaimed_ = 0;
  bool asked_ = false;  // an ask whose part was not posted when it came
  int32_t ask_tag_ = 0;
  uint32_t ask_ord_ = 0;
  void advance();
  TagTable tags_;
  uint32_t part_ord_[wire::kEagerTags] = {};
  Slot ring_[wire::kEagerMaxSlots];
  Open open_[wire::kFifoSlots];
};

// Called on every poll of the ring and every publication: inline.
inline bool ReceiverBook::all_numbered(uint64_t seq) const {
  const Open& o = open_[seq % wire::kFifoSlots];
  if (o.seq != seq) return false;
  for (int i = 0; i < o.n; ++i)
    if (!o.part[i].numbered) return false;
  return true;
}

inline bool ReceiverBook::arrived(uint64_t c) const {
  return slots_ > 0 && c >= prefix_ && c < prefix_ + slots_ && ring_[c % slots_].arrived;
}

// ---- Publication --------------------------------------------------------------------------------

// What a receive not yet published is to the receiver's publication (docs/eager.md, "Held
// clear-to-send"): completed from the ring (its entries only carry credits and let the sender
// number parts), needed by the sender now, or held back while its message is expected in the ring.
enum class Pending : uint8_t { kResolved, kNeeded, kHeld };

// How far the receiver publishes now: receives [published, end), given what each receive k in
// [published, seq) is (at(k)). `credit_due`: W/2 ring slots were freed since the last credit
// written (the sender may be out of them); `slot_due`: irecv waits for the sender to pass a FIFO
// slot (it must read the resolved entries first). Entries go in order, so a held receive stops the
// publication, except when a credit is due and nothing can go before it (the sender may be stuck
// on credits whose receives lie behind it: then everything goes, the held receive by rendezvous).
// Resolved receives go in batches of kEntriesPerSlot, or when a credit is due, or on a slot wait
// when nothing is held: while a receive is held its message is still to come, and it carries the
// sender's head (wire::EagerHeader::head), so the batch is worth waiting for (a window of 32
// receives, the whole FIFO, would otherwise publish every one or two).
template <class At>
uint64_t publish_end(uint64_t published, uint64_t seq, bool credit_due, bool slot_due, At&& at) {
  uint64_t k = published;
  bool needed = false;
  for (; k < seq; ++k) {
    const Pending p = at(k);
    if (p == Pending::kHeld) break;
    if (p == Pending::kNeeded) needed = true;
  }
  if (needed) return k;
  if (k == published) return credit_due && k < seq ? seq : published;
  const bool due = credit_due || (slot_due && k == seq);
  return due || k - published >= static_cast<uint64_t>(wire::kEntriesPerSlot) ? k : published;
}

}  // namespace sluice::eager
