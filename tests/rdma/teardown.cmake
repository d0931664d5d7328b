# Refused sends (oversize, over maxP2pBytes) and teardown from partial states through core's API
# (labels rdma and faults): abandoned connects and handshakes, finalize with handshakes in
# progress, close with work in flight, deregMr of a registration in use. Bounds set short here, so
# a regression shows in seconds: connect/handshake 3 s, close 2 s.
add_executable(core_teardown_test ${CMAKE_CURRENT_LIST_DIR}/core_teardown_test.cc)
target_link_libraries(core_teardown_test PRIVATE sluice_core GTest::gtest_main Threads::Threads)
sluice_add_rdma_test(NAME core_teardown COMMAND $<TARGET_FILE:core_teardown_test> TIMEOUT 300)
set_property(TEST core_teardown APPEND PROPERTY LABELS faults)
set_property(TEST core_teardown APPEND PROPERTY ENVIRONMENT SLUICE_CONNECT_TIMEOUT_MS=3000
                                                       SLUICE_HANDSHAKE_TIMEOUT_MS=3000
                                                       SLUICE_CLOSE_TIMEOUT_MS=2000)
# The refused sends and the close drain on 4 QPs with every message split over them (one notice
# and one drain marker per QP).
sluice_add_rdma_test(NAME core_teardown_qps4_split COMMAND $<TARGET_FILE:core_teardown_test>
                     --gtest_filter=*Refused*:*Close* TIMEOUT 300)
set_property(TEST core_teardown_qps4_split APPEND PROPERTY LABELS faults)
set_property(TEST core_teardown_qps4_split APPEND PROPERTY ENVIRONMENT NCCL_IB_QPS_PER_CONNECTION=4
                                                                  NCCL_IB_SPLIT_DATA_ON_QPS=1
                                                                  SLUICE_CONNECT_TIMEOUT_MS=3000
                                                                  SLUICE_CLOSE_TIMEOUT_MS=2000)
