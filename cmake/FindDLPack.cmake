# Finds the DLPack header; defines DLPack::DLPack (header only).
include(${CMAKE_CURRENT_LIST_DIR}/JitembedFindHelpers.cmake)
jitembed_find_imported(DLPack DLPack::DLPack HEADER dlpack/dlpack.h)
