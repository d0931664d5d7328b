# Benchmarks as tests (label `rdma`, run inside the Soft-RoCE bed): short, verified, never timed.
# They check that the benchmarks run end to end through the plugin's exported table and that
# every byte / every allreduce element arrives right; the numbers are not judged here.
# (bench/ is added after tests/, so test for the option, not the targets; generator expressions
# resolve the targets at generate time.)
if(NOT SLUICE_BUILD_BENCH)
  return()
endif()

# Both run on the test's port pair (SLUICE_TEST_DEVICES, else the first two active ports):
# with_test_devices.sh restricts the plugin to it through NCCL_IB_HCA.
set(SLUICE_WITH_TEST_DEVICES ${CMAKE_CURRENT_SOURCE_DIR}/rdma/with_test_devices.sh)

# Ring allreduce, 4 ranks spread over the pair, a few sizes (one of them several chunks long and
# not a multiple of the ranks' segments), every iteration verified.
sluice_add_rdma_test(NAME bench_allreduce_4ranks TIMEOUT 600 COMMAND
  ${SLUICE_WITH_TEST_DEVICES}
  ${PROJECT_SOURCE_DIR}/bench/launch-allreduce -n 4 --build ${CMAKE_BINARY_DIR} --timeout 400 --
  -b 8 -e 2M -f 32 -n 2 -w 1 --chunk 256K --timeout 120 --quiet)

# Point to point with every received byte checked: bandwidth sweep, ping-pong, two connections
# at once; then, in the same boot, a short rate run with --trace whose Chrome trace must parse
# with one track per QP (docs/profiler.md).
sluice_add_rdma_test(NAME bench_sluice_bench_verify TIMEOUT 600 COMMAND
  ${SLUICE_WITH_TEST_DEVICES} ${CMAKE_CURRENT_LIST_DIR}/bench_verify_and_trace.sh
  $<TARGET_FILE:sluice-bench> ${PROJECT_SOURCE_DIR}/tools/check_trace.py
  --verify --tests bw,lat,agg -b 8 -e 1M -f 8 --bytes-per-size 2M --iters-min 4 --iters-max 100
  --lat-iters 50 --agg-sizes 64K --conns 2 --timeout 120 --quiet)
