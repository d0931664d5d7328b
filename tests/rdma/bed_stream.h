// The message streams of the two-host failover and standby tests (plugin_failover_*.cc,
// plugin_standby_two_host.cc): host1 sends, host0 receives, kWindow messages in flight, message i
// in slot i % kWindow (or more slots) of kSlot bytes of one registered buffer; 4 KiB .. 4 MiB
// messages, each with a pattern of its own and guard bytes after it, and a last small message (the
// sentinel) that must arrive as itself, so that no message arrived twice.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "plugin_bed.h"

namespace nettest {

inline constexpr int kWindow = 8;
inline constexpr size_t kMinMsg = 4096;
inline constexpr size_t kMaxMsg = size_t{4} << 20;
inline constexpr size_t kSlot = (kMaxMsg + kGuard + 4095) / 4096 * 4096;
inline constexpr size_t kSentinel = 4099;
// rxe sends at most 128 packets past the last ACK on a QP (RXE_MAX_UNACKED_PSNS); until this side
// learns of the peer's fault (one liveness poll) the failed path's QP may still send that window.
inline constexpr long long kSlackPackets = 256;

struct Msg {
  size_t size = 0;
  size_t cap = 0;  // the receiver's posted size
  uint64_t seed = 0;
};

// `count` messages of 4 KiB .. 4 MiB, log-uniform (every size class alike; mean ~0.6 MB), drawn
// from mt19937_64(rng_seed); with first_max the first at 4 MiB (no draw for it); every other
// receive posted at 4 MiB (striped over both paths), the others at their size; then the sentinel.
// Message i's pattern: pattern_seed(size, 100000 x run + i, tag), the sentinel's i 99999.
inline std::vector<Msg> random_msgs(uint64_t rng_seed, int run, int count, int tag,
                                    bool first_max) {
  std::mt19937_64 rng(rng_seed);
  std::uniform_real_distribution<double> u(std::log(double(kMinMsg)), std::log(double(kMaxMsg)));
  std::vector<Msg> v;
  for (int i = 0; i < count; ++i) {
    const size_t s = first_max && i == 0
                         ? kMaxMsg
                         : std::clamp<size_t>(size_t(std::exp(u(rng))), kMinMsg, kMaxMsg);
    v.push_back({s, i % 2 == 0 ? kMaxMsg : s, pattern_seed(s, 100000u * run + i, tag)});
  }
  v.push_back({kSentinel, kSentinel, pattern_seed(kSentinel, 100000u * run + 99999, tag)});
  return v;
}

// Posts message `m` in the slot at `p`: the sender fills it with the message's pattern and sends
// it; the receiver fills the message's size and the guard after it, and the guard after kMaxMsg,
// with the guard byte, and receives into it at the posted size. *req stays null: not now.
inline ncclResult_t post_msg(Net& n, void* comm, bool sender, uint8_t* p, void* mh, const Msg& m,
                             int tag, void** req) {
  if (sender) {
    fill_pattern(p, m.size, m.seed);
    return n.isend(comm, p, m.size, tag, mh, req);
  }
  std::memset(p, kGuardByte, m.size + kGuard);
  std::memset(p + kMaxMsg, kGuardByte, kGuard);
  void* data = p;
  size_t cap = m.cap;
  int t = tag;
  return n.irecv(comm, 1, &data, &cap, &t, &mh, req);
}

// A received slot: the message's pattern over its size, the guard after it and after `max` (the
// stream's largest message, kMaxMsg unless it says otherwise). "" or what is wrong.
inline std::string check_msg(const uint8_t* p, const Msg& m, size_t max = kMaxMsg) {
  std::string bad = check_pattern(p, m.size, m.seed);
  if (bad.empty()) bad = check_fill(p + m.size, kGuard, kGuardByte);
  if (bad.empty()) bad = check_fill(p + max, kGuard, kGuardByte);
  return bad;
}

}  // namespace nettest
