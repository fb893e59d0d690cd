// Deprecated forwarding header, kept for one release: moved to jitembed/server/repository/config.hpp
// with the model repository's other headers (same names, same component; CHANGELOG). Including it warns.
#pragma once

#pragma GCC warning "jitembed/server/repository_config.hpp is deprecated: include jitembed/server/repository/config.hpp"

#include "jitembed/server/repository/config.hpp"
