// The JIT client, the loader and the data set's index compiled once for minimal_trainer_separate
// (JITEMBED_SEPARATE_COMPILATION).
#include "jitembed/client/src.hpp"
#include "jitembed/format/src.hpp"
#include "jitembed/loader/src.hpp"
