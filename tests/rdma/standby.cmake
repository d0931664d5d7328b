# A primary with a standby between two hosts (issue 20, docs/standby.md; labels rdma, bed, faults,
# nosan): SLUICE_STANDBY=1, each VM's comm on the device on eth1, whose standby is the device on
# eth0 (where the kept socket runs); host1 sends, host0 receives, every byte verified
# (tests/rdma/plugin_standby_two_host.cc says what each phase checks): the standby carries nothing
# (no data, no clear-to-send) while the primary works, host1's eth1 goes down and the stream goes
# on over the standby, eth1 comes back and the stream returns to the primary (failback), per-phase
# packet counts of both devices on both hosts; then the same with the receiver's (host0's) eth1 on
# the same comm. Short failback timers so that the failback comes within the stream;
# SLUICE_TEST_STANDBY_MESSAGES (160 a round, ~100 MB) sized for CI time, and so that the window
# after the failback's ramp ("back in full", then 8 messages) falls well inside a round: with 100,
# a round whose failback took a failed attempt more (800 ms) left only the 3 messages already in
# flight at that window's end, which carried no packet after it (a CI run, 2026-12-06).
add_executable(plugin_standby_two_host_test ${CMAKE_CURRENT_LIST_DIR}/plugin_standby_two_host.cc)
sluice_not_in_sanitizer_pass(plugin_standby_two_host_test)  # label nosan: not run sanitized
target_include_directories(plugin_standby_two_host_test PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(plugin_standby_two_host_test PRIVATE sluice_nccl_abi GTest::gtest
                                                           Threads::Threads PkgConfig::IBVERBS
                                                           ${CMAKE_DL_LIBS})
target_compile_definitions(plugin_standby_two_host_test PRIVATE
                           SLUICE_PLUGIN_PATH="$<TARGET_FILE:nccl-net-sluice>")
add_dependencies(plugin_standby_two_host_test nccl-net-sluice)
set(_sb "$<TARGET_FILE:plugin_standby_two_host_test>")
add_test(NAME plugin_standby_two_host
  COMMAND ${SLUICE_SKIP_STATUS} ${PROJECT_SOURCE_DIR}/scripts/rdma-bed --two-host --timeout 180 --
    "${_sb} 0" "${_sb} 1")
set_tests_properties(plugin_standby_two_host PROPERTIES LABELS "rdma;bed;faults;nosan" TIMEOUT 200
                     SKIP_RETURN_CODE 77   # 77: nested inside a VM bed, cannot boot VMs there
                     ENVIRONMENT "SLUICE_STANDBY=1;SLUICE_FAILBACK_RETRY_MS=100;SLUICE_FAILBACK_RETRY_CAP_MS=800;SLUICE_FAILBACK_RAMP_MS=100;SLUICE_LIVENESS_POLL_MS=100;SLUICE_TEST_DEADLINE_S=60;SLUICE_TEST_STANDBY_MESSAGES=160")

# The plugin's data-path matrix (plugin_rdma_qps1's, in one VM) with SLUICE_STANDBY=1: every comm
# of the test pair runs over its device and that device's standby (2 paths, path 1 of weight 0),
# so the fused wire format (cell-pair clear-to-send entries, closes naming their receive) carries
# every case of the matrix on one path, with the eager path on (SLUICE_EAGER_FUSED); the counts of
# the clear-to-send protocol (Cost*, CtsPublish*: eager off) are one device's, since nothing goes
# over the standby while the primary is up: plugin_rdma_noeager runs them.
sluice_add_rdma_test(NAME plugin_rdma_standby
                     COMMAND $<TARGET_FILE:plugin_rdma_test>
                             --gtest_filter=${SLUICE_PLUGIN_EAGER_DATA_TESTS})
set_property(TEST plugin_rdma_standby APPEND PROPERTY ENVIRONMENT SLUICE_STANDBY=1 SLUICE_CM=oob
                                                                 NCCL_IB_QPS_PER_CONNECTION=1)
set_property(TEST plugin_rdma_standby APPEND PROPERTY LABELS nosan)
