# Runs COMMAND (an expert-parallel `moesim run --format json` under mpirun, "|"-separated) into OUT, then
# TESTS (moesim_tests) with MOESIM_SCHEMA_FILE=OUT, which checks the file against docs/json-schema.md
# (JsonSchema.ExpertParallelRunFile).
string(REPLACE "|" ";" cmd "${COMMAND}")
execute_process(COMMAND ${cmd} RESULT_VARIABLE rc OUTPUT_FILE "${OUT}" ERROR_VARIABLE err TIMEOUT 240)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "expert-parallel run: exit ${rc}\n${err}")
endif()
set(ENV{MOESIM_SCHEMA_FILE} "${OUT}")
execute_process(COMMAND "${TESTS}" --gtest_filter=JsonSchema.ExpertParallelRunFile RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
if(NOT rc EQUAL 0 OR NOT out MATCHES "\\[  PASSED  \\] 1 test")
  message(FATAL_ERROR "schema check of ${OUT}: exit ${rc}\n${out}\n${err}")
endif()
message("ok: ${OUT} matches docs/json-schema.md")
