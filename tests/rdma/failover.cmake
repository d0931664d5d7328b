# Failover of a fused comm between two hosts (issue 20; labels rdma, bed, faults, nosan): both VMs
# fuse their two devices (path 0 on eth0, path 1 on eth1) and every connection is fused -> fused,
# host1 sending, host0 receiving, every byte verified (tests/rdma/plugin_failover_two_host.cc says
# what each step checks). One boot, two runs a host:
#  1. at the default RC timers (rxe retries forever), steps on fresh connections A, B, C:
#     sender-port: a random-size stream (4 KiB .. 4 MiB), host1's eth1 down after a third and up
#     after two thirds: no call fails, host1's eth1 member sends (almost) nothing while down,
#     messages keep completing; receiver-port: the same with host0's eth1 (B, opened after the
#     link is back, must use both members); idle: eth1 down with nothing in flight, 2 s, then 8
#     messages arrive while the eth1 member sends nothing;
#  2. at short RC timers (NCCL_IB_TIMEOUT=15, NCCL_IB_RETRY_CNT=4: 671 ms), connections D, E:
#     silent: every RoCE packet arriving on host1's eth1 dropped by a tc filter mid-stream (no port
#     event): the stream completes, failed over by RC retries or the watchdog; all-gone: RoCE
#     dropped on both of host1's links with 4 MiB messages in flight: host1's comm fails within
#     SLUICE_TEST_ALL_GONE_MS with a WARN naming both paths, host0's too.
# Each run ends with fds, QPs, CQs and MRs back at its baseline. SLUICE_TEST_FAILOVER_MESSAGES per
# stream (the test's default, 300, by hand) is cut for CI time: log-uniform sizes average ~0.6 MB;
# measured, 40 messages (23 MB) took 1.6 s over the fused pair and 6.3 s over one link.
add_executable(plugin_failover_two_host_test ${CMAKE_CURRENT_LIST_DIR}/plugin_failover_two_host.cc)
sluice_not_in_sanitizer_pass(plugin_failover_two_host_test)  # label nosan: not run sanitized
target_include_directories(plugin_failover_two_host_test PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(plugin_failover_two_host_test PRIVATE sluice_nccl_abi GTest::gtest
                                                            Threads::Threads PkgConfig::IBVERBS
                                                            ${CMAKE_DL_LIBS})
target_compile_definitions(plugin_failover_two_host_test PRIVATE
                           SLUICE_PLUGIN_PATH="$<TARGET_FILE:nccl-net-sluice>")
add_dependencies(plugin_failover_two_host_test nccl-net-sluice)
set(_fo "$<TARGET_FILE:plugin_failover_two_host_test>")
set(_fo_short "env NCCL_IB_TIMEOUT=15 NCCL_IB_RETRY_CNT=4 ${_fo}")
add_test(NAME plugin_failover_two_host
  COMMAND ${SLUICE_SKIP_STATUS} ${PROJECT_SOURCE_DIR}/scripts/rdma-bed --two-host --timeout 400 --
    "${_fo} 0 sender-port,receiver-port,idle && ${_fo_short} 0 silent,all-gone"
    "${_fo} 1 sender-port,receiver-port,idle && ${_fo_short} 1 silent,all-gone")
set_tests_properties(plugin_failover_two_host PROPERTIES LABELS "rdma;bed;faults;nosan" TIMEOUT 420
                     SKIP_RETURN_CODE 77   # 77: nested inside a VM bed, cannot boot VMs there
                     ENVIRONMENT "SLUICE_LIVENESS_POLL_MS=100;SLUICE_TEST_DEADLINE_S=60;SLUICE_TEST_FAILOVER_MESSAGES=150;SLUICE_TEST_ALL_GONE_MS=20000")
