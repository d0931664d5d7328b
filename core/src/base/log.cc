#include "sluice/core/base/log.h"

#include <atomic>
#include <cstdio>
#include <cstring>

#include "sluice/core/base/config.h"

namespace sluice {
namespace {

std::atomic<LogSink> g_sink{nullptr};

int stderr_level() {
  // Read once; this is the stderr fallback only (NCCL's logger applies NCCL_DEBUG itself).
  static const int level = log_level_from_environment();
  return level;
}

const char* level_name(int level) {
  switch (level) {
    case kLogWarn:
      return "WARN";
    case kLogInfo:
      return "INFO";
    case kLogTrace:
      return "TRACE";
    default:
      return "LOG";
  }
}

}  // namespace

void set_log_sink(LogSink sink) {
  g_sink.store(sink, std::memory_order_release);
}

void log_write(int level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  LogSink sink = g_sink.load(std::memory_order_acquire);
  if (sink != nullptr) {
    sink(level, flags, file, line, "%s", msg);
    return;
  }
  if (level > stderr_level()) return;
  std::fprintf(stderr, "sluice %s %s\n", level_name(level), msg);
}

}  // namespace sluice
