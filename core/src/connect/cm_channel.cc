// The process's one rdma_cm event channel (cm_channel.h).
#include "connect/cm_channel.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>

#include "comm/fd_census.h"
#include "sluice/core/connect/cm_choice.h"

namespace sluice {

namespace {

struct Shared {
  std::mutex mu;
  rdma_event_channel* channel = nullptr;  // open while `boxes` is not empty
  uint64_t next_key = 1;
  std::unordered_map<uint64_t, std::deque<CmEvent>> boxes;  // per mailbox, its unread events
};

// Never destroyed: no static destructor may touch rdma_cm (the last mailbox closes the channel).
Shared& shared() {
  static Shared* s = new Shared;
  return *s;
}

uint64_t key_of(const rdma_cm_id* id) {
  return id == nullptr ? 0 : static_cast<uint64_t>(reinterpret_cast<uintptr_t>(id->context));
}

// A connect request nobody will take: refused, and its id (ours to destroy) destroyed.
void refuse(const CmEvent& e) {
  if (e.type != RDMA_CM_EVENT_CONNECT_REQUEST || e.id == nullptr) return;
  rdma_reject(e.id, nullptr, 0);
  rdma_destroy_id(e.id);
}

// Reads every pending event and files it (s.mu held). Errors other than "nothing pending" are
// returned; the events read before them stay filed.
Status drain(Shared& s) {
  for (;;) {
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(s.channel, &ev) != 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return Status::ok();
      return errno_status(Code::kSystemError, "rdma_get_cm_event", errno);
    }
    CmEvent e;
    e.type = ev->event;
    e.status = ev->status;
    e.id = ev->id;
    e.listen_id = ev->listen_id;
    e.qp_num = ev->param.conn.qp_num;
    if (ev->param.conn.private_data != nullptr) {
      e.pdata_len = std::min<size_t>(ev->param.conn.private_data_len, sizeof e.pdata);
      std::memcpy(e.pdata, ev->param.conn.private_data, e.pdata_len);
    }
    // A connect request's new id inherits its listen id's context; take the listener's anyway.
    // Read before the ack: once acknowledged, the id's owner may destroy (free) it.
    const uint64_t key = key_of(e.listen_id != nullptr ? e.listen_id : e.id);
    rdma_ack_cm_event(ev);
    auto it = s.boxes.find(key);
    if (it == s.boxes.end()) {
      refuse(e);  // its mailbox is gone (its ids were destroyed after the kernel queued this)
      continue;
    }
    it->second.push_back(e);
  }
}

}  // namespace

Result<std::unique_ptr<CmMailbox>> CmMailbox::open() {
  Shared& s = shared();
  std::lock_guard<std::mutex> lk(s.mu);
  if (s.channel == nullptr) {
    rdma_event_channel* ch = rdma_create_event_channel();
    if (ch == nullptr) {
      const int err = errno;
      if (fd_exhausted(err)) {
        return fd_exhausted_status("rdma_create_event_channel (opens /dev/infiniband/rdma_cm)",
                                   err);
      }
      return errno_status(Code::kSystemError,
                          "`modprobe rdma_ucm`: failed to create RDMA CM event channel "
                          "(/dev/infiniband/rdma_cm)",
                          err);
    }
    const int flags = fcntl(ch->fd, F_GETFL);
    if (flags < 0 || fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK) != 0) {
      const int err = errno;
      rdma_destroy_event_channel(ch);
      return errno_status(Code::kSystemError, "fcntl(O_NONBLOCK) on the rdma_cm event channel",
                          err);
    }
    s.channel = ch;
    fd_count_add(FdKind::kCmChannel, 1);
  }
  const uint64_t key = s.next_key++;
  s.boxes.emplace(key, std::deque<CmEvent>{});
  return std::unique_ptr<CmMailbox>(new CmMailbox(key));
}

CmMailbox::~CmMailbox() {
  Shared& s = shared();
  std::lock_guard<std::mutex> lk(s.mu);
  auto it = s.boxes.find(key_);
  if (it != s.boxes.end()) {
    for (const CmEvent& e : it->second) refuse(e);
    s.boxes.erase(it);
  }
  if (s.boxes.empty() && s.channel != nullptr) {
    // Every id was on a mailbox, and every mailbox's owner destroyed its ids before it: none is
    // left on the channel. Events still queued in the kernel were those ids' and went with them.
    rdma_destroy_event_channel(s.channel);
    s.channel = nullptr;
    fd_count_add(FdKind::kCmChannel, -1);
  }
}

rdma_event_channel* CmMailbox::channel() const {
  Shared& s = shared();
  std::lock_guard<std::mutex> lk(s.mu);
  return s.channel;
}

Result<bool> CmMailbox::next(CmEvent* e) {
  Shared& s = shared();
  std::lock_guard<std::mutex> lk(s.mu);
  Status st = drain(s);
  auto& box = s.boxes[key_];
  if (!box.empty()) {
    *e = box.front();
    box.pop_front();
    return true;
  }
  if (!st.is_ok()) return st;
  return false;
}

void CmMailbox::adopt(rdma_cm_id* id) {
  Shared& s = shared();
  std::lock_guard<std::mutex> lk(s.mu);
  id->context = context();
}

int CmMailbox::resolve_attempt(rdma_cm_id** id, const sockaddr_storage* src,
                               const sockaddr_storage& dst,
                               std::chrono::steady_clock::time_point until, const char** what) {
  if (*id != nullptr) rdma_destroy_id(*id);
  *id = nullptr;
  if (rdma_create_id(channel(), id, context(), RDMA_PS_TCP) != 0) {
    const int err = errno;
    *id = nullptr;
    *what = "rdma_create_id";
    return err;
  }
  sockaddr_storage d = dst;
  sockaddr_storage s{};
  if (src != nullptr) s = *src;  // port 0: rdma_cm picks one per id
  const long long left = std::max<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                 until - std::chrono::steady_clock::now())
                                                 .count(),
                                             1);
  if (rdma_resolve_addr(*id, src != nullptr ? reinterpret_cast<sockaddr*>(&s) : nullptr,
                        reinterpret_cast<sockaddr*>(&d),
                        static_cast<int>(std::min<long long>(kCmResolveAttemptMs, left))) != 0) {
    *what = "rdma_resolve_addr";
    return errno;
  }
  return 0;
}

}  // namespace sluice
