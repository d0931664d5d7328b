// Profiler events of the data path (api.h ProfilerHook): one event per work request that carries a
// message. Every entry point is called only behind `if (c.prof.start != nullptr)`, so a comm with
// no profiler attached pays one predictable branch per chain, completion or clear-to-send write,
// and nothing else. Nothing here allocates, locks or logs.
#pragma once

#include <cstdint>

#include "comm/comm.h"

namespace sluice::dp {

// Send side. prof_send_chain: the chain wrs[0..nw) on QP q of the group reqs[0..nreqs) led by
// reqs[0], laid out as plan[0..nw), is about to be posted; a group has at most one chain per QP
// when it is first posted, so its events are kept per QP. Everything it reads is in its
// arguments, never the comm's matching state (s.snap, s.slot_reqs: the call in progress, which is
// another group's while failover replays an old one). A replayed chain (send.cc fo_send_replay)
// gets no events of its own: the original chain's events stop when it is settled or replayed
// (prof_send_done), and a replay may share its QP with the group's own chain there; nor does a
// chain that failover routes to another path's QP (a receive published before its path failed):
// it shares that QP with the group's own chain there, whose events the QP's slot holds.
// prof_send_done: that QP's closing completion was polled (or the chain was settled or replayed
// by failover), so every WR of its chain is complete.
void prof_send_chain(const Conn& c, int q, const ibv_send_wr* wrs, const cts::LaneWr* plan, int nw,
                     SendReq* const* reqs, int nreqs);
void prof_send_done(SendComm& s, SendReq& leader, int q);
// prof_eager_send: the eager WRITE `w` of send `r` (header and payload, into the receiver's ring)
// on QP q is about to be posted: its one event, in r.ev[q], stops when the WRITE completes
// (eager_write_done) or at close.
// Kept in r.ev[ev] (one event per eager send, whatever QP it went on: eager.cc kEagerEv).
void prof_eager_send(const Conn& c, SendReq& r, const ibv_send_wr& w, int q, int ev);

// Receive side. prof_recv_posted: irecv took receive `req` with its buffers' parents.
// prof_cts: the clear-to-send WRITE `w` on QP q publishing receives [from, to) is about to be
// posted (a receive published again keeps its first write's event). prof_recv_done: the receive
// completed (its data arrived, so the sender had read its clear-to-send entries: the WRITE is
// complete).
void prof_recv_posted(RecvReq& req, int n, void* const* parents);
void prof_cts(RecvComm& r, uint64_t from, uint64_t to, const ibv_send_wr& w, int q);
void prof_recv_done(RecvComm& r, RecvReq& req);

// The flush READ `w` on the loopback QP `qpn` for a receive into `data`: the parent is the one the
// latest receive into that buffer was given. Returns the event (or nullptr).
void* prof_flush_start(RecvComm& r, const ibv_send_wr& w, uint32_t qpn, const void* data);

// Stops `ev` if set and clears it.
inline void prof_stop(const Conn& c, void*& ev) {
  if (ev != nullptr) c.prof.stop(c.prof.ctx, ev);
  ev = nullptr;
}

// At close: stops every event still open on the comm (work that never completed).
void prof_close_send(SendComm& s);
void prof_close_recv(RecvComm& r);

}  // namespace sluice::dp
