# Finds libxxhash (XXH3); defines XXHash::XXHash.
include(${CMAKE_CURRENT_LIST_DIR}/JitembedFindHelpers.cmake)
jitembed_find_imported(XXHash XXHash::XXHash HEADER xxhash.h LIBRARY xxhash PKGCONFIG libxxhash)
