#include "common.hpp"
namespace jitembed::python {
void register_caches(nb::module_&) {}
}  // namespace jitembed::python
