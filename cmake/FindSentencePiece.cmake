# Finds SentencePiece (the tokenizer of T5-style text encoders, models/tokenizer.hpp); defines
# SentencePiece::SentencePiece.
#
# Only the build scripts/install-deps.sh makes (set torch) is searched: SentencePiece 0.2.0 from its PyPI
# sdist, compiled as a static PIC library against the system's protobuf, in <root>/.deps/sentencepiece.
# Debian's libsentencepiece.so.0 (0.1.97) is refused on purpose: it embeds protobuf 3.14 and exports its
# symbols, so any process that also loads libprotobuf.so.32 (the repository component's config.pbtxt
# parser) crashes at start-up. Set SentencePiece_ROOT to use another build made against the same protobuf.
if(NOT SentencePiece_ROOT)
  set(SentencePiece_ROOT "${PROJECT_SOURCE_DIR}/.deps/sentencepiece")
endif()
find_path(SentencePiece_INCLUDE_DIR NAMES sentencepiece_processor.h PATHS "${SentencePiece_ROOT}/include" NO_DEFAULT_PATH)
find_library(SentencePiece_LIBRARY NAMES libsentencepiece.a sentencepiece PATHS "${SentencePiece_ROOT}/lib" NO_DEFAULT_PATH)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(SentencePiece REQUIRED_VARS SentencePiece_INCLUDE_DIR SentencePiece_LIBRARY)
if(SentencePiece_FOUND AND NOT TARGET SentencePiece::SentencePiece)
  find_package(Protobuf REQUIRED)
  find_package(Threads REQUIRED)
  add_library(SentencePiece::SentencePiece UNKNOWN IMPORTED)
  set_target_properties(SentencePiece::SentencePiece PROPERTIES
    IMPORTED_LOCATION "${SentencePiece_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${SentencePiece_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "protobuf::libprotobuf;Threads::Threads")
endif()
mark_as_advanced(SentencePiece_INCLUDE_DIR SentencePiece_LIBRARY)
