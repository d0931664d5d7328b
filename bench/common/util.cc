#include "util.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstring>
#include <fstream>
#include <sstream>

namespace bench {

static std::string vstrf(const char* fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(nullptr, 0, fmt, ap2);
  va_end(ap2);
  std::string s(n > 0 ? n : 0, '\0');
  if (n > 0) vsnprintf(s.data(), s.size() + 1, fmt, ap);
  return s;
}

std::string strf(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vstrf(fmt, ap);
  va_end(ap);
  return s;
}

void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vstrf(fmt, ap);
  va_end(ap);
  throw BenchError(s);
}

uint64_t parse_size(const std::string& text) {
  if (text.empty()) fail("empty size");
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (...) {
    fail("bad size '%s'", text.c_str());
  }
  std::string unit = text.substr(pos);
  for (auto& c : unit) c = static_cast<char>(toupper(c));
  if (!unit.empty() && unit.back() == 'B') unit.pop_back();
  if (unit.size() == 2 && unit[1] == 'I') unit.pop_back();
  double mult = 1;
  if (unit.empty()) {
  } else if (unit == "K") {
    mult = 1024.0;
  } else if (unit == "M") {
    mult = 1024.0 * 1024;
  } else if (unit == "G") {
    mult = 1024.0 * 1024 * 1024;
  } else {
    fail("bad size unit in '%s' (use B, K, M, G)", text.c_str());
  }
  if (v < 0) fail("negative size '%s'", text.c_str());
  return static_cast<uint64_t>(std::llround(v * mult));
}

std::string format_size(uint64_t b) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  uint64_t v = b;
  while (u < 3 && v >= 1024 && v % 1024 == 0) {
    v /= 1024;
    ++u;
  }
  return strf("%llu %s", static_cast<unsigned long long>(v), units[u]);
}

std::vector<uint64_t> size_sweep(uint64_t lo, uint64_t hi, double factor) {
  if (lo == 0) lo = 1;
  if (factor <= 1.0) fail("size step factor must be > 1");
  std::vector<uint64_t> out;
  for (double s = static_cast<double>(lo); s <= static_cast<double>(hi) * 1.000001; s *= factor) {
    uint64_t v = static_cast<uint64_t>(std::llround(s));
    if (out.empty() || v != out.back()) out.push_back(v);
  }
  return out;
}

CpuTimes CpuTimes::now() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto tv = [](const timeval& t) { return t.tv_sec + t.tv_usec * 1e-6; };
  return {tv(ru.ru_utime), tv(ru.ru_stime)};
}

uint64_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  unsigned long long size = 0, resident = 0;
  f >> size >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

CmdResult run_cmd(const std::vector<std::string>& argv, double timeout_s, bool merge_stderr) {
  CmdResult r;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return r;
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return r;
  }
  if (pid == 0) {
    setpgid(0, 0);
    dup2(fds[1], 1);
    if (merge_stderr) {
      dup2(fds[1], 2);
    } else {
      int devnull = open("/dev/null", O_WRONLY);
      if (devnull >= 0) dup2(devnull, 2);
    }
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    fprintf(stderr, "cannot run %s: %s\n", args[0], strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);
  close(fds[1]);
  Deadline dl(timeout_s, "running " + argv[0]);
  char buf[4096];
  for (;;) {
    pollfd p{fds[0], POLLIN, 0};
    int left_ms = static_cast<int>(std::max(0.0, dl.left()) * 1000);
    int n = poll(&p, 1, std::min(left_ms, 200));
    if (n > 0) {
      ssize_t k = read(fds[0], buf, sizeof buf);
      if (k > 0) {
        r.out.append(buf, k);
        continue;
      }
      if (k == 0) break;
      if (errno != EINTR) break;
    }
    if (dl.expired()) {
      r.timed_out = true;
      kill(-pid, SIGKILL);
      break;
    }
  }
  close(fds[0]);
  int st = 0;
  // The pipe closed (or we killed it): the child is exiting; bound the wait anyway.
  for (;;) {
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) {
      st = -1;
      break;
    }
    if (dl.left() < -5) {
      kill(-pid, SIGKILL);
      r.timed_out = true;
    }
    usleep(10000);
  }
  if (WIFEXITED(st)) {
    r.status = WEXITSTATUS(st);
  } else if (WIFSIGNALED(st)) {
    r.status = 128 + WTERMSIG(st);
  }
  return r;
}

VerbsObjects VerbsObjects::of_pid(int pid) {
  VerbsObjects v;
  std::string want = std::to_string(pid);
  auto count = [&](const char* what, long* n, long* cqe) {
    CmdResult r = run_cmd({"rdma", "resource", "show", what}, 20, false);
    if (r.status != 0) return false;
    std::istringstream in(r.out);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      std::vector<std::string> tok;
      std::string t;
      while (ls >> t) tok.push_back(t);
      bool mine = false;
      long entries = 0;
      for (size_t i = 0; i + 1 < tok.size(); ++i) {
        if (tok[i] == "pid" && tok[i + 1] == want) mine = true;
        if (tok[i] == "cqe") entries = atol(tok[i + 1].c_str());
      }
      if (mine) {
        ++*n;
        if (cqe) *cqe += entries;
      }
    }
    return true;
  };
  bool ok = count("qp", &v.qps, nullptr);
  ok = count("cq", &v.cqs, &v.cqes) && ok;
  ok = count("mr", &v.mrs, nullptr) && ok;
  ok = count("pd", &v.pds, nullptr) && ok;
  v.valid = ok;
  return v;
}

Table::Cell Table::num(double v, const char* fmt) {
  if (std::isnan(v)) return {"-", v, true};
  return {strf(fmt, v), v, true};
}
Table::Cell Table::integer(long long v) {
  return {std::to_string(v), static_cast<double>(v), true};
}
Table::Cell Table::text(std::string s) {
  return {std::move(s), NAN, false};
}

void Table::print(FILE* f) const {
  std::vector<size_t> w(cols_.size());
  for (size_t i = 0; i < cols_.size(); ++i) w[i] = cols_[i].size();
  for (auto& r : rows_)
    for (size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].text.size());
  fprintf(f, "#");
  for (size_t i = 0; i < cols_.size(); ++i)
    fprintf(f, " %*s", static_cast<int>(w[i]), cols_[i].c_str());
  fprintf(f, "\n");
  for (auto& r : rows_) {
    fprintf(f, " ");
    for (size_t i = 0; i < r.size() && i < w.size(); ++i)
      fprintf(f, " %*s", static_cast<int>(w[i]), r[i].text.c_str());
    fprintf(f, "\n");
  }
  fflush(f);
}

static std::string csv_field(const Table::Cell& c) {
  if (c.numeric) {
    if (std::isnan(c.value)) return "";
    return strf("%.9g", c.value);
  }
  if (c.text.find_first_of(",\"\n") == std::string::npos) return c.text;
  std::string s = "\"";
  for (char ch : c.text) {
    if (ch == '"') s += '"';
    s += ch;
  }
  return s + "\"";
}

void Table::write_csv(const std::string& path) const {
  FILE* f = fopen(path.c_str(), "w");
  if (!f) fail("cannot write %s: %s", path.c_str(), strerror(errno));
  for (size_t i = 0; i < cols_.size(); ++i) fprintf(f, "%s%s", i ? "," : "", cols_[i].c_str());
  fprintf(f, "\n");
  for (auto& r : rows_) {
    for (size_t i = 0; i < r.size(); ++i) fprintf(f, "%s%s", i ? "," : "", csv_field(r[i]).c_str());
    fprintf(f, "\n");
  }
  if (fclose(f) != 0) fail("cannot write %s: %s", path.c_str(), strerror(errno));
}

std::string json_escape(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        o += "\\\"";
        break;
      case '\\':
        o += "\\\\";
        break;
      case '\n':
        o += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          o += strf("\\u%04x", c);
        } else {
          o += c;
        }
    }
  }
  return o + "\"";
}

std::string Table::json() const {
  std::string o = "{\"name\": " + json_escape(name_) + ", \"rows\": [";
  for (size_t r = 0; r < rows_.size(); ++r) {
    o += r ? ",\n  {" : "\n  {";
    for (size_t i = 0; i < rows_[r].size() && i < cols_.size(); ++i) {
      const Cell& c = rows_[r][i];
      o += (i ? ", " : "") + json_escape(cols_[i]) + ": ";
      if (c.numeric) {
        o += std::isnan(c.value) ? "null" : strf("%.9g", c.value);
      } else {
        o += json_escape(c.text);
      }
    }
    o += "}";
  }
  return o + "]}";
}

}  // namespace bench
