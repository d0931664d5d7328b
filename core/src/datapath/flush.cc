// Loopback RDMA READ flush (see flush.h). Owns its CQ, QP, bounce MR and request pool; the QP is
// connected to itself (RTR with its own QPN and GID/LID), so the READ leaves the NIC and comes back
// through it exactly like a remote READ would.
#include "datapath/flush.h"

#include <cstring>
#include <mutex>
#include <new>

#include "datapath/wr_events.h"
#include "sluice/core/base/log.h"
#include "sluice/core/base/qp.h"

namespace sluice {

// Flushes in flight per receive comm: NCCL keeps at most NCCL_NET_MAX_REQUESTS per comm.
inline constexpr int kFlushPool = kMaxRequests;

// One loopback QP per member adapter of the comm (a fused comm's members on other adapters get
// their own): a NIC's READ orders only the writes that NIC placed, so a striped message needs a
// READ through every adapter that may have carried part of it.
struct FlushLane {
  // Dependency order (released in reverse): the bounce word's MR here, the CQ, then the QP.
  verbs::Mr bounce_mr;
  verbs::Cq cq;
  verbs::Qp qp;
  Adapter* adapter = nullptr;
  std::string desc;  // "loopback qpn 23 on rxe0:1"
};

class Flush {
 public:
  // Declared in dependency order (released in reverse): memory, then the lanes (MR, CQ, QP).
  NumaBuffer bounce;  // one page; the first byte receives the READs
  FlushLane lanes[kMaxConnMembers];
  int nlanes = 0;
  FlushReq pool[kFlushPool];
  uint64_t posted = 0;
  uint64_t completed = 0;
};

void FlushDeleter::operator()(Flush* f) const {
  if (f != nullptr)
    for (int i = 0; i < f->nlanes; ++i)
      if (f->lanes[i].qp) (void)qp_to_error(f->lanes[i].qp.get());
  delete f;
}

namespace {

Status fail(Conn& c, Status st) {
  if (!c.failed()) {
    c.failure = std::move(st);
    liveness_tell_peer(c);  // the peer's next call fails with this reason (liveness.h)
  }
  return c.failure;
}

Status create_lane(RecvComm& r, Device& d, void* bounce, FlushLane* f) {
  const Config& cfg = engine()->config();
  f->adapter = d.adapter;
  f->cq.reset(ibv_create_cq(d.adapter->ctx.get(), kFlushPool, nullptr, nullptr, 0));
  if (!f->cq) return errno_status(Code::kSystemError, "flush: ibv_create_cq on " + d.name, errno);
  QpCaps caps;
  caps.max_send_wr = kFlushPool;
  caps.max_recv_wr = 1;
  auto qp = create_rc_qp(d.adapter->pd.get(), f->cq.get(), caps);
  if (!qp.is_ok()) return qp.status().with_context("flush loopback QP on " + d.name);
  f->qp = std::move(qp).value();
  f->desc = "loopback qpn " + std::to_string(f->qp->qp_num) + " on " + d.name + ":" +
            std::to_string(d.port);
  InitParams ip;
  ip.port = d.port;
  ip.pkey_index = static_cast<uint16_t>(cfg.pkey_index);
  ip.access = IBV_ACCESS_REMOTE_READ;  // the QP is the target of its own READs
  SLUICE_RETURN_IF_ERROR(qp_to_init(f->qp.get(), ip).with_context(f->desc));
  const uint32_t psn = random_psn();
  RtrParams rp;
  rp.path_mtu = d.attr.active_mtu;
  rp.dest_qpn = f->qp->qp_num;
  rp.rq_psn = psn;
  rp.max_dest_rd_atomic = 1;
  rp.min_rnr_timer = static_cast<uint8_t>(cfg.min_rnr_timer);
  rp.port = d.port;
  rp.is_global = d.roce;
  std::memcpy(rp.dgid.raw, d.gid.gid.data(), 16);
  rp.sgid_index = static_cast<uint8_t>(d.gid.index < 0 ? 0 : d.gid.index);
  rp.dlid = d.attr.lid;
  SLUICE_RETURN_IF_ERROR(qp_to_rtr(f->qp.get(), rp).with_context(f->desc));
  RtsParams sp;
  sp.sq_psn = psn;
  sp.timeout = static_cast<uint8_t>(cfg.ib_timeout);
  sp.retry_cnt = static_cast<uint8_t>(cfg.retry_cnt);
  sp.rnr_retry = static_cast<uint8_t>(cfg.rnr_retry);
  sp.max_rd_atomic = 1;
  SLUICE_RETURN_IF_ERROR(qp_to_rts(f->qp.get(), sp).with_context(f->desc));
  f->bounce_mr.reset(ibv_reg_mr(d.adapter->pd.get(), bounce, 4096, IBV_ACCESS_LOCAL_WRITE));
  if (!f->bounce_mr)
    return errno_status(Code::kSystemError, "flush: ibv_reg_mr(bounce word) on " + d.name, errno);
  SLUICE_INFO(kSubNet, "flush: %s created for receives from %s", f->desc.c_str(), r.c.peer.c_str());
  return Status::ok();
}

Result<std::unique_ptr<Flush, FlushDeleter>> create_flush(RecvComm& r) {
  std::unique_ptr<Flush, FlushDeleter> f(new Flush());
  auto mem = NumaBuffer::allocate(4096, r.c.dev->adapter->locality.numa_node);
  if (!mem.is_ok()) return mem.status().with_context("flush bounce buffer");
  f->bounce = std::move(mem).value();
  for (int m = 0; m < r.c.nmembers; ++m) {  // one lane per distinct adapter, in member order
    Device& d = *r.c.members[m].dev;
    bool have = false;
    for (int i = 0; i < f->nlanes; ++i) have = have || f->lanes[i].adapter == d.adapter;
    if (have) continue;
    SLUICE_RETURN_IF_ERROR(create_lane(r, d, f->bounce.data(), &f->lanes[f->nlanes]));
    ++f->nlanes;
  }
  for (int i = 0; i < kFlushPool; ++i) {
    f->pool[i].is_flush = true;
    f->pool[i].comm = &r;
    f->pool[i].index = static_cast<uint16_t>(i);
  }
  return f;
}

Status poll(RecvComm& r, Flush& f) {
  for (int i = 0; i < f.nlanes; ++i) {
    FlushLane& l = f.lanes[i];
    ibv_wc wc[8];
    const int n = ibv_poll_cq(l.cq.get(), 8, wc);
    if (n < 0)
      return fail(r.c, Status(Code::kSystemError, "flush: ibv_poll_cq failed on " + l.desc));
    for (int k = 0; k < n; ++k) {
      if (wc[k].status != IBV_WC_SUCCESS) {
        return fail(r.c, Status(Code::kSystemError,
                                "flush READ failed on " + l.desc + ": status " +
                                    ibv_wc_status_str(wc[k].status) +
                                    "; likely cause: " + verbs::wc_status_hint(wc[k].status) +
                                    " (the buffer's MR lacks remote read, or was deregistered)"));
      }
      if (wc[k].wr_id < static_cast<uint64_t>(kFlushPool)) {
        FlushReq& q = f.pool[wc[k].wr_id];
        if (q.pending > 0 && --q.pending == 0) q.done = true;
      }
      ++f.completed;
    }
  }
  return Status::ok();
}

}  // namespace

Status flush_post(RecvComm& r, int n, void* const* data, const int* sizes, MemHandle* const* mhs,
                  Request** out) {
  *out = nullptr;
  SLUICE_RETURN_IF_ERROR(r.c.failure);
  const Config& cfg = engine()->config();
  if (cfg.gdr_flush_disable) return Status::ok();
  int last = -1;
  for (int i = 0; i < n; ++i)
    if (sizes[i] > 0) last = i;
  if (last < 0) return Status::ok();  // nothing was received: nothing to flush
  const MemHandle* mh = mhs[last];
  if (mh == nullptr || mh->magic != MemHandle::kMagic)
    return Status(Code::kInvalidArgument,
                  "iflush: mhandles[" + std::to_string(last) + "] is not a Sluice memory handle");
  if (mh->type != MemType::kCuda && !cfg.force_flush) return Status::ok();  // host: visible
  if (!mh->contains(data[last], 1)) {
    return Status(Code::kInvalidArgument,
                  "iflush: data[" + std::to_string(last) + "] lies outside its memory handle");
  }
  if (!(mh->access & IBV_ACCESS_REMOTE_READ)) {
    return Status(Code::kInternalError,
                  "iflush: the buffer's MR was registered without remote read, so the flush "
                  "READ cannot target it");
  }
  if (!r.flush) {
    auto f = create_flush(r);
    if (!f.is_ok()) return fail(r.c, f.status().with_context("iflush"));
    r.flush = std::move(f).value();
  }
  Flush& f = *r.flush;
  FlushReq* req = nullptr;
  for (auto& p : f.pool) {
    if (!p.in_use) {
      req = &p;
      break;
    }
  }
  if (req == nullptr) {
    return fail(r.c, Status(Code::kInvalidUsage, "iflush: more than " + std::to_string(kFlushPool) +
                                                     " flushes in flight on " + f.lanes[0].desc +
                                                     " (NCCL allows 32 requests)"));
  }
  // A READ through every lane (member adapter), each with the buffer's key on that adapter; the
  // flush is done when all of them completed.
  req->ev = nullptr;
  req->pending = 0;
  for (int i = 0; i < f.nlanes; ++i) {
    FlushLane& l = f.lanes[i];
    const MemHandle* on = mh->on(l.adapter);
    if (on == nullptr) {
      return fail(
          r.c, Status(Code::kInvalidArgument, "iflush: the buffer is not registered on " + l.desc +
                                                  "'s adapter (a handle of another comm?)"));
    }
    ibv_sge sge{reinterpret_cast<uintptr_t>(f.bounce.data()), 1, l.bounce_mr->lkey};
    ibv_send_wr w{};
    w.wr_id = req->index;
    w.sg_list = &sge;
    w.num_sge = 1;
    w.opcode = IBV_WR_RDMA_READ;
    w.send_flags = IBV_SEND_SIGNALED;
    w.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(data[last]);
    w.wr.rdma.rkey = on->rkey;
    if (i == 0 && r.c.prof.start != nullptr) [[unlikely]]
      req->ev = dp::prof_flush_start(r, w, l.qp->qp_num, data[last]);
    ibv_send_wr* bad = nullptr;
    if (int rc = ibv_post_send(l.qp.get(), &w, &bad); rc != 0) {
      return fail(r.c, Status(Code::kSystemError, "iflush: ibv_post_send(RDMA READ) on " + l.desc +
                                                      " failed: " + std::strerror(rc)));
    }
    ++req->pending;
    ++f.posted;
  }
  req->in_use = true;
  req->done = false;
  *out = req;
  return Status::ok();
}

Status flush_test(Request* req, int* done) {
  *done = 0;
  auto* fr = static_cast<FlushReq*>(req);
  auto& r = *static_cast<RecvComm*>(fr->comm);
  std::lock_guard<std::mutex> lk(r.mu);  // the receive comm's state (comm.h)
  if (!fr->done) {
    SLUICE_RETURN_IF_ERROR(r.c.failure);
    SLUICE_RETURN_IF_ERROR(poll(r, *r.flush));
    if (!fr->done) return Status::ok();
  }
  if (r.c.prof.start != nullptr) [[unlikely]]
    dp::prof_stop(r.c, fr->ev);
  fr->in_use = false;
  *done = 1;
  return Status::ok();
}

void flush_stop_events(RecvComm& r) {
  if (!r.flush) return;
  for (FlushReq& p : r.flush->pool) dp::prof_stop(r.c, p.ev);
}

FlushStats flush_stats(const RecvComm& r) {
  FlushStats s;
  if (!r.flush) return s;
  s.created = true;
  s.reads_posted = r.flush->posted;
  s.reads_completed = r.flush->completed;
  s.bounce = *static_cast<const volatile uint8_t*>(r.flush->bounce.data());
  s.qpn = r.flush->lanes[0].qp ? r.flush->lanes[0].qp->qp_num : 0;
  s.lanes = r.flush->nlanes;
  return s;
}

}  // namespace sluice
