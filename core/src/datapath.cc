// The data path: irecv publishes clear-to-send entries into the sender's FIFO; isend matches them
// and posts, per QP, one linked list of RDMA WRITEs closed by a signaled WRITE_WITH_IMM whose
// immediate completes the receive; test harvests completions. No allocation, lock or log here
// (errors build a message once, when the comm fails).
#include <arpa/inet.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <climits>
#include <cstdint>
#include <cstring>
#include <new>

#include "comm.h"
#include "flush.h"
#include "sluice/core/log.h"

namespace sluice {
namespace {

// wr_id encodings. A send's closing WR carries its group leader's pool index (< 256).
constexpr uint64_t kWrUnsignaled = 1ull << 63;  // data WRITE: only seen when flushed in error
constexpr uint64_t kWrCts = 1ull << 62;         // signaled CTS write: | qp << 32 | writes covered
constexpr size_t kSplitAlign = 128;  // per-QP chunks are multiples of 128 B (LL128 lines intact)
constexpr size_t kMaxMessage = size_t{1} << 30;
static_assert(kMaxMessage < wire::kImmRecord, "a single-receive size must fit the immediate");
constexpr int kPollBatch = 16;

Status fail(Conn& c, Status st) {
  if (!c.failed()) c.failure = std::move(st);
  return c.failure;
}

Status check_device(Conn& c) {
  Adapter* a = c.dev->adapter;
  if (!a->fatal.load(std::memory_order_relaxed)) return c.failure;
  std::lock_guard<std::mutex> lk(a->fatal_mu);
  return fail(c, Status(Code::kSystemError, a->fatal_reason + "; comm " + c.describe_qp(0)));
}

int qp_index(const Conn& c, uint32_t qpn) {
  for (int q = 0; q < c.nqps; ++q)
    if (c.qps[q]->qp_num == qpn) return q;
  return -1;
}

Status completion_error(Conn& c, const ibv_wc& wc, const char* side) {
  char vendor[16];
  std::snprintf(vendor, sizeof vendor, "0x%x", wc.vendor_err);
  std::string m = std::string(side) + " completion error on " +
                  c.describe_qp(qp_index(c, wc.qp_num)) + ": status " +
                  ibv_wc_status_str(wc.status) + " (" + std::to_string(wc.status) +
                  "), vendor_err " + vendor + "; likely cause: " + verbs::wc_status_hint(wc.status);
  return Status(Code::kRemoteError, std::move(m));
}

bool valid_mh(const Conn& c, const MemHandle* mh) {
  return mh != nullptr && mh->magic == MemHandle::kMagic && mh->adapter == c.dev->adapter;
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

// ---- send side ----------------------------------------------------------------------------------

Status post_chain(SendComm& s, int q, ibv_send_wr* wrs, int nw) {
  for (int k = 0; k < nw; ++k) wrs[k].next = k + 1 < nw ? &wrs[k + 1] : nullptr;
  ibv_send_wr* bad = nullptr;
  int rc = ibv_post_send(s.c.qps[q].get(), wrs, &bad);
  if (rc != 0) {
    return fail(s.c, Status(Code::kSystemError,
                            "ibv_post_send on " + s.c.describe_qp(q) +
                                " failed: " + std::strerror(rc) + " (errno " + std::to_string(rc) +
                                ") at WR " + std::to_string(bad ? bad - wrs : -1) + " of " +
                                std::to_string(nw) + "; likely: send queue full or QP in error"));
  }
  return Status::ok();
}

// Bytes of a message that QP q carries: messages are split over the QPs in 128-byte multiples.
size_t chunk_of(size_t size, int nqps) {
  if (nqps == 1) return size;
  return ((size + nqps - 1) / nqps + kSplitAlign - 1) / kSplitAlign * kSplitAlign;
}

// WRs a group of messages puts on QP q: one WRITE per message with bytes on q, and the closing
// WRITE_WITH_IMM (which is the last WRITE itself for a single message with bytes on q).
uint32_t group_wrs(const SendReq* const* members, int n, int q, int nqps) {
  uint32_t w = 0;
  for (int i = 0; i < n; ++i)
    if (static_cast<size_t>(q) * chunk_of(members[i]->size, nqps) < members[i]->size) ++w;
  return (n == 1 && w == 1) ? 1 : w + 1;
}

// Posts the whole group of the slot at s.head: every QP gets its chunk of every message, then the
// closing WRITE_WITH_IMM (carrying the completion record on QP 0 for grouped receives).
Status post_group(SendComm& s, const wire::CtsEntry* e, int nreqs) {
  const uint32_t slot = static_cast<uint32_t>(s.head % wire::kFifoSlots);
  SendReq* leader = s.slot_reqs[0];
  leader->pending = static_cast<uint8_t>(s.c.nqps);
  leader->group_n = static_cast<uint8_t>(nreqs);
  for (int i = 0; i < nreqs; ++i) leader->group[i] = s.slot_reqs[i]->index;
  if (nreqs > 1) {
    wire::DoneRecord& r = s.records[slot];
    for (int i = 0; i < wire::kEntriesPerSlot; ++i)
      r.sizes[i] = i < nreqs ? static_cast<uint32_t>(s.slot_reqs[i]->size) : 0;
    r.status = wire::kRecordOk;
    r.bad_index = 0;
    r.seq = s.head + 1;
  }
  const int nqps = s.c.nqps;
  for (int q = 0; q < nqps; ++q) {
    ibv_send_wr wrs[wire::kEntriesPerSlot + 1];
    ibv_sge sges[wire::kEntriesPerSlot + 1];
    std::memset(wrs, 0, sizeof wrs);
    int nw = 0;
    for (int i = 0; i < nreqs; ++i) {
      const SendReq* r = s.slot_reqs[i];
      const size_t chunk = chunk_of(r->size, nqps);
      size_t off = static_cast<size_t>(q) * chunk;
      if (off >= r->size) continue;
      size_t len = std::min(chunk, r->size - off);
      sges[nw] = {reinterpret_cast<uintptr_t>(r->data + off), static_cast<uint32_t>(len), r->lkey};
      ibv_send_wr& w = wrs[nw];
      w.wr_id = kWrUnsignaled;
      w.sg_list = &sges[nw];
      w.num_sge = 1;
      w.opcode = IBV_WR_RDMA_WRITE;
      w.wr.rdma.remote_addr = e[i].addr + off;
      w.wr.rdma.rkey = e[i].rkey;
      ++nw;
    }
    ibv_send_wr* close;
    if (nreqs == 1) {
      const uint32_t imm = static_cast<uint32_t>(s.slot_reqs[0]->size);
      if (nw > 0) {
        close = &wrs[nw - 1];  // the last data WRITE itself carries the immediate
      } else {
        close = &wrs[nw++];
        close->wr.rdma.remote_addr = e[0].addr;
        close->wr.rdma.rkey = e[0].rkey;
      }
      close->imm_data = htonl(imm);
    } else {
      close = &wrs[nw];
      sges[nw] = {reinterpret_cast<uintptr_t>(&s.records[slot]), sizeof(wire::DoneRecord),
                  s.mem_mr->lkey};
      close->sg_list = &sges[nw];
      close->num_sge = q == 0 ? 1 : 0;  // the record travels once; other QPs only signal
      close->wr.rdma.remote_addr = s.remote_records + slot * sizeof(wire::DoneRecord);
      close->wr.rdma.rkey = s.remote_records_rkey;
      close->imm_data = htonl(wire::kImmRecord | slot);
      ++nw;
    }
    close->opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    close->send_flags = IBV_SEND_SIGNALED;
    close->wr_id = leader->index;
    SLUICE_RETURN_IF_ERROR(post_chain(s, q, wrs, nw));
    s.sq_used[q] += static_cast<uint32_t>(nw);
  }
  for (int i = 0; i < nreqs; ++i) s.slot_reqs[i]->posted = true;
  ++s.head;
  s.matched = 0;
  std::memset(s.slot_reqs, 0, sizeof s.slot_reqs);
  return Status::ok();
}

// A send larger than the posted receive: write nothing into the receiver's buffers, tell the
// receiver through the completion record (status kRecordTooLarge), and fail this comm.
Status reject_too_large(SendComm& s, const wire::CtsEntry* e, int index, size_t size, int tag) {
  const uint32_t slot = static_cast<uint32_t>(s.head % wire::kFifoSlots);
  wire::DoneRecord& r = s.records[slot];
  std::memset(&r, 0, sizeof r);
  r.sizes[index] = static_cast<uint32_t>(std::min<size_t>(size, UINT32_MAX));
  r.status = wire::kRecordTooLarge;
  r.bad_index = static_cast<uint32_t>(index);
  r.seq = s.head + 1;
  for (int q = 0; q < s.c.nqps; ++q) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(&r), sizeof r, s.mem_mr->lkey};
    ibv_send_wr w{};
    w.wr_id = kWrUnsignaled;
    w.sg_list = &sge;
    w.num_sge = q == 0 ? 1 : 0;
    w.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    w.send_flags = IBV_SEND_SIGNALED;
    w.imm_data = htonl(wire::kImmRecord | slot);
    w.wr.rdma.remote_addr = s.remote_records + slot * sizeof(wire::DoneRecord);
    w.wr.rdma.rkey = s.remote_records_rkey;
    (void)post_chain(s, q, &w, 1);
  }
  return fail(s.c,
              Status(Code::kInvalidUsage,
                     "isend of " + std::to_string(size) + " bytes (tag " + std::to_string(tag) +
                         ") is larger than the receive buffer of " + std::to_string(e[index].size) +
                         " bytes posted by the peer on " + s.c.describe_qp(0) +
                         "; nothing was written and the receiver is told"));
}

Status poll_send(SendComm& s) {
  ibv_wc wc[kPollBatch];
  int n = ibv_poll_cq(s.c.cq.get(), kPollBatch, wc);
  if (n < 0)
    return fail(s.c, Status(Code::kSystemError, "ibv_poll_cq failed on " + s.c.describe_qp(0)));
  for (int k = 0; k < n; ++k) {
    if (wc[k].status != IBV_WC_SUCCESS) return fail(s.c, completion_error(s.c, wc[k], "send"));
    if (wc[k].wr_id & kWrUnsignaled) continue;
    SendReq* leader = &s.pool[wc[k].wr_id];
    // This closing WR completed, so every WR of the group before it on that QP did too.
    const int q = qp_index(s.c, wc[k].qp_num);
    if (q >= 0) {
      SendReq* members[wire::kEntriesPerSlot];
      for (int i = 0; i < leader->group_n; ++i) members[i] = &s.pool[leader->group[i]];
      s.sq_used[q] -= group_wrs(members, leader->group_n, q, s.c.nqps);
    }
    if (--leader->pending == 0) {
      for (int i = 0; i < leader->group_n; ++i) s.pool[leader->group[i]].done = true;
    }
  }
  return Status::ok();
}

// ---- receive side -------------------------------------------------------------------------------

Status poll_recv(RecvComm& r) {
  ibv_wc wc[kPollBatch];
  int n = ibv_poll_cq(r.c.cq.get(), kPollBatch, wc);
  if (n < 0)
    return fail(r.c, Status(Code::kSystemError, "ibv_poll_cq failed on " + r.c.describe_qp(0)));
  for (int k = 0; k < n; ++k) {
    const ibv_wc& w = wc[k];
    if (w.status != IBV_WC_SUCCESS) return fail(r.c, completion_error(r.c, w, "receive"));
    if (w.wr_id & kWrCts) {
      uint32_t q = static_cast<uint32_t>(w.wr_id >> 32) & 0xffu;
      r.cts_outstanding[q] -= static_cast<uint32_t>(w.wr_id & 0xffffffffu);
      continue;
    }
    RecvReq& req = r.pool[w.wr_id % wire::kFifoSlots];
    const uint32_t imm = ntohl(w.imm_data);
    if (imm & wire::kImmRecord) {
      req.has_record = true;
    } else if (imm > req.posted[0]) {
      return fail(
          r.c, Status(Code::kRemoteError,
                      "peer reported " + std::to_string(imm) + " bytes into a receive buffer of " +
                          std::to_string(req.posted[0]) + " on " + r.c.describe_qp(0)));
    } else {
      req.received[0] = imm;
    }
    if (--req.pending > 0) continue;
    if (req.has_record) {
      const wire::DoneRecord& rec = r.records[req.seq % wire::kFifoSlots];
      if (rec.seq != req.seq + 1) {
        return fail(r.c, Status(Code::kRemoteError,
                                "completion record out of sequence on " + r.c.describe_qp(0)));
      }
      if (rec.status == wire::kRecordTooLarge) {
        uint32_t i = rec.bad_index % wire::kEntriesPerSlot;
        return fail(r.c, Status(Code::kInvalidUsage,
                                "peer tried to send " + std::to_string(rec.sizes[i]) +
                                    " bytes into receive buffer " + std::to_string(i) + " (tag " +
                                    std::to_string(req.tags[i]) + ") of only " +
                                    std::to_string(req.posted[i]) + " bytes on " +
                                    r.c.describe_qp(0) + "; nothing was written"));
      }
      for (int i = 0; i < req.n; ++i) {
        if (rec.sizes[i] > req.posted[i]) {
          return fail(r.c, Status(Code::kRemoteError,
                                  "completion record reports more bytes than "
                                  "posted on " +
                                      r.c.describe_qp(0)));
        }
        req.received[i] = rec.sizes[i];
      }
    }
    req.done = true;
  }
  return Status::ok();
}

}  // namespace

Status isend(SendComm* s, void* data, size_t size, int tag, MemHandle* mh, Request** out) {
  *out = nullptr;
  if (s == nullptr || s->kind != CommKind::kSend)
    return Status(Code::kInvalidArgument, "isend: not a send comm");
  SLUICE_RETURN_IF_ERROR(check_device(s->c));
  if (size > 0 && (!valid_mh(s->c, mh) || !mh->contains(data, size)))
    return bad_buffer(s->c, "isend", data, size, mh);
  const uint64_t want = s->head + 1;
  const wire::CtsEntry* e = &s->fifo[(s->head % wire::kFifoSlots) * wire::kEntriesPerSlot];
  // The receiver writes the FIFO with RDMA; seq is the publication flag of each entry.
  auto seq_of = [](const wire::CtsEntry& x) {
    return std::atomic_ref<const uint64_t>(x.seq).load(std::memory_order_acquire);
  };
  if (seq_of(e[0]) != want) return Status::again();
  const int nreqs = e[0].nreqs;
  if (nreqs < 1 || nreqs > wire::kEntriesPerSlot) {
    return fail(s->c,
                Status(Code::kRemoteError, "corrupt clear-to-send entry (" + std::to_string(nreqs) +
                                               " receives) from " + s->c.describe_qp(0)));
  }
  for (int i = 1; i < nreqs; ++i)
    if (seq_of(e[i]) != want) return Status::again();
  int idx = -1;
  for (int i = 0; i < nreqs; ++i) {
    if (e[i].tag == tag && !(s->matched & (1u << i))) {
      idx = i;
      break;
    }
  }
  if (idx < 0) return Status::again();  // this tag belongs to a later receive
  if (size > e[idx].size) return reject_too_large(*s, e, idx, size, tag);
  if (size > kMaxMessage) {
    return fail(s->c, Status(Code::kInvalidUsage,
                             "isend of " + std::to_string(size) + " bytes exceeds maxP2pBytes"));
  }
  if (s->free_top == 0) return Status::again();
  const bool completes_group = std::popcount(static_cast<unsigned>(s->matched)) + 1 == nreqs;
  if (completes_group) {
    // Room on every QP's send queue for the whole group, or try again after completions.
    SendReq probe;
    probe.size = size;
    SendReq* members[wire::kEntriesPerSlot];
    for (int i = 0; i < nreqs; ++i) members[i] = i == idx ? &probe : s->slot_reqs[i];
    for (int pass = 0; pass < 2; ++pass) {
      bool fits = true;
      for (int q = 0; q < s->c.nqps && fits; ++q)
        fits = s->sq_used[q] + group_wrs(members, nreqs, q, s->c.nqps) <= kSendSqDepth;
      if (fits) break;
      if (pass == 1) return Status::again();
      SLUICE_RETURN_IF_ERROR(poll_send(*s));
    }
  }
  const uint16_t slot_index = s->free_list[--s->free_top];
  SendReq* r = &s->pool[slot_index];
  if (r->magic != Request::kMagic) {  // first use of this pool entry
    new (r) SendReq();
    r->index = slot_index;
    r->comm = s;
    r->is_send = true;
  }
  r->in_use = true;
  r->done = false;
  r->posted = false;
  r->pending = 0;
  r->group_n = 0;
  r->data = static_cast<const char*>(data);
  r->size = size;
  r->lkey = size > 0 ? mh->lkey : 0;
  s->slot_reqs[idx] = r;
  s->matched |= static_cast<uint8_t>(1u << idx);
  if (completes_group) SLUICE_RETURN_IF_ERROR(post_group(*s, e, nreqs));
  *out = r;
  return Status::ok();
}

Status irecv(RecvComm* r, int n, void* const* data, const size_t* sizes, const int* tags,
             MemHandle* const* mhs, Request** out) {
  *out = nullptr;
  if (r == nullptr || r->kind != CommKind::kRecv)
    return Status(Code::kInvalidArgument, "irecv: not a receive comm");
  if (n < 1 || n > wire::kEntriesPerSlot) {
    return Status(Code::kInvalidArgument, "irecv: n = " + std::to_string(n) + " outside 1.." +
                                              std::to_string(wire::kEntriesPerSlot));
  }
  SLUICE_RETURN_IF_ERROR(check_device(r->c));
  for (int i = 0; i < n; ++i) {
    if (sizes[i] > 0 && (!valid_mh(r->c, mhs[i]) || !mhs[i]->contains(data[i], sizes[i])))
      return bad_buffer(r->c, "irecv", data[i], sizes[i], mhs[i]);
  }
  const uint64_t seq = r->seq;
  const uint32_t slot = static_cast<uint32_t>(seq % wire::kFifoSlots);
  RecvReq& req = r->pool[slot];
  if (req.magic != Request::kMagic) {  // first use of this pool entry
    new (&req) RecvReq();
    req.comm = r;
  }
  if (req.in_use) return Status::again();            // 32 receives in flight
  const int cq = static_cast<int>(seq % r->c.nqps);  // QP that carries this CTS
  if (r->cts_outstanding[cq] >= kCtsBudget) {
    SLUICE_RETURN_IF_ERROR(poll_recv(*r));
    if (r->cts_outstanding[cq] >= kCtsBudget) return Status::again();
  }
  // One receive WR per QP: each QP delivers exactly one immediate for this receive.
  for (int q = 0; q < r->c.nqps; ++q) {
    ibv_recv_wr wr{};
    wr.wr_id = slot;
    ibv_recv_wr* bad = nullptr;
    if (int rc = ibv_post_recv(r->c.qps[q].get(), &wr, &bad); rc != 0) {
      return fail(r->c, Status(Code::kSystemError, "ibv_post_recv on " + r->c.describe_qp(q) +
                                                       " failed: " + std::strerror(rc)));
    }
  }
  req.in_use = true;
  req.done = false;
  req.has_record = false;
  req.n = static_cast<uint8_t>(n);
  req.pending = static_cast<uint8_t>(r->c.nqps);
  req.seq = seq;
  wire::CtsEntry* e = &r->stage[slot * wire::kEntriesPerSlot];
  for (int i = 0; i < n; ++i) {
    req.posted[i] = sizes[i];
    req.received[i] = 0;
    req.tags[i] = tags[i];
    e[i].addr = reinterpret_cast<uintptr_t>(data[i]);
    e[i].size = static_cast<uint32_t>(std::min<size_t>(sizes[i], UINT32_MAX));
    e[i].rkey = sizes[i] > 0 ? mhs[i]->rkey : 0;
    e[i].tag = tags[i];
    e[i].nreqs = static_cast<uint8_t>(n);
    e[i].index = static_cast<uint8_t>(i);
    e[i].seq = seq + 1;
  }
  const uint32_t bytes = static_cast<uint32_t>(n * sizeof(wire::CtsEntry));
  ibv_sge sge{reinterpret_cast<uintptr_t>(e), bytes, r->mem_mr->lkey};
  ibv_send_wr w{};
  w.wr_id = kWrUnsignaled;
  w.sg_list = &sge;
  w.num_sge = 1;
  w.opcode = IBV_WR_RDMA_WRITE;
  w.wr.rdma.remote_addr =
      r->remote_fifo + static_cast<uint64_t>(slot) * wire::kEntriesPerSlot * sizeof(wire::CtsEntry);
  w.wr.rdma.rkey = r->remote_fifo_rkey;
  if (bytes <= r->c.max_inline) w.send_flags |= IBV_SEND_INLINE;
  ++r->cts_outstanding[cq];
  if (++r->cts_unsignaled[cq] >= kCtsSignalEvery) {
    w.send_flags |= IBV_SEND_SIGNALED;
    w.wr_id = kWrCts | (static_cast<uint64_t>(cq) << 32) | r->cts_unsignaled[cq];
    r->cts_unsignaled[cq] = 0;
  }
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(r->c.qps[cq].get(), &w, &bad); rc != 0) {
    return fail(r->c, Status(Code::kSystemError, "ibv_post_send (clear-to-send) on " +
                                                     r->c.describe_qp(cq) +
                                                     " failed: " + std::strerror(rc)));
  }
  ++r->seq;
  *out = &req;
  return Status::ok();
}

Status iflush(RecvComm* r, int n, void* const* data, const int* sizes, MemHandle* const* mhs,
              Request** out) {
  *out = nullptr;
  if (r == nullptr || r->kind != CommKind::kRecv)
    return Status(Code::kInvalidArgument, "iflush: not a receive comm");
  if (n < 1 || n > wire::kEntriesPerSlot)
    return Status(Code::kInvalidArgument, "iflush: n = " + std::to_string(n));
  // Host memory needs no flush (the CPU sees the NIC's writes once the completion arrived) unless
  // NCCL_NET_FORCE_FLUSH; GPU memory gets a loopback READ (flush.cc).
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
      SLUICE_RETURN_IF_ERROR(check_device(s.c));
      if (r->posted) SLUICE_RETURN_IF_ERROR(poll_send(s));
      if (!r->done) return Status::ok();
    }
    if (sizes != nullptr) sizes[0] = r->size;
    r->in_use = false;
    s.free_list[s.free_top++] = r->index;
    *done = 1;
    return Status::ok();
  }
  auto* r = static_cast<RecvReq*>(req);
  auto& rc = *static_cast<RecvComm*>(r->comm);
  if (!r->done) {
    SLUICE_RETURN_IF_ERROR(check_device(rc.c));
    SLUICE_RETURN_IF_ERROR(poll_recv(rc));
    if (!r->done) return Status::ok();
  }
  if (sizes != nullptr)
    for (int i = 0; i < r->n; ++i) sizes[i] = r->received[i];
  r->in_use = false;
  *done = 1;
  return Status::ok();
}

Status close_send(SendComm* s) {
  if (s == nullptr || s->kind != CommKind::kSend)
    return Status(Code::kInvalidArgument, "closeSend: not a send comm");
  s->kind = CommKind::kDead;
  delete s;  // QPs to ERROR, CQ drained, QPs/CQ/MR/memory released (member order)
  if (Engine* e = engine()) e->open_comms.fetch_sub(1);
  return Status::ok();
}

Status close_recv(RecvComm* r) {
  if (r == nullptr || r->kind != CommKind::kRecv)
    return Status(Code::kInvalidArgument, "closeRecv: not a receive comm");
  r->kind = CommKind::kDead;
  delete r;
  if (Engine* e = engine()) e->open_comms.fetch_sub(1);
  return Status::ok();
}

}  // namespace sluice
