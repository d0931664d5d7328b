# cmake -DLIB=<libnccl-net-sluice.so> [-DNM=nm] -P check_exports.cmake
# Fails unless the library's defined dynamic symbols are exactly NCCL's versioned plugin tables and
# Sluice's extension tables sluiceExt_v1 and sluiceExt_v2:
# no C++ symbol, no symbol of the static sluice_* libraries, nothing else may leak.
if(NOT LIB)
  message(FATAL_ERROR "LIB not set")
endif()
if(NOT NM)
  set(NM nm)
endif()
execute_process(COMMAND ${NM} -D --defined-only ${LIB}
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} -D --defined-only ${LIB} failed (${rc}): ${err}")
endif()
set(expected ncclNetPlugin_v10 ncclNetPlugin_v11 ncclNetPlugin_v12 ncclNetPlugin_v8 ncclNetPlugin_v9
             sluiceExt_v1 sluiceExt_v2)
set(found "")
string(REPLACE "\n" ";" lines "${out}")
foreach(line IN LISTS lines)
  # "<address> <type> <name>[@version]"
  if(line MATCHES "^[0-9a-fA-F]+ ([A-Za-z]) ([^@ ]+)")
    set(type "${CMAKE_MATCH_1}")
    set(name "${CMAKE_MATCH_2}")
    # The version-script node itself is an absolute symbol (type A) on some linkers; skip it.
    if(type STREQUAL "A")
      continue()
    endif()
    list(APPEND found "${name}")
    if(name MATCHES "^(ncclNetPlugin_v|sluiceExt_v)" AND NOT type MATCHES "^[RDBG]$")
      message(FATAL_ERROR "${name} has symbol type ${type}; expected a data object (R/D/B)")
    endif()
  endif()
endforeach()
list(SORT found)
message(STATUS "exported: ${found}")
if(NOT found STREQUAL expected)
  message(FATAL_ERROR "exported dynamic symbols differ.\n  expected: ${expected}\n  found:    ${found}\n"
                      "full nm -D --defined-only output:\n${out}")
endif()
