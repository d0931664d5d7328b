# Flow labels on the wire (issue 24), one VM: tcpdump on the link between the test ports while
# plugin_rdma_test moves every size over 4 QPs per connection, with SLUICE_FLOW_LABEL=auto and off
# (SLUICE_TEST_FLOW_MODES="auto 12345 off" adds a seed); every packet's UDP source port must be the one predicted from the connection's logged
# labels (off: the kernel's QPN hash), distinct and evenly spaced per connection
# (tests/rdma/flow_label_bed.sh, tests/rdma/flow_label_check.py).
sluice_add_rdma_test(NAME plugin_flow_labels TIMEOUT 600
                     COMMAND ${CMAKE_CURRENT_LIST_DIR}/flow_label_bed.sh $<TARGET_FILE:plugin_rdma_test>)
# Soft-RoCE only (tcpdump sees no packet of a real NIC): `bed` keeps it off real-NIC runs.
# nosan: its Sluice code (the labels set at RTR in oob mode) runs in every sanitized rdma test,
# where SLUICE_FLOW_LABEL is auto by default; what it adds is the capture and its check.
set_property(TEST plugin_flow_labels APPEND PROPERTY LABELS bed nosan)

# The same between two VMs through rdma_cm (scripts/rdma-bed --two-host): host1 captures on eth0
# while plugin_two_host_test runs 4 connections of 4 QPs with SLUICE_CM=rdmacm, where Sluice's
# labels replace the ones rdma_cm's route carries; host1 checks its own packets and host0's (both
# ends label a QP pair alike), tests/rdma/flow_label_capture.sh.
set(_t $<TARGET_FILE:plugin_two_host_test>)
add_test(NAME plugin_flow_labels_two_host
  COMMAND ${SLUICE_SKIP_STATUS} ${PROJECT_SOURCE_DIR}/scripts/rdma-bed --two-host --timeout 400 --
    "SLUICE_CM=rdmacm ${_t} 0 rdmacm"
    "SLUICE_CM=rdmacm SLUICE_TEST_LOG_LEVEL=3 ${CMAKE_CURRENT_LIST_DIR}/flow_label_capture.sh eth0 labels 4 ${_t} 1 rdmacm")
# nosan: plugin_cm_two_host runs the same rdma_cm code, labels included, sanitized.
set_tests_properties(plugin_flow_labels_two_host PROPERTIES LABELS "rdma;bed;nosan" TIMEOUT 420
                     SKIP_RETURN_CODE 77   # 77: nested inside a VM bed, cannot boot VMs there
                     ENVIRONMENT "NCCL_IB_TIMEOUT=14;NCCL_IB_QPS_PER_CONNECTION=4;NCCL_IB_SPLIT_DATA_ON_QPS=1;SLUICE_TEST_CONNS=4;SLUICE_TEST_STREAM_MESSAGES=200;SLUICE_CONNECT_TIMEOUT_MS=8000;SLUICE_HANDSHAKE_TIMEOUT_MS=4000;SLUICE_TEST_DEADLINE_S=60")
