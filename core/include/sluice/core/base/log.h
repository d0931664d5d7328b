// Logging. The plugin layer installs NCCL's logger as the sink; standalone tools and tests get a
// stderr sink gated by SLUICE_LOG (WARN by default). Never writes to stdout.
//
// Levels and subsystem bits deliberately have the same numeric values NCCL uses, so the plugin
// layer can forward them unchanged; core itself never includes any NCCL declaration.
#pragma once

#include <cstdarg>

namespace sluice {

enum LogLevel : int { kLogNone = 0, kLogVersion = 1, kLogWarn = 2, kLogInfo = 3, kLogTrace = 5 };

enum LogSubsys : unsigned long {
  kSubInit = 0x1,
  kSubNet = 0x10,
  kSubGraph = 0x20,
  kSubEnv = 0x80,
  kSubAll = ~0ul,
};

using LogSink = void (*)(int level, unsigned long flags, const char* file, int line,
                         const char* fmt, ...);

// Installs the sink (NULL restores the stderr fallback). Thread safe.
void set_log_sink(LogSink sink);

// Level of the stderr fallback sink: from SLUICE_LOG (none|warn|info|trace), default warn.
void log_write(int level, unsigned long flags, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));

}  // namespace sluice

// WARN passes __FILE__, INFO/TRACE pass __func__, as NCCL itself does.
#define SLUICE_WARN(fmt, ...)                                                    \
  ::sluice::log_write(::sluice::kLogWarn, ::sluice::kSubAll, __FILE__, __LINE__, \
                      "NET/Sluice : " fmt, ##__VA_ARGS__)
#define SLUICE_INFO(flags, fmt, ...)                                                        \
  ::sluice::log_write(::sluice::kLogInfo, (flags), __func__, __LINE__, "NET/Sluice : " fmt, \
                      ##__VA_ARGS__)
#define SLUICE_TRACE(flags, fmt, ...)                                                        \
  ::sluice::log_write(::sluice::kLogTrace, (flags), __func__, __LINE__, "NET/Sluice : " fmt, \
                      ##__VA_ARGS__)
