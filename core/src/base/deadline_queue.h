// What the reapers of connection setup look at on every connect, accept and listen call
// (connect.cc's reap_abandoned_connects, listener.cc's reap_listens): the pending things ordered by
// the time they next need a look, so that a call with nothing due costs one comparison however many
// connects and listens are open (issue 32: they used to scan all of them on every call).
//
// A binary min-heap of (due, id). Ids are the callers' keys into their own registries; an entry
// whose thing is gone stays until it comes due and is then discarded (reap_due's kGone), so removal
// is never a search. Not thread safe: the caller's lock guards it. Pure: no clock of its own, and a
// count of the heap's steps (comparisons and moves) for the complexity tests.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice {

class DeadlineQueue {
 public:
  using Clock = std::chrono::steady_clock;

  void push(Clock::time_point due, uint64_t id);
  // True when the earliest entry is due by `now` (one comparison).
  bool due(Clock::time_point now) const {
    ++steps_;
    return !heap_.empty() && heap_.front().due <= now;
  }
  // Pops the earliest entry when it is due by `now`: its id in *id; false when none is due.
  bool pop_due(Clock::time_point now, uint64_t* id);
  size_t size() const { return heap_.size(); }
  void clear() { heap_.clear(); }
  // Comparisons and element moves so far (complexity tests count these, not time).
  uint64_t steps() const { return steps_; }

 private:
  struct Item {
    Clock::time_point due;
    uint64_t id;
  };
  std::vector<Item> heap_;
  mutable uint64_t steps_ = 0;
};

// What a reaper decided about one due id.
struct ReapDecision {
  enum Kind { kGone, kReap, kLater } kind = kGone;
  DeadlineQueue::Clock::time_point next{};  // kLater: when to look again (re-queued)
};

// Looks at up to `batch` due ids, earliest first: `decide(id)` says whether the thing is gone (its
// entry is dropped), was reaped (dropped too; the callback did it), or needs another look at
// `next` (re-queued). Returns how many it reaped. Per call: one comparison when nothing is due,
// else at most `batch` pops and pushes, O(batch log n), whatever the queue holds. What is due
// beyond the batch waits for the next call.
template <class Decide>
size_t reap_due(DeadlineQueue& q, DeadlineQueue::Clock::time_point now, size_t batch,
                Decide&& decide) {
  size_t reaped = 0;
  uint64_t id = 0;
  for (size_t looked = 0; looked < batch && q.pop_due(now, &id); ++looked) {
    const ReapDecision d = decide(id);
    if (d.kind == ReapDecision::kReap) ++reaped;
    // A "later" at or before now would come back within this call: it waits for the next one.
    if (d.kind == ReapDecision::kLater)
      q.push(d.next > now ? d.next : now + DeadlineQueue::Clock::duration(1), id);
  }
  return reaped;
}

}  // namespace sluice
