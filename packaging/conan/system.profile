# Host profile that takes jitembed's dependencies from the system (Debian 12: scripts/install-deps.sh):
#   conan create packaging/conan -pr:h=default -pr:h=packaging/conan/system.profile -pr:b=default --build=missing -nr
# Versions are Debian 12's; packaging/graph.py checks that every Conan requirement of the recipe is here.
[settings]
compiler.cppstd=20

[platform_requires]
boost/1.74.0
dlpack/0.6
ffmpeg/5.1.9
gloo/0.0.20220518
grpc/1.51.1
hiredis/0.14.1
libjpeg-turbo/2.1.5
lmdb/0.9.24
nlohmann_json/3.11.2
openblas/0.3.21
openssl/3.0.19
pcre2/10.42
protobuf/3.21.12
utf8proc/2.8.0
xxhash/0.8.1
zlib/1.2.13
zstd/1.5.4
