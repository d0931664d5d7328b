# rdma_cm on the device's own IP address (listener.cc, choose_cm_address), between two VMs
# (scripts/rdma-bed --two-host; label bed: VMs only). Each host gets a second Soft-RoCE device on an
# interface of its own, 10.77.0.<host+1>/24 (cm_addr_setup.sh), and the test uses only that device
# (NCCL_IB_HCA) while the out-of-band socket stays on the bed interface (169.254.0.x,
# NCCL_SOCKET_IFNAME): the out-of-band address is on no device the test uses. The listener must
# bind its rdma_cm listener to its device's own address and carry it in the handle; the connector
# resolves that address from its own device's address. SLUICE_CM=auto, expecting rdmacm: before,
# the listener offered no rdma_cm here and auto fell back to oob, which the test refuses (it counts
# the rdma_cm channels the comms hold), then the data-path matrix runs over the second device.
# (SLUICE_CM=rdmacm would add plugin_two_host_test's fault cases, whose "unreachable listener"
# rewrites the handle's out-of-band address, not its rdma_cm address.)
set(_t $<TARGET_FILE:plugin_two_host_test>)
set(_setup ${CMAKE_CURRENT_LIST_DIR}/cm_addr_setup.sh)
add_test(NAME plugin_cm_addr_two_host
  COMMAND ${SLUICE_SKIP_STATUS} ${PROJECT_SOURCE_DIR}/scripts/rdma-bed --two-host --timeout 280 --
    "e=$(${_setup}) && env SLUICE_CM=auto $e ${_t} 0 rdmacm"
    "e=$(${_setup}) && env SLUICE_CM=auto $e ${_t} 1 rdmacm")
# nosan: the sanitizer pass runs the same rdma_cm code across two hosts in plugin_cm_two_host (only
# the address bound differs), so this one runs unsanitized only.
set_tests_properties(plugin_cm_addr_two_host PROPERTIES LABELS "rdma;bed;nosan" TIMEOUT 300
                     SKIP_RETURN_CODE 77   # 77: nested inside a VM bed, cannot boot VMs there
                     ENVIRONMENT "NCCL_IB_TIMEOUT=14;NCCL_IB_QPS_PER_CONNECTION=2;NCCL_IB_SPLIT_DATA_ON_QPS=1;SLUICE_CONNECT_TIMEOUT_MS=8000;SLUICE_HANDSHAKE_TIMEOUT_MS=4000;SLUICE_TEST_DEADLINE_S=60")
