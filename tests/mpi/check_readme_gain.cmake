# README's rebalancing gain figures are the binary's: reads the sentence of README.md ("the rebalancing gain line
# reads A -> B us per layer at the model's size (Rx), beside the executed size's C -> D ms
# (Sx)"), runs COMMAND ("|"-separated: README's mpirun command of that paragraph) and fails unless its gain line
# prints those modeled figures. Measured times are not quoted: they change from run to run.
file(READ "${README}" readme)
string(REGEX REPLACE "[ \n]+" " " readme "${readme}")
set(num "[0-9]+\\.[0-9]+")
if(NOT readme MATCHES "gain line reads (${num}) -> (${num}) us per layer at the model's size \\((${num})x\\), beside the executed size's (${num}) -> (${num}) ms \\((${num})x\\)")
  message(FATAL_ERROR "README.md: the rebalancing gain sentence is not where this test reads it")
endif()
set(model "${CMAKE_MATCH_1} -> ${CMAKE_MATCH_2} us (${CMAKE_MATCH_3}x)")
set(executed "${CMAKE_MATCH_4} -> ${CMAKE_MATCH_5} ms (${CMAKE_MATCH_6}x)")
string(REPLACE "|" ";" cmd "${COMMAND}")
execute_process(COMMAND ${cmd} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 240)
message("exit ${rc}\n--- stdout\n${out}--- stderr\n${err}")
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "expected exit 0, got '${rc}'")
endif()
string(FIND "${out}" "${model}" at_model)
string(FIND "${out}" "${executed}" at_executed)
if(at_model LESS 0 OR at_executed LESS 0)
  message(FATAL_ERROR "README.md quotes '${model}' and '${executed}'; the binary printed otherwise (above)")
endif()
