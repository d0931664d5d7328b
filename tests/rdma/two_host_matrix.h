// The data-path correctness matrix between two hosts (plugin_two_host_test.cc), the two-VM
// counterpart of plugin_rdma_test's Transfer, Grouped, InFlight and stress suites: host1 sends,
// host0 receives, each side on its own comm of the same connection; both derive every size, tag
// and pattern from the same formulas, so no side channel is needed between phases. Each phase
// returns "" or what went wrong on this side.
#pragma once

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "plugin_bed.h"

namespace nettest::two_host {

inline std::string ok_or(const ::testing::AssertionResult& r) {
  return r ? std::string() : std::string(r.message());
}

// 1..8 receives grouped in one irecv, distinct tags and sizes, one of them zero bytes (n > 2); the
// sender posts in reverse tag order, so tags, not order, must pick each member's buffer.
inline std::string grouped(Net& n, void* comm, bool sender) {
  constexpr int kMax = 8;
  constexpr size_t kSlot = 40000;
  RegBuf bufs[kMax];
  for (auto& b : bufs)
    if (auto e = ok_or(b.allocate(&n, comm, kSlot + kGuard)); !e.empty()) return e;
  for (int g = 1; g <= kMax; ++g) {
    void* data[kMax];
    void* mhs[kMax];
    size_t caps[kMax];
    int tags[kMax];
    size_t sent[kMax];
    for (int i = 0; i < g; ++i) {
      data[i] = bufs[i].data();
      mhs[i] = bufs[i].mh();
      caps[i] = 4096 * (i + 1) + 17 * i;
      tags[i] = 1000 + 7 * i + g;
      sent[i] = caps[i] - 3 * i;  // member 0: exactly the posted size; the others smaller
      if (i == g - 1 && g > 2) sent[i] = 0;
    }
    const std::string at = "group of " + std::to_string(g) + ": ";
    if (sender) {
      std::vector<void*> reqs(g, nullptr);
      for (int i = g - 1; i >= 0; --i) {
        fill_pattern(bufs[i].data(), sent[i], pattern_seed(sent[i], g, tags[i]));
        auto e = ok_or(post_until("isend", &reqs[i], [&](void** r) {
          return n.isend(comm, bufs[i].data(), sent[i], tags[i], bufs[i].mh(), r);
        }));
        if (!e.empty()) return at + e;
      }
      for (int i = 0; i < g; ++i) {
        int s = -1;
        if (auto e = ok_or(wait_done(n, "send", reqs[i], &s)); !e.empty()) return at + e;
        if (s != static_cast<int>(sent[i]))
          return at + "send " + std::to_string(i) + " reported " + std::to_string(s) + " bytes";
      }
      continue;
    }
    for (int i = 0; i < g; ++i) std::memset(bufs[i].data(), kGuardByte, kSlot + kGuard);
    void* req = nullptr;
    auto e = ok_or(post_until(
        "irecv", &req, [&](void** r) { return n.irecv(comm, g, data, caps, tags, mhs, r); }));
    if (!e.empty()) return at + e;
    int sizes[NCCL_NET_MAX_REQUESTS];
    for (int& s : sizes) s = -1;
    if (e = ok_or(wait_done(n, "grouped recv", req, sizes)); !e.empty()) return at + e;
    for (int i = 0; i < g; ++i) {
      const std::string m =
          at + "member " + std::to_string(i) + " (tag " + std::to_string(tags[i]) + "): ";
      if (sizes[i] != static_cast<int>(sent[i]))
        return m + "received " + std::to_string(sizes[i]) + " of " + std::to_string(sent[i]);
      if (e = check_pattern(bufs[i].data(), sent[i], pattern_seed(sent[i], g, tags[i])); !e.empty())
        return m + e;
      if (e = check_fill(bufs[i].data() + sent[i], kSlot + kGuard - sent[i], kGuardByte);
          !e.empty())
        return m + e;
    }
    if (sizes[g] != -1) return at + "test wrote a size past the group's " + std::to_string(g);
  }
  return {};
}

// NCCL_NET_MAX_REQUESTS (32) requests outstanding on each side before any completes; completed in
// reverse order of posting.
inline std::string in_flight(Net& n, void* comm, bool sender) {
  constexpr int kN = NCCL_NET_MAX_REQUESTS;
  constexpr size_t kSlot = 16384;
  RegBuf b;
  if (auto e = ok_or(b.allocate(&n, comm, kN * kSlot)); !e.empty()) return e;
  if (!sender) std::memset(b.data(), kGuardByte, kN * kSlot);
  std::vector<void*> reqs(kN, nullptr);
  auto size_of = [](int i) { return (static_cast<size_t>(i) * 517 + 1) % kSlot; };
  for (int i = 0; i < kN; ++i) {
    uint8_t* p = b.data() + i * kSlot;
    const size_t size = size_of(i);
    void* mh = b.mh();
    std::string e;
    if (sender) {
      fill_pattern(p, size, pattern_seed(size, i, 77));
      e = ok_or(post_until("isend", &reqs[i],
                           [&](void** r) { return n.isend(comm, p, size, i, mh, r); }));
    } else {
      void* data = p;
      size_t cap = kSlot;
      int tag = i;
      e = ok_or(post_until("irecv", &reqs[i],
                           [&](void** r) { return n.irecv(comm, 1, &data, &cap, &tag, &mh, r); }));
    }
    if (!e.empty()) return "request " + std::to_string(i) + ": " + e;
  }
  for (int i = kN - 1; i >= 0; --i) {
    int s = -1;
    auto e = ok_or(wait_done(n, sender ? "send" : "recv", reqs[i], &s));
    if (!e.empty()) return "request " + std::to_string(i) + ": " + e;
    const size_t size = size_of(i);
    if (s != static_cast<int>(size))
      return "request " + std::to_string(i) + " reported " + std::to_string(s) + " bytes";
    if (!sender) {
      if (e = check_pattern(b.data() + i * kSlot, size, pattern_seed(size, i, 77)); !e.empty())
        return "receive " + std::to_string(i) + ": " + e;
      if (e = check_fill(b.data() + i * kSlot + size, kSlot - size, kGuardByte); !e.empty())
        return "receive " + std::to_string(i) + ": " + e;
    }
  }
  return {};
}

// `count` messages of random size (0..16 KiB, from a seed both sides share), a window of 32 in
// flight on each side, every byte verified. Returns "" and the bytes moved in *bytes.
inline std::string stream(Net& n, void* comm, bool sender, int count, uint64_t seed,
                          size_t* bytes) {
  constexpr int kWindow = NCCL_NET_MAX_REQUESTS;
  constexpr size_t kMax = 16384;
  RegBuf b;
  if (auto e = ok_or(b.allocate(&n, comm, kWindow * kMax)); !e.empty()) return e;
  std::mt19937_64 rng(seed);
  std::vector<size_t> sizes(count);
  for (auto& s : sizes) {
    const bool tiny = rng() % 4 == 0;  // a quarter of them 0..63 bytes
    s = rng() % (tiny ? 64 : kMax + 1);
  }
  std::vector<void*> reqs(kWindow, nullptr);
  int posted = 0, done = 0;
  *bytes = 0;
  const auto deadline = Clock::now() + wait_limit();
  while (done < count) {
    if (Clock::now() > deadline)
      return std::to_string(done) + " of " + std::to_string(count) + " messages done in " +
             std::to_string(wait_limit().count()) + " ms";
    // Post into free slots (slot = message % window; the oldest outstanding is `done`).
    while (posted < count && posted - done < kWindow) {
      const int slot = posted % kWindow;
      uint8_t* p = b.data() + slot * kMax;
      void* mh = b.mh();
      const size_t size = sizes[posted];
      void* req = nullptr;
      ncclResult_t r;
      if (sender) {
        fill_pattern(p, size, pattern_seed(size, posted, 5));
        r = n.isend(comm, p, size, 5, mh, &req);
      } else {
        void* data = p;
        size_t cap = kMax;
        int tag = 5;
        r = n.irecv(comm, 1, &data, &cap, &tag, &mh, &req);
      }
      if (r != ncclSuccess)
        return std::string(sender ? "isend" : "irecv") + " of message " + std::to_string(posted) +
               " returned " + std::to_string(r) + ": " + last_warn();
      if (req == nullptr) break;  // not now: test what is outstanding first
      reqs[slot] = req;
      ++posted;
    }
    if (done == posted) continue;
    const int slot = done % kWindow;
    int finished = 0;
    int s = -1;
    ncclResult_t r = n.test(reqs[slot], &finished, &s);
    if (r != ncclSuccess)
      return "test of message " + std::to_string(done) + " returned " + std::to_string(r) + ": " +
             last_warn();
    if (!finished) continue;
    const size_t size = sizes[done];
    if (s != static_cast<int>(size))
      return "message " + std::to_string(done) + " reported " + std::to_string(s) + " of " +
             std::to_string(size) + " bytes";
    if (!sender) {
      auto e = check_pattern(b.data() + slot * kMax, size, pattern_seed(size, done, 5));
      if (!e.empty()) return "message " + std::to_string(done) + ": " + e;
    }
    *bytes += size;
    ++done;
  }
  return {};
}

// A message larger than the posted buffer: both sides fail with a WARN, nothing lands past the
// posted size. The comm is unusable afterwards (the caller closes it and accepts an error there).
inline std::string oversize(Net& n, void* comm, bool sender) {
  constexpr size_t kPosted = 4096;
  constexpr size_t kSent = 8192;
  RegBuf b;
  if (auto e = ok_or(b.allocate(&n, comm, kSent + kGuard)); !e.empty()) return e;
  sluice::rdmatest::ExpectWarns expected;
  const int warns_before = g_warns.load();
  void* req = nullptr;
  ncclResult_t err = ncclSuccess;
  const auto deadline = Clock::now() + wait_limit();
  if (sender) {
    fill_pattern(b.data(), kSent, 9);
    while (req == nullptr && err == ncclSuccess) {  // may fail at isend: it knows the posted size
      err = n.isend(comm, b.data(), kSent, 3, b.mh(), &req);
      if (Clock::now() > deadline) return "isend neither posted nor failed";
      if (req == nullptr) usleep(50);
    }
  } else {
    std::memset(b.data(), kGuardByte, kSent + kGuard);
    void* data = b.data();
    void* mh = b.mh();
    size_t cap = kPosted;
    int tag = 3;
    auto e = ok_or(post_until(
        "irecv", &req, [&](void** r) { return n.irecv(comm, 1, &data, &cap, &tag, &mh, r); }));
    if (!e.empty()) return e;
  }
  while (err == ncclSuccess) {
    if (Clock::now() > deadline)
      return std::string(sender ? "sender" : "receiver") + ": no error within " +
             std::to_string(wait_limit().count()) + " ms";
    int done = 0;
    err = n.test(req, &done, nullptr);
    if (err == ncclSuccess && done)
      return std::string(sender ? "an oversize send" : "an oversize receive") +
             " completed successfully";
  }
  if (g_warns.load() == warns_before) return "the failure was not WARNed";
  if (!sender) {
    auto e = check_fill(b.data() + kPosted, kSent - kPosted + kGuard, kGuardByte);
    if (!e.empty()) return "written past the posted buffer: " + e;
  }
  std::fprintf(stderr, "host%d: oversize message failed as it should: %s\n", sender ? 1 : 0,
               last_warn().c_str());
  return {};
}

}  // namespace nettest::two_host
