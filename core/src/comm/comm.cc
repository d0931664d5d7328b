#include "comm/comm.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "sluice/core/base/log.h"
#include "sluice/core/base/qp.h"

namespace sluice {

Result<NumaBuffer> NumaBuffer::allocate(size_t bytes, int numa_node) {
  long page = sysconf(_SC_PAGESIZE);
  size_t n = (bytes + page - 1) / page * page;
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return errno_status(Code::kSystemError, "mmap of comm memory", errno);
  if (numa_node >= 0 && numa_node < 1024) {
    // MPOL_PREFERRED (1): fall back to other nodes rather than fail. Best effort by design.
    unsigned long mask[1024 / (8 * sizeof(unsigned long))] = {};
    mask[numa_node / (8 * sizeof(unsigned long))] |= 1ul
                                                     << (numa_node % (8 * sizeof(unsigned long)));
    long rc = syscall(SYS_mbind, p, n, 1 /*MPOL_PREFERRED*/, mask, 1024, 0);
    if (rc != 0) {
      SLUICE_TRACE(kSubNet, "mbind to NUMA node %d failed: %s (memory stays where it lands)",
                   numa_node, std::strerror(errno));
    }
  }
  // Anonymous pages are zero and fault in on first touch, under the policy set above: pages a comm
  // never uses cost nothing.
  NumaBuffer b;
  b.p_ = p;
  b.n_ = n;
  return b;
}

NumaBuffer& NumaBuffer::operator=(NumaBuffer&& o) noexcept {
  if (this != &o) {
    if (p_ != nullptr) munmap(p_, n_);
    p_ = o.p_;
    n_ = o.n_;
    o.p_ = nullptr;
    o.n_ = 0;
  }
  return *this;
}

NumaBuffer::~NumaBuffer() {
  if (p_ != nullptr) munmap(p_, n_);
}

std::string Conn::describe_qp(int q) const {
  std::string s = "qpn ";
  s += (q >= 0 && q < nqps && qps[q]) ? std::to_string(qps[q]->qp_num) : "?";
  // A fused comm names the QP's own member ("rxe1:1"); a one-member comm its local_desc.
  const Device* md = (nmembers > 1 && q >= 0 && q < nqps) ? members[qp_member[q]].dev : nullptr;
  s += " on " + (md ? md->name + ":" + std::to_string(md->port) : local_desc) + " -> qpn " +
       ((q >= 0 && q < nqps) ? std::to_string(remote_qpn[q]) : std::string("?")) + " on " +
       remote_dev;
  // A fused peer: the member this QP's path reaches there (wire.h: path p, member p % n).
  const int rm = (remote_nmembers > 1 && q >= 0 && q < nqps && qpp > 0)
                     ? wire::path_member(q / qpp, remote_nmembers)
                     : -1;
  if (rm >= 0 && !remote_member_gid[rm].empty()) {
    s += " member " + std::to_string(rm) + " (gid " + remote_member_gid[rm] + ") at " + peer;
  } else {
    s += " (gid " + remote_gid + ") at " + peer;
  }
  return s;
}

void Conn::drain_at_close() {
  bool moved[wire::kMaxQps] = {};
  bool any = false;
  for (int q = 0; q < nqps; ++q) {
    moved[q] = qps[q] && qp_to_error(qps[q].get()).is_ok();
    any = any || moved[q];
  }
  if (!any || nmembers == 0 || !members[0].cq) return;
  // Flushed work completes quickly once the QPs are in ERROR; the bound is for a provider or a
  // device that does not flush.
  using Clock = std::chrono::steady_clock;
  const Engine* e = engine();
  const int limit_ms = e ? e->config().close_timeout_ms : 2000;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::milliseconds(limit_ms);
  enum Marker : uint8_t { kNone, kPosted, kBack, kUnpostable };
  Marker marker[wire::kMaxQps] = {};
  ibv_wc wc[16];
  // A QP is known by its number on the member whose CQ was polled: members on different
  // adapters have separate QP number spaces (a fused comm's rxe0 and rxe1 QPs are both qpn 17).
  const auto take = [&](int n, int mi) {
    for (int k = 0; k < n; ++k) {
      int q = 0;
      while (q < nqps && !(qps[q] && qps[q]->qp_num == wc[k].qp_num && qp_member[q] == mi)) ++q;
      if (q == nqps) continue;
      if (wc[k].wr_id == (kWrDrainMarker | static_cast<uint64_t>(q))) {
        marker[q] = kBack;
      } else if (wc[k].wr_id < wire::kFifoSlots && rq_outstanding[q] > 0) {
        // Receive WRs carry their FIFO slot; the send comm, whose small wr_ids are send-queue
        // group leaders, posts no receive WRs.
        --rq_outstanding[q];
      }
    }
  };
  bool drained = false;
  for (;;) {
    drained = true;
    for (int q = 0; q < nqps; ++q) {
      if (!moved[q]) continue;
      if (marker[q] == kNone) {  // a full send queue takes it once flushed WRs made room
        ibv_send_wr w{};
        w.wr_id = kWrDrainMarker | static_cast<uint64_t>(q);
        w.opcode = IBV_WR_RDMA_WRITE;
        w.send_flags = IBV_SEND_SIGNALED;
        ibv_send_wr* bad = nullptr;
        const int rc = ibv_post_send(qps[q].get(), &w, &bad);
        if (rc == 0) marker[q] = kPosted;
        if (rc != 0 && rc != ENOMEM) marker[q] = kUnpostable;  // nothing more to learn there
      }
      drained =
          drained && (marker[q] == kBack || marker[q] == kUnpostable) && rq_outstanding[q] == 0;
    }
    if (drained || Clock::now() >= deadline) break;
    // Every member's CQ (one for a one-member comm); a failed poll ends the drain.
    int n = 0;
    for (int mi = 0; mi < nmembers && n >= 0; ++mi) {
      if (!members[mi].cq) continue;
      n = ibv_poll_cq(members[mi].cq.get(), 16, wc);
      if (n > 0) take(n, mi);
    }
    if (n < 0) break;
  }
  if (!drained) {
    std::string left;
    for (int q = 0; q < nqps; ++q) {
      if (!moved[q]) continue;
      if (marker[q] == kPosted || marker[q] == kNone)
        left += std::string(left.empty() ? "" : ", ") + "the send queue of qpn " +
                std::to_string(qps[q]->qp_num) +
                (marker[q] == kNone ? " (full)" : " (work not flushed)");
      if (rq_outstanding[q] > 0)
        left += std::string(left.empty() ? "" : ", ") + std::to_string(rq_outstanding[q]) +
                " receive WR(s) on qpn " + std::to_string(qps[q]->qp_num);
    }
    SLUICE_WARN(
        "close of the comm %s: outstanding work not drained within SLUICE_CLOSE_TIMEOUT_MS=%d ms "
        "(%.0f ms): %s%s%s; the device did not flush it (likely: a hung device or driver); "
        "releasing the QPs, CQ and memory anyway",
        describe_qp(0).c_str(), limit_ms,
        std::chrono::duration<double, std::milli>(Clock::now() - start).count(), left.c_str(),
        pending_work.empty() ? "" : "; in flight: ", pending_work.c_str());
  }
  for (int q = 0; q < nqps; ++q) rq_outstanding[q] = 0;
}

Conn::~Conn() {
  // Teardown order: drain (QPs to ERROR, flushed work collected, bounded), then the QPs before
  // the CQ (member order); MRs and memory are released by the comm.
  liveness_stop(*this);  // out of the async-event registry; goodbye to the peer
  drain_at_close();
  for (int q = 0; q < nqps; ++q) qps[q].reset();
  for (auto& m : members) m.cq.reset();
  if (fd >= 0) close(fd);
}

}  // namespace sluice
