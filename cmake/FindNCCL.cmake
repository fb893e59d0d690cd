# Finds NCCL (in the CUDA toolkit or the system); defines NCCL::NCCL.
include(${CMAKE_CURRENT_LIST_DIR}/JitembedFindHelpers.cmake)
set(_nccl_hints /usr/local/cuda /usr/local/cuda/targets/x86_64-linux)
list(APPEND CMAKE_PREFIX_PATH ${_nccl_hints})
jitembed_find_imported(NCCL NCCL::NCCL HEADER nccl.h LIBRARY nccl PKGCONFIG nccl)
list(REMOVE_ITEM CMAKE_PREFIX_PATH ${_nccl_hints})
