# Finds OpenBLAS with its CBLAS header (Debian: libopenblas-dev); defines OpenBLAS::OpenBLAS.
include(${CMAKE_CURRENT_LIST_DIR}/JitembedFindHelpers.cmake)
jitembed_find_imported(OpenBLAS OpenBLAS::OpenBLAS HEADER cblas.h LIBRARY openblas PKGCONFIG openblas
                       PATH_SUFFIXES openblas-pthread openblas)
