# Runs COMMAND ("|"-separated) and fails unless it exits with EXPECT_CODE and its output matches
# EXPECT_REGEX. Used by tests/mpi/CMakeLists.txt for failures that must end the whole MPI job.
string(REPLACE "|" ";" cmd "${COMMAND}")
execute_process(COMMAND ${cmd} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
message("exit ${rc}\n--- stdout\n${out}--- stderr\n${err}")
if(NOT rc STREQUAL "${EXPECT_CODE}")
  message(FATAL_ERROR "expected exit ${EXPECT_CODE}, got '${rc}'")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT_REGEX}")
  message(FATAL_ERROR "the output does not match '${EXPECT_REGEX}'")
endif()
