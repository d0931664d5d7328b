# The Debian package (cmake/SluicePackage.cmake), label `package`: cpack -G DEB from this build
# tree, then checks on the extracted package (tests/package/check_deb.sh). scripts/test runs it.
add_test(NAME package_deb
         COMMAND ${PROJECT_SOURCE_DIR}/tests/package/check_deb.sh ${PROJECT_SOURCE_DIR}
                 ${PROJECT_BINARY_DIR} ${PROJECT_VERSION} $<TARGET_FILE:abi_dlopen_c_test>)
set_tests_properties(package_deb PROPERTIES LABELS package TIMEOUT 300)
