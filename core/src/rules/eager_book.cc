#include "rules/eager_book.h"

#include <bit>
#include <string>

namespace sluice::eager {

// ---- Sender -------------------------------------------------------------------------------------

void SenderBook::reset(bool enabled) {
  *this = SenderBook();
  enabled_ = enabled;
}

uint32_t SenderBook::send_ordinal(int32_t tag) const {
  const int i = tags_.find(tag);
  return enabled_ && i >= 0 ? send_ord_[i] : kNoOrdinal;
}

bool SenderBook::may_send(int32_t tag, size_t size, size_t max) {
  if (slots_ == 0 || size > max || !numbers(tag)) return false;
  const int i = tags_.find(tag);
  if (!confirmed_[i] || next_ >= limit_ || waiting_ >= static_cast<int>(slots_)) return false;
  // The part of this send is in a slot already read (the head's): its clear-to-send is here.
  return !ord_before(send_ord_[i], part_ord_[i]) && !asked(i);
}

bool SenderBook::may_ask(int32_t tag) {
  if (slots_ == 0 || next_ >= limit_) return false;
  if (!numbers(tag)) return enabled_ && !ask_all_;
  const int i = tags_.find(tag);
  return !ord_before(send_ord_[i], part_ord_[i]) && !asked(i);
}

uint64_t SenderBook::on_ask(int32_t tag) {
  const int i = tags_.find(tag);
  if (i < 0) {
    ask_all_ = true;
  } else {
    ask_ = i;
    ask_ord_ = send_ord_[i];
  }
  return next_++;
}

void SenderBook::sent(int i) {
  if (asked(i)) ask_ = -1;
  ++send_ord_[i];
}

uint64_t SenderBook::on_eager(int32_t tag, uint32_t size, uint16_t req) {
  const int i = tags_.add(tag);  // met by may_send, which said yes: numbered
  if (i >= 0) {
    for (Sent& s : sent_) {
      if (s.used) continue;
      s = Sent{true, tag, send_ord_[i], size, req};
      break;
    }
    sent(i);
    ++waiting_;
  }
  return next_++;
}

bool SenderBook::ring_free(uint64_t first, uint32_t span) const {
  if (slots_ == 0 || span == 0 || span > slots_) return false;
  for (uint32_t j = 0; j < span; ++j)
    if (limit_ < occupant_[(first + j) % slots_] + slots_) return false;
  return true;
}

void SenderBook::occupy(uint64_t first, uint32_t span, uint64_t last) {
  if (slots_ == 0) return;
  for (uint32_t j = 0; j < span && j < slots_; ++j) occupant_[(first + j) % slots_] = last + 1;
}

void SenderBook::on_rendezvous(int32_t tag) {
  if (!numbers(tag)) return;
  sent(tags_.find(tag));
}

Status SenderBook::on_slot(const int32_t* tags, const uint32_t* sizes, uint8_t marks, int n,
                           bool resolved, uint16_t credit, SlotMatch* out) {
  *out = SlotMatch();
  if (!enabled_) return Status::ok();
  // Before the grant is read its W is not known: the largest a grant may have bounds the step.
  const uint32_t w = slots_ > 0 ? slots_ : wire::kEagerMaxSlots;
  const uint64_t l = wire::credit_of(limit_, credit);
  if (l - limit_ > w) {
    return Status(Code::kRemoteError, "eager credit " + std::to_string(credit) +
                                          " moves the limit from " + std::to_string(limit_) +
                                          " by more than the ring's " + std::to_string(w) +
                                          " slots");
  }
  limit_ = l;
  for (int i = 0; i < n; ++i) {
    const int32_t t = tags[i];
    if (!numbers(t)) {
      if (resolved)
        return Status(Code::kRemoteError,
                      "a receive resolved from the eager ring has a part (tag " +
                          std::to_string(t) + ") that this sender never sends eagerly");
      continue;
    }
    const int x = tags_.find(t);
    if ((marks >> i & 1u) != 0) confirmed_[x] = true;
    const uint32_t k = part_ord_[x]++;
    bool found = false;
    for (Sent& s : sent_) {
      if (!s.used || s.tag != t || s.ordinal != k) continue;
      out->eager |= static_cast<uint8_t>(1u << i);
      out->req[i] = s.req;
      out->size[i] = s.size;
      if (s.size > sizes[i] && out->too_large < 0) {
        out->too_large = i;
        out->sent_size = s.size;
      }
      s.used = false;
      --waiting_;
      found = true;
      break;
    }
    if (!found && resolved)
      return Status(Code::kRemoteError, "a receive resolved from the eager ring has part " +
                                            std::to_string(i) + " (tag " + std::to_string(t) +
                                            ", ordinal " + std::to_string(k) +
                                            ") that this sender did not send eagerly");
  }
  return Status::ok();
}

// ---- Receiver -----------------------------------------------------------------------------------

void ReceiverBook::reset(uint32_t slots) {
  *this = ReceiverBook();
  slots_ = slots;
}

uint8_t ReceiverBook::post(uint64_t seq, const int32_t* tags, int n) {
  Open& o = open_[seq % wire::kFifoSlots];
  o.seq = seq;
  o.n = n;
  open_bits_ |= 1u << (seq % wire::kFifoSlots);
  uint8_t mask = 0;
  for (int i = 0; i < n; ++i) {
    const int32_t t = tags[i];
    const int x = slots_ > 0 ? tags_.add(t) : -1;
    o.part[i] = Part{x >= 0, false, t, x >= 0 ? part_ord_[x]++ : 0};
    if (x >= 0) mask |= static_cast<uint8_t>(1u << i);
  }
  return mask;
}

uint8_t ReceiverBook::fill_from_ring(uint64_t seq, uint64_t* counters) const {
  const Open& o = open_[seq % wire::kFifoSlots];
  uint8_t mask = 0;
  for (int i = 0; i < o.n; ++i) {
    counters[i] = UINT64_MAX;
    if (unclaimed_ == 0 || o.seq != seq || !o.part[i].numbered) continue;
    for (uint64_t c = prefix_; c < prefix_ + slots_; ++c) {
      const Slot& s = ring_[c % slots_];
      if (!s.arrived || s.consumed || !s.message || !o.part[i].is(s.tag, s.ordinal)) continue;
      counters[i] = c;
      mask |= static_cast<uint8_t>(1u << i);
      break;
    }
  }
  return mask;
}

Status ReceiverBook::arrive(uint64_t counter, int32_t tag, uint32_t ordinal, uint32_t size,
                            uint32_t at, bool* posted, uint64_t* seq, int* index) {
  *posted = false;
  if (slots_ == 0 || counter < prefix_ || counter >= credited_ || arrived(counter)) {
    return Status(Code::kRemoteError, "eager message " + std::to_string(counter) +
                                          " outside the credits given (" + std::to_string(prefix_) +
                                          " to " + std::to_string(credited_) + ")");
  }
  const int x = tags_.find(tag);
  if (x < 0)
    return Status(Code::kRemoteError, "eager message with tag " + std::to_string(tag) +
                                          ", which this receiver does not number (its entries "
                                          "said so)");
  ring_[counter % slots_] = Slot{true, false, true, tag, ordinal, size, at};
  ++unclaimed_;
  if (!ord_before(ordinal, part_ord_[x])) return Status::ok();  // not posted yet: held
  for (uint32_t m = open_bits_; m != 0; m &= m - 1) {
    Open& o = open_[std::countr_zero(m)];
    for (int i = 0; i < o.n; ++i) {
      Part& p = o.part[i];
      if (!p.is(tag, ordinal)) continue;
      if (p.filled) break;
      p.filled = true;
      *posted = true;
      *seq = o.seq;
      *index = i;
      return Status::ok();
    }
  }
  return Status(Code::kRemoteError, "eager message " + std::to_string(counter) + " (tag " +
                                        std::to_string(tag) + ", ordinal " +
                                        std::to_string(ordinal) +
                                        ") for a receive part already filled or finished");
}

void ReceiverBook::consume(uint64_t counter, uint64_t seq, int index) {
  if (slots_ == 0 || counter < prefix_ || counter >= prefix_ + slots_) return;
  Slot& s = ring_[counter % slots_];
  if (s.arrived && s.message && !s.consumed) --unclaimed_;
  s.consumed = true;
  // A part filled from a held message is marked by its caller's copy: mark the open part too (a
  // numbered part's (tag, ordinal) names one part: the one the message was copied into).
  Open& o = open_[seq % wire::kFifoSlots];
  if (s.message && o.seq == seq && index >= 0 && index < o.n && o.part[index].is(s.tag, s.ordinal))
    o.part[index].filled = true;
  advance();
}

void ReceiverBook::advance() {
  while (prefix_ < credited_ && ring_[prefix_ % slots_].arrived &&
         ring_[prefix_ % slots_].consumed) {
    if (ring_[prefix_ % slots_].batch_end) batch_due_ = true;
    ring_[prefix_ % slots_] = Slot();
    ++prefix_;
  }
}

Status ReceiverBook::arrive_ask(uint64_t counter, int32_t tag, uint32_t ordinal, bool all,
                                uint64_t* asked_seq) {
  *asked_seq = UINT64_MAX;
  if (slots_ == 0 || counter < prefix_ || counter >= credited_ || arrived(counter)) {
    return Status(Code::kRemoteError, "eager ask " + std::to_string(counter) +
                                          " outside the credits given (" + std::to_string(prefix_) +
                                          " to " + std::to_string(credited_) + ")");
  }
  ring_[counter % slots_] = Slot{true, true, false, 0, 0, 0, 0};  // nothing to copy: free now
  advance();
  if (all) return Status::ok();
  // A tag met first in an ask (its parts not posted yet) is numbered from here, if there is room:
  // its first part will be the one asked for. With no room its parts are never held.
  const int x = tags_.add(tag);
  if (x < 0) return Status::ok();
  if (!ord_before(ordinal, part_ord_[x])) {  // its part is not posted yet: kept for post()
    asked_ = true;
    ask_tag_ = tag;
    ask_ord_ = ordinal;
    return Status::ok();
  }
  // Posted: its receive's clear-to-send must go, unless it went and the receive finished already
  // (the ask and the rendezvous that followed it can be seen in either order).
  for (uint32_t m = open_bits_; m != 0; m &= m - 1) {
    const Open& o = open_[std::countr_zero(m)];
    for (int i = 0; i < o.n; ++i)
      if (o.part[i].is(tag, ordinal) && !o.part[i].filled) *asked_seq = o.seq;
  }
  return Status::ok();
}

bool ReceiverBook::take_ask(uint64_t seq) {
  const Open& o = open_[seq % wire::kFifoSlots];
  if (!asked_ || o.seq != seq) return false;
  for (int i = 0; i < o.n; ++i) {
    if (o.part[i].is(ask_tag_, ask_ord_)) {
      asked_ = false;
      return true;
    }
  }
  return false;
}

void ReceiverBook::finish(uint64_t seq) {
  Open& o = open_[seq % wire::kFifoSlots];
  if (o.seq == seq) {
    o = Open();
    open_bits_ &= ~(1u << (seq % wire::kFifoSlots));
  }
}

}  // namespace sluice::eager
