# Writes OUT with the git sha and dirty flag of SRC; touches it only on change.
# A copy of the tree without its history (a lent GPU machine gets the working
# tree and a stale .git) carries SRC/.pb-source instead, written beside the
# history by scripts/dev/stamp-source.sh: line 1 the sha, line 2 true|false.
if(EXISTS ${SRC}/.pb-source)
  file(STRINGS ${SRC}/.pb-source stamp LIMIT_COUNT 2)
  list(GET stamp 0 sha)
  list(GET stamp 1 dirty)
else()
  execute_process(COMMAND git -C ${SRC} rev-parse HEAD OUTPUT_VARIABLE sha
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR sha STREQUAL "")
    set(sha "unknown")
  endif()
  execute_process(COMMAND git -C ${SRC} status --porcelain --untracked-files=no
                  OUTPUT_VARIABLE status ERROR_QUIET)
  if(status STREQUAL "")
    set(dirty false)
  else()
    set(dirty true)
  endif()
endif()
set(text "namespace pb { const char* git_sha() { return \"${sha}\"; } bool git_dirty() { return ${dirty}; } }\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
else()
  set(old "")
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUT} "${text}")
endif()
