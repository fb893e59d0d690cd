# cmake -P script: install BUILD_DIR into WORK_DIR/prefix, then build an outside project against it in
# each shape (tests/consumer/project/CMakeLists.txt): the umbrella without components, exact components,
# and a target of a component that was not asked for (configure / generate must fail with
# "jitembed::format requires COMPONENTS format"), and OPTIONAL_COMPONENTS whose dependency is missing. Then the pkg-config module: its flags compile the
# umbrella header with the JITEMBED_HAS_* macros it defines. The installed programs must start (--help).
# SHAPES (optional) limits the shapes run.
file(REMOVE_RECURSE "${WORK_DIR}")
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
  set(run_out "${out}" PARENT_SCOPE)
endfunction()
# run_fails(<regex> <command...>): the command must fail and its output match the regex (CMake wraps its
# messages: a space in the regex matches any run of blanks and newlines)
function(run_fails regex)
  string(REPLACE " " "[ \n]+" regex "${regex}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0)
    message(FATAL_ERROR "expected a failure, got success: ${ARGN}\n${out}\n${err}")
  endif()
  if(NOT "${out}${err}" MATCHES "${regex}")
    message(FATAL_ERROR "the failure does not say '${regex}': ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "failed as expected, with: ${CMAKE_MATCH_0}")
endfunction()

run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix")
# the installed programs start (jitembed-server built with LibTorch finds it through its run path)
foreach(_prog jitembed-server jitembed-inspect)
  if(EXISTS "${WORK_DIR}/prefix/bin/${_prog}")
    run("${WORK_DIR}/prefix/bin/${_prog}" --help)
  endif()
endforeach()
if(NOT SHAPES)
  set(SHAPES umbrella components missing missing_genex optional)
endif()
set(_configure -G "${GENERATOR}" -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
               -DCMAKE_BUILD_TYPE=Release)
foreach(shape IN LISTS SHAPES)
  set(_b "${WORK_DIR}/build-${shape}")
  if(shape STREQUAL "optional")
    run_fails("consumer: optional components checked.*jitembed::video requires COMPONENTS video: target consumer links it, but video was asked for and not found"
              ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${_b}" ${_configure} -DCONSUMER_SHAPE=${shape})
  elseif(shape MATCHES "^missing")
    run_fails("jitembed::format requires COMPONENTS format"
              ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${_b}" ${_configure} -DCONSUMER_SHAPE=${shape})
  else()
    run(${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${_b}" ${_configure} -DCONSUMER_SHAPE=${shape})
    run(${CMAKE_COMMAND} --build "${_b}")
    run("${_b}/consumer")
  endif()
endforeach()

# pkg-config users get the same headers and the JITEMBED_HAS_* macros of the components it provides.
find_program(PKG_CONFIG pkg-config)
if(PKG_CONFIG)
  set(ENV{PKG_CONFIG_PATH} "${WORK_DIR}/prefix/share/pkgconfig")
  run(${PKG_CONFIG} --cflags jitembed)
  separate_arguments(_cflags UNIX_COMMAND "${run_out}")
  if(NOT "${_cflags}" MATCHES "-DJITEMBED_HAS_FORMAT=1" OR NOT "${_cflags}" MATCHES "-DJITEMBED_HAS_JPEG=1")
    message(FATAL_ERROR "jitembed.pc defines no JITEMBED_HAS_* macros: ${run_out}")
  endif()
  file(WRITE "${WORK_DIR}/pc.cpp" "#include <jitembed/jitembed.hpp>\n#if !defined(JITEMBED_HAS_FORMAT)\n#error no format\n#endif\nint main() { return 0; }\n")
  run(${CXX} ${_cflags} -fsyntax-only "${WORK_DIR}/pc.cpp")
endif()
