// The data path's reading of peer-written memory (core/src/base/cts_match.cc), without verbs: the
// clear-to-send snapshot taken once per slot, matching against it, the completion-record and
// immediate checks, and the lane layout of both split modes.
#include "../../core/src/rules/cts_match.h"

#include <gtest/gtest.h>

#include <algorithm>
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

// A fused comm's slot: entry i is the cell pair [2i] (wire::CtsMembers) and [2i + 1] (the entry).
void put_fused(wire::CtsEntry* cells, int i, const wire::CtsEntry& e, const wire::CtsMembers& x) {
  std::memcpy(&cells[2 * i], &x, sizeof x);
  cells[2 * i + 1] = e;
}

wire::CtsMembers members_cell(uint32_t rkey0, uint32_t rkey1, uint32_t paths) {
  wire::CtsMembers x{};
  x.rkey[0] = rkey0;
  x.rkey[1] = rkey1;
  x.paths = paths;
  return x;
}

TEST(CtsSnapshotFused, PairsGiveEachEntrysMemberKeysAndTheReceivesPaths) {
  wire::CtsEntry cells[2 * wire::kEntriesPerSlot] = {};
  cts::Snapshot s;
  EXPECT_TRUE(cts::take_snapshot_fused(cells, 1, 2, 2, &s).is_again());
  put_fused(cells, 0, entry(5, 64, 2, 0, 1), members_cell(0x77, 50, 3));
  EXPECT_TRUE(cts::take_snapshot_fused(cells, 1, 2, 2, &s).is_again()) << "entry 1 not written";
  put_fused(cells, 1, entry(6, 128, 2, 1, 1), members_cell(0x77, 60, 3));
  ASSERT_TRUE(cts::take_snapshot_fused(cells, 1, 2, 2, &s).is_ok());
  EXPECT_EQ(s.nreqs, 2);
  EXPECT_EQ(s.paths, 3u);
  EXPECT_EQ(s.e[1].size, 128u);
  EXPECT_EQ(s.x[0].rkey[1], 50u);
  EXPECT_EQ(s.x[1].rkey[1], 60u);
  // A one-path comm's snapshot of the same memory reads cells, not pairs: it must not be used.
  cts::Snapshot plain;
  EXPECT_FALSE(cts::take_snapshot(cells, 1, &plain).is_ok());
}

TEST(CtsSnapshotFused, BadPathsKeysOrReservedWordsAreRemoteErrors) {
  struct Case {
    const char* what;
    wire::CtsMembers x0, x1;
    int nrecv;
  };
  wire::CtsMembers reserved = members_cell(0x77, 60, 1);
  reserved.reserved[1] = 9;
  wire::CtsMembers extra = members_cell(0x77, 60, 1);
  extra.rkey[2] = 7;
  const Case cases[] = {
      {"empty mask", members_cell(0x77, 50, 0), members_cell(0x77, 60, 0), 2},
      {"path beyond npaths", members_cell(0x77, 50, 4), members_cell(0x77, 60, 4), 2},
      {"masks differ", members_cell(0x77, 50, 1), members_cell(0x77, 60, 2), 2},
      {"member-0 key differs", members_cell(0x77, 50, 1), members_cell(0x78, 60, 1), 2},
      {"reserved word", members_cell(0x77, 50, 1), reserved, 2},
      {"key on a member the receiver lacks", members_cell(0x77, 50, 1), extra, 2},
      {"key on member 1 of a one-member receiver", members_cell(0x77, 0, 1),
       members_cell(0x77, 60, 1), 1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    wire::CtsEntry cells[2 * wire::kEntriesPerSlot] = {};
    put_fused(cells, 0, entry(5, 64, 2, 0, 3), c.x0);
    put_fused(cells, 1, entry(6, 64, 2, 1, 3), c.x1);
    cts::Snapshot s;
    Status st = cts::take_snapshot_fused(cells, 3, 2, c.nrecv, &s);
    EXPECT_EQ(st.code(), Code::kRemoteError) << st.message();
    EXPECT_NE(st.message().find("clear-to-send"), std::string::npos) << st.message();
    EXPECT_EQ(s.seq, 0u) << "no snapshot held after a refusal";
  }
  wire::CtsEntry cells[2 * wire::kEntriesPerSlot] = {};
  cts::Snapshot s;
  EXPECT_EQ(cts::take_snapshot_fused(cells, 1, 1, 1, &s).code(), Code::kInternalError)
      << "one path is not a fused comm";
}

// Issue 31: with path-message set 2 a fused entry carries each path's share while it ramps back
// in; a set-1 comm (an older peer) refuses any, and a share must name a path of the mask, below
// 100 %, the same in every entry.
TEST(CtsSnapshotFused, RampSharesAreTakenWithSet2AndRefusedOtherwise) {
  const auto slot = [](uint32_t shares0, uint32_t shares1, uint32_t paths, wire::CtsEntry* cells) {
    wire::CtsMembers x0 = members_cell(0x77, 50, paths), x1 = members_cell(0x77, 60, paths);
    x0.shares = shares0;
    x1.shares = shares1;
    put_fused(cells, 0, entry(5, 64, 2, 0, 3), x0);
    put_fused(cells, 1, entry(6, 64, 2, 1, 3), x1);
  };
  {
    wire::CtsEntry cells[2 * wire::kEntriesPerSlot] = {};
    slot(25u << 8, 25u << 8, 3, cells);
    cts::Snapshot s;
    ASSERT_TRUE(cts::take_snapshot_fused(cells, 3, 2, 2, &s, true).is_ok());
    EXPECT_EQ(s.shares, 25u << 8);
    EXPECT_EQ(wire::share_pct_of(s.shares, 0), 100u);
    EXPECT_EQ(wire::share_pct_of(s.shares, 1), 25u);
    cts::Snapshot old;
    Status st = cts::take_snapshot_fused(cells, 3, 2, 2, &old, false);
    EXPECT_EQ(st.code(), Code::kRemoteError);
    EXPECT_NE(st.message().find("path-message set 1"), std::string::npos) << st.message();
  }
  struct Bad {
    const char* what;
    uint32_t s0, s1, paths;
  };
  for (const Bad& b : {Bad{"shares differ", 25u << 8, 50u << 8, 3},
                       Bad{"share outside the mask", 25u << 8, 25u << 8, 1},
                       Bad{"share of 100 % or more", 100u << 8, 100u << 8, 3}}) {
    SCOPED_TRACE(b.what);
    wire::CtsEntry cells[2 * wire::kEntriesPerSlot] = {};
    slot(b.s0, b.s1, b.paths, cells);
    cts::Snapshot s;
    EXPECT_EQ(cts::take_snapshot_fused(cells, 3, 2, 2, &s, true).code(), Code::kRemoteError);
  }
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

// Entry 0's seq read while the WRITE that publishes `want` lands over the previous use: each byte
// is the old one or the new one (a byte-wise copy; cts_match.cc mix_of). That is a wait, never a
// corrupt slot: the bed's fused comms failed on exactly these reads (13 for 269, 26 for 282, 0 for
// 256). A value with any byte of neither stays a remote error.
TEST(CtsSnapshot, HalfLandedSeqIsAWaitNotACorruptSlot) {
  wire::CtsEntry slot[wire::kEntriesPerSlot] = {};
  cts::Snapshot s;
  const struct {
    uint64_t want, seen;
  } torn[] = {{269, 13}, {282, 26}, {256, 0}, {256, 0x1e0}, {0x10000 + 5, 0x1ffe5}};
  for (const auto& t : torn) {
    slot[0] = entry(1, 8, 1, 0, t.seen);
    EXPECT_TRUE(cts::take_snapshot(slot, t.want, &s).is_again()) << t.seen << " for " << t.want;
    slot[0] = entry(1, 8, 1, 0, t.want);  // landed
    EXPECT_TRUE(cts::take_snapshot(slot, t.want, &s).is_ok()) << t.want;
  }
  // A fused slot (the comm that failed in the bed): the seq of the pair's entry cell.
  wire::CtsEntry cells[2 * wire::kEntriesPerSlot] = {};
  put_fused(cells, 0, entry(5, 64, 1, 0, 13), members_cell(0x77, 1, 1));
  EXPECT_TRUE(cts::take_snapshot_fused(cells, 269, 2, 2, &s).is_again());
  put_fused(cells, 0, entry(5, 64, 1, 0, 269), members_cell(0x77, 1, 1));
  EXPECT_TRUE(cts::take_snapshot_fused(cells, 269, 2, 2, &s).is_ok());
  // Not a mix of 237 and 269: a byte of neither.
  for (uint64_t bad : {uint64_t{14}, uint64_t{0x20d}, uint64_t{0x1ed} | (uint64_t{1} << 40)}) {
    slot[0] = entry(1, 8, 1, 0, bad);
    Status st = cts::take_snapshot(slot, 269, &s);
    EXPECT_EQ(st.code(), Code::kRemoteError) << bad;
    EXPECT_NE(st.message().find("seq " + std::to_string(bad)), std::string::npos) << st.message();
  }
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

// ---- Progress signals inside long chains (cts::plan_lane; health/progress.h) ------------------

namespace sluice {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// Checks what every chain must satisfy and returns its progress WRs: the last WR is the close
// (never a progress WR); the WRs cover each message's lane bytes exactly once, in order; no run
// between signals moves more than max(1 MiB, its largest WRITE); the tail and the runs of the
// progress WRs add up to the whole chain (what poll_send frees); the count is group_wrs().
int check_chain(const size_t* sizes, int n, int lane, int nlanes, size_t ar = SIZE_MAX) {
  cts::LaneWr w[cts::kMaxLaneWrs];
  uint32_t tail_w = 0;
  uint64_t tail_b = 0, seg = 0;
  const uint32_t nw = cts::plan_lane(sizes, n, lane, nlanes, ar, w, &tail_w, &tail_b, &seg);
  EXPECT_EQ(nw, cts::group_wrs(sizes, n, lane, nlanes, ar));
  EXPECT_LE(nw, cts::kMaxLaneWrs);
  EXPECT_FALSE(w[nw - 1].progress) << "the close is signaled as the message's own completion";
  int progress = 0;
  uint64_t run = 0, run_w = 0, freed_w = 0, freed_b = 0, biggest = 0, seg_seen = 0;
  size_t next_off[wire::kEntriesPerSlot] = {};
  for (int i = 0; i < n; ++i)
    next_off[i] = static_cast<size_t>(lane) * cts::chunk_of(sizes[i], nlanes);
  for (uint32_t k = 0; k < nw; ++k) {
    if (w[k].msg >= 0) {
      EXPECT_EQ(w[k].off, next_off[w[k].msg]) << "WR " << k << ": bytes in order, none skipped";
      next_off[w[k].msg] += w[k].len;
      EXPECT_GT(w[k].len, 0u);
      const size_t chunk = cts::chunk_of(sizes[w[k].msg], nlanes);
      const size_t len = std::min(chunk, sizes[w[k].msg] - static_cast<size_t>(lane) * chunk);
      EXPECT_LE(w[k].len, cts::piece_bytes(len)) << "WR " << k;
      EXPECT_LE(w[k].len,
                std::max(cts::kProgressChunk, len / cts::kMaxPieces + cts::kProgressChunk));
    } else {
      EXPECT_EQ(k, nw - 1) << "only the close has no message bytes";
      EXPECT_EQ(w[k].len, 0u);
    }
    run += w[k].len;
    ++run_w;
    biggest = std::max<uint64_t>(biggest, w[k].len);
    seg_seen = std::max(seg_seen, run);
    if (w[k].progress) {
      ++progress;
      freed_w += run_w;
      freed_b += run;
      run = run_w = 0;
    }
  }
  uint64_t lane_total = 0;
  for (int i = 0; i < n; ++i) {
    const size_t chunk = cts::chunk_of(sizes[i], nlanes);
    const size_t off = static_cast<size_t>(lane) * chunk;
    const size_t len = off < sizes[i] ? std::min(chunk, sizes[i] - off) : 0;
    EXPECT_EQ(next_off[i], off + len) << "message " << i << " fully covered";
    lane_total += len;
  }
  EXPECT_EQ(freed_b + tail_b, lane_total) << "the bytes freed add up to the lane's bytes";
  EXPECT_EQ(tail_w, run_w);
  EXPECT_EQ(tail_b, run);
  EXPECT_EQ(freed_w + tail_w, nw) << "the room freed adds up to the WRs posted";
  EXPECT_EQ(seg, seg_seen);
  EXPECT_LE(seg, std::max<uint64_t>(cts::kProgressChunk, biggest));
  return progress;
}

TEST(ProgressSignals, SmallMessagesKeepTheirChain) {
  // Up to 1 MiB on a lane: one WRITE (the close itself), no progress WR: the cost tests' counts.
  for (size_t sz : {size_t{0}, size_t{8}, size_t{4096}, size_t{65537}, kMiB}) {
    const size_t one[1] = {sz};
    EXPECT_EQ(cts::group_wrs(one, 1, 0, 1), 1u) << sz;
    EXPECT_EQ(check_chain(one, 1, 0, 1), 0) << sz;
  }
  // A group of small messages within 1 MiB: one WRITE each plus the record's close, no signal.
  const size_t group[4] = {8, 300 * 1024, 0, 700 * 1024};
  EXPECT_EQ(cts::group_wrs(group, 4, 0, 1), 4u);
  EXPECT_EQ(check_chain(group, 4, 0, 1), 0);
  // Adaptive routing's separate close adds its WR, no signal.
  const size_t big[1] = {kMiB};
  EXPECT_EQ(cts::group_wrs(big, 1, 0, 1, 8192), 2u);
  EXPECT_EQ(check_chain(big, 1, 0, 1, 8192), 0);
}

TEST(ProgressSignals, LongMessagesSignalEveryMiB) {
  EXPECT_EQ(cts::piece_bytes(kMiB + 1), kMiB);
  EXPECT_EQ(cts::pieces(kMiB + 1), 2u);
  EXPECT_EQ(cts::kMaxPieces, 7u);
  EXPECT_EQ(cts::pieces(7 * kMiB), 7u);
  // 7 MiB on one QP: 7 WRITEs of 1 MiB, the first 6 signaled, the 7th carries the immediate.
  const size_t m7[1] = {7 * kMiB};
  cts::LaneWr w[cts::kMaxLaneWrs];
  ASSERT_EQ(cts::plan_lane(m7, 1, 0, 1, SIZE_MAX, w), 7u);
  for (int k = 0; k < 7; ++k) {
    EXPECT_EQ(w[k].msg, 0);
    EXPECT_EQ(w[k].off, k * kMiB);
    EXPECT_EQ(w[k].len, kMiB);
    EXPECT_EQ(w[k].progress, k < 6) << k;
  }
  EXPECT_EQ(check_chain(m7, 1, 0, 1), 6);
  // With adaptive routing all 7 data WRITEs stay and a zero-length close follows: the 7th WRITE
  // is not signaled (its run ends at exactly 1 MiB with the close): 6 progress WRs again.
  EXPECT_EQ(cts::group_wrs(m7, 1, 0, 1, 8192), 8u);
  EXPECT_EQ(check_chain(m7, 1, 0, 1, 8192), 6);
  // Past kMaxPieces MiB the pieces grow in whole MiB: 16 MiB is 6 WRITEs of 3 MiB (the last 1).
  EXPECT_EQ(cts::piece_bytes(16 * kMiB), 3 * kMiB);
  EXPECT_EQ(cts::pieces(16 * kMiB), 6u);
  // 1 MiB + 1: two WRITEs (1 MiB signaled, then 1 byte with the immediate).
  const size_t odd[1] = {kMiB + 1};
  EXPECT_EQ(cts::group_wrs(odd, 1, 0, 1), 2u);
  EXPECT_EQ(check_chain(odd, 1, 0, 1), 1);
  // Split over 4 QPs: 16 MiB is 4 MiB per lane, four WRITEs, three progress WRs each.
  const size_t m16[1] = {16 * kMiB};
  for (int lane = 0; lane < 4; ++lane) {
    EXPECT_EQ(cts::group_wrs(m16, 1, lane, 4), 4u) << lane;
    EXPECT_EQ(check_chain(m16, 1, lane, 4), 3) << lane;
  }
  // 4 MiB split: 1 MiB per lane, one WRITE each, no signal (the small-message path per lane).
  const size_t m4[1] = {4 * kMiB};
  for (int lane = 0; lane < 4; ++lane) EXPECT_EQ(check_chain(m4, 1, lane, 4), 0) << lane;
}

TEST(ProgressSignals, GroupsSignalBeforeARunPassesOneMiB) {
  // 3 x 600 KiB on one lane: the first WRITE's run would pass 1 MiB with the second: signaled;
  // likewise the second; the third closes with the record's WRITE_WITH_IMM.
  const size_t g[3] = {600 * 1024, 600 * 1024, 600 * 1024};
  cts::LaneWr w[cts::kMaxLaneWrs];
  ASSERT_EQ(cts::plan_lane(g, 3, 0, 1, SIZE_MAX, w), 4u);
  EXPECT_TRUE(w[0].progress);
  EXPECT_TRUE(w[1].progress);
  EXPECT_FALSE(w[2].progress) << "its run (600 KiB) plus the close's 0 bytes stays under 1 MiB";
  EXPECT_EQ(w[3].msg, -1);
  EXPECT_EQ(check_chain(g, 3, 0, 1), 2);
  // Mixed: small ones ride along, long ones are cut; every run stays within 1 MiB.
  const size_t mix[5] = {8, 3 * kMiB + 5, 0, 512 * 1024, 2 * kMiB};
  check_chain(mix, 5, 0, 1);
  for (int lane = 0; lane < 4; ++lane) check_chain(mix, 5, lane, 4);
}

TEST(ProgressSignals, TheLargestGroupFitsTheSendQueue) {
  // Past 7 MiB on a lane a message keeps at most 7 WRITEs of whole MiB: 1 GiB (maxP2pBytes) ->
  // 147 MiB each.
  EXPECT_EQ(cts::piece_bytes(16 * kMiB + 1), 3 * kMiB);
  EXPECT_EQ(cts::pieces(16 * kMiB + 1), 6u);
  EXPECT_EQ(cts::piece_bytes(wire::kMaxMessageBytes), 147 * kMiB);
  EXPECT_EQ(cts::pieces(wire::kMaxMessageBytes), 7u);
  size_t g[wire::kEntriesPerSlot];
  for (size_t& x : g) x = wire::kMaxMessageBytes;
  EXPECT_EQ(cts::group_wrs(g, wire::kEntriesPerSlot, 0, 1), cts::kMaxLaneWrs);
  const int progress = check_chain(g, wire::kEntriesPerSlot, 0, 1);
  EXPECT_EQ(progress, wire::kEntriesPerSlot * 7) << "every 147 MiB WRITE is signaled";
  // Every size from 0 to 40 MiB in odd steps, alone and split: the invariants hold.
  for (size_t sz = 0; sz <= 40 * kMiB; sz += 777 * 1024 + 13) {
    const size_t one[1] = {sz};
    check_chain(one, 1, 0, 1);
    check_chain(one, 1, 0, 1, 8192);
    for (int lane = 0; lane < 4; ++lane) check_chain(one, 1, lane, 4);
  }
}

}  // namespace
}  // namespace sluice
