# ctest driver for hybrid_parallel's training runs (cmake -P): MODE=resume runs N steps uninterrupted, then K
# steps with a checkpoint and a --resume to N; MODE=restart runs N steps where rank R SIGKILLs itself after
# step S's checkpoint and the parent restarts every rank once with --resume. Both must end with the digest
# (final parameters and every step's loss, bitwise) of the uninterrupted run. Args: EXE, DIR, MODE, ARGS (;-list).
file(REMOVE_RECURSE "${DIR}")
function(run_case out_var)
  execute_process(COMMAND "${EXE}" ${ARGS} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "hybrid_parallel ${ARGN} failed (${rc}):\n${out}\n${err}")
  endif()
  string(REGEX MATCH "digest ([0-9a-f]+)" _ "${out}")
  if(NOT CMAKE_MATCH_1)
    message(FATAL_ERROR "no digest in the output of hybrid_parallel ${ARGN}:\n${out}")
  endif()
  set(${out_var} "${CMAKE_MATCH_1}" PARENT_SCOPE)
  set(${out_var}_out "${out}" PARENT_SCOPE)
endfunction()

run_case(whole --steps 6)
if(MODE STREQUAL "resume")
  run_case(first --steps 3 --checkpoint-dir "${DIR}" --checkpoint-every 3)
  run_case(resumed --steps 6 --checkpoint-dir "${DIR}" --resume)
  if(NOT resumed_out MATCHES "resumed from step 3")
    message(FATAL_ERROR "the second run did not resume from step 3:\n${resumed_out}")
  endif()
elseif(MODE STREQUAL "restart")
  run_case(resumed --steps 6 --checkpoint-dir "${DIR}" --checkpoint-every 1 --kill-rank 2 --kill-at-step 3
           --max-restarts 1)
  if(NOT resumed_out MATCHES "rank 2: killed by signal 9" OR NOT resumed_out MATCHES "restart 1 of 1"
     OR NOT resumed_out MATCHES "resumed from step [23]")
    message(FATAL_ERROR "rank 2 was not killed and every rank restarted from a checkpoint:\n${resumed_out}")
  endif()
else()
  message(FATAL_ERROR "MODE must be resume or restart")
endif()
if(NOT whole STREQUAL resumed)
  message(FATAL_ERROR "digest ${resumed} after the ${MODE} differs from the uninterrupted run's ${whole}")
endif()
message("OK (${MODE}): 6 steps uninterrupted and with the ${MODE} end bitwise equal (digest ${whole})")
