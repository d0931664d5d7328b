# The rdma tests do not depend on device names: one bed (one VM boot) whose Soft-RoCE devices are
# created as mlx5_0/mlx5_1 (scripts/rdma-bed SLUICE_BED_RXE_NAMES) runs a representative subset with
# SLUICE_TEST_DEVICES unset and set (tests/rdma/renamed_devices.sh). Label `bed` as well as `rdma`:
# it tests the Soft-RoCE bed, so scripts/test leaves it out on hosts with real RDMA NICs.
add_test(NAME bed_renamed_devices
         COMMAND ${SLUICE_SKIP_STATUS} ${CMAKE_COMMAND} -E env SLUICE_BED_RXE_NAMES=mlx5_0,mlx5_1
                 ${PROJECT_SOURCE_DIR}/scripts/rdma-bed --timeout 560 --
                 ${CMAKE_CURRENT_LIST_DIR}/renamed_devices.sh mlx5_0 mlx5_1
                 $<TARGET_FILE:qp_bringup_test> $<TARGET_FILE:plugin_config_test>
                 $<TARGET_FILE:plugin_rdma_test> $<TARGET_FILE:sluice-info>)
# Label `nosan`: CI's sanitizer pass leaves it out, since the same binaries run sanitized under
# their own names (qp_bringup, plugin_config, plugin_rdma_*, sluice_info_bed); only names differ.
set_tests_properties(bed_renamed_devices PROPERTIES LABELS "rdma;bed;nosan" TIMEOUT 600
                     SKIP_RETURN_CODE 77)
