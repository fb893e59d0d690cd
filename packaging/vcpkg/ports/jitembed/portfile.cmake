# Overlay port of jitembed (header-only, C++20), built from this checkout:
#   vcpkg install jitembed[client,gloo] --overlay-ports=<repo>/packaging/vcpkg/ports
# A port in a registry would take the sources with vcpkg_from_github(REPO ... REF v${VERSION} SHA512 ...)
# instead of SOURCE_PATH below. Features and their CMake options come from cmake/components.json
# (packaging/graph.py --write; ctest packaging/graph checks them).
set(VCPKG_BUILD_TYPE release)  # header-only: one configuration
set(SOURCE_PATH "${CMAKE_CURRENT_LIST_DIR}/../../../..")

# --- generated from cmake/components.json (packaging/graph.py --write) ---
vcpkg_check_features(OUT_FEATURE_OPTIONS FEATURE_OPTIONS
  FEATURES
    cuda JITEMBED_WITH_CUDA
    gloo JITEMBED_WITH_GLOO
    grpc JITEMBED_WITH_GRPC
    http JITEMBED_WITH_HTTP
    jpeg JITEMBED_WITH_JPEG
    lmdb JITEMBED_WITH_LMDB
    parallel JITEMBED_WITH_PARALLEL
    protobuf JITEMBED_WITH_PROTOBUF
    redis JITEMBED_WITH_REDIS
    repository JITEMBED_WITH_REPOSITORY
    tokenizers JITEMBED_WITH_TOKENIZERS
    torch JITEMBED_WITH_TORCH
    video JITEMBED_WITH_VIDEO
    zstd JITEMBED_WITH_ZSTD
)
# --- end generated ---

vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS
    ${FEATURE_OPTIONS}
    -DJITEMBED_BUILD_TESTS=OFF
    -DJITEMBED_BUILD_TOOLS=OFF
    -DJITEMBED_BUILD_EXAMPLES=OFF
    -DJITEMBED_BUILD_BENCHMARKS=OFF
    -DJITEMBED_VERIFY_HEADERS=OFF
)
vcpkg_cmake_install()
vcpkg_cmake_config_fixup(PACKAGE_NAME jitembed CONFIG_PATH share/cmake/jitembed)
vcpkg_fixup_pkgconfig()

file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
