# iWARP (Soft-iWARP, siw) in the one-VM bed: one VM boot. scripts/bed/siw-module builds siw.ko for
# the bed's kernel first (Debian's kernel lacks it; cached; exit 77 = skip when kernel headers or
# source are missing), then tests/rdma/iwarp_bed.sh adds the siw device beside the bed's rxe devices
# and runs plugin_iwarp_test and a sluice-info check: Sluice refuses iWARP with a WARN (no RDMA
# WRITE with immediate data), offers the other ports, and sluice-info shows the device, its
# transport and connection manager, and why it is unused.
add_executable(plugin_iwarp_test ${CMAKE_CURRENT_LIST_DIR}/plugin_iwarp_test.cc)
sluice_not_in_sanitizer_pass(plugin_iwarp_test)  # label nosan: not run sanitized
target_include_directories(plugin_iwarp_test PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(plugin_iwarp_test PRIVATE sluice_core sluice_nccl_abi GTest::gtest
                                                Threads::Threads PkgConfig::IBVERBS ${CMAKE_DL_LIBS})
target_compile_definitions(plugin_iwarp_test PRIVATE
                           SLUICE_PLUGIN_PATH="$<TARGET_FILE:nccl-net-sluice>")
add_dependencies(plugin_iwarp_test nccl-net-sluice sluice-info)
add_test(NAME plugin_iwarp
  COMMAND ${SLUICE_SKIP_STATUS} sh -c "ko=$(${PROJECT_SOURCE_DIR}/scripts/bed/siw-module) || exit $? && exec ${PROJECT_SOURCE_DIR}/scripts/rdma-bed --timeout 300 -- ${CMAKE_CURRENT_LIST_DIR}/iwarp_bed.sh \"$ko\" $<TARGET_FILE:plugin_iwarp_test> $<TARGET_FILE:sluice-info>")
# Label `nosan`: CI's sanitizer pass leaves it out (the refusal is the device discovery every
# sanitized test runs, plus one transport check; cm_choice's iWARP rules are unit-tested).
set_tests_properties(plugin_iwarp PROPERTIES LABELS "rdma;bed;nosan" TIMEOUT 600 SKIP_RETURN_CODE 77)
