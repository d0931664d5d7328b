// regMr / deregMr over a per-adapter registration cache. Ranges are rounded out to pages. Every
// call gets its own MemHandle; an MR (MrEntry) is shared only when the new range lies inside the
// range of a registration that is still alive on it, and it never covers more than the request
// that created it (no union). So a reused MR is always pinned to pages a live user still holds:
// once the last registration over some pages is gone, new memory mapped there gets a new MR,
// never an old one pinned to the freed pages (issue 9's stale-registration corruption).
// The PD is per adapter, so registrations are shared by every comm of the adapter (regIsGlobal).
// An MR only ever serves registrations of its own memory type.
//
// deregMr never refuses a valid handle (NCCL's proxy deregisters before it closes and stops its
// teardown at the first error). A registration that a pending request of the comm still uses is
// deferred: its handle is dead at once (magic kDeferred: isend/irecv/deregMr reject it) and it is
// never reused by find_live, but its MR stays until the NIC can no longer touch the memory: the
// requests are done (checked at the comm's next regMr/deregMr) or the comm's QPs are in ERROR and
// drained (close, finalize's retire_comm). So a regMr of the same range gets a new MR.
//
// NIC fusion: a comm of several members registers every range on each member adapter before
// regMr returns (NCCL may close a dma-buf fd right after). The caller's handle is member 0's;
// it owns one extra registration per further adapter (MemHandle::more), each in its own
// adapter's cache, so the rules above hold per adapter: an extra is shared by that adapter's later
// regMr only while its owner is live (kMember), and never once the owner is deferred
// (kMemberDeferred). A failure on any member frees everything the call registered. Only one
// adapter's lock is held at a time.
//
// At scale (issue 32: 10,000 registrations and closes) no call walks the cache: each adapter's
// RegIndex finds a live registration containing a range in O(log n) (memory/interval_index.h),
// removes an MR or a registration from the cache's vectors in O(1) (swap with the last, by their
// recorded positions), and finds a comm's deferred registrations by its key.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "comm/comm.h"
#include "memory/interval_index.h"
#include "sluice/core/base/log.h"
#include "sluice/core/base/verbs_ext.h"

namespace sluice {
namespace {

// A comm that finalize retired (retire_comm): every call on it fails with its reason.
const Conn* retired_conn(void* comm) {
  auto* b = static_cast<CommBase*>(comm);
  const Conn* c = b == nullptr                 ? nullptr
                  : b->kind == CommKind::kSend ? &static_cast<SendComm*>(b)->c
                  : b->kind == CommKind::kRecv ? &static_cast<RecvComm*>(b)->c
                                               : nullptr;
  return c != nullptr && c->retired ? c : nullptr;
}

const Conn* comm_conn(void* comm) {
  auto* b = static_cast<CommBase*>(comm);
  if (b->kind == CommKind::kSend) return &static_cast<SendComm*>(b)->c;
  if (b->kind == CommKind::kRecv) return &static_cast<RecvComm*>(b)->c;
  return nullptr;
}

Device* comm_device(void* comm) {
  const Conn* c = comm_conn(comm);
  return c != nullptr ? c->dev : nullptr;
}

// Least access: receive buffers are written remotely; remote read only where the loopback flush
// READs them (GPU memory unless NCCL_GDR_FLUSH_DISABLE; host memory only with
// NCCL_NET_FORCE_FLUSH). Relaxed ordering where NCCL_IB_PCI_RELAXED_ORDERING decided so for the
// adapter (an optional flag: ignored where unusable).
unsigned data_access(const Config& cfg, MemType type, bool relaxed_ordering) {
  unsigned a = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  const bool flushed = !cfg.gdr_flush_disable && (type == MemType::kCuda || cfg.force_flush);
  if (flushed) a |= IBV_ACCESS_REMOTE_READ;
  return with_relaxed_ordering(a, relaxed_ordering);
}

std::string hex(uintptr_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
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
  const auto reg_dmabuf = verbs::ext().reg_dmabuf_mr;  // null before rdma-core 34
  if (d->gdr.dmabuf && e->gpu().export_dmabuf != nullptr && reg_dmabuf != nullptr) {
    int fd = -1;
    Status st = e->gpu().export_dmabuf(lo, len, a->locality.pci_path, &fd);
    if (st.is_ok()) {
      ibv_mr* mr = reg_dmabuf(a->pd.get(), 0, len, lo, fd, static_cast<int>(access));
      const int err = errno;
      close(fd);  // the MR keeps its own reference to the dma-buf
      if (mr != nullptr) return mr;
      tried = "dma-buf: ibv_reg_dmabuf_mr on " + a->name + " failed: " + reg_error(err, false);
    } else {
      tried = "dma-buf: " + st.message();
    }
  } else {
    tried = "dma-buf: not used (" +
            std::string(!d->gdr.dmabuf          ? "the GPUDirect decision says no"
                        : reg_dmabuf == nullptr ? "no dma-buf (rdma-core too old)"
                                                : "no export entry point") +
            ")";
  }
  if (d->gdr.peermem) {
    ibv_mr* mr = ibv_reg_mr_iova2(a->pd.get(), reinterpret_cast<void*>(lo), len, lo, access);
    if (mr != nullptr) return mr;
    tried += "; peermem: ibv_reg_mr on " + a->name + " failed: " + reg_error(errno, false);
  } else {
    tried += "; peermem: not used (nvidia_peermem not loaded)";
  }
  *why = tried;
  return nullptr;
}

// An adapter's index over its cache (Adapter::mrs and each MrEntry's users, which own the objects):
// their positions in those vectors, the live registrations (kMagic, kMember) by range and memory
// type, and the deferred ones (kDeferred) by the comm that deferred them. Guarded by mr_mu.
struct RegIndex {
  std::unordered_map<const MrEntry*, size_t> entry_pos;  // in Adapter::mrs
  struct User {
    size_t pos = 0;     // in its entry's users
    int32_t live = -1;  // its node in live[type] while it is live
  };
  std::unordered_map<const MemHandle*, User> users;
  IntervalIndex live[2];  // by MemType
  std::unordered_map<uintptr_t, std::vector<MemHandle*>> deferred;
};

static_assert(static_cast<int>(MemType::kHost) == 0 && static_cast<int>(MemType::kCuda) == 1);

// The index of adapter `a` (caller holds a->mr_mu). It lives beside the adapter in a table of
// this file, keyed by the adapter's address, since the adapter (comm/engine.h) has no field for
// it; every change to the cache goes through this file, so the index always counts exactly the
// adapter's MRs. An adapter created where a dead one was starts with none: a count that differs
// means the index is the dead one's, and it is dropped (its pointers are never followed).
RegIndex& reg_index(const Adapter* a) {
  struct Table {
    std::mutex mu;
    std::unordered_map<const Adapter*, std::unique_ptr<RegIndex>> by_adapter;
  };
  static auto* t = new Table;  // NOLINT: never destroyed (no static destructor)
  std::lock_guard<std::mutex> lk(t->mu);
  std::unique_ptr<RegIndex>& ix = t->by_adapter[a];
  if (!ix || ix->entry_pos.size() != a->mrs.size()) ix = std::make_unique<RegIndex>();
  return *ix;
}

bool is_live(uint32_t magic) {
  return magic == MemHandle::kMagic || magic == MemHandle::kMember;
}

// A live registration of `type` whose range contains [lo, hi), or null. Caller holds mr_mu.
MrEntry* find_live(RegIndex& ix, MemType type, uintptr_t lo, uintptr_t hi) {
  const auto* mh =
      static_cast<const MemHandle*>(ix.live[static_cast<int>(type)].find_containing(lo, hi));
  return mh != nullptr ? mh->entry : nullptr;
}

// A new registration of [lo, hi) on entry `e`: the caller's (kMagic) or a fused comm's extra
// (kMember). Caller holds mr_mu.
MemHandle* add_user(Adapter* a, RegIndex& ix, MrEntry* e, uintptr_t lo, size_t len,
                    uint32_t magic) {
  auto mh = std::make_unique<MemHandle>();
  mh->magic = magic;
  mh->lkey = e->mr->lkey;
  mh->rkey = e->mr->rkey;
  mh->base = lo;
  mh->len = len;
  mh->adapter = a;
  mh->type = e->type;
  mh->access = e->access;
  mh->entry = e;
  MemHandle* p = mh.get();
  RegIndex::User u;
  u.pos = e->users.size();
  if (is_live(magic)) u.live = ix.live[static_cast<int>(e->type)].insert(lo, lo + len, p);
  e->users.push_back(std::move(mh));
  ix.users.emplace(p, u);
  return p;
}

// Takes ownership of a new MR over [lo, lo + len) and registers its first user. Caller holds
// mr_mu.
MemHandle* add_entry(Adapter* a, RegIndex& ix, ibv_mr* mr, MemType type, unsigned access,
                     uintptr_t lo, size_t len, uint32_t magic) {
  auto e = std::make_unique<MrEntry>();
  e->mr.reset(mr);
  e->base = lo;
  e->len = len;
  e->type = type;
  e->access = access;
  MrEntry* p = e.get();
  ix.entry_pos.emplace(p, a->mrs.size());
  a->mrs.push_back(std::move(e));
  return add_user(a, ix, p, lo, len, magic);
}

// `mh` stops being live (deferred): never found by find_live again. Caller holds mr_mu.
void unlive(RegIndex& ix, const MemHandle* mh) {
  auto it = ix.users.find(mh);
  if (it == ix.users.end() || it->second.live < 0) return;
  ix.live[static_cast<int>(mh->type)].erase(it->second.live);
  it->second.live = -1;
}

// Removes element `pos` of `v` by moving the last one into its place; `moved(p)` is told the new
// position of the element that moved.
template <class T, class Moved>
void swap_remove(std::vector<T>& v, size_t pos, Moved&& moved) {
  if (pos + 1 != v.size()) {
    std::swap(v[pos], v.back());
    moved(v[pos], pos);
  }
  v.pop_back();
}

// Frees the registration `mh` (caller holds mr_mu), and its MR when it was the MR's last user.
void erase_user(Adapter* a, const MemHandle* mh) {
  RegIndex& ix = reg_index(a);
  auto it = ix.users.find(mh);
  if (it == ix.users.end()) return;  // not in this cache (never: every handle was added here)
  if (it->second.live >= 0) ix.live[static_cast<int>(mh->type)].erase(it->second.live);
  if (mh->magic == MemHandle::kDeferred) {
    auto d = ix.deferred.find(mh->deferred_on);
    if (d != ix.deferred.end()) {
      std::erase(d->second, mh);  // a comm's deferred registrations: its requests in flight
      if (d->second.empty()) ix.deferred.erase(d);
    }
  }
  MrEntry* e = mh->entry;
  const size_t pos = it->second.pos;
  ix.users.erase(it);
  e->users[pos]->magic = 0;
  swap_remove(e->users, pos, [&](const std::unique_ptr<MemHandle>& u, size_t p) {
    ix.users[u.get()].pos = p;
  });  // frees the handle
  if (!e->users.empty()) return;
  // The last registration on the MR: deregister it.
  auto ep = ix.entry_pos.find(e);
  const size_t epos = ep->second;
  ix.entry_pos.erase(ep);
  swap_remove(a->mrs, epos,
              [&](const std::unique_ptr<MrEntry>& m, size_t p) { ix.entry_pos[m.get()] = p; });
}

// Frees `mh` and the extras it owns. The caller holds no adapter lock: each extra is erased under
// its own adapter's lock, then `mh` under its own (one lock at a time, so no order between
// adapters to keep). Only the handle's owner calls this; nothing else reads `more`.
void free_handle(MemHandle* mh) {
  for (int i = 0; i < mh->nmore; ++i) {
    Adapter* b = mh->more[i]->adapter;
    std::lock_guard<std::mutex> lk(b->mr_mu);
    erase_user(b, mh->more[i]);
    mh->more[i] = nullptr;
  }
  mh->nmore = 0;
  Adapter* a = mh->adapter;
  std::lock_guard<std::mutex> lk(a->mr_mu);
  erase_user(a, mh);
}

static_assert(MemHandle::kMaxMore >= kMaxConnMembers - 1, "an extra for every further member");

// Fusion: registers mh's range on every member adapter of `c` after member 0's, with `reg`
// (Device*, MemHandle** out, magic kMember). Members on an adapter already registered share its
// registration. On a failure everything is freed, mh included, and the error names the member.
template <class Reg>
Status add_members(const Conn& c, MemHandle* mh, const char* call, Reg&& reg) {
  for (int m = 1; m < c.nmembers; ++m) {
    Device* d = c.members[m].dev;
    if (mh->on(d->adapter) != nullptr) continue;  // an earlier member's adapter (one PD)
    MemHandle* x = nullptr;
    Status st = reg(d, &x);
    if (!st.is_ok()) {
      free_handle(mh);
      return Status(st.code(), std::string(call) + " on fused comm member " + std::to_string(m) +
                                   " (" + d->name + ", of " + std::to_string(c.nmembers) +
                                   "; nothing stays registered): " + st.message());
    }
    mh->more[mh->nmore++] = x;
  }
  return Status::ok();
}

// One registration of [data, +size) on device d's adapter, with `magic` (kMagic: the caller's;
// kMember: a fused comm's extra). Caller holds no lock.
Status reg_one(Device* d, void* data, size_t size, MemType type, uint32_t magic, MemHandle** out) {
  static const long page = sysconf(_SC_PAGESIZE);
  uintptr_t lo = reinterpret_cast<uintptr_t>(data) & ~(static_cast<uintptr_t>(page) - 1);
  uintptr_t hi =
      (reinterpret_cast<uintptr_t>(data) + size + page - 1) & ~(static_cast<uintptr_t>(page) - 1);
  Adapter* a = d->adapter;
  std::lock_guard<std::mutex> lk(a->mr_mu);
  RegIndex& ix = reg_index(a);
  // Reuse an MR only inside the range of a live registration on it (see the top of the file).
  if (MrEntry* e = find_live(ix, type, lo, hi)) {
    *out = add_user(a, ix, e, lo, hi - lo, magic);
    return Status::ok();
  }
  const unsigned access = data_access(engine()->config(), type, a->relaxed_ordering);
  verbs::Mr mr;
  if (type == MemType::kCuda) {
    std::string why;
    mr.reset(reg_cuda(d, lo, hi, access, &why));
    if (!mr) {
      return Status(Code::kSystemError,
                    "regMr of CUDA pointer " + hex(reinterpret_cast<uintptr_t>(data)) + " (" +
                        std::to_string(size) + " bytes) on " + a->name + ": " + why +
                        "; likely fix: load nvidia_peermem, or use a kernel (5.12+) and NIC "
                        "driver with dma-buf support; SLUICE_GDR=off stages through host memory");
    }
  } else {
    mr.reset(ibv_reg_mr_iova2(a->pd.get(), reinterpret_cast<void*>(lo), hi - lo, lo, access));
    if (!mr) {
      return Status(Code::kSystemError, "regMr: ibv_reg_mr(" + std::to_string(hi - lo) +
                                            " bytes) on " + a->name +
                                            " failed: " + reg_error(errno, true));
    }
  }
  *out = add_entry(a, ix, mr.release(), type, access, lo, hi - lo, magic);
  return Status::ok();
}

// One dma-buf registration on device d's adapter (see reg_one). Caller holds no lock.
Status reg_dmabuf_one(Device* d, void* data, size_t size, MemType type, uint64_t offset, int fd,
                      uint32_t magic, MemHandle** out) {
  const auto addr = reinterpret_cast<uintptr_t>(data);
  Adapter* a = d->adapter;
  std::lock_guard<std::mutex> lk(a->mr_mu);
  RegIndex& ix = reg_index(a);
  // A live registration of the same type that covers the range serves it (NCCL may close the fd
  // right after this call: nothing here keeps it).
  if (MrEntry* e = find_live(ix, type, addr, addr + size)) {
    *out = add_user(a, ix, e, addr, size, magic);
    return Status::ok();
  }
  const unsigned access = data_access(engine()->config(), type, a->relaxed_ordering);
  const auto reg_dmabuf = verbs::ext().reg_dmabuf_mr;
  if (reg_dmabuf == nullptr) {
    return Status(Code::kInvalidUsage, "regMrDmaBuf on " + a->name +
                                           ": no dma-buf (rdma-core too old): libibverbs has " +
                                           "no " + verbs::ext_origin("ibv_reg_dmabuf_mr") +
                                           "; this device does not offer NCCL_PTR_DMABUF");
  }
  // The fd's offset is relative to the allocation NCCL exported; iova = the data pointer, so the
  // keys address the buffer by its virtual address like every other MR.
  ibv_mr* mr = reg_dmabuf(a->pd.get(), offset, size, addr, fd, static_cast<int>(access));
  if (mr == nullptr) {
    const int err = errno;
    std::string m = "regMrDmaBuf of " + hex(addr) + " (" + std::to_string(size) + " bytes, fd " +
                    std::to_string(fd) + ", offset " + std::to_string(offset) + ") on " + a->name +
                    ": ibv_reg_dmabuf_mr failed: " + reg_error(err, false);
    if (!d->gdr.dmabuf) m += "; this NIC was not offered for dma-buf: " + a->dmabuf.text;
    return Status(Code::kSystemError, m);
  }
  *out = add_entry(a, ix, mr, type, access, addr, size, magic);
  return Status::ok();
}

}  // namespace

void release_deferred_mrs(Adapter* a, uintptr_t key, void* comm) {
  if (a == nullptr) return;
  std::vector<MemHandle*> mine;
  {
    std::lock_guard<std::mutex> lk(a->mr_mu);
    RegIndex& ix = reg_index(a);
    auto it = ix.deferred.find(key);  // this comm's only: no walk over the cache
    if (it == ix.deferred.end()) return;
    mine = it->second;
  }
  if (mine.empty()) return;
  // requests_using takes the receive comm's mutex: not under mr_mu. Only this comm's driver frees
  // its deferred handles, so they stay valid in between.
  std::vector<MemHandle*> done;
  for (MemHandle* mh : mine) {
    std::string what;
    if (comm == nullptr || requests_using(comm, mh, &what) == 0) done.push_back(mh);
  }
  for (MemHandle* mh : done) free_handle(mh);  // with its extras on the other members' adapters
}

Status reg_mr(void* comm, void* data, size_t size, MemType type, MemHandle** out) {
  *out = nullptr;
  if (comm == nullptr) return Status(Code::kInvalidArgument, "regMr: NULL comm");
  if (const Conn* c = retired_conn(comm)) return c->failure;
  const Conn* c = comm_conn(comm);
  if (c == nullptr || c->dev == nullptr)
    return Status(Code::kInvalidArgument, "regMr: not a send or receive comm");
  if (data == nullptr || size == 0)
    return Status(Code::kInvalidArgument, "regMr: NULL or empty buffer");
  for (int m = 0; m < c->nmembers || m == 0; ++m) {
    const Device* d = m == 0 ? c->dev : c->members[m].dev;
    if (type == MemType::kCuda && !d->gdr.cuda) {
      return Status(Code::kInvalidUsage, "regMr of CUDA pointer " +
                                             hex(reinterpret_cast<uintptr_t>(data)) + " on " +
                                             d->name + " refused: " + d->gdr.summary);
    }
  }
  // Registrations this comm deferred whose requests are done.
  release_deferred_mrs(c->dev->adapter, reinterpret_cast<uintptr_t>(comm), comm);
  MemHandle* mh = nullptr;
  SLUICE_RETURN_IF_ERROR(reg_one(c->dev, data, size, type, MemHandle::kMagic, &mh));
  SLUICE_RETURN_IF_ERROR(add_members(*c, mh, "regMr", [&](Device* d, MemHandle** x) {
    return reg_one(d, data, size, type, MemHandle::kMember, x);
  }));
  if (type == MemType::kCuda) c->cuda_registered.store(true, std::memory_order_release);
  *out = mh;
  return Status::ok();
}

Status reg_mr_dmabuf(void* comm, void* data, size_t size, MemType type, uint64_t offset, int fd,
                     MemHandle** out) {
  *out = nullptr;
  const Conn* c = comm != nullptr ? comm_conn(comm) : nullptr;
  if (c == nullptr || c->dev == nullptr)
    return Status(Code::kInvalidArgument, "regMrDmaBuf: not a send or receive comm");
  if (data == nullptr || size == 0)
    return Status(Code::kInvalidArgument, "regMrDmaBuf: NULL or empty buffer");
  // Every member registers before this returns: NCCL may close the fd right after.
  MemHandle* mh = nullptr;
  SLUICE_RETURN_IF_ERROR(
      reg_dmabuf_one(c->dev, data, size, type, offset, fd, MemHandle::kMagic, &mh));
  SLUICE_RETURN_IF_ERROR(add_members(*c, mh, "regMrDmaBuf", [&](Device* d, MemHandle** x) {
    return reg_dmabuf_one(d, data, size, type, offset, fd, MemHandle::kMember, x);
  }));
  if (type == MemType::kCuda) c->cuda_registered.store(true, std::memory_order_release);
  *out = mh;
  return Status::ok();
}

Status dereg_mr(void* comm, MemHandle* mh) {
  // Finalize released every registration of the process with the comm's verbs objects: the
  // handle is gone already, and this teardown step succeeds (NCCL stops at the first error).
  if (retired_conn(comm) != nullptr) return Status::ok();
  if (comm == nullptr || comm_device(comm) == nullptr)
    return Status(Code::kInvalidArgument, "deregMr: not a send or receive comm");
  if (mh == nullptr || mh->magic != MemHandle::kMagic) {
    return Status(Code::kInvalidArgument, mh != nullptr && mh->magic == MemHandle::kDeferred
                                              ? "deregMr: memory handle already deregistered"
                                              : "deregMr: not a Sluice memory handle");
  }
  Adapter* a = mh->adapter;
  release_deferred_mrs(a, reinterpret_cast<uintptr_t>(comm), comm);
  // A registration that a request of this comm still uses is deferred (top of the file): the NIC
  // may still read or write it until the request is done or the comm's queues are drained.
  std::string users;
  const int n = requests_using(comm, mh, &users);
  if (n > 0) {
    {
      std::lock_guard<std::mutex> lk(a->mr_mu);
      RegIndex& ix = reg_index(a);
      unlive(ix, mh);
      mh->magic = MemHandle::kDeferred;
      mh->deferred_on = reinterpret_cast<uintptr_t>(comm);
      ix.deferred[mh->deferred_on].push_back(mh);
    }
    // Its extras are deferred with it: never shared again on their adapters, freed with it.
    for (int i = 0; i < mh->nmore; ++i) {
      Adapter* b = mh->more[i]->adapter;
      std::lock_guard<std::mutex> lk(b->mr_mu);
      unlive(reg_index(b), mh->more[i]);
      mh->more[i]->magic = MemHandle::kMemberDeferred;
    }
    SLUICE_INFO(kSubNet,
                "deregMr of the registration [0x%lx, +%zu) on %s while %s still use it: the "
                "handle is dead now; its MR is released once they are done or the comm is closed",
                static_cast<unsigned long>(mh->base), mh->len, comm_device(comm)->name.c_str(),
                users.c_str());
    return Status::ok();
  }
  free_handle(mh);
  return Status::ok();
}

}  // namespace sluice
