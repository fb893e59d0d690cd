"""Conan 2 recipe for jitembed, a header-only C++20 library.

One package holds every CPU component's headers and jitembed's own CMake package (share/cmake/jitembed):
nothing is compiled, so the package does not depend on the options (package_id clears them). An option
with_<component> only decides which Conan requirements the consumer's graph gets: the component's
external dependencies and those of the components it needs. Consumers use the installed CMake config,
find_package(jitembed CONFIG REQUIRED COMPONENTS ...), which finds those dependencies (Conan's own
CMakeDeps, or the system's with [platform_requires]).

The tables between the markers are generated from cmake/components.json by packaging/graph.py
(`python3 packaging/graph.py --write`); ctest packaging/graph fails when they disagree.
"""
import os
import re

from conan import ConanFile
from conan.errors import ConanInvalidConfiguration
from conan.tools.build import check_min_cppstd
from conan.tools.cmake import CMake, CMakeToolchain, cmake_layout
from conan.tools.files import copy, load

required_conan_version = ">=2.0"

# --- generated from cmake/components.json (packaging/graph.py --write) ---
# component -> jitembed components it links
COMPONENT_REQUIRES = {
    "batching": ["core"],
    "cache": ["core", "format"],
    "client": ["http", "kserve", "models", "cache", "format"],
    "codec": ["core"],
    "core": [],
    "format": ["core", "zstd"],
    "gloo": ["parallel"],
    "grpc": ["server", "client", "protobuf"],
    "http": ["core"],
    "jpeg": ["core", "codec"],
    "kserve": ["core"],
    "lmdb": ["cache"],
    "loader": ["client", "cache", "format"],
    "models": ["core", "zstd", "format"],
    "models_image": ["models", "jpeg"],
    "models_video": ["models_image", "video"],
    "parallel": ["core"],
    "protobuf": ["core"],
    "redis": ["cache"],
    "repository": ["server", "protobuf"],
    "server": ["kserve", "batching", "models_video", "format"],
    "tcp_store": ["parallel"],
    "tokenizers": ["core"],
    "video": ["core", "codec"],
    "zstd": ["core", "codec"],
}
# component -> Conan references of its external dependencies
COMPONENT_CONAN_DEPS = {
    "batching": [],
    "cache": [],
    "client": [],
    "codec": [],
    "core": ["xxhash/[>=0.8.1 <0.9]", "dlpack/[>=0.6 <2]"],
    "format": [],
    "gloo": ["gloo/[>=0.0.20220518]"],
    "grpc": ["protobuf/[>=3.21 <6]", "grpc/[>=1.51 <2]"],
    "http": ["boost/[>=1.74 <2]", "openssl/[>=1.1.1 <4]"],
    "jpeg": ["libjpeg-turbo/[>=2.1 <4]"],
    "kserve": ["nlohmann_json/[>=3.11 <4]"],
    "lmdb": ["lmdb/[>=0.9 <1]"],
    "loader": [],
    "models": [],
    "models_image": [],
    "models_video": ["nlohmann_json/[>=3.11 <4]"],
    "parallel": ["openblas/[>=0.3 <1]"],
    "protobuf": ["protobuf/[>=3.21 <6]"],
    "redis": ["hiredis/[>=0.14 <2]"],
    "repository": ["protobuf/[>=3.21 <6]"],
    "server": ["zlib/[>=1.2.11 <2]"],
    "tcp_store": ["boost/[>=1.74 <2]"],
    "tokenizers": ["nlohmann_json/[>=3.11 <4]", "pcre2/[>=10.40 <11]", "utf8proc/[>=2.8 <3]"],
    "video": ["ffmpeg/[>=5.1 <8]"],
    "zstd": ["zstd/[>=1.5 <2]"],
}
# components always installed and always required (no CMake option turns them off)
BASE_COMPONENTS = ["batching", "codec", "core", "kserve"]
# --- end generated ---


class JitembedConan(ConanFile):
    name = "jitembed"
    description = "Just-in-time embedding for generative-model training (header-only, C++20)"
    license = "Apache-2.0"
    topics = ("embedding", "inference", "header-only", "kserve", "training")
    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"
    options = {f"with_{c}": [True, False] for c in COMPONENT_REQUIRES if c not in BASE_COMPONENTS}
    default_options = {f"with_{c}": True for c in COMPONENT_REQUIRES if c not in BASE_COMPONENTS}
    no_copy_source = True

    def set_version(self):
        # the project's version, from the top-level CMakeLists.txt
        text = load(self, os.path.join(self.recipe_folder, "..", "..", "CMakeLists.txt"))
        self.version = self.version or re.search(r"project\(jitembed VERSION ([0-9.]+)", text).group(1)

    def export_sources(self):
        root = os.path.join(self.recipe_folder, "..", "..")
        for pattern in ("CMakeLists.txt", "LICENSE", "cmake/*", "include/*"):
            copy(self, pattern, src=root, dst=self.export_sources_folder)

    def layout(self):
        cmake_layout(self, src_folder=".")

    def _enabled(self):
        return [c for c in COMPONENT_REQUIRES if c in BASE_COMPONENTS or self.options.get_safe(f"with_{c}")]

    def validate(self):
        check_min_cppstd(self, 20)
        enabled = self._enabled()
        for c in enabled:
            for r in COMPONENT_REQUIRES[c]:
                if r not in enabled:
                    raise ConanInvalidConfiguration(f"{self.ref}: with_{c}=True needs with_{r}=True")

    def requirements(self):
        refs = []
        for c in self._enabled():
            for ref in COMPONENT_CONAN_DEPS[c]:
                if ref not in refs:
                    refs.append(ref)
        for ref in refs:
            # a header-library's requirements reach its consumers (headers and libraries)
            self.requires(ref, transitive_headers=True, transitive_libs=True)

    def package_id(self):
        self.info.clear()

    def generate(self):
        tc = CMakeToolchain(self)
        tc.cache_variables["JITEMBED_FIND_DEPENDENCIES"] = False  # install only: nothing is compiled
        for v in ("BUILD_TESTS", "BUILD_TOOLS", "BUILD_EXAMPLES", "BUILD_BENCHMARKS", "VERIFY_HEADERS", "WITH_CUDA"):
            tc.cache_variables[f"JITEMBED_{v}"] = False
        tc.generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()

    def package(self):
        copy(self, "LICENSE", src=self.source_folder, dst=os.path.join(self.package_folder, "licenses"))
        cmake = CMake(self)
        cmake.install()

    def package_info(self):
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []
        # jitembed's own config (share/cmake/jitembed) with its COMPONENTS; CMakeToolchain puts builddirs
        # on CMAKE_PREFIX_PATH, so find_package(jitembed CONFIG) finds it.
        self.cpp_info.set_property("cmake_find_mode", "none")
        self.cpp_info.builddirs = ["."]
        self.cpp_info.set_property("pkg_config_name", "jitembed")
