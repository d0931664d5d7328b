# cmake -DLIB=<libnccl-net-sluice.so> -DOBJDUMP=objdump -DIBVERBS_FLOOR=1.8 -DRDMACM_FLOOR=1.2
#       -P check_symbol_floor.cmake
# Fails when the library imports a versioned libibverbs (IBVERBS_x.y) or librdmacm (RDMACM_x.y)
# symbol newer than the oldest supported rdma-core (README: "Supported rdma-core"): such a symbol
# makes the dynamic loader refuse the .so on an older rdma-core, and NCCL then silently falls back
# to its own transport. Newer entry points are resolved at run time (core verbs_ext.h) instead.
foreach(v LIB OBJDUMP IBVERBS_FLOOR RDMACM_FLOOR)
  if(NOT ${v})
    message(FATAL_ERROR "${v} not set")
  endif()
endforeach()
execute_process(COMMAND ${OBJDUMP} -T ${LIB} OUTPUT_VARIABLE out ERROR_VARIABLE err
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${OBJDUMP} -T ${LIB} failed (${rc}): ${err}")
endif()
set(too_new "")
set(checked 0)
string(REPLACE "\n" ";" lines "${out}")
foreach(line IN LISTS lines)
  # "0000000000000000      DF *UND*  0000000000000000 (IBVERBS_1.12) ibv_reg_dmabuf_mr"
  if(NOT line MATCHES "\\*UND\\*.*[ (](IBVERBS|RDMACM)_([0-9]+\\.[0-9]+)\\)? +([A-Za-z_0-9]+)$")
    continue()
  endif()
  set(lib "${CMAKE_MATCH_1}")
  set(ver "${CMAKE_MATCH_2}")
  set(sym "${CMAKE_MATCH_3}")
  math(EXPR checked "${checked} + 1")
  set(floor "${${lib}_FLOOR}")
  if(ver VERSION_GREATER floor)
    list(APPEND too_new "${sym}@${lib}_${ver} (floor ${lib}_${floor})")
  endif()
endforeach()
if(checked EQUAL 0)
  message(FATAL_ERROR "no versioned IBVERBS_/RDMACM_ import found in ${LIB}: the check is not "
                      "seeing the imports (objdump output format?):\n${out}")
endif()
if(too_new)
  string(REPLACE ";" "\n  " too_new "${too_new}")
  message(FATAL_ERROR "${LIB} imports symbols newer than the supported rdma-core floor:\n  "
                      "${too_new}\nresolve them at run time (core/src verbs_ext.cc) instead")
endif()
message(STATUS "${checked} versioned verbs/rdma_cm imports, all at or below IBVERBS_${IBVERBS_FLOOR} "
               "and RDMACM_${RDMACM_FLOOR}")
