// The send side: isend snapshots the clear-to-send slot at the FIFO's head once, matches sends
// against that copy (cts_match.cc), and posts a whole group at once: per lane one linked list of
// RDMA WRITEs closed by a signaled WRITE_WITH_IMM whose immediate completes the receive. A message
// longer than 1 MiB on a lane is cut into WRITEs of 1 MiB, one signaled every MiB (a progress WR,
// cts::plan_lane) so the watchdog sees the chain move (health/progress.h). With
// NCCL_IB_SPLIT_DATA_ON_QPS=0 (default) a group travels whole on QP seq % nqps; with 1 every
// message is cut over all QPs. No allocation, lock or log here (errors build a message once, when
// the comm fails).
#include <arpa/inet.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cstring>
#include <new>

#include "datapath/datapath_internal.h"
#include "datapath/wr_events.h"

namespace sluice {
namespace dp {
namespace {

Status post_chain(SendComm& s, int q, ibv_send_wr* wrs, int nw) {
  for (int k = 0; k < nw; ++k) wrs[k].next = k + 1 < nw ? &wrs[k + 1] : nullptr;
  ibv_send_wr* bad = nullptr;
  int rc = ibv_post_send(s.c.qp[q].get(), wrs, &bad);
  if (rc != 0) {
    return Status(Code::kSystemError,
                  "ibv_post_send on " + s.c.describe_qp(q) + " failed: " + std::strerror(rc) +
                      " (errno " + std::to_string(rc) + ") at WR " +
                      std::to_string(bad ? bad - wrs : -1) + " of " + std::to_string(nw) +
                      "; likely: send queue full or QP in error");
  }
  s.c.qp[q].sq_used += static_cast<uint32_t>(nw);
  s.c.stats.wrs.add(static_cast<uint64_t>(nw));
  s.c.stats.doorbells.add(1);
  return Status::ok();
}

// The chains of the receive at s.head: per path in its mask (its clear-to-send entry's; one path on
// a one-path comm), per lane of the path (stripe::lanes_per_path), on QP stripe::qp_of. `fn(path,
// lane, q, first)` is called for each in order; `first` marks the one that carries the completion
// record of a grouped receive.
template <typename Fn>
void for_each_chain(const SendComm& s, uint32_t mask, uint64_t seq, Fn fn) {
  const int nlanes = stripe::lanes_per_path(s.c.split, s.c.qpp);
  bool first = true;
  for (int p = 0; p < s.c.npaths; ++p) {
    if ((mask >> p & 1u) == 0) continue;
    for (int lane = 0; lane < nlanes; ++lane) {
      fn(p, lane, stripe::qp_of(p, lane, s.c.split, s.c.qpp, seq), first);
      first = false;
    }
  }
}

// The adaptive-routing threshold a group's chains are planned with: the comm's, except that a
// fused comm's single message too large to name its slot and size in one immediate (wire.h
// kImmFusedSizeMax) always closes with a separate WRITE_WITH_IMM, which carries the record.
size_t ar_of(const SendComm& s, const size_t* sizes, int n) {
  return s.c.npaths > 1 && n == 1 && sizes[0] > wire::kImmFusedSizeMax ? 0 : s.ar_threshold;
}
// Whether a group's closes carry the completion record (kImmRecord | slot): a grouped receive, or
// a fused comm's message above kImmFusedSizeMax, or one a fused comm sent eagerly (a fused
// immediate has no room for the eager mark: the record says kRecordEager and its size).
bool record_close(const SendComm& s, const size_t* sizes, int n, const SendReq* const* reqs) {
  return n > 1 || (s.c.npaths > 1 && (sizes[0] > wire::kImmFusedSizeMax || reqs[0]->shadow));
}

// The receiver's key of entry i's buffer on the receiver member at the other end of `path`.
uint32_t entry_rkey(const SendComm& s, const cts::Snapshot& snap, int i, int path) {
  if (s.c.npaths <= 1) return snap.e[i].rkey;
  return snap.x[i].rkey[wire::path_member(path, s.c.remote_nmembers)];
}

// Posts one chain of receive `seq` (its slot's entries `snap`, the group reqs[0..nreqs), led by
// `leader`): path `path`'s lane `lane` of the receive's mask (stripe::plan_path: the path's share
// by weight, then the lane's chunk of it in split mode), on QP t: the chain's own QP, or where
// failover sends it (fo_route; then the data lands through t's members: their keys). It ends with
// its closing WRITE_WITH_IMM, which carries the completion record of a grouped receive on its
// first chain. On a fused comm every close is a separate WRITE_WITH_IMM naming the receive's slot
// (wire.h kMembersVersion 3; the record on the first chain), so the receiver takes it whatever QP
// it arrives on. Each chain's data WRITEs and its close are on one QP, which RC executes in
// order, and the receiver completes the receive only once every chain's close arrived: no WRITE
// of a receive lands after it completed.
// A replay (fo_send_replay) or a chain routed off its own QP (`replay` set) starts no profiler
// events (wr_events.h).
Status post_path_chain(SendComm& s, const cts::Snapshot& snap, SendReq* const* reqs, int nreqs,
                       uint64_t seq, int path, int lane, bool first, int t, SendReq* leader,
                       uint64_t* bytes_out = nullptr, bool replay = false) {
  const wire::CtsEntry* e = snap.e;
  const uint32_t mask = snap.paths;
  const uint32_t slot = static_cast<uint32_t>(seq % wire::kFifoSlots);
  const int nlanes = stripe::lanes_per_path(s.c.split, s.c.qpp);
  const int member = s.c.qp_member[t];
  const int rpath = t / s.c.qpp;  // the receiver member the chain lands on is this path's
  size_t sizes[wire::kEntriesPerSlot];
  for (int i = 0; i < nreqs; ++i) sizes[i] = reqs[i]->size;
  // The chain as stripe::plan_path lays it out: the path's part of each message, WRITEs of at
  // most 1 MiB each where it is longer, a progress WR signaled every ~1 MiB (progress.h), the
  // close last. On a one-path comm it is cts::plan_lane's chain: one WRITE per small message,
  // closed by a WRITE_WITH_IMM.
  cts::LaneWr plan[cts::kMaxLaneWrs];
  uint64_t seg = 0;
  const int nw = static_cast<int>(
      stripe::plan_path(stripe::with_shares(s.c.paths, snap.shares), mask, sizes, nreqs, path, lane,
                        nlanes, ar_of(s, sizes, nreqs), plan, nullptr, nullptr, &seg));
  ibv_send_wr wrs[cts::kMaxLaneWrs];
  ibv_sge sges[cts::kMaxLaneWrs];
  uint64_t lane_bytes = 0, run_bytes = 0, run_wrs = 0;
  for (int k = 0; k < nw; ++k) {
    const cts::LaneWr& p = plan[k];
    ibv_send_wr& w = wrs[k];
    w = ibv_send_wr{};
    w.wr_id = kWrUnsignaled;
    w.opcode = IBV_WR_RDMA_WRITE;
    if (p.msg >= 0) {
      const SendReq* r = reqs[p.msg];
      sges[k] = {reinterpret_cast<uintptr_t>(r->data + p.off), static_cast<uint32_t>(p.len),
                 r->lkeys[member]};
      w.sg_list = &sges[k];
      w.num_sge = 1;
      w.wr.rdma.remote_addr = e[p.msg].addr + p.off;
      w.wr.rdma.rkey = entry_rkey(s, snap, p.msg, rpath);
    }
    lane_bytes += p.len;
    run_bytes += p.len;
    ++run_wrs;
    if (p.progress) {  // frees its run of WRs and bytes when it completes (poll_send)
      w.send_flags = IBV_SEND_SIGNALED;
      w.wr_id = kWrProgress | run_wrs << kWrProgressWrsShift | run_bytes;
      run_bytes = run_wrs = 0;
    }
  }
  ibv_send_wr* close = &wrs[nw - 1];
  const bool separate = plan[nw - 1].msg < 0;  // else the last data WRITE carries the immediate
  bool ar_imm = false;  // adaptive routing: this chain's data WRITEs are closed by their own WR
  if (!record_close(s, sizes, nreqs, reqs)) {
    ar_imm = separate && nw > 1;
    if (separate) {  // no data on this chain, or above NCCL_IB_AR_THRESHOLD: a zero-length one
      close->wr.rdma.remote_addr = e[0].addr;
      close->wr.rdma.rkey = entry_rkey(s, snap, 0, rpath);
    }
    // Every chain states the whole message's size: the receiver checks it against its buffer. A
    // fused comm's names the receive's slot too (wire.h).
    const auto bytes = static_cast<uint32_t>(reqs[0]->size);
    // A part sent eagerly (eager.cc, a stand-in of 0 bytes here; one-path comms only): the close
    // says so, with its size.
    close->imm_data = htonl(s.c.npaths > 1    ? wire::fused_imm(slot, bytes)
                            : reqs[0]->shadow ? wire::kImmEager | reqs[0]->eager_size
                                              : bytes);
  } else {
    // ar_of made it a separate WR: the record is its payload, never a data WRITE's.
    sges[nw - 1] = {reinterpret_cast<uintptr_t>(&s.records[slot]), sizeof(wire::DoneRecord),
                    local_mem_lkey(s.c, t)};
    close->sg_list = &sges[nw - 1];
    close->num_sge = first ? 1 : 0;  // the record travels once; other chains only signal
    close->wr.rdma.remote_addr = s.remote_records + slot * sizeof(wire::DoneRecord);
    close->wr.rdma.rkey = remote_mem_rkey(s.c, t);
    close->imm_data = htonl(wire::kImmRecord | slot);
  }
  close->opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  close->send_flags = IBV_SEND_SIGNALED;
  close->wr_id = leader->index;
  // The chain log (health/path_failover.h): its place in t's order of closes, checked before
  // anything is posted (health/qp_ledger.h).
  if (s.c.fo.on) {
    if (Status st = ledger::may_post_chain(s.c.qp[t].led, kChainLog); !st.is_ok())
      return fail(s.c, on_qp(s.c, t, st));
  }
  if (s.c.prof.start != nullptr && !replay) [[unlikely]]
    prof_send_chain(s.c, t, wrs, plan, nw, reqs, nreqs);
  if (Status st = post_chain(s, t, wrs, nw); !st.is_ok()) return fail(s.c, st);
  s.c.qp[t].sq_bytes += lane_bytes;
  s.c.qp[t].sq_seg = std::max(s.c.qp[t].sq_seg, seg);
  if (s.c.nmembers > 1) s.c.member_bytes[member].add(lane_bytes);  // else: stats.bytes
  if (ar_imm) s.c.stats.ar_imm_writes.add(1);
  if (s.c.fo.on) {
    const uint64_t at = ledger::on_chain_posted(s.c.qp[t].led);
    s.c.fo.log[static_cast<size_t>(t) * kChainLog + at % kChainLog] =
        ChainRec{seq, leader->index, static_cast<uint8_t>(path), static_cast<uint8_t>(lane), first};
  }
  if (bytes_out != nullptr) *bytes_out = lane_bytes;
  return Status::ok();
}

// Posts the whole group of the slot at s.head: every chain (path and lane) of the receive's mask,
// each where failover routes it (its own QP while its path carries).
Status post_group(SendComm& s) {
  const int nreqs = s.snap.nreqs;
  const uint32_t mask = s.snap.paths;
  const uint32_t slot = static_cast<uint32_t>(s.head % wire::kFifoSlots);
  SendReq* leader = s.slot_reqs[0];
  leader->pending = static_cast<uint8_t>(stripe::closes(mask, s.c.split, s.c.qpp));
  leader->group_n = static_cast<uint8_t>(nreqs);
  leader->paths = mask;
  leader->shares = s.snap.shares;
  size_t bytes = 0;
  for (int i = 0; i < nreqs; ++i) {
    leader->group[i] = s.slot_reqs[i]->index;
    bytes += s.slot_reqs[i]->size;
  }
  leader->posted_ns = stat_clock_ns();
  s.c.stats.bytes.add(bytes);
  size_t sizes[wire::kEntriesPerSlot];
  for (int i = 0; i < nreqs; ++i) sizes[i] = s.slot_reqs[i]->size;
  if (record_close(s, sizes, nreqs, s.slot_reqs)) {
    wire::DoneRecord& r = s.records[slot];
    for (int i = 0; i < wire::kEntriesPerSlot; ++i) {
      const SendReq* q = i < nreqs ? s.slot_reqs[i] : nullptr;
      r.sizes[i] = q == nullptr ? 0
                   : q->shadow  ? wire::kRecordEager | q->eager_size
                                : static_cast<uint32_t>(q->size);
    }
    r.status = wire::kRecordOk;
    r.bad_index = 0;
    r.seq = s.head + 1;
  }
  Status st = Status::ok();
  for_each_chain(s, mask, s.head, [&](int path, int lane, int q, bool first) {
    if (!st.is_ok()) return;
    // A chain routed off its own QP (its path failed) starts no profiler events (wr_events.h).
    const int t = fo_route(s.c.fo, s.c.qpp, q);
    st = post_path_chain(s, s.snap, s.slot_reqs, nreqs, s.head, path, lane, first, t, leader,
                         nullptr, t != q);
  });
  SLUICE_RETURN_IF_ERROR(st);
  for (int i = 0; i < nreqs; ++i) s.slot_reqs[i]->posted = true;
  ++s.head;
  s.matched = 0;
  s.snap.seq = 0;
  std::memset(s.slot_reqs, 0, sizeof s.slot_reqs);
  return Status::ok();
}

Status group_fits(SendComm& s, const size_t* sizes, int nreqs, bool* fits);

// Room for need[q] more WRs on every QP q, polling completions once if needed.
Status room_for(SendComm& s, const uint32_t* need, bool* fits) {
  for (int pass = 0; pass < 2; ++pass) {
    *fits = true;
    for (int q = 0; q < s.c.nqps && *fits; ++q) *fits = s.c.qp[q].sq_used + need[q] <= kSendSqDepth;
    if (*fits || pass == 1) return Status::ok();
    SLUICE_RETURN_IF_ERROR(poll_send(s));
  }
  return Status::ok();
}

// Whether the group at head (sizes[0..nreqs)) fits every lane's send queue now (polling once), and
// every chain has a QP (a path of the receive that is fencing waits for its substitute).
Status group_fits(SendComm& s, const size_t* sizes, int nreqs, bool* fits) {
  *fits = false;
  const int nlanes = stripe::lanes_per_path(s.c.split, s.c.qpp);
  uint32_t need[wire::kMaxQps] = {};
  bool routed = true;
  for_each_chain(s, s.snap.paths, s.head, [&](int path, int lane, int q, bool) {
    const int t = fo_route(s.c.fo, s.c.qpp, q);
    routed = routed && t >= 0;
    if (t >= 0)
      need[t] +=
          stripe::plan_path(stripe::with_shares(s.c.paths, s.snap.shares), s.snap.paths, sizes,
                            nreqs, path, lane, nlanes, ar_of(s, sizes, nreqs), nullptr);
  });
  if (!routed) return Status::ok();
  return room_for(s, need, fits);
}

// A send the receiver cannot take: larger than the posted receive buffer (kRecordTooLarge) or than
// maxP2pBytes (kRecordOverLimit). Write nothing into the receiver's buffers, tell the receiver
// through the completion record with one WRITE_WITH_IMM per lane (inside the send-queue
// accounting), and fail this comm with the same facts. again = no room yet to tell it.
Status reject_send(SendComm& s, int index, size_t size, int tag, uint32_t why) {
  const uint32_t mask = s.snap.paths;
  uint32_t need[wire::kMaxQps] = {};
  bool routed = true;
  for_each_chain(s, mask, s.head, [&](int, int, int q, bool) {
    const int t = fo_route(s.c.fo, s.c.qpp, q);
    routed = routed && t >= 0;
    if (t >= 0) need[t] += 1;
  });
  if (!routed) return Status::again();  // a path of the receive is fencing (failover)
  bool fits = false;
  SLUICE_RETURN_IF_ERROR(room_for(s, need, &fits));
  if (!fits) return Status::again();
  const uint32_t slot = static_cast<uint32_t>(s.head % wire::kFifoSlots);
  wire::DoneRecord& r = s.records[slot];
  std::memset(&r, 0, sizeof r);
  r.sizes[index] = static_cast<uint32_t>(std::min<size_t>(size, UINT32_MAX));
  r.status = why;
  r.bad_index = static_cast<uint32_t>(index);
  r.seq = s.head + 1;
  // One close per chain the receiver expects (its entry's paths), the record on the first.
  Status told = Status::ok();
  for_each_chain(s, mask, s.head, [&](int, int, int q0, bool first) {
    if (!told.is_ok()) return;
    const int q = fo_route(s.c.fo, s.c.qpp, q0);
    ibv_sge sge{reinterpret_cast<uintptr_t>(&r), sizeof r, local_mem_lkey(s.c, q)};
    ibv_send_wr w{};
    w.wr_id = kWrReject;
    w.sg_list = &sge;
    w.num_sge = first ? 1 : 0;
    w.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    w.send_flags = IBV_SEND_SIGNALED;
    w.imm_data = htonl(wire::kImmRecord | slot);
    w.wr.rdma.remote_addr = s.remote_records + slot * sizeof(wire::DoneRecord);
    w.wr.rdma.rkey = remote_mem_rkey(s.c, q);
    told = post_chain(s, q, &w, 1);
  });
  std::string m = "isend of " + std::to_string(size) + " bytes (tag " + std::to_string(tag) + ")";
  m += why == wire::kRecordOverLimit
           ? " exceeds maxP2pBytes = " + std::to_string(kMaxMessage) + " bytes"
           : " is larger than the receive buffer of " + std::to_string(s.snap.e[index].size) +
                 " bytes posted by the peer";
  m += " on " + s.c.describe_qp(0) + "; nothing was written";
  m += told.is_ok() ? " and the receiver is told"
                    : "; telling the receiver failed: " + told.message();
  // Told through the completion record: the failure notice (liveness.h) would race it.
  if (told.is_ok()) s.c.watch.told = true;
  return fail(s.c, Status(Code::kInvalidUsage, std::move(m)));
}

// The send goes eagerly (eager.cc), or says again. Then the receiver must know which slots were
// read, or it may be waiting to reuse one (eager_slot_free) before it can post the receive this
// send needs; and it may be holding the clear-to-send back, expecting this send eagerly: it is
// asked.
Status send_eagerly(SendComm& s, void* data, size_t size, int tag, bool host, void* parent,
                    Request** out) {
  Status st = eager_send(s, data, size, tag, host, parent, out);
  if (st.is_again()) {
    SLUICE_RETURN_IF_ERROR(eager_report_head(s, true));
    SLUICE_RETURN_IF_ERROR(eager_ask(s, size, tag, host));
  }
  return st;
}

Status isend_impl(SendComm* s, void* data, size_t size, int tag, MemHandle* mh, void* parent,
                  Request** out) {
  SLUICE_RETURN_IF_ERROR(check_device(s->c));
  // Over maxP2pBytes: refused whole (nothing is read), so the buffer is not looked at; the receive
  // it matches is told once its clear-to-send arrived.
  const bool over_limit = size > kMaxMessage;
  if (!over_limit && size > 0 && (!valid_mh(s->c, mh) || !mh->contains(data, size)))
    return bad_buffer(s->c, "isend", data, size, mh);
  const bool host = size == 0 || over_limit || mh->type == MemType::kHost;
  if (s->eg.on) {  // the eager path (eager.cc): its reading of the head, or the send goes eagerly
    SLUICE_RETURN_IF_ERROR(eager_read_head(*s));
    if (s->snap.seq == 0) return send_eagerly(*s, data, size, tag, host, parent, out);
    SLUICE_RETURN_IF_ERROR(eager_flush(*s));  // the eager sends before this one go first
  }
  if (s->snap.seq == 0) {  // first use of the slot at head: validate it once
    const size_t cells = static_cast<size_t>(s->c.cells());
    const wire::CtsEntry* e =
        &s->fifo[(s->head % wire::kFifoSlots) * wire::kEntriesPerSlot * cells];
    Status st = s->c.npaths > 1
                    ? cts::take_snapshot_fused(e, s->head + 1, s->c.npaths, s->c.remote_nmembers,
                                               &s->snap, s->c.fo.path_set >= 2, s->eg.on)
                    : cts::take_snapshot(e, s->head + 1, &s->snap, s->eg.on);
    if (st.is_again()) return st;
    if (!st.is_ok()) return fail(s->c, on_qp(s->c, 0, st));
  }
  const int nreqs = s->snap.nreqs;
  const cts::Match m = cts::match(s->snap, s->matched, tag, over_limit ? 0 : size);
  if (m.kind == cts::Match::kLater) {  // tag of a later receive
    if (s->eg.on && !over_limit) return send_eagerly(*s, data, size, tag, host, parent, out);
    return Status::again();
  }
  if (over_limit) return reject_send(*s, m.index, size, tag, wire::kRecordOverLimit);
  if (m.kind == cts::Match::kTooLarge)
    return reject_send(*s, m.index, size, tag, wire::kRecordTooLarge);
  const int idx = m.index;
  if (s->free_top == 0) return Status::again();
  const bool completes_group = std::popcount(static_cast<unsigned>(s->matched)) + 1 == nreqs;
  if (completes_group) {
    // Room on every lane's send queue for the whole group, or try again after completions.
    size_t sizes[wire::kEntriesPerSlot];
    for (int i = 0; i < nreqs; ++i) sizes[i] = i == idx ? size : s->slot_reqs[i]->size;
    bool fits = false;
    SLUICE_RETURN_IF_ERROR(group_fits(*s, sizes, nreqs, &fits));
    if (!fits) return Status::again();
  }
  SendReq* r = take_send_req(*s);
  r->posted = false;
  r->eager = false;
  r->shadow = false;
  r->data = static_cast<const char*>(data);
  r->size = size;
  r->lkey = size > 0 ? mh->lkey : 0;
  r->lkeys[0] = r->lkey;
  for (int m = 1; m < s->c.nmembers; ++m)  // valid_mh: registered on every member's adapter
    r->lkeys[m] = size > 0 ? mh->on(s->c.members[m].dev->adapter)->lkey : 0;
  r->parent = parent;
  s->slot_reqs[idx] = r;
  s->matched |= static_cast<uint8_t>(1u << idx);
  if (s->eg.book != nullptr) s->eg.book->on_rendezvous(tag);
  s->c.stats.messages.add(1);
  if (completes_group) SLUICE_RETURN_IF_ERROR(post_group(*s));
  *out = r;
  return Status::ok();
}

}  // namespace

Status post_group_if_room(SendComm& s, bool* posted) {
  *posted = false;
  size_t sizes[wire::kEntriesPerSlot];
  for (int i = 0; i < s.snap.nreqs; ++i) sizes[i] = s.slot_reqs[i]->size;
  bool fits = false;
  SLUICE_RETURN_IF_ERROR(group_fits(s, sizes, s.snap.nreqs, &fits));
  if (!fits) return Status::ok();
  SLUICE_RETURN_IF_ERROR(post_group(s));
  *posted = true;
  return Status::ok();
}

namespace {

// Every request of `leader`'s group is done; stand-ins for parts sent eagerly (eager.cc) are ours:
// back to the pool (the leader may be one: its group is copied first).
void group_done(SendComm& s, const SendReq& leader) {
  uint16_t group[wire::kEntriesPerSlot];
  const int gn = leader.group_n;
  for (int i = 0; i < gn; ++i) group[i] = leader.group[i];
  for (int i = 0; i < gn; ++i) s.pool[group[i]].done = true;
  for (int i = 0; i < gn; ++i) {
    SendReq& m = s.pool[group[i]];
    if (!m.shadow) continue;
    m.shadow = false;
    m.in_use = false;
    s.free_list[s.free_top++] = m.index;
  }
}

Status poll_send_cq(SendComm& s, int member) {
  ibv_wc wc[kPollBatch];
  int n = ibv_poll_cq(s.c.members[member].cq.get(), kPollBatch, wc);
  if (n < 0)
    return fail(s.c, Status(Code::kSystemError, "ibv_poll_cq failed on " + s.c.describe_qp(0)));
  const int nlanes = stripe::lanes_per_path(s.c.split, s.c.qpp);
  if (n > 0) s.c.stats.completions.add(static_cast<uint64_t>(n));
  int64_t now = 0;
  for (int k = 0; k < n; ++k) {
    const int q = qp_index(s.c, wc[k].qp_num, member);
    if (q < 0) {  // a retired incarnation's (failback), or of none of ours
      SLUICE_RETURN_IF_ERROR(fo_stale_wc(s.c, wc[k], member, "send"));
      continue;
    }
    QpLife& l = s.c.qp[q];
    if (wc[k].status != IBV_WC_SUCCESS) {
      if (fo_error_wc(s.c, wc[k], q, "send")) continue;  // failover takes it
      return fail(s.c, completion_error(s.c, wc[k], "send", member));
    }
    if (wc[k].wr_id & kWrUnsignaled) continue;
    l.since_ns = 0;                   // progress on that QP (progress.h)
    if (wc[k].wr_id & kWrProgress) {  // inside a long chain: its run of WRs completed (progress.h)
      l.sq_used -=
          std::min(l.sq_used, static_cast<uint32_t>(wc[k].wr_id >> kWrProgressWrsShift & 0xffff));
      l.sq_bytes -= std::min(wc[k].wr_id & kWrProgressBytesMask, l.sq_bytes);
      continue;  // never a message's closing completion
    }
    if (wc[k].wr_id & kWrReject) {
      l.sq_used -= std::min<uint32_t>(1, l.sq_used);
      continue;
    }
    if (wc[k].wr_id & kWrCheck) {  // failback's check of a fresh QP (failback_dp.cc)
      l.sq_used -= std::min<uint32_t>(1, l.sq_used);
      fo_check_done(s.c, q);
      continue;
    }
    if (wc[k].wr_id & kWrEager) {  // an eager WRITE (eager.cc): its request is done
      l.sq_used -= std::min<uint32_t>(1, l.sq_used);
      eager_write_done(s, wc[k].wr_id);
      continue;
    }
    if (wc[k].wr_id >= static_cast<uint64_t>(SendComm::kPool))  // none of ours: never index by it
      return fail(s.c, Status(Code::kInternalError, "completion with unknown wr_id " +
                                                        std::to_string(wc[k].wr_id) + " on " +
                                                        s.c.describe_qp(q)));
    SendReq* leader = &s.pool[wc[k].wr_id];
    // This closing WR completed, so every WR of the group before it on that QP did too. QP q is
    // on path q / qpp; in split mode its lane is q % qpp, otherwise the path had one lane.
    // Its progress WRs (if any) completed before it and freed their runs: it frees the rest.
    size_t sizes[wire::kEntriesPerSlot];
    int path = q / s.c.qpp, lane = s.c.split ? q % s.c.qpp : 0;
    if (s.c.fo.on) {  // the chain log says which chain it closed (it may be a replay)
      const ChainRec& rec =
          s.c.fo.log[static_cast<size_t>(q) * kChainLog + l.led.log_lo % kChainLog];
      if (Status st = ledger::on_close_completed(l.led, rec.leader == wc[k].wr_id); !st.is_ok())
        return fail(s.c, on_qp(s.c, q, st));
      path = rec.path;
      lane = rec.lane;
    }
    for (int i = 0; i < leader->group_n; ++i) sizes[i] = s.pool[leader->group[i]].size;
    uint32_t tail_wrs = 0;
    uint64_t tail_bytes = 0;
    (void)stripe::plan_path(stripe::with_shares(s.c.paths, leader->shares), leader->paths, sizes,
                            leader->group_n, path, lane, nlanes, ar_of(s, sizes, leader->group_n),
                            nullptr, &tail_wrs, &tail_bytes);
    l.sq_used -= std::min(tail_wrs, l.sq_used);
    l.sq_bytes -= std::min(tail_bytes, l.sq_bytes);
    if (l.sq_used == 0) l.sq_seg = 0;
    if (s.c.prof.start != nullptr) [[unlikely]]
      prof_send_done(s, *leader, q);
    if (--leader->pending == 0) {
      if (now == 0) now = stat_clock_ns();
      s.c.stats.add_latency(now - leader->posted_ns);
      group_done(s, *leader);
    }
  }
  return Status::ok();
}

}  // namespace

// Every member's CQ in turn (a one-member comm polls one, as before fusion).
Status poll_send(SendComm& s) {
  for (int m = 0; m < s.c.nmembers; ++m) {
    // A member whose device is dead (DEVICE_FATAL) reports nothing more: its CQ is left alone.
    if (s.c.fo.dead_members >> m & 1u) continue;
    SLUICE_RETURN_IF_ERROR(poll_send_cq(s, m));
  }
  return Status::ok();
}

// Failover's replay of path p (the sender's driver calls it once both fences are in; health/
// path_failover.h argues it): per QP x of the path, the chains of x's log the receiver counted
// (its FENCE's closes) are settled, the others posted again, whole, where fo_route sends x's
// chains now, from the receive's clear-to-send entries (which stay in the FIFO until the receive
// completes). Everything it uses comes from the chain log, the group's leader and the FIFO: never
// the matching state of the call in progress (s.snap, s.slot_reqs), which is another group's.
Status fo_send_replay(SendComm& s, int p, bool* done) {
  PathFailover& f = s.c.fo;
  *done = false;
  const int nlanes = stripe::lanes_per_path(s.c.split, s.c.qpp);
  for (int x = p * s.c.qpp; x < (p + 1) * s.c.qpp; ++x) {
    const int t = fo_route(f, s.c.qpp, x);
    if (t < 0) return Status::ok();  // the substitute is fencing too: its own FENCE names the next
    QpLife& old = s.c.qp[x];
    // The receiver polled this many closes on x: the first chains of x's log arrived whole.
    const uint64_t arrived = f.rec->peer_counts[p][x - p * s.c.qpp];
    if (Status st = ledger::check_arrived(old.led, arrived); !st.is_ok())
      return fail(s.c, on_qp(s.c, x, st));
    while (old.led.log_lo < old.led.chains) {
      const uint64_t i = old.led.log_lo;
      const ChainRec rec = f.log[static_cast<size_t>(x) * kChainLog + i % kChainLog];
      SendReq* leader = &s.pool[rec.leader];
      // The chain's WRs on x are done either way (arrived, or flushed and sent again below): its
      // profiler events stop here; a replay starts none of its own (wr_events.h).
      if (s.c.prof.start != nullptr) [[unlikely]]
        prof_send_done(s, *leader, x);
      if (i < arrived) {  // its close reached the receive: settled without its own completion
        ledger::on_chain_settled(old.led);
        if (--leader->pending == 0) {
          s.c.stats.add_latency(stat_clock_ns() - leader->posted_ns);
          group_done(s, *leader);
        }
        continue;
      }
      // Not arrived: sent again on t, from the receive's clear-to-send entries, which stay in the
      // FIFO until the receive completes (the receiver reuses a slot only after that).
      cts::Snapshot snap;
      const size_t cells = static_cast<size_t>(s.c.cells());
      const wire::CtsEntry* e =
          &s.fifo[(rec.seq % wire::kFifoSlots) * wire::kEntriesPerSlot * cells];
      if (Status st = cts::take_snapshot_fused(e, rec.seq + 1, s.c.npaths, s.c.remote_nmembers,
                                               &snap, s.c.fo.path_set >= 2, s.eg.on);
          !st.is_ok()) {
        return fail(s.c, Status(Code::kInternalError,
                                "failover replay: the clear-to-send entries of receive " +
                                    std::to_string(rec.seq) + " are gone from the FIFO (" +
                                    st.message() + ") on " + s.c.describe_qp(x)));
      }
      SendReq* reqs[wire::kEntriesPerSlot];
      size_t sizes[wire::kEntriesPerSlot];
      for (int g = 0; g < leader->group_n; ++g) {
        reqs[g] = &s.pool[leader->group[g]];
        sizes[g] = reqs[g]->size;
      }
      const uint32_t need = stripe::plan_path(
          stripe::with_shares(s.c.paths, snap.shares), snap.paths, sizes, leader->group_n, rec.path,
          rec.lane, nlanes, ar_of(s, sizes, leader->group_n), nullptr);
      if (s.c.qp[t].sq_used + need > kSendSqDepth) {
        SLUICE_RETURN_IF_ERROR(poll_send(s));
        if (s.c.qp[t].sq_used + need > kSendSqDepth) return Status::ok();  // the next call goes on
      }
      uint64_t bytes = 0;
      SLUICE_RETURN_IF_ERROR(post_path_chain(s, snap, reqs, leader->group_n, rec.seq, rec.path,
                                             rec.lane, rec.first, t, leader, &bytes, true));
      ledger::on_chain_settled(old.led);
      ++f.chains_replayed;
      f.bytes_replayed += bytes;
      ++f.rec->path_chains_replayed[p];
      f.rec->path_bytes_replayed[p] += bytes;
    }
    // Every WR of x completed or flushed behind its marker: none is on its queue any more.
    old.sq_used = 0;
    old.sq_bytes = 0;
    old.sq_seg = 0;
  }
  *done = true;
  return Status::ok();
}

}  // namespace dp

Status isend(SendComm* s, void* data, size_t size, int tag, MemHandle* mh, Request** out,
             void* parent) {
  *out = nullptr;
  if (s == nullptr || s->kind != CommKind::kSend)
    return Status(Code::kInvalidArgument, "isend: not a send comm");
  return dp::isend_impl(s, data, size, tag, mh, parent, out);
}

}  // namespace sluice
