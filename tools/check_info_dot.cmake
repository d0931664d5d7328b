cmake_minimum_required(VERSION 3.25)
# `sluice-info --dot` prints a Graphviz graph with the GPUs and NICs; with Graphviz installed,
# `--dot FILE.svg` renders an SVG.
execute_process(COMMAND "${INFO}" --topology "${XML}" --dot OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT out MATCHES "^graph sluice_topology" OR NOT out MATCHES "GPU7"
   OR NOT out MATCHES "mlx5_2")
  message(FATAL_ERROR "bad --dot output (${rc}):\n${out}")
endif()
find_program(DOT_EXE dot)
if(DOT_EXE)
  file(REMOVE "${OUT}/sluice-info-test.svg")
  execute_process(COMMAND "${INFO}" --topology "${XML}" --dot "${OUT}/sluice-info-test.svg"
                  RESULT_VARIABLE rc)
  file(READ "${OUT}/sluice-info-test.svg" svg LIMIT 4096)
  if(NOT rc EQUAL 0 OR NOT svg MATCHES "<svg")
    message(FATAL_ERROR "--dot FILE.svg did not render an SVG (${rc})")
  endif()
endif()
