#include "comm/eager_pool.h"

#include <bit>
#include <cerrno>
#include <cstring>

#include "sluice/core/base/log.h"
#include "sluice/core/wire/eager.h"

namespace sluice {

void EagerPoolDeleter::operator()(EagerPool* p) const {
  delete p;
}

void EagerRef::reset() {
  if (adapter != nullptr) eager_pool_unref(*adapter);
  adapter = nullptr;
}

void EagerLease::release() {
  if (pool != nullptr && index >= 0) pool->release(index);
  pool = nullptr;
  index = -1;
  base = nullptr;
}

void EagerBookLease::release() {
  if (pool != nullptr && index >= 0) pool->release_send_book(index);
  index = -1;
}

void FreeBits::init(uint32_t n) {
  n_ = n;
  words_ = (n + 63) / 64;
  free_.reset(new std::atomic<uint64_t>[words_]);
  for (size_t w = 0; w < words_; ++w) {
    const uint32_t left = n - static_cast<uint32_t>(w * 64);
    free_[w].store(left >= 64 ? ~uint64_t{0} : (uint64_t{1} << left) - 1,
                   std::memory_order_relaxed);
  }
}

int FreeBits::take() {
  for (size_t w = 0; w < words_; ++w) {
    uint64_t v = free_[w].load(std::memory_order_relaxed);
    while (v != 0) {
      const int b = std::countr_zero(v);
      if (free_[w].compare_exchange_weak(v, v & ~(uint64_t{1} << b), std::memory_order_acquire,
                                         std::memory_order_relaxed)) {
        return static_cast<int>(w * 64) + b;
      }
    }
  }
  return -1;
}

void FreeBits::give(int i) {
  if (i < 0 || static_cast<uint32_t>(i) >= n_) return;
  free_[i / 64].fetch_or(uint64_t{1} << (i % 64), std::memory_order_release);
}

Result<std::unique_ptr<EagerPool>> EagerPool::create(Adapter& a, uint32_t rings, uint32_t slots,
                                                     size_t max_bytes, int numa) {
  const size_t stride = wire::eager_stride(max_bytes);
  std::unique_ptr<EagerPool> p(new EagerPool());
  p->max_bytes_ = max_bytes;
  p->rings_ = rings;
  p->slots_ = slots;
  p->stride_ = stride;
  p->ring_bytes_ = static_cast<size_t>(slots) * stride;
  auto mem = NumaBuffer::allocate(p->ring_bytes_ * rings, numa);
  if (!mem.is_ok()) {
    return Status(mem.status().code(), "the eager pool's " +
                                           std::to_string(p->ring_bytes_ * rings) + " bytes on " +
                                           a.name + ": " + mem.status().message() +
                                           "; set a smaller SLUICE_EAGER_RINGS, SLUICE_EAGER_SLOTS "
                                           "or SLUICE_EAGER_MAX");
  }
  p->mem_ = std::move(mem).value();
  p->base_ = static_cast<char*>(p->mem_.data());
  p->mr_.reset(ibv_reg_mr(a.pd.get(), p->base_, p->ring_bytes_ * rings,
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
  if (!p->mr_) {
    return errno_status(Code::kSystemError,
                        "ibv_reg_mr of the eager pool (" + std::to_string(p->ring_bytes_ * rings) +
                            " bytes) on " + a.name +
                            "; set a smaller SLUICE_EAGER_RINGS, SLUICE_EAGER_SLOTS or "
                            "SLUICE_EAGER_MAX",
                        errno);
  }
  p->rings_free_.init(rings);
  p->books_free_.init(rings);
  p->recv_books_.reset(new eager::ReceiverBook[rings]);
  p->send_books_.reset(new eager::SenderBook[rings]);
  return p;
}

Status EagerPool::keys_on(Adapter& own, Adapter& other, uint32_t* lkey, uint32_t* rkey) {
  if (&other == &own) {
    *lkey = mr_->lkey;
    *rkey = mr_->rkey;
    return Status::ok();
  }
  for (const auto& [a, mr] : cross_) {
    if (a != &other) continue;
    *lkey = mr->lkey;
    *rkey = mr->rkey;
    return Status::ok();
  }
  verbs::Mr mr(ibv_reg_mr(other.pd.get(), base_, ring_bytes_ * rings_,
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
  if (!mr) {
    return errno_status(Code::kSystemError,
                        "ibv_reg_mr of " + own.name + "'s eager pool (" +
                            std::to_string(ring_bytes_ * rings_) + " bytes) on " + other.name +
                            " (a fused comm's member)",
                        errno);
  }
  *lkey = mr->lkey;
  *rkey = mr->rkey;
  cross_.emplace_back(&other, std::move(mr));
  return Status::ok();
}

Status eager_pool_keys(Adapter& own, Adapter& other, uint32_t* lkey, uint32_t* rkey,
                       bool* remembered) {
  std::lock_guard<std::mutex> lk(own.eager_mu);
  *remembered = false;
  if (!own.eager) return Status(Code::kInternalError, own.name + " has no eager pool");
  for (const auto& [a, refusal] : own.eager_refused) {
    if (a != &other) continue;
    *remembered = true;
    return refusal;
  }
  Status st = own.eager->keys_on(own, other, lkey, rkey);
  if (!st.is_ok()) own.eager_refused.emplace_back(&other, st);
  return st;
}

void EagerPool::release(int ring) {
  rings_free_.give(ring);
}

void EagerPool::release_send_book(int i) {
  books_free_.give(i);
}

Result<EagerPool*> eager_pool_of(Adapter& a, int numa) {
  const Config& cfg = engine()->config();
  if (cfg.eager_max <= 0 || cfg.eager_rings <= 0) return static_cast<EagerPool*>(nullptr);
  std::lock_guard<std::mutex> lk(a.eager_mu);
  if (!a.eager_error.empty()) return static_cast<EagerPool*>(nullptr);
  if (!a.eager) {
    static_assert(kEagerSlotsMin == static_cast<int>(wire::kEagerMinSlots) &&
                      kEagerSlotsMax == static_cast<int>(wire::kEagerMaxSlots),
                  "SLUICE_EAGER_SLOTS' bounds are the ring's");
    const uint32_t slots = std::bit_floor(static_cast<uint32_t>(cfg.eager_slots));
    auto p = EagerPool::create(a, static_cast<uint32_t>(cfg.eager_rings), slots,
                               static_cast<size_t>(cfg.eager_max), numa);
    if (!p.is_ok()) {
      // The eager path is an optimisation: its comms go by clear-to-send rather than fail.
      a.eager_error = p.status().message();
      SLUICE_WARN("%s: eager path off for every comm of this adapter: %s", a.name.c_str(),
                  a.eager_error.c_str());
      return static_cast<EagerPool*>(nullptr);
    }
    a.eager.reset(std::move(p).value().release());
    const wire::Crc32cChoice& crc = wire::crc32c_choice();
    SLUICE_INFO(kSubNet,
                "%s: eager pool of %d rings x %u slots x %zu bytes (%zu KiB registered, "
                "SLUICE_EAGER_MAX=%d) and %d receiver and sender books (%zu KiB); slot CRC32C by "
                "%s (4 KiB in %lld ns by %s, %lld ns by table)",
                a.name.c_str(), cfg.eager_rings, slots, a.eager->stride(), a.eager->bytes() / 1024,
                cfg.eager_max, cfg.eager_rings, a.eager->book_bytes() / 1024, crc.method,
                static_cast<long long>(crc.hardware_ns), crc.hardware_name,
                static_cast<long long>(crc.table_ns));
  }
  ++a.eager_users;
  return a.eager.get();
}

void eager_pool_unref(Adapter& a) {
  std::unique_ptr<EagerPool, EagerPoolDeleter> gone;
  {
    std::lock_guard<std::mutex> lk(a.eager_mu);
    if (a.eager_users == 0 || --a.eager_users > 0) return;
    gone = std::move(a.eager);  // every ring is back: nothing lands in it any more
  }
  SLUICE_INFO(kSubNet, "%s: eager pool released (its last comm closed)", a.name.c_str());
}

}  // namespace sluice
