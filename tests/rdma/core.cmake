# Core verbs tests: QP bring-up on real devices.
add_executable(qp_bringup_test ${CMAKE_CURRENT_LIST_DIR}/qp_bringup_test.cc)
target_link_libraries(qp_bringup_test PRIVATE sluice_core GTest::gtest_main)
sluice_add_rdma_test(NAME qp_bringup COMMAND $<TARGET_FILE:qp_bringup_test>
                     --gtest_filter=-QpFence.* TIMEOUT 300)
# Failover's fence on real verbs (qp_bringup_test.cc, QpFence): writes held back by `tc netem
# delay`, the receiver's QP fenced (ERROR, drain markers): nothing lands after it, while the
# control without the fence sees the late bytes land. Label bed: it changes the bed's qdiscs.
sluice_add_rdma_test(NAME qp_fence COMMAND $<TARGET_FILE:qp_bringup_test>
                     --gtest_filter=QpFence.* TIMEOUT 300)
# Label nosan: CI's sanitizer pass leaves it out for time (19 s, most of it waiting on the delay);
# its Sluice code is fence_qp's three verbs calls on stack structures (qp_bringup runs the same
# QP bring-up sanitized).
set_property(TEST qp_fence APPEND PROPERTY LABELS bed faults nosan)

# core_fabric_test.cc (issue 21: traffic class read back from the QPs, ECE, relaxed ordering) reaches
# the comms' QPs through core's internal headers.
add_executable(core_datapath_test ${CMAKE_CURRENT_LIST_DIR}/core_datapath_test.cc
                                  ${CMAKE_CURRENT_LIST_DIR}/core_fabric_test.cc)
target_include_directories(core_datapath_test PRIVATE ${PROJECT_SOURCE_DIR}/core/src)
target_link_libraries(core_datapath_test PRIVATE sluice_core GTest::gtest_main)
sluice_add_rdma_test(NAME core_datapath COMMAND $<TARGET_FILE:core_datapath_test> TIMEOUT 900)
set_property(TEST core_datapath APPEND PROPERTY ENVIRONMENT SLUICE_CM=oob)  # rdmacm: rdmacm.cmake
# Both NCCL_IB_SPLIT_DATA_ON_QPS modes on 4 QPs (with one QP they are the same path).
foreach(split 0 1)
  sluice_add_rdma_test(NAME core_datapath_qps4_split${split}
                       COMMAND $<TARGET_FILE:core_datapath_test> TIMEOUT 900)
  set_property(TEST core_datapath_qps4_split${split} APPEND PROPERTY ENVIRONMENT
               NCCL_IB_QPS_PER_CONNECTION=4 NCCL_IB_SPLIT_DATA_ON_QPS=${split})
  # Sanitizer pass: plugin_rdma_qps4 and plugin_rdma_qps4_split run this core code on 4 QPs.
  set_property(TEST core_datapath_qps4_split${split} APPEND PROPERTY LABELS nosan)
endforeach()

# Handshake bytes through a relay: validated, and printed for scripts/capture-fuzz-seeds.
add_executable(wire_capture_test ${CMAKE_CURRENT_LIST_DIR}/wire_capture_test.cc)
target_link_libraries(wire_capture_test PRIVATE sluice_core GTest::gtest_main Threads::Threads)
sluice_add_rdma_test(NAME wire_capture COMMAND $<TARGET_FILE:wire_capture_test> TIMEOUT 300)

# The listener under stray connections (idle, drip-feeding, garbage, wrong version, reset), 16
# peers at once, foreign and corrupt handles. Handshake bound set short: strays go within seconds.
add_executable(core_listener_test ${CMAKE_CURRENT_LIST_DIR}/core_listener_test.cc)
target_link_libraries(core_listener_test PRIVATE sluice_core GTest::gtest_main Threads::Threads)
sluice_add_rdma_test(NAME core_listener COMMAND $<TARGET_FILE:core_listener_test> TIMEOUT 300)
set_property(TEST core_listener APPEND PROPERTY ENVIRONMENT SLUICE_HANDSHAKE_TIMEOUT_MS=1000)

# The shared listening socket outlives its last listen while comms are open (NCCL's rounds keep
# one port), refuses a closed listen's connector, and goes with the last comm.
add_executable(core_listen_linger_test ${CMAKE_CURRENT_LIST_DIR}/core_listen_linger_test.cc)
target_link_libraries(core_listen_linger_test PRIVATE sluice_core GTest::gtest_main)
sluice_add_rdma_test(NAME core_listen_linger COMMAND $<TARGET_FILE:core_listen_linger_test> TIMEOUT 300)

# NIC fusion's connection (issue 24): a fused device of the bed's two ports to a fused device and
# to a single port, both directions; QPs laid over the members' paths; no verbs object left behind.
add_executable(core_fusion_test ${CMAKE_CURRENT_LIST_DIR}/core_fusion_test.cc)
target_include_directories(core_fusion_test PRIVATE ${PROJECT_SOURCE_DIR}/core/src)
target_link_libraries(core_fusion_test PRIVATE sluice_core GTest::gtest_main)
sluice_add_rdma_test(NAME core_fusion COMMAND $<TARGET_FILE:core_fusion_test> TIMEOUT 600)
set_property(TEST core_fusion APPEND PROPERTY ENVIRONMENT SLUICE_CM=oob)
sluice_add_rdma_test(NAME core_fusion_qps4 COMMAND $<TARGET_FILE:core_fusion_test> TIMEOUT 600)
set_property(TEST core_fusion_qps4 APPEND PROPERTY ENVIRONMENT SLUICE_CM=auto
             NCCL_IB_QPS_PER_CONNECTION=4)

# Bounds that cannot hang init (issue 32): a connector polled every 1.2x the handshake bound
# completes, and so does its accept; a message passes. The handshake bound is scaled down to 1 s.
add_executable(core_slow_connector_test ${CMAKE_CURRENT_LIST_DIR}/core_slow_connector_test.cc)
target_link_libraries(core_slow_connector_test PRIVATE sluice_core GTest::gtest_main)
sluice_add_rdma_test(NAME core_slow_connector COMMAND $<TARGET_FILE:core_slow_connector_test>
                     TIMEOUT 300)
set_property(TEST core_slow_connector APPEND PROPERTY ENVIRONMENT SLUICE_HANDSHAKE_TIMEOUT_MS=1000
             SLUICE_CM=oob)
# The same through rdma_cm (loopback on one port, rdmacm.cmake says why): the acceptor's side
# completes on the connector's RTU, sent at its next poll.
sluice_add_rdma_test(NAME core_slow_connector_rdmacm
                     COMMAND ${CMAKE_CURRENT_LIST_DIR}/rdmacm_loopback.sh
                             $<TARGET_FILE:core_slow_connector_test> TIMEOUT 300)
set_property(TEST core_slow_connector_rdmacm APPEND PROPERTY ENVIRONMENT
             SLUICE_HANDSHAKE_TIMEOUT_MS=1000)

# No fd wall (issue 32), with the hard limit too low: a listener out of descriptors fails accept at
# once, naming its limit, and tells its connector, which fails within seconds naming the peer's
# limit; a connector out of descriptors fails connect and listen naming its own. Each side that
# runs out is a forked process with RLIMIT_NOFILE 256/256 and its descriptors filled.
add_executable(core_fd_limit_test ${CMAKE_CURRENT_LIST_DIR}/core_fd_limit_test.cc)
target_link_libraries(core_fd_limit_test PRIVATE sluice_core GTest::gtest_main)
sluice_add_rdma_test(NAME core_fd_limit COMMAND $<TARGET_FILE:core_fd_limit_test> TIMEOUT 300)
set_property(TEST core_fd_limit APPEND PROPERTY ENVIRONMENT SLUICE_CM=oob)

# Registration and close at scale (issue 32): 10,000 registrations, 200 closes with them held,
# 10,000 deregistrations, and one page registered 10,000 times; the times are printed.
add_executable(core_mr_scale_test ${CMAKE_CURRENT_LIST_DIR}/core_mr_scale_test.cc)
target_link_libraries(core_mr_scale_test PRIVATE sluice_core GTest::gtest_main)
# Label nosan: the index runs sanitized in the unit test interval_index_test and the registration
# code in plugin_rdma_*'s Registration.* cases; 10,000 registrations under ASan cost CI 14 s.
sluice_add_rdma_test(NAME core_mr_scale COMMAND $<TARGET_FILE:core_mr_scale_test> TIMEOUT 900)
set_property(TEST core_mr_scale APPEND PROPERTY ENVIRONMENT SLUICE_CM=oob)
set_property(TEST core_mr_scale APPEND PROPERTY LABELS nosan)

# The eager path (issue 33, docs/eager.md) at SLUICE_EAGER_MAX=4096: sizes across the threshold,
# sends ahead of their receives, grouped receives mixing both paths, posting order, oversize.
add_executable(core_eager_test ${CMAKE_CURRENT_LIST_DIR}/core_eager_test.cc)
target_link_libraries(core_eager_test PRIVATE sluice_core GTest::gtest_main)
sluice_add_rdma_test(NAME core_eager COMMAND $<TARGET_FILE:core_eager_test> TIMEOUT 600)
set_property(TEST core_eager APPEND PROPERTY ENVIRONMENT SLUICE_EAGER_MAX=4096)
set_property(TEST core_eager APPEND PROPERTY ENVIRONMENT
                                               GTEST_FILTER=-CoreEagerPool.*:CoreEagerPoolUnmade.*)
# Rings of 4 and 16 slots (core_eager runs the default, 32, the largest): a whole ring of messages
# ahead of every receive, and both windows full of small messages.
foreach(slots 4 16)
  sluice_add_rdma_test(NAME core_eager_slots${slots} COMMAND $<TARGET_FILE:core_eager_test>
                       TIMEOUT 300)
  set_property(TEST core_eager_slots${slots} APPEND PROPERTY ENVIRONMENT SLUICE_EAGER_MAX=4096
               SLUICE_EAGER_SLOTS=${slots}
               GTEST_FILTER=CoreEager.AWholeRing*:CoreEager.SmallMessagesWithBothWindowsFull)
endforeach()
# One WRITE per eager message (SLUICE_EAGER_BATCH=1): the batches' stream, counted the other way.
sluice_add_rdma_test(NAME core_eager_batch1 COMMAND $<TARGET_FILE:core_eager_test> TIMEOUT 300)
set_property(TEST core_eager_batch1 APPEND PROPERTY ENVIRONMENT SLUICE_EAGER_MAX=4096
             SLUICE_EAGER_BATCH=1 GTEST_FILTER=CoreEager.BatchesOfSendsAgainstAWiderWindowThanTheCredits)
# The pool's bound: two rings and two sender books per adapter, lent at first use, given back at
# close; comms without them correct by clear-to-send (a sender without a book asks for everything).
sluice_add_rdma_test(NAME core_eager_pool COMMAND $<TARGET_FILE:core_eager_test> TIMEOUT 600)
set_property(TEST core_eager_pool APPEND PROPERTY ENVIRONMENT SLUICE_EAGER_MAX=4096
                                                              SLUICE_EAGER_RINGS=2
                                                              GTEST_FILTER=CoreEagerPool.*)
# A pool too large to make (8.6 GB): the adapter's comms go by clear-to-send, with a WARN once.
sluice_add_rdma_test(NAME core_eager_pool_unmade COMMAND $<TARGET_FILE:core_eager_test> TIMEOUT 300)
set_property(TEST core_eager_pool_unmade APPEND PROPERTY ENVIRONMENT SLUICE_EAGER_MAX=65536
                                                                     SLUICE_EAGER_SLOTS=32
                                                                     SLUICE_EAGER_RINGS=4096
                                                                     GTEST_FILTER=CoreEagerPoolUnmade.*)
# A fused comm's member adapter refusing the pool's registration, for real: no CAP_IPC_LOCK and
# RLIMIT_MEMLOCK (48 MiB) above one registration of the 34 MB pool but below two. Its comms go by
# clear-to-send; the refusal is said once (WARN), remembered, and not tried again.
add_executable(core_eager_keys_test ${CMAKE_CURRENT_LIST_DIR}/core_eager_keys_test.cc)
target_include_directories(core_eager_keys_test PRIVATE ${PROJECT_SOURCE_DIR}/core/src)
target_link_libraries(core_eager_keys_test PRIVATE sluice_core GTest::gtest_main)
sluice_add_rdma_test(NAME core_eager_keys_refused
                     COMMAND ${CMAKE_CURRENT_LIST_DIR}/no_ipc_lock.sh
                             prlimit --memlock=50331648:50331648
                             $<TARGET_FILE:core_eager_keys_test> TIMEOUT 300)
set_property(TEST core_eager_keys_refused APPEND PROPERTY ENVIRONMENT SLUICE_CM=oob
                                                                      SLUICE_EAGER_MAX=4096
                                                                      SLUICE_EAGER_SLOTS=16
                                                                      SLUICE_EAGER_RINGS=512)
set_property(TEST core_eager_keys_refused APPEND PROPERTY LABELS nosan)
# The core data path's own tests with the eager path on.
sluice_add_rdma_test(NAME core_datapath_eager COMMAND $<TARGET_FILE:core_datapath_test> TIMEOUT 900)
set_property(TEST core_datapath_eager APPEND PROPERTY ENVIRONMENT SLUICE_CM=oob SLUICE_EAGER_MAX=4096)
set_property(TEST core_datapath_eager APPEND PROPERTY LABELS nosan)

# The peer link's handshakes (issue 32): a connect to a known process makes no TCP connection
# (core_peer_link_tcp: SLUICE_OOB_LINK_HANDSHAKE=0, one each); a closed listen refuses at once; a
# connect whose process has another connect's claim on the first link waits for it at most 2 s.
add_executable(core_peer_link_test ${CMAKE_CURRENT_LIST_DIR}/core_peer_link_test.cc)
target_include_directories(core_peer_link_test PRIVATE ${PROJECT_SOURCE_DIR}/core/src
                                                       ${PROJECT_SOURCE_DIR}/bench/common)
target_link_libraries(core_peer_link_test PRIVATE sluice_core GTest::gtest_main)
sluice_add_rdma_test(NAME core_peer_link COMMAND $<TARGET_FILE:core_peer_link_test> TIMEOUT 120)
sluice_add_rdma_test(NAME core_peer_link_tcp COMMAND $<TARGET_FILE:core_peer_link_test>
                     --gtest_filter=-*EndsBeforeTheAnswer* TIMEOUT 120)
set_property(TEST core_peer_link_tcp APPEND PROPERTY ENVIRONMENT SLUICE_OOB_LINK_HANDSHAKE=0)
# Crossed first connects, two processes (this binary exec'd twice): one link for the pair when
# both poll connect and accept; when one accepts only after 3 s, the other's answer waits 2 s at
# most and the later answer names the link made meanwhile (listener.cc answer_waits, answer_link).
add_executable(core_peer_link_crossed_test ${CMAKE_CURRENT_LIST_DIR}/core_peer_link_crossed_test.cc)
target_include_directories(core_peer_link_crossed_test PRIVATE ${PROJECT_SOURCE_DIR}/core/src)
target_link_libraries(core_peer_link_crossed_test PRIVATE sluice_core GTest::gtest_main)
sluice_add_rdma_test(NAME core_peer_link_crossed COMMAND $<TARGET_FILE:core_peer_link_crossed_test>
  TIMEOUT 180)
