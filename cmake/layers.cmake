# The stages of moesim and the arrows between them (docs/design.md, "The flow"): each stage is a folder
# (or two), and a stage may use only the stages listed as its dependencies. The top-level CMakeLists.txt
# builds one library per stage from this table, linking exactly these dependencies, and
# cmake/check_layers.cmake fails the build when a file's #include closure reaches a stage it may not.
#
#   MOESIM_STAGE_<name>_DIRS     folders of the stage, from the repository root
#   MOESIM_STAGE_<name>_DEPS     stages it may include and link (the arrows)
#   MOESIM_STAGE_<name>_HEADERS  single headers of a later stage it may include: plain data or declarations
#                                whose own closure stays inside the stage's arrows
set(MOESIM_STAGES common config router workload kernels cost step serve decoder train pipeline report distributed cli)

set(MOESIM_STAGE_common_DIRS src/common)
set(MOESIM_STAGE_common_DEPS "")
set(MOESIM_STAGE_config_DIRS src/config)
set(MOESIM_STAGE_config_DEPS common)
set(MOESIM_STAGE_router_DIRS router)
set(MOESIM_STAGE_router_DEPS common config)
set(MOESIM_STAGE_workload_DIRS src/workload)
set(MOESIM_STAGE_workload_DEPS common config router)
set(MOESIM_STAGE_kernels_DIRS kernels)
set(MOESIM_STAGE_kernels_DEPS common config router workload)
set(MOESIM_STAGE_cost_DIRS src/cost)
set(MOESIM_STAGE_cost_DEPS common config)
# The serving step as ranks run it (attention over data-parallel ranks), above the cost model.
set(MOESIM_STAGE_step_DIRS src/step)
set(MOESIM_STAGE_step_DEPS common config cost)
# Serving over time (docs/serve.md): a request stream scheduled onto the ranks, each step costed by the step model.
set(MOESIM_STAGE_serve_DIRS src/serve)
set(MOESIM_STAGE_serve_DEPS common config cost step)
set(MOESIM_STAGE_decoder_DIRS src/decoder)
set(MOESIM_STAGE_decoder_DEPS common config router workload kernels)
# The training step (docs/training.md): above the cost model's kernels and all-to-all, routing its own micro-batches.
set(MOESIM_STAGE_train_DIRS src/train)
set(MOESIM_STAGE_train_DEPS common config router workload cost)
set(MOESIM_STAGE_pipeline_DIRS src/pipeline src/sweep)
set(MOESIM_STAGE_pipeline_DEPS common config router workload kernels cost step serve decoder train)
set(MOESIM_STAGE_report_DIRS src/report)
set(MOESIM_STAGE_report_DEPS common config router cost step serve)
set(MOESIM_STAGE_report_HEADERS src/pipeline/results.hpp src/pipeline/run_experiment.hpp src/decoder/decoder_shape.hpp
    src/sweep/run_sweep.hpp src/sweep/sweep.hpp src/sweep/validate.hpp src/sweep/knee.hpp
    src/sweep/published.hpp src/sweep/published_comm.hpp src/train/train_input.hpp src/train/train_routing.hpp
    src/train/train_step.hpp src/sweep/published_train.hpp src/sweep/published_step.hpp
    src/sweep/published_serve.hpp)
set(MOESIM_STAGE_distributed_DIRS src/distributed)
set(MOESIM_STAGE_distributed_DEPS common config router workload kernels cost step serve decoder train pipeline report)
set(MOESIM_STAGE_cli_DIRS src/cli)
set(MOESIM_STAGE_cli_DEPS common config router workload kernels cost step serve decoder train pipeline report distributed)
