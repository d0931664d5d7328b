// regMr / deregMr over a per-adapter registration cache. Ranges are rounded out to pages; a
// registration contained in an existing MR reuses it (refcount), one that overlaps or extends
// existing MRs gets a new MR over the union so later registrations anywhere inside it reuse that.
// The PD is per adapter, so registrations are shared by every comm of the adapter (regIsGlobal).
#include <unistd.h>

#include <cerrno>
#include <mutex>

#include "comm.h"
#include "sluice/core/log.h"

namespace sluice {
namespace {

Device* comm_device(void* comm) {
  auto* b = static_cast<CommBase*>(comm);
  if (b->kind == CommKind::kSend) return static_cast<SendComm*>(b)->c.dev;
  if (b->kind == CommKind::kRecv) return static_cast<RecvComm*>(b)->c.dev;
  return nullptr;
}

// Data buffers: the receiver's are written remotely; no remote read (no flush needs it for host
// memory; GPU flush will add it for its own MRs).
constexpr int kDataAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

}  // namespace

Status reg_mr(void* comm, void* data, size_t size, MemType type, MemHandle** out) {
  *out = nullptr;
  if (comm == nullptr) return Status(Code::kInvalidArgument, "regMr: NULL comm");
  Device* d = comm_device(comm);
  if (d == nullptr) return Status(Code::kInvalidArgument, "regMr: not a send or receive comm");
  if (data == nullptr || size == 0)
    return Status(Code::kInvalidArgument, "regMr: NULL or empty buffer");
  if (type != MemType::kHost) {
    return Status(Code::kInvalidUsage,
                  "regMr: GPU memory is not supported by this build of Sluice yet (ptrSupport "
                  "reports host memory only)");
  }
  static const long page = sysconf(_SC_PAGESIZE);
  uintptr_t lo = reinterpret_cast<uintptr_t>(data) & ~(static_cast<uintptr_t>(page) - 1);
  uintptr_t hi =
      (reinterpret_cast<uintptr_t>(data) + size + page - 1) & ~(static_cast<uintptr_t>(page) - 1);
  Adapter* a = d->adapter;
  std::lock_guard<std::mutex> lk(a->mr_mu);
  // Reuse an MR that contains the range; remember overlapping ones to extend over them.
  uintptr_t ulo = lo, uhi = hi;
  for (auto& [base, mh] : a->mrs) {
    if (base >= hi) break;
    uintptr_t end = base + mh->len;
    if (base <= lo && end >= hi) {
      ++mh->refs;
      *out = mh.get();
      return Status::ok();
    }
    if (end > lo) {  // overlaps
      ulo = std::min(ulo, base);
      uhi = std::max(uhi, end);
    }
  }
  auto mh = std::make_unique<MemHandle>();
  mh->mr.reset(ibv_reg_mr(a->pd.get(), reinterpret_cast<void*>(ulo), uhi - ulo, kDataAccess));
  if (!mh->mr) {
    int err = errno;
    std::string m = "regMr: ibv_reg_mr(" + std::to_string(uhi - ulo) + " bytes) on " + a->name;
    if (err == ENOMEM || err == EAGAIN) {
      m += " failed: cannot pin memory (errno " + std::to_string(err) +
           "): the locked-memory limit is too low; run with `ulimit -l unlimited` or, in a "
           "container, --ulimit memlock=-1";
      return Status(Code::kSystemError, m);
    }
    return errno_status(Code::kSystemError, m, err);
  }
  mh->lkey = mh->mr->lkey;
  mh->rkey = mh->mr->rkey;
  mh->base = ulo;
  mh->len = uhi - ulo;
  mh->adapter = a;
  mh->refs = 1;
  *out = mh.get();
  // A union MR may start at the same base as an existing one: keep both (the map allows one key
  // per base, so nudge ordering through a multimap-like key: base, and on clash replace the index
  // entry while the old handle stays owned by `retired`).
  auto [it, inserted] = a->mrs.try_emplace(ulo, nullptr);
  if (!inserted) {
    // The existing, smaller MR keeps its users; move it to the retired list so the new, larger one
    // serves future lookups.
    a->retired.push_back(std::move(it->second));
  }
  it->second = std::move(mh);
  return Status::ok();
}

Status reg_mr_dmabuf(void* comm, void*, size_t, MemType, uint64_t, int, MemHandle** out) {
  *out = nullptr;
  if (comm == nullptr || comm_device(comm) == nullptr)
    return Status(Code::kInvalidArgument, "regMrDmaBuf: not a send or receive comm");
  return Status(Code::kInvalidUsage,
                "regMrDmaBuf: DMA-BUF registration is not supported by this build of Sluice yet "
                "(ptrSupport does not report NCCL_PTR_DMABUF)");
}

Status dereg_mr(void* comm, MemHandle* mh) {
  if (comm == nullptr || comm_device(comm) == nullptr)
    return Status(Code::kInvalidArgument, "deregMr: not a send or receive comm");
  if (mh == nullptr || mh->magic != MemHandle::kMagic)
    return Status(Code::kInvalidArgument, "deregMr: not a Sluice memory handle");
  Adapter* a = mh->adapter;
  std::lock_guard<std::mutex> lk(a->mr_mu);
  if (--mh->refs > 0) return Status::ok();
  mh->magic = 0;
  auto it = a->mrs.find(mh->base);
  if (it != a->mrs.end() && it->second.get() == mh) {
    a->mrs.erase(it);
    return Status::ok();
  }
  for (auto r = a->retired.begin(); r != a->retired.end(); ++r) {
    if (r->get() == mh) {
      a->retired.erase(r);
      return Status::ok();
    }
  }
  return Status(Code::kInternalError, "deregMr: handle not found in the registration cache");
}

}  // namespace sluice
