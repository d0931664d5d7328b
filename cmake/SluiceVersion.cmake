# The version and source revision that `sluice-info --version` and the plugin's first INFO line
# report: PROJECT_VERSION and `git describe --always --dirty --tags` ("unknown" without git).
# The header is written at configure time and refreshed before every build.
set(SLUICE_GENERATED_DIR ${PROJECT_BINARY_DIR}/generated)
set(_sluice_rev_args -DSRC=${PROJECT_SOURCE_DIR} -DOUT=${SLUICE_GENERATED_DIR}/sluice/revision.h
                     -DVERSION=${PROJECT_VERSION} -P ${PROJECT_SOURCE_DIR}/cmake/revision.cmake)
execute_process(COMMAND ${CMAKE_COMMAND} ${_sluice_rev_args})
file(STRINGS ${SLUICE_GENERATED_DIR}/sluice/revision.h _sluice_rev REGEX "SLUICE_REVISION")
string(REGEX REPLACE ".*SLUICE_REVISION \"([^\"]*)\".*" "\\1" SLUICE_REVISION "${_sluice_rev}")
message(STATUS "sluice: version ${PROJECT_VERSION}, revision ${SLUICE_REVISION}")
add_custom_target(sluice_revision
                  COMMAND ${CMAKE_COMMAND} ${_sluice_rev_args}
                  BYPRODUCTS ${SLUICE_GENERATED_DIR}/sluice/revision.h
                  COMMENT "" VERBATIM)
