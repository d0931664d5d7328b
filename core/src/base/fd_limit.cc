#include "sluice/core/base/fd_limit.h"

#include <sys/resource.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "sluice/core/base/log.h"

namespace sluice {
namespace {

uint64_t as_u64(rlim_t v) {
  return v == RLIM_INFINITY ? UINT64_MAX : static_cast<uint64_t>(v);
}

std::string num(uint64_t v) {
  return v == UINT64_MAX ? std::string("unlimited") : std::to_string(v);
}

uint64_t read_nr_open() {
  FILE* f = std::fopen("/proc/sys/fs/nr_open", "r");
  unsigned long long v = 0;
  if (f != nullptr) {
    if (std::fscanf(f, "%llu", &v) != 1) v = 0;
    std::fclose(f);
  }
  return v > 0 ? v : 1048576;  // the kernel's default nr_open
}

}  // namespace

FdLimit read_fd_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return {};
  return {as_u64(r.rlim_cur), as_u64(r.rlim_max), true};
}

FdRaise raise_fd_limit(uint64_t nr_open) {
  FdRaise out;
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) {
    out.error = std::string("getrlimit(RLIMIT_NOFILE) failed: ") + std::strerror(errno);
    return out;
  }
  out.before = out.after = as_u64(r.rlim_cur);
  out.hard = as_u64(r.rlim_max);
  rlim_t target = r.rlim_max;
  if (target == RLIM_INFINITY) {  // NOFILE cannot be infinite: the kernel caps it at nr_open
    target = static_cast<rlim_t>(nr_open > 0 ? nr_open : read_nr_open());
  }
  if (r.rlim_cur != RLIM_INFINITY && r.rlim_cur >= target) return out;  // nothing to raise
  rlimit want = r;
  want.rlim_cur = target;
  if (setrlimit(RLIMIT_NOFILE, &want) != 0) {
    out.error = std::string("setrlimit(RLIMIT_NOFILE, ") + num(as_u64(target)) +
                ") failed: " + std::strerror(errno);
    return out;
  }
  out.after = as_u64(target);
  return out;
}

void raise_fd_limit_at_init() {
  static std::once_flag once;
  std::call_once(once, [] {
    const FdRaise r = raise_fd_limit();
    if (r.error.empty()) {
      SLUICE_INFO(kSubInit, "%s", r.text().c_str());
    } else {
      SLUICE_WARN("%s; raise it before the job starts (`ulimit -n`, `LimitNOFILE=`)",
                  r.text().c_str());
    }
  });
}

std::string FdRaise::text() const {
  std::string t = "RLIMIT_NOFILE: ";
  if (!error.empty()) {
    t += "soft limit " + num(before) + " (hard " + num(hard) + ") could not be raised: " + error;
  } else if (after > before) {
    t += "soft limit raised from " + num(before) + " to " + num(after) +
         (after == hard ? " (the hard limit)" : " (fs.nr_open; the hard limit is unlimited)");
  } else {
    t += "soft limit " + num(before) + " already at the hard limit (" + num(hard) + ")";
  }
  return t + ": every comm keeps a socket open for its life";
}

std::string fd_exhausted_text(const std::string& what, int err, const FdLimit& limit,
                              const SluiceFds& held) {
  std::string t = what + " failed: " + std::strerror(err) + " (" +
                  (err == ENFILE ? "ENFILE" : "EMFILE") + "): ";
  const std::string lim =
      limit.known ? "soft " + num(limit.soft) + ", hard " + num(limit.hard) : "unreadable";
  if (err == ENFILE) {
    t += "the system-wide limit of open files (fs.file-max) is reached (this process's "
         "RLIMIT_NOFILE: " +
         lim + ")";
  } else {
    t += "this process has reached its limit of open files (RLIMIT_NOFILE " + lim + ")";
  }
  t += "; Sluice's comms hold " + std::to_string(held.total()) + " of them (" +
       std::to_string(held.peer_links) + " peer links, " + std::to_string(held.comm_sockets) +
       " comm sockets, " + std::to_string(held.listen_sockets) + " listening sockets, " +
       std::to_string(held.handshakes) + " handshakes and " + std::to_string(held.connects) +
       " connects in progress, " + std::to_string(held.cm_channels) +
       " rdma_cm channel(s)); comms share one socket per peer process (a peer link), and each "
       "connection being set up holds one until it is done. Fix: ";
  if (err == ENFILE) {
    t += "raise `sysctl fs.file-max` on this host, or close what else holds files here";
  } else {
    t += "start the job with a higher limit: `ulimit -n` up to the hard limit (Sluice's init "
         "already raises the soft limit to it), and raise the hard limit itself with `ulimit -Hn` "
         "as root, `nofile` in /etc/security/limits.conf, `LimitNOFILE=` in a systemd unit or "
         "`--ulimit nofile=` for a container; allow the connections per process plus a few "
         "hundred";
  }
  return t;
}

}  // namespace sluice
