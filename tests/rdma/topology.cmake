# sluice-info on the live test bed: it must list the test pair's devices (whatever their names) with
# their ports and GIDs, and not crash on devices without PCI locality.
sluice_add_rdma_test(NAME sluice_info_bed
                     COMMAND ${PROJECT_SOURCE_DIR}/tools/check_info_bed.sh $<TARGET_FILE:sluice-info>
                     TIMEOUT 120)
