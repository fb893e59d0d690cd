#include "common.hpp"
namespace jitembed::python {
void register_server(nb::module_&) {}
}  // namespace jitembed::python
