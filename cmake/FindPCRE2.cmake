# Finds PCRE2's 8-bit library (the tokenizers component's regexes); defines PCRE2::PCRE2.
include(${CMAKE_CURRENT_LIST_DIR}/JitembedFindHelpers.cmake)
jitembed_find_imported(PCRE2 PCRE2::PCRE2 HEADER pcre2.h LIBRARY pcre2-8 PKGCONFIG libpcre2-8)
if(TARGET PCRE2::PCRE2)
  set_property(TARGET PCRE2::PCRE2 APPEND PROPERTY INTERFACE_COMPILE_DEFINITIONS PCRE2_CODE_UNIT_WIDTH=8)
endif()
