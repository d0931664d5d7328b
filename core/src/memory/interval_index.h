// The registration cache's index of live registrations by range (mr.cc's find_live): which live
// registration contains [lo, hi)? regMr asks it on every call, so it must not walk the cache
// (issue 32: every regMr walked all MRs x users of the adapter under its lock).
//
// A treap ordered by (base, payload) whose nodes also keep the largest end in their subtree: the
// query follows one path down, O(log n) expected, and so do insert and erase. Priorities are a
// hash of the key, so a given sequence of operations always builds the same tree (tests are
// deterministic). Pure: no locks (the adapter's mr_mu guards it) and a count of the nodes visited
// for the complexity tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice {

class IntervalIndex {
 public:
  // Adds [base, end) for `payload` (unique per range: the registration). Returns its node, for
  // erase.
  int32_t insert(uintptr_t base, uintptr_t end, const void* payload);
  // Removes the node insert returned.
  void erase(int32_t node);
  // The payload of a range with base <= lo and end >= hi, or null when none contains [lo, hi).
  const void* find_containing(uintptr_t lo, uintptr_t hi) const;
  size_t size() const { return size_; }
  // Nodes visited so far (complexity tests).
  uint64_t steps() const { return steps_; }

 private:
  struct Node {
    uintptr_t base = 0, end = 0, max_end = 0;
    uintptr_t key2 = 0;  // the payload's address: ties on base
    const void* payload = nullptr;
    uint64_t prio = 0;
    int32_t left = -1, right = -1;
  };
  bool less(int32_t a, uintptr_t base, uintptr_t key2) const;
  void update(int32_t n);
  // Splits t into keys < (base, key2) and the rest (or <= and the rest when `or_equal`).
  void split(int32_t t, uintptr_t base, uintptr_t key2, bool or_equal, int32_t* l, int32_t* r);
  int32_t merge(int32_t l, int32_t r);

  std::vector<Node> nodes_;
  std::vector<int32_t> free_;
  int32_t root_ = -1;
  size_t size_ = 0;
  mutable uint64_t steps_ = 0;
};

}  // namespace sluice
