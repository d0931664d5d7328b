// Profiler events of the data path (api.h ProfilerHook): one event per work request that carries a
// message. Every entry point is called only behind `if (c.prof.start != nullptr)`, so a comm with
// no profiler attached pays one predictable branch per chain, completion or clear-to-send write,
// and nothing else. Nothing here allocates, locks or logs.
#pragma once

#include <cstdint>

#include "comm/comm.h"

namespace sluice::dp {

// Send side. prof_send_chain: the chain wrs[0..nw) on QP q of the group at s.head, laid out as
// plan[0..nw), is about to be posted (s.slot_reqs still holds the group); a group has at most one
// chain per QP, so its events are kept per QP. prof_send_done: that QP's closing completion was
// polled, so every WR of its chain is complete.
void prof_send_chain(SendComm& s, int q, const ibv_send_wr* wrs, const cts::LaneWr* plan, int nw);
void prof_send_done(SendComm& s, SendReq& leader, int q);

// Receive side. prof_recv_posted: irecv took receive `req` with its buffers' parents.
// prof_cts: the clear-to-send WRITE `w` on QP q publishing receives [from, to) is about to be
// posted. prof_recv_done: the receive completed (its data arrived, so the sender had read its
// clear-to-send entries: the WRITE is complete).
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
