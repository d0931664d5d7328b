// plugin_failover_two_host's paced stream (plugin_failover_harness.h): faults at times, not at
// message counts, for the flaps and the fence check; messages chosen by index (msg_at), and the
// fence check's count of late bytes in whole receive buffers (wrong_bytes).
#include <poll.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "plugin_failover_harness.h"

namespace nettest::failover {

Msg msg_at(int step, int i, int end) {
  if (i == end)
    return {kSentinel, kSentinel, pattern_seed(kSentinel, 100000u * step + 99999, kTag)};
  const double u =
      double(pattern_word(0x5eed0000u + static_cast<uint64_t>(step), size_t(i)) >> 11) * 0x1.0p-53;
  const size_t max = g_max_msg;
  const double lo = std::log(double(kMinMsg)), hi = std::log(double(max));
  const size_t s =
      i == 0 ? max : std::clamp<size_t>(size_t(std::exp(lo + u * (hi - lo))), kMinMsg, max);
  return {s, i % 2 == 0 ? max : s, pattern_seed(s, 100000u * step + uint64_t(i), kTag)};
}

// Bytes of a receive buffer (slot_bytes()) that are not what message `index` left there: its
// pattern over its size, the guard byte over all the rest (the guard after its size, the rest of
// its posted size, the slot's tail). The first is described in *first (if empty): where, and
// whether it is a byte of an older message of the same buffer.
long long wrong_bytes(const uint8_t* p, int step, int index, const Msg& m, int nslots,
                      const char* when, std::string* first) {
  long long n = 0;
  size_t at = SIZE_MAX;
  for (size_t w = 0; w * 8 < m.size; ++w) {
    const uint64_t v = pattern_word(m.seed, w);
    const size_t len = std::min<size_t>(8, m.size - w * 8);
    if (std::memcmp(p + w * 8, &v, len) == 0) continue;
    for (size_t i = 0; i < len; ++i) {
      if (p[w * 8 + i] != reinterpret_cast<const uint8_t*>(&v)[i]) {
        ++n;
        at = std::min(at, w * 8 + i);
      }
    }
  }
  static const std::vector<uint8_t> fill(65536, kGuardByte);
  const size_t slot = slot_bytes();
  for (size_t o = m.size; o < slot; o += fill.size()) {
    const size_t len = std::min(fill.size(), slot - o);
    if (std::memcmp(p + o, fill.data(), len) == 0) continue;
    for (size_t i = 0; i < len; ++i) {
      if (p[o + i] != kGuardByte) {
        ++n;
        at = std::min(at, o + i);
      }
    }
  }
  if (n == 0 || !first->empty()) return n;
  std::string whose = at < m.size ? "not its pattern" : "past its size, not the guard byte";
  for (int k = index - nslots; k >= 0 && k >= index - 4 * nslots; k -= nslots) {
    const Msg o = msg_at(step, k, -1);
    if (at >= o.size) continue;
    const uint64_t v = pattern_word(o.seed, at / 8);
    if (p[at] == reinterpret_cast<const uint8_t*>(&v)[at % 8]) {
      whose = "a byte of message " + std::to_string(k) + ", an older receive into this buffer";
      break;
    }
  }
  char b[320];
  std::snprintf(b, sizeof b,
                "message %d (%zu bytes, posted at %zu, buffer %d) %s: %lld wrong bytes, the first "
                "at offset %zu is 0x%02x (%s)",
                index, m.size, m.cap, index % nslots, when, n, at, p[at], whose.c_str());
  *first = b;
  return n;
}

std::string paced_stream(Ctx& x, void* comm, RegBuf& buf, int step, int nslots, bool thorough,
                         const std::vector<Event>& ev, Flow* flow,
                         const std::function<void()>& at_fence,
                         const std::function<void(size_t)>& at_phase) {
  const bool sender = x.host == 1;
  std::vector<void*> reqs(kWindow, nullptr);
  std::vector<int> slot_msg(nslots, -1);  // thorough: the message a buffer holds, to check again
  int posted = 0, done = 0, prepared = -1;
  int total = -1;            // the sentinel's index + 1, once the end is known
  int post_limit = INT_MAX;  // the end's actor, until the other host acknowledged it
  bool await_ack = false;
  size_t next = 0;  // the next event, to do or to be told of
  size_t bytes = 0;
  size_t info_at = info_size();
  bool fence_seen = false;
  std::future<std::string> pending;  // an async act in flight
  size_t watched = SIZE_MAX;         // the phase watching member 1 (watching())
  char peer_word = 0;                // the other host's word for this host's next event (peer_full)
  bool word_sent = false;            // this host's word for the other host's next event (peer_full)
  const size_t stride = slot_bytes();
  auto slot = [&](int i) { return buf.data() + size_t(i % nslots) * stride; };
  auto mark = [&](Mark& m, bool fresh) {
    m.t = Clock::now();
    m.done = done;
    m.posted = posted;
    m.bytes = bytes;
    m.c = counters(x, fresh);
    m.set = true;
  };
  auto begin_phase = [&](const Event& e) {
    PhaseStat p;
    p.name = e.name;
    p.watch_back = e.watch_back;
    p.member = e.watch_member;
    p.carry_window = e.carry_window;
    mark(p.start, false);
    if (p.watch_back) {
      p.base1 = member_packets(x, p.member);
      // A told host may have seen "back" before the side byte of the link's return.
      for (const Seen& s : flow->seen)
        if (s.what == kBack && s.t >= flow->ph.back().start.t) p.back_posted = p.start.posted;
    }
    flow->ph.push_back(p);
    if (p.watch_back) watched = flow->ph.size() - 1;
    ++next;
    peer_word = 0;
    word_sent = false;
    if (at_phase) at_phase(flow->ph.size() - 1);
  };
  auto where = [&] { return " (" + flow->ph.back().name + ")"; };
  // The last phase that watches member 1 come back, until its counter rose and its window of
  // messages after "back" completed: past the phase's end too (the other host ends it, maybe
  // before this host's window completed), measured from its start.
  auto watching = [&]() -> PhaseStat* {
    if (watched >= flow->ph.size()) return nullptr;
    PhaseStat& w = flow->ph[watched];
    return w.carries_ms >= 0 && w.window_ms >= 0 ? nullptr : &w;
  };
  // The side socket: the other host's events and the end's acknowledgement.
  auto poll_side = [&]() -> std::string {
    for (;;) {
      const bool told = next < ev.size() && ev[next].actor != x.host;
      if (!told && !await_ack) return {};
      pollfd q{x.side, POLLIN, 0};
      if (poll(&q, 1, 0) != 1) return {};
      char b = 0;
      if (!read_full(x.side, &b, 1, wait_limit())) return "side read";
      if (await_ack) {
        if (b != 'z') return std::string("unexpected side byte '") + b + "' (want the end's 'z')";
        await_ack = false;
        post_limit = INT_MAX;
        continue;
      }
      const Event& e = ev[next];
      const char want = static_cast<char>('A' + next);
      if (b != want) return std::string("unexpected side byte '") + b + "', want '" + want + "'";
      if (e.end) {
        uint32_t end = 0;
        if (!read_full(x.side, &end, sizeof end, wait_limit())) return "side read of the end";
        if (posted > static_cast<int>(end))
          return "posted " + std::to_string(posted) + " messages, past the end at " +
                 std::to_string(end);
        total = static_cast<int>(end) + 1;
        const char ack = 'z';
        if (!write_full(x.side, &ack, 1)) return "side write";
      }
      begin_phase(e);
    }
  };
  flow->ph.push_back({});
  flow->ph[0].name = "before";
  mark(flow->ph[0].start, true);
  auto last = Clock::now();
  auto next_side = last, next_info = last, next_count = last;
  while (total < 0 || done < total) {
    auto now = Clock::now();
    if (now - last > wait_limit())
      return std::to_string(done) + " messages done; none for " +
             std::to_string(wait_limit().count()) + " ms" + where();
    while (posted - done < kWindow && posted < post_limit && (total < 0 || posted < total)) {
      if (std::string e = poll_side(); !e.empty()) return e;  // an end told lowers total
      if (total >= 0 && posted >= total) break;
      const Msg m = msg_at(step, posted, total - 1);
      uint8_t* p = slot(posted);
      void* mh = buf.mh();
      void* req = nullptr;
      ncclResult_t r;
      if (sender) {
        fill_pattern(p, m.size, m.seed);
        r = x.n.isend(comm, p, m.size, kTag, mh, &req);
      } else {
        if (prepared != posted) {  // once per message, even when the post must be retried
          prepared = posted;
          const int s = posted % nslots;
          if (thorough) {
            if (slot_msg[s] >= 0) {  // completed kWindow or more completions ago: still intact?
              const int o = slot_msg[s];
              flow->late_bytes += wrong_bytes(p, step, o, msg_at(step, o, -1), nslots,
                                              "before its buffer was re-posted", &flow->late_first);
              ++flow->reposted;
              slot_msg[s] = -1;
            }
            std::memset(p, kGuardByte, stride);
          } else {
            std::memset(p, kGuardByte, m.size + kGuard);
            std::memset(p + g_max_msg, kGuardByte, kGuard);
          }
        }
        void* data = p;
        size_t cap = m.cap;
        int tag = kTag;
        r = x.n.irecv(comm, 1, &data, &cap, &tag, &mh, &req);
      }
      if (r != ncclSuccess)
        return std::string(sender ? "isend" : "irecv") + " of message " + std::to_string(posted) +
               where() + " returned " + std::to_string(r) + ": " + last_warn();
      if (req == nullptr) break;  // not now
      reqs[posted % kWindow] = req;
      if (thorough && !sender) slot_msg[posted % nslots] = posted;
      ++posted;
    }
    if (done < posted) {
      int finished = 0, got = -1;
      const ncclResult_t r = x.n.test(reqs[done % kWindow], &finished, &got);
      if (r != ncclSuccess)
        return "test of message " + std::to_string(done) + where() + " returned " +
               std::to_string(r) + ": " + last_warn();
      if (finished) {
        const Msg m = msg_at(step, done, total - 1);
        if (got != static_cast<int>(m.size))
          return "message " + std::to_string(done) + where() + " reported " + std::to_string(got) +
                 " of " + std::to_string(m.size) + " bytes";
        if (!sender) {
          const uint8_t* p = slot(done);
          if (thorough) {
            flow->late_bytes +=
                wrong_bytes(p, step, done, m, nslots, "at its completion", &flow->late_first);
          } else if (const std::string bad = check_msg(p, m, g_max_msg); !bad.empty()) {
            return "message " + std::to_string(done) + " (" + std::to_string(m.size) + " bytes)" +
                   where() + ": " + bad;
          }
        }
        const auto t = Clock::now();
        PhaseStat& ph = flow->ph.back();
        if (PhaseStat* w = watching(); w != nullptr && w->back_posted >= 0 && w->window_ms < 0 &&
                                       done >= w->back_posted + kCarryWindow)
          w->window_ms = ms_between(w->start.t, t);
        if (done == 0) last = t;  // the first message's wait is the connection's warm-up
        if (ms_between(last, t) > ph.max_gap_ms) {
          ph.max_gap_ms = ms_between(last, t);
          ph.gap_to = done;
          ph.gap_end_ms = ms_between(ph.start.t, t);
        }
        ++ph.done;
        if (done > 0) flow->completions.push_back(t);  // message 0's: the warm-up's end
        last = t;
        bytes += m.size;
        ++done;
      }
    }
    now = Clock::now();
    if (now >= next_info) {  // the plugin's transitions, when they were logged
      next_info = now + milliseconds(10);
      bool fenced_now = false;
      {
        std::lock_guard<std::mutex> lk(g_info_mu);
        for (; info_at < g_info.size(); ++info_at) {
          if (is_transition(g_info[info_at])) flow->logged.push_back({now, info_at});
          for (const char* t : {kFailedOver, kFenced, kBack, kBackFull}) {
            if (!contains(g_info[info_at], t)) continue;
            flow->seen.push_back({t, now});
            if (PhaseStat* w = watching(); t == kBack && w != nullptr && w->back_posted < 0)
              w->back_posted = posted;
            if (t == kFenced && !fence_seen) fence_seen = fenced_now = true;
            break;
          }
        }
      }
      if (fenced_now && at_fence) at_fence();
    }
    if (PhaseStat* w = watching(); w != nullptr && w->carries_ms < 0 && now >= next_count) {
      next_count = now + milliseconds(20);
      if (member_packets(x, w->member) - w->base1 >= kCarryPackets)
        w->carries_ms = ms_between(w->start.t, now);
    }
    if (next < ev.size() && ev[next].actor == x.host) {
      const Event& e = ev[next];
      const auto prev = flow->ph.back().start.t;
      const long long el = ms_between(prev, now);
      if (e.peer_full && peer_word == 0 && now >= next_side) {  // the other host's word
        next_side = now + milliseconds(5);
        pollfd q{x.side, POLLIN, 0};
        if (poll(&q, 1, 0) == 1) {
          if (!read_full(x.side, &peer_word, 1, wait_limit())) return "side read";
          if (peer_word != 'F' && peer_word != 'N')
            return std::string("unexpected side byte '") + peer_word +
                   "' (want the other host's word on \"" + kBackFull + "\")";
        }
      }
      bool due = el >= e.after_ms && (!e.peer_full || peer_word != 0);
      if (due && e.until_full) {  // and a window of messages served after "back"
        const long long full = flow->first_ms(kBackFull, prev, now + milliseconds(1), 0);
        due = (full >= 0 && el - full >= e.hold_ms &&
               (!flow->ph.back().watch_back ||
                (flow->ph.back().carry_window ? flow->ph.back().window_ms >= 0
                                              : flow->ph.back().carries_ms >= 0))) ||
              el >= e.max_ms;
      }
      const Mark& since = flow->ph.back().start;
      if (due && done < (e.past_posted ? since.posted : since.done) + e.min_done)
        due = el >= e.max_ms;
      if (due && e.from_fence) {  // min_done completions since "fenced on both sides" here
        const long long f = flow->first_ms(kFenced, prev, now + milliseconds(1), 0);
        int n = 0;
        if (f >= 0)
          for (auto it = flow->completions.rbegin();
               it != flow->completions.rend() && *it >= prev + milliseconds(f); ++it)
            ++n;
        if (f < 0 || n < e.min_done) due = el >= e.max_ms;
      }
      bool fire = false;
      if (pending.valid()) {  // an act in its own thread: the event when it is done
        due = false;
        if (pending.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
          if (std::string err = pending.get(); !err.empty()) return "at '" + e.name + "': " + err;
          fire = true;
        }
      }
      if (due && e.act && e.async) {
        pending = std::async(std::launch::async, e.act);
      } else if (due) {
        if (e.act) {
          if (std::string err = e.act(); !err.empty()) return "at '" + e.name + "': " + err;
        }
        fire = true;
      }
      if (fire) {
        const char b = static_cast<char>('A' + next);
        if (!write_full(x.side, &b, 1)) return "side write";
        if (e.end) {
          const uint32_t end = static_cast<uint32_t>(posted + kEndAhead * kWindow);
          if (!write_full(x.side, &end, sizeof end)) return "side write";
          total = static_cast<int>(end) + 1;
          post_limit = posted + kWindow;
          await_ack = true;
        }
        begin_phase(e);
      }
    } else {
      // The other host's next event waits for this host's word on its "back in full" (seen since
      // the phase began, or just before: a told host may log it before the side byte arrives).
      if (next < ev.size() && ev[next].peer_full && !word_sent) {
        const Event& e = ev[next];
        const auto from = flow->ph.back().start.t;
        const bool full = flow->first_ms(kBackFull, from, now + milliseconds(1), 250) >= 0;
        if (full || ms_between(from, now) >= e.max_ms) {
          const char w = full ? 'F' : 'N';
          if (!write_full(x.side, &w, 1)) return "side write";
          word_sent = true;
        }
      }
      if (now >= next_side) {  // told events, the end's acknowledgement
        next_side = now + milliseconds(5);
        if (std::string e = poll_side(); !e.empty()) return e;
      }
    }
  }
  if (await_ack) {  // all done before the other host's acknowledgement of the end arrived
    char b = 0;
    if (!read_full(x.side, &b, 1, wait_limit()) || b != 'z') return "no acknowledgement of the end";
  }
  if (next != ev.size()) return "the stream ended before its last event";
  flow->info_end = info_at;
  mark(flow->end, true);
  if (thorough && !sender) {
    for (int s = 0; s < nslots; ++s) {
      if (slot_msg[s] < 0) continue;
      flow->late_bytes +=
          wrong_bytes(slot(slot_msg[s]), step, slot_msg[s], msg_at(step, slot_msg[s], total - 1),
                      nslots, "at the end of the run", &flow->late_first);
    }
  }
  return {};
}

}  // namespace nettest::failover
