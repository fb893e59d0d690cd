# Finds libzstd; defines Zstd::Zstd.
include(${CMAKE_CURRENT_LIST_DIR}/JitembedFindHelpers.cmake)
jitembed_find_imported(Zstd Zstd::Zstd HEADER zstd.h LIBRARY zstd PKGCONFIG libzstd)
