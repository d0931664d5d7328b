# Smoke tests of the Soft-RoCE test bed itself (scripts/rdma-bed, docs/test-bed.md). Label `rdma`;
# those that always boot VMs also `bed` (scripts/test leaves them out on hosts with real RDMA NICs).
# They need no compiled code: only rdma-core's ibv_rc_pingpong and rdmacm-utils' rping. Since no
# Sluice code runs in them, they are also labelled `nosluice`: CI's sanitizer pass leaves them out.
#
# Note: add_test() stores COMMAND as a CMake list, so the shell scripts below use newlines, `&&` and
# `||` instead of `;`, and must not contain `${`.

# ibv_rc_pingpong between the test pair of ports (SLUICE_TEST_DEVICES, else the first two ACTIVE
# ports; tests/rdma/test_devices.sh), server in the background, client on localhost.
sluice_add_rdma_test(NAME bed_rc_pingpong TIMEOUT 300
                     COMMAND ${CMAKE_CURRENT_LIST_DIR}/bed_rc_pingpong.sh)
set_property(TEST bed_rc_pingpong APPEND PROPERTY LABELS nosluice)

# The real mode needs a usable /dev/infiniband/uverbs*, not only an ACTIVE port (fake sysfs/dev
# tree; label unit, no VM).
add_test(NAME bed_real_mode_needs_uverbs COMMAND ${CMAKE_CURRENT_LIST_DIR}/bed_real_mode_test.sh)
set_tests_properties(bed_real_mode_needs_uverbs PROPERTIES LABELS unit TIMEOUT 60)

# The two-host bed and its second link (issue 24): rping (rdma_cm) host1 -> host0, 3 iterations,
# over each link (the client retries until the server listens; each run raises only its own
# device's packet counters), and eth1 down on host1 gives a PORT_ERR on the second device only
# (tests/rdma/bed_two_links.sh). It took over bed_two_host_rping (rping over the first link only,
# one boot of its own) in full.
add_test(NAME bed_two_host_links
  COMMAND ${PROJECT_SOURCE_DIR}/scripts/rdma-bed --two-host --timeout 280 --
    "${CMAKE_CURRENT_LIST_DIR}/bed_two_links.sh" "${CMAKE_CURRENT_LIST_DIR}/bed_two_links.sh")
set_tests_properties(bed_two_host_links PROPERTIES LABELS "rdma;bed;nosluice" TIMEOUT 300
                     SKIP_RETURN_CODE 77)   # 77: nested inside a VM bed, cannot boot VMs there
