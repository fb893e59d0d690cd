# Finds the dependencies of the enabled components; every one is REQUIRED once its component is on.
# JITEMBED_FIND_DEPENDENCIES=OFF is for packagers of the header-only library (the Conan recipe): nothing is
# compiled, so the install step needs no dependency; the installed config finds each component's
# dependencies in the consumer's configure (find_dependency), where they are REQUIRED as always.
option(JITEMBED_FIND_DEPENDENCIES "find the components' dependencies (OFF: install-only packaging, nothing built)" ON)
if(NOT JITEMBED_FIND_DEPENDENCIES)
  foreach(_o JITEMBED_BUILD_TESTS JITEMBED_BUILD_TOOLS JITEMBED_BUILD_EXAMPLES JITEMBED_BUILD_BENCHMARKS
             JITEMBED_VERIFY_HEADERS JITEMBED_WITH_CUDA)
    if(${_o})
      message(FATAL_ERROR "JITEMBED_FIND_DEPENDENCIES=OFF only installs the headers and the CMake package: set ${_o}=OFF")
    endif()
  endforeach()
  return()
endif()
find_package(XXHash REQUIRED)
find_package(DLPack REQUIRED)
find_package(Threads REQUIRED)
find_package(nlohmann_json REQUIRED)  # net/kserve (protocol headers)
if(JITEMBED_WITH_ZSTD)
  find_package(Zstd REQUIRED)
endif()
if(JITEMBED_WITH_JPEG)
  find_package(TurboJPEG REQUIRED)
endif()
if(JITEMBED_WITH_VIDEO)
  find_package(FFmpeg REQUIRED COMPONENTS avformat avcodec avutil swscale)
endif()
if(JITEMBED_WITH_ZSTD AND JITEMBED_WITH_JPEG AND JITEMBED_WITH_VIDEO)
  find_package(ZLIB REQUIRED)  # server: HTTP Content-Encoding gzip / deflate, as Triton accepts it (Debian: zlib1g-dev)
endif()
if(JITEMBED_WITH_HTTP)
  find_package(Boost 1.74 REQUIRED)  # net/http: Beast + Asio, header-only (Boost::headers)
  find_package(OpenSSL 1.1.1 REQUIRED)  # net/http: HTTPS through Asio's ssl (Debian: libssl-dev)
endif()
# Before Torch: the wheel's Caffe2Config.cmake defines protobuf::libprotobuf as an alias of an INTERFACE
# target "dummy" when no protobuf target exists yet, which the protobuf component would then link.
foreach(_o JITEMBED_WITH_REPOSITORY JITEMBED_WITH_GRPC)  # both build their schemas with the protobuf component
  if(${_o} AND NOT JITEMBED_WITH_PROTOBUF)
    message(FATAL_ERROR "${_o} needs JITEMBED_WITH_PROTOBUF (the .proto schemas it builds at run time)")
  endif()
endforeach()
if(JITEMBED_WITH_PROTOBUF)
  # net/protobuf/: .proto text built at run time (the repository's config.pbtxt schema, the KServe gRPC
  # messages). Debian: libprotobuf-dev libprotoc-dev.
  find_package(Protobuf REQUIRED)
  if(NOT TARGET protobuf::libprotoc)
    message(FATAL_ERROR "JITEMBED_WITH_PROTOBUF needs libprotoc (the .proto parser; Debian: libprotoc-dev)")
  endif()
endif()
if(JITEMBED_WITH_GRPC)
  # server/grpc_server.hpp: gRPC's callback API on generic byte buffers, messages built at run time from a
  # .proto text (net/protobuf/, like the repository's schema). Debian: libgrpc++-dev, and protobuf-compiler-grpc, whose
  # grpc_cpp_plugin gRPCTargets.cmake checks for (find_package fails without it, though nothing here runs it).
  find_package(gRPC CONFIG REQUIRED)
endif()
if(JITEMBED_WITH_TORCH)
  # models/torch*.hpp: LibTorch >= 2.6 (torch::inductor::AOTIModelPackageLoader), the one in the PyTorch wheel
  # (scripts/install-deps.sh torch); cmake/FindTorch.cmake wraps its TorchConfig.cmake. JITEMBED_TORCH_PYTHON:
  # the Python whose torch package is searched first (also the one ctest models/export runs).
  set(_jitembed_default_python "")
  if(EXISTS "${PROJECT_SOURCE_DIR}/.venv/bin/python")
    set(_jitembed_default_python "${PROJECT_SOURCE_DIR}/.venv/bin/python")
  endif()
  set(JITEMBED_TORCH_PYTHON "${_jitembed_default_python}" CACHE FILEPATH
      "Python with the pinned PyTorch wheel (scripts/install-deps.sh torch): its LibTorch, and scripts/export_models.py")
  find_package(Torch 2.6 REQUIRED)
  find_package(SentencePiece)  # models/tokenizer.hpp (install-deps builds it: cmake/FindSentencePiece.cmake says why not Debian's)
endif()
if(JITEMBED_WITH_TOKENIZERS)
  find_package(PCRE2 REQUIRED)     # models/hf_tokenizer.hpp: the pre-tokenizers' and Replace's regexes (Debian: libpcre2-dev)
  find_package(Utf8proc REQUIRED)  # models/hf_tokenizer.hpp: normalization, categories, case (Debian: libutf8proc-dev)
endif()
if(JITEMBED_WITH_LMDB)
  find_package(LMDB REQUIRED)
endif()
if(JITEMBED_WITH_REDIS)
  find_package(Hiredis REQUIRED)
endif()
if(JITEMBED_WITH_PARALLEL)
  find_package(OpenBLAS REQUIRED)  # parallel/math.hpp: CBLAS GEMMs on CPU
  if(JITEMBED_WITH_GLOO)
    find_package(Gloo CONFIG REQUIRED)  # Debian's libgloo-dev: target `gloo`
  endif()
  if(JITEMBED_WITH_CUDA)
    find_package(NCCL REQUIRED)
    if(JITEMBED_WITH_CUDNN)
      find_package(CUDNN REQUIRED)  # parallel/cuda/cudnn*.hpp: cuDNN 9 + the frontend headers (cmake/FindCUDNN.cmake)
    endif()
  endif()
endif()
