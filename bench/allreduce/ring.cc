#include "ring.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace bench {

namespace {
float* alloc_floats(size_t n) {
  size_t bytes = (std::max<size_t>(n, 1) * sizeof(float) + 4095) / 4096 * 4096;
  auto* p = static_cast<float*>(aligned_alloc(4096, bytes));
  if (!p) fail("cannot allocate %zu bytes", bytes);
  memset(p, 0, bytes);
  return p;
}
}  // namespace

Ring::Ring(Net& net, void* send_comm, void* recv_comm, int rank, int nranks, size_t chunk_bytes,
           int window, size_t max_count)
    : net_(net),
      send_(send_comm),
      recv_(recv_comm),
      rank_(rank),
      n_(nranks),
      chunk_elems_(std::max<size_t>(1, chunk_bytes / sizeof(float))),
      window_(window),
      max_count_(max_count) {
  in_ = alloc_floats(max_count);
  out_ = alloc_floats(max_count);
  stage_ = alloc_floats(chunk_elems_ * window_);
  size_t bytes = std::max<size_t>(max_count, 1) * sizeof(float);
  if (n_ > 1) {
    mh_in_send_ = net_.reg(send_, in_, bytes);
    mh_out_send_ = net_.reg(send_, out_, bytes);
    mh_out_recv_ = net_.reg(recv_, out_, bytes);
    mh_stage_recv_ = net_.reg(recv_, stage_, chunk_elems_ * window_ * sizeof(float));
  }
  sreq_.assign(window_, nullptr);
  rreq_.assign(window_, nullptr);
}

Ring::~Ring() {
  try {
    if (n_ > 1) {
      net_.dereg(send_, mh_in_send_);
      net_.dereg(send_, mh_out_send_);
      net_.dereg(recv_, mh_out_recv_);
      net_.dereg(recv_, mh_stage_recv_);
    }
  } catch (const std::exception& e) {
    fprintf(stderr, "allreduce: warning: %s\n", e.what());
  }
  free(in_);
  free(out_);
  free(stage_);
}

void Ring::plan(size_t count, bool in_place) {
  sends_.clear();
  recvs_.clear();
  const size_t per = (count + n_ - 1) / n_;
  auto seg = [&](int k, size_t* off, size_t* len) {
    size_t b = std::min(count, static_cast<size_t>(k) * per);
    size_t e = std::min(count, b + per);
    *off = b;
    *len = e - b;
  };
  auto mod = [&](int x) { return ((x % n_) + n_) % n_; };
  const int steps = 2 * (n_ - 1);
  std::vector<int64_t> recv_step_start(steps + 1, 0);
  for (int s = 0; s < steps; ++s) {
    const bool rs = s < n_ - 1;
    const int send_seg = rs ? mod(rank_ - s) : mod(rank_ + 1 - (s - (n_ - 1)));
    const int recv_seg = rs ? mod(rank_ - s - 1) : mod(rank_ - (s - (n_ - 1)));
    size_t soff, slen, roff, rlen;
    seg(send_seg, &soff, &slen);
    seg(recv_seg, &roff, &rlen);
    // Sends of step s forward receives of step s-1 (same segment, same chunking).
    const float* src = (s == 0 && !in_place) ? in_ : out_;
    for (size_t c = 0, i = 0; c < slen; c += chunk_elems_, ++i) {
      size_t len = std::min(chunk_elems_, slen - c);
      int64_t dep = s == 0 ? -1 : recv_step_start[s - 1] + static_cast<int64_t>(i);
      sends_.push_back({reinterpret_cast<char*>(const_cast<float*>(src + soff + c)),
                        len * sizeof(float), soff + c, dep, false});
    }
    recv_step_start[s] = static_cast<int64_t>(recvs_.size());
    for (size_t c = 0; c < rlen; c += chunk_elems_) {
      size_t len = std::min(chunk_elems_, rlen - c);
      // Reduce-scatter receives land in a staging slot (set when posted); all-gather ones in out.
      recvs_.push_back({rs ? nullptr : reinterpret_cast<char*>(out_ + roff + c),
                        len * sizeof(float), roff + c, -1, rs});
    }
  }
  recv_step_start[steps] = static_cast<int64_t>(recvs_.size());
}

void Ring::allreduce(size_t count, bool in_place, const Deadline& dl) {
  if (count > max_count_)
    fail("allreduce of %zu elements exceeds the %zu allocated", count, max_count_);
  if (n_ == 1) {
    if (!in_place) memcpy(out_, in_, count * sizeof(float));
    return;
  }
  plan(count, in_place);
  const size_t ns = sends_.size(), nr = recvs_.size();
  const size_t w = static_cast<size_t>(window_);
  size_t sp = 0, sc = 0, rp = 0, rc = 0;
  const int tag_send = rank_, tag_recv = (rank_ + n_ - 1) % n_;
  unsigned spins = 0, idle = 0;
  while (sc < ns || rc < nr) {
    const size_t before = sp + sc + rp + rc;
    while (rp < nr && rp - rc < w) {
      Op& o = recvs_[rp];
      char* dst = o.reduce ? reinterpret_cast<char*>(stage_ + (rp % w) * chunk_elems_) : o.ptr;
      void* mh = o.reduce ? mh_stage_recv_ : mh_out_recv_;
      void* r = net_.irecv(recv_, dst, o.bytes, tag_recv, mh);
      if (!r) break;
      rreq_[rp % w] = r;
      ++rp;
    }
    while (sp < ns && sp - sc < w && sends_[sp].dep < static_cast<int64_t>(rc)) {
      Op& o = sends_[sp];
      const bool from_in = !in_place && o.dep < 0;  // step 0 of an out-of-place call
      void* r = net_.isend(send_, o.ptr, o.bytes, tag_send, from_in ? mh_in_send_ : mh_out_send_);
      if (!r) break;
      sreq_[sp % w] = r;
      ++sp;
    }
    while (rc < rp) {
      size_t got = 0;
      if (!net_.test(rreq_[rc % w], &got)) break;
      Op& o = recvs_[rc];
      if (got != o.bytes)
        fail("rank %d: receive %zu of the ring got %zu bytes, expected %zu", rank_, rc, got,
             o.bytes);
      if (o.reduce) {
        const float* st = stage_ + (rc % w) * chunk_elems_;
        const float* a = in_place ? out_ + o.offset : in_ + o.offset;
        float* d = out_ + o.offset;
        const size_t n = o.bytes / sizeof(float);
        for (size_t i = 0; i < n; ++i) d[i] = a[i] + st[i];
      }
      ++rc;
    }
    while (sc < sp) {
      if (!net_.test(sreq_[sc % w], nullptr)) break;
      ++sc;
    }
    if (sp + sc + rp + rc != before) {
      idle = 0;
    } else if (!pure_spin_ && ++idle >= 128) {
      idle = 0;
      // Nothing to do for a while: let the neighbours (and the NIC emulation) run.
      if (idle_sleep_us_ > 0) {
        usleep(idle_sleep_us_);
      } else {
        sched_yield();
      }
    }
    if ((++spins & 1023) == 0 && dl.expired())
      fail(
          "rank %d: allreduce of %s stalled: sent %zu/%zu chunks (posted %zu), received %zu/%zu "
          "(posted %zu); "
          "a neighbour is stuck or gone (%s)",
          rank_, format_size(count * sizeof(float)).c_str(), sc, ns, sp, rc, nr, rp,
          dl.what().c_str());
  }
}

}  // namespace bench
