# The Debian package: `cpack -G DEB` in the build directory (or scripts/package) writes
# sluice_<version>_<arch>.deb with
#   /usr/lib/<multiarch>/libnccl-net-sluice.so   where NCCL's dlopen finds it (plugin/CMakeLists.txt)
#   /usr/bin/sluice-info
#   /usr/share/doc/sluice/README.md              the front page
#   /usr/share/doc/sluice/docs/*.md              the manual, every page of docs/ (so the README's
#                                                relative links docs/<page>.md resolve there too)
# Its Depends are computed from the shared libraries by dpkg-shlibdeps (dpkg-dev, file).
# tests/package/check_deb.sh builds it, extracts it and checks what is inside (label `package`).
include(GNUInstallDirs)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs
        FILES_MATCHING PATTERN "*.md")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME sluice)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "Sluice developers <sluice@invalid>")
set(CPACK_PACKAGE_VENDOR "Sluice developers")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "zero-copy RDMA network plugin for NCCL (NCCL_NET_PLUGIN=sluice)")
set(CPACK_PACKAGE_DESCRIPTION
    "libnccl-net-sluice.so, loaded by NCCL when a job sets NCCL_NET_PLUGIN=sluice, moves NCCL's \
inter-node traffic over RDMA (InfiniBand or RoCE) with RC queue pairs. sluice-info shows the \
RDMA devices, GPUs and NUMA nodes it sees and the GPU to NIC choice.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # sluice_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)   # Depends from the ELF files' shared libraries
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS OFF)
include(CPack)
