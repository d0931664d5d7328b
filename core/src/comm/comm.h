// Comm objects and requests. Invariants of the data path:
//  * The receiver owns its posted buffers and its completion-record array; the sender writes them
//    (RDMA WRITE / WRITE_WITH_IMM) only after reading a CTS entry the receiver published.
//  * The sender owns its CTS FIFO memory; only the receiver writes it (RDMA WRITE of the entries of
//    one slot), only for a slot whose previous use the sender has consumed: the receiver has at
//    most kFifoSlots receives in flight and reuses slot s % kFifoSlots only after receive s -
//    kFifoSlots completed, which needs the sender to have read that entry first.
//  * Both sides walk the same sequence numbers: receive k uses FIFO slot k % kFifoSlots and record
//    slot k % kFifoSlots. Split mode: every data QP carries exactly one immediate for it; otherwise
//    only QP k % nqps does (cts::qp_of_lane).
//  * A comm is driven by one thread at a time (NCCL's rule), and a call touches only its own comm:
//    no call's cost grows with the comms open (issue 32). A receive comm's state is still guarded
//    by RecvComm::mu, for the calls NCCL may make from another thread (deregMr's scan of its
//    requests, finalize's retirement).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "comm/engine.h"
#include "comm/qp_life.h"
#include "health/liveness.h"
#include "health/path_failover.h"
#include "health/peer_link.h"
#include "health/progress.h"
#include "rules/cts_match.h"
#include "rules/eager_book.h"
#include "rules/rewrite_gate.h"
#include "rules/stripe.h"
#include "sluice/core/api.h"
#include "sluice/core/base/flow_label.h"
#include "sluice/core/base/verbs.h"
#include "sluice/core/wire/eager.h"
#include "sluice/core/wire/wire.h"

namespace sluice {

// Queue depths, per QP. The sender accounts the WRs it has on each send queue and does not post a
// group that would not fit (isend returns "again" until completions free room), so the send queue
// need not hold the worst case of kFifoSlots grouped sends of kEntriesPerSlot + 1 WRs each.
// Depths are 2^k - 1: providers (rxe, mlx5) round a queue up to the next power of two above the
// requested depth, so 2^k would double the memory. 63: a group of the largest messages, cut
// into at most kMaxPieces WRITEs each with a progress signal every MiB or piece (cts::plan_lane:
// kMaxLaneWrs = 57 WRs on one lane), must fit an empty send queue, or isend would wait for room
// forever. (255 before issue 32: 16 pieces a message; the queue and its CQ were most of an idle
// send comm's memory, ~80 KiB of rxe's queues.)
inline constexpr uint32_t kSendSqDepth = 63;
// wr_id of the marker WR that Conn::drain_at_close posts on each send queue in ERROR: its flushed
// completion comes after every earlier WR's (send-queue order). Distinct from the data path's
// wr_id bits (datapath_internal.h: 1 << 63, 62, 61; pool indexes below 256).
inline constexpr uint64_t kWrDrainMarker = 1ull << 60;
// A retired QP's marker (qp_life.h RetiredQp): kWrDrainMarker | kWrDrainRetired | its slot.
inline constexpr uint64_t kWrDrainRetired = 1ull << 57;
// The receiver's send queue carries only CTS writes: at most kCtsBudget whose slots are not yet
// reclaimed by a polled signaled CTS completion (one every kCtsSignalEvery).
inline constexpr uint32_t kCtsSignalEvery = 8;
inline constexpr uint32_t kCtsBudget = 23;
inline constexpr uint32_t kRecvSqDepth = kCtsBudget + kCtsSignalEvery;
inline constexpr uint32_t kRecvRqDepth = wire::kFifoSlots;  // one receive WR per irecv per QP
// A fused comm's receive queues hold kRecvRqDepth per path: failover may route every path's
// closes, so their credits, to one QP (health/path_failover.h).
inline constexpr int kRecvRqMaxDepth = static_cast<int>(kRecvRqDepth) * stripe::kMaxPaths;
static_assert(kCtsBudget >= 2, "a publication may need two writes (FIFO wrap)");
// Inline CTS: one entry (the common, ungrouped receive); grouped receives post from staging memory.
inline constexpr uint32_t kCtsInlineBytes = sizeof(wire::CtsEntry);
static_assert(kSendSqDepth >= 2 * (wire::kEntriesPerSlot + 1), "two full groups must fit");
static_assert(kSendSqDepth >= cts::kMaxLaneWrs, "a group of the largest messages fits");
static_assert(kCtsBudget + kCtsSignalEvery <= kRecvSqDepth);
// The watchdog's CTS probe (progress.h) is posted only when no signaled CTS write is outstanding,
// so behind at most kCtsSignalEvery - 1 unsignaled ones: it always fits the CTS budget.
static_assert(kCtsSignalEvery - 1 + 1 <= kCtsBudget);
static_assert(kRecvRqDepth >= wire::kFifoSlots);

// Anonymous memory preferring a NUMA node (mbind MPOL_PREFERRED, best effort), page aligned,
// zeroed. Used for everything the NIC reads or writes on the comm's behalf.
class NumaBuffer {
 public:
  NumaBuffer() = default;
  static Result<NumaBuffer> allocate(size_t bytes, int numa_node);
  NumaBuffer(NumaBuffer&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
  NumaBuffer& operator=(NumaBuffer&& o) noexcept;
  ~NumaBuffer();
  void* data() const { return p_; }
  size_t size() const { return n_; }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

// The eager path: a ring borrowed from the adapter's EagerPool (comm/eager_pool.h), returned when
// destroyed. A comm declares it before its Conn, so it is returned after the QPs are gone (no WRITE
// can land in it later); retire_comm disarms it (finalize: the adapter and its pool go first).
class EagerPool;
struct EagerLease {
  EagerPool* pool = nullptr;
  int index = -1;
  char* base = nullptr;
  uint32_t lkey = 0, rkey = 0;
  uint32_t slots = 0;
  size_t stride = 0;
  EagerLease() = default;
  EagerLease(const EagerLease&) = delete;
  EagerLease& operator=(const EagerLease&) = delete;
  ~EagerLease() { release(); }
  bool held() const { return base != nullptr; }
  void release();  // eager_pool.cc
};

// A send comm's book, lent from its adapter's eager pool at its first use of the eager path
// (datapath/eager.cc), returned when destroyed (declared after the comm's EagerRef: before the
// pool goes) or at retire_comm.
struct EagerBookLease {
  EagerPool* pool = nullptr;
  int index = -1;
  EagerBookLease() = default;
  EagerBookLease(const EagerBookLease&) = delete;
  EagerBookLease& operator=(const EagerBookLease&) = delete;
  ~EagerBookLease() { release(); }
  void release();  // eager_pool.cc
};

// A comm's reference to its adapter's eager pool (comm/eager_pool.h): taken when the comm
// negotiates the eager path, given back when destroyed (declared before the comm's lease, so after
// the lease's return) or at retire_comm; the last one frees the pool.
struct EagerRef {
  Adapter* adapter = nullptr;
  EagerRef() = default;
  EagerRef(const EagerRef&) = delete;
  EagerRef& operator=(const EagerRef&) = delete;
  ~EagerRef() { reset(); }
  void reset();  // eager_pool.cc
};

enum class CommKind : uint32_t {
  kListen = 0x4c49534e,  // "LISN"
  kSend = 0x53454e44,    // "SEND"
  kRecv = 0x52454356,    // "RECV"
  kDead = 0xdeadc0de,
};

// Per-comm statistics (sluiceExt_v1 commStats). One writer at a time (the comm's driver, or a
// publisher holding RecvComm::mu); readers may be other threads, so the cells are atomics updated
// without a locked read-modify-write.
struct StatCell {
  std::atomic<uint64_t> v{0};
  void add(uint64_t n) {
    v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  uint64_t get() const { return v.load(std::memory_order_relaxed); }
};
struct CommCounters {
  StatCell messages, wrs, doorbells, cts_writes, cts_entries;
  StatCell cts_probes;     // the watchdog's zero-length CTS probes (progress.h), also in wrs
  StatCell ar_imm_writes;  // adaptive routing's separate closing WRITE_WITH_IMMs, also in wrs
  StatCell eager;  // eager messages sent (send; a batch is one WRITE) / copied out (receive)
  StatCell eager_replays;  // eager WRITEs a failover posted again (send comm)
  StatCell eager_writes;   // WRITEs of eager messages, alone or batched, replays too (send comm)
  std::atomic<int> eager_state{0};  // api.h CommStatsV2::eager (EagerState)
  void set_eager(EagerState s) {
    eager_state.store(static_cast<int>(s), std::memory_order_relaxed);
  }
  StatCell bytes;                     // payload posted (send comm) / received (receive comm)
  StatCell completions;               // completions polled from the comm's CQ
  StatCell latency[kLatencyBuckets];  // post -> completion (api.h MemberStats::latency)
  void add_latency(int64_t ns) {
    const uint64_t v = ns > 0 ? static_cast<uint64_t>(ns) : 0;
    const int b = v < 2 ? 0 : 63 - __builtin_clzll(v);
    latency[b < kLatencyBuckets ? b : kLatencyBuckets - 1].add(1);
  }
};
// The clock of the post-to-completion histogram (steady clock, ns).
inline int64_t stat_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct CommBase {
  explicit CommBase(CommKind k) : kind(k) {}
  CommKind kind;
};

class SendComm;
class RecvComm;

// A request handed to NCCL. Send and receive requests live in their comm's fixed pool (no
// allocation on the data path); `kind` tells test() which one it holds.
struct Request {
  static constexpr uint32_t kMagic = 0x52455153;  // "REQS"
  uint32_t magic = kMagic;
  bool is_send = false;
  bool is_flush = false;  // a FlushReq (flush.h)
  bool in_use = false;
  bool done = false;
  CommBase* comm = nullptr;
};

struct SendReq : Request {
  bool posted = false;  // the group's chain is on the wire
  // The eager path: `eager` = this send went through the eager ring (done when its WRITE
  // completes); `shadow` = a request of the sender's own that stands in a group for a part sent
  // eagerly before its clear-to-send was read (size 0, no data; `eager_size` the part's size, for
  // the close), freed when the group's close completes, never handed out.
  bool eager = false;
  bool shadow = false;
  uint32_t eager_size = 0;
  uint8_t pending = 0;  // leader: closing completions still expected (one per QP)
  uint8_t group_n = 0;  // leader: members in `group`
  uint16_t index = 0;   // position in the pool (the closing WR's wr_id)
  // An eager send in a batch (eager.cc): the pool index of the batch's next request (kPool: none).
  uint16_t batch_next = 0;
  uint32_t lkey = 0;
  uint32_t paths = 1;   // leader: the receive's paths (its clear-to-send entry's mask)
  uint32_t shares = 0;  // leader: the receive's shares (wire::CtsMembers; 0: whole weights)
  // Fusion: the buffer's lkey on each local member's adapter (lkeys[0] = lkey).
  uint32_t lkeys[kMaxMembers] = {};
  const char* data = nullptr;
  size_t size = 0;
  uint16_t group[wire::kEntriesPerSlot] = {};  // leader: pool indexes of the group's members
  int64_t posted_ns = 0;                       // leader: when the group's chains were posted
  // Profiler events (wr_events.h): the caller's parent handle; per lane, the event of this
  // message's data WRITE and (leader of a group) of the separate closing WRITE_WITH_IMM.
  void* parent = nullptr;
  void* ev[wire::kMaxQps] = {};
  void* close_ev[wire::kMaxQps] = {};
};

struct RecvReq : Request {
  uint8_t n = 1;  // buffers in the grouped receive
  // The eager path: `resolved` = every part came from the ring at irecv (no clear-to-send WR, no
  // close); eager_got = parts copied from the ring; eager_want = parts the close says came
  // eagerly; closed = every close is in (the receive waits for eager_want's copies); host = parts
  // in host memory (an eager copy needs one).
  bool resolved = false;
  bool closed = false;
  // Every part came eagerly after its clear-to-send was written: done, but the sender's zero-length
  // close is still owed to its receive WR, so the slot is not reused until it came.
  bool close_owed = false;
  uint8_t eager_got = 0;
  uint8_t eager_want = 0;
  uint8_t host = 0;
  uint8_t pending = 0;  // immediates still expected (one per QP)
  bool has_record = false;
  uint64_t seq = 0;     // receive sequence number (FIFO slot = seq % kFifoSlots)
  uint32_t paths = 1;   // the paths that carry it (stripe::paths_of; 1 on a one-path comm)
  uint32_t shares = 0;  // each path's share while it ramps back in (wire::CtsMembers)
  size_t posted[wire::kEntriesPerSlot] = {};    // capacity of each buffer
  size_t received[wire::kEntriesPerSlot] = {};  // bytes that arrived
  int tags[wire::kEntriesPerSlot] = {};
  int64_t posted_ns = 0;  // when its clear-to-send write was posted
  // Profiler events (wr_events.h): each buffer's parent handle and its clear-to-send event.
  void* parents[wire::kEntriesPerSlot] = {};
  void* cts_ev[wire::kEntriesPerSlot] = {};
};

// SLUICE_CM=rdmacm: the rdma_cm ids of a connection's QPs (cm_rdmacm.h).
class CmLink;
struct CmLinkDeleter {
  void operator()(CmLink* l) const;
};

// NIC fusion: the physical devices a comm runs over (Engine::members_of). Four, as
// CommStatsV2::members holds; a fused device of more members is refused at connect/accept.
inline constexpr int kMaxConnMembers = kMaxMembers;
struct ConnMember {
  Device* dev = nullptr;
  verbs::Cq cq;  // its own: members on different adapters cannot share a CQ (nor a PD)
};
// QP incarnations replaced by failback or dropped by a failed attempt and not yet drained
// (qp_life.h RetiredQp): at most one per QP index and attempt in flight; when every slot is taken
// the oldest is destroyed (its late completions are then ignored as those of an unknown QP).
inline constexpr int kMaxRetiredQps = 2 * wire::kMaxQps;

// State shared by both comm directions.
struct Conn {
  Device* dev = nullptr;  // member 0's device (the one a one-member comm runs on)
  int nmembers = 0;       // set by create_qps: 1 until devices are fused
  // Verbs objects in dependency order: the members' CQs before the QPs, so QPs are destroyed
  // first (the retired ones too).
  ConnMember members[kMaxConnMembers];
  // Failover comms only (allocated at connect: set_paths): the retired incarnations (qp_life.h).
  std::unique_ptr<RetiredQp[]> retired_qps;
  std::span<RetiredQp> retired_list() {
    return retired_qps ? std::span<RetiredQp>(retired_qps.get(), kMaxRetiredQps)
                       : std::span<RetiredQp>();
  }
  std::span<const RetiredQp> retired_list() const {
    return retired_qps ? std::span<const RetiredQp>(retired_qps.get(), kMaxRetiredQps)
                       : std::span<const RetiredQp>();
  }
  int nqps = 0;
  std::string peer;        // "10.0.0.2:4711"
  std::string remote_dev;  // the peer's device name
  std::string local_desc;  // "rxe0:1"
  std::string remote_gid;  // text
  // Fusion: each peer member's GID, as text (set_paths; for WARNs naming the QP's path).
  std::string remote_member_gid[kMaxConnMembers];
  int fd = -1;  // the out-of-band socket, kept for the comm's lifetime when it has no peer link
  // Its end on the peer link to the peer's process (health/peer_link.h), when both sides have the
  // link (SLUICE_OOB_LINK): then fd is -1 once set up, and liveness, notices and path messages go
  // over the link.
  LinkEnd link;
  // regMr/regMrDmaBuf registered CUDA memory on this comm (set by whichever thread registers;
  // read by the comm's driver): a receive comm then gets no eager ring (eager.cc). NCCL with
  // GPUDirect keeps LL buffers in host memory and LL128/SIMPLE buffers in GPU memory on the same
  // comm, and registers them all before its first receive.
  mutable std::atomic<bool> cuda_registered{false};
  // Each QP index's current incarnation (qp_life.h): the QP and every count about its work.
  QpSet qp;                               // nqps of them (create_qps)
  uint8_t qp_member[wire::kMaxQps] = {};  // the member each QP lives on (its CQ, PD and port)
  int npaths = 1;                         // fusion: QP q is on path q / (nqps / npaths) (wire.h)
  int qpp = 1;                            // QPs per path (= nqps when npaths is 1)
  int cells() const { return wire::cts_cells(npaths); }
  // Entry i of FIFO slot `slot` in a FIFO or stage of this comm's layout (wire::CtsMembers).
  wire::CtsEntry* entry(wire::CtsEntry* base, uint32_t slot, int i) const {
    const int k = cells();
    return &base[(static_cast<size_t>(slot) * wire::kEntriesPerSlot + i) * k + (k - 1)];
  }
  // Fusion, set once both sides' members are known (set_paths, comm_setup.h): the paths' weights
  // (both ends derive the same from the two MetaMembers), the peer's members, and the peer's comm
  // memory (FIFO or records) key on each of them. A one-path comm: one path of weight 1, the
  // peer's member 0 = its Meta::buf_rkey.
  stripe::Paths paths;
  int remote_nmembers = 1;
  uint32_t remote_mem_rkey[kMaxConnMembers] = {};
  // Bytes of posted capacity from which a receive is striped over every path (SLUICE_STRIPE_MIN).
  size_t stripe_min = stripe::kDefaultThreshold;
  // Per member: payload bytes posted (send comm) or received (receive comm) over its QPs; kept
  // only with more than one member (one member's are stats.bytes).
  StatCell member_bytes[kMaxConnMembers];
  // Fusion: the comm memory's (FIFO / records) registration on members 1.. whose adapter is not
  // an earlier member's (member 0's is the comm's mem_mr), and every member's keys of it.
  verbs::Mr mem_mr_more[kMaxConnMembers];
  uint32_t mem_lkey[kMaxConnMembers] = {};
  uint32_t mem_rkey[kMaxConnMembers] = {};
  uint32_t max_inline = 0;
  bool split = false;  // NCCL_IB_SPLIT_DATA_ON_QPS of the connector (both ends follow it)
  Ece ece_local;       // ibv_query_ece of QP 0 (fabric.h); unsupported where the provider has none
  Ece ece;             // what both ends offer, set on every QP before RTR (agree_ece)
  flow::LabelSet
      flow;  // RoCE v2 flow label of each QP (choose_flow_labels); empty = the provider's
  CommCounters stats;
  ProfilerHook prof;  // attached profiler (wr_events.h); prof.start == nullptr: none
  // What the owner had in flight when it closed (set by close_send/close_recv): named by the WARN
  // when the drain at close runs out of SLUICE_CLOSE_TIMEOUT_MS.
  std::string pending_work;
  Status failure;             // sticky: once set every call fails with it
  PeerWatch watch;            // the peer's liveness and async-event failures (liveness.h)
  ProgressWatch progress;     // posted work without completion (progress.h)
  PathFailover fo;            // a multi-path comm's failover (path_failover.h); off otherwise
  CommBase* owner = nullptr;  // the SendComm or RecvComm this is a member of
  std::unique_ptr<CmLink, CmLinkDeleter> cm;  // rdmacm mode only; null in oob mode
  bool retired = false;  // finalize released its verbs objects (retire_comm); dev is null
  bool failed() const { return !failure.is_ok(); }
  // `failure`, copied only when there is one (the data path's idle calls return this).
  Status status() const { return failed() ? failure : Status::ok(); }
  std::string describe_qp(int q) const;  // "qpn 17 (rxe0:1) -> qpn 18 (rxe1) at 127.0.0.1:4711"
  // QPs to ERROR, then polls the CQ until every queue is drained (a marker WR posted behind the
  // send queue's work came back, every posted receive WR completed) or SLUICE_CLOSE_TIMEOUT_MS of
  // wall time passed (then a WARN names what was left). Run by ~Conn; idempotent.
  void drain_at_close();
  ~Conn();
};

class SendComm : public CommBase {
 public:
  static constexpr int kPool = wire::kFifoSlots * wire::kEntriesPerSlot;  // 256 isends in flight
  SendComm() : CommBase(CommKind::kSend) { c.owner = this; }
  // Declared first so they are released last, after the QPs in `c` are gone.
  // FIFO (written by the receiver) and local completion records (read by the NIC), then the
  // request pool; all on the NIC's NUMA node, only the first two registered.
  NumaBuffer mem;
  verbs::Mr mem_mr;
  wire::CtsEntry* fifo = nullptr;       // kFifoSlots * kEntriesPerSlot entries of cts_cells() cells
  wire::DoneRecord* records = nullptr;  // kFifoSlots, source of record writes
  uint64_t remote_records = 0;          // receiver's completion-record array
  uint64_t head = 0;  // receives consumed so far; the next slot is head % kFifoSlots
  // Matching state of the slot at `head`: its validated snapshot (taken once, at first use), then
  // which entries have their isend.
  cts::Snapshot snap;
  uint8_t matched = 0;  // bit i: entry i has its isend
  SendReq* slot_reqs[wire::kEntriesPerSlot] = {};
  // (The send queues' accounting is per QP incarnation: Conn::qp[q].sq_used, sq_bytes, sq_seg.)
  // Adaptive routing (fabric.h): a message larger than this closes with a separate zero-length
  // WRITE_WITH_IMM; SIZE_MAX = off (the device's decision, taken at connect).
  size_t ar_threshold = SIZE_MAX;
  SendReq* pool = nullptr;        // kPool requests, in `mem` (on the NIC's NUMA node)
  uint16_t* free_list = nullptr;  // kPool entries, in `mem`
  int free_top = 0;
  // The eager path (docs/eager.md; datapath/eager.cc). on: negotiated (one path, both ends).
  struct Eager {
    bool on = false;
    bool granted = false;  // the receiver's grant block was read and checked
    // Its book (2.1 KiB), lent by the pool (book_lease) when the comm first meets the eager path
    // with a grant read, before it numbers a send or a part (eager.cc decide_book); null before,
    // and for good where the receiver has no ring or the pool had no book left (`decided`).
    eager::SenderBook* book = nullptr;
    bool decided = false;
    bool asked_all = false;             // bookless with a grant: its one ask-all was posted
    wire::EagerGrant grant{};           // its copy
    wire::EagerGrant* block = nullptr;  // where the receiver writes it (in `mem`, registered)
    size_t max = 0;                     // min(ours, the receiver's)
    uint64_t busy = 0;                  // staging slots whose WRITE has not completed
    // Staging slot of counter c is c % mod (mod = min(ours, the receiver's W)), so counter c + W
    // waits until a WRITE of c completed. A fused comm (eager.cc "Failover"): the busy slots whose
    // WRITE went on each path, posted again on another once both sides fenced it, and each slot's
    // request (its pool index) for that.
    uint32_t mod = 0;
    uint64_t on_path[wire::kMaxMetaMembers] = {};
    // A slot's request (a batch's first, then SendReq::batch_next). A batch's WRITE keeps every
    // staging slot it covers busy, but only its first is in on_path: the slots a failover's replay
    // reads a header from.
    uint8_t slot_req[wire::kEagerMaxSlots] = {};
    // Batches (wire::kEagerMore): at most batch_max messages a WRITE (1 to a receiver that does not
    // read them). The open batch: built in staging at counter `open_counter`'s slot, not posted
    // yet; it goes at the comm's next test, or when a send cannot join it (eager_flush).
    uint32_t batch_max = 1;
    bool open = false;
    uint32_t open_n = 0;     // messages in it
    uint32_t open_span = 0;  // slots it covers (staging and ring)
    uint64_t open_counter = 0;
    size_t open_end = 0;  // its bytes so far
    int32_t open_tag = 0;
    uint32_t open_ordinal = 0, open_size = 0;  // its first message's
    uint16_t open_last = 0;                    // its last request
    int8_t ask_path = -1;                      // the path the ask went on
    int8_t report_path = -1;                   // the path the head report went on
    uint32_t ask_bytes = 0;
    uint64_t ask_counter = 0;  // while ask_busy, counter ask_counter + W waits (eager_send)
    // The staging pool's lkey on each member (member 0: the pool's own adapter).
    uint32_t lkeys[wire::kMaxMetaMembers] = {};
    bool owed = false;  // the slot at head is complete but not posted yet
    // The head report (eager.cc): slots read so far, twice (16 bytes), written into the
    // receiver's head cell; it frees FIFO slots of receives completed from the ring.
    uint64_t* head_src = nullptr;  // its source (in `mem`, registered)
    uint64_t remote_head = 0;      // the receiver's head cell
    uint64_t reported = 0;         // the head last reported
    bool report_busy = false;      // a report is on the wire (its source byte must stay)
    bool unreported = false;       // a resolved slot was read since the last report
    // The ask (wire::kEagerAsk) of a send that cannot go eagerly: its 32-byte source, after the
    // head report's in the same cell, rewritten only once the previous ask's WRITE completed.
    char* ask_src = nullptr;
    bool ask_busy = false;
    EagerRef ref;               // before `staging` and `book_lease`: given back after them
    EagerBookLease book_lease;  // `book`'s
    EagerLease staging;         // W' slots of our stride, from the adapter's pool
  } eg;
  Conn c;
};

// The receive comm's flush machinery (flush.h), created at its first flush.
class Flush;
struct FlushDeleter {
  void operator()(Flush* f) const;
};

class RecvComm : public CommBase {
 public:
  RecvComm() : CommBase(CommKind::kRecv) { c.owner = this; }
  // CTS staging (read by the NIC) and completion records (written by the peer), then the request
  // pool; all on the NIC's NUMA node, only the first two registered.
  NumaBuffer mem;
  verbs::Mr mem_mr;
  wire::CtsEntry* stage = nullptr;      // kFifoSlots * kEntriesPerSlot entries of cts_cells() cells
  wire::DoneRecord* records = nullptr;  // kFifoSlots
  uint64_t remote_fifo = 0;  // the sender's CTS FIFO (its key per member: c.remote_mem_rkey)
  // Guards everything below and the requests in `pool` (uncontended on the data path: only the
  // comm's driver takes it there; deregMr and finalize may come from another thread).
  std::mutex mu;
  uint64_t seq = 0;        // receives posted so far (staged in `stage`)
  uint64_t rq_posted = 0;  // receives whose receive WRs are posted (<= seq)
  uint64_t published = 0;  // receives whose CTS entries are written to the peer (<= rq_posted)
  // A failover's re-publication not known landed: later entries that reuse its slots wait.
  rules::RewriteGate rewrite;
  // (The clear-to-send writes' accounting is per QP incarnation: Conn::qp[q].cts_*.)
  // The progress watchdog's view of the unsignaled CTS tail (progress.h): per QP in its
  // incarnation (cts_tail_from, cts_probing); here the receives completed.
  uint64_t completed = 0;       // receives completed
  uint64_t completed_hi = 0;    // 1 + the highest seq of a completed receive (0: none)
  uint64_t completed_seen = 0;  // `completed` at the watchdog's previous check
  // Every receive below it is done (finish_recv moves it): a receive of a higher seq that is done
  // waits for the ones between in `test` only while this is below it (completion in posting
  // order, docs/eager.md); one at or past it skips that scan of the pool.
  uint64_t done_below = 0;
  RecvReq* pool = nullptr;  // kFifoSlots requests in `mem`; receive k uses k % kFifoSlots
  // SLUICE_TEST_HOLD_RQ (tests only): completions held back with their member (failover_recv.cc).
  std::vector<std::pair<ibv_wc, int>> held;
  // The eager path (docs/eager.md; datapath/eager.cc). on: negotiated (one path, both ends).
  struct Eager {
    bool on = false;
    // Its book (5 KiB), lent with the ring (the pool's book of that ring) at the comm's first
    // receive; `on` is cleared there when no ring is lent: read only under `on`.
    eager::ReceiverBook* book = nullptr;
    EagerRef ref;     // before `ring`: given back after it
    EagerLease ring;  // lent at the comm's first receive if it is host memory, while rings last
    // The pool's rkey on each member (a fused comm's grant names them all; member 0: its own).
    uint32_t rkeys[wire::kMaxMetaMembers] = {};
    bool grant_sent = false;    // the grant block is written (before any credit could be used)
    uint32_t grant = 0;         // the grant's generation
    uint64_t remote_block = 0;  // the sender's grant block
    wire::EagerGrant* src = nullptr;  // the grant's source (in `mem`, registered)
    uint64_t held = 0;                // resolved receives staged, not written (<= seq - published)
    // The sender's FIFO head as far as this side knows (its head reports, and every close: the
    // sender read the slot of the receive it closes). A receive's slot is reused only once the
    // sender read its previous use: a receive completed from the ring proves nothing of that.
    uint64_t* head_cell = nullptr;  // written by the sender: its head, twice
    uint64_t head = 0;
    bool flush = false;  // publish held entries now (irecv waits for the sender to read them)
    // Held clear-to-send (eager_publish_end): while `lazy` (the last receive completed from the
    // ring, or with sizes up to lazy_max), a receive's entries wait for its message in the ring;
    // receives below flush_to (an ask named them) are published at once.
    bool hold = true;  // SLUICE_EAGER_HOLD
    bool lazy = false;
    int64_t lazy_max = -1;
    uint64_t flush_to = 0;
  } eg;
  Conn c;
  std::unique_ptr<Flush, FlushDeleter> flush;  // loopback QP for iflush; null until needed
};

// Teardown of what NCCL may abandon (connect.cc, listener.cc). all = false: release connects
// in progress that nobody polled past their SLUICE_CONNECT_TIMEOUT_MS, and handshakes in progress
// on listen comms past their SLUICE_HANDSHAKE_TIMEOUT_MS (called from later control calls; skips
// what another thread is driving). all = true (finalize, before the devices go): release every
// connect in progress and every listen comm's pending handshakes, and retire open listen comms
// (a later accept fails, close frees them). Each returns how many it released.
// Requests of `comm` (a SendComm or RecvComm) not yet completed whose buffers lie in the
// registration `mh` (datapath.cc); *what describes them ("2 isend(s) on qpn 17 on ..."). On a
// failed comm it also moves the QPs to ERROR (the NIC stops), but its requests still count until
// close drains the queues.
int requests_using(void* comm, const MemHandle* mh, std::string* what);

// Frees the registrations that deregMr deferred on the comm `key` (its address): with `comm` (the
// live comm) those whose requests are done; with comm = null every one (the comm's QPs are
// drained or destroyed; it may be freed already).
void release_deferred_mrs(Adapter* a, uintptr_t key, void* comm);

// Finalize with the comm still open (datapath.cc): its QPs, CQ, MRs, flush machinery and socket
// are released while the device is alive, and it fails every later call with `why`; only its
// memory stays, for close to free. The caller holds no adapter lock.
void retire_comm(Conn& c, const std::string& why);

size_t reap_abandoned_connects(bool all);
size_t reap_listens(bool all);
// A listening socket whose last listen closed stays open while the process has a send or receive
// comm open, so NCCL's next round of listens takes the same port (listen_port.cc). Called when the
// count of open comms reaches 0, and at the last finalize: closes every such socket.
void close_idle_listen_ports();

}  // namespace sluice
