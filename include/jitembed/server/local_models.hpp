// Deprecated forwarding header, kept for one release: moved to jitembed/server/repository/local_models.hpp
// with the model repository's other headers (same names, same component; CHANGELOG). Including it warns.
#pragma once

#pragma GCC warning \
    "jitembed/server/local_models.hpp is deprecated: include jitembed/server/repository/local_models.hpp"

#include "jitembed/server/repository/local_models.hpp"
