// Small helpers shared by the benchmarks: deadlines, sizes, CPU/RSS accounting, result tables.
// Benchmarks are programs, not libraries: a failure throws BenchError and main() prints it and
// exits non-zero.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace bench {

struct BenchError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// printf-style formatting into a std::string.
std::string strf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
[[noreturn]] void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

using Clock = std::chrono::steady_clock;
inline double now_s() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

// A wall-clock bound on one phase. check() throws "timed out after Ns <what>" once expired.
class Deadline {
 public:
  Deadline(double seconds, std::string what) : end_(now_s() + seconds), s_(seconds), what_(what) {}
  bool expired() const { return now_s() > end_; }
  double left() const { return end_ - now_s(); }
  void check() const {
    if (expired()) fail("timed out after %.0f s %s", s_, what_.c_str());
  }
  const std::string& what() const { return what_; }

 private:
  double end_;
  double s_;
  std::string what_;
};

// "8", "4K", "4KiB", "1M", "64MiB", "1G" -> bytes (binary multiples).
uint64_t parse_size(const std::string& text);
// 8 -> "8 B", 65536 -> "64 KiB", 1 << 20 -> "1 MiB" (exact binary units when possible).
std::string format_size(uint64_t bytes);
// Geometric sequence lo, lo*f, ... <= hi (always contains lo and, if reachable, hi).
std::vector<uint64_t> size_sweep(uint64_t lo, uint64_t hi, double factor);

struct CpuTimes {
  double user_s = 0, sys_s = 0;
  static CpuTimes now();  // getrusage(RUSAGE_SELF): every thread of this process
  CpuTimes operator-(const CpuTimes& o) const { return {user_s - o.user_s, sys_s - o.sys_s}; }
  double total() const { return user_s + sys_s; }
};
// Resident set size of this process in bytes (from /proc/self/statm).
uint64_t rss_bytes();

// Verbs objects owned by one process as the iproute2 `rdma resource show` tool reports them.
struct VerbsObjects {
  bool valid = false;  // false when the rdma tool is missing or prints nothing usable
  long qps = 0, cqs = 0, cqes = 0, mrs = 0, pds = 0;
  static VerbsObjects of_pid(int pid);
};

// Runs a shell command, returns its stdout (stderr merged when merge_stderr) and exit status.
// Killed (SIGKILL to its process group) when `timeout_s` passes.
struct CmdResult {
  int status = -1;  // exit code, or 128+signal, or -1 when it could not be started
  bool timed_out = false;
  std::string out;
};
CmdResult run_cmd(const std::vector<std::string>& argv, double timeout_s, bool merge_stderr = true);

// A result table: printed for people, written as CSV/JSON for scripts.
class Table {
 public:
  Table(std::string name, std::vector<std::string> columns)
      : name_(std::move(name)), cols_(std::move(columns)) {}
  // Cells: text as shown; numeric cells also carry a value for CSV/JSON (nan = empty).
  struct Cell {
    std::string text;
    double value;
    bool numeric;
  };
  static Cell num(double v, const char* fmt = "%.2f");
  static Cell integer(long long v);
  static Cell text(std::string s);
  void add(std::vector<Cell> row) { rows_.push_back(std::move(row)); }
  void print(FILE* f) const;
  void write_csv(const std::string& path) const;
  std::string json() const;  // {"name":..., "rows":[{col: value, ...}, ...]}
  const std::string& name() const { return name_; }
  bool empty() const { return rows_.empty(); }

 private:
  std::string name_;
  std::vector<std::string> cols_;
  std::vector<std::vector<Cell>> rows_;
};

std::string json_escape(const std::string& s);

}  // namespace bench
