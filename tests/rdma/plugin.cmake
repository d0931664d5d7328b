# Plugin tests: the ABI checks (label unit: no RDMA device needed) and the data-path tests through
# the exported tables (label rdma, run inside scripts/rdma-bed). Included by tests/CMakeLists.txt.
set(SLUICE_ABI_TEST_DIR ${CMAKE_CURRENT_LIST_DIR}/../abi)

# Exactly ncclNetPlugin_v8 .. v12 are exported (nm -D --defined-only).
add_test(NAME abi_symbols
         COMMAND ${CMAKE_COMMAND} -DLIB=$<TARGET_FILE:nccl-net-sluice> -DNM=${CMAKE_NM}
                 -P ${SLUICE_ABI_TEST_DIR}/check_exports.cmake)
set_tests_properties(abi_symbols PROPERTIES LABELS "unit;abi" TIMEOUT 60)

# Every versioned libibverbs/librdmacm symbol the .so imports is at or below the oldest supported
# rdma-core (28: IBVERBS_1.8, RDMACM_1.2; README "Supported rdma-core"), so it loads there.
find_program(SLUICE_OBJDUMP NAMES objdump REQUIRED)
add_test(NAME abi_rdma_core_floor
         COMMAND ${CMAKE_COMMAND} -DLIB=$<TARGET_FILE:nccl-net-sluice> -DOBJDUMP=${SLUICE_OBJDUMP}
                 -DIBVERBS_FLOOR=1.8 -DRDMACM_FLOOR=1.2
                 -P ${SLUICE_ABI_TEST_DIR}/check_symbol_floor.cmake)
set_tests_properties(abi_rdma_core_floor PROPERTIES LABELS "unit;abi" TIMEOUT 60)

# A C program dlopens the plugin as NCCL does and checks every table (compiled as C on purpose:
# nccl_net_abi.h must be valid C and its _Static_asserts must hold there too).
add_executable(abi_dlopen_c_test ${SLUICE_ABI_TEST_DIR}/dlopen_c_test.c)
set_target_properties(abi_dlopen_c_test PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON
                                                   LINKER_LANGUAGE C)
target_link_libraries(abi_dlopen_c_test PRIVATE sluice_nccl_abi ${CMAKE_DL_LIBS})
target_compile_definitions(abi_dlopen_c_test PRIVATE
                           SLUICE_PLUGIN_PATH="$<TARGET_FILE:nccl-net-sluice>")
add_dependencies(abi_dlopen_c_test nccl-net-sluice)
add_test(NAME abi_dlopen_c COMMAND abi_dlopen_c_test)
set_tests_properties(abi_dlopen_c PROPERTIES LABELS "unit;abi" TIMEOUT 120)

# Data path through the exported tables (dlopen RTLD_NOW | RTLD_LOCAL, like NCCL).
add_executable(plugin_rdma_test ${CMAKE_CURRENT_LIST_DIR}/plugin_rdma_test.cc
                                ${CMAKE_CURRENT_LIST_DIR}/plugin_rdma_stress_test.cc
                                ${CMAKE_CURRENT_LIST_DIR}/plugin_rdma_cost_test.cc
                                ${CMAKE_CURRENT_LIST_DIR}/plugin_rdma_cts_test.cc
                                ${CMAKE_CURRENT_LIST_DIR}/plugin_rdma_mr_test.cc
                                ${CMAKE_CURRENT_LIST_DIR}/plugin_profiler_test.cc)
# Core's public headers for protocol constants only (wire.h); the test still reaches the plugin
# through dlopen, never links core.
target_include_directories(plugin_rdma_test PRIVATE ${CMAKE_CURRENT_LIST_DIR}
                           $<TARGET_PROPERTY:sluice_core,INTERFACE_INCLUDE_DIRECTORIES>)
target_link_libraries(plugin_rdma_test PRIVATE sluice_nccl_abi GTest::gtest Threads::Threads
                                               PkgConfig::IBVERBS ${CMAKE_DL_LIBS})
target_compile_definitions(plugin_rdma_test PRIVATE
                           SLUICE_PLUGIN_PATH="$<TARGET_FILE:nccl-net-sluice>")
add_dependencies(plugin_rdma_test nccl-net-sluice)

# Configuration is read once per process at the first init, so each NCCL_IB_QPS_PER_CONNECTION /
# NCCL_IB_SPLIT_DATA_ON_QPS combination gets its own process (and its own bed). With one QP both
# split modes are the same path; with 4 the data-path tests run whole-message (0, NCCL's default)
# and split (1).
set(SLUICE_PLUGIN_DATA_TESTS
    "*Transfer*:*Grouped*:*InFlight*:TwoProcess*:*Versions*:Cost*:Coalesce*:CtsPublish*:*Profiler*")
# The tests that count the clear-to-send protocol exactly (a clear-to-send WRITE and its profiler
# event per receive, WRs and packets per message of the rendezvous path) hold only where a
# receive's clear-to-send is never held back: with the eager path off. Where it is on (the
# default, one-path comms) a receive whose message comes eagerly has none (docs/eager.md); the
# eager path's own counts are core_eager's and ProfilerEager's. So every one-path matrix below runs
# without them, and plugin_rdma_noeager and plugin_rdma_qps4_noeager run them (and, the first, the
# whole matrix) with SLUICE_EAGER_MAX=0. Fused and standby comms have the eager path too
# (SLUICE_EAGER_FUSED): their runs leave the counts out, and plugin_rdma_fused_noeager runs them
# over the fused device with it off (a standby path carries no clear-to-send while the primary is
# up: its comm counts what a one-path comm does).
set(SLUICE_PLUGIN_CTS_COUNTS "Cost*:CtsPublish*:*Profiler.EveryWorkRequestStartsAndStopsUnderItsParent*")
set(SLUICE_PLUGIN_EAGER_DATA_TESTS "${SLUICE_PLUGIN_DATA_TESTS}-${SLUICE_PLUGIN_CTS_COUNTS}")
sluice_add_rdma_test(NAME plugin_rdma_qps1
                     COMMAND $<TARGET_FILE:plugin_rdma_test>
                             --gtest_filter=-Stress*:Lifecycle*:${SLUICE_PLUGIN_CTS_COUNTS})
# SLUICE_CM=oob: the matrix in oob mode, checked per connection (rdma_env.h, check_cm_used);
# rdmacm.cmake runs it through rdma_cm.
set_property(TEST plugin_rdma_qps1 APPEND PROPERTY ENVIRONMENT NCCL_IB_QPS_PER_CONNECTION=1
                                                              SLUICE_CM=oob)
# The whole matrix with the eager path off (SLUICE_EAGER_MAX=0: every message by clear-to-send), the
# counts of the clear-to-send protocol among it. The eager path is on in every other one-path run
# (the default), with its receivers holding clear-to-send back (SLUICE_EAGER_HOLD=1): the harness
# tests a thread's receives whenever one of its isends is refused, as NCCL's proxy progresses them
# (tests/rdma/net_harness.h, PendingRecvs). Sanitized too: the clear-to-send path's counts run
# sanitized here (plugin_rdma_qps1 runs the eager path sanitized).
sluice_add_rdma_test(NAME plugin_rdma_noeager
                     COMMAND $<TARGET_FILE:plugin_rdma_test>
                             --gtest_filter=-Stress*:Lifecycle*)
set_property(TEST plugin_rdma_noeager APPEND PROPERTY ENVIRONMENT NCCL_IB_QPS_PER_CONNECTION=1
                                                                 SLUICE_CM=oob SLUICE_EAGER_MAX=0)
sluice_add_rdma_test(NAME plugin_rdma_qps4
                     COMMAND $<TARGET_FILE:plugin_rdma_test>
                             --gtest_filter=${SLUICE_PLUGIN_EAGER_DATA_TESTS})
set_property(TEST plugin_rdma_qps4 APPEND PROPERTY ENVIRONMENT NCCL_IB_QPS_PER_CONNECTION=4
                                                              NCCL_IB_SPLIT_DATA_ON_QPS=0)
# ... and, in the same bed, the same matrix again with NCCL_IB_ADAPTIVE_ROUTING=1 (off by default on
# RoCE): messages above NCCL_IB_AR_THRESHOLD close with a separate WRITE_WITH_IMM per lane, and the
# cost test checks the extra WR per message.
# Sanitized, only the run with adaptive routing (58 s for both): below the threshold it is the same
# path as without, and the split path without it (the last data WRITE carries the immediate) runs
# sanitized across two hosts in plugin_cm_two_host (2 QPs, split data, RoCE's default: off).
if(NOT SLUICE_SANITIZE)
  sluice_add_rdma_test(NAME plugin_rdma_qps4_split
                       COMMAND sh -c "\"$0\" \"$@\" && NCCL_IB_ADAPTIVE_ROUTING=1 \"$0\" \"$@\""
                               $<TARGET_FILE:plugin_rdma_test>
                               --gtest_filter=${SLUICE_PLUGIN_EAGER_DATA_TESTS})
else()
  sluice_add_rdma_test(NAME plugin_rdma_qps4_split
                       COMMAND env NCCL_IB_ADAPTIVE_ROUTING=1 $<TARGET_FILE:plugin_rdma_test>
                               --gtest_filter=${SLUICE_PLUGIN_EAGER_DATA_TESTS})
endif()
set_property(TEST plugin_rdma_qps4_split APPEND PROPERTY ENVIRONMENT NCCL_IB_QPS_PER_CONNECTION=4
                                                                    NCCL_IB_SPLIT_DATA_ON_QPS=1)
# The clear-to-send protocol's counts on 4 QPs, whole-message, split, and split with adaptive
# routing (its extra WR per lane), with the eager path off (SLUICE_PLUGIN_CTS_COUNTS above).
sluice_add_rdma_test(NAME plugin_rdma_qps4_noeager
                     COMMAND sh -c "\"$0\" \"$@\" && NCCL_IB_SPLIT_DATA_ON_QPS=1 \"$0\" \"$@\" && NCCL_IB_SPLIT_DATA_ON_QPS=1 NCCL_IB_ADAPTIVE_ROUTING=1 \"$0\" \"$@\""
                             $<TARGET_FILE:plugin_rdma_test>
                             --gtest_filter=${SLUICE_PLUGIN_CTS_COUNTS})
set_property(TEST plugin_rdma_qps4_noeager APPEND PROPERTY ENVIRONMENT NCCL_IB_QPS_PER_CONNECTION=4
                                                                      NCCL_IB_SPLIT_DATA_ON_QPS=0
                                                                      SLUICE_EAGER_MAX=0)
set_property(TEST plugin_rdma_qps4_noeager APPEND PROPERTY LABELS nosan)
# The same matrix over a fused device (SLUICE_TEST_FUSE, tests/rdma/plugin_bed.h: the bed fuses its
# two ports with makeVDevice): fused -> fused on 1 QP and on 4 split, fused -> one port on 4 whole,
# one port -> fused on 1. SLUICE_CM=oob, checked per connection (auto also takes oob for a fused
# connection: connect.cc); the rdma_cm run is plugin_rdma_fused_rdmacm below.
# Left out, as they cannot apply to a fused device (not weakened for it):
#  * Abi/Versions.SendRecvThroughTable/v8: the v8 table has no makeVDevice, so no fused device;
#  * Cost.LongMessagesCostOneWrAndOneCompletionPerMiB and
#    Cost.AdaptiveRoutingCostsOneWrPerDataLaneAboveTheThreshold: they expect one path's WRs,
#    completions and doorbells per message (one chain per lane), but their messages of 64 KiB and
#    more are striped over both paths (SLUICE_STRIPE_MIN, core/src/rules/stripe.h), a chain each:
#    measured fused, 1 QP, 1 MiB: 2 WRs, 2 completions, 2 doorbells per message where they expect
#    1. What the members carry is checked by core_fusion (each member's bytes) and by
#    FusedDevice.SharesByPacketCount* (packets per member).
set(SLUICE_PLUGIN_FUSED_EXCLUDE
    "*Versions.SendRecvThroughTable/v8:Cost.LongMessages*:Cost.AdaptiveRouting*")
set(SLUICE_PLUGIN_FUSED_TESTS
    "${SLUICE_PLUGIN_DATA_TESTS}-${SLUICE_PLUGIN_FUSED_EXCLUDE}:${SLUICE_PLUGIN_CTS_COUNTS}")
# The clear-to-send protocol's counts over the fused device, with the eager path off.
sluice_add_rdma_test(NAME plugin_rdma_fused_noeager
                     COMMAND $<TARGET_FILE:plugin_rdma_test>
                             --gtest_filter=${SLUICE_PLUGIN_CTS_COUNTS}-${SLUICE_PLUGIN_FUSED_EXCLUDE})
set_property(TEST plugin_rdma_fused_noeager APPEND PROPERTY ENVIRONMENT SLUICE_TEST_FUSE=fused
             NCCL_IB_QPS_PER_CONNECTION=1 SLUICE_CM=oob SLUICE_EAGER_MAX=0)
foreach(run "fused;fused;1;0" "fused_qps4_split;fused;4;1" "fused_send_qps4;send;4;0"
            "fused_recv;recv;1;0")
  list(GET run 0 name)
  list(GET run 1 fuse)
  list(GET run 2 qps)
  list(GET run 3 split)
  sluice_add_rdma_test(NAME plugin_rdma_${name}
                       COMMAND $<TARGET_FILE:plugin_rdma_test>
                               --gtest_filter=${SLUICE_PLUGIN_FUSED_TESTS})
  set_property(TEST plugin_rdma_${name} APPEND PROPERTY ENVIRONMENT SLUICE_TEST_FUSE=${fuse}
               NCCL_IB_QPS_PER_CONNECTION=${qps} NCCL_IB_SPLIT_DATA_ON_QPS=${split} SLUICE_CM=oob)
endforeach()
# The fused matrix through rdma_cm (SLUICE_CM=rdmacm; tests/rdma/rdmacm_fused.sh gives each
# port's interface an address): fused -> fused only, on 2 QPs per path, split. In one network
# namespace rdma_cm resolves an address to the device that holds it, so path p joins member p to
# member p (a loopback on each port); fused -> one port (path 1 from rxe1 to the listener's rxe0)
# cannot resolve through its own member here and runs across two hosts (plugin_fusion_two_host).
sluice_add_rdma_test(NAME plugin_rdma_fused_rdmacm
                     COMMAND ${CMAKE_CURRENT_LIST_DIR}/rdmacm_fused.sh $<TARGET_FILE:plugin_rdma_test>
                             --gtest_filter=${SLUICE_PLUGIN_FUSED_TESTS})
set_property(TEST plugin_rdma_fused_rdmacm APPEND PROPERTY ENVIRONMENT
             NCCL_IB_QPS_PER_CONNECTION=2 NCCL_IB_SPLIT_DATA_ON_QPS=1)
sluice_add_rdma_test(NAME plugin_rdma_stress
                     COMMAND $<TARGET_FILE:plugin_rdma_test> --gtest_filter=Stress*)
if(SLUICE_SANITIZE)  # sanitized code is several times slower: a fifth of the messages
  set_property(TEST plugin_rdma_stress APPEND PROPERTY ENVIRONMENT
               SLUICE_TEST_STRESS_MESSAGES=20000)
endif()
foreach(split 0 1)
  sluice_add_rdma_test(NAME plugin_rdma_stress_qps4_split${split}
                       COMMAND $<TARGET_FILE:plugin_rdma_test> --gtest_filter=Stress*)
  set_property(TEST plugin_rdma_stress_qps4_split${split} APPEND PROPERTY ENVIRONMENT
               NCCL_IB_QPS_PER_CONNECTION=4 NCCL_IB_SPLIT_DATA_ON_QPS=${split}
               SLUICE_TEST_STRESS_MESSAGES=20000)
  # Sanitizer pass: plugin_rdma_stress (1 QP) and plugin_rdma_qps4(_split) cover this code.
  set_property(TEST plugin_rdma_stress_qps4_split${split} APPEND PROPERTY LABELS nosan)
endforeach()
# 1,000 init/connect/transfer/close/finalize cycles with fds, RSS and verbs objects flat (label
# faults too); measured 29 ms a cycle in the TCG bed at first, 74.5 ms in a CI rehearsal on
# 2026-12-07 (each cycle makes and releases the eager pool of the adapters it uses): ~78 s.
sluice_add_rdma_test(NAME plugin_rdma_cycles
                     COMMAND $<TARGET_FILE:plugin_rdma_test> --gtest_filter=Lifecycle*)
set_property(TEST plugin_rdma_cycles APPEND PROPERTY LABELS faults)
if(SLUICE_SANITIZE)  # 100 sanitized cycles (35 s for 300): the sanitizers check the same code each
  # cycle, and LeakSanitizer every allocation at exit; the unsanitized 1,000 keep fds and RSS flat
  set_property(TEST plugin_rdma_cycles APPEND PROPERTY ENVIRONMENT SLUICE_TEST_CYCLES=100)
else()
  set_property(TEST plugin_rdma_cycles APPEND PROPERTY ENVIRONMENT SLUICE_TEST_CYCLES=1000)
endif()

# Misconfiguration and bad input at init, through the v11 table.
add_executable(plugin_config_test ${CMAKE_CURRENT_LIST_DIR}/plugin_config_test.cc)
target_include_directories(plugin_config_test PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(plugin_config_test PRIVATE sluice_nccl_abi GTest::gtest_main PkgConfig::IBVERBS
                                                 ${CMAKE_DL_LIBS})
target_compile_definitions(plugin_config_test PRIVATE
                           SLUICE_PLUGIN_PATH="$<TARGET_FILE:nccl-net-sluice>")
add_dependencies(plugin_config_test nccl-net-sluice)
sluice_add_rdma_test(NAME plugin_config COMMAND $<TARGET_FILE:plugin_config_test> TIMEOUT 300)

# Never linked against CUDA (the driver is dlopened by gpu/).
find_program(SLUICE_READELF NAMES readelf REQUIRED)
add_test(NAME abi_no_cuda_link
         COMMAND ${CMAKE_COMMAND} -DLIB=$<TARGET_FILE:nccl-net-sluice> -DREADELF=${SLUICE_READELF}
                 -P ${SLUICE_ABI_TEST_DIR}/check_no_cuda.cmake)
set_tests_properties(abi_no_cuda_link PROPERTIES LABELS "unit;abi" TIMEOUT 60)

# core's parts include one another only in the allowed direction (core/src/README.md), and the
# check itself catches a wrong-way include.
add_test(NAME core_layers
         COMMAND ${CMAKE_COMMAND} -DCORE_DIR=${PROJECT_SOURCE_DIR}/core
                 -P ${SLUICE_ABI_TEST_DIR}/check_core_layers.cmake)
add_test(NAME core_layers_catches_violation
         COMMAND ${SLUICE_ABI_TEST_DIR}/check_core_layers_selftest.sh ${PROJECT_SOURCE_DIR}/core
                 ${SLUICE_ABI_TEST_DIR}/check_core_layers.cmake)
set_tests_properties(core_layers core_layers_catches_violation PROPERTIES LABELS "unit;abi"
                     TIMEOUT 60)

# No shell script under pipefail pipes into grep -q (SIGPIPE turns a match into a random failure:
# CI failed so on gpu_check_no_rdma_skips), and the check itself catches such a pipe.
add_test(NAME scripts_no_pipe_into_grep_q
         COMMAND ${SLUICE_ABI_TEST_DIR}/check_pipefail_grep.sh ${PROJECT_SOURCE_DIR})
add_test(NAME scripts_no_pipe_into_grep_q_selftest
         COMMAND ${SLUICE_ABI_TEST_DIR}/check_pipefail_grep.sh --selftest)
set_tests_properties(scripts_no_pipe_into_grep_q scripts_no_pipe_into_grep_q_selftest
                     PROPERTIES LABELS "unit;abi" TIMEOUT 60)

# NIC fusion in NCCL's order of calls through the v9..v12 tables, over the bed's two ports, then
# connections and verified messages over the fused device (docs/fusion.md).
add_executable(plugin_fusion_test ${CMAKE_CURRENT_LIST_DIR}/plugin_fusion_test.cc)
target_include_directories(plugin_fusion_test PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(plugin_fusion_test PRIVATE sluice_nccl_abi GTest::gtest_main
                                                 PkgConfig::IBVERBS ${CMAKE_DL_LIBS})
target_compile_definitions(plugin_fusion_test PRIVATE
                           SLUICE_PLUGIN_PATH="$<TARGET_FILE:nccl-net-sluice>")
add_dependencies(plugin_fusion_test nccl-net-sluice)
sluice_add_rdma_test(NAME plugin_fusion
                     COMMAND $<TARGET_FILE:plugin_fusion_test>
                             --gtest_filter=FusedDevice.*-FusedDevice.SharesByPacketCount*
                     TIMEOUT 300)
# The members' packet shares, in a process of their own: each case needs a fresh v12 engine (it
# reads SLUICE_FUSION_WEIGHTS and logs the weights when it makes the fused device), and once a v9
# or v10 table's init holds the engine for the process (plugin_fusion's other cases) every later
# ctx shares it.
sluice_add_rdma_test(NAME plugin_fusion_shares
                     COMMAND $<TARGET_FILE:plugin_fusion_test>
                             --gtest_filter=FusedDevice.SharesByPacketCount*
                     TIMEOUT 300)
# oob (rdma_cm over fused devices: plugin_rdma_fused_rdmacm, plugin_fusion_two_host).
set_property(TEST plugin_fusion plugin_fusion_shares APPEND PROPERTY ENVIRONMENT SLUICE_CM=oob)
# Sanitizer pass (CI time): plugin_rdma_fused, plugin_fusion and core_fusion run the fused data
# path sanitized; the other fused layouts and the packet shares run unsanitized only.
set_property(TEST plugin_rdma_fused_qps4_split plugin_rdma_fused_send_qps4 plugin_rdma_fused_recv
             plugin_fusion_shares APPEND PROPERTY LABELS nosan)

# No fd wall (issue 32): the soft RLIMIT_NOFILE set to 128 before the plugin's init, which raises it
# to the hard limit (INFO old -> new); 100 connections (200 comms) up past it, each with a verified
# message.
add_executable(plugin_fd_limit_test ${CMAKE_CURRENT_LIST_DIR}/plugin_fd_limit_test.cc)
target_include_directories(plugin_fd_limit_test PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(plugin_fd_limit_test PRIVATE sluice_nccl_abi GTest::gtest_main
                                                   Threads::Threads PkgConfig::IBVERBS
                                                   ${CMAKE_DL_LIBS})
target_compile_definitions(plugin_fd_limit_test PRIVATE
                           SLUICE_PLUGIN_PATH="$<TARGET_FILE:nccl-net-sluice>")
add_dependencies(plugin_fd_limit_test nccl-net-sluice)
# Twice: with the peer link (one socket per peer process: the descriptors do not grow with the
# connections) and with SLUICE_OOB_LINK=0 (a socket per comm: they pass the old soft limit).
sluice_add_rdma_test(NAME plugin_fd_limit COMMAND $<TARGET_FILE:plugin_fd_limit_test> TIMEOUT 600)
set_property(TEST plugin_fd_limit APPEND PROPERTY ENVIRONMENT SLUICE_CM=oob)
sluice_add_rdma_test(NAME plugin_fd_limit_own_sockets COMMAND $<TARGET_FILE:plugin_fd_limit_test>
                     TIMEOUT 600)
set_property(TEST plugin_fd_limit_own_sockets APPEND PROPERTY ENVIRONMENT SLUICE_CM=oob
                                                                      SLUICE_OOB_LINK=0)
