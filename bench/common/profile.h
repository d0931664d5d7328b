// The benchmarks as NCCL's core for the plugin's profiler events (docs/profiler.md): what init
// gets as ncclProfilerCallback_t and what isend/irecv get as phandle(s).
//   none  - init gets NULL and isend/irecv NULL handles (NCCL without a profiler plugin).
//   default - NCCL's callback with no profiler plugin loaded (NCCL passes one to every init from
//           net v10 on): returns success and leaves the handle alone; isend/irecv get a step
//           handle. What the plugin sees under NCCL unless a profiler is loaded.
//   count - a callback that counts starts and stops (the cost of events, measured by sluice-bench).
//   trace - the callback forwards to an NCCL profiler plugin (ncclProfiler_v5, e.g.
//           libsluice-trace-profiler.so) as NCCL's ncclProfilerCallback does: startEvent with an
//           ncclProfileNetPlugin descriptor, stopEvent with the handle it returned.
#pragma once

#include <cstdint>
#include <string>

#include "sluice/nccl_net_abi.h"

namespace bench {

enum class ProfMode { kNone, kCount, kTrace, kDefault };

// Before the Net is created. trace: `lib` is the profiler plugin to load, `rank` this process's
// rank for it; its output file is the profiler's business (SLUICE_TRACE_FILE).
void prof_setup(ProfMode mode, const std::string& lib, int rank);
ProfMode prof_mode();
ncclProfilerCallback_t prof_callback();  // NULL for none
void* prof_parent();                     // the phandle passed with every isend/irecv (NULL: none)
// After the Net is gone (every event stopped): trace: the profiler's finalize (it writes).
void prof_finish();

struct ProfCounts {
  uint64_t starts = 0, stops = 0;
};
ProfCounts prof_counts();

}  // namespace bench
