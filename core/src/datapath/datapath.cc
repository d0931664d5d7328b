// The data path's common part: helpers shared by send.cc and recv.cc, test, iflush, close and the
// per-comm statistics. isend lives in send.cc, irecv and clear-to-send publication in recv.cc. No
// allocation, lock or log on the path of a message (errors build a message once, when the comm
// fails).
#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <climits>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>

#include "comm/eager_pool.h"
#include "datapath/datapath_internal.h"
#include "datapath/flush.h"
#include "datapath/wr_events.h"
#include "sluice/core/base/log.h"
#include "sluice/core/base/qp.h"

namespace sluice {
namespace dp {

Status fail(Conn& c, Status st) {
  if (!c.failed()) {
    c.failure = std::move(st);
    liveness_tell_peer(c);  // the peer's next call fails with this reason (liveness.h)
  }
  return c.failure;
}

Status check_device(Conn& c, bool new_work) {
  if (c.failed()) return c.failure;  // a retired comm has no device any more
  // A member's adapter lost (DEVICE_FATAL): a failover comm loses that member's paths (its driver
  // fences them without verbs and fails the comm only when none is left); any other comm fails.
  for (int m = 0; m < c.nmembers; ++m) {
    Adapter* a = c.members[m].dev->adapter;
    if (!a->fatal.load(std::memory_order_relaxed)) continue;
    if (c.fo.on) {
      if ((c.fo.dead_members >> m & 1u) == 0)
        fo_post_event(c.fo, uint64_t{1} << (kEvDeviceDeadShift + m));
      continue;
    }
    std::lock_guard<std::mutex> lk(a->fatal_mu);
    return fail(c, Status(Code::kSystemError, a->fatal_reason + "; comm " + c.describe_qp(0)));
  }
  SLUICE_RETURN_IF_ERROR(liveness_check(c, new_work));
  if (c.fo.on) SLUICE_RETURN_IF_ERROR(fo_drive(c));
  return c.progress.due ? check_progress(c) : Status::ok();
}

Status check_progress(Conn& c) {
  c.progress.due = false;
  const Engine* e = engine();
  if (e == nullptr || c.owner == nullptr) return Status::ok();
  const Config& cfg = e->config();
  const long long bound = cfg.progress_timeout_ms > 0
                              ? cfg.progress_timeout_ms
                              : progress_bound_ms(cfg.ib_timeout, cfg.retry_cnt);
  bool outstanding[wire::kMaxQps] = {};
  long long extra[wire::kMaxQps] = {};  // the bytes term of each QP's bound (progress.h)
  uint64_t bytes[wire::kMaxQps] = {};
  const char* what = nullptr;
  if (c.owner->kind == CommKind::kSend) {
    auto& s = *static_cast<SendComm*>(c.owner);
    SLUICE_RETURN_IF_ERROR(poll_send(s));
    // The next completion on a QP needs at most one run of its chains (a progress WR every
    // ~1 MiB: cts::plan_lane), not every byte outstanding: the bytes term is that run's.
    for (int q = 0; q < c.nqps; ++q) {
      outstanding[q] = s.c.qp[q].sq_used > 0 && !c.qp[q].led.fenced;
      bytes[q] = std::min(s.c.qp[q].sq_bytes, s.c.qp[q].sq_seg);
      extra[q] = progress_bytes_ms(bytes[q]);
    }
    what = "isend RDMA WRITE / WRITE_WITH_IMM";
  } else if (c.owner->kind == CommKind::kRecv) {
    auto& r = *static_cast<RecvComm*>(c.owner);
    SLUICE_RETURN_IF_ERROR(poll_recv(r));
    // Signaled CTS writes report their completion; an unsignaled tail is watched while unproven,
    // and probed once its clock ran half the bound (progress.h).
    const bool received = r.completed != r.completed_seen;
    r.completed_seen = r.completed;
    for (int q = 0; q < c.nqps; ++q) {
      if (c.qp[q].led.fenced) continue;  // failover fenced it: nothing of it is awaited
      const CtsTail t{r.c.qp[q].cts_outstanding, r.c.qp[q].cts_unsignaled, r.c.qp[q].cts_tail_from};
      if (cts_tail_check(t, r.completed_hi, received, c.progress.now_ns, bound, &c.qp[q].since_ns,
                         &outstanding[q])) {
        SLUICE_RETURN_IF_ERROR(post_cts_probe(r, q));
        c.qp[q].since_ns = cts_probe_posted(c.qp[q].since_ns, c.progress.now_ns, bound);
      }
    }
    what = "clear-to-send RDMA WRITE";
  } else {
    return Status::ok();
  }
  long long waited = 0;
  int64_t since[wire::kMaxQps] = {};  // each incarnation's clock (comm/qp_life.h)
  for (int k = 0; k < c.nqps; ++k) since[k] = c.qp[k].since_ns;
  const int q =
      progress_check(since, outstanding, c.nqps, c.progress.now_ns, bound, &waited, extra);
  for (int k = 0; k < c.nqps; ++k) c.qp[k].since_ns = since[k];
  if (q < 0) return Status::ok();
  if (c.owner->kind == CommKind::kRecv && c.qp[q].cts_probing) {
    what =
        "clear-to-send RDMA WRITE (the clear-to-send never completed: the signaled zero-length "
        "probe WRITE posted behind it did not complete either, so the sender never got it)";
  }
  std::string why = progress_reason(c.describe_qp(q), what, waited, bound, cfg.ib_timeout,
                                    cfg.retry_cnt, cfg.progress_timeout_ms > 0, bytes[q]);
  if (fo_watchdog(c, q, why)) return Status::ok();  // another path carries: that one fails over
  return fail(c, Status(Code::kRemoteError, std::move(why)));
}

int qp_index(const Conn& c, uint32_t qpn, int member) {
  for (int q = 0; q < c.nqps; ++q)
    if (c.qp[q] && c.qp[q].qpn == qpn && c.qp_member[q] == member) return q;
  return -1;
}

Status on_qp(const Conn& c, int q, const Status& st) {
  return Status(st.code(), st.message() + " on " + c.describe_qp(q < 0 ? 0 : q));
}

Status completion_error(Conn& c, const ibv_wc& wc, const char* side, int member) {
  char vendor[16];
  std::snprintf(vendor, sizeof vendor, "0x%x", wc.vendor_err);
  // The likely cause (health/liveness.h completion_error_cause): the async event that already
  // failed this comm (its reason is written before the flag is released), else the QP's port when
  // it is no longer ACTIVE (a system call, on this error path only), else the status's meaning.
  const std::string async =
      c.watch.async_failed.load(std::memory_order_acquire) ? c.watch.async_reason : std::string();
  ibv_port_attr pa{};
  pa.state = IBV_PORT_NOP;
  const Device* d = member >= 0 && member < c.nmembers ? c.members[member].dev : nullptr;
  std::string port = "?";
  if (async.empty() && d != nullptr && d->adapter != nullptr) {
    port = port_label(*d);
    if (ibv_query_port(d->adapter->ctx.get(), d->port, &pa) != 0) pa.state = IBV_PORT_NOP;
  }
  std::string m =
      std::string(side) + " completion error on " + c.describe_qp(qp_index(c, wc.qp_num, member)) +
      ": status " + ibv_wc_status_str(wc.status) + " (" + std::to_string(wc.status) +
      "), vendor_err " + vendor + "; " + completion_error_cause(wc.status, async, port, pa.state);
  return Status(Code::kRemoteError, std::move(m));
}

void count_member_bytes(Conn& c, uint32_t mask, uint32_t shares, const size_t* sizes, int n) {
  if (c.nmembers <= 1) return;  // one member: its bytes are the comm's (comm_stats_v2)
  for (int p = 0; p < c.npaths; ++p) {
    if ((mask >> p & 1u) == 0) continue;
    size_t bytes = 0;
    for (int i = 0; i < n; ++i) {
      size_t off = 0, len = sizes[i];
      if (c.npaths > 1)
        stripe::part_of(stripe::with_shares(c.paths, shares), mask, sizes[i], p, &off, &len);
      bytes += len;
    }
    c.member_bytes[c.qp_member[p * c.qpp]].add(bytes);
  }
}

bool valid_mh(const Conn& c, const MemHandle* mh) {
  if (mh == nullptr || mh->magic != MemHandle::kMagic || mh->adapter != c.dev->adapter)
    return false;
  // Fusion: registered on every member's adapter (a one-member comm skips the loop).
  for (int m = 1; m < c.nmembers; ++m)
    if (mh->on(c.members[m].dev->adapter) == nullptr) return false;
  return true;
}

Status bad_buffer(const Conn& c, const char* call, const void* data, size_t size,
                  const MemHandle* mh) {
  char buf[256];
  if (!valid_mh(c, mh)) {
    std::snprintf(buf, sizeof buf,
                  "%s: memory handle %p is not a registration of %s (unregistered buffer, a "
                  "handle from another device, or one already deregistered)",
                  call, static_cast<const void*>(mh), c.dev->name.c_str());
  } else {
    std::snprintf(buf, sizeof buf,
                  "%s: buffer [%p, +%zu) is outside its registration [0x%lx, +%zu) (unregistered "
                  "buffer)",
                  call, data, size, static_cast<unsigned long>(mh->base), mh->len);
  }
  return Status(Code::kInvalidArgument, buf);
}

namespace {

void log_stats(const char* side, const Conn& c) {
  SLUICE_TRACE(kSubNet,
               "closing %s comm %s: %llu messages, %llu WRs, %llu doorbells, %llu CTS writes "
               "publishing %llu receives",
               side, c.describe_qp(0).c_str(),
               static_cast<unsigned long long>(c.stats.messages.get()),
               static_cast<unsigned long long>(c.stats.wrs.get()),
               static_cast<unsigned long long>(c.stats.doorbells.get()),
               static_cast<unsigned long long>(c.stats.cts_writes.get()),
               static_cast<unsigned long long>(c.stats.cts_entries.get()));
}

}  // namespace
}  // namespace dp

using dp::check_device;
using dp::eager_poll;
using dp::poll_recv;
using dp::poll_send;

Status iflush(RecvComm* r, int n, void* const* data, const int* sizes, MemHandle* const* mhs,
              Request** out) {
  *out = nullptr;
  if (r == nullptr || r->kind != CommKind::kRecv)
    return Status(Code::kInvalidArgument, "iflush: not a receive comm");
  if (n < 1 || n > wire::kEntriesPerSlot)
    return Status(Code::kInvalidArgument, "iflush: n = " + std::to_string(n));
  // Host memory needs no flush (the CPU sees the NIC's writes once the completion arrived) unless
  // NCCL_NET_FORCE_FLUSH; GPU memory gets a loopback READ (flush.cc). Under the comm's mutex, like
  // irecv and test.
  std::lock_guard<std::mutex> lk(r->mu);
  return flush_post(*r, n, data, sizes, mhs, out);
}

Status test(Request* req, int* done, size_t* sizes) {
  *done = 0;
  if (req == nullptr || req->magic != Request::kMagic || !req->in_use)
    return Status(Code::kInvalidArgument, "test: not a live Sluice request");
  if (req->is_flush) return flush_test(req, done);
  if (req->is_send) {
    auto* r = static_cast<SendReq*>(req);
    auto& s = *static_cast<SendComm*>(r->comm);
    if (!r->done) {
      SLUICE_RETURN_IF_ERROR(check_device(s.c, false));
      // The eager path: the head's slots are read here too, so a close owed for parts sent
      // eagerly goes out while the caller only tests (eager.cc).
      if (s.eg.on) {
        Status h = dp::eager_read_head(s);
        if (!h.is_ok() && !h.is_again()) return h;
      }
      // An open batch of eager sends goes now (eager.cc: it waits for the comm's next test).
      if (s.eg.open) SLUICE_RETURN_IF_ERROR(dp::eager_flush(s));
      if (r->posted) SLUICE_RETURN_IF_ERROR(poll_send(s));
      if (!r->done) return liveness_verdict(s.c);  // fails once the peer is gone
    }
    if (sizes != nullptr) sizes[0] = r->size;
    r->in_use = false;
    s.free_list[s.free_top++] = r->index;
    *done = 1;
    return Status::ok();
  }
  auto* r = static_cast<RecvReq*>(req);
  auto& rc = *static_cast<RecvComm*>(r->comm);
  std::lock_guard<std::mutex> lk(rc.mu);
  if (!r->done) {
    SLUICE_RETURN_IF_ERROR(check_device(rc.c, false));
    SLUICE_RETURN_IF_ERROR(dp::publish(rc));  // staged for want of CTS budget at its irecv
    SLUICE_RETURN_IF_ERROR(poll_recv(rc));
    SLUICE_RETURN_IF_ERROR(eager_poll(rc));
    if (!r->done) return liveness_verdict(rc.c);  // fails once the peer is gone
  }
  if (rc.eg.on) {
    // Receives complete in posting order (docs/eager.md): one completed from the eager ring
    // waits for every earlier one (none is left when every receive below it is done).
    for (uint64_t k = 1; rc.done_below < r->seq && k < wire::kFifoSlots && k <= r->seq; ++k) {
      const RecvReq& e = rc.pool[(r->seq - k) % wire::kFifoSlots];
      if (e.magic == Request::kMagic && e.in_use && !e.done && e.seq < r->seq) {
        SLUICE_RETURN_IF_ERROR(check_device(rc.c, false));
        SLUICE_RETURN_IF_ERROR(dp::publish(rc));
        SLUICE_RETURN_IF_ERROR(poll_recv(rc));
        SLUICE_RETURN_IF_ERROR(eager_poll(rc));
        if (!e.done) return Status::ok();
      }
    }
    rc.eg.book->finish(r->seq);
  }
  if (sizes != nullptr)
    for (int i = 0; i < r->n; ++i) sizes[i] = r->received[i];
  r->in_use = false;
  *done = 1;
  return Status::ok();
}

Status comm_stats(void* comm, CommStats* out) {
  auto* b = static_cast<CommBase*>(comm);
  if (b == nullptr || out == nullptr)
    return Status(Code::kInvalidArgument, "commStats: comm or output is NULL");
  const Conn* c = nullptr;
  if (b->kind == CommKind::kSend) c = &static_cast<SendComm*>(b)->c;
  if (b->kind == CommKind::kRecv) c = &static_cast<RecvComm*>(b)->c;
  if (c == nullptr)
    return Status(Code::kInvalidArgument, "commStats: not a live send/receive comm");
  out->messages = c->stats.messages.get();
  out->wrs = c->stats.wrs.get();
  out->doorbells = c->stats.doorbells.get();
  out->cts_writes = c->stats.cts_writes.get();
  out->cts_entries = c->stats.cts_entries.get();
  out->cts_probes = c->stats.cts_probes.get();
  out->ar_imm_writes = c->stats.ar_imm_writes.get();
  out->eager = c->stats.eager.get();
  out->eager_writes = c->stats.eager_writes.get();
  return Status::ok();
}

Status comm_stats_v2(void* comm, CommStatsV2* out) {
  if (out == nullptr) return Status(Code::kInvalidArgument, "commStats: output is NULL");
  SLUICE_RETURN_IF_ERROR(comm_stats(comm, &out->base));
  auto* b = static_cast<CommBase*>(comm);
  const Conn& c =
      b->kind == CommKind::kSend ? static_cast<SendComm*>(b)->c : static_cast<RecvComm*>(b)->c;
  // One entry per member device with the QPs that live on it and the payload bytes its paths
  // carried (Conn::member_bytes: a message striped over several members counts its part on each).
  // WRs, doorbells, completions and latency are the comm's, on member 0 (a one-member comm's are
  // all its own).
  static_assert(kMaxConnMembers <= kMaxMembers, "CommStatsV2 holds every member");
  out->nmembers = std::max(1, std::min(c.nmembers, kMaxMembers));
  for (int mi = 0; mi < out->nmembers; ++mi) {
    MemberStats& m = out->members[mi];
    m = MemberStats{};
    // A retired comm's devices may be gone (finalize): none named, as before fusion.
    const Device* d = c.retired ? nullptr : mi == 0 ? c.dev : c.members[mi].dev;
    m.dev = d != nullptr ? d->index : -1;
    m.name = d != nullptr ? d->name.c_str() : nullptr;
    static_assert(sizeof m.qpn / sizeof m.qpn[0] >= wire::kMaxQps);
    for (int q = 0; q < c.nqps && !c.retired; ++q) {
      if (c.qp[q] && c.qp_member[q] == mi) m.qpn[m.nqps++] = c.qp[q].qpn;
    }
  }
  for (int mi = 1; mi < out->nmembers; ++mi) out->members[mi].bytes = c.member_bytes[mi].get();
  MemberStats& m = out->members[0];
  m.bytes = c.nmembers > 1 ? c.member_bytes[0].get() : c.stats.bytes.get();
  m.wrs = c.stats.wrs.get();
  m.doorbells = c.stats.doorbells.get();
  m.completions = c.stats.completions.get();
  for (int i = 0; i < kLatencyBuckets; ++i) m.latency[i] = c.stats.latency[i].get();
  if (b->kind == CommKind::kRecv) out->flush_qpn = flush_stats(*static_cast<RecvComm*>(b)).qpn;
  // Failover, per path (a one-path comm: its one path, up). PathStats::state is the State's
  // number, as sluice_ext.h's SLUICE_PATH_* say.
  static_assert(static_cast<int>(failover::State::kUp) == 0 &&
                static_cast<int>(failover::State::kRamping) == 5);
  const PathFailover& f = c.fo;
  out->failover = f.on;
  out->eager = static_cast<EagerState>(c.stats.eager_state.load(std::memory_order_relaxed));
  out->eager_replays = c.stats.eager_replays.get();
  out->npaths = std::max(1, std::min(c.npaths, kMaxMembers));
  for (int p = 0; p < out->npaths; ++p) {
    PathStats& ps = out->paths[p];
    const failover::Path& fp = f.path[p];
    ps = PathStats{};
    ps.state = static_cast<int>(fp.state());
    ps.local_member = c.nqps > 0 ? c.qp_member[p * c.qpp] : 0;
    ps.remote_member = wire::path_member(p, std::max(c.remote_nmembers, 1));
    ps.share_pct = fp.share_pct();
    ps.epoch = fp.epoch();
    ps.failovers = fp.failovers();
    ps.failbacks = fp.failbacks();
    ps.attempts = static_cast<uint32_t>(fp.attempts());
    if (f.rec) {  // a failover comm's (made by fo_init)
      ps.bytes_replayed = f.rec->path_bytes_replayed[p];
      ps.chains_replayed = f.rec->path_chains_replayed[p];
      ps.last_stall_ms = f.rec->path_stall_ms[p];
    } else {
      ps.last_stall_ms = -1;
    }
  }
  return Status::ok();
}

void retire_comm(Conn& c, const std::string& why) {
  if (c.retired) return;
  c.failure = Status(Code::kInvalidUsage, why + " (comm " + c.describe_qp(0) + ")");
  liveness_stop(c);
  c.drain_at_close();
  for (int q = 0; q < c.nqps; ++q) c.qp[q].qp.reset();
  for (RetiredQp& rq : c.retired_list()) rq.qp.reset();
  release_deferred_mrs(c.dev->adapter, reinterpret_cast<uintptr_t>(c.owner),
                       nullptr);  // nothing of the comm touches memory now
  for (auto& m : c.members) m.cq.reset();
  for (auto& mr : c.mem_mr_more) mr.reset();
  c.cm.reset();  // rdmacm mode: the QPs' rdma_cm ids and event channel
  liveness_close_socket(c);
  // The QPs are gone: nothing lands in an eager ring any more, which goes back to its pool now,
  // while the adapter (and the pool) still live.
  if (c.owner->kind == CommKind::kSend) {
    auto* s = static_cast<SendComm*>(c.owner);
    s->eg.staging.release();
    s->eg.book_lease.release();
    s->eg.book = nullptr;
    s->eg.ref.reset();  // the pool's last user frees it
    s->eg.on = false;
    s->mem_mr.reset();
  } else {
    auto* r = static_cast<RecvComm*>(c.owner);
    r->eg.ring.release();  // and its book
    r->eg.book = nullptr;
    r->eg.ref.reset();
    r->eg.on = false;
    if (c.prof.start != nullptr) flush_stop_events(*r);
    r->flush.reset();
    r->mem_mr.reset();
  }
  c.dev = nullptr;
  c.retired = true;
}

int requests_using(void* comm, const MemHandle* mh, std::string* what) {
  auto* b = static_cast<CommBase*>(comm);
  const auto in = [mh](uintptr_t addr, size_t n) {
    return n > 0 && addr >= mh->base && addr - mh->base < mh->len;
  };
  // A failed comm is never used again: its QPs go to ERROR so the NIC stops; its requests still
  // count (deregMr defers) until close or finalize drained the queues.
  const auto stop = [](Conn& c) {
    if (!c.failed()) return;
    for (int q = 0; q < c.nqps; ++q)
      if (c.qp[q]) (void)qp_to_error(c.qp[q].get());
  };
  int n = 0;
  if (b->kind == CommKind::kSend) {
    auto* s = static_cast<SendComm*>(b);
    stop(s->c);
    for (int i = 0; i < SendComm::kPool; ++i) {
      const SendReq& r = s->pool[i];
      n += r.magic == Request::kMagic && r.in_use && !r.done && r.lkey == mh->lkey &&
           in(reinterpret_cast<uintptr_t>(r.data), r.size);
    }
    if (n > 0) *what = std::to_string(n) + " isend(s) on " + s->c.describe_qp(0);
  } else if (b->kind == CommKind::kRecv) {
    auto* r = static_cast<RecvComm*>(b);
    std::lock_guard<std::mutex> lk(r->mu);
    stop(r->c);
    for (int k = 0; k < wire::kFifoSlots; ++k) {
      const RecvReq& q = r->pool[k];
      if (q.magic != Request::kMagic || !q.in_use || q.done) continue;
      bool uses = false;
      for (int i = 0; i < q.n; ++i) {
        const wire::CtsEntry& e = *r->c.entry(r->stage, static_cast<uint32_t>(k), i);
        uses = uses || (e.rkey == mh->rkey && in(e.addr, q.posted[i]));
      }
      n += uses;
    }
    if (n > 0) *what = std::to_string(n) + " irecv(s) on " + r->c.describe_qp(0);
  }
  return n;
}

Status close_send(SendComm* s) {
  if (s == nullptr || s->kind != CommKind::kSend)
    return Status(Code::kInvalidArgument, "closeSend: not a send comm");
  s->kind = CommKind::kDead;
  dp::log_stats("send", s->c);
  if (s->c.prof.start != nullptr) dp::prof_close_send(*s);
  uint32_t wrs = 0;
  for (int q = 0; q < s->c.nqps; ++q) wrs += s->c.qp[q].sq_used;
  if (wrs > 0 || s->free_top < SendComm::kPool) {
    s->c.pending_work = std::to_string(SendComm::kPool - s->free_top) +
                        " isend(s) not tested done, " + std::to_string(wrs) +
                        " WR(s) on the send queues";
  }
  const bool counted = !s->c.retired;  // finalize took a retired comm off the count
  Adapter* a = s->c.dev != nullptr ? s->c.dev->adapter : nullptr;
  const auto key = reinterpret_cast<uintptr_t>(s);  // only a key once `s` is freed
  delete s;  // QPs to ERROR, CQ drained, QPs/CQ/MR/memory released (member order)
  release_deferred_mrs(a, key, nullptr);  // the NIC is done with the requests that deferred them
  if (Engine* e = engine(); e != nullptr && counted && e->open_comms.fetch_sub(1) == 1)
    close_idle_listen_ports();  // the last comm: a lingering listening socket goes with it
  return Status::ok();
}

Status close_recv(RecvComm* r) {
  if (r == nullptr || r->kind != CommKind::kRecv)
    return Status(Code::kInvalidArgument, "closeRecv: not a receive comm");
  r->kind = CommKind::kDead;
  dp::log_stats("receive", r->c);
  if (r->c.prof.start != nullptr) {
    std::lock_guard<std::mutex> lk(r->mu);
    dp::prof_close_recv(*r);
  }
  int live = 0;
  for (int i = 0; i < wire::kFifoSlots; ++i)
    live += r->pool[i].magic == Request::kMagic && r->pool[i].in_use;
  if (live > 0) r->c.pending_work = std::to_string(live) + " irecv(s) not tested done";
  const bool counted = !r->c.retired;
  Adapter* a = r->c.dev != nullptr ? r->c.dev->adapter : nullptr;
  const auto key = reinterpret_cast<uintptr_t>(r);
  delete r;
  release_deferred_mrs(a, key, nullptr);
  if (Engine* e = engine(); e != nullptr && counted && e->open_comms.fetch_sub(1) == 1)
    close_idle_listen_ports();  // the last comm: a lingering listening socket goes with it
  return Status::ok();
}

}  // namespace sluice
