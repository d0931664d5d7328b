// regMr / deregMr over a per-adapter registration cache. Ranges are rounded out to pages; a
// registration contained in an existing MR reuses it (refcount), one that overlaps or extends
// existing MRs gets a new MR over the union so later registrations anywhere inside it reuse that.
// The PD is per adapter, so registrations are shared by every comm of the adapter (regIsGlobal).
// Host and CUDA memory have separate indexes: a range is only ever served by an MR of its type.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
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

// Least access: receive buffers are written remotely; remote read only where the loopback flush
// READs them (GPU memory unless NCCL_GDR_FLUSH_DISABLE; host memory only with
// NCCL_NET_FORCE_FLUSH).
unsigned data_access(const Config& cfg, MemType type) {
  unsigned a = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  const bool flushed = !cfg.gdr_flush_disable && (type == MemType::kCuda || cfg.force_flush);
  if (flushed) a |= IBV_ACCESS_REMOTE_READ;
  return a;
}

std::string hex(uintptr_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

int type_index(MemType t) {
  return t == MemType::kCuda ? 1 : 0;
}

// ibv_reg_mr failure text; host memory gets the locked-memory hint.
std::string reg_error(int err, bool host) {
  std::string m = std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")";
  if (host && (err == ENOMEM || err == EAGAIN)) {
    m += ": cannot pin memory: the locked-memory limit is too low; run with `ulimit -l "
         "unlimited` or, in a container, --ulimit memlock=-1";
  } else if (!host && err == EFAULT) {
    m += ": the kernel could not resolve the device pointer (nvidia_peermem not loaded?)";
  }
  return m;
}

// Registers [lo, hi) of CUDA memory: dma-buf export first where the decision allows it, then
// peermem (ibv_reg_mr of the device pointer). The error names each path tried and why it failed.
ibv_mr* reg_cuda(Device* d, uintptr_t lo, uintptr_t hi, unsigned access, std::string* why) {
  const Engine* e = engine();
  Adapter* a = d->adapter;
  const size_t len = hi - lo;
  std::string tried;
  if (d->gdr.dmabuf && e->gpu().export_dmabuf != nullptr) {
    int fd = -1;
    Status st = e->gpu().export_dmabuf(lo, len, &fd);
    if (st.is_ok()) {
      ibv_mr* mr = ibv_reg_dmabuf_mr(a->pd.get(), 0, len, lo, fd, static_cast<int>(access));
      const int err = errno;
      close(fd);  // the MR keeps its own reference to the dma-buf
      if (mr != nullptr) return mr;
      tried = "dma-buf: ibv_reg_dmabuf_mr on " + a->name + " failed: " + reg_error(err, false);
    } else {
      tried = "dma-buf: " + st.message();
    }
  } else {
    tried =
        "dma-buf: not used (" +
        std::string(d->gdr.dmabuf ? "no export entry point" : "the GPUDirect decision says no") +
        ")";
  }
  if (d->gdr.peermem) {
    ibv_mr* mr =
        ibv_reg_mr(a->pd.get(), reinterpret_cast<void*>(lo), len, static_cast<int>(access));
    if (mr != nullptr) return mr;
    tried += "; peermem: ibv_reg_mr on " + a->name + " failed: " + reg_error(errno, false);
  } else {
    tried += "; peermem: not used (nvidia_peermem not loaded)";
  }
  *why = tried;
  return nullptr;
}

// Inserts a new handle into the index (caller holds mr_mu). A union MR may start at the same base
// as an existing one: the existing, smaller MR keeps its users from the retired list and the new,
// larger one serves future lookups.
MemHandle* insert(Adapter* a, std::unique_ptr<MemHandle> mh) {
  MemHandle* out = mh.get();
  auto& index = a->mrs[type_index(mh->type)];
  auto [it, inserted] = index.try_emplace(mh->base, nullptr);
  if (!inserted) a->retired.push_back(std::move(it->second));
  it->second = std::move(mh);
  return out;
}

}  // namespace

Status reg_mr(void* comm, void* data, size_t size, MemType type, MemHandle** out) {
  *out = nullptr;
  if (comm == nullptr) return Status(Code::kInvalidArgument, "regMr: NULL comm");
  Device* d = comm_device(comm);
  if (d == nullptr) return Status(Code::kInvalidArgument, "regMr: not a send or receive comm");
  if (data == nullptr || size == 0)
    return Status(Code::kInvalidArgument, "regMr: NULL or empty buffer");
  if (type == MemType::kCuda && !d->gdr.cuda) {
    return Status(Code::kInvalidUsage, "regMr of CUDA pointer " +
                                           hex(reinterpret_cast<uintptr_t>(data)) + " on " +
                                           d->name + " refused: " + d->gdr.summary);
  }
  static const long page = sysconf(_SC_PAGESIZE);
  uintptr_t lo = reinterpret_cast<uintptr_t>(data) & ~(static_cast<uintptr_t>(page) - 1);
  uintptr_t hi =
      (reinterpret_cast<uintptr_t>(data) + size + page - 1) & ~(static_cast<uintptr_t>(page) - 1);
  Adapter* a = d->adapter;
  std::lock_guard<std::mutex> lk(a->mr_mu);
  // Reuse an MR of the same memory type that contains the range; remember overlapping ones to
  // extend over them.
  uintptr_t ulo = lo, uhi = hi;
  for (auto& [base, mh] : a->mrs[type_index(type)]) {
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
  const unsigned access = data_access(engine()->config(), type);
  auto mh = std::make_unique<MemHandle>();
  if (type == MemType::kCuda) {
    std::string why;
    mh->mr.reset(reg_cuda(d, ulo, uhi, access, &why));
    if (!mh->mr) {
      return Status(Code::kSystemError,
                    "regMr of CUDA pointer " + hex(reinterpret_cast<uintptr_t>(data)) + " (" +
                        std::to_string(size) + " bytes) on " + a->name + ": " + why +
                        "; likely fix: load nvidia_peermem, or use a kernel (5.12+) and NIC "
                        "driver with dma-buf support; SLUICE_GDR=off stages through host memory");
    }
  } else {
    mh->mr.reset(
        ibv_reg_mr(a->pd.get(), reinterpret_cast<void*>(ulo), uhi - ulo, static_cast<int>(access)));
    if (!mh->mr) {
      return Status(Code::kSystemError, "regMr: ibv_reg_mr(" + std::to_string(uhi - ulo) +
                                            " bytes) on " + a->name +
                                            " failed: " + reg_error(errno, true));
    }
  }
  mh->lkey = mh->mr->lkey;
  mh->rkey = mh->mr->rkey;
  mh->base = ulo;
  mh->len = uhi - ulo;
  mh->adapter = a;
  mh->type = type;
  mh->access = access;
  mh->refs = 1;
  *out = insert(a, std::move(mh));
  return Status::ok();
}

Status reg_mr_dmabuf(void* comm, void* data, size_t size, MemType type, uint64_t offset, int fd,
                     MemHandle** out) {
  *out = nullptr;
  Device* d = comm != nullptr ? comm_device(comm) : nullptr;
  if (d == nullptr)
    return Status(Code::kInvalidArgument, "regMrDmaBuf: not a send or receive comm");
  if (data == nullptr || size == 0)
    return Status(Code::kInvalidArgument, "regMrDmaBuf: NULL or empty buffer");
  const auto addr = reinterpret_cast<uintptr_t>(data);
  Adapter* a = d->adapter;
  std::lock_guard<std::mutex> lk(a->mr_mu);
  // A registration of the same type that already covers the range serves it (NCCL may close the
  // fd right after this call: nothing here keeps it).
  for (auto& [base, mh] : a->mrs[type_index(type)]) {
    if (base > addr) break;
    if (mh->contains(data, size)) {
      ++mh->refs;
      *out = mh.get();
      return Status::ok();
    }
  }
  const unsigned access = data_access(engine()->config(), type);
  auto mh = std::make_unique<MemHandle>();
  // The fd's offset is relative to the allocation NCCL exported; iova = the data pointer, so the
  // keys address the buffer by its virtual address like every other MR.
  mh->mr.reset(ibv_reg_dmabuf_mr(a->pd.get(), offset, size, addr, fd, static_cast<int>(access)));
  if (!mh->mr) {
    const int err = errno;
    std::string m = "regMrDmaBuf of " + hex(addr) + " (" + std::to_string(size) + " bytes, fd " +
                    std::to_string(fd) + ", offset " + std::to_string(offset) + ") on " + a->name +
                    ": ibv_reg_dmabuf_mr failed: " + reg_error(err, false);
    if (!d->gdr.dmabuf) m += "; this NIC was not offered for dma-buf: " + a->dmabuf.text;
    return Status(Code::kSystemError, m);
  }
  mh->lkey = mh->mr->lkey;
  mh->rkey = mh->mr->rkey;
  mh->base = addr;
  mh->len = size;
  mh->adapter = a;
  mh->type = type;
  mh->access = access;
  mh->refs = 1;
  *out = insert(a, std::move(mh));
  return Status::ok();
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
  auto& index = a->mrs[type_index(mh->type)];
  auto it = index.find(mh->base);
  if (it != index.end() && it->second.get() == mh) {
    index.erase(it);
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
