// Deprecated forwarding header, kept for one release: moved to jitembed/server/repository/model_repository.hpp
// with the model repository's other headers (same names, same component; CHANGELOG). Including it warns.
#pragma once

#pragma GCC warning \
    "jitembed/server/model_repository.hpp is deprecated: include jitembed/server/repository/model_repository.hpp"

#include "jitembed/server/repository/model_repository.hpp"
