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
  s += (q >= 0 && q < nqps && qp[q]) ? std::to_string(qp[q].qpn) : "?";
  // A fused comm names the QP's own member ("rxe1:1"); a one-member comm its local_desc.
  const Device* md = (nmembers > 1 && q >= 0 && q < nqps) ? members[qp_member[q]].dev : nullptr;
  s += " on " + (md ? port_label(*md) : local_desc) + " -> qpn " +
       ((q >= 0 && q < nqps) ? std::to_string(qp[q].remote_qpn) : std::string("?")) + " on " +
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
  // Every QP still held: the current incarnations, then the retired ones (failback; qp_life.h).
  struct Q {
    ibv_qp* qp;
    uint32_t qpn;
    int member;
    uint32_t* rq;  // receive WRs not completed
    uint64_t marker_id;
  };
  Q all[wire::kMaxQps + kMaxRetiredQps];
  int n = 0;
  for (int q = 0; q < nqps; ++q) {
    if (!qp[q]) continue;
    all[n++] = Q{qp[q].get(), qp[q].qpn, qp_member[q], &qp[q].rq_outstanding,
                 kWrDrainMarker | static_cast<uint64_t>(q)};
  }
  for (RetiredQp& r : retired_list()) {
    if (!r || !r.qp) continue;
    all[n++] = Q{r.qp.get(), r.qpn, r.member, &r.rq_outstanding,
                 kWrDrainMarker | kWrDrainRetired | static_cast<uint64_t>(&r - retired_qps.get())};
  }
  bool moved[wire::kMaxQps + kMaxRetiredQps] = {};
  bool any = false;
  for (int i = 0; i < n; ++i) {
    moved[i] = qp_to_error(all[i].qp).is_ok();
    any = any || moved[i];
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
  Marker marker[wire::kMaxQps + kMaxRetiredQps] = {};
  ibv_wc wc[16];
  // A QP is known by its number on the member whose CQ was polled: members on different
  // adapters have separate QP number spaces (a fused comm's rxe0 and rxe1 QPs are both qpn 17).
  const auto take = [&](int got, int mi) {
    for (int k = 0; k < got; ++k) {
      int i = 0;
      while (i < n && !(all[i].qpn == wc[k].qp_num && all[i].member == mi)) ++i;
      if (i == n) continue;
      if (wc[k].wr_id == all[i].marker_id) {
        marker[i] = kBack;
      } else if (wc[k].wr_id<wire::kFifoSlots&& * all[i].rq> 0) {
        // Receive WRs carry their FIFO slot; the send comm, whose small wr_ids are send-queue
        // group leaders, posts no receive WRs but failback's check.
        --*all[i].rq;
      }
    }
  };
  bool drained = false;
  for (;;) {
    drained = true;
    for (int i = 0; i < n; ++i) {
      if (!moved[i]) continue;
      if (marker[i] == kNone) {  // a full send queue takes it once flushed WRs made room
        ibv_send_wr w{};
        w.wr_id = all[i].marker_id;
        w.opcode = IBV_WR_RDMA_WRITE;
        w.send_flags = IBV_SEND_SIGNALED;
        ibv_send_wr* bad = nullptr;
        const int rc = ibv_post_send(all[i].qp, &w, &bad);
        if (rc == 0) marker[i] = kPosted;
        if (rc != 0 && rc != ENOMEM) marker[i] = kUnpostable;  // nothing more to learn there
      }
      drained = drained && (marker[i] == kBack || marker[i] == kUnpostable) && *all[i].rq == 0;
    }
    if (drained || Clock::now() >= deadline) break;
    // Every member's CQ (one for a one-member comm); a failed poll ends the drain.
    int got = 0;
    for (int mi = 0; mi < nmembers && got >= 0; ++mi) {
      if (!members[mi].cq) continue;
      got = ibv_poll_cq(members[mi].cq.get(), 16, wc);
      if (got > 0) take(got, mi);
    }
    if (got < 0) break;
  }
  if (!drained) {
    std::string left;
    for (int i = 0; i < n; ++i) {
      if (!moved[i]) continue;
      if (marker[i] == kPosted || marker[i] == kNone)
        left += std::string(left.empty() ? "" : ", ") + "the send queue of qpn " +
                std::to_string(all[i].qpn) +
                (marker[i] == kNone ? " (full)" : " (work not flushed)");
      if (*all[i].rq > 0)
        left += std::string(left.empty() ? "" : ", ") + std::to_string(*all[i].rq) +
                " receive WR(s) on qpn " + std::to_string(all[i].qpn);
    }
    SLUICE_WARN(
        "close of the comm %s: outstanding work not drained within SLUICE_CLOSE_TIMEOUT_MS=%d ms "
        "(%.0f ms): %s%s%s; the device did not flush it (likely: a hung device or driver); "
        "releasing the QPs, CQ and memory anyway",
        describe_qp(0).c_str(), limit_ms,
        std::chrono::duration<double, std::milli>(Clock::now() - start).count(), left.c_str(),
        pending_work.empty() ? "" : "; in flight: ", pending_work.c_str());
  }
  for (int i = 0; i < n; ++i) *all[i].rq = 0;
}

Conn::~Conn() {
  // Teardown order: drain (QPs to ERROR, flushed work collected, bounded), then the QPs before
  // the CQ (member order); MRs and memory are released by the comm.
  liveness_stop(*this);  // out of the async-event registry; goodbye to the peer
  drain_at_close();
  for (int q = 0; q < nqps; ++q) qp[q].qp.reset();
  for (RetiredQp& r : retired_list()) r.qp.reset();
  for (auto& m : members) m.cq.reset();
  liveness_close_socket(*this);
}

}  // namespace sluice
