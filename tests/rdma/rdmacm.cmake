# The data-path matrix with every connection through librdmacm (SLUICE_CM=rdmacm), beside the oob
# runs of plugin.cmake and core.cmake (plugin_rdma_qps1 and core_datapath force SLUICE_CM=oob): in
# one bed, the whole of plugin_rdma_test (transfers of every size, posted buffer larger and message
# larger than posted, 1..8 grouped receives, 32 in flight, two processes, 64 comms, every table
# version, stress, open/close cycles with nothing leaked, cost counts, validation), the whole of
# core_datapath_test, and plugin_faults_test as plugin_faults runs it (a killed peer in each
# direction, idle and with work in flight, and clean closes; the port-down test stays oob only; NCCL's
# teardown order on one thread, 10 cycles a case (the same rdma_cm teardown each cycle; the 30 of
# plugin_teardown_order for interleavings took 25 of this test's 93 s): its 4-thread cases connect from 4 threads at once, which
# check_cm_used cannot attribute per connection, so they run only in plugin_teardown_order, with
# SLUICE_CM=auto, where it checks nothing).
# tests/rdma/rdmacm_loopback.sh puts both ends on the test pair's first port and the listener's
# address on that port's own interface (in one network namespace rdma_cm resolves any local address
# to the device that holds it, so two ports there can only meet through oob); the binary checks that
# every connection logged its rdmacm choice and held an rdma_cm channel (rdma_env.h, check_cm_used).
# Two QPs per connection, split data: each QP is its own rdma_cm connection. Stress and cycles are
# shortened (the oob runs keep their full counts).
set(_faults env SLUICE_LIVENESS_POLL_MS=100 SLUICE_HEARTBEAT_MS=2000 SLUICE_TEST_DEADLINE_S=30
           SLUICE_TEST_TEARDOWN_CYCLES=10 $<TARGET_FILE:plugin_faults_test>)
if(NOT SLUICE_SANITIZE)
  sluice_add_rdma_test(NAME plugin_rdma_rdmacm
                       COMMAND ${CMAKE_CURRENT_LIST_DIR}/rdmacm_loopback.sh
                               $<TARGET_FILE:plugin_rdma_test>
                               --gtest_filter=-${SLUICE_PLUGIN_CTS_COUNTS} --
                               $<TARGET_FILE:core_datapath_test>
                               -- ${_faults} --gtest_filter=-PortDown*:*4threads)
else()
  # Sanitized (149 s in full, the longest sanitized test), only what no other sanitized test runs
  # through rdma_cm: the peer killed in each direction, idle and with work in flight, and the clean
  # closes (rdma_cm connections torn down by a dead or a closing peer). The data-path matrix through
  # rdma_cm runs sanitized across two hosts in plugin_cm_two_host (every size, grouped receives,
  # 32 in flight, random sizes, message larger than posted; auto and forced rdmacm, REJECTED and
  # unreachable connects), link-down faults on rdma_cm connections in plugin_faults_two_host; the
  # rest of this test (stress, cycles, 64 comms, core_datapath_test, NCCL's teardown order through
  # rdma_cm) runs unsanitized only (docs/testing.md).
  sluice_add_rdma_test(NAME plugin_rdma_rdmacm
                       COMMAND ${CMAKE_CURRENT_LIST_DIR}/rdmacm_loopback.sh
                               ${_faults} --gtest_filter=CleanClose*:Faults/*Killed*)
endif()
set_property(TEST plugin_rdma_rdmacm APPEND PROPERTY LABELS faults)
set_property(TEST plugin_rdma_rdmacm APPEND PROPERTY ENVIRONMENT
             NCCL_IB_QPS_PER_CONNECTION=2 NCCL_IB_SPLIT_DATA_ON_QPS=1
             SLUICE_TEST_STRESS_MESSAGES=20000 SLUICE_TEST_CYCLES=100)
