// Deprecated forwarding header, kept for one release: moved to jitembed/server/repository/backends.hpp
// with the model repository's other headers (same names, same component; CHANGELOG). Including it warns.
#pragma once

#pragma GCC warning \
    "jitembed/server/repository_backends.hpp is deprecated: include jitembed/server/repository/backends.hpp"

#include "jitembed/server/repository/backends.hpp"
