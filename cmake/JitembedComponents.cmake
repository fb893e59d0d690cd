# One INTERFACE target per component, headers in a FILE_SET so each one is verified on its own.
set(_inc "${PROJECT_SOURCE_DIR}/include")
set(JITEMBED_COMPONENTS core)

# Every public header compiles on its own: one generated translation unit per header, compiled into
# an OBJECT library that links the component (CMake's VERIFY_INTERFACE_HEADER_SETS skips INTERFACE
# libraries with no sources on 3.25, so the TUs are generated here).
# Those TUs only have to compile, and whether a header compiles on its own does not depend on the optimization
# level: at -Og the client's and gRPC's cost 35-45% less CPU than at the build type's -O3 (-O0 made the server's
# 11% slower: every inline function called is emitted out of line). No precompiled header here: measured, it
# saves too little to be worth a prefix that could hide a missing include (issue #33, docs/architecture.md).
set(JITEMBED_VERIFY_OPTIMIZATION "-Og" CACHE STRING "optimization flag of the header self-containment TUs (empty: the build type's)")
# With GCC or Clang they are not even code-generated: cmake/verify_syntax_only.sh runs the compiler with
# -fsyntax-only (still every template instantiation and static_assert; the depfile too) and leaves an empty
# object: the whole check 463 -> 431 CPU-s (233 -> 217 s at -j2) against -Og (the gRPC server's TU 10.6 -> 6.0).
# It replaces ccache for these TUs (ccache does not cache syntax-only runs).
include(CMakeDependentOption)
cmake_dependent_option(JITEMBED_VERIFY_SYNTAX_ONLY "header self-containment TUs: front end only (-fsyntax-only)" ON
                       "CMAKE_CXX_COMPILER_ID MATCHES GNU|Clang;CMAKE_HOST_UNIX" OFF)
function(jitembed_verify_headers name defines)
  set(_tus)
  foreach(_h IN LISTS ARGN)
    file(RELATIVE_PATH _rel "${_inc}" "${_h}")
    string(MAKE_C_IDENTIFIER "${_rel}" _id)
    # MAKE_C_IDENTIFIER maps '/', '.' and '_' alike (server/repository/config.hpp and the forwarding header
    # server/repository_config.hpp give one name): a name another header took gets its path's hash, so no TU
    # overwrites another and every header is checked.
    get_property(_taken GLOBAL PROPERTY JITEMBED_VERIFY_TU_IDS)
    if(_id IN_LIST _taken)
      string(MD5 _hash "${_rel}")
      string(SUBSTRING "${_hash}" 0 8 _hash)
      set(_id "${_id}_${_hash}")
    endif()
    set_property(GLOBAL APPEND PROPERTY JITEMBED_VERIFY_TU_IDS "${_id}")
    set(_tu "${PROJECT_BINARY_DIR}/verify_headers/${_id}.cpp")
    file(CONFIGURE OUTPUT "${_tu}" CONTENT "#include <${_rel}>\n#include <${_rel}>  // include guard works\n")
    list(APPEND _tus "${_tu}")
    # A deprecated forwarding header (nothing but #pragma once, a #pragma GCC warning and one #include) compiles
    # on its own exactly when its target does, which has its own TU: it is only preprocessed (-E, written where
    # the object would be), which still resolves the include, runs the warning and checks the guard, for
    # ~0.1 instead of 2-5 CPU-s (issue #33). Anything more in it and it is compiled like every other header.
    file(READ "${_h}" _code)
    string(REGEX REPLACE "//[^\n]*" "" _code "${_code}")
    string(REPLACE "\\" " " _code "${_code}")  # line continuations
    string(REGEX REPLACE "[ \t\r\n]+" " " _code "${_code}")
    string(STRIP "${_code}" _code)
    if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang" AND
       _code MATCHES "^#pragma once #pragma GCC warning \"[^\"]*\" #include [<\"][^\">]+[>\"]$")
      set_source_files_properties("${_tu}" PROPERTIES COMPILE_OPTIONS "-E")
    endif()
  endforeach()
  if(_tus)
    add_library(jitembed_verify_headers_${name} OBJECT ${_tus})
    target_link_libraries(jitembed_verify_headers_${name} PRIVATE jitembed::${name})
    target_compile_definitions(jitembed_verify_headers_${name} PRIVATE ${defines})
    if(JITEMBED_VERIFY_OPTIMIZATION)
      target_compile_options(jitembed_verify_headers_${name} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:${JITEMBED_VERIFY_OPTIMIZATION}>")
    endif()
    if(JITEMBED_VERIFY_SYNTAX_ONLY)
      set_target_properties(jitembed_verify_headers_${name} PROPERTIES
                            CXX_COMPILER_LAUNCHER "/bin/sh;${PROJECT_SOURCE_DIR}/cmake/verify_syntax_only.sh")
    endif()
  endif()
endfunction()

# jitembed_component(<name> GLOBS <globs relative to include/> [EXCLUDE <regexes>] [LINK <targets>] [NOT_IN_UMBRELLA]
#                    [VERIFY_DEFINES <definitions>])
# EXCLUDE drops globbed headers matching a regex (another component's files); NOT_IN_UMBRELLA keeps a heavy
# component (torch) out of jitembed::jitembed's links, so only targets that ask for it link it; VERIFY_DEFINES
# are defined in the component's self-containment TUs.
function(jitembed_component name)
  cmake_parse_arguments(_c "NOT_IN_UMBRELLA" "" "GLOBS;LINK;EXCLUDE;VERIFY_DEFINES" ${ARGN})
  set(_files)
  foreach(_g IN LISTS _c_GLOBS)
    file(GLOB _found CONFIGURE_DEPENDS "${_inc}/jitembed/${_g}")
    list(APPEND _files ${_found})
  endforeach()
  foreach(_x IN LISTS _c_EXCLUDE)
    list(FILTER _files EXCLUDE REGEX "${_x}")
  endforeach()
  add_library(jitembed_${name} INTERFACE)
  add_library(jitembed::${name} ALIAS jitembed_${name})
  set_target_properties(jitembed_${name} PROPERTIES EXPORT_NAME ${name})
  target_sources(jitembed_${name} INTERFACE FILE_SET HEADERS BASE_DIRS "${_inc}" FILES ${_files})
  target_compile_features(jitembed_${name} INTERFACE cxx_std_20)
  target_link_libraries(jitembed_${name} INTERFACE ${_c_LINK})
  string(TOUPPER "${name}" _upper)
  target_compile_definitions(jitembed_${name} INTERFACE JITEMBED_HAS_${_upper}=1)  # umbrella headers test these
  if(JITEMBED_VERIFY_HEADERS)
    jitembed_verify_headers(${name} "${_c_VERIFY_DEFINES}" ${_files})
  endif()
  set_property(GLOBAL APPEND PROPERTY JITEMBED_ENABLED_COMPONENTS ${name})
  if(_c_NOT_IN_UMBRELLA)
    set_property(GLOBAL APPEND PROPERTY JITEMBED_NOT_IN_UMBRELLA ${name})
  endif()
endfunction()

jitembed_component(core
  GLOBS core/*.hpp core/detail/*.hpp core.hpp
  LINK XXHash::XXHash DLPack::DLPack Threads::Threads)

# The codec concept and codec ids (no codec library): what every codec component and the format build on.
jitembed_component(codec
  GLOBS codec/codec.hpp
  LINK jitembed::core)

# Dynamic batcher and shape bucketing: only the standard library and core.
jitembed_component(batching
  GLOBS batching.hpp batching/*.hpp batching/detail/*.hpp
  LINK jitembed::core)

# KServe v2 / Open Inference Protocol codec with Triton's binary tensor extension.
jitembed_component(kserve
  GLOBS net/kserve.hpp net/kserve/*.hpp net/kserve/detail/*.hpp
  LINK jitembed::core nlohmann_json::nlohmann_json)

if(JITEMBED_WITH_HTTP)
  # HTTP/1.1 server and client (Boost.Beast), plain or HTTPS (OpenSSL); message.hpp itself is Boost-free.
  jitembed_component(http
    GLOBS net/http.hpp net/http/*.hpp net/http/detail/*.hpp
    LINK jitembed::core Boost::headers OpenSSL::SSL OpenSSL::Crypto Threads::Threads)
endif()

if(JITEMBED_WITH_TOKENIZERS)
  # Hugging Face tokenizer.json (CLIP / GPT-2 / Llama-3 BPE, WordPiece, Unigram): core only, no codec.
  jitembed_component(tokenizers
    GLOBS models/hf_*.hpp models/detail/hf_*.hpp
    LINK jitembed::core nlohmann_json::nlohmann_json PCRE2::PCRE2 Utf8proc::Utf8proc)
endif()

if(JITEMBED_WITH_ZSTD)
  jitembed_component(zstd
    GLOBS codec/zstd*.hpp codec/shuffle*.hpp codec/text*.hpp codec/detail/zstd*.hpp
    LINK jitembed::core jitembed::codec Zstd::Zstd)
  jitembed_component(format
    GLOBS format/*.hpp format/detail/*.hpp format.hpp
    LINK jitembed::core jitembed::zstd)
endif()

if(JITEMBED_WITH_ZSTD)
  # Cache keys, the store concept, the memory store, value encoding and the tiered cache.
  jitembed_component(cache
    GLOBS cache.hpp cache/store.hpp cache/any_store.hpp cache/key*.hpp cache/memory*.hpp cache/tiered*.hpp cache/value*.hpp cache/detail/common*.hpp
    LINK jitembed::core jitembed::format)
  if(JITEMBED_WITH_LMDB)
    jitembed_component(lmdb GLOBS cache/lmdb*.hpp cache/detail/lmdb*.hpp LINK jitembed::cache LMDB::LMDB)
  endif()
  if(JITEMBED_WITH_REDIS)
    jitembed_component(redis GLOBS cache/redis*.hpp cache/detail/redis*.hpp LINK jitembed::cache Hiredis::Hiredis)
  endif()
endif()

if(JITEMBED_WITH_JPEG)
  jitembed_component(jpeg
    GLOBS codec/jpeg*.hpp codec/detail/jpeg*.hpp codec/detail/turbojpeg*.hpp
    LINK jitembed::core jitembed::codec TurboJPEG::TurboJPEG)
endif()

if(JITEMBED_WITH_VIDEO)
  jitembed_component(video
    GLOBS codec/video*.hpp codec/detail/video*.hpp codec/detail/ffmpeg*.hpp
    LINK jitembed::core jitembed::codec FFmpeg::avformat FFmpeg::avcodec FFmpeg::avutil FFmpeg::swscale)
endif()

# Models, one component per family so each links only the codec it decodes:
#   models        the model concept, any_model, preprocess_input glue and the text embedder (zstd, format);
#   models_image  the image-latent embedder (TurboJPEG);
#   models_video  the video-latent embedder (FFmpeg), the reference set of all three (reference.hpp) and
#                 model construction from JSON parameters (factory.hpp, reference_factory.hpp).
if(JITEMBED_WITH_ZSTD)
  jitembed_component(models
    GLOBS models.hpp models/model.hpp models/any_model.hpp models/emulated_latency.hpp models/preprocess_input.hpp
          models/text_embed.hpp models/detail/kernels.hpp models/backend_config.hpp
    LINK jitembed::core jitembed::zstd jitembed::format)
  if(JITEMBED_WITH_JPEG)
    jitembed_component(models_image GLOBS models/image_latent.hpp LINK jitembed::models jitembed::jpeg)
  endif()
  if(JITEMBED_WITH_JPEG AND JITEMBED_WITH_VIDEO)
    # models/preprocess.hpp: the real encoders' image / video preprocessing (torchvision's PIL pipeline).
    jitembed_component(models_video
      GLOBS models/video_latent.hpp models/reference.hpp models/preprocess.hpp models/preprocess_function.hpp models/detail/pil_resample.hpp models/detail/param_parse.hpp
            models/factory.hpp models/reference_factory.hpp
      LINK jitembed::models_image jitembed::video nlohmann_json::nlohmann_json)
    if(JITEMBED_WITH_TORCH)
      # LibTorch adapters (TorchScript, AOTInductor packages, torch::nn modules as models). models/tokenizer.hpp
      # (SentencePiece: the repository's text models) joins it when SentencePiece is found, i.e. the build
      # scripts/install-deps.sh makes against the system protobuf (cmake/FindSentencePiece.cmake: Debian's
      # libsentencepiece embeds protobuf 3.14 and crashes next to libprotobuf.so.32); it then defines
      # JITEMBED_WITH_SENTENCEPIECE=1 in the build tree (an installed package leaves linking it to the consumer).
      # Heavy: not linked by the umbrella target. `torch` is TorchConfig.cmake's imported target (it brings
      # torch_cpu, c10 and, in a CUDA build of LibTorch, torch_cuda); TORCH_LIBRARIES would bake absolute paths
      # into the export.
      set(_torch_globs models/torch*.hpp models/detail/torch*.hpp)
      if(TARGET SentencePiece::SentencePiece)
        list(APPEND _torch_globs models/tokenizer.hpp)
      endif()
      # Text models tokenize with a Hugging Face tokenizer.json (the `tokenizer` parameter): jitembed::tokenizers.
      if(NOT JITEMBED_WITH_TOKENIZERS)
        message(FATAL_ERROR "JITEMBED_WITH_TORCH needs JITEMBED_WITH_TOKENIZERS (the text models' tokenizer.json)")
      endif()
      jitembed_component(torch
        GLOBS ${_torch_globs}
        LINK jitembed::models_video jitembed::tokenizers torch
        NOT_IN_UMBRELLA)
      # A CUDA LibTorch (torch_cuda): GPU models stage batches through pinned memory on per-instance streams
      # (models/detail/torch_cuda_staging.hpp).
      target_compile_definitions(jitembed_torch INTERFACE $<$<TARGET_EXISTS:torch_cuda>:JITEMBED_TORCH_CUDA=1>)
      if(TARGET SentencePiece::SentencePiece)
        target_link_libraries(jitembed_torch INTERFACE $<BUILD_INTERFACE:SentencePiece::SentencePiece>)
        target_compile_definitions(jitembed_torch INTERFACE $<BUILD_INTERFACE:JITEMBED_WITH_SENTENCEPIECE=1>)
      endif()
    endif()
  endif()
endif()

if(JITEMBED_WITH_PROTOBUF)
  # .proto text built into a DescriptorPool at run time (libprotoc's parser): the base of the repository's
  # config.pbtxt schema and of the KServe gRPC messages. Not linked by the umbrella target.
  jitembed_component(protobuf
    GLOBS net/protobuf/*.hpp
    LINK jitembed::core protobuf::libprotobuf protobuf::libprotoc
    NOT_IN_UMBRELLA)
endif()

if(JITEMBED_WITH_ZSTD AND JITEMBED_WITH_JPEG AND JITEMBED_WITH_VIDEO)
  # The embedding service: model registry, per-model batchers, KServe v2 routes (HTTP-agnostic handler).
  # server/repository/ holds both components' headers: the seam (model_source), local_models and the version
  # policy are the service's (no protobuf); config.pbtxt parsing, its schema, the backends and model_repository
  # are the repository component's. _server_side names the former once, so each header is checked in one component.
  set(_server_side repository/model_source repository/local_models repository/detail/version_policy)
  list(TRANSFORM _server_side PREPEND "server/" OUTPUT_VARIABLE _server_side_globs)
  list(TRANSFORM _server_side_globs APPEND ".hpp")
  string(REPLACE ";" "|" _server_side_regex "/server/(${_server_side})\\.hpp$")
  jitembed_component(server
    GLOBS server.hpp server/*.hpp server/detail/*.hpp server/http/*.hpp server/shm/detail/*.hpp ${_server_side_globs}
    EXCLUDE "/server/(detail/)?(model_)?repository[^/]*\\.hpp$" "/server/(detail/)?grpc[^/]*\\.hpp$"
    LINK jitembed::kserve jitembed::batching jitembed::models_video jitembed::format ZLIB::ZLIB)
  if(JITEMBED_WITH_REPOSITORY)
    # The model repository: config.pbtxt (protobuf text format against a schema built at run time:
    # net/protobuf/), backends, loading into a service (server/repository/), with the deprecated forwarding
    # headers at their old server/ paths (one release). Not linked by the umbrella target.
    jitembed_component(repository
      GLOBS server/repository*.hpp server/model_repository*.hpp server/repository/*.hpp server/repository/detail/*.hpp
      EXCLUDE "${_server_side_regex}"
      LINK jitembed::server jitembed::protobuf protobuf::libprotobuf
      NOT_IN_UMBRELLA)
  endif()
endif()
if(JITEMBED_WITH_ZSTD AND JITEMBED_WITH_HTTP)
  # The JIT client (async KServe v2 over Beast, balancing, retries, local mode): the base models component only
  # (local mode runs whatever any_model it is given), no image/video codecs.
  jitembed_component(client
    GLOBS client.hpp client/*.hpp client/detail/*.hpp
    EXCLUDE "/client/detail/client_grpc[^/]*\\.hpp$"
            "/client/(jit_loader|loader_options|loader_stats|epoch_plan|step)\\.hpp$"  # the loader's (below)
    LINK jitembed::http jitembed::kserve jitembed::models jitembed::cache jitembed::format Threads::Threads)
  # The prefetching loader over the client, the cache and the format (loader/README.md), with the deprecated
  # forwarding headers at its old client/ paths (one release). Its headers are verified in separate compilation
  # (core/config.hpp): each still compiles on its own, without compiling the client's Beast implementation
  # again in every loader TU (the client's own check compiles that, header-only).
  jitembed_component(loader
    GLOBS loader.hpp loader/*.hpp loader/detail/*.hpp
          client/jit_loader.hpp client/loader_options.hpp client/loader_stats.hpp client/epoch_plan.hpp client/step.hpp
    LINK jitembed::client jitembed::cache jitembed::format
    VERIFY_DEFINES JITEMBED_SEPARATE_COMPILATION)
endif()

if(JITEMBED_WITH_GRPC AND TARGET jitembed_server AND TARGET jitembed_client)
  # KServe v2 gRPC, both ends: the service's front end (server/grpc*.hpp: inference.GRPCInferenceService over
  # the same core) and the JIT client's grpc:// transport (client/detail/client_grpc.hpp, compiled into the
  # client when a program links this component: JITEMBED_HAS_GRPC). The schema (net/grpc/) is a .proto text
  # built at run time, so nothing is generated. Not linked by the umbrella target.
  jitembed_component(grpc
    GLOBS net/grpc/*.hpp server/grpc*.hpp server/grpc/*.hpp server/detail/grpc*.hpp client/detail/client_grpc*.hpp
    LINK jitembed::server jitembed::client jitembed::protobuf protobuf::libprotobuf gRPC::grpc++
    NOT_IN_UMBRELLA)
endif()

if(JITEMBED_WITH_CUDA)
  jitembed_component(cuda
    GLOBS cuda/*.hpp cuda.hpp
    LINK jitembed::core CUDA::cudart)
  # .cuh headers need nvcc: installed with the component, compiled by the .cu tests, not verified by g++.
  file(GLOB _cuh CONFIGURE_DEPENDS "${_inc}/jitembed/cuda/*.cuh")
  if(TARGET jitembed_models_video)
    file(GLOB _models_cuh CONFIGURE_DEPENDS "${_inc}/jitembed/models/cuda/*.cuh" "${_inc}/jitembed/models/cuda/detail/*.cuh")  # CUDA reference models
    list(APPEND _cuh ${_models_cuh})
  endif()
  target_sources(jitembed_cuda INTERFACE FILE_SET cuda_kernels TYPE HEADERS BASE_DIRS "${_inc}" FILES ${_cuh})
endif()

if(JITEMBED_WITH_PARALLEL)
  # Placements, functional collectives, tensor/sequence-parallel layers, hybrid plans, and the CBLAS
  # reference math they are checked against (jitembed/nn/: same dependencies, so the same component).
  jitembed_component(parallel
    GLOBS parallel.hpp parallel/*.hpp parallel/detail/*.hpp nn.hpp nn/*.hpp nn/detail/*.hpp
    EXCLUDE "/parallel/(detail/)?gloo[^/]*\\.hpp$" "/parallel/(detail/)?nccl[^/]*\\.hpp$" "/parallel/(detail/)?tcp_store[^/]*\\.hpp$"
    LINK jitembed::core OpenBLAS::OpenBLAS Threads::Threads)
  if(JITEMBED_WITH_HTTP)
    # TCP rendezvous store (Boost.Asio, header-only): the parallel component itself does not need Boost.
    jitembed_component(tcp_store GLOBS parallel/tcp_store*.hpp parallel/detail/tcp_store*.hpp LINK jitembed::parallel Boost::headers Threads::Threads)
  endif()
  if(JITEMBED_WITH_GLOO)
    jitembed_component(gloo GLOBS parallel/gloo*.hpp parallel/detail/gloo*.hpp LINK jitembed::parallel gloo)
  endif()
  if(JITEMBED_WITH_CUDA)
    jitembed_component(nccl GLOBS parallel/nccl*.hpp parallel/detail/nccl*.hpp parallel/cuda/*.hpp
      EXCLUDE "/parallel/cuda/cudnn[^/]*\\.hpp$"
      LINK jitembed::parallel jitembed::cuda NCCL::NCCL CUDA::cublas)
    if(JITEMBED_WITH_CUDNN)
      # cuDNN's fused attention (SDPA) as a cuda_backend attention engine: its own component, so that the
      # NCCL layers need neither cuDNN nor the frontend's heavy headers. Not in the umbrella: a consumer asks for
      # it (find_package(jitembed COMPONENTS cudnn)), its configure then finds the frontend (CUDNN_FRONTEND_ROOT).
      jitembed_component(cudnn GLOBS parallel/cuda/cudnn*.hpp LINK jitembed::nccl CUDNN::cudnn NOT_IN_UMBRELLA)
    endif()
    # cuda_backend's kernel definitions (nvcc, one .cu of the program includes them): installed, not verified by g++.
    file(GLOB _parallel_cuh CONFIGURE_DEPENDS "${_inc}/jitembed/parallel/cuda/*.cuh")
    target_sources(jitembed_nccl INTERFACE FILE_SET cuda_kernels TYPE HEADERS BASE_DIRS "${_inc}" FILES ${_parallel_cuh})
  endif()
endif()

# Umbrella: everything that is enabled, plus the umbrella headers (which include what is available).
get_property(_enabled GLOBAL PROPERTY JITEMBED_ENABLED_COMPONENTS)
set(_links)
get_property(_not_in_umbrella GLOBAL PROPERTY JITEMBED_NOT_IN_UMBRELLA)
foreach(_c IN LISTS _enabled)
  if(NOT _c IN_LIST _not_in_umbrella)
    list(APPEND _links jitembed::${_c})
  endif()
endforeach()
jitembed_component(jitembed GLOBS jitembed.hpp codec.hpp LINK ${_links})
set(JITEMBED_ENABLED_COMPONENTS ${_enabled})
