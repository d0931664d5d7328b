// The eager path's wire formats (core/src/wire/eager.cc): CRC32C against its published check
// values, a slot read as the receiver reads it while it lands in any byte order, a stale or foreign
// slot, the refusals of a header that checks but is wrong, and the grant block.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "sluice/core/wire/eager.h"

namespace {

using namespace sluice;
using wire::SlotRead;

TEST(EagerCrc, MatchesTheStandardCheckValues) {
  // RFC 3720 B.4 and the usual "123456789" check value of CRC-32C.
  const char* nine = "123456789";
  EXPECT_EQ(wire::crc32c(0, nine, 9), 0xe3069283u);
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xff);
  EXPECT_EQ(wire::crc32c(0, zeros.data(), 32), 0x8a9136aau);
  EXPECT_EQ(wire::crc32c(0, ones.data(), 32), 0x62a8ab43u);
  // Continuing a CRC over two pieces gives the CRC of the whole.
  EXPECT_EQ(wire::crc32c(wire::crc32c(0, nine, 4), nine + 4, 5), 0xe3069283u);
}

TEST(EagerCrc, BothMethodsGiveTheSameValue) {
  for (auto m : {wire::Crc32cMethod::kTable, wire::Crc32cMethod::kHardware}) {
    EXPECT_EQ(wire::crc32c_by(m, 0, "123456789", 9), 0xe3069283u);
    std::vector<uint8_t> ones(32, 0xff);
    EXPECT_EQ(wire::crc32c_by(m, 0, ones.data(), 32), 0x62a8ab43u);
  }
  // Every length to 200 at every alignment (the table's 8-byte steps and its byte tail), a 4-KiB
  // slot and a continued CRC, on random bytes.
  std::mt19937 rng(33);
  std::vector<uint8_t> buf(4096 + 8);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t off = 0; off < 8; ++off) {
    for (size_t n = 0; n <= 200; ++n) {
      const uint32_t t = wire::crc32c_by(wire::Crc32cMethod::kTable, 0, buf.data() + off, n);
      EXPECT_EQ(wire::crc32c_by(wire::Crc32cMethod::kHardware, 0, buf.data() + off, n), t) << n;
      EXPECT_EQ(wire::crc32c(0, buf.data() + off, n), t) << off << " " << n;
    }
  }
  const uint32_t whole = wire::crc32c_by(wire::Crc32cMethod::kTable, 0, buf.data(), 4096);
  EXPECT_EQ(wire::crc32c_by(wire::Crc32cMethod::kHardware, 0, buf.data(), 4096), whole);
  const uint32_t half = wire::crc32c_by(wire::Crc32cMethod::kTable, 0, buf.data(), 1001);
  EXPECT_EQ(wire::crc32c_by(wire::Crc32cMethod::kTable, half, buf.data() + 1001, 3095), whole);
  // A flipped bit in the middle changes it.
  buf[2049] ^= 0x10;
  EXPECT_NE(wire::crc32c_by(wire::Crc32cMethod::kTable, 0, buf.data(), 4096), whole);
}

TEST(EagerCrc, TheChoiceIsTheFasterMethodThisCpuHas) {
  const wire::Crc32cChoice& c = wire::crc32c_choice();
  if (!c.hardware_present) {
    EXPECT_STREQ(c.method, "table");
    return;
  }
  EXPECT_GE(c.hardware_ns, 0);
  EXPECT_GE(c.table_ns, 0);
  EXPECT_STREQ(c.method, c.hardware_ns <= c.table_ns ? c.hardware_name : "table");
}

TEST(EagerSlot, StrideIsHeaderPlusPayloadOnCacheLines) {
  EXPECT_EQ(wire::eager_stride(0), 64u);
  EXPECT_EQ(wire::eager_stride(32), 64u);
  EXPECT_EQ(wire::eager_stride(33), 128u);
  EXPECT_EQ(wire::eager_stride(4096), 4160u);
}

struct Slot {
  std::vector<uint8_t> bytes;
  explicit Slot(size_t max) : bytes(wire::eager_stride(max), 0) {}
  void* data() { return bytes.data(); }
};

TEST(EagerSlot, RoundTripAndZeroBytes) {
  Slot st(4096), ring(4096);
  std::string payload(1000, 'x');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 7);
  const size_t n = wire::encode_eager_slot(st.data(), 41, 9, 3, 17, payload.data(), 1000);
  EXPECT_EQ(n, wire::kEagerHeaderBytes + 1000);
  std::memcpy(ring.data(), st.data(), n);
  wire::EagerHeader h{};
  std::string why;
  ASSERT_EQ(wire::read_eager_slot(ring.data(), 41, 9, 4096, &h, &why), SlotRead::kReady) << why;
  EXPECT_EQ(h.size, 1000u);
  EXPECT_EQ(h.tag, 3);
  EXPECT_EQ(h.ordinal, 17u);
  EXPECT_EQ(h.head, 0u);
  EXPECT_EQ(0, std::memcmp(ring.bytes.data() + wire::kEagerHeaderBytes, payload.data(), 1000));
  // The sender's FIFO head rides along, low 16 bits.
  Slot hs(4096);
  wire::encode_eager_slot(hs.data(), 42, 9, 3, 18, payload.data(), 8, (uint64_t{5} << 16) + 77);
  ASSERT_EQ(wire::read_eager_slot(hs.data(), 42, 9, 4096, &h, &why), SlotRead::kReady) << why;
  EXPECT_EQ(h.head, 77u);
  EXPECT_EQ(wire::credit_of(uint64_t{5} << 16, h.head), (uint64_t{5} << 16) + 77);
  // Another counter is another message: not yet.
  EXPECT_EQ(wire::read_eager_slot(ring.data(), 42, 9, 4096, &h, &why), SlotRead::kNotYet);
  EXPECT_EQ(wire::read_eager_slot(ring.data(), 41 - 16, 9, 4096, &h, &why), SlotRead::kNotYet);
  // A 0-byte message is a header alone.
  Slot z(64);
  EXPECT_EQ(wire::encode_eager_slot(z.data(), 0, 1, 0, 0, nullptr, 0), wire::kEagerHeaderBytes);
  ASSERT_EQ(wire::read_eager_slot(z.data(), 0, 1, 64, &h, &why), SlotRead::kReady);
  EXPECT_EQ(h.size, 0u);
}

// A batch: several messages in one WRITE, each after the first with its own checked record.
struct Batch {
  Slot slot{4 * 4160};
  size_t end = 0;
  std::vector<std::string> payloads;
};

Batch make_batch(uint64_t counter, const std::vector<size_t>& sizes, uint64_t head = 0) {
  Batch b;
  for (size_t k = 0; k < sizes.size(); ++k) {
    std::string p(sizes[k], '\0');
    for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<char>(k * 31 + i * 7 + counter);
    b.payloads.push_back(p);
  }
  wire::put_eager_first(b.slot.data(), b.payloads[0].data(), static_cast<uint32_t>(sizes[0]));
  b.end = wire::kEagerHeaderBytes + sizes[0];
  for (size_t k = 1; k < sizes.size(); ++k) {
    b.end = wire::append_eager_record(b.slot.data(), b.end, counter + k,
                                      static_cast<int32_t>(k + 10), static_cast<uint32_t>(k + 100),
                                      b.payloads[k].data(), static_cast<uint32_t>(sizes[k]));
  }
  wire::seal_eager_slot(b.slot.data(), counter, 3, 10, 100, static_cast<uint32_t>(sizes[0]),
                        static_cast<uint32_t>(sizes.size() - 1), head);
  return b;
}

TEST(EagerBatch, RoundTripOfMessagesOfEverySizeIncludingZero) {
  const std::vector<size_t> sizes = {7, 0, 1, 100, 0, 4096, 9};
  Batch b = make_batch(77, sizes, 1234);
  EXPECT_EQ(wire::eager_slot_bytes(b.slot.data()), b.end);
  wire::EagerHeader h{};
  std::string why;
  ASSERT_EQ(wire::read_eager_slot(b.slot.data(), 77, 3, 4096, &h, &why), SlotRead::kReady) << why;
  EXPECT_EQ(wire::eager_more(h), sizes.size() - 1);
  EXPECT_EQ(h.head, 1234u);
  wire::EagerPart parts[wire::kEagerMaxMore + 1];
  int n = 0;
  ASSERT_EQ(wire::read_eager_batch(b.slot.data(), h, b.slot.bytes.size(), 4096, parts, &n, &why),
            SlotRead::kReady)
      << why;
  ASSERT_EQ(n, static_cast<int>(sizes.size()));
  for (int k = 0; k < n; ++k) {
    EXPECT_EQ(parts[k].size, sizes[k]) << k;
    EXPECT_EQ(parts[k].tag, k + 10) << k;
    EXPECT_EQ(parts[k].ordinal, static_cast<uint32_t>(k + 100)) << k;
    EXPECT_EQ(parts[k].at % 8, 0u) << k;
    EXPECT_EQ(0, std::memcmp(b.slot.bytes.data() + parts[k].at, b.payloads[k].data(), sizes[k]))
        << k;
  }
  // A batch of one is the plain slot, byte for byte.
  Batch one = make_batch(5, {40});
  Slot plain(4 * 4160);
  std::string p40 = one.payloads[0];
  wire::encode_eager_slot(plain.data(), 5, 3, 10, 100, p40.data(), 40);
  EXPECT_EQ(0, std::memcmp(one.slot.data(), plain.data(), wire::kEagerHeaderBytes + 40));
  ASSERT_EQ(wire::read_eager_slot(one.slot.data(), 5, 3, 4096, &h, &why), SlotRead::kReady);
  EXPECT_EQ(wire::eager_more(h), 0u);
  EXPECT_EQ(h.size, 40u);
}

// carry: as eager_poll reads it, the header and the records found checking at one poll are not
// checked again at the next (read_eager_batch's *checked).
void landing_in_any_order(const Batch& old_b, const Batch& new_b, bool carry) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<size_t> order(new_b.end);
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    if (trial == 1) std::reverse(order.begin(), order.end());
    if (trial > 1) std::shuffle(order.begin(), order.end(), rng);
    Slot ring = old_b.slot;
    bool header_known = false;
    uint32_t checked = 0;
    for (size_t k = 0; k <= order.size(); ++k) {
      wire::EagerHeader h{};
      wire::EagerPart parts[wire::kEagerMaxMore + 1];
      int got = 0;
      SlotRead r = SlotRead::kReady;
      if (header_known)
        std::memcpy(&h, ring.data(), sizeof h);
      else
        r = wire::read_eager_slot(ring.data(), 21, 3, 4096, &h, nullptr);
      if (r == SlotRead::kReady && wire::eager_more(h) != 0) {
        uint32_t c = checked;
        r = wire::read_eager_batch(ring.data(), h, ring.bytes.size(), 4096, parts, &got, nullptr,
                                   carry ? &c : nullptr);
        if (carry) {
          ASSERT_GE(c, checked);
          header_known = true;
          checked = c;
        }
      }
      bool all_in = true;
      for (size_t j = k; j < order.size(); ++j)
        if (ring.bytes[order[j]] != new_b.slot.bytes[order[j]]) all_in = false;
      if (!all_in) {
        ASSERT_EQ(r, SlotRead::kNotYet) << "trial " << trial << " byte " << k;
      } else {
        ASSERT_EQ(r, SlotRead::kReady) << "trial " << trial << " byte " << k;
        ASSERT_EQ(got, 5);
      }
      if (k < order.size()) ring.bytes[order[k]] = new_b.slot.bytes[order[k]];
    }
  }
}

// Every prefix of every byte order of a batch landing over an older one reads as "not yet" until
// every byte is in: the header may land first, and a record's size is not trusted before its CRC.
TEST(EagerBatch, ABatchStillLandingInAnyOrderIsNotYet) {
  // Over an older batch of another layout, and over one of the same layout (its records lie where
  // the new ones go, and check as they stand: only the counter in their CRC tells them apart).
  for (bool same : {false, true}) {
    SCOPED_TRACE(same ? "same layout" : "other layout");
    const Batch old_b = same ? make_batch(5, {8, 200, 0, 16, 64}) : make_batch(5, {300, 8, 8, 500});
    const Batch new_b = make_batch(5 + 16, {8, 200, 0, 16, 64});
    for (bool carry : {false, true}) {
      SCOPED_TRACE(carry ? "checked records carried from poll to poll" : "every poll from scratch");
      landing_in_any_order(old_b, new_b, carry);
    }
  }
}

// What checked at one poll is not checked again: a record changed after it checked (what its
// writer never does) still reads as it was taken, and the count moves only past records that check.
TEST(EagerBatch, RecordsThatCheckedAreNotCheckedAgain) {
  Batch b = make_batch(40, {8, 100, 200, 300});
  wire::EagerHeader h{};
  std::string why;
  ASSERT_EQ(wire::read_eager_slot(b.slot.data(), 40, 3, 4096, &h, &why), SlotRead::kReady);
  wire::EagerPart parts[wire::kEagerMaxMore + 1];
  int n = 0;
  // The last record not landed yet: two of three check.
  Slot ring = b.slot;
  const wire::EagerPart last = [&] {
    int m = 0;
    wire::EagerPart ps[wire::kEagerMaxMore + 1];
    EXPECT_EQ(wire::read_eager_batch(b.slot.data(), h, b.slot.bytes.size(), 4096, ps, &m, &why),
              SlotRead::kReady);
    return ps[3];
  }();
  ring.bytes[last.at + 5] ^= 0x5a;
  uint32_t checked = 0;
  EXPECT_EQ(
      wire::read_eager_batch(ring.data(), h, ring.bytes.size(), 4096, parts, &n, &why, &checked),
      SlotRead::kNotYet);
  EXPECT_EQ(checked, 2u);
  // The first record's payload changes: read without its CRC it is taken; from scratch it is not.
  ring.bytes[last.at + 5] ^= 0x5a;
  ring.bytes[wire::kEagerHeaderBytes + 8 + wire::kEagerRecordBytes + 3] ^= 0x11;
  EXPECT_EQ(wire::read_eager_batch(ring.data(), h, ring.bytes.size(), 4096, parts, &n, &why),
            SlotRead::kNotYet);
  EXPECT_EQ(
      wire::read_eager_batch(ring.data(), h, ring.bytes.size(), 4096, parts, &n, &why, &checked),
      SlotRead::kReady);
  EXPECT_EQ(checked, 3u);
  ASSERT_EQ(n, 4);
  EXPECT_EQ(parts[3].size, 300u);
  EXPECT_EQ(parts[3].at, last.at);
}

TEST(EagerBatch, ABatchThatChecksButIsWrongIsCorrupt) {
  std::string why;
  wire::EagerHeader h{};
  wire::EagerPart parts[wire::kEagerMaxMore + 1];
  int n = 0;
  // A record above the receiver's limit (its CRC checks: the peer's error).
  Batch big = make_batch(9, {8, 300});
  ASSERT_EQ(wire::read_eager_slot(big.slot.data(), 9, 3, 256, &h, &why), SlotRead::kReady);
  EXPECT_EQ(wire::read_eager_batch(big.slot.data(), h, big.slot.bytes.size(), 256, parts, &n, &why),
            SlotRead::kCorrupt);
  EXPECT_NE(why.find("above the eager limit"), std::string::npos) << why;
  // A batch that would run past the ring's end.
  Batch b = make_batch(9, {8, 8, 100});
  ASSERT_EQ(wire::read_eager_slot(b.slot.data(), 9, 3, 4096, &h, &why), SlotRead::kReady);
  EXPECT_EQ(wire::read_eager_batch(b.slot.data(), h, 64, 4096, parts, &n, &why),
            SlotRead::kCorrupt);
  EXPECT_NE(why.find("past the ring"), std::string::npos) << why;
  // A header with kEagerMore and no count, or a bit no Sluice writes: corrupt at the header.
  for (uint32_t size :
       {wire::kEagerMore | 8u, wire::kEagerMore | 1u << 27 | 1u << 20 | 8u, 1u << 18 | 8u}) {
    Slot s(4160);
    wire::encode_eager_slot(s.data(), 4, 3, 0, 0, nullptr, 0);
    wire::EagerHeader x;
    std::memcpy(&x, s.data(), sizeof x);
    x.size = size;
    x.pcrc = wire::crc32c(0, s.bytes.data() + wire::kEagerHeaderBytes, size & 0xff);
    x.hcrc = wire::crc32c(0, &x, offsetof(wire::EagerHeader, hcrc));
    std::memcpy(s.data(), &x, sizeof x);
    EXPECT_EQ(wire::read_eager_slot(s.data(), 4, 3, 4096, &h, &why), SlotRead::kCorrupt) << size;
  }
}

// An ask is a header alone whose size has kEagerAsk and the asking send's size (saturated): ready
// whatever the ring's largest message, with no payload read.
TEST(EagerSlot, AnAskIsAHeaderAloneThatCarriesTheSendsSize) {
  Slot st(64), ring(64);
  std::memset(st.data(), 0x77, st.bytes.size());
  EXPECT_EQ(wire::encode_eager_ask(st.data(), 5, 2, 9, 123, 1 << 20, false, false),
            wire::kEagerHeaderBytes);
  std::memcpy(ring.data(), st.data(), wire::kEagerHeaderBytes);  // only the header is written
  ring.bytes[wire::kEagerHeaderBytes] = 0x33;                    // whatever lies after it
  wire::EagerHeader h{};
  std::string why;
  ASSERT_EQ(wire::read_eager_slot(ring.data(), 5, 2, 64, &h, &why), SlotRead::kReady) << why;
  EXPECT_EQ(h.size, wire::kEagerAsk | (1u << 20));
  EXPECT_EQ(h.tag, 9);
  EXPECT_EQ(h.ordinal, 123u);
  EXPECT_EQ(wire::read_eager_slot(ring.data(), 5, 3, 64, &h, &why), SlotRead::kCorrupt);
  // A send larger than 31 bits saturates; a 0-byte send asks too.
  wire::encode_eager_ask(ring.data(), 6, 2, 0, 0, size_t{1} << 40, false, true);
  ASSERT_EQ(wire::read_eager_slot(ring.data(), 6, 2, 64, &h, &why), SlotRead::kReady);
  EXPECT_EQ(h.size, wire::kEagerAsk | wire::kEagerAskLimit | wire::kEagerAskSize);
  wire::encode_eager_ask(ring.data(), 9, 2, -5, 0, 10, true, false);  // ask-all, any tag value
  ASSERT_EQ(wire::read_eager_slot(ring.data(), 9, 2, 64, &h, &why), SlotRead::kReady);
  EXPECT_EQ(h.size, wire::kEagerAsk | wire::kEagerAskAll | 10u);
  EXPECT_EQ(h.tag, -5);
  wire::encode_eager_ask(ring.data(), 7, 2, 0, 0, 0, false, false);
  ASSERT_EQ(wire::read_eager_slot(ring.data(), 7, 2, 64, &h, &why), SlotRead::kReady);
  EXPECT_EQ(h.size, wire::kEagerAsk);
  // A message (no ask bit) whose size is above the limit stays corrupt.
  Slot big(8192);
  wire::encode_eager_slot(big.data(), 8, 2, 0, 0, big.bytes.data() + 4096, 100);
  EXPECT_EQ(wire::read_eager_slot(big.data(), 8, 2, 64, &h, &why), SlotRead::kCorrupt);
}

TEST(EagerSlot, AZeroedSlotIsNeverMessageZero) {
  Slot ring(4096);
  wire::EagerHeader h{};
  EXPECT_EQ(wire::read_eager_slot(ring.data(), 0, 0, 4096, &h, nullptr), SlotRead::kNotYet);
}

// Every prefix of every byte order of the WRITE landing over the previous message reads as "not
// yet" until the last byte is in; then ready.
TEST(EagerSlot, ASlotStillLandingInAnyOrderIsNotYet) {
  const size_t max = 256;
  Slot old_slot(max), new_slot(max);
  std::string a(200, 'a'), b(200, 'b');
  wire::encode_eager_slot(old_slot.data(), 5, 2, 1, 1, a.data(), 200);
  const size_t n = wire::encode_eager_slot(new_slot.data(), 5 + 16, 2, 1, 2, b.data(), 200);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = i;
    if (trial == 1) std::reverse(order.begin(), order.end());
    if (trial > 1) std::shuffle(order.begin(), order.end(), rng);
    Slot ring = old_slot;
    wire::EagerHeader h{};
    for (size_t k = 0; k < n; ++k) {
      // Before byte k lands.
      const SlotRead r = wire::read_eager_slot(ring.data(), 21, 2, max, &h, nullptr);
      // Only when every differing byte is in may it read ready.
      bool all_in = true;
      for (size_t j = k; j < n; ++j)
        if (ring.bytes[order[j]] != new_slot.bytes[order[j]]) all_in = false;
      if (!all_in) {
        ASSERT_EQ(r, SlotRead::kNotYet) << "trial " << trial << " byte " << k;
      }
      ring.bytes[order[k]] = new_slot.bytes[order[k]];
    }
    ASSERT_EQ(wire::read_eager_slot(ring.data(), 21, 2, max, &h, nullptr), SlotRead::kReady);
  }
}

TEST(EagerSlot, AHeaderThatChecksButIsWrongIsCorrupt) {
  const size_t max = 128;
  Slot s(1024);
  wire::EagerHeader h{};
  std::string why;
  // Larger than the receiver's limit (the sender's header checks: a peer's error).
  std::string big(200, 'q');
  wire::encode_eager_slot(s.data(), 3, 1, 0, 0, big.data(), 200);
  EXPECT_EQ(wire::read_eager_slot(s.data(), 3, 1, max, &h, &why), SlotRead::kCorrupt);
  EXPECT_NE(why.find("above the eager limit"), std::string::npos) << why;
  // Any tag value reads (the receiver's book judges whether it numbers it).
  wire::encode_eager_slot(s.data(), 3, 1, 1 << 20, 0, big.data(), 10);
  ASSERT_EQ(wire::read_eager_slot(s.data(), 3, 1, max, &h, &why), SlotRead::kReady);
  EXPECT_EQ(h.tag, 1 << 20);
  // Another grant: a ring lent before to another comm.
  wire::encode_eager_slot(s.data(), 3, 7, 0, 0, big.data(), 10);
  EXPECT_EQ(wire::read_eager_slot(s.data(), 3, 1, max, &h, &why), SlotRead::kCorrupt);
  EXPECT_NE(why.find("grant 7"), std::string::npos) << why;
  // A payload byte changed after the header: not yet (it is still landing, as far as anyone can
  // tell), never ready with the wrong bytes.
  wire::encode_eager_slot(s.data(), 3, 1, 0, 0, big.data(), 10);
  s.bytes[wire::kEagerHeaderBytes + 4] ^= 1;
  EXPECT_EQ(wire::read_eager_slot(s.data(), 3, 1, max, &h, &why), SlotRead::kNotYet);
}

TEST(EagerGrant, RoundTripAndRefusals) {
  wire::EagerGrant g{}, out{};
  std::string why;
  EXPECT_EQ(wire::read_grant(&g, &out, &why), SlotRead::kNotYet);  // not written yet
  wire::encode_grant(&g, 0x7000, 0x55, 3, 4096, 16);
  ASSERT_EQ(wire::read_grant(&g, &out, &why), SlotRead::kReady) << why;
  EXPECT_EQ(out.ring_addr, 0x7000u);
  EXPECT_EQ(out.slots, 16u);
  EXPECT_EQ(size_t{out.stride64} * 64, wire::eager_stride(4096));
  // Slot addresses: counter modulo the slots, times the stride; the ring is reused in turn.
  const uint64_t stride = wire::eager_stride(4096);
  EXPECT_EQ(wire::ring_slot_addr(out, 0), 0x7000u);
  EXPECT_EQ(wire::ring_slot_addr(out, 5), 0x7000u + 5 * stride);
  EXPECT_EQ(wire::ring_slot_addr(out, 16), 0x7000u);
  EXPECT_EQ(wire::ring_slot_addr(out, (uint64_t{1} << 40) + 17), 0x7000u + stride);
  // Still landing: the CRC does not check yet.
  wire::EagerGrant half = g;
  half.rkey = 0;
  EXPECT_EQ(wire::read_grant(&half, &out, &why), SlotRead::kNotYet);
  for (uint32_t slots : {3u, 12u, 128u}) {
    wire::encode_grant(&g, 0x7000, 0x55, 3, 4096, slots);
    EXPECT_EQ(wire::read_grant(&g, &out, &why), SlotRead::kCorrupt) << slots;
    EXPECT_NE(why.find("slots"), std::string::npos) << why;
  }
  wire::encode_grant(&g, 0x7000, 0x55, 3, wire::kEagerMaxBytes + 1, 16);
  EXPECT_EQ(wire::read_grant(&g, &out, &why), SlotRead::kCorrupt);
  wire::encode_grant(&g, 0, 0x55, 3, 4096, 16);
  EXPECT_EQ(wire::read_grant(&g, &out, &why), SlotRead::kCorrupt);
}

// A fused comm's grant names the ring's key on each of the receiver's members; the CRC covers
// them, so keys that land after `ready` read as "not yet". A one-path grant is the older format.
TEST(EagerGrant, MemberKeysFollowTheBlockAndAreCovered) {
  wire::EagerGrant g{}, out{};
  std::string why;
  wire::encode_grant(&g, 0x7000, 0x55, 3, 4096, 16);
  EXPECT_EQ(g.nkeys, 0u);
  for (uint32_t k : g.keys) EXPECT_EQ(k, 0u);
  ASSERT_EQ(wire::read_grant(&g, &out, &why), SlotRead::kReady) << why;
  EXPECT_EQ(wire::grant_rkey(out, 0), 0x55u);
  EXPECT_EQ(wire::grant_rkey(out, 1), 0u) << "a one-path grant keys no other member";
  const uint32_t more[3] = {0x66, 0x77, 0x88};
  wire::encode_grant(&g, 0x7000, 0x55, 3, 4096, 16, more, 2);
  ASSERT_EQ(wire::read_grant(&g, &out, &why), SlotRead::kReady) << why;
  EXPECT_EQ(out.nkeys, 2u);
  EXPECT_EQ(wire::grant_rkey(out, 0), 0x55u);
  EXPECT_EQ(wire::grant_rkey(out, 1), 0x66u);
  EXPECT_EQ(wire::grant_rkey(out, 2), 0x77u);
  EXPECT_EQ(wire::grant_rkey(out, 3), 0u);
  EXPECT_EQ(wire::grant_rkey(out, -1), 0u);
  // A key still landing (after `ready`): not yet, never a wrong key.
  wire::EagerGrant half = g;
  half.keys[1] = 0;
  EXPECT_EQ(wire::read_grant(&half, &out, &why), SlotRead::kNotYet);
  half = g;
  half.keys[0] = 0x67;
  EXPECT_EQ(wire::read_grant(&half, &out, &why), SlotRead::kNotYet);
  // A block that checks with a zero key, or more keys than members: corrupt.
  const uint32_t zero[2] = {0x66, 0};
  wire::encode_grant(&g, 0x7000, 0x55, 3, 4096, 16, zero, 2);
  EXPECT_EQ(wire::read_grant(&g, &out, &why), SlotRead::kCorrupt);
  EXPECT_NE(why.find("member 2"), std::string::npos) << why;
  wire::encode_grant(&g, 0x7000, 0x55, 3, 4096, 16, more, 3);
  g.nkeys = 4;
  g.crc = wire::crc32c(wire::crc32c(0, &g, 28), g.keys, 3 * sizeof g.keys[0]);
  EXPECT_EQ(wire::read_grant(&g, &out, &why), SlotRead::kCorrupt);
  EXPECT_NE(why.find("4 more member keys"), std::string::npos) << why;
}

TEST(EagerCredit, SixteenBitsNameTheLimitWithinTheWindow) {
  EXPECT_EQ(wire::credit_of(0, 16), 16u);
  EXPECT_EQ(wire::credit_of(65530, static_cast<uint16_t>(65530 + 16)), 65546u);
  EXPECT_EQ(wire::credit_of(uint64_t{1} << 40, 8), (uint64_t{1} << 40) + 8);
  EXPECT_EQ(wire::credit_of(100, 100), 100u);
}

}  // namespace
