// The jitembed._jitembed extension module: one registration function per area (errors first: every other
// binding raises through them).
#include "common.hpp"

NB_MODULE(_jitembed, m) {
  m.doc() = "jitembed: sample format, codecs, caches, JIT client, loader and embedding server (C++ core)";
  using namespace jitembed::python;
  register_errors(m);
  register_arrays(m);
  register_format(m);
  register_codecs(m);
  register_caches(m);
  register_client(m);
  register_model(m);
  register_server(m);
}
