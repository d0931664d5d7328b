# The plugin loads the CUDA driver at run time and must never link libcuda or libcudart:
# a machine without an NVIDIA driver must still load it. Fails if either is a DT_NEEDED entry.
# Usage: cmake -DLIB=<libnccl-net-sluice.so> -DREADELF=<readelf> -P check_no_cuda.cmake
execute_process(COMMAND ${READELF} -d ${LIB} OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "readelf -d ${LIB} failed (${rc})")
endif()
string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*" needed "${out}")
if(NOT needed)
  message(FATAL_ERROR "no NEEDED entries found in ${LIB}: unexpected readelf output")
endif()
foreach(n ${needed})
  message(STATUS "${n}")
  if(n MATCHES "libcuda|libcudart|libnvidia")
    message(FATAL_ERROR "${LIB} links a CUDA library: ${n}")
  endif()
endforeach()
