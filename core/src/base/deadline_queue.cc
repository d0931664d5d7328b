#include "base/deadline_queue.h"

#include <utility>

namespace sluice {

void DeadlineQueue::push(Clock::time_point due, uint64_t id) {
  heap_.push_back({due, id});
  size_t i = heap_.size() - 1;
  while (i > 0) {
    const size_t parent = (i - 1) / 2;
    ++steps_;
    if (!(heap_[i].due < heap_[parent].due)) break;
    std::swap(heap_[i], heap_[parent]);
    ++steps_;
    i = parent;
  }
}

bool DeadlineQueue::pop_due(Clock::time_point now, uint64_t* id) {
  if (!due(now)) return false;
  *id = heap_.front().id;
  heap_.front() = heap_.back();
  heap_.pop_back();
  ++steps_;
  const size_t n = heap_.size();
  size_t i = 0;
  for (;;) {
    const size_t l = 2 * i + 1, r = l + 1;
    size_t least = i;
    if (l < n) {
      ++steps_;
      if (heap_[l].due < heap_[least].due) least = l;
    }
    if (r < n) {
      ++steps_;
      if (heap_[r].due < heap_[least].due) least = r;
    }
    if (least == i) break;
    std::swap(heap_[i], heap_[least]);
    ++steps_;
    i = least;
  }
  return true;
}

}  // namespace sluice
