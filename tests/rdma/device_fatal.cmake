# A member device's fatal error on a multi-path comm (issue 31; tests/rdma/plugin_device_fatal_test.cc
# says what it checks): the event injected through SLUICE_TEST_FAULT_FILE (rxe raises none), once
# on a fused rxe0+rxe1 comm (its path over the second device fails over and stays down; the comm
# goes on striped over the first), once on a comm with SLUICE_STANDBY=1 (its idle standby's device
# dies; the comm goes on over its primary). One process each, since a dead adapter stays dead for
# the process. Measured: ~10 s each in the bed.
add_executable(plugin_device_fatal_test ${CMAKE_CURRENT_LIST_DIR}/plugin_device_fatal_test.cc)
target_include_directories(plugin_device_fatal_test PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(plugin_device_fatal_test PRIVATE sluice_nccl_abi GTest::gtest_main
                                                       Threads::Threads PkgConfig::IBVERBS
                                                       ${CMAKE_DL_LIBS})
target_compile_definitions(plugin_device_fatal_test PRIVATE
                           SLUICE_PLUGIN_PATH="$<TARGET_FILE:nccl-net-sluice>")
add_dependencies(plugin_device_fatal_test nccl-net-sluice)
sluice_add_rdma_test(NAME plugin_device_fatal_fused COMMAND $<TARGET_FILE:plugin_device_fatal_test>
                     TIMEOUT 300)
set_property(TEST plugin_device_fatal_fused APPEND PROPERTY ENVIRONMENT
             SLUICE_TEST_FAULT_FILE=/tmp/sluice-device-fatal-fused SLUICE_CM=oob
             # Batches of 3 (docs/eager.md "Batches"): of the burst, counter c goes alone, then
             # c+1, c+4 and c+7 each start a batch posted before the device dies (c+10.. goes at the
             # first test): the paths take them by counter, so each carries a batch, and the dead
             # one's are replayed whole.
             SLUICE_EAGER_BATCH=3)
sluice_add_rdma_test(NAME plugin_device_fatal_standby
                     COMMAND $<TARGET_FILE:plugin_device_fatal_test> TIMEOUT 300)
set_property(TEST plugin_device_fatal_standby APPEND PROPERTY ENVIRONMENT
             SLUICE_TEST_FAULT_FILE=/tmp/sluice-device-fatal-standby SLUICE_STANDBY=1 SLUICE_CM=oob)
