// libFuzzer target: an eager ring slot and a grant block as the peer RDMA-wrote them, through the
// real readers of core/src/wire/eager.cc (the receiver's read_eager_slot, the sender's read_grant).
//
// Input layout (short inputs are zero-padded):
//   [0, 8)      the counter the receiver expects
//   [8, 12)     the grant the receiver expects
//   [12, 14)    the receiver's largest eager message (taken modulo 4,097)
//   [14]        control: bit 0 = first encode a valid slot from the bytes below and then flip the
//               bits named in [15, 23) (so the fuzzer also starts from slots that check); bit 1
//               with it = a batch (wire::kEagerMore) of 2..9 messages cut from those bytes at the
//               lengths in [15, 23); bits 2..3 = the ring's bytes from the slot to its end, in
//               strides (1..4: a batch that runs past it); bits 4..7 = the records a previous
//               poll found checking (read_eager_batch's *checked, 0..15, right or wrong)
//   [15, 23)    bit positions to flip (one byte each: position * 8 + bit, modulo the slot's bits)
//   [23, 87)    a grant block
//   [87, ...)   the slot's bytes (at most four strides of 4,096-byte messages)
// Contract: never crash; kReady only for a slot whose every field the reader promised checks
// (recomputed here with the same CRC over the same bytes); kCorrupt with a reason; a grant read
// ready is within its documented ranges.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "sluice/core/wire/eager.h"

using namespace sluice;

namespace {

template <typename T>
T take(const uint8_t* p, size_t n, size_t at) {
  uint8_t b[sizeof(T)] = {};
  for (size_t i = 0; i < sizeof(T); ++i) b[i] = at + i < n ? p[at + i] : 0;
  T v;
  std::memcpy(&v, b, sizeof v);
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto counter = take<uint64_t>(data, size, 0);
  const auto grant = take<uint32_t>(data, size, 8);
  const size_t max = take<uint16_t>(data, size, 12) % 4097;
  const uint8_t control = take<uint8_t>(data, size, 14);
  const size_t region = wire::eager_stride(4096) * (1 + (control >> 2 & 3));
  std::vector<uint8_t> slot(wire::eager_stride(4096) * 4, 0);
  const size_t from = 87;
  const size_t body = size > from ? std::min(size - from, slot.size()) : 0;
  if (body > 0) std::memcpy(slot.data(), data + from, body);
  if ((control & 3) == 3) {
    // A batch that checks: messages cut from the body's bytes, then bit flips.
    std::vector<uint8_t> bytes(slot.begin(), slot.begin() + static_cast<long>(body));
    const int n = 2 + take<uint8_t>(data, size, 15) % 8;
    size_t at = 0;
    size_t end = 0;
    uint32_t first = 0;
    for (int k = 0; k < n; ++k) {
      const size_t want = take<uint8_t>(data, size, 16 + (k % 7)) * size_t{17} % (max + 1);
      const auto len = static_cast<uint32_t>(std::min(want, body - std::min(at, body)));
      const uint8_t* p = bytes.data() + std::min(at, body);
      if (k == 0) {
        wire::put_eager_first(slot.data(), p, len);
        first = len;
        end = wire::kEagerHeaderBytes + len;
      } else {
        if (((end + 7) & ~size_t{7}) + wire::kEagerRecordBytes + len > slot.size()) break;
        end = wire::append_eager_record(slot.data(), end, counter + static_cast<uint64_t>(k), k,
                                        static_cast<uint32_t>(k), p, len);
      }
      at += len;
    }
    wire::seal_eager_slot(slot.data(), counter, grant, 0, 0, first, static_cast<uint32_t>(n - 1),
                          0);
    const size_t bits = end * 8;
    for (size_t k = 0; k < 8; ++k) {
      const uint8_t pos = take<uint8_t>(data, size, 15 + k);
      if (pos < 128) continue;
      const size_t b = (static_cast<size_t>(pos) * 37) % bits;
      slot[b / 8] ^= static_cast<uint8_t>(1u << (b % 8));
    }
  } else if ((control & 1) != 0) {
    // A slot that checks, from the body's bytes as payload, then bit flips.
    const auto n = static_cast<uint32_t>(std::min<size_t>(body, max));
    std::vector<uint8_t> payload(slot.begin() + wire::kEagerHeaderBytes,
                                 slot.begin() + wire::kEagerHeaderBytes + n);
    const int32_t tag = take<int32_t>(data, size, 15);
    wire::encode_eager_slot(slot.data(), counter, grant, tag, take<uint32_t>(data, size, 16),
                            payload.data(), n);
    const size_t bits = (wire::kEagerHeaderBytes + n) * 8;
    for (size_t k = 0; k < 8; ++k) {
      const uint8_t pos = take<uint8_t>(data, size, 15 + k);
      if (pos == 0) continue;
      const size_t b = (static_cast<size_t>(pos) * 37) % bits;
      slot[b / 8] ^= static_cast<uint8_t>(1u << (b % 8));
    }
  }
  wire::EagerHeader h{};
  std::string why;
  const wire::SlotRead r = wire::read_eager_slot(slot.data(), counter, grant, max, &h, &why);
  if (r == wire::SlotRead::kReady) {
    wire::EagerHeader x;
    std::memcpy(&x, slot.data(), sizeof x);
    FUZZ_CHECK(std::memcmp(&x, &h, sizeof x) == 0, "the header returned is the slot's");
    FUZZ_CHECK(h.seq == counter + 1, "seq %llu for counter %llu",
               static_cast<unsigned long long>(h.seq), static_cast<unsigned long long>(counter));
    // An ask (wire::kEagerAsk) has no payload; a message's payload is within the limit.
    const uint32_t payload = (h.size & wire::kEagerAsk) != 0 ? 0 : h.size & wire::kEagerSizeMask;
    FUZZ_CHECK(h.grant == static_cast<uint16_t>(grant) && payload <= max, "fields in range");
    FUZZ_CHECK(wire::crc32c(0, &h, 28) == h.hcrc, "header CRC");
    FUZZ_CHECK(wire::crc32c(0, slot.data() + wire::kEagerHeaderBytes, payload) == h.pcrc,
               "payload CRC");
    if (wire::eager_more(h) != 0) {
      // Every message of a batch checks, lies within the region and the limit, in order.
      wire::EagerPart parts[wire::kEagerMaxMore + 1];
      int n = 0;
      why.clear();
      const wire::SlotRead br =
          wire::read_eager_batch(slot.data(), h, region, max, parts, &n, &why);
      if (br == wire::SlotRead::kReady) {
        FUZZ_CHECK(n == static_cast<int>(wire::eager_more(h)) + 1, "count %d", n);
        size_t prev = 0;
        for (int k = 0; k < n; ++k) {
          FUZZ_CHECK(parts[k].size <= max && parts[k].at + size_t{parts[k].size} <= region &&
                         parts[k].at >= prev,
                     "part %d in range", k);
          prev = parts[k].at + parts[k].size;
          if (k == 0) continue;
          const uint64_t cnt = counter + static_cast<uint64_t>(k);
          wire::EagerRecord rec;
          std::memcpy(&rec, slot.data() + parts[k].at - wire::kEagerRecordBytes, sizeof rec);
          FUZZ_CHECK(rec.size == parts[k].size && rec.tag == parts[k].tag &&
                         wire::crc32c(wire::crc32c(wire::crc32c(0, &cnt, sizeof cnt), &rec, 12),
                                      slot.data() + parts[k].at, rec.size) == rec.crc,
                     "record %d checks", k);
        }
      } else if (br == wire::SlotRead::kCorrupt) {
        FUZZ_CHECK(!why.empty(), "a corrupt batch says why");
      }
      // Again, with records a previous poll found checking read without their CRCs: whatever
      // count it says (a wrong one too), nothing is read outside the region, and a batch that
      // checks whole reads the same, part for part.
      uint32_t checked = static_cast<uint32_t>(control >> 4);
      wire::EagerPart again[wire::kEagerMaxMore + 1];
      int m = 0;
      const wire::SlotRead cr =
          wire::read_eager_batch(slot.data(), h, region, max, again, &m, nullptr, &checked);
      if (cr == wire::SlotRead::kReady) {
        FUZZ_CHECK(m == static_cast<int>(wire::eager_more(h)) + 1 && checked == wire::eager_more(h),
                   "count %d, checked %u", m, checked);
        for (int k = 0; k < m; ++k)
          FUZZ_CHECK(again[k].at + size_t{again[k].size} <= region, "part %d in the region", k);
      }
      if (br == wire::SlotRead::kReady) {
        FUZZ_CHECK(cr == wire::SlotRead::kReady && m == n, "a batch that checks reads the same");
        for (int k = 0; k < n; ++k)
          FUZZ_CHECK(again[k].size == parts[k].size && again[k].at == parts[k].at &&
                         again[k].tag == parts[k].tag && again[k].ordinal == parts[k].ordinal,
                     "part %d the same", k);
      }
    }
  } else if (r == wire::SlotRead::kCorrupt) {
    FUZZ_CHECK(!why.empty(), "a corrupt slot says why");
    wire::EagerHeader x;
    std::memcpy(&x, slot.data(), sizeof x);
    FUZZ_CHECK(x.seq == counter + 1 && wire::crc32c(0, &x, 28) == x.hcrc,
               "only a header that checks is called corrupt");
  }
  wire::EagerGrant g;
  for (size_t i = 0; i < sizeof g; ++i)
    reinterpret_cast<uint8_t*>(&g)[i] = take<uint8_t>(data, size, 23 + i);
  wire::EagerGrant out{};
  const wire::SlotRead gr = wire::read_grant(&g, &out, &why);
  if (gr == wire::SlotRead::kReady) {
    FUZZ_CHECK(out.slots >= wire::kEagerMinSlots && out.slots <= wire::kEagerMaxSlots &&
                   (out.slots & (out.slots - 1)) == 0,
               "slots %u", out.slots);
    FUZZ_CHECK(out.max_bytes <= wire::kEagerMaxBytes &&
                   size_t{out.stride64} * 64 == wire::eager_stride(out.max_bytes),
               "stride");
    FUZZ_CHECK(out.ring_addr != 0 && out.rkey != 0, "address and key");
    FUZZ_CHECK(out.nkeys <= static_cast<uint32_t>(wire::kGrantMoreKeys), "nkeys %u", out.nkeys);
    for (int m = 0; m <= static_cast<int>(out.nkeys); ++m)
      FUZZ_CHECK(wire::grant_rkey(out, m) != 0, "member %d's key", m);
    FUZZ_CHECK(wire::grant_rkey(out, static_cast<int>(out.nkeys) + 1) == 0, "no key past nkeys");
  }
  return 0;
}
