# cmake -P script: "a later run hits 100%". Builds a small data set (format_tour's shard, record, JPEG and
# MP4, a WebDataset tar, a caption file), runs jitembed-precompute twice on a fresh LMDB cache and checks the
# JSON line: the first run computes, the second computes nothing and hits every item. A third run with bad
# files added must report and count them without aborting. A fourth embeds a directory where a same-stem
# .txt is the caption of its image (one sample, two fields), with --limit and a missing path.
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}/data" "${WORK_DIR}/bad")
execute_process(COMMAND "${FORMAT_TOUR}" "${WORK_DIR}/data" RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "format_tour failed: ${rc}")
endif()
file(WRITE "${WORK_DIR}/data/caption.txt" "a caption in a plain text file")
set(wds "${WORK_DIR}/wds")
file(MAKE_DIRECTORY "${wds}")
file(WRITE "${wds}/000001.txt" "a landscape")
file(COPY_FILE "${WORK_DIR}/data/image.jpg" "${wds}/000001.jpg")
file(COPY_FILE "${WORK_DIR}/data/clip.mp4" "${wds}/000001.mp4")
file(WRITE "${wds}/000002.txt" "second sample")
file(COPY_FILE "${WORK_DIR}/data/image.jpg" "${wds}/000002.jpg")
execute_process(COMMAND ${CMAKE_COMMAND} -E tar cf "${WORK_DIR}/data/wds.tar" --format=gnutar
                        000001.jpg 000001.mp4 000001.txt 000002.jpg 000002.txt
                WORKING_DIRECTORY "${wds}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "tar failed: ${rc}")
endif()
# Bad inputs: a truncated JPEG and a caption that is not UTF-8.
file(SIZE "${WORK_DIR}/data/image.jpg" n)
math(EXPR half "${n} / 2")
execute_process(COMMAND head -c ${half} "${WORK_DIR}/data/image.jpg" OUTPUT_FILE "${WORK_DIR}/bad/truncated.jpg")
execute_process(COMMAND printf "bad \\303\\050 text" OUTPUT_FILE "${WORK_DIR}/bad/latin1.txt")

# Runs the tool and sets <prefix>_<field> for the fields of its JSON line.
function(precompute prefix)
  execute_process(COMMAND "${PRECOMPUTE}" ${ARGN} --cache "${WORK_DIR}/cache" --threads 2 --video-frames 8 --video-bucket 128
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 240)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "jitembed-precompute ${ARGN}: rc=${rc}\n${out}\n${err}")
  endif()
  string(REGEX MATCH "{\"bench\":\"precompute\"[^\n]*}" line "${out}")
  if(NOT line)
    message(FATAL_ERROR "no JSON line in:\n${out}")
  endif()
  message(STATUS "${prefix}: ${line}")
  foreach(f items computed cached_hits duplicates errors)
    string(JSON v GET "${line}" ${f})
    set(${prefix}_${f} ${v} PARENT_SCOPE)
  endforeach()
  set(${prefix}_stderr "${err}" PARENT_SCOPE)
  set(${prefix}_stdout "${out}" PARENT_SCOPE)
endfunction()

precompute(first "${WORK_DIR}/data")
# 8 shard records and 1 record x (image, clip, caption), image.jpg, clip.mp4, caption.txt, 5 tar members.
if(NOT first_items EQUAL 35 OR first_computed LESS_EQUAL 0 OR NOT first_errors EQUAL 0)
  message(FATAL_ERROR "first run: expected 35 items, computed > 0, no errors")
endif()
math(EXPR accounted "${first_computed} + ${first_cached_hits} + ${first_duplicates}")
if(NOT accounted EQUAL first_items)
  message(FATAL_ERROR "first run: computed + cached_hits + duplicates = ${accounted} != items ${first_items}")
endif()

precompute(second "${WORK_DIR}/data")
if(NOT second_items EQUAL first_items OR NOT second_computed EQUAL 0 OR NOT second_cached_hits EQUAL second_items)
  message(FATAL_ERROR "second run: expected computed 0 and cached_hits == items (${second_items})")
endif()

precompute(third "${WORK_DIR}/data" "${WORK_DIR}/bad")
math(EXPR expect_items "${first_items} + 2")
if(NOT third_items EQUAL expect_items OR NOT third_computed EQUAL 0 OR NOT third_cached_hits EQUAL first_items
   OR NOT third_errors EQUAL 2)
  message(FATAL_ERROR "third run: expected ${expect_items} items, 2 errors, every good item cached")
endif()
if(NOT third_stderr MATCHES "truncated.jpg \\[image-latent\\]: truncated: " OR NOT third_stderr MATCHES "latin1.txt \\[text-embed\\]: invalid_utf8: ")
  message(FATAL_ERROR "third run: bad files not reported as expected:\n${third_stderr}")
endif()

# A same-stem caption is a field of its image's sample (embedded with the text model); a caption alone is
# a text-only sample. The image bytes equal data/image.jpg: cached already.
file(MAKE_DIRECTORY "${WORK_DIR}/paired")
file(COPY_FILE "${WORK_DIR}/data/image.jpg" "${WORK_DIR}/paired/a.jpg")
file(WRITE "${WORK_DIR}/paired/a.txt" "the caption of a")
file(WRITE "${WORK_DIR}/paired/b.txt" "a caption without an image")
file(WRITE "${WORK_DIR}/paired/notes.md" "not data")
precompute(limited "${WORK_DIR}/paired" --limit 1)
if(NOT limited_items EQUAL 2 OR NOT limited_computed EQUAL 1 OR NOT limited_cached_hits EQUAL 1
   OR NOT limited_stdout MATCHES "1 samples from 3 files \\(1 other files ignored\\)")
  message(FATAL_ERROR "--limit 1: expected sample a only (its image cached, its caption computed):\n${limited_stdout}")
endif()
precompute(paired "${WORK_DIR}/paired" "${WORK_DIR}/missing")
if(NOT paired_items EQUAL 3 OR NOT paired_computed EQUAL 1 OR NOT paired_cached_hits EQUAL 2 OR NOT paired_errors EQUAL 1
   OR NOT paired_stdout MATCHES "2 samples from 3 files")
  message(FATAL_ERROR "paired captions: expected 2 samples, 3 items (1 computed), 1 error:\n${paired_stdout}")
endif()
if(NOT paired_stderr MATCHES "missing: not_found: ")
  message(FATAL_ERROR "missing path not reported:\n${paired_stderr}")
endif()
message(STATUS "ok: the second run hit the cache for all ${second_items} items")
