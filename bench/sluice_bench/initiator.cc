// The initiator's half of sluice-bench: the plan (each test, each size, --reps times, Sluice and
// perftest interleaved), the tables (min / median / max over the repetitions), the cost of a
// message in packets and work requests, and the targets with verdicts that respect the spread.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "sluice_bench.h"
#include "stats.h"

namespace bench {
namespace {

// A target line for the summary.
struct TargetLine {
  std::string what, target, value, verdict, note;
};

const char* kNoExt = "n/a (plugin has no sluiceExt_v1)";

}  // namespace

struct Initiator {
  Initiator(const Options& opts, Side& side, Net& n, std::string peer, std::string sender,
            std::string receiver)
      : o(opts),
        s(side),
        net(n),
        peer_addr(std::move(peer)),
        sender_name(std::move(sender)),
        receiver_name(std::move(receiver)) {}
  const Options& o;
  Side& s;
  Net& net;
  std::string peer_addr;  // for perftest's client
  std::string sender_name, receiver_name;
  std::vector<Table> tables;
  std::vector<TargetLine> targets;
  uint64_t bad = 0;
  uint64_t scale_failures = 0;  // scale: set-ups, verifications, closes or counts that failed
  std::string wire_source;      // the counter file read, or why none
  // Targets, gathered while the tables run.
  Verdict bw1m_v = Verdict::kNone, bw64k_v = Verdict::kNone, rate_v = Verdict::kNone;
  Verdict rate_eager_v = Verdict::kNone;  // issue 33's mark, 0.9x
  Spread bw1m_worst, bw64k_worst, rate_worst;
  double pkts_ratio_worst = NAN, pkts_ratio_16 = NAN;
  Spread lat_jit_vs_write, lat_pre_vs_send, lat_pre_vs_write;
  double pp_pkts_jit = NAN, pp_pkts_pre = NAN;
  double rss_per_conn = NAN;
  Spread conn_time;
  bool ext_seen = false;

  // Both devices' packets: when both processes use the same device, its counter already holds
  // both sides' traffic.
  bool same_device() const { return sender_name == receiver_name; }
  double wire_per(const SideStats& me, const SideStats& peer, double messages) const {
    if (!me.wire_valid || (!same_device() && !peer.wire_valid) || messages <= 0) return NAN;
    return (me.wire_pkts + (same_device() ? 0 : peer.wire_pkts)) / messages;
  }
  static double ext_per(const SideStats& x, uint64_t v, double messages) {
    return x.ext_valid && messages > 0 ? v / messages : NAN;
  }

  uint64_t iters_for(uint64_t size) const {
    if (o.iters_fixed) return o.iters_fixed;
    return std::clamp<uint64_t>(o.bytes_per_size / std::max<uint64_t>(size, 1), o.iters_min,
                                o.iters_max);
  }
  Cmd cmd(Op op, uint64_t size, uint64_t iters, uint32_t window, uint32_t nconns,
          uint32_t flags = 0) const {
    Cmd c{};
    c.op = op;
    c.size = size;
    c.iters = iters;
    c.warmup = std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(iters * o.warmup_frac)));
    c.window = window;
    c.nconns = nconns;
    c.verify = o.verify;
    c.raw_port = o.raw_port;
    c.gid_index = o.gid_index;
    c.tx_depth = o.raw_tx_depth < 0 ? static_cast<int32_t>(window) : o.raw_tx_depth;
    c.timeout_s = o.timeout;
    c.slots = o.slots;
    c.flags = flags;
    return c;
  }
  SideStats peer_reply(const Cmd& c) {
    Deadline dl(c.timeout_s, "waiting for the peer's numbers");
    return s.ch->recv_pod<SideStats>(dl);
  }
  void progress(const std::string& what) {
    if (!o.quiet) fprintf(stderr, "sluice-bench: %s\n", what.c_str());
  }
  void send_cmd(const Cmd& c) { s.ch->send_pod(c, Deadline(o.timeout, "sending a command")); }
  uint32_t count_flag(uint32_t rep) const { return o.count && rep == 0 ? kCountWire : 0; }

  // One perftest run of either kind; `wire` gets both sides' packet counts.
  RawBw raw_bw(const Cmd& rc, SideStats* me, SideStats* peer) {
    send_cmd(rc);
    RawBw r = raw_bw_client(s, rc, peer_addr, me);
    *peer = peer_reply(rc);
    if (!r.ok)
      fprintf(stderr, "sluice-bench: warning: ib_write_bw %s: %s\n", format_size(rc.size).c_str(),
              r.error.c_str());
    return r;
  }
  RawLat raw_lat(const Cmd& rc, SideStats* me, SideStats* peer) {
    send_cmd(rc);
    RawLat r = raw_lat_client(s, rc, peer_addr, me);
    *peer = peer_reply(rc);
    if (!r.ok)
      fprintf(stderr, "sluice-bench: warning: %s %s: %s\n", raw_tool(rc.op),
              format_size(rc.size).c_str(), r.error.c_str());
    return r;
  }

  // bw / rate / agg. `rate`: the headline metric is Mmsg/s instead of GB/s.
  void bw_table(const char* name, const std::vector<uint64_t>& sizes, uint32_t window,
                uint32_t nconns, bool raw, bool rate) {
    const char* m = rate ? "Mmsg/s" : "GB/s";
    const char* other = rate ? "GB/s" : "Mmsg/s";
    std::vector<std::string> cols = {"size", "iters", "window"};
    if (nconns > 1) cols.push_back("conns");
    for (std::string c :
         {std::string(m) + "_min", std::string(m), std::string(m) + "_max", std::string(other),
          std::string("cpu_us/msg_send"), std::string("cpu_us/msg_recv")})
      cols.push_back(c);
    if (nconns > 1) cols.push_back("GB/s_per_conn");
    if (raw) {
      for (std::string c :
           {"raw_" + std::string(m) + "_min", "raw_" + std::string(m),
            "raw_" + std::string(m) + "_max", "raw_" + std::string(other),
            std::string("sluice/raw"), std::string("ratio_lo"), std::string("ratio_hi")})
        cols.push_back(c);
    }
    for (const char* c : {"pkts/msg", "wrs/msg_send", "wrs/msg_recv", "doorbells/msg"})
      cols.push_back(c);
    if (raw) {
      cols.push_back("raw_pkts/msg");
      cols.push_back("pkts/raw");
    }
    if (o.verify) cols.push_back("bad_bytes");
    Table t(name, cols);
    // Per rail (member device of each side's comms: a row per member of a fused one), from
    // sluiceExt_v2 over the counted repetition: payload, completions polled, post-to-completion
    // percentiles (the comm's, over its members).
    Table rails(
        std::string(name) + "_rails",
        {"size", "send_rail", "send_bytes/msg", "send_cqes/msg", "send_p50_us", "send_p99_us",
         "recv_rail", "recv_bytes/msg", "recv_cqes/msg", "recv_p50_us", "recv_p99_us"});
    bool rails_seen = false;
    // Failover (docs/failover.md), a row per size and member where a comm fails over: each side's
    // worst path state at the end of the counted repetition, its failovers and failbacks, the
    // bytes the sender replayed, and the longest last stall (fault to replay posted / receives
    // published again).
    Table fo(std::string(name) + "_failover",
             {"size", "send_rail", "send_state", "send_failovers", "send_failbacks",
              "send_replayed_bytes", "send_stall_ms", "recv_rail", "recv_state", "recv_failovers",
              "recv_failbacks", "recv_stall_ms"});
    bool fo_seen = false;
    // CPU per message split into user and system time, each side, medians over the repetitions,
    // beside the wall time per message: a side whose user + system equals the wall time is
    // saturated, and the system time is its verbs posts (Soft-RoCE runs a whole WRITE, the
    // peer's placement and ACK included, in the poster's system call) while the user time is the
    // plugin's calls and polling.
    Table cpu_split(std::string(name) + "_cpu",
                    {"size", "wall_us/msg", "usr_us/msg_send", "sys_us/msg_send", "usr_us/msg_recv",
                     "sys_us/msg_recv"});
    for (uint64_t size : sizes) {
      uint64_t iters = iters_for(size);
      std::vector<double> gbs, mmsg, cpus, cpur, rgbs, rmmsg, wall, us, ss, ur, sr;
      double pkts = NAN, rpkts = NAN, wrs_s = NAN, wrs_r = NAN, db = NAN;
      uint64_t row_bad = 0;
      for (uint32_t rep = 0; rep < o.reps; ++rep) {
        progress(strf("%s: %s x %llu (window %u, %u conn%s), repetition %u/%u", name,
                      format_size(size).c_str(), (unsigned long long)iters, window, nconns,
                      nconns > 1 ? "s" : "", rep + 1, o.reps));
        Cmd c = cmd(Op::kBw, size, iters, window, nconns, count_flag(rep));
        send_cmd(c);
        SideStats me = bw_send(s, c);
        SideStats peer = peer_reply(c);
        row_bad += peer.bad_bytes + me.bad_bytes;
        gbs.push_back(static_cast<double>(size) * me.messages / me.elapsed_s / 1e9);
        mmsg.push_back(me.messages / me.elapsed_s / 1e6);
        const double pm = static_cast<double>(std::max<uint64_t>(peer.messages, 1));
        cpus.push_back((me.user_s + me.sys_s) * 1e6 / me.messages);
        cpur.push_back((peer.user_s + peer.sys_s) * 1e6 / pm);
        wall.push_back(me.elapsed_s * 1e6 / me.messages);
        us.push_back(me.user_s * 1e6 / me.messages);
        ss.push_back(me.sys_s * 1e6 / me.messages);
        ur.push_back(peer.user_s * 1e6 / pm);
        sr.push_back(peer.sys_s * 1e6 / pm);
        if (c.flags & kCountWire) {
          double n = static_cast<double>(me.messages);
          pkts = wire_per(me, peer, n);
          wrs_s = ext_per(me, me.wrs, n);
          wrs_r = ext_per(peer, peer.wrs, n);
          db = me.ext_valid && peer.ext_valid ? (me.doorbells + peer.doorbells) / n : NAN;
          ext_seen |= me.ext_valid && peer.ext_valid;
          if (me.ext2_valid && peer.ext2_valid) {
            rails_seen = true;
            auto pct = [](const SideStats& x, double q) -> double {
              uint64_t total = 0;
              for (uint64_t v : x.latency) total += v;
              if (total == 0) return NAN;
              uint64_t acc = 0;
              for (int b = 0; b < SLUICE_EXT_LATENCY_BUCKETS; ++b) {
                acc += x.latency[b];
                if (acc >= q * total) return std::ldexp(1.0, b + 1) / 1e3;  // bucket's upper end
              }
              return NAN;
            };
            // One row per member index (a fused comm's members, each side's own); the
            // percentiles are the comm's, over all its members.
            const int nm = std::min(std::max({me.members, peer.members, 1}), SideStats::kMembers);
            for (int m = 0; m < nm; ++m) {
              const bool one = me.members <= 1 && peer.members <= 1;
              auto name = [&](const SideStats& x) {
                return one ? std::string(x.member0) : std::string(x.member_name[m]);
              };
              rails.add(
                  {Table::integer(size), Table::text(name(me)),
                   Table::num((one ? me.bytes : me.member_bytes[m]) / n, "%.1f"),
                   Table::num((one ? me.completions : me.member_completions[m]) / n, "%.3f"),
                   Table::num(pct(me, 0.5), "%.1f"), Table::num(pct(me, 0.99), "%.1f"),
                   Table::text(name(peer)),
                   Table::num((one ? peer.bytes : peer.member_bytes[m]) / n, "%.1f"),
                   Table::num((one ? peer.completions : peer.member_completions[m]) / n, "%.3f"),
                   Table::num(pct(peer, 0.5), "%.1f"), Table::num(pct(peer, 0.99), "%.1f")});
              if (!me.failover_on && !peer.failover_on) continue;
              fo_seen = true;
              static const char* kState[] = {"up",         "fencing",  "down",
                                             "recovering", "checking", "ramping"};
              auto state = [](int v) { return v >= 0 && v <= 5 ? kState[v] : "?"; };
              fo.add({Table::integer(size), Table::text(name(me)),
                      Table::text(state(me.member_state[m])),
                      Table::integer(me.member_failovers[m]),
                      Table::integer(me.member_failbacks[m]),
                      Table::integer(static_cast<long long>(me.member_replayed[m])),
                      Table::integer(me.member_stall_ms[m]), Table::text(name(peer)),
                      Table::text(state(peer.member_state[m])),
                      Table::integer(peer.member_failovers[m]),
                      Table::integer(peer.member_failbacks[m]),
                      Table::integer(peer.member_stall_ms[m])});
            }
          }
        }
        if (raw) {
          Cmd rc = cmd(Op::kRawBw, size, iters, window, 1, count_flag(rep));
          SideStats rme, rpeer;
          RawBw r = raw_bw(rc, &rme, &rpeer);
          rgbs.push_back(r.ok ? r.avg_gbs : NAN);
          rmmsg.push_back(r.ok ? r.mpps : NAN);
          if (rc.flags & kCountWire) rpkts = wire_per(rme, rpeer, std::max<uint64_t>(iters, 5));
        }
      }
      bad += row_bad;
      Spread sm = spread(rate ? mmsg : gbs), so = spread(rate ? gbs : mmsg);
      std::vector<Table::Cell> row = {Table::integer(size), Table::integer(iters),
                                      Table::integer(window)};
      if (nconns > 1) row.push_back(Table::integer(nconns));
      const char* f = rate ? "%.4f" : "%.3f";
      const char* fo = rate ? "%.3f" : "%.4f";
      row.push_back(Table::num(sm.lo, f));
      row.push_back(Table::num(sm.med, f));
      row.push_back(Table::num(sm.hi, f));
      row.push_back(Table::num(so.med, fo));
      row.push_back(Table::num(spread(cpus).med, "%.2f"));
      row.push_back(Table::num(spread(cpur).med, "%.2f"));
      if (nconns > 1) row.push_back(Table::num(spread(gbs).med / nconns, "%.3f"));
      if (raw) {
        Spread rm = spread(rate ? rmmsg : rgbs), ro = spread(rate ? rgbs : rmmsg);
        Spread q = ratio(sm, rm);
        row.push_back(Table::num(rm.lo, f));
        row.push_back(Table::num(rm.med, f));
        row.push_back(Table::num(rm.hi, f));
        row.push_back(Table::num(ro.med, fo));
        row.push_back(Table::num(q.med, "%.3f"));
        row.push_back(Table::num(q.lo, "%.3f"));
        row.push_back(Table::num(q.hi, "%.3f"));
        auto worst = [&](Verdict* v, Spread* w, double bound) {
          *v = combine(*v, judge(q, false, bound));
          if (!std::isnan(q.med) && (std::isnan(w->med) || q.med < w->med)) *w = q;
        };
        if (!rate && nconns == 1 && size >= (1u << 20)) worst(&bw1m_v, &bw1m_worst, 0.95);
        if (!rate && nconns == 1 && size >= (64u << 10)) worst(&bw64k_v, &bw64k_worst, 0.0);
        if (rate) {
          worst(&rate_v, &rate_worst, 1.0);
          rate_eager_v = combine(rate_eager_v, judge(q, false, 0.9));
        }
      }
      row.push_back(Table::num(pkts, "%.3f"));
      row.push_back(Table::num(wrs_s, "%.3f"));
      row.push_back(Table::num(wrs_r, "%.3f"));
      row.push_back(Table::num(db, "%.3f"));
      if (raw) {
        row.push_back(Table::num(rpkts, "%.3f"));
        double pr = rpkts > 0 ? pkts / rpkts : NAN;
        row.push_back(Table::num(pr, "%.3f"));
        if (rate && !std::isnan(pr)) {
          pkts_ratio_worst = std::isnan(pkts_ratio_worst) ? pr : std::max(pkts_ratio_worst, pr);
          if (size == 16) pkts_ratio_16 = pr;
        }
      }
      if (o.verify) row.push_back(Table::integer(static_cast<long long>(row_bad)));
      t.add(std::move(row));
      cpu_split.add({Table::integer(size), Table::num(spread(wall).med, "%.2f"),
                     Table::num(spread(us).med, "%.2f"), Table::num(spread(ss).med, "%.2f"),
                     Table::num(spread(ur).med, "%.2f"), Table::num(spread(sr).med, "%.2f")});
    }
    tables.push_back(std::move(t));
    if (rate) tables.push_back(std::move(cpu_split));
    if (rails_seen) tables.push_back(std::move(rails));
    if (fo_seen) tables.push_back(std::move(fo));
  }

  // Latency: Sluice's two modes and perftest's ib_write_lat / ib_send_lat, rows of one table.
  void lat_table(bool raw) {
    std::vector<std::string> cols = {
        "size",           "what",    "iters",          "typical_us_min",  "typical_us",
        "typical_us_max", "avg_us",  "p99_us",         "cpu_us/msg_ping", "cpu_us/msg_pong",
        "pkts/msg",       "wrs/msg", "vs_ib_send_lat", "vs_ib_write_lat"};
    if (o.verify) cols.push_back("bad_bytes");
    Table t("lat", cols);
    struct Acc {
      explicit Acc(std::string w) : what(std::move(w)) {}
      std::string what;
      std::vector<double> typ, avg, p99, cping, cpong;
      double pkts = NAN, wrs = NAN;
      uint64_t bad = 0;
    };
    for (uint64_t size : o.lat_sizes) {
      std::vector<Acc> acc;
      if (o.lat_jit) acc.emplace_back("sluice_jit");
      if (o.lat_prepost) acc.emplace_back(strf("sluice_preposted_%u", o.lat_ahead));
      const size_t nsl = acc.size();
      if (raw) {
        acc.emplace_back("ib_write_lat");
        acc.emplace_back("ib_send_lat");
      }
      for (uint32_t rep = 0; rep < o.reps; ++rep) {
        for (size_t k = 0; k < acc.size(); ++k) {
          Acc& a = acc[k];
          progress(strf("lat: %s %s x %llu ping-pongs, repetition %u/%u", a.what.c_str(),
                        format_size(size).c_str(), (unsigned long long)o.lat_iters, rep + 1,
                        o.reps));
          if (k < nsl) {
            bool pre = a.what != "sluice_jit";
            Cmd c = cmd(Op::kLat, size, o.lat_iters, pre ? o.lat_ahead : 1, 1,
                        count_flag(rep) | (pre ? kPrePost : 0));
            send_cmd(c);
            LatResult me = lat_ping(s, c);
            SideStats peer = peer_reply(c);
            a.bad += me.self.bad_bytes + peer.bad_bytes;
            auto& v = me.half_rtt_us;
            a.typ.push_back(v[v.size() / 2]);
            a.avg.push_back(me.self.elapsed_s * 1e6 / me.self.messages / 2);
            a.p99.push_back(v[std::min(v.size() - 1, static_cast<size_t>(v.size() * 0.99))]);
            a.cping.push_back((me.self.user_s + me.self.sys_s) * 1e6 / me.self.messages);
            a.cpong.push_back((peer.user_s + peer.sys_s) * 1e6 /
                              std::max<uint64_t>(peer.messages, 1));
            if (c.flags & kCountWire) {
              // Messages on the wire: a ping and a pong per iteration, warm-up included.
              double n = 2.0 * (c.warmup + c.iters);
              a.pkts = wire_per(me.self, peer, n);
              a.wrs = me.self.ext_valid && peer.ext_valid ? (me.self.wrs + peer.wrs) / n : NAN;
            }
          } else {
            Op op = a.what == "ib_write_lat" ? Op::kRawLat : Op::kRawSendLat;
            Cmd rc = cmd(op, size, o.lat_iters, 1, 1, count_flag(rep));
            SideStats rme, rpeer;
            RawLat r = raw_lat(rc, &rme, &rpeer);
            a.typ.push_back(r.ok ? r.typical_us : NAN);
            a.avg.push_back(r.ok ? r.avg_us : NAN);
            a.p99.push_back(r.ok ? r.p99_us : NAN);
            if (rc.flags & kCountWire)
              a.pkts = wire_per(rme, rpeer, 2.0 * std::max<uint64_t>(o.lat_iters, 5));
          }
        }
      }
      Spread wl, sl;
      for (auto& a : acc) {
        if (a.what == "ib_write_lat") wl = spread(a.typ);
        if (a.what == "ib_send_lat") sl = spread(a.typ);
      }
      for (size_t k = 0; k < acc.size(); ++k) {
        Acc& a = acc[k];
        bad += a.bad;
        Spread ty = spread(a.typ);
        Spread vs_send = k < nsl ? ratio(ty, sl) : Spread{};
        Spread vs_write = k < nsl ? ratio(ty, wl) : Spread{};
        std::vector<Table::Cell> row = {Table::integer(size),
                                        Table::text(a.what),
                                        Table::integer(o.lat_iters),
                                        Table::num(ty.lo),
                                        Table::num(ty.med),
                                        Table::num(ty.hi),
                                        Table::num(spread(a.avg).med),
                                        Table::num(spread(a.p99).med),
                                        Table::num(spread(a.cping).med),
                                        Table::num(spread(a.cpong).med),
                                        Table::num(a.pkts, "%.3f"),
                                        Table::num(a.wrs, "%.3f"),
                                        Table::num(vs_send.med, "%.3f"),
                                        Table::num(vs_write.med, "%.3f")};
        if (o.verify) row.push_back(Table::integer(static_cast<long long>(a.bad)));
        t.add(std::move(row));
        if (size == 8 && a.what == "sluice_jit") {
          lat_jit_vs_write = vs_write;
          pp_pkts_jit = a.pkts;
        }
        if (size == 8 && k < nsl && a.what != "sluice_jit") {
          lat_pre_vs_send = vs_send;
          lat_pre_vs_write = vs_write;
          pp_pkts_pre = a.pkts;
        }
      }
    }
    tables.push_back(std::move(t));
  }

  void conn_table() {
    std::vector<double> est, rss_s, rss_r, close_s, close_r;
    SideStats me, peer;
    // The knob as this process sees it (both sides should run with the same), and what the
    // connections really used, told by the rdma_cm event channel the connecting side held once
    // all were up (the connector decides; its comms share one channel in rdmacm mode, and hold
    // none in oob mode, whose route checks are over by then).
    const char* knob = std::getenv("SLUICE_CM");
    auto used = [&](const SideStats& x) -> std::string {
      if (x.cm_channels < 0) return "?";
      return x.cm_channels == 0 ? "oob" : "rdmacm";
    };
    const double n = o.conn_count;
    auto kib = [&](const SideStats& x) {
      return (static_cast<double>(x.rss_after) - static_cast<double>(x.rss_before)) / n / 1024;
    };
    for (uint32_t rep = 0; rep < o.reps; ++rep) {
      progress(strf("conn: establishing %u connections, repetition %u/%u", o.conn_count, rep + 1,
                    o.reps));
      Cmd c = cmd(Op::kConn, 0, 0, 1, o.conn_count);
      send_cmd(c);
      me = conn_connect(s, c);
      peer = peer_reply(c);
      est.push_back(me.elapsed_s);
      rss_s.push_back(kib(me));
      rss_r.push_back(kib(peer));
      close_s.push_back(me.close_s);
      close_r.push_back(peer.close_s);
    }
    auto per = [&](const SideStats& x, int64_t v) { return x.verbs_valid ? v / n : NAN; };
    Table t("conn",
            {"SLUICE_CM", "cm_used", "conns", "establish_s_min", "establish_s", "establish_s_max",
             "ms/conn", "rss_KiB/conn_send", "rss_KiB/conn_recv", "qps/conn_send", "qps/conn_recv",
             "cqs/conn_send", "cqs/conn_recv", "cqes/conn_send", "cqes/conn_recv", "mrs/conn_send",
             "mrs/conn_recv", "close_s_send", "close_s_recv"});
    conn_time = spread(est);
    Spread rs = spread(rss_s), rr = spread(rss_r);
    t.add({Table::text(knob != nullptr && *knob != '\0' ? knob : "auto"), Table::text(used(me)),
           Table::integer(o.conn_count), Table::num(conn_time.lo, "%.3f"),
           Table::num(conn_time.med, "%.3f"), Table::num(conn_time.hi, "%.3f"),
           Table::num(conn_time.med * 1e3 / n, "%.3f"), Table::num(rs.med, "%.1f"),
           Table::num(rr.med, "%.1f"), Table::num(per(me, me.qps)), Table::num(per(peer, peer.qps)),
           Table::num(per(me, me.cqs)), Table::num(per(peer, peer.cqs)),
           Table::num(per(me, me.cqes), "%.1f"), Table::num(per(peer, peer.cqes), "%.1f"),
           Table::num(per(me, me.mrs)), Table::num(per(peer, peer.mrs)),
           Table::num(spread(close_s).med, "%.3f"), Table::num(spread(close_r).med, "%.3f")});
    if (!me.verbs_valid || !peer.verbs_valid)
      fprintf(stderr,
              "sluice-bench: note: verbs objects not counted (iproute2 `rdma resource show` "
              "unavailable)\n");
    tables.push_back(std::move(t));
    // Memory is (nearly) deterministic: the worst side's median.
    rss_per_conn = std::max(rs.med, rr.med);
  }

  void run() {
    wire_source = WireCounter::read(s.hw_dev, s.hw_port).source;
    if (o.tests.count("bw"))
      bw_table("bw", size_sweep(o.min_size, o.max_size, o.step), o.window, 1, o.compare_raw, false);
    if (o.tests.count("rate")) {
      // 8 B .. --rate-max, the bound itself included even when the step does not land on it.
      std::vector<uint64_t> sizes = size_sweep(8, std::max<uint64_t>(8, o.rate_max), o.step);
      if (sizes.back() < o.rate_max) sizes.push_back(o.rate_max);
      bw_table("rate", sizes, o.rate_window, 1, o.compare_raw, true);
    }
    if (o.tests.count("lat")) lat_table(o.compare_raw);
    if (o.tests.count("agg")) bw_table("agg", o.agg_sizes, o.window, o.conns, false, false);
    if (o.tests.count("conn")) conn_table();
    if (o.tests.count("scale")) scale_run(o, s, &tables, &scale_failures);
    send_cmd(cmd(Op::kQuit, 0, 0, 1, 1));
  }

  std::string discipline() const {
    if (g_pure_spin) return "Sluice spins (--spin: never yields)";
    if (g_idle_sleep_us > 0)
      return strf(
          "Sluice: bandwidth loops sleep %d us after 128 idle polls (--idle-sleep), latency "
          "loops sched_yield after 128 idle polls",
          g_idle_sleep_us);
    return "Sluice: sched_yield after 128 idle polls (NCCL's proxy when idle)";
  }

  // `higher_better`: a throughput ratio (above 1.0 would look like beating raw verbs); else a
  // time ratio (below 1.0 would). Neither is presented as a win.
  void add_ratio_target(const char* what, const char* target, Verdict v, const Spread& q,
                        bool higher_better) {
    TargetLine l{what, target, "", verdict_str(v), ""};
    if (!std::isnan(q.med)) l.value = strf("%.3f [%.3f..%.3f]", q.med, q.lo, q.hi);
    if (higher_better && q.med > 1.0)
      l.note = "> 1.0 vs raw verbs: at wire rate / within noise, not a win";
    if (!higher_better && q.med < 1.0)
      l.note = "< 1.0 vs raw verbs: at wire rate / within noise, not a win";
    targets.push_back(l);
  }
  void add_count_target(const char* what, const char* target, double v, bool le, double bound,
                        const char* na = nullptr) {
    TargetLine l{what, target, "", "n/a", ""};
    if (std::isnan(v)) {
      l.value = na ? na : "n/a";
    } else {
      l.value = strf("%.3f", v);
      l.verdict = (le ? v <= bound : v >= bound) ? "MET" : "SHORT";
    }
    targets.push_back(l);
  }

  void build_targets() {
    const bool r = o.compare_raw;
    if (o.tests.count("bw") && r) {
      add_ratio_target("bandwidth >= 1 MiB, worst Sluice/ib_write_bw", ">= 0.95", bw1m_v,
                       bw1m_worst, true);
      TargetLine l{"bandwidth >= 64 KiB, worst Sluice/ib_write_bw", "no regression", "",
                   "compare with the BEFORE run (docs/benchmarks.md)", ""};
      if (!std::isnan(bw64k_worst.med))
        l.value = strf("%.3f [%.3f..%.3f]", bw64k_worst.med, bw64k_worst.lo, bw64k_worst.hi);
      targets.push_back(l);
    }
    if (o.tests.count("rate") && r) {
      add_ratio_target("message rate 8 B-4 KiB, worst Sluice/ib_write_bw", ">= 1.0", rate_v,
                       rate_worst, true);
      add_count_target("packets/msg streaming, worst Sluice/ib_write_bw", "<= 1.3 (count)",
                       pkts_ratio_worst, true, 1.3);
      // Issue 33's marks for the eager path: the rate at 0.9x, the packets at 16 B.
      add_ratio_target("eager: message rate 8 B-4 KiB, worst / raw", ">= 0.9", rate_eager_v,
                       rate_worst, true);
      add_count_target("eager: packets/msg streaming 16 B / raw", "<= 1.3 (count)", pkts_ratio_16,
                       true, 1.3, "n/a (16 B not run)");
    }
    if (o.tests.count("lat")) {
      if (o.lat_jit)
        add_count_target("8 B ping-pong packets/msg (just in time)", "<= 4.0 (count)", pp_pkts_jit,
                         true, 4.0);
      if (o.lat_prepost)
        add_count_target("8 B ping-pong packets/msg (pre-posted)", "<= 4.0 (count)", pp_pkts_pre,
                         true, 4.0);
      if (r) {
        add_ratio_target("8 B half RTT pre-posted / ib_send_lat", "<= 1.2",
                         judge(lat_pre_vs_send, true, 1.2), lat_pre_vs_send, false);
        add_ratio_target("8 B half RTT pre-posted / ib_write_lat", "(reported)", Verdict::kNone,
                         lat_pre_vs_write, false);
        add_ratio_target("8 B half RTT just in time / ib_write_lat", "<= 1.5",
                         judge(lat_jit_vs_write, true, 1.5), lat_jit_vs_write, false);
      }
    }
    if (o.tests.count("conn")) {
      add_count_target("host memory per connection (KiB, max side)", "<= 64", rss_per_conn, true,
                       64);
      add_ratio_target(strf("time to establish %u connections (s)", o.conn_count).c_str(), "< 5",
                       judge(conn_time, true, 5), conn_time, true);
      targets.back().note.clear();  // seconds, not a ratio against raw verbs
    }
  }

  void report() {
    printf("# sluice-bench: plugin %s (%s, ncclNetPlugin_v%d), sender %s -> receiver %s%s%s\n",
           net.name(), net.path().c_str(), net.version(), sender_name.c_str(),
           receiver_name.c_str(), o.verify ? ", every byte verified" : "",
           o.label.empty() ? "" : (", " + o.label).c_str());
    printf(
        "# repetitions: %u per figure, Sluice and perftest interleaved; tables show min / "
        "median / max; ratios are median / median, [lo..hi] = the extremes the spreads allow\n",
        o.reps);
    printf(
        "# polling: %s; perftest clients busy-poll their CQ (ib_write_bw's server only "
        "waits)\n",
        discipline().c_str());
    printf("# window: bw %u, rate %u requests in flight; perftest tx depth %s\n", o.window,
           o.rate_window,
           o.raw_tx_depth < 0    ? "= the same window (-t)"
           : o.raw_tx_depth == 0 ? "perftest's default (128)"
                                 : strf("%d (-t)", o.raw_tx_depth).c_str());
    printf(
        "# packets: %s (both devices, timed phase of the first repetition; deterministic, one "
        "run suffices)%s\n",
        o.count ? wire_source.c_str() : "not counted (--no-count)",
        wire_source.find("port_xmit_packets") != std::string::npos
            ? "; a real port's counter also counts any other traffic on that port"
            : "");
    printf("# work requests: %s\n",
           net.ext() ? "the plugin's sluiceExt_v1 commStats (first repetition)" : kNoExt);
    printf(
        "# GB/s = 10^9 bytes/s; cpu_us/msg = (user + system) CPU time of that process / "
        "messages\n");
    for (auto& t : tables) {
      printf("\n# [%s]\n", t.name().c_str());
      t.print(stdout);
      if (!o.csv.empty()) t.write_csv(o.csv + "-" + t.name() + ".csv");
    }
    build_targets();
    printf(
        "\n# Targets (reported, not enforced). Timing: MET / SHORT only when the whole spread "
        "is on one side of the bound, else \"within noise\"\n");
    for (auto& l : targets)
      printf("#   %-50s %-26s target %-15s %s%s%s\n", l.what.c_str(),
             l.value.empty() ? "n/a" : l.value.c_str(), l.target.c_str(), l.verdict.c_str(),
             l.note.empty() ? "" : "  -- ", l.note.c_str());
    if (!net.ext()) printf("#   work requests per message: %s\n", kNoExt);
    if (o.verify) printf("# verification: %s\n", bad ? "FAILED" : "every received byte matched");
    if (o.tests.count("scale"))
      printf("# scale: %s\n", scale_failures ? strf("%llu FAILURE(S), see the \"# scale N=\" lines",
                                                    (unsigned long long)scale_failures)
                                                   .c_str()
                                             : "every pair up, every message verified, every "
                                               "close back at the baseline");
    if (!o.json.empty()) write_json();
  }

  void write_json() {
    FILE* f = fopen(o.json.c_str(), "w");
    if (!f) fail("cannot write %s", o.json.c_str());
    fprintf(f,
            "{\"tool\": \"sluice-bench\", \"plugin\": %s, \"sender\": %s, \"receiver\": %s, "
            "\"window\": %u, \"reps\": %u, \"label\": %s, \"polling\": %s, \"ext\": %s,\n",
            json_escape(net.path()).c_str(), json_escape(sender_name).c_str(),
            json_escape(receiver_name).c_str(), o.window, o.reps, json_escape(o.label).c_str(),
            json_escape(discipline()).c_str(), net.ext() ? "true" : "false");
    fprintf(f, " \"targets\": [");
    for (size_t i = 0; i < targets.size(); ++i)
      fprintf(f, "%s\n  {\"what\": %s, \"value\": %s, \"target\": %s, \"verdict\": %s}",
              i ? "," : "", json_escape(targets[i].what).c_str(),
              json_escape(targets[i].value).c_str(), json_escape(targets[i].target).c_str(),
              json_escape(targets[i].verdict).c_str());
    fprintf(f, "],\n \"verify\": %s, \"bad_bytes\": %llu, \"tables\": [",
            o.verify ? "true" : "false", (unsigned long long)bad);
    for (size_t i = 0; i < tables.size(); ++i)
      fprintf(f, "%s\n%s", i ? "," : "", tables[i].json().c_str());
    fprintf(f, "]}\n");
    fclose(f);
  }
};

uint64_t initiate(const Options& o, Side& s, Net& net, const std::string& peer_addr,
                  const std::string& sender_name, const std::string& receiver_name) {
  Initiator in(o, s, net, peer_addr, sender_name, receiver_name);
  in.run();
  in.report();
  return in.bad + in.scale_failures;
}

}  // namespace bench
