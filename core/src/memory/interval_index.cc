#include "memory/interval_index.h"

#include <algorithm>

namespace sluice {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

bool IntervalIndex::less(int32_t a, uintptr_t base, uintptr_t key2) const {
  const Node& n = nodes_[static_cast<size_t>(a)];
  return n.base < base || (n.base == base && n.key2 < key2);
}

void IntervalIndex::update(int32_t i) {
  Node& n = nodes_[static_cast<size_t>(i)];
  n.max_end = n.end;
  if (n.left >= 0) n.max_end = std::max(n.max_end, nodes_[static_cast<size_t>(n.left)].max_end);
  if (n.right >= 0) n.max_end = std::max(n.max_end, nodes_[static_cast<size_t>(n.right)].max_end);
}

void IntervalIndex::split(int32_t t, uintptr_t base, uintptr_t key2, bool or_equal, int32_t* l,
                          int32_t* r) {
  if (t < 0) {
    *l = *r = -1;
    return;
  }
  ++steps_;
  Node& n = nodes_[static_cast<size_t>(t)];
  const bool goes_left = less(t, base, key2) || (or_equal && n.base == base && n.key2 == key2);
  if (goes_left) {
    int32_t rl = -1, rr = -1;
    split(n.right, base, key2, or_equal, &rl, &rr);
    nodes_[static_cast<size_t>(t)].right = rl;
    update(t);
    *l = t;
    *r = rr;
  } else {
    int32_t ll = -1, lr = -1;
    split(n.left, base, key2, or_equal, &ll, &lr);
    nodes_[static_cast<size_t>(t)].left = lr;
    update(t);
    *l = ll;
    *r = t;
  }
}

int32_t IntervalIndex::merge(int32_t l, int32_t r) {
  if (l < 0) return r;
  if (r < 0) return l;
  ++steps_;
  if (nodes_[static_cast<size_t>(l)].prio > nodes_[static_cast<size_t>(r)].prio) {
    const int32_t m = merge(nodes_[static_cast<size_t>(l)].right, r);
    nodes_[static_cast<size_t>(l)].right = m;
    update(l);
    return l;
  }
  const int32_t m = merge(l, nodes_[static_cast<size_t>(r)].left);
  nodes_[static_cast<size_t>(r)].left = m;
  update(r);
  return r;
}

int32_t IntervalIndex::insert(uintptr_t base, uintptr_t end, const void* payload) {
  int32_t i;
  if (!free_.empty()) {
    i = free_.back();
    free_.pop_back();
  } else {
    i = static_cast<int32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  Node& n = nodes_[static_cast<size_t>(i)];
  n = Node{};
  n.base = base;
  n.end = end;
  n.max_end = end;
  n.key2 = reinterpret_cast<uintptr_t>(payload);
  n.payload = payload;
  n.prio = mix(static_cast<uint64_t>(base) ^ mix(static_cast<uint64_t>(n.key2)));
  int32_t l = -1, r = -1;
  split(root_, base, n.key2, false, &l, &r);
  root_ = merge(merge(l, i), r);
  ++size_;
  return i;
}

void IntervalIndex::erase(int32_t node) {
  const Node n = nodes_[static_cast<size_t>(node)];
  int32_t l = -1, mid = -1, r = -1;
  split(root_, n.base, n.key2, false, &l, &r);  // l: keys below the node's
  split(r, n.base, n.key2, true, &mid, &r);     // mid: the node alone
  root_ = merge(l, r);
  nodes_[static_cast<size_t>(node)] = Node{};
  free_.push_back(node);
  --size_;
}

const void* IntervalIndex::find_containing(uintptr_t lo, uintptr_t hi) const {
  int32_t t = root_;
  while (t >= 0) {
    ++steps_;
    const Node& n = nodes_[static_cast<size_t>(t)];
    if (n.base > lo) {  // it and its right subtree start past lo
      t = n.left;
      continue;
    }
    if (n.end >= hi) return n.payload;
    // Its left subtree starts at or before lo: any range there ending at or past hi contains it.
    if (n.left >= 0 && nodes_[static_cast<size_t>(n.left)].max_end >= hi) {
      int32_t s = n.left;
      for (;;) {
        ++steps_;
        const Node& m = nodes_[static_cast<size_t>(s)];
        if (m.left >= 0 && nodes_[static_cast<size_t>(m.left)].max_end >= hi) {
          s = m.left;
        } else if (m.end >= hi) {
          return m.payload;
        } else {
          s = m.right;  // its max_end >= hi, so the right subtree holds one
        }
      }
    }
    t = n.right;
  }
  return nullptr;
}

}  // namespace sluice
