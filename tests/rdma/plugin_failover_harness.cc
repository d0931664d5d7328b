// plugin_failover_two_host's harness (plugin_failover_harness.h): the fused device, the plain
// stream and its marks, and the lines the streams print.
#include "plugin_failover_harness.h"

#include <poll.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace nettest::failover {

void print_transitions(const char* step, size_t from) {
  std::lock_guard<std::mutex> lk(g_info_mu);
  for (size_t i = from; i < g_info.size(); ++i)
    if (is_transition(g_info[i]))
      std::fprintf(stderr, "host%d: [%s] plugin INFO: %s\n", g_host, step, g_info[i].c_str());
}

std::string logged_transitions(size_t from) {
  for (const char* t : {kFailedOver, kFenced})
    if (info_with(from, t).empty()) return "no INFO line with \"" + std::string(t) + "\"";
  return {};
}

std::string fuse(Ctx& x) {
  int nd = 0;
  if (x.n.devices(&nd) != ncclSuccess) return "devices";
  std::vector<int> phys;
  std::vector<Props> props(nd);
  for (int d = 0; d < nd; ++d) {
    if (x.n.properties(d, &props[d]) != ncclSuccess) return "getProperties";
    if (props[d].vndevs == 1 && props[d].vdevs == std::vector<int>{d}) phys.push_back(d);
  }
  if (phys.size() != 2) return std::to_string(phys.size()) + " physical devices (want the bed's 2)";
  if (x.n.make_vdevice({phys[0], phys[1]}, &x.vdev) != ncclSuccess)
    return "makeVDevice: " + last_warn();
  for (int i = 0; i < 2; ++i) {
    const Props& p = props[phys[i]];
    const std::string nd_name = read_line(port_dir(p) + "gid_attrs/ndevs/0");
    const int which = nd_name == "eth1" ? 1 : nd_name == "eth0" ? 0 : -1;
    if (which < 0) return p.name + " is on '" + nd_name + "', not eth0 or eth1";
    x.m[which] = p;
    x.path[which] = i;
    x.netdev[which] = nd_name;
  }
  if (x.path[0] < 0 || x.path[1] < 0) return "the two devices are not one on eth0, one on eth1";
  Props v;
  if (x.n.properties(x.vdev, &v) != ncclSuccess) return "getProperties of the fused device";
  x.fused = v.name;
  std::fprintf(stderr, "host%d: fused device %d %s: path %d %s (eth0), path %d %s (eth1)\n", x.host,
               x.vdev, v.name.c_str(), x.path[0], x.m[0].name.c_str(), x.path[1],
               x.m[1].name.c_str());
  return {};
}

std::vector<Msg> fixed_msgs(int step, const std::vector<size_t>& sizes, bool striped) {
  std::vector<Msg> v;
  for (size_t i = 0; i < sizes.size(); ++i)
    v.push_back({sizes[i], striped || i % 2 == 0 ? kMaxMsg : sizes[i],
                 pattern_seed(sizes[i], 100000u * step + 50000 + i, kTag)});
  return v;
}

std::string stream(Ctx& x, void* comm, RegBuf& buf, const std::vector<Msg>& msgs, const Fault& f,
                   bool until_error, Run* run) {
  const bool sender = x.host == 1;
  const bool actor = f.actor == x.host;
  const bool told = f.actor >= 0 && !actor;
  const size_t info0 = info_size();
  const int total = static_cast<int>(msgs.size());
  std::vector<void*> reqs(kWindow, nullptr);
  int posted = 0, done = 0;
  size_t bytes = 0;
  auto mark = [&](int k) {
    Mark& m = run->mark[k];
    m.t = Clock::now();
    m.done = done;
    m.bytes = bytes;
    m.c = counters(x);
    m.set = true;
  };
  auto phase = [&] { return run->mark[kRestore].set ? 2 : run->mark[kFault].set ? 1 : 0; };
  auto where = [&] {
    return f.actor < 0 ? std::string() : std::string(" (") + kPhase[phase()] + ")";
  };
  mark(kStart);
  auto last = Clock::now();
  auto next_side_poll = last, next_info_poll = last;
  while (done < total) {
    const auto now = Clock::now();
    if (now - last > wait_limit())
      return std::to_string(done) + " of " + std::to_string(total) + " messages done; none for " +
             std::to_string(wait_limit().count()) + " ms" + where();
    while (posted < total && posted - done < kWindow) {
      const Msg& m = msgs[posted];
      uint8_t* p = buf.data() + (posted % kWindow) * kSlot;
      void* req = nullptr;
      const ncclResult_t r = post_msg(x.n, comm, sender, p, buf.mh(), m, kTag, &req);
      if (r != ncclSuccess) {
        const std::string e = std::string(sender ? "isend" : "irecv") + " of message " +
                              std::to_string(posted) + " returned " + std::to_string(r) + ": " +
                              last_warn();
        if (!until_error) return e;
        run->comm_failed = true;
        run->comm_error = e;
        run->failed_at = Clock::now();
        return {};
      }
      if (req == nullptr) break;  // not now
      reqs[posted % kWindow] = req;
      ++posted;
    }
    if (done < posted) {
      int finished = 0, got = -1;
      const ncclResult_t r = x.n.test(reqs[done % kWindow], &finished, &got);
      if (r != ncclSuccess) {
        const std::string e = "test of message " + std::to_string(done) + where() + " returned " +
                              std::to_string(r) + ": " + last_warn();
        if (!until_error) return e;
        run->comm_failed = true;
        run->comm_error = e;
        run->failed_at = Clock::now();
        return {};
      }
      if (finished) {
        const Msg& m = msgs[done];
        if (got != static_cast<int>(m.size))
          return "message " + std::to_string(done) + " reported " + std::to_string(got) + " of " +
                 std::to_string(m.size) + " bytes";
        if (!sender) {
          const uint8_t* p = buf.data() + (done % kWindow) * kSlot;
          if (const std::string bad = check_msg(p, m); !bad.empty())
            return "message " + std::to_string(done) + " (" + std::to_string(m.size) + " bytes)" +
                   where() + ": " + bad;
        }
        const auto t = Clock::now();
        const int ph = phase();
        run->max_gap_ms[ph] = std::max(run->max_gap_ms[ph], ms_between(last, t));
        ++run->done_in[ph];
        if (ph >= 1 && run->first_after_fault_ms < 0)
          run->first_after_fault_ms = ms_between(run->mark[kFault].t, t);
        last = t;
        bytes += m.size;
        ++done;
      }
    }
    if (now >= next_info_poll) {  // when the plugin logged its transitions
      next_info_poll = now + milliseconds(10);
      if (!run->seen_failed_over && !info_with(info0, kFailedOver).empty()) {
        run->seen_failed_over = true;
        run->failed_over_at = now;
      }
      if (!run->seen_fenced && !info_with(info0, kFenced).empty()) {
        run->seen_fenced = true;
        run->fenced_at = now;
      }
    }
    if (actor && !run->mark[kFault].set && done >= f.inject_at) {
      const char b = 'D';
      if (f.tell_first && !write_full(x.side, &b, 1)) return "side write";
      if (std::string e = f.inject(); !e.empty()) return "injecting the fault: " + e;
      mark(kFault);
      if (!f.tell_first && !write_full(x.side, &b, 1)) return "side write";
    } else if (actor && run->mark[kFault].set && !run->mark[kRestore].set && f.restore_at >= 0 &&
               done >= f.restore_at) {
      if (f.restore) {
        if (std::string e = f.restore(); !e.empty()) return "restoring: " + e;
      }
      mark(kRestore);
      const char b = 'U';
      if (!write_full(x.side, &b, 1)) return "side write";
    } else if (told && now >= next_side_poll &&
               (!run->mark[kFault].set || (f.restore_at >= 0 && !run->mark[kRestore].set))) {
      next_side_poll = now + milliseconds(5);
      pollfd q{x.side, POLLIN, 0};
      if (poll(&q, 1, 0) == 1) {
        char b = 0;
        if (!read_full(x.side, &b, 1, wait_limit())) return "side read";
        if (b != (run->mark[kFault].set ? 'U' : 'D'))
          return std::string("unexpected side byte '") + b + "'";
        const bool fault = !run->mark[kFault].set;
        mark(fault ? kFault : kRestore);
        if (fault && f.on_told) f.on_told();
      }
    }
  }
  mark(kEnd);
  return {};
}

std::string catch_up(Ctx& x, const Fault& f, Run* run) {
  if (f.actor < 0 || f.actor == x.host) return {};
  for (int k : {kFault, kRestore}) {
    if (run->mark[k].set || (k == kRestore && f.restore_at < 0)) continue;
    char b = 0;
    if (!read_full(x.side, &b, 1, wait_limit()) || b != (k == kFault ? 'D' : 'U'))
      return "the peer's side byte for the " + std::string(k == kFault ? "fault" : "restore");
    run->mark[k] = run->mark[kEnd];
    run->mark[k].t = Clock::now();
  }
  return {};
}

void print_run(const Ctx& x, const char* step, const Run& r, const char* names[3]) {
  for (int ph = 0; ph < 3; ++ph) {
    const Mark& a = r.mark[ph == 0 ? kStart : ph == 1 ? kFault : kRestore];
    const Mark& b = r.mark[ph == 0 ? kFault : ph == 1 ? kRestore : kEnd];
    if (!a.set || !b.set) continue;
    const double s = std::max(1e-3, std::chrono::duration<double>(b.t - a.t).count());
    std::fprintf(stderr,
                 "host%d: [%s] %-7s %4d messages, %6.1f MB in %5.1f s (%.2f MB/s), longest wait "
                 "%lld ms; packets sent %s %lld, %s %lld; received %s %lld, %s %lld\n",
                 x.host, step, names[ph], b.done - a.done, double(b.bytes - a.bytes) / 1e6, s,
                 double(b.bytes - a.bytes) / 1e6 / s, r.max_gap_ms[ph], x.m[0].name.c_str(),
                 delta(a, b, true, 0), x.m[1].name.c_str(), delta(a, b, true, 1),
                 x.m[0].name.c_str(), delta(a, b, false, 0), x.m[1].name.c_str(),
                 delta(a, b, false, 1));
  }
}

std::string both_carried(const Ctx& x, const Mark& a, const Mark& b) {
  const long long k = delta(a, b, true, 0), f = delta(a, b, true, 1);
  if (k < 0 || f < 0 || a.c.sent[0] < 0 || a.c.sent[1] < 0) return "cannot read the counters";
  if (k + f <= 0 || k * 10 < k + f || f * 10 < k + f)
    return "a new connection did not use both members: sent " + x.m[0].name + " " +
           std::to_string(k) + ", " + x.m[1].name + " " + std::to_string(f) + " packets";
  return {};
}

long long silent_detect_ms() {
  const long t = env_long("NCCL_IB_TIMEOUT", 20), rc = env_long("NCCL_IB_RETRY_CNT", 7);
  const double rc_ms = 4.096e-3 * std::pow(2.0, double(t)) * double(rc + 1);
  if (rc < 7) return static_cast<long long>(rc_ms) + 1;
  const long knob = env_long("SLUICE_PROGRESS_TIMEOUT_MS", 0);
  return (knob > 0 ? knob : static_cast<long long>(rc_ms * 1.5) + 1000) + 10000;
}

Losses losses(const Ctx& x) {
  Losses l;
  for (int i = 0; i < 2; ++i) {
    const int port = x.m[i].port > 0 ? x.m[i].port : 1;
    for (int k = 0; k < kLosses; ++k) {
      const std::string f = std::string("hw_counters/") + kLossNames[k];
      l.v[i][k] = device_port_counter(x.m[i].name, port, {f.c_str()});
    }
  }
  return l;
}
void print_losses(const Ctx& x, const char* step, const Losses& a, const Losses& b) {
  std::string t;
  for (int i = 0; i < 2; ++i) {
    t += (i ? "; " : "") + x.m[i].name;
    for (int k = 0; k < kLosses; ++k)
      t += std::string(k ? "," : "") + " " + kLossNames[k] + " +" +
           std::to_string(b.v[i][k] - a.v[i][k]);
  }
  std::fprintf(stderr, "host%d: [%s] rxe loss counters over the stream: %s\n", x.host, step,
               t.c_str());
}

void print_timeline(const char* step, const Flow& f) {
  const auto t0 = f.ph[0].start.t;
  size_t k = 0;
  std::lock_guard<std::mutex> lk(g_info_mu);
  for (size_t p = 0; p < f.ph.size(); ++p) {
    for (; k < f.logged.size() && f.logged[k].first < f.ph[p].start.t; ++k)
      std::fprintf(stderr, "host%d: [%s] +%6lld ms plugin INFO: %s\n", g_host, step,
                   ms_between(t0, f.logged[k].first), g_info[f.logged[k].second].c_str());
    std::fprintf(stderr, "host%d: [%s] +%6lld ms ---- %s (%d done, %d posted)\n", g_host, step,
                 ms_between(t0, f.ph[p].start.t), f.ph[p].name.c_str(), f.ph[p].start.done,
                 f.ph[p].start.posted);
  }
  for (; k < f.logged.size(); ++k)
    std::fprintf(stderr, "host%d: [%s] +%6lld ms plugin INFO: %s\n", g_host, step,
                 ms_between(t0, f.logged[k].first), g_info[f.logged[k].second].c_str());
  for (size_t i = f.info_end; i < g_info.size(); ++i)
    if (is_transition(g_info[i]))
      std::fprintf(stderr, "host%d: [%s] after the stream: plugin INFO: %s\n", g_host, step,
                   g_info[i].c_str());
}

double phase_mbps(const Flow& f, size_t k) {
  const Mark& a = f.ph[k].start;
  const Mark& b = k + 1 < f.ph.size() ? f.ph[k + 1].start : f.end;
  const double s = std::max(1e-3, std::chrono::duration<double>(b.t - a.t).count());
  return double(b.bytes - a.bytes) / 1e6 / s;
}
void print_phases(const Ctx& x, const char* step, const Flow& f) {
  for (size_t k = 0; k < f.ph.size(); ++k) {
    const Mark& a = f.ph[k].start;
    const Mark& b = k + 1 < f.ph.size() ? f.ph[k + 1].start : f.end;
    std::fprintf(stderr,
                 "host%d: [%s] %-10s %4d messages, %6.1f MB in %5.1f s (%6.2f MB/s), longest wait "
                 "%4lld ms (to message %d, %lld ms in); packets sent %s %lld, %s %lld; received %s "
                 "%lld, %s %lld; at its end %d done, %d posted\n",
                 x.host, step, f.ph[k].name.c_str(), b.done - a.done,
                 double(b.bytes - a.bytes) / 1e6, double(ms_between(a.t, b.t)) / 1000,
                 phase_mbps(f, k), f.ph[k].max_gap_ms, f.ph[k].gap_to, f.ph[k].gap_end_ms,
                 x.m[0].name.c_str(), delta(a, b, true, 0), x.m[1].name.c_str(),
                 delta(a, b, true, 1), x.m[0].name.c_str(), delta(a, b, false, 0),
                 x.m[1].name.c_str(), delta(a, b, false, 1), b.done, b.posted);
  }
}

void print_paced(const Ctx& x, const char* step, const Flow& f, const Losses& l0) {
  print_timeline(step, f);
  print_phases(x, step, f);
  print_losses(x, step, l0, losses(x));
}

std::string spread(std::vector<double> v, const char* unit, int prec) {
  const size_t all = v.size();
  v.erase(std::remove_if(v.begin(), v.end(), [](double d) { return d < 0; }), v.end());
  if (v.empty()) return "never (" + std::to_string(all) + " flaps)";
  std::sort(v.begin(), v.end());
  const double med = v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  char b[200];
  std::snprintf(b, sizeof b, "median %.*f %s, min-max %.*f-%.*f %s over %zu flaps", prec, med, unit,
                prec, v.front(), prec, v.back(), unit, v.size());
  std::string s = b;
  if (v.size() != all) s += " (" + std::to_string(all - v.size()) + " never)";
  return s;
}

std::string Eth1::down() {
  guard.down = true;
  return set_link(x.netdev[1], false) ? "" : "eth1 down failed";
}

std::string Eth1::up() {
  if (!set_link(x.netdev[1], true)) return "eth1 up failed";
  guard.down = false;
  long long took = 0;
  if (!wait_port_back(x.m[1], x.addr2, &took, 5))
    return x.m[1].name + " not ACTIVE with its GID 20 s after up";
  std::fprintf(stderr, "host%d: [%s] %s ACTIVE with the GID of %s %lld ms after eth1 up\n", x.host,
               step, x.m[1].name.c_str(), x.addr2.c_str(), took);
  return {};
}

Share final_share(const Ctx& x, const Mark& a, const Mark& b) {
  Share s;
  const bool sent = x.host == 1;
  const long long k = delta(a, b, sent, 0), f = delta(a, b, sent, 1);
  if (k >= 0 && f >= 0 && k + f > 0) s.pct = 100.0 * double(f) / double(k + f);
  const std::vector<std::string> info = kept_info();
  const long w0 = weight_logged(info, x.fused, x.m[0].name),
             w1 = weight_logged(info, x.fused, x.m[1].name);
  if (w0 >= 0 && w1 >= 0 && w0 + w1 > 0) s.weight_pct = 100.0 * double(w1) / double(w0 + w1);
  return s;
}

}  // namespace nettest::failover
