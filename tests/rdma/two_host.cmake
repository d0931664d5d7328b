# NCCL_IB_TIMEOUT=14 (67 ms RC timer) in every two-host data test: the bed's UDP links lose a packet
# now and then, and a lost last packet of a burst draws no NAK, so the sender waits out the RC
# timer (4.3 s at the default 20); rxe retries forever at the default retry count 7, so the short
# timer fails nothing (docs/test-bed.md "Loss on the two-host links").
# Connection managers between two VMs (scripts/rdma-bed --two-host; label bed: VMs only), one bed
# for all runs: per host one command line running plugin_two_host_test three times in a row.
#  1. SLUICE_CM unset (auto): on the bed (rxe0 on eth0, which has the listener's address) auto must
#     pick rdmacm; 2 QPs per connection, split data: every QP gets its own rdma_cm connection.
#  2. SLUICE_CM=rdmacm: the same, plus a REJECTED and an unreachable connect, each failing within
#     SLUICE_CONNECT_TIMEOUT_MS with the rdma_cm event named.
#  3. SLUICE_CM=oob: today's handshake; no rdma_cm channel may be open. Before it, each host gets a
#     second address that routes nowhere and holds the lower GID indexes (second_address.sh): every
#     connection must log that the route chose its bed address's GID (SLUICE_TEST_ROUTE_GID=1).
# Each run prints its connection setup time ("N connections set up in X ms"), then runs the whole
# data-path matrix across the two hosts (plugin_two_host_test.cc, two_host_matrix.h): every size,
# grouped receives 1..8, 32 in flight, a random-size stream and a message larger than the posted
# buffer; so the matrix passes in both modes, rdmacm (runs 1 and 2) and oob (run 3).
add_executable(plugin_two_host_test ${CMAKE_CURRENT_LIST_DIR}/plugin_two_host_test.cc)
target_include_directories(plugin_two_host_test PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(plugin_two_host_test PRIVATE sluice_core sluice_nccl_abi GTest::gtest
                                                   Threads::Threads PkgConfig::IBVERBS
                                                   ${CMAKE_DL_LIBS})
target_compile_definitions(plugin_two_host_test PRIVATE
                           SLUICE_PLUGIN_PATH="$<TARGET_FILE:nccl-net-sluice>")
add_dependencies(plugin_two_host_test nccl-net-sluice)
set(_t $<TARGET_FILE:plugin_two_host_test>)
set(_oob "sleep 1 && ${CMAKE_CURRENT_LIST_DIR}/second_address.sh && SLUICE_CM=oob SLUICE_TEST_ROUTE_GID=1")
add_test(NAME plugin_cm_two_host
  COMMAND ${SLUICE_SKIP_STATUS} ${PROJECT_SOURCE_DIR}/scripts/rdma-bed --two-host --timeout 400 --
    "${_t} 0 rdmacm && SLUICE_CM=rdmacm ${_t} 0 rdmacm && ${_oob} ${_t} 0 oob"
    "${_t} 1 rdmacm && SLUICE_CM=rdmacm ${_t} 1 rdmacm && ${_oob} ${_t} 1 oob")
set_tests_properties(plugin_cm_two_host PROPERTIES LABELS "rdma;bed" TIMEOUT 420
                     SKIP_RETURN_CODE 77   # 77: nested inside a VM bed, cannot boot VMs there
                     ENVIRONMENT "NCCL_IB_TIMEOUT=14;NCCL_IB_QPS_PER_CONNECTION=2;NCCL_IB_SPLIT_DATA_ON_QPS=1;SLUICE_CONNECT_TIMEOUT_MS=8000;SLUICE_HANDSHAKE_TIMEOUT_MS=4000;SLUICE_TEST_DEADLINE_S=60")

# NIC fusion across two hosts with two links each (issue 24): each host fuses its two devices (one
# per link) with makeVDevice and runs the whole matrix above fused -> fused, then the members'
# shares by their port counters (plugin_two_host_test.cc, SLUICE_TEST_FUSE=both): each member's
# share of the packets within 10 % of its weight's share. Two runs in one bed:
#  1. SLUICE_CM=oob, 1 QP per path, the weights the plugin derives (equal in the bed);
#  2. SLUICE_CM=rdmacm, 2 QPs per path split, weights 3 : 1 (SLUICE_FUSION_WEIGHTS), and the
#     REJECTED / unreachable connects: every path's QPs through rdma_cm, path 1 from the second
#     device's address to the listener's second member (wire::MetaCmAddrs).
set(_f "SLUICE_TEST_FUSE=both SLUICE_TEST_CONNS=8")
set(_cm "SLUICE_CM=rdmacm SLUICE_TEST_FUSE_WEIGHTS=3:1 NCCL_IB_QPS_PER_CONNECTION=2 NCCL_IB_SPLIT_DATA_ON_QPS=1")
add_test(NAME plugin_fusion_two_host
  COMMAND ${SLUICE_SKIP_STATUS} ${PROJECT_SOURCE_DIR}/scripts/rdma-bed --two-host --timeout 400 --
    "env ${_f} SLUICE_CM=oob ${_t} 0 oob && env ${_f} ${_cm} ${_t} 0 rdmacm"
    "env ${_f} SLUICE_CM=oob ${_t} 1 oob && env ${_f} ${_cm} ${_t} 1 rdmacm")
# nosan (CI time: 170 s unsanitized): the sanitizer pass runs the fused data path in
# plugin_rdma_fused and its rdma_cm bring-up in plugin_rdma_fused_rdmacm, one VM each.
set_tests_properties(plugin_fusion_two_host PROPERTIES LABELS "rdma;bed;nosan" TIMEOUT 420
                     SKIP_RETURN_CODE 77   # 77: nested inside a VM bed, cannot boot VMs there
                     ENVIRONMENT "NCCL_IB_TIMEOUT=14;SLUICE_CONNECT_TIMEOUT_MS=8000;SLUICE_HANDSHAKE_TIMEOUT_MS=4000;SLUICE_TEST_DEADLINE_S=60")
