# ctest programs/cli: every program under tools/, examples/ and benchmarks/ answers --help (exit 0, prints
# its usage) and refuses an unknown flag (non-zero exit, a message naming the flag), each run bounded in time.
#   cmake -DPROGRAMS="a|b|..." -DTIMEOUT=30 -DWORK_DIR=dir -P check_program_cli.cmake
string(REPLACE "|" ";" PROGRAMS "${PROGRAMS}")
if(NOT PROGRAMS)
  message(FATAL_ERROR "programs/cli: no programs given (PROGRAMS)")
endif()
if(NOT TIMEOUT)
  set(TIMEOUT 30)
endif()
if(WORK_DIR)  # a program that ran instead of refusing would write here, not into the source tree
  file(MAKE_DIRECTORY "${WORK_DIR}")
else()
  set(WORK_DIR "${CMAKE_CURRENT_BINARY_DIR}")
endif()

set(failures "")
set(checked 0)
foreach(program IN LISTS PROGRAMS)
  get_filename_component(name "${program}" NAME)
  execute_process(COMMAND "${program}" --help WORKING_DIRECTORY "${WORK_DIR}" TIMEOUT ${TIMEOUT}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc STREQUAL "0")
    list(APPEND failures "${name} --help: exit '${rc}' (want 0)\n${out}${err}")
  elseif(NOT "${out}${err}" MATCHES "[Uu]sage")
    list(APPEND failures "${name} --help: no usage text\n${out}${err}")
  endif()

  execute_process(COMMAND "${program}" --bogus-flag WORKING_DIRECTORY "${WORK_DIR}" TIMEOUT ${TIMEOUT}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc STREQUAL "0")
    list(APPEND failures "${name} --bogus-flag: exit 0 (want non-zero)\n${out}${err}")
  elseif(NOT rc MATCHES "^[0-9]+$")
    list(APPEND failures "${name} --bogus-flag: ${rc} (want a prompt refusal)")
  elseif(NOT "${out}${err}" MATCHES "--bogus-flag")
    list(APPEND failures "${name} --bogus-flag: exit ${rc}, but the message does not name the flag\n${out}${err}")
  endif()
  math(EXPR checked "${checked} + 1")
endforeach()

if(failures)
  list(JOIN failures "\n---\n" text)
  message(FATAL_ERROR "programs/cli: ${text}")
endif()
message(STATUS "programs/cli: ${checked} programs answer --help and refuse --bogus-flag")
