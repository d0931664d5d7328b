// Profiler events of the data path (wr_events.h).
#include "datapath/wr_events.h"

#include <algorithm>

#include "datapath/datapath_internal.h"
#include "datapath/flush.h"

namespace sluice {

namespace dp {
namespace {

size_t wr_bytes(const ibv_send_wr& w) {
  size_t n = 0;
  for (int i = 0; i < w.num_sge; ++i) n += w.sg_list[i].length;
  return n;
}

void* start(const Conn& c, void* parent, const ibv_send_wr& w, uint32_t qpn, size_t length) {
  if (parent == nullptr) return nullptr;  // NCCL gave no handle for this message: no event
  WrEvent ev;
  ev.member = 0;
  ev.wr_id = w.wr_id;
  ev.opcode = static_cast<int>(w.opcode);
  ev.qpn = qpn;
  ev.length = length;
  return c.prof.start(c.prof.ctx, parent, ev);
}

}  // namespace

void prof_send_chain(const Conn& c, int q, const ibv_send_wr* wrs, const cts::LaneWr* plan, int nw,
                     SendReq* const* reqs, int nreqs) {
  const uint32_t qpn = c.qp[q].qpn;
  SendReq* leader = reqs[0];
  for (int i = 0; i < nreqs; ++i) {
    SendReq* r = reqs[i];
    r->ev[q] = nullptr;
    // One event per message and chain, from its first WRITE, for all its bytes on the chain (a
    // message longer than 1 MiB is several WRITEs: cts::plan_lane).
    int first = -1;
    size_t len = 0;
    for (int k = 0; k < nw; ++k) {
      if (plan[k].msg != i) continue;
      if (first < 0) first = k;
      len += plan[k].len;
    }
    if (first >= 0) r->ev[q] = start(c, r->parent, wrs[first], qpn, len);
  }
  // A separate closing WRITE_WITH_IMM (grouped receive, or an empty part): the leader's.
  leader->close_ev[q] = nw > 0 && plan[nw - 1].msg < 0
                            ? start(c, leader->parent, wrs[nw - 1], qpn, wr_bytes(wrs[nw - 1]))
                            : nullptr;
}

void prof_eager_send(const Conn& c, SendReq& r, const ibv_send_wr& w, int q, int ev) {
  r.ev[ev] = start(c, r.parent, w, c.qp[q].qpn, wr_bytes(w));
}

void prof_send_done(SendComm& s, SendReq& leader, int q) {
  for (int i = 0; i < leader.group_n; ++i) prof_stop(s.c, s.pool[leader.group[i]].ev[q]);
  prof_stop(s.c, leader.close_ev[q]);
}

void prof_recv_posted(RecvReq& req, int n, void* const* parents) {
  for (int i = 0; i < wire::kEntriesPerSlot; ++i) {
    req.parents[i] = parents != nullptr && i < n ? parents[i] : nullptr;
    req.cts_ev[i] = nullptr;
  }
}

void prof_cts(RecvComm& r, uint64_t from, uint64_t to, const ibv_send_wr& w, int q) {
  const uint32_t qpn = r.c.qp[q].qpn;
  for (uint64_t k = from; k < to; ++k) {
    RecvReq& req = r.pool[k % wire::kFifoSlots];
    // A receive published again (failover re-publishes every receive from the oldest one not yet
    // complete) keeps the event of its first clear-to-send write, which stops when it completes;
    // one among them that completed already gets none (its event stopped at its completion).
    if (req.seq != k || req.done || !req.in_use) continue;
    for (int i = 0; i < req.n; ++i)
      if (req.cts_ev[i] == nullptr)
        req.cts_ev[i] = start(r.c, req.parents[i], w, qpn, sizeof(wire::CtsEntry));
  }
}

void prof_recv_done(RecvComm& r, RecvReq& req) {
  for (int i = 0; i < req.n; ++i) prof_stop(r.c, req.cts_ev[i]);
}

void* prof_flush_start(RecvComm& r, const ibv_send_wr& w, uint32_t qpn, const void* data) {
  void* parent = nullptr;
  uint64_t best = 0;
  const auto addr = reinterpret_cast<uintptr_t>(data);
  for (int k = 0; k < wire::kFifoSlots; ++k) {
    const RecvReq& req = r.pool[k];
    if (req.magic != Request::kMagic) continue;
    for (int i = 0; i < req.n; ++i) {
      if (r.c.entry(r.stage, static_cast<uint32_t>(k), i)->addr == addr && req.seq + 1 > best) {
        best = req.seq + 1;
        parent = req.parents[i];
      }
    }
  }
  return start(r.c, parent, w, qpn, wr_bytes(w));
}

void prof_close_send(SendComm& s) {
  for (int p = 0; p < SendComm::kPool; ++p) {
    SendReq& r = s.pool[p];
    if (r.magic != Request::kMagic) continue;
    for (int lane = 0; lane < wire::kMaxQps; ++lane) {
      prof_stop(s.c, r.ev[lane]);
      prof_stop(s.c, r.close_ev[lane]);
    }
  }
}

void prof_close_recv(RecvComm& r) {
  for (int k = 0; k < wire::kFifoSlots; ++k) {
    RecvReq& req = r.pool[k];
    if (req.magic != Request::kMagic) continue;
    for (void*& ev : req.cts_ev) prof_stop(r.c, ev);
  }
  flush_stop_events(r);
}

}  // namespace dp

Status set_profiler(void* comm, const ProfilerHook& hook) {
  auto* b = static_cast<CommBase*>(comm);
  if (b == nullptr) return Status(Code::kInvalidArgument, "set_profiler: comm is NULL");
  Conn* c = nullptr;
  if (b->kind == CommKind::kSend) c = &static_cast<SendComm*>(b)->c;
  if (b->kind == CommKind::kRecv) c = &static_cast<RecvComm*>(b)->c;
  if (c == nullptr) return Status(Code::kInvalidArgument, "set_profiler: not a send/receive comm");
  const Engine* e = engine();
  if (e != nullptr && !e->config().profiler_events)
    return Status::ok();  // SLUICE_PROFILER_EVENTS=0
  if (hook.start != nullptr && hook.stop == nullptr)
    return Status(Code::kInvalidArgument, "set_profiler: start without stop");
  c->prof = hook;
  return Status::ok();
}

}  // namespace sluice
