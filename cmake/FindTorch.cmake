# Finds LibTorch through its own TorchConfig.cmake (the one in the PyTorch wheel: put the torch package
# directory on CMAKE_PREFIX_PATH, `python -c 'import os, torch; print(os.path.dirname(torch.__file__))'`, or
# name that Python in JITEMBED_TORCH_PYTHON) and fixes what that config leaves to its user; defines the target
# `torch` (and TORCH_INSTALL_PREFIX).
#  - find_library in TorchConfig.cmake searches every prefix's lib/ and the system before the wheel's own lib/:
#    with only torch.utils.cmake_prefix_path (share/cmake) on the prefix path, a system LibTorch (Debian's
#    1.13 in /usr/lib) is linked under the wheel's headers. Refused here with the fix in the message.
#  - A CUDA LibTorch (the default wheel) enables CUDA and, without TORCH_CUDA_ARCH_LIST, try_runs a GPU probe
#    in the CUDA dialect of CMAKE_CXX_STANDARD, which CMake 3.25 cannot compile for nvcc 13. The list only
#    sets flags for .cu files compiled against LibTorch; the default here is 9.0 (Hopper).
#  - A CUDA LibTorch links libtorch_cuda.so, whose NCCL/cuDNN/CUDA libraries are in the wheel's nvidia/*/lib
#    (found at run time through its RPATH); at link time the toolkit's older libnccl in /usr/local/cuda/lib
#    comes first and an executable fails with undefined nccl* symbols. Those directories go on -rpath-link.
include(FindPackageHandleStandardArgs)
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST "9.0")
endif()
set(_jitembed_torch_version_arg)
if(Torch_FIND_VERSION)
  set(_jitembed_torch_version_arg ${Torch_FIND_VERSION})
endif()
# JITEMBED_TORCH_PYTHON (jitembed's own build sets it to the project's .venv/bin/python when there is one):
# without a Torch_DIR yet, the torch package of that Python goes first on CMAKE_PREFIX_PATH.
if(JITEMBED_TORCH_PYTHON AND NOT Torch_DIR AND EXISTS "${JITEMBED_TORCH_PYTHON}")
  execute_process(
    COMMAND "${JITEMBED_TORCH_PYTHON}" -c "import importlib.util as u; print(u.find_spec('torch').submodule_search_locations[0])"
    OUTPUT_VARIABLE _jitembed_torch_dir OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _jitembed_torch_rc ERROR_QUIET)
  if(_jitembed_torch_rc EQUAL 0 AND IS_DIRECTORY "${_jitembed_torch_dir}")
    list(PREPEND CMAKE_PREFIX_PATH "${_jitembed_torch_dir}")
  endif()
endif()
find_package(Torch ${_jitembed_torch_version_arg} CONFIG QUIET)
set(_jitembed_torch_why "")
if(Torch_FOUND)
  get_filename_component(_jitembed_torch_lib "${TORCH_LIBRARY}" DIRECTORY)
  get_filename_component(_jitembed_torch_lib "${_jitembed_torch_lib}" REALPATH)
  get_filename_component(_jitembed_torch_own "${TORCH_INSTALL_PREFIX}/lib" REALPATH)
  if(NOT _jitembed_torch_lib STREQUAL _jitembed_torch_own)
    set(Torch_FOUND FALSE)
    string(CONCAT _jitembed_torch_why "TorchConfig.cmake of ${TORCH_INSTALL_PREFIX} found ${TORCH_LIBRARY}, another LibTorch's library: "
        "put the torch package directory (${TORCH_INSTALL_PREFIX}) on CMAKE_PREFIX_PATH, not its share/cmake")
  endif()
else()
  list(JOIN Torch_CONSIDERED_CONFIGS ", " _jitembed_torch_configs)
  list(JOIN Torch_CONSIDERED_VERSIONS ", " _jitembed_torch_versions)
  string(CONCAT _jitembed_torch_why "no LibTorch ${_jitembed_torch_version_arg} (considered: ${_jitembed_torch_configs}; "
      "versions ${_jitembed_torch_versions}): install the pinned PyTorch wheel (bash scripts/install-deps.sh torch) and "
      "configure with -DCMAKE_PREFIX_PATH=\"$(.venv/bin/python -c 'import os, torch; print(os.path.dirname(torch.__file__))')\"")
endif()
if(Torch_FOUND AND TARGET torch_cuda)
  file(GLOB _jitembed_torch_nvidia LIST_DIRECTORIES TRUE "${TORCH_INSTALL_PREFIX}/../nvidia/*/lib")
  foreach(_d IN LISTS _jitembed_torch_nvidia)
    get_filename_component(_d "${_d}" REALPATH)
    set_property(TARGET torch APPEND PROPERTY INTERFACE_LINK_OPTIONS "LINKER:-rpath-link,${_d}")
  endforeach()
endif()
if(Torch_FOUND)
  find_package_handle_standard_args(Torch REQUIRED_VARS TORCH_LIBRARY TORCH_INSTALL_PREFIX VERSION_VAR Torch_VERSION)
else()
  set(Torch_FOUND FALSE)
  if(Torch_FIND_REQUIRED)
    message(FATAL_ERROR "Could not find Torch: ${_jitembed_torch_why}")
  elseif(NOT Torch_FIND_QUIETLY)
    message(STATUS "Could not find Torch: ${_jitembed_torch_why}")
  endif()
endif()
