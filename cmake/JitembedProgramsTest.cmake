# The ctest programs/cli (label lint): every executable defined under tools/, examples/ and benchmarks/
# (found from the build system, so a new program is covered without being listed) answers --help and
# refuses an unknown flag; tests/cli/check_program_cli.cmake runs them.
function(_jitembed_collect_executables dir out)
  set(found "")
  get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  foreach(t IN LISTS targets)
    get_target_property(type ${t} TYPE)
    if(type STREQUAL "EXECUTABLE")
      list(APPEND found ${t})
    endif()
  endforeach()
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _jitembed_collect_executables("${sub}" sub_found)
    list(APPEND found ${sub_found})
  endforeach()
  set(${out} ${found} PARENT_SCOPE)
endfunction()

set(_jitembed_programs "")
foreach(_dir tools examples benchmarks)
  if(EXISTS "${PROJECT_SOURCE_DIR}/${_dir}/CMakeLists.txt")
    get_property(_added DIRECTORY "${PROJECT_SOURCE_DIR}" PROPERTY SUBDIRECTORIES)
    if("${PROJECT_SOURCE_DIR}/${_dir}" IN_LIST _added)
      _jitembed_collect_executables("${PROJECT_SOURCE_DIR}/${_dir}" _found)
      foreach(_t IN LISTS _found)
        list(APPEND _jitembed_programs "$<TARGET_FILE:${_t}>")
      endforeach()
    endif()
  endif()
endforeach()

if(_jitembed_programs)
  list(JOIN _jitembed_programs "|" _jitembed_programs_arg)  # a ';' would split the ctest argument
  add_test(NAME programs/cli
           COMMAND ${CMAKE_COMMAND} "-DPROGRAMS=${_jitembed_programs_arg}" -DTIMEOUT=30
                   -DWORK_DIR=${PROJECT_BINARY_DIR}/programs_cli -P ${PROJECT_SOURCE_DIR}/tests/cli/check_program_cli.cmake)
  set_tests_properties(programs/cli PROPERTIES LABELS "lint" TIMEOUT 600)
endif()
