# GPUDirect tests that run without a GPU (label rdma, inside scripts/rdma-bed):
#  * core_gdr: detection explains itself (no CUDA driver here), the dma-buf probe runs for real,
#    and the loopback flush runs for real on host buffers (NCCL_NET_FORCE_FLUSH per test).
#  * plugin_gpu_standin: the exported tables with a stand-in CUDA driver (host pages posing as
#    device memory): type dispatch, the peermem path, cache keying by type, flush of "GPU" receives.
# The stand-in is a test library, loaded by path through SLUICE_CUDA_LIBRARY and never installed.
add_library(sluice-test-fake-cuda SHARED ${CMAKE_CURRENT_LIST_DIR}/../gpu/standin_cuda_driver.cc)
set_target_properties(sluice-test-fake-cuda PROPERTIES OUTPUT_NAME sluice-test-fake-cuda)

add_executable(core_gdr_test ${CMAKE_CURRENT_LIST_DIR}/core_gdr_test.cc)
target_include_directories(core_gdr_test PRIVATE ${PROJECT_SOURCE_DIR}/core/src)
target_link_libraries(core_gdr_test PRIVATE sluice_core sluice_gpu GTest::gtest_main)
sluice_add_rdma_test(NAME core_gdr COMMAND $<TARGET_FILE:core_gdr_test> TIMEOUT 600)

add_executable(plugin_gpu_standin_test ${CMAKE_CURRENT_LIST_DIR}/plugin_gpu_standin_test.cc)
target_include_directories(plugin_gpu_standin_test PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(plugin_gpu_standin_test PRIVATE sluice_nccl_abi GTest::gtest_main
                                                      Threads::Threads ${CMAKE_DL_LIBS})
target_compile_definitions(plugin_gpu_standin_test PRIVATE
                           SLUICE_PLUGIN_PATH="$<TARGET_FILE:nccl-net-sluice>")
add_dependencies(plugin_gpu_standin_test nccl-net-sluice sluice-test-fake-cuda)
sluice_add_rdma_test(NAME plugin_gpu_standin COMMAND $<TARGET_FILE:plugin_gpu_standin_test>
                     TIMEOUT 600)
set_property(TEST plugin_gpu_standin APPEND PROPERTY ENVIRONMENT
             SLUICE_CUDA_LIBRARY=$<TARGET_FILE:sluice-test-fake-cuda>)

# Label `gpu`: tests/gpu/run.sh on a machine with a GPU (skipped, exit 77, with the reason where
# there is none). gpu-check builds wherever cuda.h exists; it dlopens libcuda at run time.
if(SLUICE_HAVE_CUDA_HEADERS)
  add_executable(gpu-check ${PROJECT_SOURCE_DIR}/tests/gpu/gpu_check.cc)
  target_include_directories(gpu-check PRIVATE ${SLUICE_CUDA_HOME}/include
                                             ${PROJECT_SOURCE_DIR}/gpu/include)
  target_link_libraries(gpu-check PRIVATE sluice_nccl_abi ${CMAKE_DL_LIBS})
  add_dependencies(gpu-check nccl-net-sluice)
  add_test(NAME gpu COMMAND ${PROJECT_SOURCE_DIR}/tests/gpu/run.sh --build ${CMAKE_BINARY_DIR})
  set_tests_properties(gpu PROPERTIES LABELS gpu TIMEOUT 330 SKIP_RETURN_CODE 77)
  # The same program against the stand-in driver on the bed: keeps gpu-check's plugin path
  # exercised where no GPU exists (its output says "stand-in"; it is not a GPU result). The
  # stand-in's host pages are no dma-buf, so the regMrDmaBuf step is skipped and gpu-check exits 77;
  # the test passes only with that exit, the skip's reason, and the peermem transfer and its
  # forced flush passing, and the eager check (small messages beside GPU memory, none eagerly);
  # driven as NCCL drives the plugin: NCCL's default profiler callback at init (called, so the
  # plugin's profiler branch ran) and a step handle on every post.
  sluice_add_rdma_test(NAME gpu_check_standin
                       COMMAND ${PROJECT_SOURCE_DIR}/tests/gpu/expect_skip.sh
                               "CHECK gpu_dmabuf_transfer: SKIP .* was not offered for dma-buf"
                               "CHECK gpu_transfer: PASS .*zero-copy .*forced flush done, 0 bytes differ"
                               "CHECK cuda_vmm: PASS"
                               "CHECK gpu_eager: PASS .*16 messages .*: 0 bytes differ, 0 went eagerly"
                               "profiler callback was called [1-9][0-9]* times"
                               -- $<TARGET_FILE:gpu-check> plugin $<TARGET_FILE:nccl-net-sluice>
                       TIMEOUT 600)
  set_property(TEST gpu_check_standin APPEND PROPERTY ENVIRONMENT
               SLUICE_CUDA_LIBRARY=$<TARGET_FILE:sluice-test-fake-cuda> SLUICE_GDR=force)
  # Without any RDMA device (NCCL_IB_HCA matches none): the plugin steps are skipped, exit 77 with
  # the reason; never "passed". Label unit: runs anywhere.
  add_test(NAME gpu_check_no_rdma_skips
           COMMAND ${PROJECT_SOURCE_DIR}/tests/gpu/expect_skip.sh
                   "CHECK plugin_init: SKIP no RDMA device" "CHECK cuda_vmm: PASS"
                   "CHECK dmabuf_export: SKIP .*cuMem\\* range over two chunks"
                   -- $<TARGET_FILE:gpu-check> plugin $<TARGET_FILE:nccl-net-sluice>)
  set_tests_properties(gpu_check_no_rdma_skips PROPERTIES LABELS unit TIMEOUT 120 ENVIRONMENT
                       "SLUICE_CUDA_LIBRARY=$<TARGET_FILE:sluice-test-fake-cuda>;NCCL_IB_HCA==no_such_hca_sluice")
  add_dependencies(gpu-check sluice-test-fake-cuda)
endif()

# The dma-buf export against the stand-in driver (label unit; no RDMA device needed).
if(TARGET gpu_standin_export_test)
  target_compile_definitions(gpu_standin_export_test PRIVATE
                             SLUICE_STANDIN_CUDA="$<TARGET_FILE:sluice-test-fake-cuda>")
  add_dependencies(gpu_standin_export_test sluice-test-fake-cuda)
endif()

# run.sh's NCCL verdicts on sample NCCL logs (label unit).
add_test(NAME gpu_nccl_log_verdicts COMMAND ${PROJECT_SOURCE_DIR}/tests/gpu/nccl_log_test.sh)
set_tests_properties(gpu_nccl_log_verdicts PROPERTIES LABELS unit TIMEOUT 60)

# run.sh's reading of the kernel's RDMA configuration and its rxe plan, on fake machines (label
# unit): the kernel's reason where rxe is not built in and modules cannot be loaded, `rdma link
# add` at once where rxe is built in, modprobe only where it can work.
add_test(NAME gpu_kernel_rdma COMMAND ${PROJECT_SOURCE_DIR}/tests/gpu/kernel_rdma_test.sh)
set_tests_properties(gpu_kernel_rdma PROPERTIES LABELS unit TIMEOUT 60)

# scripts/gpu-bundle from this build tree, then its size and libraries (label package; a minute).
# The bundle carries nccl-allreduce, a benchmark: a build without benchmarks has no bundle to check.
if(SLUICE_HAVE_CUDA_HEADERS AND SLUICE_BUILD_BENCH)
add_test(NAME gpu_bundle
         COMMAND sh -c "'${PROJECT_SOURCE_DIR}/scripts/gpu-bundle' --build '${CMAKE_BINARY_DIR}' --out '${CMAKE_BINARY_DIR}/gpu-bundle-test' && '${PROJECT_SOURCE_DIR}/tests/gpu/bundle_check.sh' '${CMAKE_BINARY_DIR}/gpu-bundle-test'")
set_tests_properties(gpu_bundle PROPERTIES LABELS package TIMEOUT 600)
endif()

# The device run rehearsed from the bundle (label package): run.sh --bundle with the stand-in
# driver and the stand-in for PyTorch (tests/gpu/standin_torch.py: the plugin loaded into Python
# as NCCL does, NCCL's lines into NCCL_DEBUG_FILE), only the bundle on the library path (its own
# rdma-core, as on a machine without one), rxe left alone, and the kernel of issue 34's H200
# machine: its configuration (no rxe, no siw), no /lib/modules, no modprobe, an empty
# /dev/infiniband and /sys/class/infiniband. Exit 77, steps 4 and 5 skipped with their reasons:
# step 4 the kernel's ("rdma_rxe is not in this kernel and it cannot load modules"), step 5
# NCCL's refusal, exactly.
if(SLUICE_HAVE_CUDA_HEADERS AND SLUICE_BUILD_BENCH)
  set_tests_properties(gpu_bundle PROPERTIES FIXTURES_SETUP gpu_bundle_dir)
  set(_rehearsal_empty ${CMAKE_BINARY_DIR}/gpu-run-rehearsal-empty)
  file(MAKE_DIRECTORY ${_rehearsal_empty})
  add_test(NAME gpu_run_rehearsal
           COMMAND env -u LD_LIBRARY_PATH -u SLUICE_TEST_DEVICES
                   OUT=${CMAKE_BINARY_DIR}/gpu-run-rehearsal
                   SLUICE_GPU_RUN_NO_RXE=1 SLUICE_GPU_RUN_RDMA_CORE=bundle
                   NCCL_IB_HCA==no_such_hca_sluice
                   SLUICE_GPU_RUN_KCONFIG=${PROJECT_SOURCE_DIR}/tests/gpu/kconfig/h200-firecracker.config
                   SLUICE_GPU_RUN_MODPROBE= SLUICE_GPU_RUN_MODULES_DIR=${CMAKE_BINARY_DIR}/no-lib-modules
                   SLUICE_GPU_RUN_SYS_MODULE=${_rehearsal_empty} SLUICE_GPU_RUN_DEV_IB=${_rehearsal_empty}
                   SLUICE_SYS_IB=${_rehearsal_empty}
                   SLUICE_CUDA_LIBRARY=${CMAKE_BINARY_DIR}/gpu-bundle-test/test/libsluice-test-fake-cuda.so
                   SLUICE_GPU_RUN_TORCH_SCRIPT=${PROJECT_SOURCE_DIR}/tests/gpu/standin_torch.py
                   ${PROJECT_SOURCE_DIR}/tests/gpu/expect_skip.sh
                   "^  1  facts  PASS .*RDMA ports: none; kernel RDMA: CONFIG_INFINIBAND=y CONFIG_INFINIBAND_USER_ACCESS=y CONFIG_RDMA_RXE=unset CONFIG_RDMA_SIW=unset CONFIG_MLX5_INFINIBAND=y"
                   "^  2  cuda   PASS" "^  3  gdr    PASS"
                   "^  4  rdma   SKIP no RDMA device: [^ ]+ has no usable uverbs \\(\\); rdma_rxe is not in this kernel and it cannot load modules \\(CONFIG_RDMA_RXE=unset, CONFIG_RDMA_SIW=unset; no [^ ]+/no-lib-modules; no modprobe or insmod\\)$"
                   "^  5  nccl   SKIP expected without an RDMA device: NCCL refused with \"Failed to initialize any NET plugin\""
                   "^rdma-core: the bundle's \\(SLUICE_GPU_RUN_RDMA_CORE=bundle\\); RDMAV_DRIVERS="
                   -- ${PROJECT_SOURCE_DIR}/tests/gpu/run.sh --bundle ${CMAKE_BINARY_DIR}/gpu-bundle-test)
  set_tests_properties(gpu_run_rehearsal PROPERTIES LABELS package TIMEOUT 330
                       FIXTURES_REQUIRED gpu_bundle_dir)
endif()
