// The eager path's wire formats (docs/eager.md): the ring slot a sender RDMA-writes into its
// receiver's eager ring, and the grant block a receiver RDMA-writes once into its sender's comm
// memory to lend it a ring. Pure: no verbs, no state. The receiver's reading of a slot is the
// only parser of peer bytes here; fuzz/eager_slot_fuzz.cc drives it with arbitrary bytes.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "sluice/core/wire/wire.h"

namespace sluice::wire {

// Each end of a comm numbers the first kEagerTags distinct tags it meets (rules/eager_book.h
// TagTable); a send whose tag is not numbered on both ends always takes the clear-to-send path.
inline constexpr int kEagerTags = 64;
// The largest SLUICE_EAGER_MAX: a slot's size is a 32-bit field, and a ring of 32 slots of this
// size stays a few MiB.
inline constexpr size_t kEagerMaxBytes = size_t{64} << 10;
// Ring slots per comm (W): a power of two, at least 4 (credits come back every W/2), at most the
// receiver's clear-to-send FIFO. A sender may be W messages ahead of every receive, and each later
// receive completes from the ring; but a receive's FIFO slot is used again only once the sender
// read its entry kFifoSlots receives back, and a sender that sent all it had reads nothing. With
// W <= kFifoSlots the receive that would wait is for a message the sender could send only after
// reading an entry at or past that one (its credit); with W = 64 a receiver waited for good
// (CoreEager.AWholeRingOfMessagesAheadOfTheirReceives at 64 slots).
inline constexpr uint32_t kEagerMinSlots = 4;
inline constexpr uint32_t kEagerMaxSlots = 32;
static_assert(kEagerMaxSlots <= static_cast<uint32_t>(kFifoSlots),
              "a sender's eager messages ahead of every receive fit the receiver's FIFO");

// An eager slot: this header, then `size` payload bytes, written by one RDMA WRITE from the
// sender's staging slot. `seq` = the eager counter + 1 (so a zeroed slot never reads as message 0);
// `grant` = the grant's generation, low 16 bits (a ring re-lent to another comm never shows the
// previous comm's messages as this one's; the ring is also zeroed at each loan); `head` = the
// sender's clear-to-send FIFO head when it wrote the slot, low 16 bits: every slot before it was
// read, which frees the receiver to reuse them (the head report's job, for free; the receiver
// rebuilds the full value: the true head is at most 32 past the one it knows). `hcrc` covers the
// header's other 28 bytes, `pcrc` the payload, both CRC32C: a slot is taken only when both check,
// so a WRITE still landing, in any byte order, reads as "not yet", never as a message.
struct alignas(8) EagerHeader {
  uint64_t seq;
  uint32_t size;
  int32_t tag;
  uint32_t ordinal;  // the send's ordinal among this comm's sends with `tag`
  uint16_t grant;
  uint16_t head;
  uint32_t pcrc;
  uint32_t hcrc;  // last: CRC32C of bytes [0, 28)
};
static_assert(sizeof(EagerHeader) == 32 && offsetof(EagerHeader, hcrc) == 28);
static_assert(std::is_trivially_copyable_v<EagerHeader>);
inline constexpr size_t kEagerHeaderBytes = sizeof(EagerHeader);

// A slot whose size has this bit is an ask, not a message: no payload; the sender asks the receiver
// to publish the clear-to-send of part (tag, ordinal), which it will send by rendezvous, and the
// low 29 bits carry that send's size (saturated). The receiver holds back the clear-to-send of
// receives it expects to complete from the ring (docs/eager.md, "Held clear-to-send"); an ask is
// how a send that cannot go eagerly gets one. With kEagerAskAll too, the sender cannot number the
// send's tag (its table is full): the receiver holds nothing more. With kEagerAskLimit, sends of
// this size never go eagerly from this sender (above its SLUICE_EAGER_MAX, or no staging ring);
// without it the tag was not known to be numbered yet (the receiver's mark not read).
inline constexpr uint32_t kEagerAsk = 0x80000000u;
inline constexpr uint32_t kEagerAskAll = 0x40000000u;
inline constexpr uint32_t kEagerAskLimit = 0x20000000u;
inline constexpr uint32_t kEagerAskSize = 0x1fffffffu;

// A batch (kMetaFeatureEagerBatch): several messages in one WRITE, eager counters c .. c + m. The
// slot of c holds the header of message c with kEagerMore in its size, the number of messages that
// follow (m, 1..kEagerMaxMore) at kEagerMoreShift, and its own size in the low bits
// (kEagerSizeMask); then its payload; then, for each message that follows, at the next multiple of
// 8, an EagerRecord and its payload. Each record checks itself (its CRC covers its own counter, its
// first 12 bytes and its payload: a record an older batch left at the same place never checks), so
// the receiver takes the batch only once every record checks, and a record's size is trusted only
// once its CRC does. A batch may run on past its first slot into the slots of its later counters
// (never past the ring's end): message c + j's bytes always lie within the first j + 1 slots (a
// record is never longer than a stride).
inline constexpr uint32_t kEagerMore = 0x10000000u;
inline constexpr uint32_t kEagerMoreShift = 20;
inline constexpr uint32_t kEagerMaxMore = 63;
inline constexpr uint32_t kEagerSizeMask = 0x1ffffu;  // kEagerMaxBytes fits
static_assert(kEagerMaxBytes <= kEagerSizeMask && (kEagerMaxMore << kEagerMoreShift) < kEagerMore &&
              (kEagerMore & (kEagerAsk | kEagerAskAll | kEagerAskLimit)) == 0);
struct alignas(8) EagerRecord {
  uint32_t size;
  int32_t tag;
  uint32_t ordinal;
  uint32_t crc;  // CRC32C of the record's eager counter (8 bytes), of bytes [0, 12), of the payload
};
static_assert(sizeof(EagerRecord) == 16 && offsetof(EagerRecord, crc) == 12);
inline constexpr size_t kEagerRecordBytes = sizeof(EagerRecord);
// One message of a slot as the receiver reads it: its payload lies `at` bytes past the slot's
// start.
struct EagerPart {
  uint32_t size = 0;
  int32_t tag = 0;
  uint32_t ordinal = 0;
  uint32_t at = 0;
};

// Bytes between two slots of a ring whose largest message is `max_bytes`: header + payload, rounded
// up to 64 (each slot starts on a cache line).
size_t eager_stride(size_t max_bytes);

// CRC32C (Castagnoli), continuing `crc` (start with 0): SSE4.2 or ARMv8 CRC instructions, or
// eight tables (slicing by 8), whichever ran faster over 4 KiB at the first call (crc32c_choice);
// the same value either way.
uint32_t crc32c(uint32_t crc, const void* p, size_t n);

// The process's choice, made once at the first call of crc32c or of this: the method used
// ("sse4.2", "armv8-crc" or "table"), and the best of five timings of each over 4 KiB (0 where
// the CPU lacks the instructions).
struct Crc32cChoice {
  const char* method = "table";
  const char* hardware_name = "none";
  bool hardware_present = false;
  int64_t hardware_ns = 0;
  int64_t table_ns = 0;
};
const Crc32cChoice& crc32c_choice();

// CRC32C by one method (kHardware falls back to the table where the CPU lacks it): for tests.
enum class Crc32cMethod { kTable, kHardware };
uint32_t crc32c_by(Crc32cMethod m, uint32_t crc, const void* p, size_t n);

// Writes a slot into `slot` (staging memory of at least kEagerHeaderBytes + size bytes): the header
// for eager message `counter`, then a copy of `payload`. Returns the bytes to write.
size_t encode_eager_slot(void* slot, uint64_t counter, uint32_t grant, int32_t tag,
                         uint32_t ordinal, const void* payload, uint32_t size, uint64_t head = 0);

// A batch, built in staging in three steps: the first message's payload is copied behind the header
// room (put_eager_first), each later one appended at `end` (the bytes written so far, starting at
// kEagerHeaderBytes + the first size; returns the new end), and the header written last
// (seal_eager_slot, `more` = the messages appended; 0 writes a plain slot, encode_eager_slot's).
inline void put_eager_first(void* slot, const void* payload, uint32_t size);
size_t append_eager_record(void* slot, size_t end, uint64_t counter, int32_t tag, uint32_t ordinal,
                           const void* payload, uint32_t size);
void seal_eager_slot(void* slot, uint64_t counter, uint32_t grant, int32_t tag, uint32_t ordinal,
                     uint32_t size, uint32_t more, uint64_t head);
// The bytes a slot built here holds (header, payloads and records): for a WRITE posted again.
size_t eager_slot_bytes(const void* slot);

// Writes an ask (kEagerAsk) into `slot` (at least kEagerHeaderBytes): the header alone. Returns the
// bytes to write (kEagerHeaderBytes).
size_t encode_eager_ask(void* slot, uint64_t counter, uint32_t grant, int32_t tag, uint32_t ordinal,
                        size_t send_size, bool all, bool limit, uint64_t head = 0);

enum class SlotRead {
  kNotYet,   // not (completely) there: another counter (an older message, or none), or a CRC
             // that does not check yet
  kReady,    // *out is the header of message `counter`; its payload follows it in the slot
  kCorrupt,  // the header checks but says what no Sluice writes (*why): the comm fails
};
// Whether `slot` may hold message `counter` yet: its first word (the header's seq) reads counter
// + 1. One load, for a poll that finds most slots empty; read_eager_slot judges the rest.
inline bool eager_slot_landed(const void* slot, uint64_t counter) {
  return std::atomic_ref<const uint64_t>(*static_cast<const uint64_t*>(slot))
             .load(std::memory_order_acquire) == counter + 1;
}
// Reads the slot the receiver expects eager message `counter` of grant `grant` in (`slot`, at least
// kEagerHeaderBytes + max_bytes bytes, which the peer may be writing right now: every byte is read
// once into a copy before it is judged). An ask (size has kEagerAsk) has no payload, and reads as
// ready with its size as written. kCorrupt: a message's size above max_bytes, a grant other than
// `grant` with the expected seq (the tag is the receiver book's to judge).
SlotRead read_eager_slot(const void* slot, uint64_t counter, uint32_t grant, size_t max_bytes,
                         EagerHeader* out, std::string* why);
// The messages of a slot read ready (`h`, its header): parts[0] the first, then the records that
// follow (h.size's count), each within `region` bytes from the slot's start (the ring's bytes from
// this slot to its end). Returns the count in *n (1 for a plain slot). kNotYet: a record that does
// not check yet (still landing); kCorrupt: a record that checks but says what no Sluice writes (a
// size above max_bytes), or a batch that cannot fit the region. `parts`: kEagerMaxMore + 1 entries.
// *checked (null: none): how many records a previous call of this slot's same header found
// checking; they are read again without their CRCs (what checked is final: its writer rewrites it
// only after a credit, or with the same bytes), and *checked says how many check now. A batch of
// many messages lands over several polls: each byte's CRC is then computed once, not once a poll.
SlotRead read_eager_batch(const void* slot, const EagerHeader& h, size_t region, size_t max_bytes,
                          EagerPart* parts, int* n, std::string* why, uint32_t* checked = nullptr);
inline uint32_t eager_more(const EagerHeader& h) {
  return (h.size & kEagerAsk) == 0 && (h.size & kEagerMore) != 0
             ? h.size >> kEagerMoreShift & kEagerMaxMore
             : 0;
}

inline void put_eager_first(void* slot, const void* payload, uint32_t size) {
  if (size > 0) std::memcpy(static_cast<char*>(slot) + kEagerHeaderBytes, payload, size);
}

// The grant block: 64 bytes after the sender's FIFO and completion records, written by the
// receiver when it lends the comm a ring (again, byte for byte, with a failover's
// re-publication). `crc` (CRC32C of bytes [0, 28), then of the `nkeys` keys) makes a block still
// landing read as absent, whatever order its bytes land in (`ready` is not the last of them).
// `rkey` is the ring's key on the receiver's member 0; a fused comm's other members' keys follow
// in `keys` (wire::kMetaFeatureEagerFused), so that a WRITE on any path reaches the ring: the
// sender takes the key of the member the path's QP lands on (grant_rkey). A one-path grant has
// nkeys 0, the format of a Sluice before fused eager.
inline constexpr int kGrantMoreKeys = 3;  // kMaxMetaMembers - 1
struct alignas(64) EagerGrant {
  uint64_t ring_addr;
  uint32_t rkey;
  uint32_t grant;      // generation, echoed in every slot header
  uint32_t max_bytes;  // the receiver's SLUICE_EAGER_MAX: the sender sends at most min(its, this)
  uint16_t slots;      // W
  uint16_t stride64;   // slot stride / 64
  uint32_t nkeys;      // keys that follow (the receiver's members 1..nkeys); 0 on one path
  uint32_t crc;
  uint64_t ready;
  uint32_t keys[kGrantMoreKeys];
  uint8_t pad[12];
};
static_assert(sizeof(EagerGrant) == 64 && offsetof(EagerGrant, crc) == 28 &&
              offsetof(EagerGrant, ready) == 32 && offsetof(EagerGrant, keys) == 40);
static_assert(std::is_trivially_copyable_v<EagerGrant>);

// The ring's key on the receiver's member `m` (0 when the grant names none for it).
inline uint32_t grant_rkey(const EagerGrant& g, int m) {
  if (m == 0) return g.rkey;
  return m >= 1 && static_cast<uint32_t>(m) <= g.nkeys ? g.keys[m - 1] : 0;
}

// The address of eager counter `counter`'s slot in the ring granted by `g` (slots reused in turn).
inline uint64_t ring_slot_addr(const EagerGrant& g, uint64_t counter) {
  return g.ring_addr + (counter % g.slots) * (uint64_t{g.stride64} * 64u);
}

// `more`: the ring's keys on the receiver's members 1..nmore (a fused comm; none on one path).
void encode_grant(EagerGrant* g, uint64_t ring_addr, uint32_t rkey, uint32_t grant,
                  uint32_t max_bytes, uint32_t slots, const uint32_t* more = nullptr,
                  int nmore = 0);
// Reads a grant block as the sender finds it. kNotYet: not written yet, or still landing (ready or
// the CRC not there); kReady: *out validated (slots a power of two in [kEagerMinSlots,
// kEagerMaxSlots], max_bytes <= kEagerMaxBytes, stride = eager_stride(max_bytes), a non-zero
// address and keys, at most kGrantMoreKeys more); kCorrupt: the CRC checks but a field does not
// (*why).
SlotRead read_grant(const EagerGrant* g, EagerGrant* out, std::string* why);

// The credit in a clear-to-send entry (CtsEntry::reserved): the receiver's limit (the first eager
// counter it has no free slot for) modulo 2^16. `known` is the largest limit the sender read so
// far; the true limit is never below it nor more than kEagerMaxSlots above the sender's own eager
// count, which is at most `known`: so the 16 bits name it, and a step of more than W (the ring's
// slots) is a peer's error (rules/eager_book.cc refuses it).
inline uint64_t credit_of(uint64_t known, uint16_t v) {
  return known + static_cast<uint16_t>(v - static_cast<uint16_t>(known));
}

}  // namespace sluice::wire
