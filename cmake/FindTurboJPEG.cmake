# Finds libjpeg-turbo's TurboJPEG API; defines TurboJPEG::TurboJPEG.
include(${CMAKE_CURRENT_LIST_DIR}/JitembedFindHelpers.cmake)
jitembed_find_imported(TurboJPEG TurboJPEG::TurboJPEG HEADER turbojpeg.h LIBRARY turbojpeg PKGCONFIG libturbojpeg)
