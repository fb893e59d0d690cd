# Finds utf8proc (Unicode normalization, categories, case mapping of the tokenizers component); defines Utf8proc::Utf8proc.
include(${CMAKE_CURRENT_LIST_DIR}/JitembedFindHelpers.cmake)
jitembed_find_imported(Utf8proc Utf8proc::Utf8proc HEADER utf8proc.h LIBRARY utf8proc PKGCONFIG libutf8proc)
