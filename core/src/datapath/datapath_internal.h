// Shared by the data path's files: datapath.cc (test, iflush, close, statistics), send.cc (isend
// and the send completions) and recv.cc (irecv, clear-to-send publication, receive completions).
#pragma once

#include <cstdint>
#include <new>
#include <string>

#include "comm/comm.h"

namespace sluice::dp {

// wr_id encodings. A send's closing WR carries its group leader's pool index (< 256).
inline constexpr uint64_t kWrUnsignaled = 1ull
                                          << 63;  // data WRITE: only seen when flushed in error
inline constexpr uint64_t kWrCts = 1ull << 62;    // signaled CTS write: | qp << 32 | writes covered
inline constexpr uint64_t kWrReject = 1ull << 61;  // oversize notice: one WR on its QP
// A progress WR inside a long chain (cts::plan_lane): | WRs of its run << 40 | data bytes of its
// run.
inline constexpr uint64_t kWrProgress = 1ull << 59;
// Failback's check of a fresh QP (failback_dp.cc): | the QP's index.
inline constexpr uint64_t kWrCheck = 1ull << 58;
// The eager path's WRITE of staging slot s (datapath/eager.cc): | span << 16 | s << 8 | the
// request's index (a batch's first; span: the staging slots it covers).
inline constexpr uint64_t kWrEager = 1ull << 56;
inline constexpr int kWrProgressWrsShift = 40;
inline constexpr uint64_t kWrProgressBytesMask = (1ull << kWrProgressWrsShift) - 1;
static_assert(cts::kMaxLaneWrs <= 0xffff && wire::kMaxMessageBytes <= kWrProgressBytesMask,
              "a run's WR and byte counts fit their fields");
static_assert((kWrCheck & (kWrUnsignaled | kWrCts | kWrReject | kWrProgress | kWrDrainMarker)) ==
                  0 &&
              kWrCheck > SendComm::kPool);
static_assert((kWrEager & (kWrUnsignaled | kWrCts | kWrReject | kWrProgress | kWrCheck |
                           kWrDrainMarker | kWrDrainRetired)) == 0 &&
                  kWrEager > (uint64_t{wire::kEagerMaxSlots} << 16 |
                              uint64_t{wire::kEagerMaxSlots} << 8 | SendComm::kPool) &&
                  wire::kEagerMaxSlots < 256 && SendComm::kPool <= 256,
              "an eager WRITE's wr_id is told apart from every other, its fields in 8 bits each");
static_assert((kWrDrainMarker & (kWrUnsignaled | kWrCts | kWrReject | kWrProgress)) == 0 &&
                  kWrDrainMarker > SendComm::kPool,
              "close's drain marker (comm.h) is told apart from every data-path wr_id");
inline constexpr size_t kMaxMessage = wire::kMaxMessageBytes;
static_assert(kMaxMessage < wire::kImmRecord, "a single-receive size must fit the immediate");
inline constexpr int kPollBatch = 16;

// Whether QP q carries a closing immediate of receive `seq` whose paths are `mask`
// (stripe::carries). On a one-path comm (qpp = nqps) that is cts::qp_of_lane's rule, as before.
inline bool closes_on(const Conn& c, uint32_t mask, uint64_t seq, int q) {
  return stripe::carries(mask, c.split, c.qpp, seq, q);
}
// The peer's member at the other end of QP q, and its key of the comm memory it holds there (the
// sender's FIFO, the receiver's records).
inline int remote_member(const Conn& c, int q) {
  return wire::path_member(q / c.qpp, c.remote_nmembers);
}
inline uint32_t remote_mem_rkey(const Conn& c, int q) {
  return c.remote_mem_rkey[remote_member(c, q)];
}
// Our key of our comm memory on QP q's member.
inline uint32_t local_mem_lkey(const Conn& c, int q) {
  return c.mem_lkey[c.qp_member[q]];
}

// The next request of the send pool's free list (the caller checked `s.free_top > 0`), made on
// its pool entry's first use, in use, not done, leading no group: the one place a send request is
// taken. The caller sets the rest for the kind of send it is: a rendezvous send (send.cc), an eager
// one, or a stand-in for a part sent eagerly (eager.cc).
inline SendReq* take_send_req(SendComm& s) {
  const uint16_t index = s.free_list[--s.free_top];
  SendReq* r = &s.pool[index];
  if (r->magic != Request::kMagic) {  // first use of this pool entry
    new (r) SendReq();
    r->index = index;
    r->comm = &s;
    r->is_send = true;
  }
  r->in_use = true;
  r->done = false;
  r->pending = 0;
  r->group_n = 0;
  return r;
}

// The per-member payload counters (Conn::member_bytes): each buffer's part on each path of `mask`
// (stripe::part_of) counts for the local member of that path. Not kept on a one-member side.
void count_member_bytes(Conn& c, uint32_t mask, uint32_t shares, const size_t* sizes, int n);

Status fail(Conn& c, Status st);
// A fatal device, an async-event failure, or (rate limited, liveness.h) a peer that is gone.
// new_work: isend/irecv (fail once the peer is gone); false: test of a pending request.
Status check_device(Conn& c, bool new_work = true);
// The progress watchdog (progress.h), when a liveness poll made it due: polls the comm's CQ, then
// fails the comm when a QP's watched work has had no completion for longer than the bound. For a
// receive comm the caller holds its mu.
Status check_progress(Conn& c);
// The QP of number `qpn` on member `member` (whose CQ delivered the completion): QP numbers are
// per adapter, so two members' QPs may share one (a fused comm's rxe0 and rxe1 QPs are both
// qpn 17). -1: none.
int qp_index(const Conn& c, uint32_t qpn, int member);
Status completion_error(Conn& c, const ibv_wc& wc, const char* side, int member);
bool valid_mh(const Conn& c, const MemHandle* mh);
Status bad_buffer(const Conn& c, const char* call, const void* data, size_t size,
                  const MemHandle* mh);
// A pure check's error, placed: "<message> on <qp description>".
Status on_qp(const Conn& c, int q, const Status& st);

Status poll_send(SendComm& s);
Status poll_recv(RecvComm& r);  // caller holds r.mu
// The watchdog's probe behind QP q's unsignaled CTS writes (progress.h); caller holds r.mu.
Status post_cts_probe(RecvComm& r, int q);

// Failover (failover_dp.h; health/path_failover.h). fo_drive: at the start of every call on a
// failover comm (check_device). fo_error_wc: a completion in error on QP q (a current
// incarnation) of a failover comm, from a poll's loop: true when failover takes it (a drain
// marker, a flush behind a fence, or a path's first fault, recorded for the driver); false: the
// comm fails as before. fo_stale_wc: a completion of no current incarnation (a retired one's:
// counted and dropped; one of none of the comm's QPs: a flush is ignored on a failover comm, else
// the comm fails). fo_watchdog: the watchdog fired on QP q; true when another path carries and the
// path fails over instead.
Status fo_drive(Conn& c);
// What a path's rules answered (failover::Action bits), carried out; `peer` is the offer or
// answer that caused it (recovery).
Status fo_apply(Conn& c, int p, uint32_t a, int64_t now, const wire::PathMsg* peer = nullptr);
// Failback (failback_dp.cc): the recovery actions (kDropFresh, kOffer, kAnswer, kConnect,
// kCheck); whether the sender may offer path p now and the receiver answer; a check that came
// back on QP q (the sender's completion, the receiver's immediate).
Status fo_recovery_action(Conn& c, int p, uint32_t a, const wire::PathMsg* peer, int64_t now);
bool fo_may_offer(const Conn& c, int p, int64_t now);
// A path message of type t for path p at its current epoch (path, epoch, QP count set), and its
// sending on the kept socket: a write that fails fails the comm (its peer could never finish
// the fence or the attempt). fo_fence_msg: this side's FENCE of path p for `epoch`: with counts,
// its close counts (receiver) or chains (sender), and the receiver's substitute and first
// receive without the path; without, a refusal of an attempt that names nothing.
wire::PathMsg fo_msg(const Conn& c, wire::PathMsgType t, int p);
wire::PathMsg fo_fence_msg(const Conn& c, int p, uint32_t epoch, bool counts);
Status fo_send_msg(Conn& c, const wire::PathMsg& m);
bool fo_may_answer(const Conn& c, int p, int64_t now);
void fo_check_done(Conn& c, int q);
bool fo_error_wc(Conn& c, const ibv_wc& wc, int q, const char* what);
Status fo_stale_wc(Conn& c, const ibv_wc& wc, int member, const char* what);
bool fo_watchdog(Conn& c, int q, const std::string& why);
// SLUICE_TEST_HOLD_RQ (tests only; failover_recv.cc): a successful receive completion on a QP
// whose fence's marker is not back yet is held (true) and taken once the marker is back, as if
// the receive queue's completions came after the send queue's; take_held_wc takes one.
bool fo_hold_wc(RecvComm& r, const ibv_wc& wc, int member, int q);
Status take_held_wc(RecvComm& r, const ibv_wc& wc, int member);
// The sender (send.cc): settles path p's logged chains the receiver counted and replays the
// others where fo_route sends them; *done once none is left (else: no room yet, or the
// substitute is fencing: the next call goes on).
Status fo_send_replay(SendComm& s, int p, bool* done);

// Clear-to-send publication (recv.cc): posts r's staged receives (receive WRs, then the CTS
// WRITEs); what finds no CTS budget stays staged for the comm's next call. Caller holds r.mu.
Status publish(RecvComm& r);
// Failover (failover_recv.cc): n receive WRs on QP q whose closes name their receives (a fused
// comm's credits moved to a substitute); every receive from r.published on published again.
// Caller holds r.mu.
Status post_plain_credits(RecvComm& r, int q, uint64_t n);
Status republish_from(RecvComm& r);

// ---- The eager path (eager.cc, docs/eager.md) --------------------------------------------------
// Receiver. eager_recv_post: irecv's part, once the receive's entries are staged (caller holds
// r.mu): numbers its parts, borrows the ring at the first receive of host memory, copies what
// already lies in the ring, and completes the receive when every part did (`resolved`).
Status eager_recv_post(RecvComm& r, RecvReq& req, const MemHandle* const* mhs, const size_t* sizes);
// Reads the ring for messages that landed (at most W slots); copies those whose part is posted.
Status eager_poll(RecvComm& r);
// How far publication goes now: receives [published, end). Held back: entries of receives
// completed from the ring (until a batch or a credit is due) and of receives whose message is
// expected in the ring (a lazy comm's, until it lands, an ask names it, or a credit is due).
uint64_t eager_publish_end(const RecvComm& r);
// Whether receive `seq` may take its FIFO slot: the sender read the slot's previous use (its head
// report or a close says so). Otherwise held entries go out now and irecv says "again".
bool eager_slot_free(RecvComm& r, uint64_t seq);
// The sender: reports its FIFO head to the receiver (16 bytes, one WRITE) when it moved by 16 since
// the last report, or, with `force`, by any (isend is about to say "again").
Status eager_report_head(SendComm& s, bool force);
// The grant's one WRITE, before the first publication that follows the ring's loan (recv.cc
// accounts it as a clear-to-send write on QP q).
Status post_eager_grant(RecvComm& r, int q);
// A receive whose closes are in: done now, or once its eager parts are copied (`closed`).
Status finish_recv(RecvComm& r, RecvReq& req, int64_t* now);
// Sender. eager_read_head: reads the FIFO's head slots (resolved ones are passed over, parts sent
// eagerly are matched); ok with or without a snapshot held; again: the slot at head is complete
// but not posted yet (no room), or too few requests free to stand in for eager parts.
Status eager_read_head(SendComm& s);
// A send that goes eagerly when the book allows (*out set), else again. host: its buffer is in
// host memory (or it is empty); one in GPU memory never goes eagerly.
Status eager_send(SendComm& s, const void* data, size_t size, int tag, bool host, void* parent,
                  Request** out);
// A send that may not go eagerly (eager_send said again): asks for its clear-to-send through the
// ring when the book says so (the receiver may be holding it back), once per send.
Status eager_ask(SendComm& s, size_t size, int tag, bool host);
// A completion of an eager WRITE (poll_send).
void eager_write_done(SendComm& s, uint64_t wr_id);
// Posts the open batch of eager sends (SendComm::Eager::open), if one waits and its path and send
// queue take it now; it stays open otherwise (a later call posts it). Every call that may wait on a
// message's arrival makes it: test, a send that cannot join the batch, an ask, close.
Status eager_flush(SendComm& s);
// A fused comm's failover (eager.cc "Failover"): once both sides fenced path p, every eager WRITE
// that went on it and was not seen complete is posted again where the eager path goes now, in
// counter order (*done: all of them; else the next call goes on).
Status eager_replay(SendComm& s, int p, bool* done);
// Posts the group at head when it is complete and fits (*posted); shared with isend (send.cc).
Status post_group_if_room(SendComm& s, bool* posted);

}  // namespace sluice::dp
