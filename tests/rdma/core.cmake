# Core verbs tests: QP bring-up on real devices.
add_executable(qp_bringup_test ${CMAKE_CURRENT_LIST_DIR}/qp_bringup_test.cc)
target_link_libraries(qp_bringup_test PRIVATE sluice_core GTest::gtest_main)
sluice_add_rdma_test(NAME qp_bringup COMMAND $<TARGET_FILE:qp_bringup_test> TIMEOUT 300)

add_executable(core_datapath_test ${CMAKE_CURRENT_LIST_DIR}/core_datapath_test.cc)
target_link_libraries(core_datapath_test PRIVATE sluice_core GTest::gtest_main)
sluice_add_rdma_test(NAME core_datapath COMMAND $<TARGET_FILE:core_datapath_test> TIMEOUT 900)

# Handshake bytes through a relay: validated, and printed for scripts/capture-fuzz-seeds.
add_executable(wire_capture_test ${CMAKE_CURRENT_LIST_DIR}/wire_capture_test.cc)
target_link_libraries(wire_capture_test PRIVATE sluice_core GTest::gtest_main Threads::Threads)
sluice_add_rdma_test(NAME wire_capture COMMAND $<TARGET_FILE:wire_capture_test> TIMEOUT 300)
