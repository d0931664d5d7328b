#include "comm.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "sluice/core/log.h"
#include "sluice/core/qp.h"

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
  s += " on " + local_desc + " -> qpn " +
       ((q >= 0 && q < nqps) ? std::to_string(remote_qpn[q]) : std::string("?")) + " on " +
       remote_dev + " (gid " + remote_gid + ") at " + peer;
  return s;
}

Conn::~Conn() {
  // Teardown order: QPs to ERROR so outstanding work flushes, drain the CQ (bounded), then the
  // owners release QPs before the CQ (member order), MRs and memory are released by the comm.
  liveness_stop(*this);  // out of the async-event registry; goodbye to the peer
  bool any = false;
  for (int q = 0; q < nqps; ++q) {
    if (qps[q]) {
      (void)qp_to_error(qps[q].get());
      any = true;
    }
  }
  if (any && cq) {
    // Flushed work completes quickly once the QPs are in ERROR; stop when the CQ stays empty for a
    // while or at SLUICE_CLOSE_TIMEOUT_MS, whichever comes first.
    const Engine* e = engine();
    const int limit_ms = e ? e->config().close_timeout_ms : 2000;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(limit_ms);
    ibv_wc wc[16];
    int empty_polls = 0;
    while (empty_polls < 64 && std::chrono::steady_clock::now() < deadline) {
      int n = ibv_poll_cq(cq.get(), 16, wc);
      empty_polls = n > 0 ? 0 : empty_polls + 1;
      if (n < 0) break;
    }
  }
  for (int q = 0; q < nqps; ++q) qps[q].reset();
  cq.reset();
  if (fd >= 0) close(fd);
}

}  // namespace sluice
