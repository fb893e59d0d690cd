#include "common.hpp"
namespace jitembed::python {
void register_client(nb::module_&) {}
}  // namespace jitembed::python
