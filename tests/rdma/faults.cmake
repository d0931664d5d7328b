# Peer faults (labels rdma and faults): the peer process SIGKILLed with and without work in flight,
# both directions, and the normal close of both sides. Bounds are set short here, so a regression
# shows as a failed assertion in seconds, not a hang.
add_executable(plugin_faults_test ${CMAKE_CURRENT_LIST_DIR}/plugin_faults_test.cc)
target_include_directories(plugin_faults_test PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(plugin_faults_test PRIVATE sluice_nccl_abi GTest::gtest Threads::Threads
                                                 PkgConfig::IBVERBS ${CMAKE_DL_LIBS})
target_compile_definitions(plugin_faults_test PRIVATE
                           SLUICE_PLUGIN_PATH="$<TARGET_FILE:nccl-net-sluice>")
add_dependencies(plugin_faults_test nccl-net-sluice)
sluice_add_rdma_test(NAME plugin_faults COMMAND $<TARGET_FILE:plugin_faults_test>
                     --gtest_filter=-PortDown* TIMEOUT 400)
# Takes the bed's veth down and up: label bed too, so it is left out where the NICs are real.
sluice_add_rdma_test(NAME plugin_faults_port COMMAND $<TARGET_FILE:plugin_faults_test>
                     --gtest_filter=PortDown* TIMEOUT 300)
foreach(t plugin_faults plugin_faults_port)
  set_property(TEST ${t} APPEND PROPERTY LABELS faults)
  set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT SLUICE_LIVENESS_POLL_MS=100
                                                     SLUICE_HEARTBEAT_MS=2000
                                                     SLUICE_TEST_DEADLINE_S=30)
endforeach()
set_property(TEST plugin_faults_port APPEND PROPERTY LABELS bed)
# Two VMs: host1 takes its link down with nothing in flight; host0's pending receive must fail by
# TCP keepalive (5 x SLUICE_HEARTBEAT_MS) with the reason. Label bed: VMs only.
add_test(NAME plugin_faults_two_host
  COMMAND ${PROJECT_SOURCE_DIR}/scripts/rdma-bed --two-host --timeout 280 --
    "$<TARGET_FILE:plugin_faults_test> --two-host-peer 0"
    "$<TARGET_FILE:plugin_faults_test> --two-host-peer 1")
set_tests_properties(plugin_faults_two_host PROPERTIES LABELS "rdma;faults;bed" TIMEOUT 300
                     SKIP_RETURN_CODE 77   # 77: nested inside a VM bed, cannot boot VMs there
                     ENVIRONMENT "SLUICE_LIVENESS_POLL_MS=100;SLUICE_HEARTBEAT_MS=1000;SLUICE_TEST_DEADLINE_S=60")
# Core-level faults (labels rdma and faults): a clear-to-send slot rewritten by a misbehaving peer
# (count 0 / above the limit, index out of range, wrong seq, size beyond the registered region,
# wrong rkey), a listener that is gone and an address that does not answer. Connect bound 2 s.
add_executable(core_faults_test ${CMAKE_CURRENT_LIST_DIR}/core_faults_test.cc)
target_include_directories(core_faults_test PRIVATE ${CMAKE_CURRENT_LIST_DIR}
                                                    ${PROJECT_SOURCE_DIR}/core/src)
target_link_libraries(core_faults_test PRIVATE sluice_core GTest::gtest_main)
sluice_add_rdma_test(NAME core_faults COMMAND $<TARGET_FILE:core_faults_test> TIMEOUT 300)
set_property(TEST core_faults APPEND PROPERTY LABELS faults)
set_property(TEST core_faults APPEND PROPERTY ENVIRONMENT SLUICE_CONNECT_TIMEOUT_MS=2000)
