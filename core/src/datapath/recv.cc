// The receive side: irecv takes a receive's clear-to-send (CTS) entries into the comm's stage and
// publishes them at once: its receive WRs (one chained ibv_post_recv per QP that gets any), then
// one RDMA WRITE of its entries into the sender's FIFO. poll_recv harvests the immediates and
// checks completion records (cts_match.cc).
//
// A publication touches this comm only. An entry whose QP has no CTS budget left (kCtsBudget
// writes not yet reclaimed by a signaled completion) stays staged, and the comm's own next irecv
// or test of a receive retries (that test polls the completions that reclaim the budget): it
// waits only for this NIC's completions, never for the peer. Entries staged back to back then go
// out in one WRITE (their FIFO slots are contiguous; two at the FIFO's wrap).
//
// Before issue 32 the entries of back-to-back receives were held for a later call of any comm in
// the process (a process-wide registry walked on every isend, irecv and test while anything was
// staged), to share one WRITE per 8 receives. In NCCL's posting pattern (one irecv per comm per
// proxy progress call, the comms interleaved) every receive got its own WRITE anyway, and the
// walk made every call's cost grow with the receive comms open: docs/benchmarks.md weighs it.
#include <arpa/inet.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "datapath/datapath_internal.h"
#include "datapath/wr_events.h"

namespace sluice {
namespace dp {
namespace {

// Posts n receive WRs (credits) on QP q, chained; wr_id = the slot of receive k for each.
Status post_credits(RecvComm& r, int q, const uint64_t* ks, int n) {
  ibv_recv_wr wrs[kRecvRqMaxDepth];
  for (int i = 0; i < n; ++i) {
    wrs[i] = ibv_recv_wr{};
    wrs[i].wr_id = ks[i] % wire::kFifoSlots;
    if (i > 0) wrs[i - 1].next = &wrs[i];
  }
  if (n == 0) return Status::ok();
  ibv_recv_wr* bad = nullptr;
  if (int rc = ibv_post_recv(r.c.qp[q].get(), wrs, &bad); rc != 0) {
    // The receive WRs before `bad` are posted: the comm cannot recover its accounting, so it
    // fails.
    return fail(r.c, Status(Code::kSystemError, "ibv_post_recv on " + r.c.describe_qp(q) +
                                                    " failed: " + std::strerror(rc)));
  }
  r.c.qp[q].rq_outstanding += static_cast<uint32_t>(n);
  r.c.stats.wrs.add(static_cast<uint64_t>(n));
  r.c.stats.doorbells.add(1);
  return Status::ok();
}

}  // namespace

Status post_plain_credits(RecvComm& r, int q, uint64_t n) {
  uint64_t ks[kRecvRqMaxDepth] = {};  // wr_ids only: a fused close names its receive itself
  for (uint64_t left = n; left > 0;) {
    const int k = static_cast<int>(std::min<uint64_t>(left, kRecvRqMaxDepth));
    SLUICE_RETURN_IF_ERROR(post_credits(r, q, ks, k));
    left -= static_cast<uint64_t>(k);
  }
  return Status::ok();
}

namespace {

// Receive WRs for receives [rq_posted, to): one chained ibv_post_recv per QP that gets any. A
// failover comm posts each chain's credit where fo_route sends the chain; one whose path is
// fencing is only counted (credits), and moved to the substitute once the fence is done.
Status post_receive_wrs(RecvComm& r, uint64_t to) {
  const uint64_t from = r.rq_posted;
  if (from >= to) return Status::ok();
  PathFailover& f = r.c.fo;
  for (int t = 0; t < r.c.nqps; ++t) {
    // rxe (Debian's 6.1) never flushes a receive WR posted to a QP already in ERROR: a fenced
    // QP's credits are only counted (below), and moved with the fence.
    if (f.on && r.c.qp[t].led.fenced) continue;
    uint64_t ks[kRecvRqMaxDepth];
    int nw = 0;
    for (uint64_t k = from; k < to; ++k) {
      // A receive completed from the eager ring gets no close: no credit either.
      if (r.pool[k % wire::kFifoSlots].resolved) continue;
      const uint32_t mask = r.pool[k % wire::kFifoSlots].paths;
      if (!f.on) {
        if (closes_on(r.c, mask, k, t)) ks[nw++] = k;
        continue;
      }
      for (int q = 0; q < r.c.nqps; ++q)
        if (closes_on(r.c, mask, k, q) && fo_route(f, r.c.qpp, q) == t) ks[nw++] = k;
    }
    SLUICE_RETURN_IF_ERROR(post_credits(r, t, ks, nw));
    if (f.on) ledger::on_credits(r.c.qp[t].led, static_cast<uint64_t>(nw));
  }
  if (f.on) {  // chains of a fencing path: owed on their own QP until the fence names a substitute
    for (uint64_t k = from; k < to; ++k) {
      if (r.pool[k % wire::kFifoSlots].resolved) continue;
      for (int q = 0; q < r.c.nqps; ++q)
        if (closes_on(r.c, r.pool[k % wire::kFifoSlots].paths, k, q) && fo_route(f, r.c.qpp, q) < 0)
          ledger::on_credits(r.c.qp[q].led, 1);
    }
  }
  r.rq_posted = to;
  return Status::ok();
}

// The QP that carries the clear-to-send write of receives from `from`: spread over the QPs of the
// paths that carry data (any of them reaches the sender's FIFO, with the key of the sender's
// member on that path), so a path of weight 0 (fallback only: a standby) carries no clear-to-send
// while another carries and the primary keeps its PCIe locality; on a failover comm by the live
// weights, and one of a path that carries. With every path weighted, every QP in turn.
int cts_qp(const RecvComm& r, uint64_t from) {
  const stripe::Paths& w = r.c.fo.on ? r.c.fo.live : r.c.paths;
  int carry[wire::kMaxQps];
  int n = 0;
  for (int k = 0; k < r.c.nqps; ++k)
    if (w.weight[k / r.c.qpp] > 0) carry[n++] = k;
  const int q = n > 0 ? carry[from % static_cast<uint64_t>(n)]
                      : static_cast<int>(from % static_cast<uint64_t>(r.c.nqps));
  if (!r.c.fo.on) return q;
  const int t = fo_route(r.c.fo, r.c.qpp, q);
  if (t >= 0) return t;
  for (int k = 0; k < r.c.nqps; ++k)
    if (r.c.fo.path[k / r.c.qpp].carries()) return k;
  return q;  // none carries: the comm is failing
}

// One RDMA WRITE of the CTS entries of receives [from, to), whose FIFO slots are contiguous (no
// wrap): from slot from % kFifoSlots up to the last entry of the last receive.
Status write_cts(RecvComm& r, uint64_t from, uint64_t to) {
  const uint32_t first = static_cast<uint32_t>(from % wire::kFifoSlots);
  const uint32_t last = static_cast<uint32_t>((to - 1) % wire::kFifoSlots);
  const uint32_t last_n = r.pool[last].n;
  const uint32_t cells = static_cast<uint32_t>(r.c.cells());  // a fused entry is a cell pair
  const uint32_t bytes = static_cast<uint32_t>(((last - first) * wire::kEntriesPerSlot + last_n) *
                                               cells * sizeof(wire::CtsEntry));
  const size_t at = static_cast<size_t>(first) * wire::kEntriesPerSlot * cells;
  wire::CtsEntry* e = &r.stage[at];
  const int q = cts_qp(r, from);
  if (r.eg.on) {  // every entry carries the eager credit as it stands now (wire/eager.h)
    const uint16_t credit = r.eg.book->credit();
    for (uint64_t k = from; k < to; ++k) {
      const uint32_t sl = static_cast<uint32_t>(k % wire::kFifoSlots);
      for (uint32_t i = 0; i < r.pool[sl].n; ++i)
        r.c.entry(r.stage, sl, static_cast<int>(i))->reserved = credit;
    }
  }
  ibv_sge sge{reinterpret_cast<uintptr_t>(e), bytes, local_mem_lkey(r.c, q)};
  ibv_send_wr w{};
  w.wr_id = kWrUnsignaled;
  w.sg_list = &sge;
  w.num_sge = 1;
  w.opcode = IBV_WR_RDMA_WRITE;
  w.wr.rdma.remote_addr = r.remote_fifo + at * sizeof(wire::CtsEntry);
  w.wr.rdma.rkey = remote_mem_rkey(r.c, q);
  if (bytes <= r.c.max_inline) w.send_flags |= IBV_SEND_INLINE;
  // A failover's rewrite is signaled: a later entry for the same slot waits for its completion.
  const bool rewrite = r.rewrite.rewrites(from, to);
  const bool signal = rewrite || r.c.qp[q].cts_unsignaled + 1 >= kCtsSignalEvery;
  if (signal) {
    w.send_flags |= IBV_SEND_SIGNALED;
    w.wr_id = kWrCts | (static_cast<uint64_t>(q) << 32) | (r.c.qp[q].cts_unsignaled + 1);
  }
  if (r.c.prof.start != nullptr) [[unlikely]]
    prof_cts(r, from, to, w, q);
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(r.c.qp[q].get(), &w, &bad); rc != 0) {
    return fail(
        r.c, Status(Code::kSystemError, "ibv_post_send (clear-to-send) on " + r.c.describe_qp(q) +
                                            " failed: " + std::strerror(rc)));
  }
  r.c.qp[q].cts_unsignaled = signal ? 0 : r.c.qp[q].cts_unsignaled + 1;
  r.c.qp[q].cts_tail_from = from;
  if (++r.c.qp[q].cts_posted; rewrite) r.c.qp[q].cts_rewrite = r.c.qp[q].cts_posted;
  const int64_t t = stat_clock_ns();
  for (uint64_t k = from; k < to; ++k) r.pool[k % wire::kFifoSlots].posted_ns = t;
  ++r.c.qp[q].cts_outstanding;
  r.c.stats.wrs.add(1);
  r.c.stats.doorbells.add(1);
  r.c.stats.cts_writes.add(1);
  r.c.stats.cts_entries.add(to - from);
  r.published = to;
  if (r.eg.on) {
    r.eg.book->on_credit_written();
    r.eg.held = 0;
    r.eg.flush = false;
  }
  return Status::ok();
}

// Room for one more CTS write on the QP that would carry receive `from`'s publication.
Status cts_room(RecvComm& r, uint64_t from, bool* fits) {
  const int q = cts_qp(r, from);
  *fits = r.c.qp[q].cts_outstanding < kCtsBudget;
  if (*fits) return Status::ok();
  SLUICE_RETURN_IF_ERROR(poll_recv(r));
  *fits = r.c.qp[q].cts_outstanding < kCtsBudget;
  return Status::ok();
}

}  // namespace

Status post_cts_probe(RecvComm& r, int q) {
  // Zero bytes at the peer's FIFO (its address and rkey, valid whatever the provider checks):
  // nothing is written, but the WR completes only after every earlier WR of the QP did.
  ibv_send_wr w{};
  w.wr_id = kWrCts | (static_cast<uint64_t>(q) << 32) | (r.c.qp[q].cts_unsignaled + 1);
  w.opcode = IBV_WR_RDMA_WRITE;
  w.send_flags = IBV_SEND_SIGNALED;
  w.wr.rdma.remote_addr = r.remote_fifo;
  w.wr.rdma.rkey = remote_mem_rkey(r.c, q);
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(r.c.qp[q].get(), &w, &bad); rc != 0) {
    return fail(
        r.c, Status(Code::kSystemError, "ibv_post_send (clear-to-send probe) on " +
                                            r.c.describe_qp(q) + " failed: " + std::strerror(rc)));
  }
  r.c.qp[q].cts_unsignaled = 0;
  ++r.c.qp[q].cts_outstanding;
  ++r.c.qp[q].cts_posted;
  r.c.qp[q].cts_probing = true;
  r.c.stats.wrs.add(1);
  r.c.stats.doorbells.add(1);
  r.c.stats.cts_probes.add(1);
  return Status::ok();
}

Status post_eager_grant(RecvComm& r, int q) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(r.eg.src), sizeof(wire::EagerGrant),
              local_mem_lkey(r.c, q)};
  ibv_send_wr w{};
  w.wr_id = kWrCts | (static_cast<uint64_t>(q) << 32) | (r.c.qp[q].cts_unsignaled + 1);
  w.sg_list = &sge;
  w.num_sge = 1;
  w.opcode = IBV_WR_RDMA_WRITE;
  w.send_flags = IBV_SEND_SIGNALED;
  w.wr.rdma.remote_addr = r.eg.remote_block;
  w.wr.rdma.rkey = remote_mem_rkey(r.c, q);
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(r.c.qp[q].get(), &w, &bad); rc != 0) {
    return fail(r.c,
                Status(Code::kSystemError, "ibv_post_send (eager grant) on " + r.c.describe_qp(q) +
                                               " failed: " + std::strerror(rc)));
  }
  r.c.qp[q].cts_unsignaled = 0;
  ++r.c.qp[q].cts_outstanding;
  // A grant written again by a failover's rewrite is waited for as its entries are.
  if (++r.c.qp[q].cts_posted; r.rewrite.is_open()) r.c.qp[q].cts_rewrite = r.c.qp[q].cts_posted;
  r.c.stats.wrs.add(1);
  r.c.stats.doorbells.add(1);
  r.eg.grant_sent = true;
  return Status::ok();
}

namespace {

// Receives [published, end) go out.
Status publish_staged(RecvComm& r, uint64_t end) {
  SLUICE_RETURN_IF_ERROR(r.c.failure);
  SLUICE_RETURN_IF_ERROR(post_receive_wrs(r, end));
  while (r.published < end) {
    const uint64_t from = r.published;
    // Up to the FIFO's wrap: slots must be contiguous in the peer's FIFO.
    const uint64_t wrap = (from / wire::kFifoSlots + 1) * wire::kFifoSlots;
    const uint64_t to = std::min<uint64_t>(end, wrap);
    bool fits = false;
    SLUICE_RETURN_IF_ERROR(cts_room(r, from, &fits));
    if (!fits) break;  // stays staged: the comm's own next irecv or test tries again
    SLUICE_RETURN_IF_ERROR(write_cts(r, from, to));
  }
  return Status::ok();
}

}  // namespace

namespace {

// After a failover's rewrite (rules/rewrite_gate.h): the end of what may be published now.
// (The completions are taken by the comm's polls: a receive whose entries wait here is tested, and
// its test polls.)
uint64_t rewrite_limit(RecvComm& r, uint64_t end) {
  bool landed = true;
  for (int q = 0; q < r.c.nqps; ++q)
    landed = landed && r.c.qp[q].cts_completed() >= r.c.qp[q].cts_rewrite;
  if (r.rewrite.close_if(r.published, landed)) return end;
  return std::max(r.published, r.rewrite.limit(end));
}

}  // namespace

Status publish(RecvComm& r) {
  if (r.published == r.seq) return r.c.status();
  // The eager path holds back entries (docs/eager.md): of receives completed from the ring, until a
  // batch or a credit is due, and of receives whose message is expected in the ring.
  uint64_t end = eager_publish_end(r);
  if (r.rewrite.is_open()) [[unlikely]]
    end = rewrite_limit(r, end);
  if (end == r.published) return r.c.status();
  if (r.eg.on && r.eg.ring.held() && !r.eg.grant_sent) {
    // The grant goes before the first entries that could carry a credit for its ring.
    bool fits = false;
    SLUICE_RETURN_IF_ERROR(cts_room(r, r.published, &fits));
    if (!fits) return r.c.status();
    SLUICE_RETURN_IF_ERROR(post_eager_grant(r, cts_qp(r, r.published)));
  }
  // A failed comm has nothing left to publish: every later call reports its failure.
  return publish_staged(r, end);
}

Status republish_from(RecvComm& r) {
  return publish(r);
}

namespace {

// One completion of the receive comm's CQ (member `member`), from a current incarnation's QP q.
Status take_recv_wc(RecvComm& r, const ibv_wc& w, int member, int q, int64_t* now) {
  // Every receive WR is polled, whatever its status (close's drain, the fence's wait).
  if (w.wr_id < wire::kFifoSlots && r.c.qp[q].rq_outstanding > 0) --r.c.qp[q].rq_outstanding;
  if (w.status != IBV_WC_SUCCESS) {
    if (fo_error_wc(r.c, w, q, "receive")) return Status::ok();  // failover takes it
    return fail(r.c, completion_error(r.c, w, "receive", member));
  }
  // A wr_id none of ours could carry is never used as an index (a Sluice bug, or a WR someone
  // else posted on our QP): the comm fails naming it.
  const uint32_t cts_q = static_cast<uint32_t>(w.wr_id >> 32) & 0xffu;
  if ((w.wr_id & kWrCts) ? cts_q >= static_cast<uint32_t>(r.c.nqps)
                         : w.wr_id >= static_cast<uint64_t>(wire::kFifoSlots))
    return fail(r.c, Status(Code::kInternalError, "completion with unknown wr_id " +
                                                      std::to_string(w.wr_id) + " on " +
                                                      r.c.describe_qp(q)));
  if (w.wr_id & kWrCts) {
    QpLife& l = r.c.qp[cts_q];
    l.cts_outstanding -= std::min(l.cts_outstanding, static_cast<uint32_t>(w.wr_id & 0xffffffffu));
    l.since_ns = 0;         // progress on that QP (progress.h)
    l.cts_probing = false;  // the first signaled completion after a probe is its own
    return Status::ok();
  }
  if (r.c.fo.on && ntohl(w.imm_data) == wire::kImmPathCheck) {  // failback's check
    fo_check_done(r.c, q);
    return Status::ok();
  }
  // A fused comm's close names its receive (kImmRecord | slot): its receive WR is a credit of
  // the QP it arrived on, whichever receive posted it (failover redirects closes).
  uint32_t imm = ntohl(w.imm_data);
  uint64_t slot = w.wr_id;
  if (r.c.npaths > 1) {  // wire.h: the slot in bits 30..26, or kImmRecord | slot
    slot = imm & wire::kImmRecord ? imm & ~wire::kImmRecord : imm >> wire::kImmSlotShift;
    if (slot >= wire::kFifoSlots)
      return fail(
          r.c, on_qp(r.c, q,
                     Status(Code::kRemoteError, "a close whose immediate " + std::to_string(imm) +
                                                    " names no receive slot")));
    if ((imm & wire::kImmRecord) == 0) imm &= wire::kImmFusedSizeMax;
  }
  RecvReq& req = r.pool[slot];
  if (r.c.fo.on) {
    // The one place a close is counted (health/qp_ledger.h): never after this QP's FENCE.
    if (Status st = ledger::on_close(r.c.qp[q].led); !st.is_ok())
      return fail(r.c, on_qp(r.c, q, st));
    // (A receive done from the ring before its close came waits for it: close_owed, below.)
    if (!req.close_owed &&
        (req.magic != Request::kMagic || !req.in_use || req.done || req.pending == 0))
      return fail(
          r.c, on_qp(r.c, q,
                     Status(Code::kInternalError, "a close for slot " + std::to_string(slot) +
                                                      ", whose receive is not waiting for one")));
  }
  if (req.close_owed) {  // done already (every part came eagerly): its zero-length close
    bool eager_part = false;
    bool rec = false;
    size_t ignored = 0;
    if (Status st = cts::check_imm(imm, req.posted[0], &rec, &ignored, true, &eager_part);
        !st.is_ok() || (!eager_part && !rec)) {
      return fail(
          r.c, on_qp(r.c, q,
                     Status(Code::kRemoteError, "the close of receive " + std::to_string(req.seq) +
                                                    ", whose parts all came eagerly, names data")));
    }
    if (--req.pending == 0) req.close_owed = false;
    return Status::ok();
  }
  if (r.eg.on && !r.c.fo.on &&
      (req.magic != Request::kMagic || !req.in_use || req.done || req.pending == 0)) {
    return fail(r.c,
                on_qp(r.c, q,
                      Status(Code::kRemoteError, "a close for slot " + std::to_string(slot) +
                                                     ", whose receive is not waiting for one")));
  }
  bool eager_part = false;
  if (Status st = cts::check_imm(imm, req.posted[0], &req.has_record, &req.received[0], r.eg.on,
                                 &eager_part);
      !st.is_ok()) {
    return fail(r.c, on_qp(r.c, q, st));
  }
  if (eager_part) req.eager_want |= 1u;
  if (r.eg.on) r.eg.head = std::max(r.eg.head, req.seq + 1);  // the sender read its slot
  if (--req.pending > 0) return Status::ok();
  if (req.has_record) {
    uint8_t eager_mask = 0;
    Status st = cts::check_record(r.records[req.seq % wire::kFifoSlots], req.seq, req.n, req.posted,
                                  req.tags, req.received, r.eg.on ? &eager_mask : nullptr);
    if (!st.is_ok()) return fail(r.c, on_qp(r.c, q, st));
    req.eager_want |= eager_mask;
  }
  return finish_recv(r, req, now);
}

Status poll_recv_cq(RecvComm& r, int member) {
  ibv_wc wc[kPollBatch];
  int n = ibv_poll_cq(r.c.members[member].cq.get(), kPollBatch, wc);
  if (n < 0)
    return fail(r.c, Status(Code::kSystemError, "ibv_poll_cq failed on " + r.c.describe_qp(0)));
  if (n > 0) r.c.stats.completions.add(static_cast<uint64_t>(n));
  int64_t now = 0;
  for (int k = 0; k < n; ++k) {
    const int q = qp_index(r.c, wc[k].qp_num, member);
    if (q < 0) {  // a retired incarnation's (failback), or of none of ours
      SLUICE_RETURN_IF_ERROR(fo_stale_wc(r.c, wc[k], member, "receive"));
      continue;
    }
    if (fo_hold_wc(r, wc[k], member, q)) continue;  // SLUICE_TEST_HOLD_RQ (failover_recv.cc)
    SLUICE_RETURN_IF_ERROR(take_recv_wc(r, wc[k], member, q, &now));
  }
  return Status::ok();
}

}  // namespace

// Every member's CQ in turn (a one-member comm polls one, as before fusion).
Status poll_recv(RecvComm& r) {
  for (int m = 0; m < r.c.nmembers; ++m) {
    // A member whose device is dead (DEVICE_FATAL) reports nothing more: its CQ is left alone.
    if (r.c.fo.dead_members >> m & 1u) continue;
    SLUICE_RETURN_IF_ERROR(poll_recv_cq(r, m));
  }
  return Status::ok();
}

Status take_held_wc(RecvComm& r, const ibv_wc& w, int member) {
  const int q = qp_index(r.c, w.qp_num, member);
  if (q < 0) return fo_stale_wc(r.c, w, member, "receive");
  int64_t now = 0;
  return take_recv_wc(r, w, member, q, &now);
}

}  // namespace dp

Status irecv(RecvComm* r, int n, void* const* data, const size_t* sizes, const int* tags,
             MemHandle* const* mhs, Request** out, void* const* parents) {
  *out = nullptr;
  if (r == nullptr || r->kind != CommKind::kRecv)
    return Status(Code::kInvalidArgument, "irecv: not a receive comm");
  if (n < 1 || n > wire::kEntriesPerSlot) {
    return Status(Code::kInvalidArgument, "irecv: n = " + std::to_string(n) + " outside 1.." +
                                              std::to_string(wire::kEntriesPerSlot));
  }
  std::lock_guard<std::mutex> lk(r->mu);
  SLUICE_RETURN_IF_ERROR(dp::check_device(r->c));
  for (int i = 0; i < n; ++i) {
    if (sizes[i] > 0 && (!dp::valid_mh(r->c, mhs[i]) || !mhs[i]->contains(data[i], sizes[i])))
      return dp::bad_buffer(r->c, "irecv", data[i], sizes[i], mhs[i]);
  }
  const uint64_t seq = r->seq;
  const uint32_t slot = static_cast<uint32_t>(seq % wire::kFifoSlots);
  RecvReq& req = r->pool[slot];
  if (req.magic != Request::kMagic) {  // first use of this pool entry
    new (&req) RecvReq();
    req.comm = r;
  }
  if (req.in_use || req.close_owed || !dp::eager_slot_free(*r, seq)) {
    // 32 receives in flight, or (eager) the slot's previous use waits for its owed close or for
    // the sender to have read its entry. Both may be here unread: the close on the CQ, the
    // sender's head in the header of a message that landed in the ring after its last read (the
    // comm may have nothing else to test). Then make sure the peer can complete what is in flight.
    if (r->eg.on) {
      SLUICE_RETURN_IF_ERROR(dp::poll_recv(*r));
      SLUICE_RETURN_IF_ERROR(dp::eager_poll(*r));
    }
    if (req.in_use || req.close_owed || !dp::eager_slot_free(*r, seq)) {
      SLUICE_RETURN_IF_ERROR(dp::publish(*r));
      return Status::again();
    }
  }
  req.in_use = true;
  req.done = false;
  req.has_record = false;
  req.n = static_cast<uint8_t>(n);
  req.seq = seq;
  // Fusion: the paths this receive is expected on, decided here, once, and published in its
  // entries (wire::CtsMembers); the sender follows them, so both ends count the same closes.
  req.paths = 1;
  req.shares = 0;
  if (r->c.npaths > 1) {
    size_t total = 0;
    for (int i = 0; i < n; ++i) total += sizes[i];
    // A path ramping back in (failback) carries its step's part of its weight: in the choice of a
    // small receive's path and, with path-message set 2, in the cut of a striped one's bytes
    // (its share travels in the entries: both ends cut by it).
    const PathFailover& f = r->c.fo;
    uint32_t shares = 0;
    for (int p = 0; f.on && p < r->c.npaths; ++p) {
      const int pct = f.path[p].share_pct();
      if (pct > 0 && pct < 100) shares |= static_cast<uint32_t>(pct) << (8 * p);
    }
    req.paths =
        stripe::paths_of(f.on ? f.live : r->c.paths, seq, total, r->c.stripe_min, shares != 0);
    if (f.path_set >= 2) req.shares = shares & stripe::share_mask(req.paths);
  }
  req.pending = static_cast<uint8_t>(stripe::closes(req.paths, r->c.split, r->c.qpp));
  if (r->c.prof.start != nullptr) [[unlikely]]
    dp::prof_recv_posted(req, n, parents);
  for (int i = 0; i < n; ++i) {
    req.posted[i] = sizes[i];
    req.received[i] = 0;
    req.tags[i] = tags[i];
    wire::CtsEntry& e = *r->c.entry(r->stage, slot, i);
    e.addr = reinterpret_cast<uintptr_t>(data[i]);
    e.size = static_cast<uint32_t>(std::min<size_t>(sizes[i], UINT32_MAX));
    e.rkey = sizes[i] > 0 ? mhs[i]->rkey : 0;
    e.tag = tags[i];
    e.nreqs = static_cast<uint8_t>(n);
    e.index = static_cast<uint8_t>(i);
    e.seq = seq + 1;
    if (r->c.npaths > 1) {  // the cell before the entry: its key on every member, the paths
      wire::CtsMembers x{};
      for (int m = 0; m < r->c.nmembers && sizes[i] > 0; ++m)
        x.rkey[m] = mhs[i]->on(r->c.members[m].dev->adapter)->rkey;  // valid_mh: on every one
      x.paths = req.paths;
      x.shares = req.shares;
      std::memcpy(&e - 1, &x, sizeof x);
    }
  }
  SLUICE_RETURN_IF_ERROR(dp::eager_recv_post(*r, req, mhs, sizes));
  ++r->seq;
  *out = &req;
  SLUICE_RETURN_IF_ERROR(dp::publish(*r));  // at once (or at the comm's next call: no budget)
  return Status::ok();
}

}  // namespace sluice
