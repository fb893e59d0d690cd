# install(), install(EXPORT), jitembedConfig.cmake with COMPONENTS, version file, jitembed.pc.
include(CMakePackageConfigHelpers)
set(JITEMBED_CMAKE_DIR "${CMAKE_INSTALL_DATADIR}/cmake/jitembed")

set(_targets)
foreach(_c IN LISTS JITEMBED_ENABLED_COMPONENTS ITEMS jitembed)
  list(APPEND _targets jitembed_${_c})
endforeach()
install(TARGETS ${_targets} EXPORT jitembedTargets
  FILE_SET HEADERS DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
  FILE_SET cuda_kernels DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
install(EXPORT jitembedTargets NAMESPACE jitembed:: DESTINATION "${JITEMBED_CMAKE_DIR}")

configure_package_config_file(cmake/jitembedConfig.cmake.in "${PROJECT_BINARY_DIR}/jitembedConfig.cmake"
  INSTALL_DESTINATION "${JITEMBED_CMAKE_DIR}")
write_basic_package_version_file("${PROJECT_BINARY_DIR}/jitembedConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES
  "${PROJECT_BINARY_DIR}/jitembedConfig.cmake"
  "${PROJECT_BINARY_DIR}/jitembedConfigVersion.cmake"
  cmake/JitembedFindHelpers.cmake cmake/FindZstd.cmake cmake/FindXXHash.cmake cmake/FindDLPack.cmake
  cmake/FindTurboJPEG.cmake cmake/FindFFmpeg.cmake cmake/FindNCCL.cmake
  cmake/FindLMDB.cmake cmake/FindHiredis.cmake cmake/FindOpenBLAS.cmake
  DESTINATION "${JITEMBED_CMAKE_DIR}")

# pkg-config: one module for the whole enabled set (pkg-config has no components).
set(_pc_requires "libxxhash")
if(JITEMBED_WITH_ZSTD)
  string(APPEND _pc_requires " libzstd")
endif()
if(JITEMBED_WITH_JPEG)
  string(APPEND _pc_requires " libturbojpeg")
endif()
if(JITEMBED_WITH_VIDEO)
  string(APPEND _pc_requires " libavformat libavcodec libavutil libswscale")
endif()
if(JITEMBED_WITH_LMDB)
  string(APPEND _pc_requires " lmdb")
endif()
if(JITEMBED_WITH_REDIS)
  string(APPEND _pc_requires " hiredis")
endif()
set(JITEMBED_PC_REQUIRES "${_pc_requires}")
configure_file(cmake/jitembed.pc.in "${PROJECT_BINARY_DIR}/jitembed.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/jitembed.pc" DESTINATION "${CMAKE_INSTALL_DATADIR}/pkgconfig")
