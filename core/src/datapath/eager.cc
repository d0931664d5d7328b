// The eager path (docs/eager.md): a message of at most SLUICE_EAGER_MAX bytes whose receive the
// sender has not seen goes at once into the receiver's ring (one WRITE from a staging slot), and
// the receiver copies it into the receive buffer when both are there. The books
// (rules/eager_book.h) decide who pairs with whom; this file moves the bytes and keeps the
// requests. No allocation, lock or log on the path of a message; every loop is bounded by the
// ring's slots or a receive's parts.
#include <arpa/inet.h>

#include <bit>
#include <cstring>
#include <new>

#include "comm/eager_pool.h"
#include "datapath/datapath_internal.h"
#include "datapath/wr_events.h"

namespace sluice {
namespace dp {

namespace {

// The staging slot field of an eager wr_id that marks a head report or an ask (staging slots are
// < 64).
constexpr uint32_t kHeadReport = 0xff;
constexpr uint32_t kAskWrite = 0xfe;
// Where a request's profiler event of its eager WRITE is kept (SendReq::ev), whatever QP it went
// on (a fused comm's route may change before it completes).
constexpr int kEagerEv = 0;

const char* ring_slot(const RecvComm& r, uint64_t counter) {
  const EagerLease& l = r.eg.ring;
  return l.base + (counter % l.slots) * l.stride;
}

// The mask of a receive's parts (bit i: part i).
uint8_t all_parts(const RecvReq& req) {
  return static_cast<uint8_t>((1u << req.n) - 1);
}

// The sender's FIFO head `v`, as a slot header or a head report gave it: the slots before it were
// read. Kept only when it moves forward and not past what this side ever published (a value read
// late is stale, never wrong; one past that is not a head). While a failover's rewrite is open,
// `published` was lowered to its first rewritten receive: the sender may have read past it, and a
// slot's header is read once, so its head is judged against what was published before (hi).
void learn_head(RecvComm& r, uint64_t v) {
  if (v > r.eg.head && v <= std::max(r.published, r.rewrite.hi())) r.eg.head = v;
}

// Copies eager message `counter` (validated when it landed) into part i of `req`, and frees its
// ring slot. A part larger than its buffer, or in GPU memory, fails the comm (the sender's send was
// legal for it: it is told by the failure notice).
Status copy_part(RecvComm& r, RecvReq& req, int i, uint64_t counter) {
  const uint32_t size = r.eg.book->size(counter);
  const uint32_t bit = 1u << i;
  if (size > req.posted[i]) {
    return fail(
        r.c, Status(Code::kInvalidUsage,
                    "peer sent " + std::to_string(size) + " bytes (eagerly) into receive buffer " +
                        std::to_string(i) + " (tag " + std::to_string(req.tags[i]) + ") of only " +
                        std::to_string(req.posted[i]) + " bytes on " + r.c.describe_qp(0) +
                        "; nothing was written"));
  }
  if (size > 0 && (req.host & bit) == 0) {
    return fail(r.c, Status(Code::kInvalidUsage,
                            "an eager message for receive buffer " + std::to_string(i) +
                                " in GPU memory on " + r.c.describe_qp(0) +
                                ": GPU memory was registered on this comm after its first "
                                "receive (host memory) got an eager ring; register every buffer "
                                "before the first receive, as NCCL does, or set "
                                "SLUICE_EAGER_MAX=0"));
  }
  if (size > 0) {
    void* dst = reinterpret_cast<void*>(
        r.c.entry(r.stage, static_cast<uint32_t>(req.seq % wire::kFifoSlots), i)->addr);
    std::memcpy(dst, r.eg.ring.base + r.eg.book->at(counter), size);
  }
  req.received[i] = size;
  req.eager_got |= static_cast<uint8_t>(bit);
  r.eg.book->consume(counter, req.seq, i);
  r.c.stats.eager.add(1);
  return Status::ok();
}

}  // namespace

namespace {

// Receive `req`, not published, got every part from the ring: done, and its entries say so
// (written later, in a batch: eager_publish_end).
Status resolve(RecvComm& r, RecvReq& req, int64_t* now) {
  req.resolved = true;
  req.pending = 0;
  req.eager_want = req.eager_got;
  const uint32_t slot = static_cast<uint32_t>(req.seq % wire::kFifoSlots);
  for (int i = 0; i < req.n; ++i) r.c.entry(r.stage, slot, i)->nreqs |= wire::kCtsResolved;
  ++r.eg.held;
  return finish_recv(r, req, now);
}

// Ask `counter` (wire::kEagerAsk): the sender waits for the clear-to-send of a part it will send by
// rendezvous. The comm's traffic is not eager any more; sizes up to the asked one are not taken
// for eager ones (the sender could not send it eagerly: a smaller SLUICE_EAGER_MAX, no staging).
Status take_ask(RecvComm& r, uint64_t counter, const wire::EagerHeader& h) {
  uint64_t seq = UINT64_MAX;
  const bool all = (h.size & wire::kEagerAskAll) != 0;
  if (Status st = r.eg.book->arrive_ask(counter, h.tag, h.ordinal, all, &seq); !st.is_ok())
    return fail(r.c, Status(Code::kRemoteError, st.message() + " on " + r.c.describe_qp(0)));
  r.eg.lazy = false;
  if (all) {  // the sender cannot number a tag it sends: nothing is held on this comm any more
    r.eg.lazy_max = -1;
    r.eg.flush_to = UINT64_MAX;
    return Status::ok();
  }
  // Sizes up to the asked one no longer count as eager ones, if the sender says it never sends
  // them eagerly (a smaller SLUICE_EAGER_MAX, no staging): then they do not make the comm lazy.
  const int64_t size = h.size & wire::kEagerAskSize;
  if ((h.size & wire::kEagerAskLimit) != 0 && size <= r.eg.lazy_max) r.eg.lazy_max = size - 1;
  if (seq != UINT64_MAX) r.eg.flush_to = std::max(r.eg.flush_to, seq + 1);
  return Status::ok();
}

}  // namespace

Status finish_recv(RecvComm& r, RecvReq& req, int64_t* now) {
  if ((req.eager_got & ~req.eager_want) != 0 && !req.resolved) {
    return fail(r.c, Status(Code::kRemoteError,
                            "receive " + std::to_string(req.seq) +
                                ": a part came through the eager ring that its close says was "
                                "written into the buffer, on " +
                                r.c.describe_qp(0)));
  }
  if ((req.eager_want & ~req.eager_got) != 0) {
    req.closed = true;  // its eager parts are still on their way: eager_poll finishes it
    return Status::ok();
  }
  req.done = true;
  ++r.completed;
  r.completed_hi = std::max(r.completed_hi, req.seq + 1);
  // The prefix of receives all done (RecvComm::done_below, read by `test` only on a comm with the
  // eager path, whose receives are tested done in posting order: a pool entry holds receive k
  // until k and every one before it were done). Each receive is passed once here. Without the
  // eager path entries are freed in any order, and the prefix may stop short: nothing reads it.
  while (r.done_below < r.seq) {
    const RecvReq& q = r.pool[r.done_below % wire::kFifoSlots];
    if (q.seq != r.done_below || !q.done) break;
    ++r.done_below;
  }
  if (r.eg.on) {
    // The comm's traffic is eager while its receives complete from the ring, or by rendezvous with
    // sizes the sender could have sent eagerly: then later receives hold their clear-to-send back.
    bool small = true;
    for (int i = 0; i < req.n; ++i)
      small = small && static_cast<int64_t>(req.received[i]) <= r.eg.lazy_max;
    r.eg.lazy = req.eager_got != 0 || small;
  }
  r.c.stats.messages.add(1);
  size_t got = 0;
  for (int i = 0; i < req.n; ++i) got += req.received[i];
  r.c.stats.bytes.add(got);
  count_member_bytes(r.c, req.paths, req.shares, req.received, req.n);
  if (*now == 0) *now = stat_clock_ns();
  r.c.stats.add_latency(*now - req.posted_ns);
  if (r.c.prof.start != nullptr) [[unlikely]]
    prof_recv_done(r, req);
  return Status::ok();
}

Status eager_recv_post(RecvComm& r, RecvReq& req, const MemHandle* const* mhs,
                       const size_t* sizes) {
  req.resolved = req.closed = false;
  req.eager_got = req.eager_want = req.host = 0;
  if (!r.eg.on) return Status::ok();
  const int n = req.n;
  for (int i = 0; i < n; ++i)
    if (sizes[i] == 0 || mhs[i]->type == MemType::kHost) req.host |= static_cast<uint8_t>(1u << i);
  const uint8_t all = all_parts(req);
  EagerLease& ring = r.eg.ring;
  if (req.seq == 0) {
    // Decided once, at the comm's first receive, before any part is numbered (both ends number
    // from their first send and part): a ring and its book, or no eager path for the comm's life.
    // The grant goes out before this receive's entries (recv.cc), so the sender has it before it
    // reads its first slot, where it takes its own book or goes without (decide_book).
    //
    // The ring is host memory, copied out by the CPU: a comm that receives into GPU memory gets
    // none. NCCL with GPUDirect mixes both on one comm (LL in host memory, LL128 and SIMPLE in GPU
    // memory), so the registrations decide, not this receive: NCCL registers every buffer of a
    // connection before its first receive. An eager message bound for a GPU receive would fail
    // the comm (copy_part): its sender sends before it sees the receive.
    EagerPool& p = *ring.pool;
    const bool cuda = r.c.cuda_registered.load(std::memory_order_acquire);
    const bool gpu = cuda || req.host != all;
    const int i = gpu ? -1 : p.acquire();
    if (i < 0) {
      if (gpu || p.first_empty()) {
        SLUICE_INFO(kSubNet, "%s: eager path off for this comm: %s", r.c.describe_qp(0).c_str(),
                    cuda  ? "GPU memory is registered on it"
                    : gpu ? "its first receive is in GPU memory"
                          : "every ring of its adapter's eager pool is lent "
                            "(SLUICE_EAGER_RINGS; said once per pool)");
      }
      r.eg.on = false;  // clear-to-send only, for good: nothing numbered, no grant
      r.c.stats.set_eager(EagerState::kWithout);
      return Status::ok();
    }
    ring.index = i;
    ring.base = p.ring(i);
    ring.lkey = p.lkey();
    ring.rkey = p.rkey();
    ring.slots = p.slots();
    ring.stride = p.stride();
    std::memset(ring.base, 0, ring.slots * ring.stride);  // once per loan
    r.eg.book = p.recv_book(i);
    r.eg.book->reset(ring.slots);
    r.c.stats.set_eager(EagerState::kOn);
    r.eg.grant = p.next_grant();
    r.eg.lazy_max = static_cast<int64_t>(p.max_bytes());
    // A fused comm's WRITEs reach the ring through any of this side's members: each one's key.
    const int more = r.c.npaths > 1 ? r.c.nmembers - 1 : 0;
    wire::encode_grant(r.eg.src, reinterpret_cast<uintptr_t>(ring.base), ring.rkey, r.eg.grant,
                       static_cast<uint32_t>(p.max_bytes()), ring.slots, &r.eg.rkeys[1], more);
    r.eg.grant_sent = false;  // written before the next publication (recv.cc)
  }
  // Parts whose tag this end numbers say so in their entries (the sender sends eagerly only those).
  const uint8_t numbered = r.eg.book->post(req.seq, req.tags, n);
  const uint32_t at = static_cast<uint32_t>(req.seq % wire::kFifoSlots);
  for (int i = 0; i < n; ++i)
    if (numbered >> i & 1u) r.c.entry(r.stage, at, i)->index |= wire::kCtsNumbered;
  if (!ring.held()) return Status::ok();
  // Its post-to-completion time starts here: a receive completed from the ring may never be
  // published (write_cts sets it for those that are).
  req.posted_ns = stat_clock_ns();
  // An ask came before this receive was posted: its clear-to-send goes now.
  // (never lowered: an ask-all set it to UINT64_MAX, and nothing is held on the comm any more)
  if (r.eg.book->take_ask(req.seq)) r.eg.flush_to = std::max(r.eg.flush_to, req.seq + 1);
  uint64_t c[wire::kEntriesPerSlot];
  const uint8_t mask = r.eg.book->fill_from_ring(req.seq, c);
  for (int i = 0; i < n; ++i)
    if (mask >> i & 1u) SLUICE_RETURN_IF_ERROR(copy_part(r, req, i, c[i]));
  // What landed since the ring was last read (for this receive's parts too).
  SLUICE_RETURN_IF_ERROR(eager_poll(r));
  if (req.done || req.eager_got != all) return Status::ok();  // done: by eager_poll
  // Every part is here: the receive is done, and its entries say so (written later, held).
  int64_t now = 0;
  return resolve(r, req, &now);
}

namespace {

// Eager message `counter` (part `p` of a slot `base` bytes into the ring) checked in: copied into
// its receive part if posted (and the receive finished if that was its last part), else held in
// the ring until its receive is posted (eager_recv_post's fill_from_ring).
Status take_message(RecvComm& r, uint64_t counter, const wire::EagerPart& p, uint32_t base,
                    bool batch_end) {
  bool posted = false;
  uint64_t seq = 0;
  int index = -1;
  if (Status st =
          r.eg.book->arrive(counter, p.tag, p.ordinal, p.size, base + p.at, &posted, &seq, &index);
      !st.is_ok())
    return fail(r.c, Status(Code::kRemoteError, st.message() + " on " + r.c.describe_qp(0)));
  if (batch_end) r.eg.book->batch_read(counter);
  if (!posted) return Status::ok();
  RecvReq& req = r.pool[seq % wire::kFifoSlots];
  SLUICE_RETURN_IF_ERROR(copy_part(r, req, index, counter));
  int64_t now = 0;
  if (req.closed && (req.eager_want & ~req.eager_got) == 0) {
    SLUICE_RETURN_IF_ERROR(finish_recv(r, req, &now));
  } else if (!req.done && req.seq < r.rq_posted && req.eager_got == all_parts(req)) {
    // Every part came eagerly though its clear-to-send went out: done now (its sender may be
    // idle); the zero-length close it owes the receive WR is taken when it comes (recv.cc).
    req.close_owed = true;
    req.eager_want = req.eager_got;
    SLUICE_RETURN_IF_ERROR(finish_recv(r, req, &now));
  } else if (!req.done && req.seq >= r.rq_posted && req.eager_got == all_parts(req)) {
    // A receive whose clear-to-send was held back (no receive WR, nothing published): done from
    // the ring, its entries marked resolved (eager_publish_end writes them later).
    SLUICE_RETURN_IF_ERROR(resolve(r, req, &now));
  }
  return Status::ok();
}

}  // namespace

Status eager_poll(RecvComm& r) {
  if (!r.eg.on || !r.eg.ring.held()) return Status::ok();
  eager::ReceiverBook& b = *r.eg.book;
  const size_t max = r.eg.ring.stride - wire::kEagerHeaderBytes;
  // A one-path comm's eager WRITEs all go on its first QP (eager_qp), which lands them in counter
  // order: the first slot not landed ends the scan (one landed after it is read at a later poll
  // at worst). A fused comm's go on several QPs and may land in any order: every slot is read.
  const bool in_order = r.c.npaths <= 1;
  for (uint64_t c = b.prefix(); c < b.credited(); ++c) {
    // A copy below may move the prefix past later counters (those copied earlier): their slots
    // still hold their messages, which must never be taken twice.
    if (c < b.prefix() || b.arrived(c)) continue;
    const void* slot = ring_slot(r, c);
    if (!wire::eager_slot_landed(slot, c)) {  // one load for an empty slot
      if (in_order) break;
      continue;
    }
    wire::EagerHeader h;
    std::string why;
    // A batch found landing at an earlier poll: its header and the records that checked then are
    // final (its writer rewrites the slot only after a credit), and are not checked again.
    eager::ReceiverBook::Scan& scan = b.scan();
    const bool known = scan.seq == c + 1;
    if (known) {
      std::memcpy(&h, slot, sizeof h);
    } else {
      const wire::SlotRead rd = wire::read_eager_slot(slot, c, r.eg.grant, max, &h, &why);
      if (rd == wire::SlotRead::kNotYet) {
        if (in_order) break;
        continue;
      }
      if (rd == wire::SlotRead::kCorrupt)
        return fail(r.c, Status(Code::kRemoteError, why + " on " + r.c.describe_qp(0)));
    }
    // The sender's FIFO head when it wrote the slot (low 16 bits): at most 32 past the head known
    // here (this side publishes at most 32 past it) and never past what was published.
    learn_head(r, wire::credit_of(r.eg.head, h.head));
    if ((h.size & wire::kEagerAsk) != 0) {
      SLUICE_RETURN_IF_ERROR(take_ask(r, c, h));
      continue;
    }
    // A batch (wire::kEagerMore): messages c .. c + n - 1, every record checked before any is
    // taken; it may run on into the next slots, never past the ring's end.
    wire::EagerPart parts[wire::kEagerMaxMore + 1];
    int n = 1;
    parts[0] =
        wire::EagerPart{h.size, h.tag, h.ordinal, static_cast<uint32_t>(wire::kEagerHeaderBytes)};
    if (wire::eager_more(h) != 0) {
      const size_t region = (r.eg.ring.slots - c % r.eg.ring.slots) * r.eg.ring.stride;
      uint32_t checked = known ? scan.records : 0;
      const wire::SlotRead br =
          wire::read_eager_batch(slot, h, region, max, parts, &n, &why, &checked);
      if (br == wire::SlotRead::kNotYet) {
        scan = eager::ReceiverBook::Scan{c + 1, checked};
        if (in_order) break;
        continue;
      }
      if (br == wire::SlotRead::kCorrupt)
        return fail(r.c, Status(Code::kRemoteError, why + " on " + r.c.describe_qp(0)));
    }
    const auto base = static_cast<uint32_t>(static_cast<const char*>(slot) - r.eg.ring.base);
    for (int j = 0; j < n; ++j) {
      // The batch's end is marked before its last message can be copied out (and the prefix pass
      // it): a credit is due then (ReceiverBook::credit_due).
      SLUICE_RETURN_IF_ERROR(
          take_message(r, c + static_cast<uint64_t>(j), parts[j], base, n > 1 && j == n - 1));
    }
  }
  if (r.eg.flush_to > r.published) return publish(r);  // an ask names a held receive
  return Status::ok();
}

bool eager_slot_free(RecvComm& r, uint64_t seq) {
  if (!r.eg.on || seq < wire::kFifoSlots) return true;
  // The sender's head report: the same 8-byte value twice, written by one WRITE, which lands in
  // order (the clear-to-send FIFO's rule, wire.h CtsEntry): once the second copy reads equal to
  // the first, the first is complete. A value never wraps, so a report read late is only stale,
  // never wrong; and none can exceed what this side published.
  const uint64_t c =
      std::atomic_ref<const uint64_t>(r.eg.head_cell[1]).load(std::memory_order_acquire);
  const uint64_t v =
      std::atomic_ref<const uint64_t>(r.eg.head_cell[0]).load(std::memory_order_acquire);
  if (v == c) learn_head(r, v);
  if (seq - wire::kFifoSlots < r.eg.head) return true;
  r.eg.flush = true;  // held entries go out: the sender cannot read them otherwise
  return false;
}

uint64_t eager_publish_end(const RecvComm& r) {
  if (!r.eg.on || r.published == r.seq) return r.seq;
  // Held back while its message is expected in the ring: a lazy comm's receive (its traffic is
  // eager), every part a numbered tag in host memory, no ask for it.
  const bool lazy =
      r.eg.hold && r.eg.lazy && r.eg.ring.held() && r.eg.grant_sent && r.eg.book->credited() > 0;
  auto at = [&](uint64_t k) {
    const RecvReq& q = r.pool[k % wire::kFifoSlots];
    if (q.resolved) return eager::Pending::kResolved;
    if (!lazy || k < r.eg.flush_to || q.host != all_parts(q) || !r.eg.book->all_numbered(k))
      return eager::Pending::kNeeded;
    return eager::Pending::kHeld;
  };
  return eager::publish_end(r.published, r.seq, r.eg.book->credit_due(), r.eg.flush, at);
}

// ---- Sender
// --------------------------------------------------------------------------------------

namespace {

// A request of our own standing in the group at head for part i, sent eagerly before its
// clear-to-send was read (send.cc posts the group as if it had 0 bytes; the close names its size).
void stand_in(SendComm& s, int i, uint32_t size) {
  SendReq* r = take_send_req(s);
  r->posted = false;
  r->eager = false;
  r->shadow = true;
  r->eager_size = size;
  r->data = nullptr;
  r->size = 0;
  r->lkey = 0;
  for (uint32_t& k : r->lkeys) k = 0;
  r->parent = nullptr;
  s.slot_reqs[i] = r;
  s.matched |= static_cast<uint8_t>(1u << i);
}

}  // namespace

namespace {

// Every eager WRITE of a message or an ask carries the sender's FIFO head (EagerHeader::head),
// which the receiver learns when it reads the slot: a head report (eager_report_head) is then owed
// only for slots read after it. In a stream of eager messages no report goes at all.
void told_head(SendComm::Eager& g, uint64_t head) {
  g.reported = head;
  g.unreported = false;
}

// The QP that carries the eager WRITE of `counter` (a message or an ask; a head report takes 0):
// on a one-path comm its only QP; on a fused comm the first QP of a path that carries by weight
// (never a standby's while another carries), in turn by counter, so the paths share the small
// messages, where failover routes it (fo_route); -1 while none can take it (a fence waits for
// its substitute): nothing goes eagerly then. Eager WRITEs need no order among themselves (the
// receiver takes each by its counter), so any path will do. The ring's key is the receiver
// member's at the other end of that QP (the grant names each one).
int eager_qp(const SendComm& s, uint64_t counter) {
  if (s.c.npaths <= 1) return 0;
  const stripe::Paths& w = s.c.fo.on ? s.c.fo.live : s.c.paths;
  int carry[stripe::kMaxPaths];
  int n = 0;
  for (int p = 0; p < s.c.npaths && p < stripe::kMaxPaths; ++p)
    if (w.weight[p] > 0) carry[n++] = p;
  const int p = n > 0 ? carry[counter % static_cast<uint64_t>(n)] : 0;
  return fo_route(s.c.fo, s.c.qpp, p * s.c.qpp);
}

// The receiver's grant block, read until it is valid (then kept: `granted`). kRemoteError: a
// block whose CRC checks with values outside the format's.
Status try_grant(SendComm& s) {
  SendComm::Eager& g = s.eg;
  if (g.granted) return Status::ok();
  std::string why;
  const wire::SlotRead rd = wire::read_grant(g.block, &g.grant, &why);
  if (rd == wire::SlotRead::kCorrupt)
    return fail(s.c, Status(Code::kRemoteError, why + " on " + s.c.describe_qp(0)));
  g.granted = rd == wire::SlotRead::kReady;
  return Status::ok();
}

// Whether this send comm takes a book: decided once, the first time it meets the eager path with
// something to number (its first slot read, or a send that finds a grant before any slot), so the
// book numbers every send and part from the first, as the receiver's numbers every part from its
// first receive. The receiver writes its grant before its first entries, on the same QP
// (recv.cc publish), so a comm whose first slot was read without a grant has no ring on the other
// end: it needs no book. A comm that finds no book in the pool goes without, and if the receiver
// has a ring it asks once to be sent everything by clear-to-send (eager_ask: an ask-all).
void decide_book(SendComm& s) {
  SendComm::Eager& g = s.eg;
  g.decided = true;
  s.c.stats.set_eager(EagerState::kWithout);  // unless a book is lent below
  if (!g.granted) return;
  EagerBookLease& l = g.book_lease;
  if (l.pool == nullptr) return;  // negotiated without a pool here (eager.cc setup): no book
  const int i = l.pool->acquire_send_book();
  if (i < 0) {
    if (l.pool->first_empty()) {
      SLUICE_INFO(kSubNet,
                  "%s: eager path off for this comm: every sender book of its adapter's eager "
                  "pool is lent (SLUICE_EAGER_RINGS; said once per pool)",
                  s.c.describe_qp(0).c_str());
    }
    return;
  }
  l.index = i;
  g.book = l.pool->send_book(i);
  g.book->reset(true);
  g.book->set_slots(g.grant.slots);
  s.c.stats.set_eager(EagerState::kOn);
}

Status read_head(SendComm& s) {
  for (;;) {
    if (s.snap.seq != 0) {
      if (!s.eg.owed) return Status::ok();
      bool posted = false;
      SLUICE_RETURN_IF_ERROR(post_group_if_room(s, &posted));
      if (!posted) return Status::again();
      s.eg.owed = false;
      continue;
    }
    // Stand-ins for the slot's eager parts come from the pool: make sure a whole slot's fit
    // before the book matches (it cannot take a match back).
    if (s.free_top < wire::kEntriesPerSlot) return Status::ok();
    const wire::CtsEntry* e =
        &s.fifo[(s.head % wire::kFifoSlots) * wire::kEntriesPerSlot * s.c.cells()];
    Status st = s.c.npaths > 1
                    ? cts::take_snapshot_fused(e, s.head + 1, s.c.npaths, s.c.remote_nmembers,
                                               &s.snap, s.c.fo.path_set >= 2, true)
                    : cts::take_snapshot(e, s.head + 1, &s.snap, true);
    if (st.is_again()) return Status::ok();
    if (!st.is_ok()) return fail(s.c, on_qp(s.c, 0, st));
    if (!s.eg.decided) {
      SLUICE_RETURN_IF_ERROR(try_grant(s));
      decide_book(s);
    }
    if (s.eg.book == nullptr) {  // nothing was sent eagerly: the slot is posted by rendezvous
      if (s.snap.resolved) {
        return fail(s.c, on_qp(s.c, 0,
                               Status(Code::kRemoteError,
                                      "receive " + std::to_string(s.snap.seq - 1) +
                                          " says it completed from the eager ring, but this "
                                          "sender (without an eager book) sent nothing eagerly")));
      }
      return Status::ok();
    }
    int32_t tags[wire::kEntriesPerSlot];
    uint32_t sizes[wire::kEntriesPerSlot];
    uint8_t marks = 0;
    for (int i = 0; i < s.snap.nreqs; ++i) {
      tags[i] = s.snap.e[i].tag;
      sizes[i] = s.snap.e[i].size;
      if ((s.snap.e[i].index & wire::kCtsNumbered) != 0) marks |= static_cast<uint8_t>(1u << i);
    }
    eager::SlotMatch m;
    if (Status b = s.eg.book->on_slot(tags, sizes, marks, s.snap.nreqs, s.snap.resolved,
                                      s.snap.e[0].reserved, &m);
        !b.is_ok()) {
      return fail(s.c, on_qp(s.c, 0, b));
    }
    if (m.too_large >= 0) {
      return fail(s.c, Status(Code::kInvalidUsage,
                              "isend of " + std::to_string(m.sent_size) + " bytes (tag " +
                                  std::to_string(tags[m.too_large]) +
                                  ", sent eagerly) is larger than the receive buffer of " +
                                  std::to_string(sizes[m.too_large]) +
                                  " bytes posted by the peer on " + s.c.describe_qp(0)));
    }
    if (s.snap.resolved) {     // completed from the ring: nothing to post
      s.eg.unreported = true;  // no close will tell the receiver this slot was read
      ++s.head;
      s.snap.seq = 0;
      s.matched = 0;
      continue;
    }
    for (int i = 0; i < s.snap.nreqs; ++i)
      if (m.eager >> i & 1u) stand_in(s, i, m.size[i]);
    if (std::popcount(static_cast<unsigned>(s.matched)) < s.snap.nreqs) return Status::ok();
    s.eg.owed = true;  // every part went eagerly: its close is owed (next turn of the loop)
  }
}

}  // namespace

Status eager_read_head(SendComm& s) {
  Status st = read_head(s);
  if (!st.is_ok() && !st.is_again()) return st;
  SLUICE_RETURN_IF_ERROR(eager_report_head(s, false));
  return st;
}

namespace {

// The WRITE of `bytes` from staging (or the ask's source) into the ring's slot of `counter`, on
// QP q: the keys of q's member on this side (staging) and on the receiver's (the grant's).
Status ring_write(SendComm& s, int q, const char* src, uint32_t bytes, uint64_t counter,
                  uint32_t ss, uint32_t index, ibv_send_wr* w, ibv_sge* sge) {
  const SendComm::Eager& g = s.eg;
  const uint32_t rkey = wire::grant_rkey(g.grant, remote_member(s.c, q));
  if (rkey == 0) {
    return fail(s.c,
                Status(Code::kRemoteError,
                       "the eager grant names no ring key for the receiver's member " +
                           std::to_string(remote_member(s.c, q)) + " (" +
                           std::to_string(g.grant.nkeys + 1) + " keyed) on " + s.c.describe_qp(q)));
  }
  const bool ask = src == g.ask_src;
  *sge = {reinterpret_cast<uintptr_t>(src), bytes,
          ask ? local_mem_lkey(s.c, q) : g.lkeys[s.c.qp_member[q]]};
  *w = ibv_send_wr{};
  w->wr_id = kWrEager | static_cast<uint64_t>(ss) << 8 | index;
  w->sg_list = sge;
  w->num_sge = 1;
  w->opcode = IBV_WR_RDMA_WRITE;
  w->send_flags = IBV_SEND_SIGNALED;
  w->wr.rdma.remote_addr = wire::ring_slot_addr(g.grant, counter);
  w->wr.rdma.rkey = rkey;
  return Status::ok();
}

Status post_eager_wr(SendComm& s, int q, ibv_send_wr* w, const char* what) {
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(s.c.qp[q].get(), w, &bad); rc != 0) {
    return fail(
        s.c, Status(Code::kSystemError, std::string("ibv_post_send (") + what + ") on " +
                                            s.c.describe_qp(q) + " failed: " + std::strerror(rc)));
  }
  s.c.qp[q].sq_used += 1;
  s.c.stats.wrs.add(1);
  s.c.stats.doorbells.add(1);
  return Status::ok();
}

}  // namespace

namespace {

// Staging slots [ss, ss + span) as a mask.
uint64_t span_bits(uint32_t ss, uint32_t span) {
  const uint64_t m = span >= 64 ? ~uint64_t{0} : (uint64_t{1} << span) - 1;
  return m << ss;
}

// The slots (staging and ring alike: counter c's are c % mod and c % W, W a multiple of mod) a
// slot of `bytes` covers: by the smaller of the two strides, so it fits both.
uint32_t span_of(const SendComm::Eager& g, size_t bytes) {
  const size_t stride = std::min<size_t>(g.staging.stride, size_t{g.grant.stride64} * 64);
  return static_cast<uint32_t>((bytes + stride - 1) / stride);
}

// Whether a slot of counter `first` covering `span` slots may be written now: no wrap (in staging,
// and so in the ring), staging slots free (no WRITE into them, or into the ring slots that share
// them, is still to complete or to be posted again by a failover), ring slots free of messages not
// copied out (the book), and clear of an ask's ring slot while that ask's WRITE may be replayed.
bool slot_free(const SendComm::Eager& g, uint64_t first, uint32_t span) {
  const uint32_t ss = static_cast<uint32_t>(first % g.mod);
  if (ss + span > g.mod) return false;
  if ((g.busy & span_bits(ss, span)) != 0) return false;
  if (g.ask_busy && first + span - 1 >= g.ask_counter + g.grant.slots) return false;
  return g.book->ring_free(first, span);
}

// An eager send's request: "posted" (tested, it posts its batch, eager_flush, and polls), done when
// its WRITE completes (eager_write_done walks the batch's chain).
SendReq* take_eager_req(SendComm& s, const void* data, size_t size, void* parent) {
  SendReq* r = take_send_req(s);
  r->posted = true;
  r->eager = true;
  r->shadow = false;
  r->eager_size = static_cast<uint32_t>(size);
  r->data = static_cast<const char*>(data);
  r->size = size;
  r->lkey = 0;
  r->parent = parent;
  r->batch_next = SendComm::kPool;
  return r;
}

void count_eager(SendComm& s, size_t size) {
  s.c.stats.messages.add(1);
  s.c.stats.bytes.add(size);
  s.c.stats.eager.add(1);
}

}  // namespace

Status eager_flush(SendComm& s) {
  SendComm::Eager& g = s.eg;
  if (!g.open) return Status::ok();
  const uint64_t counter = g.open_counter;
  const int q = eager_qp(s, counter);
  if (q < 0) return Status::ok();  // a fence waits for its substitute: a later call posts it
  if (s.c.qp[q].sq_used + 1 > kSendSqDepth) {
    SLUICE_RETURN_IF_ERROR(poll_send(s));
    if (s.c.qp[q].sq_used + 1 > kSendSqDepth) return Status::ok();
  }
  const uint32_t ss = static_cast<uint32_t>(counter % g.mod);
  char* src = g.staging.base + static_cast<size_t>(ss) * g.staging.stride;
  wire::seal_eager_slot(src, counter, g.grant.grant, g.open_tag, g.open_ordinal, g.open_size,
                        g.open_n - 1, s.head);
  const uint16_t first = g.slot_req[ss];
  ibv_send_wr w;
  ibv_sge sge;
  SLUICE_RETURN_IF_ERROR(ring_write(s, q, src, static_cast<uint32_t>(g.open_end), counter, ss,
                                    first | g.open_span << 16, &w, &sge));
  if (s.c.prof.start != nullptr) [[unlikely]] {
    for (uint16_t i = first; i < SendComm::kPool; i = s.pool[i].batch_next)
      prof_eager_send(s.c, s.pool[i], w, q, kEagerEv);
  }
  SLUICE_RETURN_IF_ERROR(post_eager_wr(s, q, &w, "eager"));
  s.c.stats.eager_writes.add(1);
  g.busy |= span_bits(ss, g.open_span);
  g.on_path[q / s.c.qpp] |= uint64_t{1} << ss;
  g.book->occupy(counter, g.open_span, counter + g.open_n - 1);
  told_head(g, s.head);
  if (s.c.nmembers > 1) {  // the rail it went on: the payload bytes
    uint64_t bytes = 0;
    for (uint16_t i = first; i < SendComm::kPool; i = s.pool[i].batch_next) bytes += s.pool[i].size;
    s.c.member_bytes[s.c.qp_member[q]].add(bytes);
  }
  g.open = false;
  return Status::ok();
}

Status eager_send(SendComm& s, const void* data, size_t size, int tag, bool host, void* parent,
                  Request** out) {
  // The CPU copies the message into staging: a buffer in GPU memory goes by rendezvous.
  if (!s.eg.on || s.eg.owed || !host) return Status::again();
  SendComm::Eager& g = s.eg;
  if (!g.decided) {
    SLUICE_RETURN_IF_ERROR(try_grant(s));
    if (!g.granted) return Status::again();
    decide_book(s);
  }
  if (g.book == nullptr) return Status::again();
  EagerLease& st = g.staging;
  if (!st.held()) {
    if (st.pool == nullptr) return Status::again();
    const int i = st.pool->acquire();
    if (i < 0) return Status::again();  // none free now: clear-to-send for this one
    EagerPool& p = *st.pool;
    st.index = i;
    st.base = p.ring(i);
    st.lkey = p.lkey();
    st.slots = p.slots();
    st.stride = p.stride();
    g.max = std::min<size_t>(p.max_bytes(), g.grant.max_bytes);
    // Counter c's staging slot is also counter c + W's (W a multiple of it): c + W, which the
    // receiver's ring takes in the same slot, waits until a WRITE of c completed, a failover's
    // replay of c included ("Failover" below).
    g.mod = std::min<uint32_t>(st.slots, g.grant.slots);
  }
  // A send that cannot go eagerly now posts the open batch first: its caller may wait for what
  // the batch carries (a credit, the receive this send needs) before it tests anything.
  if (!g.book->may_send(tag, size, g.max) || s.free_top == 0) {
    SLUICE_RETURN_IF_ERROR(eager_flush(s));
    return Status::again();
  }
  const uint64_t counter = g.book->counter();
  const uint32_t ordinal = g.book->send_ordinal(tag);
  if (g.open) {
    // Joins the open batch if it fits: its count, and its bytes in the slots the batch may cover.
    const size_t end = ((g.open_end + 7) & ~size_t{7}) + wire::kEagerRecordBytes + size;
    const uint32_t span = span_of(g, end);
    const bool fits = g.open_n < std::min<uint32_t>(g.batch_max, wire::kEagerMaxMore + 1) &&
                      (span == g.open_span || slot_free(g, g.open_counter, span));
    if (fits) {
      SendReq* r = take_eager_req(s, data, size, parent);
      char* src = st.base + static_cast<size_t>(g.open_counter % g.mod) * st.stride;
      g.open_end = wire::append_eager_record(src, g.open_end, counter, tag, ordinal, data,
                                             static_cast<uint32_t>(size));
      g.open_span = span;
      s.pool[g.open_last].batch_next = r->index;
      g.open_last = r->index;
      ++g.open_n;
      g.book->on_eager(tag, static_cast<uint32_t>(size), r->index);
      count_eager(s, size);
      *out = r;
      return Status::ok();
    }
    SLUICE_RETURN_IF_ERROR(eager_flush(s));
    if (g.open) return Status::again();  // its path or send queue is not free yet
  }
  const uint32_t ss = static_cast<uint32_t>(counter % g.mod);
  const uint32_t span = span_of(g, wire::kEagerHeaderBytes + size);
  if (!slot_free(g, counter, span)) {
    SLUICE_RETURN_IF_ERROR(poll_send(s));
    if (!slot_free(g, counter, span)) return Status::again();
  }
  SendReq* r = take_eager_req(s, data, size, parent);
  char* src = st.base + static_cast<size_t>(ss) * st.stride;
  wire::put_eager_first(src, data, static_cast<uint32_t>(size));
  g.open = true;
  g.open_n = 1;
  g.open_span = span;
  g.open_counter = counter;
  g.open_end = wire::kEagerHeaderBytes + size;
  g.open_tag = tag;
  g.open_ordinal = ordinal;
  g.open_size = static_cast<uint32_t>(size);
  g.open_last = r->index;
  g.slot_req[ss] = static_cast<uint8_t>(r->index);
  g.book->on_eager(tag, static_cast<uint32_t>(size), r->index);
  count_eager(s, size);
  *out = r;
  // With no eager WRITE of this comm in flight it goes now: a lone message waits for nothing.
  // Behind one, later sends may join it until the comm's next test (NCCL's proxy posts every step
  // that is ready before it tests the oldest), and the batch goes as one WRITE.
  if (g.batch_max <= 1 || g.busy == 0) return eager_flush(s);
  return Status::ok();
}

namespace {

// The ask's one WRITE (its source: g.ask_src, `bytes` long, of counter `counter`), on the eager QP.
Status post_ask(SendComm& s, int q, uint32_t bytes, uint64_t counter, const char* what) {
  SendComm::Eager& g = s.eg;
  ibv_send_wr w{};
  ibv_sge sge{};
  SLUICE_RETURN_IF_ERROR(ring_write(s, q, g.ask_src, bytes, counter, kAskWrite, 0, &w, &sge));
  SLUICE_RETURN_IF_ERROR(post_eager_wr(s, q, &w, what));
  g.ask_busy = true;
  g.ask_counter = counter;
  g.ask_bytes = bytes;
  g.ask_path = static_cast<int8_t>(q / s.c.qpp);
  return Status::ok();
}

// A send comm without a book whose receiver has a ring (decide_book): one ask-all, counter 0 (it
// wrote nothing else into the ring, so slot 0 is free), and the receiver holds nothing back on
// this comm any more. Its grant is looked for only when a send waits: a receiver that holds a
// receive back wrote its grant before anything it published.
Status ask_all_without_book(SendComm& s, size_t size, int tag, bool host) {
  SendComm::Eager& g = s.eg;
  if (!g.decided || g.asked_all) return Status::ok();
  SLUICE_RETURN_IF_ERROR(try_grant(s));
  if (!g.granted) return Status::ok();
  const int q = eager_qp(s, 0);
  if (q < 0 || s.c.qp[q].sq_used + 1 > kSendSqDepth) return Status::ok();  // a later call asks
  const size_t bytes = wire::encode_eager_ask(g.ask_src, 0, g.grant.grant, tag, 0, size, true,
                                              !host || size > g.grant.max_bytes, s.head);
  SLUICE_RETURN_IF_ERROR(post_ask(s, q, static_cast<uint32_t>(bytes), 0, "eager ask-all"));
  g.asked_all = true;
  return Status::ok();
}

}  // namespace

Status eager_ask(SendComm& s, size_t size, int tag, bool host) {
  SendComm::Eager& g = s.eg;
  if (!g.on) return Status::ok();
  SLUICE_RETURN_IF_ERROR(eager_flush(s));  // what the receiver may need before it answers
  // The previous ask's completion may be on the CQ, unpolled: a send that waits polls once rather
  // than leave this ask to the next test (or to the liveness poll, a second later).
  if (g.ask_busy) SLUICE_RETURN_IF_ERROR(poll_send(s));
  if (g.ask_busy) return Status::ok();
  if (g.book == nullptr) return ask_all_without_book(s, size, tag, host);
  if (!g.granted) return Status::ok();
  // A send that will go eagerly once a credit, a staging slot or room on the send queue frees up
  // waits for them: only one that cannot (in GPU memory, too large, no staging, its tag not known
  // numbered) asks.
  const bool limit = !host || !g.staging.held() || size > g.max;
  if (!limit && g.book->confirmed(tag)) return Status::ok();
  if (!g.book->may_ask(tag)) return Status::ok();
  const uint64_t counter = g.book->counter();
  const int q = eager_qp(s, counter);
  if (q < 0 || s.c.qp[q].sq_used + 1 > kSendSqDepth) return Status::ok();  // a later call asks
  // Its ring slot must not hold a message the receiver has not taken: counter - W's WRITE is
  // known complete (its staging slot is free), as for a message (eager_send).
  // And no batch's bytes for messages not copied out yet lie in it (the book).
  const uint64_t slot_bit = g.mod != 0 ? uint64_t{1} << (counter % g.mod) : 0;
  if ((g.busy & slot_bit) != 0) SLUICE_RETURN_IF_ERROR(poll_send(s));
  if ((g.busy & slot_bit) != 0 || !g.book->ring_free(counter, 1))
    return Status::ok();  // a later call asks
  const bool all = !g.book->numbers(tag);
  const size_t bytes =
      wire::encode_eager_ask(g.ask_src, counter, g.grant.grant, tag,
                             all ? 0 : g.book->send_ordinal(tag), size, all, limit, s.head);
  SLUICE_RETURN_IF_ERROR(post_ask(s, q, static_cast<uint32_t>(bytes), counter, "eager ask"));
  g.book->occupy(counter, 1, counter);
  g.book->on_ask(tag);
  told_head(g, s.head);
  return Status::ok();
}

Status eager_report_head(SendComm& s, bool force) {
  SendComm::Eager& g = s.eg;
  // Only slots of receives completed from the ring need it: the close of any other receive tells
  // the receiver that its slot (and every one before) was read.
  if (!g.on || !g.unreported || s.head == g.reported || (!force && s.head - g.reported < 16))
    return Status::ok();
  const int q = eager_qp(s, 0);
  if (q < 0 || s.c.qp[q].sq_used + 1 > kSendSqDepth) return Status::ok();  // a later call reports
  // The source byte is rewritten only once the previous report completed (the NIC reads it late).
  // A forced report (a send waits) polls once for that completion, as eager_ask does.
  if (g.report_busy && force) SLUICE_RETURN_IF_ERROR(poll_send(s));
  if (g.report_busy) return Status::ok();
  g.head_src[0] = g.head_src[1] = s.head;
  ibv_sge sge{reinterpret_cast<uintptr_t>(g.head_src), 2 * sizeof(uint64_t),
              local_mem_lkey(s.c, q)};
  ibv_send_wr w{};
  w.wr_id = kWrEager | uint64_t{kHeadReport} << 8;
  w.sg_list = &sge;
  w.num_sge = 1;
  w.opcode = IBV_WR_RDMA_WRITE;
  w.send_flags = IBV_SEND_SIGNALED;
  w.wr.rdma.remote_addr = g.remote_head;
  w.wr.rdma.rkey = remote_mem_rkey(s.c, q);
  SLUICE_RETURN_IF_ERROR(post_eager_wr(s, q, &w, "eager head report"));
  g.report_busy = true;
  g.report_path = static_cast<int8_t>(q / s.c.qpp);
  g.reported = s.head;
  g.unreported = false;
  return Status::ok();
}

void eager_write_done(SendComm& s, uint64_t wr_id) {
  const uint32_t ss = static_cast<uint32_t>(wr_id >> 8 & 0xff);
  const uint32_t index = static_cast<uint32_t>(wr_id & 0xff);
  if (ss == kHeadReport) {
    s.eg.report_busy = false;
    return;
  }
  if (ss == kAskWrite) {
    s.eg.ask_busy = false;
    return;
  }
  const uint32_t span = std::max<uint32_t>(1, static_cast<uint32_t>(wr_id >> 16 & 0xff));
  s.eg.busy &= ~span_bits(ss, span);
  for (uint64_t& m : s.eg.on_path) m &= ~(uint64_t{1} << ss);
  // Every request of the batch (one for a message alone), in posting order.
  for (uint32_t i = index; i < static_cast<uint32_t>(SendComm::kPool); i = s.pool[i].batch_next) {
    SendReq& r = s.pool[i];
    if (s.c.prof.start != nullptr) [[unlikely]]
      prof_stop(s.c, r.ev[kEagerEv]);
    r.done = true;
  }
}

// ---- Failover (fused comms) ---------------------------------------------------------------------
//
// An eager WRITE on a path that failed before its completion was seen may or may not have landed.
// Its staging slot stays busy, so nothing reuses the slot or sends counter c + W (whose ring slot
// is c's) meanwhile. Once both sides fenced the path (the sender's drain markers are back: every
// completion of the path's QPs was polled; or its device is dead and reports none), no byte of it
// can land any more, and the same bytes go again where the eager path goes now. The receiver
// takes each counter once: read_eager_slot matches the counter it expects, so a copy landing
// after the receiver took c reads as another counter ("not yet"), and c + W, posted only after a
// WRITE of c completed, lands after it. An ask is the same (its counter's slot); a head report is
// only reported again (its value only grows). The request of a replayed message completes with
// its replay; its profiler event, started once, stops then.

Status eager_replay(SendComm& s, int p, bool* done) {
  SendComm::Eager& g = s.eg;
  *done = false;
  if (p < 0 || p >= wire::kMaxMetaMembers) return Status::ok();
  // A head report that went on the path, or a head those WRITEs carried (told_head), which reaches
  // the receiver with their replay only: reported again at the next call.
  const bool report_lost = g.report_busy && g.report_path == p;
  if (report_lost) g.report_busy = false;
  if (report_lost || (g.on_path[p] & g.busy) != 0 || (g.ask_busy && g.ask_path == p)) {
    g.reported = 0;
    g.unreported = true;
  }
  // In counter order (a staging slot's header holds its counter); at most 64, each posted once.
  while ((g.on_path[p] & g.busy) != 0) {
    uint32_t best = 64;
    uint64_t best_counter = UINT64_MAX;
    uint32_t best_bytes = 0;
    for (uint64_t m = g.on_path[p] & g.busy; m != 0; m &= m - 1) {
      const uint32_t ss = static_cast<uint32_t>(std::countr_zero(m));
      wire::EagerHeader h;
      const char* at = g.staging.base + static_cast<size_t>(ss) * g.staging.stride;
      std::memcpy(&h, at, sizeof h);
      if (h.seq - 1 < best_counter) {
        best_counter = h.seq - 1;
        best = ss;
        best_bytes = static_cast<uint32_t>(wire::eager_slot_bytes(at));  // a batch's, all of it
      }
    }
    const int q = eager_qp(s, best_counter);
    if (q < 0 || q / s.c.qpp == p) return Status::ok();  // its substitute fences too: later
    if (s.c.qp[q].sq_used + 1 > kSendSqDepth) {
      SLUICE_RETURN_IF_ERROR(poll_send(s));
      if (s.c.qp[q].sq_used + 1 > kSendSqDepth) return Status::ok();  // the next call goes on
    }
    const char* src = g.staging.base + static_cast<size_t>(best) * g.staging.stride;
    const uint32_t bytes = best_bytes;
    ibv_send_wr w{};
    ibv_sge sge{};
    SLUICE_RETURN_IF_ERROR(ring_write(s, q, src, bytes, best_counter, best,
                                      g.slot_req[best] | span_of(g, bytes) << 16, &w, &sge));
    SLUICE_RETURN_IF_ERROR(post_eager_wr(s, q, &w, "eager replay"));
    s.c.stats.eager_writes.add(1);
    g.on_path[p] &= ~(uint64_t{1} << best);
    g.on_path[q / s.c.qpp] |= uint64_t{1} << best;
    s.c.stats.eager_replays.add(1);
  }
  g.on_path[p] = 0;  // what is left there completed
  if (g.ask_busy && g.ask_path == p) {
    const int q = eager_qp(s, g.ask_counter);
    if (q < 0 || q / s.c.qpp == p || s.c.qp[q].sq_used + 1 > kSendSqDepth) return Status::ok();
    SLUICE_RETURN_IF_ERROR(post_ask(s, q, g.ask_bytes, g.ask_counter, "eager ask replay"));
    s.c.stats.eager_replays.add(1);
  }
  *done = true;
  return Status::ok();
}

}  // namespace dp
}  // namespace sluice
