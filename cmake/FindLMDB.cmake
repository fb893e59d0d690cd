# Finds LMDB; defines LMDB::LMDB.
include(${CMAKE_CURRENT_LIST_DIR}/JitembedFindHelpers.cmake)
jitembed_find_imported(LMDB LMDB::LMDB HEADER lmdb.h LIBRARY lmdb PKGCONFIG lmdb)
