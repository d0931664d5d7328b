#include "sluice/core/wire/eager.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstring>

namespace sluice::wire {

namespace {

constexpr uint32_t kPoly = 0x82f63b78u;  // CRC32C, reflected

// Eight tables for "slicing by 8": t[0] is the byte-at-a-time table, t[k][i] the CRC of byte i
// followed by k zero bytes, so eight bytes fold in with eight lookups and no carried dependency.
struct Tables {
  uint32_t t[8][256];
  constexpr Tables() : t{} {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) != 0 ? (c >> 1) ^ kPoly : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (int k = 1; k < 8; ++k) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xffu];
  }
};
constexpr Tables kTables;

uint32_t crc_soft(uint32_t c, const uint8_t* p, size_t n) {
  const auto& t = kTables.t;
  for (; n >= 8; n -= 8, p += 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    if constexpr (std::endian::native == std::endian::big) {
      lo = __builtin_bswap32(lo);
      hi = __builtin_bswap32(hi);
    }
    lo ^= c;
    c = t[7][lo & 0xffu] ^ t[6][lo >> 8 & 0xffu] ^ t[5][lo >> 16 & 0xffu] ^ t[4][lo >> 24] ^
        t[3][hi & 0xffu] ^ t[2][hi >> 8 & 0xffu] ^ t[1][hi >> 16 & 0xffu] ^ t[0][hi >> 24];
  }
  for (; n > 0; --n, ++p) c = t[0][(c ^ *p) & 0xffu] ^ (c >> 8);
  return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc_hw(uint32_t c, const uint8_t* p, size_t n) {
  uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c64 = __builtin_ia32_crc32di(c64, v);
  }
  uint32_t c32 = static_cast<uint32_t>(c64);
  for (; n > 0; --n, ++p) c32 = __builtin_ia32_crc32qi(c32, *p);
  return c32;
}
bool have_hw() {
  return __builtin_cpu_supports("sse4.2");
}
constexpr const char* kHwName = "sse4.2";
#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
uint32_t crc_hw(uint32_t c, const uint8_t* p, size_t n) {
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = __builtin_aarch64_crc32cx(c, v);
  }
  for (; n > 0; --n, ++p) c = __builtin_aarch64_crc32cb(c, *p);
  return c;
}
bool have_hw() {
  return true;
}
constexpr const char* kHwName = "armv8-crc";
#else
uint32_t crc_hw(uint32_t c, const uint8_t* p, size_t n) {
  return crc_soft(c, p, n);
}
bool have_hw() {
  return false;
}
constexpr const char* kHwName = "none";
#endif

using CrcFn = uint32_t (*)(uint32_t, const uint8_t*, size_t);

// The fastest of the two over a 4-KiB buffer (an eager slot's payload), best of several timings
// each: both give the same value, so the choice is speed only. The CPU instruction wins on real
// cores (460 against 1,960 ns on the development host); an emulator runs it one helper call at a
// time, and the table wins there (qemu's TCG, the test bed: 6..9 against 27..30 us; valgrind too).
struct Choice {
  CrcFn fn = crc_soft;
  Crc32cChoice info{};
  Choice() {
    info.hardware_present = have_hw();
    info.hardware_name = kHwName;
    if (!info.hardware_present) return;  // the table, as info.method says by default
    alignas(64) static uint8_t buf[4096];
    for (size_t i = 0; i < sizeof buf; ++i) buf[i] = static_cast<uint8_t>(i * 131u + 7u);
    auto best = [&](CrcFn f) {
      int64_t b = INT64_MAX;
      volatile uint32_t sink = 0;
      for (int rep = 0; rep < 5; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        sink = sink + f(~0u, buf, sizeof buf);
        const auto t1 = std::chrono::steady_clock::now();
        b = std::min<int64_t>(
            b, std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
      }
      return b;
    };
    info.hardware_ns = best(crc_hw);
    info.table_ns = best(crc_soft);
    const bool hw = info.hardware_ns <= info.table_ns;
    fn = hw ? crc_hw : crc_soft;
    info.method = hw ? kHwName : "table";
  }
};

const Choice& choice() {
  static const Choice c;
  return c;
}

uint32_t header_crc(const EagerHeader& h) {
  return crc32c(0, &h, offsetof(EagerHeader, hcrc));
}

bool pow2_slots(uint32_t w) {
  return w >= kEagerMinSlots && w <= kEagerMaxSlots && std::has_single_bit(w);
}

}  // namespace

size_t eager_stride(size_t max_bytes) {
  return (kEagerHeaderBytes + max_bytes + 63) / 64 * 64;
}

uint32_t crc32c(uint32_t crc, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  return ~choice().fn(~crc, b, n);
}

uint32_t crc32c_by(Crc32cMethod m, uint32_t crc, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  const bool hw = m == Crc32cMethod::kHardware && have_hw();
  return ~(hw ? crc_hw(~crc, b, n) : crc_soft(~crc, b, n));
}

const Crc32cChoice& crc32c_choice() {
  return choice().info;
}

size_t encode_eager_slot(void* slot, uint64_t counter, uint32_t grant, int32_t tag,
                         uint32_t ordinal, const void* payload, uint32_t size, uint64_t head) {
  put_eager_first(slot, payload, size);
  seal_eager_slot(slot, counter, grant, tag, ordinal, size, 0, head);
  return kEagerHeaderBytes + size;
}

namespace {

size_t align8(size_t n) {
  return (n + 7) & ~size_t{7};
}

// The record's own eager counter first (not written: the receiver knows it from the batch's), so a
// record left in the ring by an older batch never checks as one of this batch's, whatever landed.
uint32_t record_crc(uint64_t counter, const EagerRecord& r, const uint8_t* payload) {
  const uint32_t c = crc32c(0, &counter, sizeof counter);
  return crc32c(crc32c(c, &r, offsetof(EagerRecord, crc)), payload, r.size);
}

}  // namespace

size_t append_eager_record(void* slot, size_t end, uint64_t counter, int32_t tag, uint32_t ordinal,
                           const void* payload, uint32_t size) {
  auto* base = static_cast<uint8_t*>(slot);
  const size_t at = align8(end);
  uint8_t* dst = base + at + kEagerRecordBytes;
  if (size > 0) std::memcpy(dst, payload, size);
  EagerRecord r{size, tag, ordinal, 0};
  r.crc = record_crc(counter, r, dst);
  std::memcpy(base + at, &r, sizeof r);
  return at + kEagerRecordBytes + size;
}

void seal_eager_slot(void* slot, uint64_t counter, uint32_t grant, int32_t tag, uint32_t ordinal,
                     uint32_t size, uint32_t more, uint64_t head) {
  auto* base = static_cast<uint8_t*>(slot);
  EagerHeader h{};
  h.seq = counter + 1;
  h.size = more == 0 ? size : size | kEagerMore | more << kEagerMoreShift;
  h.tag = tag;
  h.ordinal = ordinal;
  h.grant = static_cast<uint16_t>(grant);
  h.head = static_cast<uint16_t>(head);
  h.pcrc = crc32c(0, base + kEagerHeaderBytes, size);
  h.hcrc = header_crc(h);
  std::memcpy(base, &h, sizeof h);
}

size_t eager_slot_bytes(const void* slot) {
  const auto* base = static_cast<const uint8_t*>(slot);
  EagerHeader h;
  std::memcpy(&h, base, sizeof h);
  if ((h.size & kEagerAsk) != 0) return kEagerHeaderBytes;
  size_t end = kEagerHeaderBytes + (h.size & kEagerSizeMask);
  for (uint32_t i = 0, m = eager_more(h); i < m; ++i) {
    EagerRecord r;
    std::memcpy(&r, base + align8(end), sizeof r);
    end = align8(end) + kEagerRecordBytes + r.size;
  }
  return end;
}

size_t encode_eager_ask(void* slot, uint64_t counter, uint32_t grant, int32_t tag, uint32_t ordinal,
                        size_t send_size, bool all, bool limit, uint64_t head) {
  EagerHeader h{};
  h.seq = counter + 1;
  h.size = kEagerAsk | (all ? kEagerAskAll : 0) | (limit ? kEagerAskLimit : 0) |
           static_cast<uint32_t>(std::min<size_t>(send_size, kEagerAskSize));
  h.tag = tag;
  h.ordinal = ordinal;
  h.grant = static_cast<uint16_t>(grant);
  h.head = static_cast<uint16_t>(head);
  h.pcrc = crc32c(0, nullptr, 0);
  h.hcrc = header_crc(h);
  std::memcpy(slot, &h, sizeof h);
  return kEagerHeaderBytes;
}

SlotRead read_eager_slot(const void* slot, uint64_t counter, uint32_t grant, size_t max_bytes,
                         EagerHeader* out, std::string* why) {
  const auto* base = static_cast<const uint8_t*>(slot);
  // The peer's NIC may be writing the slot now: seq is read first (acquire), then the header is
  // copied once and only the copy is judged. The payload is checked where it lies: its writer
  // rewrites a slot only after the receiver freed it (a credit), or with the same bytes (a failover
  // replay), so what checks here is what the caller copies out.
  if (!eager_slot_landed(base, counter)) return SlotRead::kNotYet;
  EagerHeader h;
  std::memcpy(&h, base, sizeof h);
  if (h.seq != counter + 1 || h.hcrc != header_crc(h)) return SlotRead::kNotYet;
  // The header is complete and is what its writer meant: from here a wrong field is an error.
  auto bad = [&](std::string m) {
    if (why != nullptr) *why = "eager slot of message " + std::to_string(counter) + ": " + m;
    return SlotRead::kCorrupt;
  };
  if (h.grant != static_cast<uint16_t>(grant))
    return bad("grant " + std::to_string(h.grant) + ", expected " +
               std::to_string(static_cast<uint16_t>(grant)));
  const bool ask = (h.size & kEagerAsk) != 0;
  // A message's size: its own in the low bits, and with kEagerMore the count of those that follow;
  // any other bit is none Sluice writes.
  const uint32_t payload = ask ? 0 : h.size & kEagerSizeMask;
  if (!ask && (h.size & kEagerMore) == 0 && h.size != payload)
    return bad("size " + std::to_string(h.size) + " above the eager limit of " +
               std::to_string(max_bytes) + " bytes");
  if (!ask && (h.size & kEagerMore) != 0 &&
      (eager_more(h) == 0 ||
       (h.size & ~(kEagerMore | kEagerSizeMask | kEagerMaxMore << kEagerMoreShift)) != 0))
    return bad("batch header " + std::to_string(h.size) + " (a count of 1.." +
               std::to_string(kEagerMaxMore) + " more messages and no other bit)");
  if (payload > max_bytes)
    return bad("size " + std::to_string(h.size) + " above the eager limit of " +
               std::to_string(max_bytes) + " bytes");
  if (crc32c(0, base + kEagerHeaderBytes, payload) != h.pcrc) return SlotRead::kNotYet;
  *out = h;
  return SlotRead::kReady;
}

SlotRead read_eager_batch(const void* slot, const EagerHeader& h, size_t region, size_t max_bytes,
                          EagerPart* parts, int* n, std::string* why, uint32_t* checked) {
  const auto* base = static_cast<const uint8_t*>(slot);
  *n = 0;
  auto bad = [&](std::string m) {
    if (why != nullptr) *why = "eager batch of message " + std::to_string(h.seq - 1) + ": " + m;
    return SlotRead::kCorrupt;
  };
  const uint32_t first = h.size & kEagerSizeMask;
  if (kEagerHeaderBytes + first > region) return bad("its first message runs past the ring");
  parts[0] = EagerPart{first, h.tag, h.ordinal, static_cast<uint32_t>(kEagerHeaderBytes)};
  size_t end = kEagerHeaderBytes + first;
  const uint32_t more = eager_more(h);
  const uint32_t known = checked == nullptr ? 0 : std::min(*checked, more);
  for (uint32_t i = 1; i <= more; ++i) {
    const size_t at = align8(end);
    // Bytes that may still be landing: read once into a copy, trusted only once the CRC checks.
    if (at + kEagerRecordBytes > region)
      return bad("record " + std::to_string(i) + " past the ring");
    EagerRecord r;
    std::memcpy(&r, base + at, sizeof r);
    // A size not checked yet (the record may be landing), or a CRC that does not check yet.
    if (at + kEagerRecordBytes + r.size > region || r.size > kEagerSizeMask ||
        (i > known && record_crc(h.seq - 1 + i, r, base + at + kEagerRecordBytes) != r.crc)) {
      if (checked != nullptr) *checked = i - 1;
      return SlotRead::kNotYet;
    }
    if (r.size > max_bytes)
      return bad("record " + std::to_string(i) + ": size " + std::to_string(r.size) +
                 " above the eager limit of " + std::to_string(max_bytes) + " bytes");
    parts[i] = EagerPart{r.size, r.tag, r.ordinal, static_cast<uint32_t>(at + kEagerRecordBytes)};
    end = at + kEagerRecordBytes + r.size;
  }
  *n = static_cast<int>(more + 1);
  if (checked != nullptr) *checked = more;
  return SlotRead::kReady;
}

namespace {

// [0, 28), then the keys that follow `ready` (none on one path: the format before them).
uint32_t grant_crc(const EagerGrant& x, uint32_t nkeys) {
  const uint32_t c = crc32c(0, &x, offsetof(EagerGrant, crc));
  return nkeys == 0 ? c : crc32c(c, x.keys, nkeys * sizeof x.keys[0]);
}

}  // namespace

void encode_grant(EagerGrant* g, uint64_t ring_addr, uint32_t rkey, uint32_t grant,
                  uint32_t max_bytes, uint32_t slots, const uint32_t* more, int nmore) {
  EagerGrant x{};
  x.ring_addr = ring_addr;
  x.rkey = rkey;
  x.grant = grant;
  x.max_bytes = max_bytes;
  x.slots = static_cast<uint16_t>(slots);
  x.stride64 = static_cast<uint16_t>(eager_stride(max_bytes) / 64);
  const int n = more == nullptr ? 0 : std::clamp(nmore, 0, kGrantMoreKeys);
  x.nkeys = static_cast<uint32_t>(n);
  for (int i = 0; i < n; ++i) x.keys[i] = more[i];
  x.crc = grant_crc(x, x.nkeys);
  x.ready = 1;
  *g = x;
}

SlotRead read_grant(const EagerGrant* g, EagerGrant* out, std::string* why) {
  if (std::atomic_ref<const uint64_t>(g->ready).load(std::memory_order_acquire) != 1)
    return SlotRead::kNotYet;
  EagerGrant x;
  std::memcpy(&x, g, sizeof x);
  // A count past the format's is never read as one (the CRC then covers what it says).
  const uint32_t nkeys = std::min<uint32_t>(x.nkeys, kGrantMoreKeys);
  if (x.ready != 1 || x.crc != grant_crc(x, nkeys)) return SlotRead::kNotYet;
  auto bad = [&](std::string m) {
    if (why != nullptr) *why = "eager grant: " + m;
    return SlotRead::kCorrupt;
  };
  if (x.nkeys > static_cast<uint32_t>(kGrantMoreKeys))
    return bad(std::to_string(x.nkeys) + " more member keys (at most " +
               std::to_string(kGrantMoreKeys) + ")");
  for (uint32_t i = 0; i < nkeys; ++i)
    if (x.keys[i] == 0) return bad("no key for member " + std::to_string(i + 1));
  if (!pow2_slots(x.slots))
    return bad(std::to_string(x.slots) + " slots (a power of two in [" +
               std::to_string(kEagerMinSlots) + ", " + std::to_string(kEagerMaxSlots) + "])");
  if (x.max_bytes > kEagerMaxBytes)
    return bad("largest message " + std::to_string(x.max_bytes) + " bytes, above " +
               std::to_string(kEagerMaxBytes));
  if (size_t{x.stride64} * 64 != eager_stride(x.max_bytes))
    return bad("slot stride " + std::to_string(size_t{x.stride64} * 64) + " for " +
               std::to_string(x.max_bytes) + "-byte messages");
  if (x.ring_addr == 0 || x.rkey == 0) return bad("no ring address or key");
  *out = x;
  return SlotRead::kReady;
}

}  // namespace sluice::wire
