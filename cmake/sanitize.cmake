# SLUICE_SANITIZE=address,undefined (any -fsanitize= list): instruments everything this project
# builds (the static libraries, the plugin, tests, tools, benchmarks) so a dlopen()ed, instrumented
# plugin always lands in an instrumented process. Every report is fatal (-fno-sanitize-recover=all),
# so a finding fails the test that hit it; LeakSanitizer runs at exit with AddressSanitizer.
# Build with gcc: it links the sanitizer runtimes into the shared plugin, which the plugin's
# -z defs link needs (clang does not). Run-time options: scripts/sanitizer-env.
set(SLUICE_SANITIZE "" CACHE STRING
    "Comma-separated sanitizers to build everything with, e.g. address,undefined (empty = none)")
if(SLUICE_SANITIZE)
  message(STATUS "sluice: building with -fsanitize=${SLUICE_SANITIZE}")
  add_compile_options(-fsanitize=${SLUICE_SANITIZE} -fno-sanitize-recover=all
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${SLUICE_SANITIZE})
  # Line tables only (-g1, after the build type's -g): all that a report's symbolized stack needs
  # (function, file:line). Full debug info made the sanitized build a third slower; the code is the
  # same. And -O1 (after the build type's -O2), everything: the level AddressSanitizer's own
  # documentation advises; the checks are the same at every level (ASan and UBSan instrument the
  # source's accesses and operations), and the shipped level, -O2, runs unsanitized in CI's first
  # pass. Measured (gcc 12, ASan+UBSan, CPU seconds), plugin_rdma_test.cc: -O2 -g 55.8, -O2 -g1
  # 41.3, -O1 -g1 23.7; core's engine.cc 22.3 -> 16.2, connect.cc 19.0 -> 11.9, datapath.cc
  # 7.8 -> 5.6 (-O2 -g1 -> -O1 -g1). The sanitized build runs beside CI's first pass; what it has
  # not finished by then CI waits for.
  add_compile_options(-g1 -O1)
  # hwloc's PCI plugin (hwloc_pci.so) loads libpciaccess, whose pci.ids table stays referenced
  # from libpciaccess's own data; hwloc dlclose()s the plugin with the last topology, the
  # references vanish with the unmapped library, and LeakSanitizer reports the table as leaked
  # from an unknown module (no suppression can name it). Keeping libpciaccess loaded for the
  # whole process keeps the table reachable: no report, no suppression.
  find_library(SLUICE_PCIACCESS_LIB NAMES libpciaccess.so.0 pciaccess)
  if(SLUICE_PCIACCESS_LIB)
    link_libraries("-Wl,--no-as-needed" ${SLUICE_PCIACCESS_LIB} "-Wl,--as-needed")
  endif()
endif()

# SLUICE_SANITIZER_PASS=ON (with SLUICE_SANITIZE; CI's sanitizer pass sets it): the default target
# builds only what that pass runs. Left out: the fuzz targets and their replay tests (the fuzz pass,
# scripts/fuzz, runs every corpus under clang's ASan + UBSan, leak checks included), the binaries of
# the tests labelled nosan (plugin_iwarp_test, plugin_lossy_two_host_test) and the trace profiler
# (only the benchmarks load it). docs/testing.md says what runs where.
option(SLUICE_SANITIZER_PASS "Build only what CI's sanitizer pass runs (with SLUICE_SANITIZE)" OFF)
if(SLUICE_SANITIZER_PASS AND NOT SLUICE_SANITIZE)
  message(FATAL_ERROR "SLUICE_SANITIZER_PASS=ON is for a SLUICE_SANITIZE build")
endif()
# sluice_not_in_sanitizer_pass(target...): out of the default target under SLUICE_SANITIZER_PASS.
function(sluice_not_in_sanitizer_pass)
  if(SLUICE_SANITIZER_PASS)
    set_target_properties(${ARGN} PROPERTIES EXCLUDE_FROM_ALL ON)
  endif()
endfunction()

# SLUICE_FUZZ=ON (clang only): libFuzzer targets in fuzz/. Everything is compiled with coverage
# instrumentation for libFuzzer plus ASan and UBSan (fatal reports); build the `sluice_fuzz`
# target (scripts/fuzz does): the plugin's -z defs link does not hold with clang's sanitizers.
option(SLUICE_FUZZ "Build fuzz/ targets with libFuzzer (clang), the build instrumented" OFF)
if(SLUICE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "SLUICE_FUZZ=ON needs clang (libFuzzer): configure with "
                        "CC=clang CXX=clang++")
  endif()
  if(SLUICE_SANITIZE)
    message(FATAL_ERROR "SLUICE_FUZZ=ON brings its own sanitizers; leave SLUICE_SANITIZE empty")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
                      -fno-omit-frame-pointer -g1)  # -g1: line tables, as in SLUICE_SANITIZE
  add_link_options(-fsanitize=address,undefined)
endif()
