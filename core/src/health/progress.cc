// Progress watchdog's pure logic (see progress.h for the rules).
#include "health/progress.h"

#include <cmath>
#include <cstdio>

namespace sluice {

double rc_retry_bound_ms(int ib_timeout, int retry_cnt) {
  return 4.096e-3 * std::ldexp(1.0, ib_timeout) * (retry_cnt + 1);
}

long long progress_bound_ms(int ib_timeout, int retry_cnt) {
  return static_cast<long long>(std::ceil(rc_retry_bound_ms(ib_timeout, retry_cnt) * 1.5)) + 1000;
}

long long progress_bytes_ms(uint64_t bytes) {
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  // bytes <= kMaxQps x 256 sends x 1 GiB: the product stays far below 2^63.
  return static_cast<long long>((bytes * kProgressMsPerMiB + kMiB - 1) / kMiB);
}

int progress_check(int64_t* since_ns, const bool* outstanding, int nqps, int64_t now_ns,
                   long long bound_ms, long long* waited_ms, const long long* extra_ms) {
  int worst = -1;
  long long worst_ms = 0;
  for (int q = 0; q < nqps; ++q) {
    if (!outstanding[q]) {
      since_ns[q] = 0;
      continue;
    }
    if (since_ns[q] == 0) {
      since_ns[q] = now_ns;
      continue;
    }
    const long long ms = (now_ns - since_ns[q]) / 1000000;
    const long long bound = bound_ms + (extra_ms != nullptr ? extra_ms[q] : 0);
    if (ms > bound && ms > worst_ms) {
      worst = q;
      worst_ms = ms;
    }
  }
  *waited_ms = worst_ms;
  return worst;
}

bool cts_tail_unproven(const CtsTail& t, uint64_t completed_hi) {
  return t.unsignaled > 0 && t.outstanding == t.unsignaled && completed_hi <= t.from;
}

bool cts_tail_check(const CtsTail& t, uint64_t completed_hi, bool received, int64_t now_ns,
                    long long bound_ms, int64_t* since_ns, bool* watched) {
  if (t.outstanding > t.unsignaled) {  // signaled work (a CTS write or a probe): its completion
    *watched = true;
    return false;
  }
  *watched = cts_tail_unproven(t, completed_hi);
  if (!*watched) return false;
  if (received) *since_ns = 0;  // progress: progress_check restarts the clock at now
  if (*since_ns == 0) return false;
  return (now_ns - *since_ns) / 1000000 >= cts_probe_after_ms(bound_ms);
}

int64_t cts_probe_posted(int64_t since_ns, int64_t now_ns, long long bound_ms) {
  const int64_t latest = now_ns - cts_probe_after_ms(bound_ms) * 1000000;
  return since_ns > latest ? since_ns : latest;
}

std::string progress_reason(const std::string& qp, const char* what, long long waited_ms,
                            long long bound_ms, int ib_timeout, int retry_cnt, bool from_knob,
                            uint64_t bytes) {
  char rc[32];
  std::snprintf(rc, sizeof rc, "%.1f", rc_retry_bound_ms(ib_timeout, retry_cnt));
  const long long extra = progress_bytes_ms(bytes);
  const std::string data = bytes == 0
                               ? std::string()
                               : std::to_string(bound_ms) + " ms + " + std::to_string(extra) +
                                     " ms for up to " + std::to_string(bytes) +
                                     " bytes before the QP's next signaled completion at " +
                                     std::to_string(kProgressMsPerMiB) + " ms per MiB; ";
  return std::string("no progress on ") + qp + ": the oldest posted " + what + " waited " +
         std::to_string(waited_ms) + " ms with no completion, bound " +
         std::to_string(bound_ms + extra) + " ms (" + data +
         (from_knob ? "SLUICE_PROGRESS_TIMEOUT_MS; " : "") + "RC retry bound " + rc +
         " ms = 4.096 us x 2^" + std::to_string(ib_timeout) + " (NCCL_IB_TIMEOUT) x " +
         std::to_string(retry_cnt + 1) + " (NCCL_IB_RETRY_CNT + 1)" +
         (from_knob ? "" : ", x 1.5 + 1 s") +
         "); likely cause: no completion within the RC "
         "retry bound: packets lost on the path and the NIC/driver keeps retrying (Soft-RoCE "
         "retries forever at NCCL_IB_RETRY_CNT=7), or the peer's NIC is stuck";
}

}  // namespace sluice
