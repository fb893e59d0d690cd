// Deprecated forwarding header, kept for one release: moved to jitembed/server/repository/model_source.hpp
// with the model repository's other headers (same names, same component; CHANGELOG). Including it warns.
#pragma once

#pragma GCC warning \
    "jitembed/server/model_source.hpp is deprecated: include jitembed/server/repository/model_source.hpp"

#include "jitembed/server/repository/model_source.hpp"
