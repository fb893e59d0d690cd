# Finds cuDNN 9 (libcudnn + cudnn.h: the CUDA toolkit or the system) and the header-only cuDNN frontend
# (cudnn_frontend.h: the pinned nvidia-cudnn-frontend wheel that scripts/install-deps.sh puts in .venv, or
# CUDNN_FRONTEND_ROOT); defines CUDNN::cudnn. The frontend is used without its bundled JSON library
# (CUDNN_FRONTEND_SKIP_JSON_LIB: nothing here serializes graphs, and it halves the header's compile time);
# its experimental engines call NVRTC, so the target links CUDA::nvrtc too.
include(${CMAKE_CURRENT_LIST_DIR}/JitembedFindHelpers.cmake)
set(_cudnn_hints /usr/local/cuda /usr/local/cuda/targets/x86_64-linux)
list(APPEND CMAKE_PREFIX_PATH ${_cudnn_hints})
jitembed_find_imported(CUDNN CUDNN::cudnn HEADER cudnn.h LIBRARY cudnn)
list(REMOVE_ITEM CMAKE_PREFIX_PATH ${_cudnn_hints})
file(GLOB _cudnn_fe_venv "${PROJECT_SOURCE_DIR}/.venv/lib/python3*/site-packages/include")
find_path(CUDNN_FRONTEND_INCLUDE_DIR NAMES cudnn_frontend.h
          HINTS ${CUDNN_FRONTEND_ROOT} $ENV{CUDNN_FRONTEND_ROOT} ${_cudnn_fe_venv} PATH_SUFFIXES include)
mark_as_advanced(CUDNN_FRONTEND_INCLUDE_DIR)
if(CUDNN_FOUND AND NOT CUDNN_FRONTEND_INCLUDE_DIR)
  set(CUDNN_FOUND FALSE)
  if(CUDNN_FIND_REQUIRED)
    message(FATAL_ERROR "cuDNN frontend (cudnn_frontend.h) not found: scripts/install-deps.sh cudnn installs the "
                        "nvidia-cudnn-frontend wheel into .venv, or set CUDNN_FRONTEND_ROOT (-DJITEMBED_WITH_CUDNN=OFF without it)")
  endif()
endif()
if(CUDNN_FOUND AND TARGET CUDNN::cudnn AND NOT _cudnn_frontend_added)
  set(_cudnn_frontend_added TRUE)
  if(NOT TARGET CUDA::nvrtc)
    find_package(CUDAToolkit REQUIRED)
  endif()
  set_property(TARGET CUDNN::cudnn APPEND PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_FRONTEND_INCLUDE_DIR}")
  set_property(TARGET CUDNN::cudnn APPEND PROPERTY INTERFACE_COMPILE_DEFINITIONS CUDNN_FRONTEND_SKIP_JSON_LIB)
  set_property(TARGET CUDNN::cudnn APPEND PROPERTY INTERFACE_LINK_LIBRARIES CUDA::nvrtc CUDA::cudart)
endif()
