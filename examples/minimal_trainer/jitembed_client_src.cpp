// The JIT client and loader compiled once for minimal_trainer_separate (JITEMBED_SEPARATE_COMPILATION).
#include "jitembed/client/src.hpp"
#include "jitembed/loader/src.hpp"
