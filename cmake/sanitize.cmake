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
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()
