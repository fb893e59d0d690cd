# jitembed_client_impl: the client and loader compiled once (core/config.hpp's JITEMBED_SEPARATE_COMPILATION) for
# the repository's own tools, benchmarks, examples and API-level test programs, instead of once in each of them
# (issue #33: 30-70 CPU-s a program). Not installed or exported: users keep header-only or compile src.hpp
# themselves (examples/minimal_trainer_separate). Tests that look at the client's internals (test_client,
# test_loader, test_grpc) stay header-only.
# jitembed_client_impl_library(<name> [<public definitions>]): one such library, compiled with the flags of the
# folder that calls it (tests/ adds its own, with JITEMBED_ASSERTIONS=1 as its doctest programs have: no TU of a
# program may see other inline definitions than the rest).
function(jitembed_client_impl_library name)
  add_library(${name} STATIC "${PROJECT_SOURCE_DIR}/cmake/jitembed_client_impl.cpp")
  target_link_libraries(${name} PUBLIC jitembed::loader)
  target_compile_definitions(${name} PUBLIC JITEMBED_SEPARATE_COMPILATION ${ARGN})
  if(TARGET jitembed::grpc)  # grpc:// endpoints in every program; JITEMBED_HAS_GRPC in this TU only
    target_link_libraries(${name} PRIVATE jitembed::grpc)
  endif()
endfunction()
# The build type's flags (the benchmarks' figures come from this build).
if(TARGET jitembed::loader AND (JITEMBED_BUILD_TOOLS OR JITEMBED_BUILD_EXAMPLES OR JITEMBED_BUILD_BENCHMARKS
                                OR JITEMBED_BUILD_TESTS))
  jitembed_client_impl_library(jitembed_client_impl)
endif()
