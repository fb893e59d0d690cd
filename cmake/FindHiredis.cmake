# Finds hiredis; defines Hiredis::Hiredis.
include(${CMAKE_CURRENT_LIST_DIR}/JitembedFindHelpers.cmake)
jitembed_find_imported(Hiredis Hiredis::Hiredis HEADER hiredis/hiredis.h LIBRARY hiredis PKGCONFIG hiredis)
