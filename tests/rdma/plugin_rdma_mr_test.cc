// The registration cache cannot go stale (label rdma; part of the plugin_rdma_test binary).
//
// Two buffers whose page-rounded ranges overlap are registered; the first is deregistered and the
// pages only it covered are unmapped and mapped again (new physical pages at the same virtual
// address). A registration of the new memory must be pinned to the new pages: the NIC writes a
// message into it and the CPU must read exactly the sender's bytes. A cache that registered the
// union of the two ranges (or reused any MR over pages no live registration holds) hands out an MR
// pinned to the old pages, and the NIC's write lands where nobody reads: silent corruption.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "plugin_bed.h"

namespace nettest {
namespace {

TEST(Registration, NoStaleMrAfterOverlappingRegistrationIsReleased) {
  REQUIRE_BED();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  Conn c;
  ASSERT_TRUE(open_conn(net(), bed().dev_a, bed().dev_b, &c));

  // Three pages: A covers page 0 and half of page 1; B covers the rest of page 1 and page 2.
  auto* region = static_cast<uint8_t*>(
      mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(region, MAP_FAILED);
  std::memset(region, 0x11, 3 * page);
  uint8_t* a = region;
  const size_t a_len = page + page / 2;
  uint8_t* b = region + a_len;
  const size_t b_len = 3 * page - a_len;
  const int mrs0 = rdma_resource_count("mr");
  ASSERT_GE(mrs0, 0) << "`rdma resource show mr` failed (iproute2's rdma tool is needed)";
  void* mh_a = nullptr;
  void* mh_b = nullptr;
  ASSERT_EQ(net().reg_mr(c.recv, a, a_len, &mh_a), ncclSuccess) << last_warn();
  ASSERT_EQ(net().reg_mr(c.recv, b, b_len, &mh_b), ncclSuccess) << last_warn();
  EXPECT_NE(mh_a, mh_b);
  // B is not inside A's pages, so it has an MR of its own (and nothing registers the union).
  EXPECT_EQ(rdma_resource_count("mr"), mrs0 + 2);

  // Release A, then replace page 0 (only A covered it) with new memory at the same address.
  ASSERT_EQ(net().dereg_mr(c.recv, mh_a), ncclSuccess);
  EXPECT_EQ(rdma_resource_count("mr"), mrs0 + 1) << "A's MR is gone once A is deregistered";
  ASSERT_EQ(munmap(region, page), 0);
  void* again = mmap(region, page, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  ASSERT_EQ(again, static_cast<void*>(region)) << "could not map new memory at the old address";
  std::memset(region, 0, page);

  // Register the new page and receive into it through the NIC.
  void* mh_new = nullptr;
  ASSERT_EQ(net().reg_mr(c.recv, region, page, &mh_new), ncclSuccess) << last_warn();
  RegBuf sbuf;
  ASSERT_TRUE(sbuf.allocate(&net(), c.send, page));
  fill_pattern(sbuf.data(), page, 0x57a1e);
  void* rreq = nullptr;
  void* sreq = nullptr;
  void* rdata = region;
  size_t cap = page;
  int tag = 9;
  ASSERT_TRUE(post_until("irecv", &rreq, [&](void** req) {
    return net().irecv(c.recv, 1, &rdata, &cap, &tag, &mh_new, req);
  }));
  ASSERT_TRUE(post_until("isend", &sreq, [&](void** req) {
    return net().isend(c.send, sbuf.data(), page, tag, sbuf.mh(), req);
  }));
  ASSERT_TRUE(wait_done(net(), "send", sreq, nullptr));
  ASSERT_TRUE(wait_done(net(), "recv", rreq, nullptr));
  // What the CPU reads at the new page is what was sent.
  EXPECT_EQ(check_pattern(region, page, 0x57a1e), "");
  // B's memory was not touched.
  EXPECT_EQ(check_fill(b, b_len, 0x11), "");

  EXPECT_EQ(net().dereg_mr(c.recv, mh_new), ncclSuccess);
  EXPECT_EQ(net().dereg_mr(c.recv, mh_b), ncclSuccess);
  sbuf.reset();
  EXPECT_EQ(rdma_resource_count("mr"), mrs0) << "every MR is released";
  EXPECT_TRUE(close_conn(net(), &c));
  munmap(region, 3 * page);
}

// A registration inside a live one shares its MR; once only the inner one is left, a request over
// pages the inner one does not hold gets an MR of its own.
TEST(Registration, ReuseOnlyInsideALiveRegistration) {
  REQUIRE_BED();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  Conn c;
  ASSERT_TRUE(open_conn(net(), bed().dev_a, bed().dev_b, &c));
  auto* region = static_cast<uint8_t*>(
      mmap(nullptr, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(region, MAP_FAILED);
  const int mrs0 = rdma_resource_count("mr");
  ASSERT_GE(mrs0, 0);
  void* outer = nullptr;
  void* inner = nullptr;
  void* other = nullptr;
  ASSERT_EQ(net().reg_mr(c.recv, region, 4 * page, &outer), ncclSuccess);
  ASSERT_EQ(net().reg_mr(c.recv, region + 2 * page + 8, 100, &inner), ncclSuccess);
  EXPECT_EQ(rdma_resource_count("mr"), mrs0 + 1) << "inside a live registration: MR shared";
  ASSERT_EQ(net().dereg_mr(c.recv, outer), ncclSuccess);
  EXPECT_EQ(rdma_resource_count("mr"), mrs0 + 1) << "the shared MR stays while inner uses it";
  ASSERT_EQ(net().reg_mr(c.recv, region, page, &other), ncclSuccess);
  EXPECT_EQ(rdma_resource_count("mr"), mrs0 + 2)
      << "page 0 is held by no live registration: it must not reuse the old MR";
  EXPECT_EQ(net().dereg_mr(c.recv, inner), ncclSuccess);
  EXPECT_EQ(net().dereg_mr(c.recv, other), ncclSuccess);
  EXPECT_EQ(rdma_resource_count("mr"), mrs0);
  EXPECT_TRUE(close_conn(net(), &c));
  munmap(region, 4 * page);
}

}  // namespace
}  // namespace nettest
