#include "sluice/core/wire/eager.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>

namespace sluice::wire {

namespace {

constexpr uint32_t kPoly = 0x82f63b78u;  // CRC32C, reflected

struct Table {
  uint32_t t[256];
  constexpr Table() : t{} {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) != 0 ? (c >> 1) ^ kPoly : c >> 1;
      t[i] = c;
    }
  }
};
constexpr Table kTable;

uint32_t crc_soft(uint32_t c, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) c = kTable.t[(c ^ p[i]) & 0xffu] ^ (c >> 8);
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
  static const bool on = __builtin_cpu_supports("sse4.2");
  return on;
}
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
#else
uint32_t crc_hw(uint32_t c, const uint8_t* p, size_t n) {
  return crc_soft(c, p, n);
}
bool have_hw() {
  return false;
}
#endif

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
  uint32_t c = ~crc;
  c = have_hw() ? crc_hw(c, b, n) : crc_soft(c, b, n);
  return ~c;
}

size_t encode_eager_slot(void* slot, uint64_t counter, uint32_t grant, int32_t tag,
                         uint32_t ordinal, const void* payload, uint32_t size, uint64_t head) {
  auto* base = static_cast<uint8_t*>(slot);
  if (size > 0) std::memcpy(base + kEagerHeaderBytes, payload, size);
  EagerHeader h{};
  h.seq = counter + 1;
  h.size = size;
  h.tag = tag;
  h.ordinal = ordinal;
  h.grant = static_cast<uint16_t>(grant);
  h.head = static_cast<uint16_t>(head);
  h.pcrc = crc32c(0, base + kEagerHeaderBytes, size);
  h.hcrc = header_crc(h);
  std::memcpy(base, &h, sizeof h);
  return kEagerHeaderBytes + size;
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
  const uint32_t payload = (h.size & kEagerAsk) != 0 ? 0 : h.size;
  if (payload > max_bytes)
    return bad("size " + std::to_string(h.size) + " above the eager limit of " +
               std::to_string(max_bytes) + " bytes");
  if (crc32c(0, base + kEagerHeaderBytes, payload) != h.pcrc) return SlotRead::kNotYet;
  *out = h;
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
