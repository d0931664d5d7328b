#include "rules/eager_book.h"

#include <string>

namespace sluice::eager {

// ---- Sender -------------------------------------------------------------------------------------

void SenderBook::reset(bool enabled) {
  *this = SenderBook();
  enabled_ = enabled;
}

uint32_t SenderBook::send_ordinal(int32_t tag) const {
  return enabled_ && numbered(tag) ? send_ord_[tag] : kNoOrdinal;
}

bool SenderBook::may_send(int32_t tag, size_t size, size_t max) const {
  if (slots_ == 0 || !numbered(tag) || size > max) return false;
  if (next_ >= limit_ || waiting_ >= static_cast<int>(slots_)) return false;
  // The part of this send is in a slot already read (the head's): its clear-to-send is here.
  return part_ord_[tag] <= send_ord_[tag];
}

uint64_t SenderBook::on_eager(int32_t tag, uint32_t size, uint16_t req) {
  for (Sent& s : sent_) {
    if (s.tag >= 0) continue;
    s = Sent{tag, send_ord_[tag], size, req};
    break;
  }
  ++send_ord_[tag];
  ++waiting_;
  return next_++;
}

void SenderBook::on_rendezvous(int32_t tag) {
  if (enabled_ && numbered(tag)) ++send_ord_[tag];
}

Status SenderBook::on_slot(const int32_t* tags, const uint32_t* sizes, int n, bool resolved,
                           uint16_t credit, SlotMatch* out) {
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
    if (!numbered(t)) {
      if (resolved)
        return Status(Code::kRemoteError,
                      "a receive resolved from the eager ring has a part (tag " +
                          std::to_string(t) + ") that cannot go eagerly");
      continue;
    }
    const uint32_t k = part_ord_[t]++;
    bool found = false;
    for (Sent& s : sent_) {
      if (s.tag != t || s.ordinal != k) continue;
      out->eager |= static_cast<uint8_t>(1u << i);
      out->req[i] = s.req;
      out->size[i] = s.size;
      if (s.size > sizes[i] && out->too_large < 0) {
        out->too_large = i;
        out->sent_size = s.size;
      }
      s.tag = -1;
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

void ReceiverBook::post(uint64_t seq, const int32_t* tags, int n, uint32_t* ordinals) {
  Open& o = open_[seq % wire::kFifoSlots];
  o.seq = seq;
  o.n = n;
  for (int i = 0; i < n; ++i) {
    const int32_t t = tags[i];
    const uint32_t k = numbered(t) && slots_ > 0 ? part_ord_[t]++ : kNoOrdinal;
    o.part[i] = Part{t, k, false};
    if (ordinals != nullptr) ordinals[i] = k;
  }
}

uint8_t ReceiverBook::fill_from_ring(uint64_t seq, uint64_t* counters) const {
  const Open& o = open_[seq % wire::kFifoSlots];
  uint8_t mask = 0;
  for (int i = 0; i < o.n; ++i) {
    counters[i] = UINT64_MAX;
    if (o.seq != seq || o.part[i].ordinal == kNoOrdinal) continue;
    for (uint64_t c = prefix_; c < prefix_ + slots_; ++c) {
      const Slot& s = ring_[c % slots_];
      if (!s.arrived || s.consumed || s.tag != o.part[i].tag || s.ordinal != o.part[i].ordinal)
        continue;
      counters[i] = c;
      mask |= static_cast<uint8_t>(1u << i);
      break;
    }
  }
  return mask;
}

Status ReceiverBook::arrive(uint64_t counter, int32_t tag, uint32_t ordinal, uint32_t size,
                            bool* posted, uint64_t* seq, int* index) {
  *posted = false;
  if (slots_ == 0 || counter < prefix_ || counter >= credited_ || arrived(counter)) {
    return Status(Code::kRemoteError, "eager message " + std::to_string(counter) +
                                          " outside the credits given (" + std::to_string(prefix_) +
                                          " to " + std::to_string(credited_) + ")");
  }
  if (!numbered(tag))
    return Status(Code::kRemoteError, "eager message with tag " + std::to_string(tag));
  ring_[counter % slots_] = Slot{true, false, tag, ordinal, size};
  if (ordinal >= part_ord_[tag]) return Status::ok();  // its receive is not posted yet: held
  for (Open& o : open_) {
    if (o.seq == UINT64_MAX) continue;
    for (int i = 0; i < o.n; ++i) {
      Part& p = o.part[i];
      if (p.tag != tag || p.ordinal != ordinal) continue;
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

void ReceiverBook::consume(uint64_t counter) {
  if (slots_ == 0 || counter < prefix_ || counter >= prefix_ + slots_) return;
  ring_[counter % slots_].consumed = true;
  // A part filled from a held message is marked by its caller's copy: mark the open part too.
  const Slot& s = ring_[counter % slots_];
  for (Open& o : open_) {
    if (o.seq == UINT64_MAX) continue;
    for (int i = 0; i < o.n; ++i)
      if (o.part[i].tag == s.tag && o.part[i].ordinal == s.ordinal) o.part[i].filled = true;
  }
  while (prefix_ < credited_ && ring_[prefix_ % slots_].arrived &&
         ring_[prefix_ % slots_].consumed) {
    ring_[prefix_ % slots_] = Slot();
    ++prefix_;
  }
}

void ReceiverBook::finish(uint64_t seq) {
  Open& o = open_[seq % wire::kFifoSlots];
  if (o.seq == seq) o = Open();
}

bool ReceiverBook::arrived(uint64_t c) const {
  return slots_ > 0 && c >= prefix_ && c < prefix_ + slots_ && ring_[c % slots_].arrived;
}

}  // namespace sluice::eager
