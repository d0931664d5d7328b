// The data path's reading of peer-written memory (core/src/base/cts_match.cc), without verbs: the
// clear-to-send snapshot taken once per slot, matching against it, the completion-record and
// immediate checks, and the lane layout of both split modes.
#include "../../core/src/base/cts_match.h"

#include <gtest/gtest.h>

#include <cstring>

namespace {

using namespace sluice;

wire::CtsEntry entry(int32_t tag, uint32_t size, uint8_t nreqs, uint8_t index, uint64_t seq) {
  wire::CtsEntry e{};
  e.addr = 0x10000 + index * 0x1000;
  e.rkey = 0x77;
  e.size = size;
  e.tag = tag;
  e.nreqs = nreqs;
  e.index = index;
  e.seq = seq;
  return e;
}

TEST(CtsSnapshot, UnpublishedSlotIsAgainAndPartialGroupToo) {
  wire::CtsEntry slot[wire::kEntriesPerSlot] = {};
  cts::Snapshot s;
  EXPECT_TRUE(cts::take_snapshot(slot, 1, &s).is_again());
  slot[0] = entry(5, 64, 2, 0, 1);
  EXPECT_TRUE(cts::take_snapshot(slot, 1, &s).is_again()) << "entry 1 not written yet";
  slot[1] = entry(6, 64, 2, 1, 1);
  ASSERT_TRUE(cts::take_snapshot(slot, 1, &s).is_ok());
  EXPECT_EQ(s.nreqs, 2);
  EXPECT_EQ(s.seq, 1u);
}

TEST(CtsSnapshot, CorruptCountOrIndexIsARemoteErrorNamingIt) {
  wire::CtsEntry slot[wire::kEntriesPerSlot] = {};
  cts::Snapshot s;
  for (int bad : {0, 9, 255}) {
    slot[0] = entry(1, 8, static_cast<uint8_t>(bad), 0, 3);
    Status st = cts::take_snapshot(slot, 3, &s);
    EXPECT_EQ(st.code(), Code::kRemoteError);
    EXPECT_NE(st.message().find(std::to_string(bad) + " receives"), std::string::npos)
        << st.message();
  }
  slot[0] = entry(1, 8, 2, 0, 3);
  slot[1] = entry(2, 8, 2, 0, 3);  // says index 0 in position 1
  EXPECT_EQ(cts::take_snapshot(slot, 3, &s).code(), Code::kRemoteError);
  slot[1] = entry(2, 8, 3, 1, 3);  // disagrees on the count
  EXPECT_EQ(cts::take_snapshot(slot, 3, &s).code(), Code::kRemoteError);
}

// Entry 0 of a slot holds either the receive the sender waits for or the slot's previous use (not
// yet published: again). Any other seq is a misbehaving peer: an error naming both, never a wait.
TEST(CtsSnapshot, WrongSeqInEntryZeroIsARemoteErrorNotAWait) {
  wire::CtsEntry slot[wire::kEntriesPerSlot] = {};
  cts::Snapshot s;
  const uint64_t want = 3 * wire::kFifoSlots + 5;
  slot[0] = entry(1, 8, 1, 0, want - wire::kFifoSlots);  // the previous use: not published yet
  EXPECT_TRUE(cts::take_snapshot(slot, want, &s).is_again());
  for (uint64_t bad : {want + 1, want - 1, want + wire::kFifoSlots, uint64_t{0}, ~uint64_t{0}}) {
    slot[0] = entry(1, 8, 1, 0, bad);
    Status st = cts::take_snapshot(slot, want, &s);
    EXPECT_EQ(st.code(), Code::kRemoteError) << bad;
    EXPECT_NE(
        st.message().find("seq " + std::to_string(bad) + ", expected " + std::to_string(want)),
        std::string::npos)
        << st.message();
    EXPECT_EQ(s.seq, 0u);
  }
  // A fresh FIFO is zero: the first kFifoSlots receives wait on seq 0, and fail on anything else.
  wire::CtsEntry fresh[wire::kEntriesPerSlot] = {};
  EXPECT_TRUE(cts::take_snapshot(fresh, 1, &s).is_again());
  EXPECT_TRUE(cts::take_snapshot(fresh, wire::kFifoSlots, &s).is_again());
  fresh[0] = entry(1, 8, 1, 0, 7);
  EXPECT_EQ(cts::take_snapshot(fresh, 2, &s).code(), Code::kRemoteError);
  // Entries after the first may hold any older seq (a smaller group used the slot before): again.
  slot[0] = entry(1, 8, 2, 0, want);
  slot[1] = entry(2, 8, 1, 0, 17);
  EXPECT_TRUE(cts::take_snapshot(slot, want, &s).is_again());
}

// The peer rewrites the slot after the snapshot (the bug of issue 9: nreqs shrinking while the
// slot is half matched). Matching uses the snapshot only, so the rewrite changes nothing.
TEST(CtsSnapshot, RewriteAfterSnapshotDoesNotReachMatching) {
  wire::CtsEntry slot[wire::kEntriesPerSlot] = {};
  for (uint8_t i = 0; i < 4; ++i) slot[i] = entry(100 + i, 4096, 4, i, 9);
  cts::Snapshot s;
  ASSERT_TRUE(cts::take_snapshot(slot, 9, &s).is_ok());
  uint8_t matched = 0;
  cts::Match m = cts::match(s, matched, 100, 10);
  ASSERT_EQ(m.kind, cts::Match::kMatched);
  matched |= 1u << m.index;
  for (auto& e : slot) e = entry(-1, 0, 1, 0, 9);  // hostile rewrite: one tiny entry
  for (int tag : {103, 101, 102}) {
    m = cts::match(s, matched, tag, 4096);
    ASSERT_EQ(m.kind, cts::Match::kMatched) << tag;
    EXPECT_EQ(m.index, tag - 100);
    matched |= 1u << m.index;
  }
  EXPECT_EQ(matched, 0x0f);
}

TEST(CtsMatch, FirstUnmatchedEntryWithTheTagAndSizeChecks) {
  wire::CtsEntry slot[wire::kEntriesPerSlot] = {};
  slot[0] = entry(7, 100, 3, 0, 1);
  slot[1] = entry(7, 50, 3, 1, 1);
  slot[2] = entry(8, 0, 3, 2, 1);
  cts::Snapshot s;
  ASSERT_TRUE(cts::take_snapshot(slot, 1, &s).is_ok());
  EXPECT_EQ(cts::match(s, 0, 9, 1).kind, cts::Match::kLater);
  cts::Match m = cts::match(s, 0, 7, 100);
  EXPECT_EQ(m.kind, cts::Match::kMatched);
  EXPECT_EQ(m.index, 0);
  m = cts::match(s, 0x1, 7, 51);
  EXPECT_EQ(m.kind, cts::Match::kTooLarge);
  EXPECT_EQ(m.index, 1);
  EXPECT_EQ(cts::match(s, 0x3, 7, 1).kind, cts::Match::kLater) << "both tag-7 entries taken";
  EXPECT_EQ(cts::match(s, 0, 8, 0).kind, cts::Match::kMatched);
  EXPECT_EQ(cts::match(s, 0, 8, 1).kind, cts::Match::kTooLarge);
}

TEST(DoneRecord, ChecksSequenceStatusAndSizes) {
  const size_t posted[3] = {100, 200, 300};
  const int tags[3] = {1, 2, 3};
  size_t got[3] = {};
  wire::DoneRecord rec{};
  rec.sizes[0] = 100;
  rec.sizes[1] = 0;
  rec.sizes[2] = 299;
  rec.seq = 41;
  ASSERT_TRUE(cts::check_record(rec, 40, 3, posted, tags, got).is_ok());
  EXPECT_EQ(got[0], 100u);
  EXPECT_EQ(got[1], 0u);
  EXPECT_EQ(got[2], 299u);
  EXPECT_EQ(cts::check_record(rec, 41, 3, posted, tags, got).code(), Code::kRemoteError);
  rec.sizes[2] = 301;
  EXPECT_EQ(cts::check_record(rec, 40, 3, posted, tags, got).code(), Code::kRemoteError);
  rec.status = 7;
  EXPECT_EQ(cts::check_record(rec, 40, 3, posted, tags, got).code(), Code::kRemoteError);
  rec.status = wire::kRecordTooLarge;
  rec.bad_index = 1;
  rec.sizes[1] = 5000;
  Status st = cts::check_record(rec, 40, 3, posted, tags, got);
  EXPECT_EQ(st.code(), Code::kInvalidUsage);
  EXPECT_NE(st.message().find("5000 bytes into receive buffer 1 (tag 2) of only 200"),
            std::string::npos)
      << st.message();
  rec.bad_index = 3;  // outside the group: the peer is confused, not the user
  EXPECT_EQ(cts::check_record(rec, 40, 3, posted, tags, got).code(), Code::kRemoteError);
  // A send over maxP2pBytes refused by the sender: the record names the size and the limit.
  rec.status = wire::kRecordOverLimit;
  rec.bad_index = 2;
  rec.sizes[2] = static_cast<uint32_t>(wire::kMaxMessageBytes + 1);
  st = cts::check_record(rec, 40, 3, posted, tags, got);
  EXPECT_EQ(st.code(), Code::kInvalidUsage);
  EXPECT_NE(st.message().find(std::to_string(wire::kMaxMessageBytes + 1) +
                              " bytes into receive buffer 2 (tag 3)"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("maxP2pBytes = " + std::to_string(wire::kMaxMessageBytes)),
            std::string::npos)
      << st.message();
  rec.sizes[2] = UINT32_MAX;  // saturated: "or more"
  EXPECT_NE(cts::check_record(rec, 40, 3, posted, tags, got).message().find("or more"),
            std::string::npos);
  rec.bad_index = 3;
  EXPECT_EQ(cts::check_record(rec, 40, 3, posted, tags, got).code(), Code::kRemoteError);
}

TEST(DoneRecord, Immediates) {
  bool rec = false;
  size_t got = 0;
  ASSERT_TRUE(cts::check_imm(8, 8, &rec, &got).is_ok());
  EXPECT_FALSE(rec);
  EXPECT_EQ(got, 8u);
  EXPECT_EQ(cts::check_imm(9, 8, &rec, &got).code(), Code::kRemoteError);
  ASSERT_TRUE(cts::check_imm(wire::kImmRecord | 3, 0, &rec, &got).is_ok());
  EXPECT_TRUE(rec);
}

TEST(Lanes, WholeMessagesRoundRobinOrSplitIn128ByteChunks) {
  // Whole messages: one lane, on QP seq % nqps, for both sides.
  EXPECT_EQ(cts::lanes(false, 4), 1);
  for (uint64_t seq = 0; seq < 8; ++seq) EXPECT_EQ(cts::qp_of_lane(false, 4, seq, 0), seq % 4);
  EXPECT_EQ(cts::chunk_of(1000, 1), 1000u);
  const size_t one[1] = {8};
  EXPECT_EQ(cts::group_wrs(one, 1, 0, 1), 1u) << "an 8-byte message is one WRITE_WITH_IMM";
  // Split: every QP is a lane; an 8-byte message has bytes on lane 0 only, the others only close.
  EXPECT_EQ(cts::lanes(true, 4), 4);
  EXPECT_EQ(cts::qp_of_lane(true, 4, 5, 2), 2);
  EXPECT_EQ(cts::chunk_of(8, 4), 128u);
  EXPECT_EQ(cts::chunk_of(1000, 4), 256u);
  uint32_t total = 0;
  for (int lane = 0; lane < 4; ++lane) total += cts::group_wrs(one, 1, lane, 4);
  EXPECT_EQ(total, 4u);
  const size_t group[3] = {0, 300, 1000};
  EXPECT_EQ(cts::group_wrs(group, 3, 0, 4), 3u);  // two WRITEs + the record's WRITE_WITH_IMM
  EXPECT_EQ(cts::group_wrs(group, 3, 3, 4), 2u);  // only the 1000-byte message reaches lane 3
}

}  // namespace
