# CTest suites. test/ mirrors the source tree (test/kernels/<family>, and
# test/<subsystem> for each folder of harness/); each suite is labelled by what it needs:
#   cpu        doctest suites on the host (CI): the C++ references, the host subsystems
#   mpi        suites under mpirun --oversubscribe (CI)
#   gpu        suites that need a CUDA device; exit 77 = skipped without one
#   sanitized  host suites that link no CUDA object: CI builds and runs them again under
#              AddressSanitizer and UndefinedBehaviorSanitizer (scripts/test.sh --sanitize).
#              The label is given where a suite is declared (pb_cpu_test, pb_sanitized_test).
# test/support holds the mains and helpers of each kind.

# The host libraries: no CUDA object in them or below them (CMakeLists.txt).
set(PB_HOST_LIBS pb_results pb_config pb_analytic pb_analysis pb_platform pb_fabric_plan pb_kernel_refs pb_check)

# Every sanitized suite's target; the sanitize build builds only this.
add_custom_target(pb_sanitized)
# A finding fails the test (ASan's exit, UBSan's -fno-sanitize-recover=all).
# LeakSanitizer is on for single-process suites; under mpirun it is off: Open
# MPI keeps memory until exit in plugins it unloads at MPI_Finalize, whose
# allocation stacks LeakSanitizer can then no longer name (nor suppress).
set(PB_SANITIZER_ENV "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
# pb_sanitized_test(<target> <test>...): the tests run <target>, which links only host
# libraries; labelled sanitized, and <target> built by pb_sanitized.
function(pb_sanitized_test target)
  add_dependencies(pb_sanitized ${target})
  foreach(test ${ARGN})
    set_property(TEST ${test} APPEND PROPERTY LABELS sanitized)
    get_test_property(${test} LABELS labels)
    if("mpi" IN_LIST labels)
      set_property(TEST ${test} APPEND PROPERTY ENVIRONMENT ${PB_SANITIZER_ENV} "ASAN_OPTIONS=detect_leaks=0")
    else()
      set_property(TEST ${test} APPEND PROPERTY ENVIRONMENT ${PB_SANITIZER_ENV} "ASAN_OPTIONS=detect_leaks=1")
    endif()
  endforeach()
endfunction()

add_library(pb_doctest_main STATIC test/support/doctest_main.cpp)
target_include_directories(pb_doctest_main PUBLIC test/support)
target_link_libraries(pb_doctest_main PUBLIC doctest::doctest)

add_library(pb_gpu_test_support STATIC test/support/gpu_test.cpp test/support/device_math.cu
            test/support/gpu_test_main.cpp)
target_include_directories(pb_gpu_test_support PUBLIC test/support)
target_link_libraries(pb_gpu_test_support PUBLIC pb_kernels doctest::doctest CUDA::cudart)

add_library(pb_mpi_test_main STATIC test/support/mpi_test_main.cpp)
target_include_directories(pb_mpi_test_main PUBLIC test/support)
target_link_libraries(pb_mpi_test_main PUBLIC ${PB_HOST_LIBS} doctest::doctest)

add_library(pb_mpi_gpu_test_main STATIC test/support/mpi_gpu_test_main.cpp)
target_include_directories(pb_mpi_gpu_test_main PUBLIC test/support)
target_link_libraries(pb_mpi_gpu_test_main PUBLIC pb_superstep doctest::doctest CUDA::cudart)

set(PB_MPIRUN ${MPIEXEC_EXECUTABLE} --oversubscribe)
if(NOT MPIEXEC_EXECUTABLE)
  set(PB_MPIRUN mpirun --oversubscribe)
endif()
set(PB_MPI_ENV "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")

# pb_cpu_test(<source> [LINK <libraries>...]): a doctest suite on the host, test
# name cpu.<file name>, linked with the host libraries (and LINK). Sanitized
# unless LINK names a library with CUDA objects.
set(PB_DEVICE_LIBS pb_kernels pb_observe pb_fabric pb_superstep pb_bench)
function(pb_cpu_test src)
  cmake_parse_arguments(arg "" "" "LINK" ${ARGN})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_link_libraries(${name} PRIVATE ${PB_HOST_LIBS} pb_doctest_main ${arg_LINK})
  target_compile_definitions(${name} PRIVATE PB_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  add_test(NAME cpu.${name} COMMAND ${name})
  set_tests_properties(cpu.${name} PROPERTIES LABELS cpu TIMEOUT 300)
  set(device OFF)
  foreach(lib ${arg_LINK})
    if(lib IN_LIST PB_DEVICE_LIBS)
      set(device ON)
    endif()
  endforeach()
  if(NOT device)
    pb_sanitized_test(${name} cpu.${name})
  endif()
endfunction()

# pb_gpu_test(<source>): a doctest suite on one device, gpu.<file name>.
function(pb_gpu_test src)
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_link_libraries(${name} PRIVATE pb_gpu_test_support pb_superstep)
  add_test(NAME gpu.${name} COMMAND ${name})
  set_tests_properties(gpu.${name} PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 600)
endfunction()

# The kernels' C++ references (cpu) and kernels (gpu), family by family.
foreach(family ${PB_KERNEL_FAMILIES})
  file(GLOB cpu_suites CONFIGURE_DEPENDS test/kernels/${family}/test_*.cpp)
  file(GLOB gpu_suites CONFIGURE_DEPENDS test/kernels/${family}/test_*.cu)
  foreach(src ${cpu_suites})
    get_filename_component(name ${src} NAME_WE)
    if(name STREQUAL "test_ref_fmha")
      pb_cpu_test(${src} LINK pb_kernels)  # the engine names and which engines this build has: fmha.cu
    else()
      pb_cpu_test(${src})
    endif()
  endforeach()
  foreach(src ${gpu_suites})
    pb_gpu_test(${src})
  endforeach()
endforeach()

# The host subsystems.
foreach(src results/test_results results/test_sweep_file config/test_scenario analytic/test_plan
            analytic/test_plan_cp analytic/test_calibration analytic/test_schedule analytic/test_schedule_kda
            analytic/test_slab_layout analytic/test_doorbell_protocol analysis/test_compare
            analysis/test_projection analysis/test_trace analysis/test_power_state analysis/test_wall_split
            analysis/test_gemm_ceiling analysis/test_activity_spans analysis/test_headline
            analysis/test_efficiency analysis/test_links analytic/test_plan_vs_runs)
  pb_cpu_test(test/${src}.cpp)
endforeach()
# The cut table against its consumers (the kernels benchmark's families among them).
pb_cpu_test(test/config/test_cut_table.cpp LINK pb_bench)
# The gang on 4 ranks.
add_executable(test_gang test/platform/test_gang.cpp)
target_link_libraries(test_gang PRIVATE pb_mpi_test_main)
add_test(NAME mpi.test_gang COMMAND ${PB_MPIRUN} -np 4 $<TARGET_FILE:test_gang>)
set_tests_properties(mpi.test_gang PROPERTIES LABELS mpi TIMEOUT 300 ENVIRONMENT "${PB_MPI_ENV}")
pb_sanitized_test(test_gang mpi.test_gang)
# A failing rank ends the job with its message, never a hang.
add_executable(rank_failure_probe test/platform/rank_failure_probe.cpp)
target_link_libraries(rank_failure_probe PRIVATE ${PB_HOST_LIBS})
add_test(NAME mpi.rank_failure COMMAND ${PB_MPIRUN} -np 4 $<TARGET_FILE:rank_failure_probe>)
set_tests_properties(mpi.rank_failure PROPERTIES LABELS mpi TIMEOUT 60 ENVIRONMENT "${PB_MPI_ENV}"
  PASS_REGULAR_EXPRESSION "\\[rank 2 on [^]]+\\] error: planted failure on purpose")
# PB_DEBUG=1: the same message with the source location after the one prefix.
add_test(NAME mpi.rank_failure_debug COMMAND ${PB_MPIRUN} -np 4 $<TARGET_FILE:rank_failure_probe>)
set_tests_properties(mpi.rank_failure_debug PROPERTIES LABELS mpi TIMEOUT 60 ENVIRONMENT "${PB_MPI_ENV};PB_DEBUG=1"
  PASS_REGULAR_EXPRESSION "\\[rank 2 on [^]]+\\] error: [^ ]*rank_failure_probe\\.cpp:[0-9]+: planted failure on purpose")
pb_sanitized_test(rank_failure_probe mpi.rank_failure mpi.rank_failure_debug)

# The blocks: the MoE block on one device; the IPC fabric and the MLA and KDA
# blocks across 4 ranks, which may share one GPU (every rank exits 77 when any
# rank sees no device); the blocks' buffer homes on the host.
pb_cpu_test(test/superstep/test_device_memory.cpp LINK pb_superstep)
pb_gpu_test(test/superstep/test_moe_block.cu)
foreach(src fabric/test_fabric superstep/test_mla_cp superstep/test_kda_cp)
  get_filename_component(name ${src} NAME)
  add_executable(${name} test/${src}.cpp)
  target_link_libraries(${name} PRIVATE pb_mpi_gpu_test_main)
  add_test(NAME mpi_gpu.${name} COMMAND ${PB_MPIRUN} -np 4 $<TARGET_FILE:${name}>)
  set_tests_properties(mpi_gpu.${name} PROPERTIES LABELS "gpu;mpi" SKIP_RETURN_CODE 77 TIMEOUT 300
    ENVIRONMENT "${PB_MPI_ENV}")
endforeach()
# CP2 as well as CP4 against CP1.
foreach(name test_mla_cp test_kda_cp)
  add_test(NAME mpi_gpu.${name}2 COMMAND ${PB_MPIRUN} -np 2 $<TARGET_FILE:${name}>)
  set_tests_properties(mpi_gpu.${name}2 PROPERTIES LABELS "gpu;mpi" SKIP_RETURN_CODE 77 TIMEOUT 300
    ENVIRONMENT "${PB_MPI_ENV}")
endforeach()
# A doorbell nobody rings ends the job within its 2 s time-out, naming rank, layer and window.
add_executable(fabric_timeout_probe test/fabric/fabric_timeout_probe.cpp)
target_link_libraries(fabric_timeout_probe PRIVATE pb_fabric)
add_test(NAME mpi_gpu.fabric_timeout COMMAND ${PB_MPIRUN} -np 4 $<TARGET_FILE:fabric_timeout_probe>)
set_tests_properties(mpi_gpu.fabric_timeout PROPERTIES LABELS "gpu;mpi" TIMEOUT 60 ENVIRONMENT "${PB_MPI_ENV}"
  PASS_REGULAR_EXPRESSION "wait timed out after [0-9.]+ s: rank 1, layer 3, window 5"
  SKIP_REGULAR_EXPRESSION "SKIPPED: no CUDA device")

# The driver end to end, no GPU: plan of cp8-128k on 8 ranks, then compare reads it.
file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/test-out)
set(PB_PLAN_OUT ${CMAKE_BINARY_DIR}/test-out/plan-cp8-128k.h5)
add_test(NAME mpi.plan_cp8_128k
  COMMAND ${PB_MPIRUN} -np 8 $<TARGET_FILE:prefill-bench> plan ${CMAKE_SOURCE_DIR}/scenarios/cp8-128k.yaml
          --output ${PB_PLAN_OUT} --overwrite)
set_tests_properties(mpi.plan_cp8_128k PROPERTIES LABELS mpi TIMEOUT 300 ENVIRONMENT "${PB_MPI_ENV}"
  FIXTURES_SETUP plan_cp8 PASS_REGULAR_EXPRESSION "deep rank: 7 \\([0-9.]+ ms roofline, 7\\.5 FMHA pairs.*deep rank: [0-9] \\([0-9.]+ ms roofline, 4\\.0 FMHA pairs")
add_test(NAME cpu.compare_plan_variants
  COMMAND bash ${CMAKE_SOURCE_DIR}/test/cli/expect.sh 0 "\n  fmha +[0-9.]+ +[0-9.]+ +[-+][0-9.]+"
          $<TARGET_FILE:prefill-bench> compare ${PB_PLAN_OUT} --variants baseline,all)
set_tests_properties(cpu.compare_plan_variants PROPERTIES LABELS cpu TIMEOUT 120 FIXTURES_REQUIRED plan_cp8
  ENVIRONMENT "${PB_MPI_ENV}")
add_test(NAME cpu.run_without_gpu COMMAND $<TARGET_FILE:prefill-bench> run ${CMAKE_SOURCE_DIR}/scenarios/smoke.yaml)
set_tests_properties(cpu.run_without_gpu PROPERTIES LABELS cpu TIMEOUT 60
  ENVIRONMENT "${PB_MPI_ENV};CUDA_VISIBLE_DEVICES="
  PASS_REGULAR_EXPRESSION "no CUDA device is visible.*prefill-bench plan")

# The plot scripts (python3 with h5py + matplotlib, from setup.sh): each on the
# plan file, and the cases of test/scripts/test_plots.py on the committed
# results (what each plots, read back; refusals; finding a python).
set(PB_PYTHON "")
foreach(candidate /usr/bin/python3 python3)
  find_program(pb_py_${candidate} NAMES ${candidate} NO_CACHE)
  if(pb_py_${candidate} AND NOT PB_PYTHON)
    execute_process(COMMAND ${pb_py_${candidate}} -c "import h5py, matplotlib" RESULT_VARIABLE pb_py_rc
                    OUTPUT_QUIET ERROR_QUIET)
    if(pb_py_rc EQUAL 0)
      set(PB_PYTHON ${pb_py_${candidate}})
    endif()
  endif()
endforeach()
if(PB_PYTHON)
  set(PB_PLOTS_OUT ${CMAKE_BINARY_DIR}/test-out/plots)
  add_test(NAME cpu.plot_anatomy COMMAND ${PB_PYTHON} ${CMAKE_SOURCE_DIR}/scripts/plot_anatomy.py ${PB_PLAN_OUT}
           --variant baseline -o ${CMAKE_BINARY_DIR}/test-out/anatomy.png --overwrite)
  add_test(NAME cpu.plot_ab COMMAND ${PB_PYTHON} ${CMAKE_SOURCE_DIR}/scripts/plot_ab.py ${PB_PLAN_OUT}
           --variants baseline,all -o ${CMAKE_BINARY_DIR}/test-out/ab.png --overwrite)
  add_test(NAME cpu.plot_bench_plan COMMAND ${PB_PYTHON} ${CMAKE_SOURCE_DIR}/scripts/plot_bench.py ${PB_PLAN_OUT}
           -o ${CMAKE_BINARY_DIR}/test-out/bench-plan.png --overwrite)
  set_tests_properties(cpu.plot_anatomy cpu.plot_ab cpu.plot_bench_plan PROPERTIES LABELS cpu TIMEOUT 120
    FIXTURES_REQUIRED plan_cp8 PASS_REGULAR_EXPRESSION "wrote ")
  # A measured serialized run with its projected gang (a committed file).
  add_test(NAME cpu.plot_timeline COMMAND ${PB_PYTHON} ${CMAKE_SOURCE_DIR}/scripts/plot_timeline.py
           ${CMAKE_SOURCE_DIR}/results/h200/shared-memory-cp4-4layers.h5 -o ${CMAKE_BINARY_DIR}/test-out/timeline.png
           --overwrite)
  set_tests_properties(cpu.plot_timeline PROPERTIES LABELS cpu TIMEOUT 120 PASS_REGULAR_EXPRESSION "wrote ")
  # The README's commands that need no GPU, as written, and the outputs it quotes.
  add_test(NAME cpu.readme_commands COMMAND ${PB_PYTHON} ${CMAKE_SOURCE_DIR}/test/scripts/test_readme.py
           ${CMAKE_SOURCE_DIR}/README.md ${CMAKE_BINARY_DIR})
  set_tests_properties(cpu.readme_commands PROPERTIES LABELS cpu TIMEOUT 600 ENVIRONMENT "${PB_MPI_ENV}")
  add_test(NAME cpu.docs_plan_commands COMMAND ${PB_PYTHON} ${CMAKE_SOURCE_DIR}/test/scripts/test_readme.py
           ${CMAKE_SOURCE_DIR}/docs/plan.md ${CMAKE_BINARY_DIR})
  add_test(NAME cpu.docs_results_commands COMMAND ${PB_PYTHON} ${CMAKE_SOURCE_DIR}/test/scripts/test_readme.py
           ${CMAKE_SOURCE_DIR}/docs/results-h200.md ${CMAKE_BINARY_DIR})
  set_tests_properties(cpu.docs_plan_commands cpu.docs_results_commands PROPERTIES LABELS cpu TIMEOUT 300
    ENVIRONMENT "${PB_MPI_ENV}")
  # The tables the README and docs/*.md hold as a command printed them from the committed files
  # (scripts/docs_tables.py): each must be what its command prints now.
  file(GLOB pb_doc_pages CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/docs/*.md)
  add_test(NAME cpu.docs_tables COMMAND ${PB_PYTHON} ${CMAKE_SOURCE_DIR}/scripts/docs_tables.py
           ${CMAKE_SOURCE_DIR}/README.md ${pb_doc_pages} --build ${CMAKE_BINARY_DIR})
  set_tests_properties(cpu.docs_tables PROPERTIES LABELS cpu TIMEOUT 300 ENVIRONMENT "${PB_MPI_ENV}")
  # compare --format markdown|csv|json on the committed files (test_compare_formats.py).
  add_test(NAME cpu.compare_formats COMMAND ${PB_PYTHON} ${CMAKE_SOURCE_DIR}/test/scripts/test_compare_formats.py
           $<TARGET_FILE:prefill-bench>)
  set_tests_properties(cpu.compare_formats PROPERTIES LABELS cpu TIMEOUT 300)
  # Every reader of results files given damaged copies of committed ones
  # (test_fuzz_readers.py): compare, the gate, trace, slim, plan --calibrate
  # and pbresults.py end in a result or one named error, never a crash or a
  # hang; and the same through results_reader_probe, under the sanitizers.
  add_test(NAME cpu.fuzz_readers COMMAND ${PB_PYTHON} ${CMAKE_SOURCE_DIR}/test/scripts/test_fuzz_readers.py
           $<TARGET_FILE:prefill-bench> ${CMAKE_BINARY_DIR}/test-out/fuzz)
  add_test(NAME cpu.fuzz_readers_probe COMMAND ${PB_PYTHON} ${CMAKE_SOURCE_DIR}/test/scripts/test_fuzz_readers.py
           $<TARGET_FILE:results_reader_probe> ${CMAKE_BINARY_DIR}/test-out/fuzz-probe --no-pbresults)
  set_tests_properties(cpu.fuzz_readers cpu.fuzz_readers_probe PROPERTIES LABELS cpu TIMEOUT 600
    ENVIRONMENT "${PB_MPI_ENV}")
  pb_sanitized_test(results_reader_probe cpu.fuzz_readers_probe)
  set_property(TEST cpu.fuzz_readers_probe APPEND PROPERTY ENVIRONMENT
               "LSAN_OPTIONS=suppressions=${CMAKE_SOURCE_DIR}/test/support/lsan-hdf5-damaged.supp:print_suppressions=0")
  # The test of the tests (test_the_tests.py): each checker fails on a broken input.
  add_test(NAME cpu.the_tests COMMAND ${PB_PYTHON} ${CMAKE_SOURCE_DIR}/test/scripts/test_the_tests.py all
           ${CMAKE_BINARY_DIR}/test-out/the-tests)
  set_tests_properties(cpu.the_tests PROPERTIES LABELS "cpu;mpi" TIMEOUT 300 ENVIRONMENT "PB_BUILD=${CMAKE_BINARY_DIR}")
  # Every command and script against the README's exit-code table (test_exit_codes.py).
  add_test(NAME cpu.exit_codes COMMAND ${PB_PYTHON} ${CMAKE_SOURCE_DIR}/test/scripts/test_exit_codes.py coverage
           ${CMAKE_BINARY_DIR}/test-out/exit-codes)
  set_tests_properties(cpu.exit_codes PROPERTIES LABELS "cpu;mpi" TIMEOUT 600
    ENVIRONMENT "PB_BUILD=${CMAKE_BINARY_DIR};PB_PYTHON=${PB_PYTHON}")
  # One test per case of test_plots.py (cpu.plots.*) and of test_pbresults.py
  # (cpu.pbresults.*: the headline TTFT, README's headline table, errors).
  foreach(suite plots pbresults)
    set(pb_suite ${CMAKE_SOURCE_DIR}/test/scripts/test_${suite}.py)
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${pb_suite})
    execute_process(COMMAND ${PB_PYTHON} ${pb_suite} --list OUTPUT_VARIABLE pb_cases
                    RESULT_VARIABLE pb_py_rc OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT pb_py_rc EQUAL 0)
      message(FATAL_ERROR "${pb_suite} --list failed")
    endif()
    string(REPLACE "\n" ";" pb_cases "${pb_cases}")
    foreach(name ${pb_cases})
      add_test(NAME cpu.${suite}.${name} COMMAND ${PB_PYTHON} ${pb_suite} ${name} ${PB_PLOTS_OUT})
      set_tests_properties(cpu.${suite}.${name} PROPERTIES LABELS cpu TIMEOUT 300)
    endforeach()
  endforeach()
else()
  message(STATUS "no python3 with h5py and matplotlib: the plot tests are not registered (scripts/setup.sh installs them)")
endif()

# `prefill-bench trace` of a committed run file: Chrome trace JSON, gzip-compressed.
add_test(NAME cpu.trace_run COMMAND $<TARGET_FILE:prefill-bench> trace
         ${CMAKE_SOURCE_DIR}/results/h200/shared-memory-cp4-4layers.h5 -o ${CMAKE_BINARY_DIR}/test-out/run.trace.json.gz
         --overwrite)
set_tests_properties(cpu.trace_run PROPERTIES LABELS cpu TIMEOUT 60 ENVIRONMENT "${PB_MPI_ENV}"
  PASS_REGULAR_EXPRESSION "wrote .*run.trace.json.gz")
# `prefill-bench slim` of the same file: smaller, and its trace (the projected
# gang replayed) byte for byte the full file's.
set(pb_slim_dir ${CMAKE_BINARY_DIR}/test-out/slim)
add_test(NAME cpu.slim_then_trace_equal COMMAND sh -c
  "mkdir -p ${pb_slim_dir} && \
   $<TARGET_FILE:prefill-bench> slim ${CMAKE_SOURCE_DIR}/results/h200/shared-memory-cp4-4layers.h5 -o ${pb_slim_dir}/run.h5 --overwrite && \
   $<TARGET_FILE:prefill-bench> trace ${CMAKE_SOURCE_DIR}/results/h200/shared-memory-cp4-4layers.h5 -o ${pb_slim_dir}/full.json --overwrite && \
   $<TARGET_FILE:prefill-bench> trace ${pb_slim_dir}/run.h5 -o ${pb_slim_dir}/slim.json --overwrite && \
   cmp ${pb_slim_dir}/full.json ${pb_slim_dir}/slim.json && \
   test $(stat -c %s ${pb_slim_dir}/run.h5) -lt $(stat -c %s ${CMAKE_SOURCE_DIR}/results/h200/shared-memory-cp4-4layers.h5) && \
   echo slim-trace-equal")
set_tests_properties(cpu.slim_then_trace_equal PROPERTIES LABELS cpu TIMEOUT 60 ENVIRONMENT "${PB_MPI_ENV}"
  PASS_REGULAR_EXPRESSION "slim-trace-equal")

# `prefill-bench lane` end to end on 2 ranks (test/cli/lane_checks.sh): it runs
# and writes a projectable file; its FMHA check exits 1 on a slowed FMHA.
add_test(NAME mpi_gpu.lane_smoke_cp2
  COMMAND bash ${CMAKE_SOURCE_DIR}/test/cli/lane_checks.sh $<TARGET_FILE:prefill-bench>
          ${CMAKE_SOURCE_DIR}/scenarios/smoke-cp2.yaml ${CMAKE_BINARY_DIR}/test-out/lane ${PB_MPIRUN})
set_tests_properties(mpi_gpu.lane_smoke_cp2 PROPERTIES LABELS "gpu;mpi" TIMEOUT 240 ENVIRONMENT "${PB_MPI_ENV}"
  SKIP_REGULAR_EXPRESSION "no CUDA device is visible")

# `prefill-bench run` end to end (tiny model): cp 1, and cp 2 with ranks taking
# turns; each checks its launch list against plan's and writes a results file.
add_test(NAME mpi_gpu.run_smoke
  COMMAND $<TARGET_FILE:prefill-bench> run ${CMAKE_SOURCE_DIR}/scenarios/smoke.yaml
          --output ${CMAKE_BINARY_DIR}/test-out/run-smoke.h5 --overwrite)
add_test(NAME mpi_gpu.run_smoke_cp2
  COMMAND ${PB_MPIRUN} -np 2 $<TARGET_FILE:prefill-bench> run ${CMAKE_SOURCE_DIR}/scenarios/smoke-cp2.yaml
          --set serialize_ranks=true --output ${CMAKE_BINARY_DIR}/test-out/run-smoke-cp2.h5 --overwrite)
set_tests_properties(mpi_gpu.run_smoke mpi_gpu.run_smoke_cp2 PROPERTIES LABELS "gpu;mpi" SKIP_RETURN_CODE 3
  TIMEOUT 300 ENVIRONMENT "${PB_MPI_ENV}"
  PASS_REGULAR_EXPRESSION "GEMM ceiling: burst [0-9.]+ TFLOP/s, sustained [0-9.]+ TFLOP/s.*wrote .*run-smoke")
set_tests_properties(mpi_gpu.run_smoke_cp2 PROPERTIES FIXTURES_SETUP smoke_cp2)

# warmup_layers: warm-up reps of the first layers only (2 of the tiny model's 4:
# KDA alone, ranks taking turns), then timed reps whose outputs equal those of
# mpi_gpu.run_smoke_cp2, warmed at full depth, bit for bit.
add_test(NAME mpi_gpu.run_smoke_cp2_short_warmup
  COMMAND ${PB_MPIRUN} -np 2 $<TARGET_FILE:prefill-bench> run ${CMAKE_SOURCE_DIR}/scenarios/smoke-cp2.yaml
          --set serialize_ranks=true --set warmup_layers=2
          --output ${CMAKE_BINARY_DIR}/test-out/run-smoke-cp2-short-warmup.h5 --overwrite)
set_tests_properties(mpi_gpu.run_smoke_cp2_short_warmup PROPERTIES LABELS "gpu;mpi" SKIP_RETURN_CODE 3 TIMEOUT 300
  ENVIRONMENT "${PB_MPI_ENV}" FIXTURES_SETUP smoke_cp2
  PASS_REGULAR_EXPRESSION "warm-up 1/1 +baseline +serialized wall [0-9.]+ ms \\(layers 0-1\\).*wrote .*run-smoke-cp2-short-warmup.h5")
add_test(NAME mpi_gpu.short_warmup_outputs_equal
  COMMAND bash -c "[[ -f $1 && -f $2 ]] || { echo 'no run files (no GPU)'; exit 3; }; exec $0 compare $1 $2"
          $<TARGET_FILE:prefill-bench> ${CMAKE_BINARY_DIR}/test-out/run-smoke-cp2.h5
          ${CMAKE_BINARY_DIR}/test-out/run-smoke-cp2-short-warmup.h5)
set_tests_properties(mpi_gpu.short_warmup_outputs_equal PROPERTIES LABELS "gpu;mpi" SKIP_RETURN_CODE 3 TIMEOUT 60
  FIXTURES_REQUIRED smoke_cp2 PASS_REGULAR_EXPRESSION "outputs: bit-identical \\(2 ranks x 4 layers\\)"
  FAIL_REGULAR_EXPRESSION "outputs: (differ|not compared)")

# timing: cupti against timing: events (scenario key timing): the same scenario
# run both ways (two processes), the compute-bound families (FMHA, GEMM, KDA,
# MoE) within 3% at K3 shapes (4 layers, 16k tokens), give or take two
# standard errors of the runs' own noise (test_timing_agree.py: two runs timed
# the same way differed by up to 4.5% on FMHA, whose reps spread 8%). Measured on the H200:
# those agree within 0.1-2.1%; the bandwidth-bound families of many short
# kernels read 3-11% longer under CUPTI's tracing (results/h200/timing.txt); at smoke
# size the events also time the host's launch gaps. Without CUPTI's library
# the cupti run fails naming what is missing.
foreach(timing events cupti)
  add_test(NAME gpu.run_smoke_timing_${timing}
    COMMAND $<TARGET_FILE:prefill-bench> run ${CMAKE_SOURCE_DIR}/scenarios/smoke.yaml --set timing=${timing}
            --set model.preset=k3 --set model.layers=4 --set context=16384 --set bucket=16896
            --set reps=10 --set ceiling_sustained_s=0
            --output ${CMAKE_BINARY_DIR}/test-out/run-smoke-${timing}.h5 --overwrite)
  # RUN_SERIAL: under ctest -j, timed alone, as the comparison needs.
  set_tests_properties(gpu.run_smoke_timing_${timing} PROPERTIES LABELS gpu SKIP_RETURN_CODE 3 TIMEOUT 300 RUN_SERIAL ON
    FIXTURES_SETUP smoke_timing PASS_REGULAR_EXPRESSION "wrote .*run-smoke-${timing}.h5")
endforeach()
if(PB_PYTHON)
  add_test(NAME gpu.timing_cupti_agrees_with_events
    COMMAND ${PB_PYTHON} ${CMAKE_SOURCE_DIR}/test/scripts/test_timing_agree.py
            ${CMAKE_BINARY_DIR}/test-out/run-smoke-events.h5 ${CMAKE_BINARY_DIR}/test-out/run-smoke-cupti.h5
            --tolerance 0.03 --min-ms 5 --families fmha,gemm,kda,moe,moe_gemm --expect events,cupti)
  set_tests_properties(gpu.timing_cupti_agrees_with_events PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 60
    FIXTURES_REQUIRED smoke_timing)
  # The comparison itself, on a committed file against itself (no GPU).
  add_test(NAME cpu.timing_agree_script
    COMMAND ${PB_PYTHON} ${CMAKE_SOURCE_DIR}/test/scripts/test_timing_agree.py ${CMAKE_SOURCE_DIR}/results/h200/cp1-16k.h5
            ${CMAKE_SOURCE_DIR}/results/h200/cp1-16k.h5 --expect events,events)
  set_tests_properties(cpu.timing_agree_script PROPERTIES LABELS cpu TIMEOUT 60
    PASS_REGULAR_EXPRESSION "30 families compared, 0 outside 2.0%")
  # And on two that differ: cp4-64k's warm baseline and six cuts against the
  # each-cut run's cold baseline and eight cuts (one rep each: no noise allowance).
  add_test(NAME cpu.timing_agree_script_disagrees
    COMMAND ${PB_PYTHON} ${CMAKE_SOURCE_DIR}/test/scripts/test_timing_agree.py ${CMAKE_SOURCE_DIR}/results/h200/cp4-64k.h5
            ${CMAKE_SOURCE_DIR}/results/h200/cp4-64k-each-cut.h5 --tolerance 0.03 --families fmha)
  set_tests_properties(cpu.timing_agree_script_disagrees PROPERTIES LABELS cpu TIMEOUT 60
    PASS_REGULAR_EXPRESSION "8 families compared, 7 outside 3.0% and the noise")
endif()

# `prefill-bench verify` (tiny model): cp 1, cp 2 against cp 1, and cp 4 with
# serialized ranks against cp 1.
add_test(NAME mpi_gpu.verify_smoke COMMAND $<TARGET_FILE:prefill-bench> verify ${CMAKE_SOURCE_DIR}/scenarios/smoke.yaml)
add_test(NAME mpi_gpu.verify_smoke_cp2
  COMMAND ${PB_MPIRUN} -np 2 $<TARGET_FILE:prefill-bench> verify ${CMAKE_SOURCE_DIR}/scenarios/smoke-cp2.yaml)
add_test(NAME mpi_gpu.verify_smoke_cp4
  COMMAND ${PB_MPIRUN} -np 4 $<TARGET_FILE:prefill-bench> verify ${CMAKE_SOURCE_DIR}/scenarios/smoke-cp4.yaml)
set_tests_properties(mpi_gpu.verify_smoke mpi_gpu.verify_smoke_cp2 mpi_gpu.verify_smoke_cp4 PROPERTIES LABELS "gpu;mpi" SKIP_RETURN_CODE 3
  TIMEOUT 300 ENVIRONMENT "${PB_MPI_ENV}" PASS_REGULAR_EXPRESSION "verify: passed")
# precision fp8 end to end (tiny model, docs/design.md §12): run (launches
# against plan's), and verify: every cut alone bit for bit against the fp8
# baseline (quant_fuse too), fp8 against bf16 within its floor at cp 1; cp 2
# with ranks taking turns.
add_test(NAME mpi_gpu.run_smoke_fp8
  COMMAND $<TARGET_FILE:prefill-bench> run ${CMAKE_SOURCE_DIR}/scenarios/smoke-fp8.yaml
          --output ${CMAKE_BINARY_DIR}/test-out/run-smoke-fp8.h5 --overwrite)
set_tests_properties(mpi_gpu.run_smoke_fp8 PROPERTIES LABELS "gpu;mpi" SKIP_RETURN_CODE 3 TIMEOUT 300
  ENVIRONMENT "${PB_MPI_ENV}" PASS_REGULAR_EXPRESSION "wrote .*run-smoke-fp8.h5")
add_test(NAME mpi_gpu.verify_smoke_fp8 COMMAND $<TARGET_FILE:prefill-bench> verify ${CMAKE_SOURCE_DIR}/scenarios/smoke-fp8.yaml)
add_test(NAME mpi_gpu.verify_smoke_cp2_fp8
  COMMAND ${PB_MPIRUN} -np 2 $<TARGET_FILE:prefill-bench> verify ${CMAKE_SOURCE_DIR}/scenarios/smoke-cp2.yaml
          --set serialize_ranks=true --set precision=fp8 --set model.f_rank=128)
# The fp8 experts on the loop engine (cuBLASLt per expert, moe_gemm.h), at expert widths whose
# K blocks it takes (multiples of 512); the tiny preset's 256 and 128 are refused before allocating
# (mpi_gpu.run_fp8_loop_widths_refused, below).
add_test(NAME mpi_gpu.verify_smoke_fp8_loop COMMAND $<TARGET_FILE:prefill-bench> verify
         ${CMAKE_SOURCE_DIR}/scenarios/smoke-fp8.yaml --set moe_gemm=loop --set model.moe_latent=512
         --set model.expert_inter=512)
set_tests_properties(mpi_gpu.verify_smoke_fp8 mpi_gpu.verify_smoke_cp2_fp8 mpi_gpu.verify_smoke_fp8_loop PROPERTIES
  LABELS "gpu;mpi" SKIP_RETURN_CODE 3 TIMEOUT 300 ENVIRONMENT "${PB_MPI_ENV}" PASS_REGULAR_EXPRESSION "verify: passed"
  FAIL_REGULAR_EXPRESSION "FAIL")

# One file with a baseline and other variants: compare prints each one's saving.
add_test(NAME cpu.compare_savings COMMAND $<TARGET_FILE:prefill-bench> compare ${PB_PLAN_OUT})
set_tests_properties(cpu.compare_savings PROPERTIES LABELS cpu TIMEOUT 120 FIXTURES_REQUIRED plan_cp8
  ENVIRONMENT "${PB_MPI_ENV}" PASS_REGULAR_EXPRESSION "savings against 'baseline'.*all")

# A serialized run's savings: the projected gang's TTFT beside the serialized one
# (the committed cp4-64k each-cut file).
add_test(NAME cli.compare_savings_projected
  COMMAND $<TARGET_FILE:prefill-bench> compare ${CMAKE_SOURCE_DIR}/results/h200/cp4-64k-each-cut.h5)
set_tests_properties(cli.compare_savings_projected PROPERTIES LABELS cpu TIMEOUT 60
  PASS_REGULAR_EXPRESSION "TTFT: the projected gang, replayed from the spans.*serialized wall\n  baseline +10940\\.6 .*\n  all +7831\\.9 +3108\\.8 +28\\.4% +7825\\.7 +2548\\.0 +[0-9.]+% +31404\\.6\n")

# --variants: some of a scenario's variants, in the order given; an unknown name
# is refused with the scenario's list.
add_test(NAME cli.variants_selected
  COMMAND $<TARGET_FILE:prefill-bench> plan ${CMAKE_SOURCE_DIR}/scenarios/ab-each-cut.yaml --variants overlap,baseline
          -o ${CMAKE_BINARY_DIR}/test-out/plan-variants.h5 --overwrite)
set_tests_properties(cli.variants_selected PROPERTIES LABELS cpu TIMEOUT 60
  PASS_REGULAR_EXPRESSION "variant overlap \\([^)]*\\), prefix.*variant baseline \\(" FAIL_REGULAR_EXPRESSION "variant land")
add_test(NAME cli.variants_unknown
  COMMAND bash ${CMAKE_SOURCE_DIR}/test/cli/expect.sh 2
          "error: --variants: 'fast' is not a variant of .*ab-each-cut.yaml; its variants: baseline, all, land"
          $<TARGET_FILE:prefill-bench> plan ${CMAKE_SOURCE_DIR}/scenarios/ab-each-cut.yaml --variants land,fast
          -o ${CMAKE_BINARY_DIR}/test-out/plan-variants-bad.h5 --overwrite)
set_tests_properties(cli.variants_unknown PROPERTIES LABELS cpu TIMEOUT 60)

# The multi-host launch (scripts/launch.sh --dry-run): one rank per GPU over a
# hostfile of two 4-GPU hosts for cp8, the NCCL environment exported.
add_test(NAME cpu.launch_dry_run
  COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/launch.sh --dry-run ${CMAKE_SOURCE_DIR}/test/data/hosts-2x4.txt
          ${CMAKE_SOURCE_DIR}/scenarios/cp8-128k.yaml)
set_tests_properties(cpu.launch_dry_run PROPERTIES LABELS cpu TIMEOUT 60 ENVIRONMENT "PB_BUILD=${CMAKE_BINARY_DIR}"
  PASS_REGULAR_EXPRESSION "mpirun --hostfile .*hosts-2x4.txt -np 8 --map-by slot --bind-to none -x NCCL_NVLS_ENABLE=0 .*prefill-bench run")

# `plan` that explains itself (no GPU): the fabric over a chosen link, datasheet
# figures labelled with their source, an existing output refused before any
# table, and the calibrated superstep checked against the committed cp1-16k run.
set(PB_H200 ${CMAKE_SOURCE_DIR}/results/h200)
add_test(NAME cpu.plan_link_ib400
  COMMAND $<TARGET_FILE:prefill-bench> plan ${CMAKE_SOURCE_DIR}/scenarios/smoke-cp2.yaml --link ib400
          -o ${CMAKE_BINARY_DIR}/test-out/plan-ib400.h5 --overwrite)
set_tests_properties(cpu.plan_link_ib400 PROPERTIES LABELS cpu TIMEOUT 60 FIXTURES_SETUP plan_ib400
  PASS_REGULAR_EXPRESSION "link +50 GB/s +ib400 \\(datasheet: one 400 Gb/s InfiniBand NIC")
add_test(NAME cpu.plan_refuses_existing_output
  COMMAND $<TARGET_FILE:prefill-bench> plan ${CMAKE_SOURCE_DIR}/scenarios/smoke-cp2.yaml
          -o ${CMAKE_BINARY_DIR}/test-out/plan-ib400.h5)
set_tests_properties(cpu.plan_refuses_existing_output PROPERTIES LABELS cpu TIMEOUT 60 FIXTURES_REQUIRED plan_ib400
  PASS_REGULAR_EXPRESSION "already exists: pass --overwrite" FAIL_REGULAR_EXPRESSION "variant baseline")
add_test(NAME cpu.plan_gb300_datasheet
  COMMAND $<TARGET_FILE:prefill-bench> plan ${CMAKE_SOURCE_DIR}/scenarios/cp1-16k.yaml --profile gb300
          -o ${CMAKE_BINARY_DIR}/test-out/plan-gb300.h5 --overwrite)
set_tests_properties(cpu.plan_gb300_datasheet PROPERTIES LABELS cpu TIMEOUT 60
  PASS_REGULAR_EXPRESSION "copy +8.00 TB/s +datasheet: NVIDIA B300.*note: datasheet peaks.*CP8 gangs")
# --ceiling sustained: the roofline's tensor work at the rate the H200 holds;
# a datasheet profile has no such figure, and says so.
add_test(NAME cpu.plan_sustained_ceiling
  COMMAND $<TARGET_FILE:prefill-bench> plan ${CMAKE_SOURCE_DIR}/scenarios/smoke.yaml --ceiling sustained
          -o ${CMAKE_BINARY_DIR}/test-out/plan-sustained.h5 --overwrite)
set_tests_properties(cpu.plan_sustained_ceiling PROPERTIES LABELS cpu TIMEOUT 60
  PASS_REGULAR_EXPRESSION "GEMM +659 TFLOP/s +sustained, measured.*tensor work at the sustained GEMM ceiling, 659 TFLOP/s")
add_test(NAME cpu.plan_sustained_ceiling_datasheet
  COMMAND $<TARGET_FILE:prefill-bench> plan ${CMAKE_SOURCE_DIR}/scenarios/smoke.yaml --profile h100
          --ceiling sustained -o ${CMAKE_BINARY_DIR}/test-out/plan-sustained-h100.h5 --overwrite)
set_tests_properties(cpu.plan_sustained_ceiling_datasheet PROPERTIES LABELS cpu TIMEOUT 60
  PASS_REGULAR_EXPRESSION "profile h100 has no sustained GEMM figure.*allowed for it: burst"
  FAIL_REGULAR_EXPRESSION "variant baseline")
add_test(NAME cpu.plan_calibrated_cp1_16k
  COMMAND $<TARGET_FILE:prefill-bench> plan ${CMAKE_SOURCE_DIR}/scenarios/cp1-16k.yaml
          --set variants=each-cut --set moe_gemm=cutlass
          --calibrate ${PB_H200}/kernels.h5,${PB_H200}/attnres.h5,${PB_H200}/fmha.h5,${PB_H200}/kda.h5,${PB_H200}/moe.h5
          --measured ${PB_H200}/cp1-16k-each-cut.h5 -o ${CMAKE_BINARY_DIR}/test-out/plan-calibrated.h5 --overwrite)
set_tests_properties(cpu.plan_calibrated_cp1_16k PROPERTIES LABELS cpu TIMEOUT 120
  PASS_REGULAR_EXPRESSION "calibrated superstep against the measured TTFT.*baseline +[0-9.]+ +[0-9.]+ +[-+][0-9.]+%.*attnres +[0-9.]+ +[0-9.]+ +[-+][0-9.]+%")

# Device memory shared by the ranks of one GPU (harness/platform/shared_region.h):
# the descriptor passing over a Unix socket, its deadlines and the granularity
# rounding on 3 and 4 ranks without a GPU; both share modes on the device.
add_executable(test_fd_share test/platform/test_fd_share.cpp)
target_link_libraries(test_fd_share PRIVATE pb_mpi_test_main)
foreach(np 3 4)
  add_test(NAME mpi.test_fd_share${np} COMMAND ${PB_MPIRUN} -np ${np} $<TARGET_FILE:test_fd_share>)
  set_tests_properties(mpi.test_fd_share${np} PROPERTIES LABELS mpi TIMEOUT 120 ENVIRONMENT "${PB_MPI_ENV}")
endforeach()
pb_sanitized_test(test_fd_share mpi.test_fd_share3 mpi.test_fd_share4)
add_executable(test_shared_region test/platform/test_shared_region.cpp)
target_link_libraries(test_shared_region PRIVATE pb_mpi_gpu_test_main)
add_test(NAME mpi_gpu.test_shared_region COMMAND ${PB_MPIRUN} -np 4 $<TARGET_FILE:test_shared_region>)
set_tests_properties(mpi_gpu.test_shared_region PROPERTIES LABELS "gpu;mpi" SKIP_RETURN_CODE 77 TIMEOUT 300
  ENVIRONMENT "${PB_MPI_ENV}")

# The NCCL fabric (harness/fabric/fabric.h, fabric_plan.h). On the host (CI):
# the locality plan, the scenario keys fabric and emulate_hosts, the staging.
pb_cpu_test(test/fabric/test_fabric_plan.cpp)
# On the device (every rank exits 77 when any rank sees no device): the MLA
# and KDA blocks over fabric nccl (CP2, CP4: every rank its own emulated host)
# and fabric auto (CP4: 2 emulated hosts x 2 ranks) equal fabric ipc bit for
# bit. NCCL reads NCCL_HOSTID once per process: one fabric per process.
set(PB_NCCL_ENV "${PB_MPI_ENV};NCCL_NVLS_ENABLE=0")
set(PB_NCCL_CONCURRENT_ENV "${PB_NCCL_ENV};CUDA_MODULE_LOADING=EAGER")  # concurrent ranks (fabric.h)
add_executable(test_cp_fabrics test/fabric/test_cp_fabrics.cpp)
target_link_libraries(test_cp_fabrics PRIVATE pb_mpi_gpu_test_main)
foreach(case nccl:2 nccl:4 auto:4)
  string(REPLACE ":" ";" parts ${case})
  list(GET parts 0 mode)
  list(GET parts 1 np)
  add_test(NAME mpi_gpu.test_cp_fabrics_${mode}${np}
    COMMAND ${PB_MPIRUN} -np ${np} $<TARGET_FILE:test_cp_fabrics> "--test-case=*fabric ${mode}*")
  set_tests_properties(mpi_gpu.test_cp_fabrics_${mode}${np} PROPERTIES LABELS "gpu;mpi" SKIP_RETURN_CODE 77
    TIMEOUT 600 ENVIRONMENT "${PB_NCCL_CONCURRENT_ENV}")
endforeach()
# A stalled peer over NCCL ends the job within its 2 s time-out, naming rank, layer and window.
add_executable(nccl_timeout_probe test/fabric/nccl_timeout_probe.cpp)
target_link_libraries(nccl_timeout_probe PRIVATE pb_fabric)
add_test(NAME mpi_gpu.nccl_timeout COMMAND ${PB_MPIRUN} -np 4 $<TARGET_FILE:nccl_timeout_probe>)
set_tests_properties(mpi_gpu.nccl_timeout PROPERTIES LABELS "gpu;mpi" TIMEOUT 120
  ENVIRONMENT "${PB_NCCL_CONCURRENT_ENV}"
  PASS_REGULAR_EXPRESSION "wait timed out after [0-9.]+ s: rank 1, layer 3, window 5 .*did not arrive over NCCL"
  SKIP_REGULAR_EXPRESSION "SKIPPED: no CUDA device")
# `prefill-bench verify` on smoke-cp4 across 2 emulated hosts (fabric auto: IPC
# inside each, NCCL between them), serialized on one GPU (sends deferred to
# their receiver's turn, modules loaded lazily as in any serialized run).
add_test(NAME mpi_gpu.verify_smoke_cp4_emulated
  COMMAND ${PB_MPIRUN} -np 4 $<TARGET_FILE:prefill-bench> verify ${CMAKE_SOURCE_DIR}/scenarios/smoke-cp4.yaml
          --set fabric=auto --set emulate_hosts=2)
set_tests_properties(mpi_gpu.verify_smoke_cp4_emulated PROPERTIES LABELS "gpu;mpi" SKIP_RETURN_CODE 3
  TIMEOUT 600 ENVIRONMENT "${PB_NCCL_ENV}" PASS_REGULAR_EXPRESSION "verify: passed")
# scripts/launch.sh --emulate-hosts: the scenario key goes to every rank.
add_test(NAME cpu.launch_dry_run_emulated
  COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/launch.sh --dry-run --emulate-hosts 2
          ${CMAKE_SOURCE_DIR}/test/data/hosts-1x4.txt ${CMAKE_SOURCE_DIR}/scenarios/smoke-cp4.yaml --set fabric=auto)
set_tests_properties(cpu.launch_dry_run_emulated PROPERTIES LABELS cpu TIMEOUT 60
  ENVIRONMENT "PB_BUILD=${CMAKE_BINARY_DIR}"
  PASS_REGULAR_EXPRESSION "NCCL environment: NCCL_NVLS_ENABLE=0.*-np 4 .*prefill-bench run .*smoke-cp4.yaml --set emulate_hosts=2 --set fabric=auto")

# ---- the command line: the regression gate's exits, one list grammar, --version, messages ----
# Each case runs the real binary through test/cli/expect.sh <exit code>
# <regex over the whole output> (anchored ^...$ where nothing else may print).
# The gate's inputs: synthetic files (test/support/synthetic_results.h) written
# by write_gate_files, and the committed results/h200 files.
add_executable(write_gate_files test/cli/write_gate_files.cpp)
target_include_directories(write_gate_files PRIVATE test/support)
target_link_libraries(write_gate_files PRIVATE ${PB_HOST_LIBS})
set(PB_GATE_DIR ${CMAKE_BINARY_DIR}/test-out/gate)
add_test(NAME cli.gate_files COMMAND write_gate_files ${PB_GATE_DIR})
set_tests_properties(cli.gate_files PROPERTIES LABELS cpu TIMEOUT 60 FIXTURES_SETUP gate_files)
pb_sanitized_test(write_gate_files cli.gate_files)

set(PB_EXPECT bash ${CMAKE_SOURCE_DIR}/test/cli/expect.sh)
# pb_cli_test(<name> <exit code> <regex> <prefill-bench arguments...>): label cpu.
function(pb_cli_test name code regex)
  add_test(NAME cli.${name} COMMAND ${PB_EXPECT} ${code} ${regex} $<TARGET_FILE:prefill-bench> ${ARGN})
  set_tests_properties(cli.${name} PROPERTIES LABELS cpu TIMEOUT 120 ENVIRONMENT "${PB_MPI_ENV}"
    WORKING_DIRECTORY ${CMAKE_BINARY_DIR}/test-out)
endfunction()
# pb_gate_test(<name> <exit code> <regex> <candidate> [compare options...]): the candidate against base.h5.
function(pb_gate_test name code regex candidate)
  pb_cli_test(gate_${name} ${code} ${regex} compare --baseline ${PB_GATE_DIR}/base.h5 ${PB_GATE_DIR}/${candidate}
              ${ARGN})
  set_tests_properties(cli.gate_${name} PROPERTIES FIXTURES_REQUIRED gate_files)
endfunction()

pb_gate_test(pass 0 "judged: 2.*not judged: 0.*result: pass \\(exit 0\\)" same.h5 --max-regression 3%)
pb_gate_test(regressed 1 "result: REGRESSED \\(exit 1\\): 2 of 2 judged variants regressed" slow.h5)
pb_gate_test(plan_candidate 2 "holds no TTFT samples \\(a 'plan' file.*result: cannot judge \\(exit 2\\)" plan.h5)
pb_gate_test(lane_candidate 2 "different kinds: the baseline is a 'run' file, the candidate a 'lane' file" lane.h5)
pb_gate_test(incomplete 2 "is marked incomplete.*result: cannot judge \\(exit 2\\)" incomplete.h5)
pb_gate_test(other_scenario 2 "the scenarios differ \\(baseline vs candidate\\): model.layers 4 vs 3" other-scenario.h5)
pb_gate_test(missing_variant 2 "all +missing from the candidate.*result: cannot judge \\(exit 2\\)" no-all.h5)
pb_gate_test(only 0 "baseline +ok.*result: pass \\(exit 0\\)" no-all.h5 --only baseline)
pb_gate_test(only_missing 2 "nope +named by --only, in neither file" same.h5 --only baseline,nope)
pb_gate_test(other_cuts 2 "all +the cuts differ" other-cuts.h5)
# The machine: printed side by side; a slower one fails raw and passes normalized.
pb_gate_test(slower_machine_raw 1
  "bf16 GEMM sustained, TFLOP/s +665.0 \\| 633.3 +\\(-4.8%\\).*machines differ by more than the allowance.*result: REGRESSED"
  slower-machine.h5)
pb_gate_test(slower_machine_normalized 0
  "baseline +ok +TTFT, normalized to the baseline's sustained GEMM ceiling \\(B x 0.9524\\).*result: pass \\(exit 0\\)"
  slower-machine.h5 --normalize sustained)
pb_gate_test(normalize_no_ceiling 2
  "--normalize sustained: the candidate '[^']*no-ceiling.h5' records no sustained GEMM ceiling.*result: cannot judge"
  no-ceiling.h5 --normalize sustained)
# Quiet by default: one line per variant; --verbose prints each whole comparison.
pb_gate_test(quiet 0 "judged: 2.*--verbose: each judged variant's whole comparison" same.h5)
# The committed files: a candidate with 2 of the baseline's 8 variants cannot pass.
pb_cli_test(gate_committed_missing 2 "land +missing from the candidate.*result: cannot judge \\(exit 2\\)"
            compare --baseline ${CMAKE_SOURCE_DIR}/results/h200/cp1-16k-each-cut.h5
            ${CMAKE_SOURCE_DIR}/results/h200/cp1-16k.h5)
# prefill-bench sweep (docs/sweep.md): every point planned, then resumed;
# without a device every run point fails and is recorded (exit 3); refusals.
set(PB_SWEEP_OUT ${CMAKE_BINARY_DIR}/test-out)
pb_cli_test(sweep_plan 0
  "sweep smoke-sweep: 3 points \\(planned\\).*\\[3/3\\] ctx1024-cp4-bf16: planned: baseline .*wrote [^ ]*sweep-plan.h5: 3 points, 0 failed"
  sweep ${CMAKE_SOURCE_DIR}/scenarios/smoke-sweep.yaml --plan -o ${PB_SWEEP_OUT}/sweep-plan.h5 --overwrite)
pb_cli_test(sweep_resume 0 "3 in the file already.*\\[2/3\\] ctx512-cp2-bf16: planned earlier, kept"
  sweep ${CMAKE_SOURCE_DIR}/scenarios/smoke-sweep.yaml --plan -o ${PB_SWEEP_OUT}/sweep-plan.h5)
set_tests_properties(cli.sweep_plan PROPERTIES FIXTURES_SETUP sweep_plan)
set_tests_properties(cli.sweep_resume PROPERTIES FIXTURES_REQUIRED sweep_plan)
pb_cli_test(sweep_no_device 3
  "\\[1/3\\] ctx256-cp1-bf16: FAILED, exit 3: prefill-bench run: no CUDA device.*wrote [^ ]*sweep-run.h5: 3 points, 3 failed"
  sweep ${CMAKE_SOURCE_DIR}/scenarios/smoke-sweep.yaml -o ${PB_SWEEP_OUT}/sweep-run.h5 --overwrite)
set_tests_properties(cli.sweep_no_device PROPERTIES LABELS "cpu;mpi" ENVIRONMENT "${PB_MPI_ENV};CUDA_VISIBLE_DEVICES=")
pb_cli_test(sweep_no_sweep 2 "smoke.yaml: the scenario has no sweep"
  sweep ${CMAKE_SOURCE_DIR}/scenarios/smoke.yaml --plan)
pb_cli_test(sweep_other_file 2 "base.h5' exists and holds a 'run' file. a sweep resumes only its own file"
  sweep ${CMAKE_SOURCE_DIR}/scenarios/smoke-sweep.yaml --plan -o ${PB_GATE_DIR}/base.h5)
set_tests_properties(cli.sweep_other_file PROPERTIES FIXTURES_REQUIRED gate_files)
# plan --measured judges the calibrated plan against the run's headline TTFT:
# for cp8-128k's serialized ranks, the projected gang (13059 ms), not the serialized wall.
set(pb_calibration_files ${CMAKE_SOURCE_DIR}/results/h200/kernels.h5,${CMAKE_SOURCE_DIR}/results/h200/attnres.h5)
string(APPEND pb_calibration_files ,${CMAKE_SOURCE_DIR}/results/h200/fmha.h5,${CMAKE_SOURCE_DIR}/results/h200/kda.h5)
string(APPEND pb_calibration_files ,${CMAKE_SOURCE_DIR}/results/h200/moe.h5)
pb_cli_test(plan_measured_headline 0 "the projected gang's where its ranks took turns.*\n  baseline +[0-9.]+ +13059\\.4 "
  plan ${CMAKE_SOURCE_DIR}/scenarios/cp8-128k.yaml --calibrate ${pb_calibration_files}
  --measured ${CMAKE_SOURCE_DIR}/results/h200/cp8-128k.h5)
# A plan's TTFT is the planned one (headline.h): its savings table and report carry it, cold starts never.
pb_cli_test(compare_plan_ttft 0
  "TTFT: planned: the calibrated plan's deepest rank.*\n  all +[0-9.]+ +[0-9.]+ +[1-9][0-9.]*% "
  compare ${CMAKE_SOURCE_DIR}/test/data/plan-smoke-cp2.h5)
pb_cli_test(compare_plan_markdown 0 "planned for the h200 profile.*\\| planned TTFT ms \\(median\\) \\|.*roofline's ms per superstep"
  compare ${CMAKE_SOURCE_DIR}/test/data/plan-smoke-cp2.h5 --format markdown)
# A cold reference (the committed each-cut file ran its baseline first, warmup 0) is warned of.
pb_cli_test(compare_cold_reference 0
  "baseline +10940.6 .* cold\n.*warning: the reference 'baseline' in [^ ]*cp4-64k-each-cut.h5 may hold a cold start: it ran first with no warm-up rep \\(warmup: 0\\)"
  compare ${CMAKE_SOURCE_DIR}/results/h200/cp4-64k-each-cut.h5)
# A file made the README's way (--set variants=each-cut --variants a,b) re-parses
# its recorded scenario: the gate judges it against itself.
pb_cli_test(gate_committed_variants_itself 0 "result: pass \\(exit 0\\)"
            compare --baseline ${CMAKE_SOURCE_DIR}/results/h200/cp8-128k-each-cut-a.h5
            ${CMAKE_SOURCE_DIR}/results/h200/cp8-128k-each-cut-a.h5)
# --max-regression: accepted forms judge, refused forms state the grammar.
set(pb_forms_ok "3%" "0.03" "2.5%" "0")
set(pb_forms_refused "3" "abc" "-1%" "3%%" "100%" "1e-2")
foreach(form_list ok refused)
  set(i 0)
  foreach(form ${pb_forms_${form_list}})
    if(form_list STREQUAL "ok")
      pb_gate_test(max_regression_ok_${i} 0 "result: pass \\(exit 0\\)" same.h5 --max-regression=${form})
    else()
      pb_gate_test(max_regression_refused_${i} 2
        "^\\[rank 0 on [^]]+\\] error: --max-regression '[^']+': give a percent in \\[0, 100\\) such as 3% or 2.5%, or a fraction in \\[0, 1\\) such as 0.03$"
        same.h5 --max-regression=${form})
    endif()
    math(EXPR i "${i} + 1")
  endforeach()
endforeach()

# Lists are comma-separated: the parser splits them (each name is checked on its own) and the
# command gets as far as looking for a GPU; an unknown name in a list is refused.
pb_cli_test(comma_lists 3 "no CUDA device is visible"
            fmha --tokens 4096,16384 --engine native,cudnn --mask dense,causal)
pb_cli_test(comma_list_refused 2 "--engine: bogus not in \\{native,cudnn\\}" fmha --engine native,bogus)
pb_cli_test(comma_families 3 "no CUDA device is visible" kernels --family land,conv,attnres)
set_tests_properties(cli.comma_lists cli.comma_families PROPERTIES ENVIRONMENT "${PB_MPI_ENV};CUDA_VISIBLE_DEVICES=")
# --version: version, git sha, build options.
pb_cli_test(version 0
  "^prefill-bench 0\\.[0-9]+\\.[0-9]+\ngit ([0-9a-f]+|unknown)( \\(dirty\\))?\nbuild: cuDNN FMHA (on|off), CUTLASS MoE GEMM (on|off), CUDA architectures [0-9a-z,]+, CUDA [0-9.]+$"
  --version)
# Help lists only what a command uses: ranks and verify write no file.
pb_cli_test(help_ranks 0 "--set" ranks --help)
pb_cli_test(help_verify 0 "--set" verify --help)
set_tests_properties(cli.help_ranks cli.help_verify PROPERTIES FAIL_REGULAR_EXPRESSION "--overwrite|--output|--cuts")
# -o to an existing file is refused before anything else is printed.
pb_cli_test(plan_existing_output 2
  "^\\[rank 0 on [^]]+\\] error: results file '[^']*cp1-16k.h5' already exists: pass --overwrite or choose another output$"
  plan ${CMAKE_SOURCE_DIR}/scenarios/cp1-16k.yaml -o ${CMAKE_SOURCE_DIR}/results/h200/cp1-16k.h5)
# One prefix, no source path; PB_DEBUG=1 adds the location.
pb_cli_test(missing_scenario 2 "^\\[rank 0 on [^]]+\\] error: cannot read scenario file '/nonexistent/x.yaml'$"
            plan /nonexistent/x.yaml)
pb_cli_test(missing_scenario_debug 2
  "^\\[rank 0 on [^]]+\\] error: [^ ]*cmd_plan\\.cpp:[0-9]+: cannot read scenario file '/nonexistent/x.yaml'$"
  plan /nonexistent/x.yaml)
set_tests_properties(cli.missing_scenario_debug PROPERTIES ENVIRONMENT "${PB_MPI_ENV};PB_DEBUG=1")
# The scripts take their options in any position: --dry-run last, --set before the words.
add_test(NAME cli.launch_dry_run_last
  COMMAND ${PB_EXPECT} 0 "mpirun --hostfile [^ ]*hosts-2x4.txt -np 8 .*prefill-bench run [^ ]*cp8-128k.yaml --set reps=2"
          bash ${CMAKE_SOURCE_DIR}/scripts/launch.sh --set reps=2 ${CMAKE_SOURCE_DIR}/test/data/hosts-2x4.txt
          ${CMAKE_SOURCE_DIR}/scenarios/cp8-128k.yaml --dry-run)
set_tests_properties(cli.launch_dry_run_last PROPERTIES LABELS cpu TIMEOUT 60
  ENVIRONMENT "${PB_MPI_ENV};PB_BUILD=${CMAKE_BINARY_DIR}")
# --variants takes its value as the next word too, as --set and --cuts do.
add_test(NAME cli.launch_variants_space_form
  COMMAND ${PB_EXPECT} 0 "prefill-bench run [^ ]*cp8-128k.yaml --variants baseline,all"
          bash ${CMAKE_SOURCE_DIR}/scripts/launch.sh --dry-run ${CMAKE_SOURCE_DIR}/test/data/hosts-2x4.txt
          ${CMAKE_SOURCE_DIR}/scenarios/cp8-128k.yaml --variants baseline,all)
set_tests_properties(cli.launch_variants_space_form PROPERTIES LABELS cpu TIMEOUT 60
  ENVIRONMENT "${PB_MPI_ENV};PB_BUILD=${CMAKE_BINARY_DIR}")
add_test(NAME cli.regress_usage
  COMMAND ${PB_EXPECT} 2 "^regress.sh: no baseline file '/nonexistent/base.h5'$"
          bash ${CMAKE_SOURCE_DIR}/scripts/regress.sh --max-regression 3% ${CMAKE_SOURCE_DIR}/scenarios/cp1-16k.yaml
          /nonexistent/base.h5)
set_tests_properties(cli.regress_usage PROPERTIES LABELS cpu TIMEOUT 60)

# ---- faults injected on purpose ----
# Writing a results file when the disk fills or the folder cannot take it.
pb_cpu_test(test/results/test_write_faults.cpp)
# describe_results <file>: one line (kind, complete, reps per variant) the fault tests match.
add_executable(describe_results test/cli/describe_results.cpp)
target_link_libraries(describe_results PRIVATE ${PB_HOST_LIBS})
add_dependencies(pb_sanitized describe_results)
# results_reader_probe compare|trace|slim|plan ...: those commands' reading of
# results files from the host libraries alone, for the fuzz test under the sanitizers.
add_executable(results_reader_probe test/cli/results_reader_probe.cpp)
target_link_libraries(results_reader_probe PRIVATE ${PB_HOST_LIBS})
# A rank killed (SIGKILL) mid-run, without a GPU: a gang that rewrites its
# results after every rep (gang_fault_probe) on 3 ranks loses rank 1, then
# rank 0 (the writer, perhaps mid-write): the job ends within 30 s naming the
# rank, and the file reads back incomplete with the reps that finished.
add_executable(gang_fault_probe test/platform/gang_fault_probe.cpp)
target_link_libraries(gang_fault_probe PRIVATE ${PB_HOST_LIBS})
set(PB_KILL_RANK bash ${CMAKE_SOURCE_DIR}/test/cli/kill_rank.sh $<TARGET_FILE:describe_results>)
foreach(rank 1 0)
  add_test(NAME mpi.kill_rank${rank}
    COMMAND ${PB_KILL_RANK} KILL ${rank} 30 ${CMAKE_BINARY_DIR}/test-out/kill-rank${rank}.h5
            ${PB_MPIRUN} -np 3 $<TARGET_FILE:gang_fault_probe> ${CMAKE_BINARY_DIR}/test-out/kill-rank${rank}.h5 1000)
  set_tests_properties(mpi.kill_rank${rank} PROPERTIES LABELS mpi TIMEOUT 120 ENVIRONMENT "${PB_MPI_ENV}")
  pb_sanitized_test(gang_fault_probe mpi.kill_rank${rank})
endforeach()
# Nothing finished is lost, variant by variant (a reps: 1 run of three variants,
# 3 s each): SIGKILL on rank 1 in the second variant leaves the first one
# complete; SIGINT on rank 0 in the last variant keeps all three.
add_test(NAME mpi.kill_rank1_second_variant
  COMMAND ${PB_KILL_RANK} KILL 1 30 ${CMAKE_BINARY_DIR}/test-out/kill-second-variant.h5
          ${PB_MPIRUN} -np 3 $<TARGET_FILE:gang_fault_probe> ${CMAKE_BINARY_DIR}/test-out/kill-second-variant.h5 1 3 3000)
set_tests_properties(mpi.kill_rank1_second_variant PROPERTIES LABELS mpi TIMEOUT 120
  ENVIRONMENT "${PB_MPI_ENV};KILL_RANK_WANT=baseline 1*, v1 0, v2 0")
add_test(NAME mpi.interrupt_last_variant
  COMMAND ${PB_KILL_RANK} INT 0 30 ${CMAKE_BINARY_DIR}/test-out/interrupt-last-variant.h5
          ${PB_MPIRUN} -np 3 $<TARGET_FILE:gang_fault_probe> ${CMAKE_BINARY_DIR}/test-out/interrupt-last-variant.h5 1 3 3000)
set_tests_properties(mpi.interrupt_last_variant PROPERTIES LABELS mpi TIMEOUT 120
  ENVIRONMENT "${PB_MPI_ENV};KILL_RANK_DELAY=3.5;KILL_RANK_WANT=baseline 1*, v1 1*, v2 1*")
# `prefill-bench run` losing a rank mid-run (smoke size, ranks taking turns on
# one GPU): SIGKILL on rank 1 of 2 and rank 2 of 4, SIGINT on rank 0 of 2 and
# of 4. Each ends within 60 s naming the rank; the file holds the finished
# reps, marked incomplete. Skipped (77) without a GPU.
foreach(case KILL:1:2 KILL:2:4 INT:0:2 INT:0:4)
  string(REPLACE ":" ";" parts ${case})
  list(GET parts 0 signal)
  list(GET parts 1 rank)
  list(GET parts 2 np)
  set(scenario ${CMAKE_SOURCE_DIR}/scenarios/smoke-cp${np}.yaml)
  string(TOLOWER ${signal} name)
  set(out ${CMAKE_BINARY_DIR}/test-out/${name}-rank${rank}-cp${np}.h5)
  add_test(NAME mpi_gpu.run_${name}_rank${rank}_cp${np}
    COMMAND ${PB_KILL_RANK} ${signal} ${rank} 60 ${out}
            ${PB_MPIRUN} -np ${np} $<TARGET_FILE:prefill-bench> run ${scenario} --set serialize_ranks=true
            --set reps=1000 -o ${out} --overwrite)
  set_tests_properties(mpi_gpu.run_${name}_rank${rank}_cp${np} PROPERTIES LABELS "gpu;mpi" SKIP_RETURN_CODE 77
    TIMEOUT 300 ENVIRONMENT "${PB_MPI_ENV}")
endforeach()

# Outputs never clobber: a results path is a regular file or a new name. /dev/null
# (even with --overwrite, as root), a directory, a FIFO and a link out of its
# folder are refused before anything runs; `plan` without -o writes nothing.
pb_cli_test(output_dev_null 2 "results file '/dev/null' is not a regular file \\(a device\\)"
            plan ${CMAKE_SOURCE_DIR}/scenarios/smoke.yaml -o /dev/null --overwrite)
pb_cli_test(output_directory 2 "is not a regular file \\(a directory\\)"
            plan ${CMAKE_SOURCE_DIR}/scenarios/smoke.yaml -o ${CMAKE_BINARY_DIR}/test-out --overwrite)
set(pb_clobber ${CMAKE_BINARY_DIR}/test-out/clobber)
add_test(NAME cli.output_fifo_and_link
  COMMAND bash -c "rm -rf ${pb_clobber} && mkdir -p ${pb_clobber} && mkfifo ${pb_clobber}/fifo.h5 && \
    ln -s /etc/hostname ${pb_clobber}/out.h5 && \
    $0 2 'is not a regular file \\(a FIFO\\)' $1 plan ${CMAKE_SOURCE_DIR}/scenarios/smoke.yaml -o ${pb_clobber}/fifo.h5 --overwrite && \
    $0 2 'is a symbolic link out of its folder' $1 plan ${CMAKE_SOURCE_DIR}/scenarios/smoke.yaml -o ${pb_clobber}/out.h5 --overwrite && \
    test -p ${pb_clobber}/fifo.h5 && test -L ${pb_clobber}/out.h5 && echo refused-and-intact"
    ${CMAKE_SOURCE_DIR}/test/cli/expect.sh $<TARGET_FILE:prefill-bench>)
set_tests_properties(cli.output_fifo_and_link PROPERTIES LABELS cpu TIMEOUT 60 ENVIRONMENT "${PB_MPI_ENV}"
  PASS_REGULAR_EXPRESSION "refused-and-intact")
add_test(NAME cli.plan_prints_without_output
  COMMAND bash -c "cd ${CMAKE_BINARY_DIR}/test-out && rm -rf plan-no-o && mkdir plan-no-o && cd plan-no-o && \
    $0 plan ${CMAKE_SOURCE_DIR}/scenarios/smoke.yaml >/dev/null && test -z \"$(find . -type f)\" && echo nothing-written"
    $<TARGET_FILE:prefill-bench>)
set_tests_properties(cli.plan_prints_without_output PROPERTIES LABELS cpu TIMEOUT 60 ENVIRONMENT "${PB_MPI_ENV}"
  PASS_REGULAR_EXPRESSION "nothing-written")

# `compare` given broken results files: a named error and exit 2, alone and on
# either side of the gate; damage anywhere never crashes it.
add_test(NAME cli.compare_corrupt_files
  COMMAND bash ${CMAKE_SOURCE_DIR}/test/cli/corrupt_results.sh $<TARGET_FILE:prefill-bench>
          ${PB_GATE_DIR}/base.h5 ${CMAKE_BINARY_DIR}/test-out/corrupt)
set_tests_properties(cli.compare_corrupt_files PROPERTIES LABELS cpu TIMEOUT 300 FIXTURES_REQUIRED gate_files
  ENVIRONMENT "${PB_MPI_ENV}")
# A full disk under the output (its .tmp a link to /dev/full) and an output
# folder that is a regular file: exit 2, named; the earlier file intact.
# `plan` (no GPU) and `run` (GPU, smoke size).
add_test(NAME cli.plan_output_faults
  COMMAND bash ${CMAKE_SOURCE_DIR}/test/cli/output_faults.sh ${CMAKE_BINARY_DIR}/test-out/faults-plan.h5
          $<TARGET_FILE:prefill-bench> plan ${CMAKE_SOURCE_DIR}/scenarios/smoke-cp2.yaml)
set_tests_properties(cli.plan_output_faults PROPERTIES LABELS cpu TIMEOUT 120 ENVIRONMENT "${PB_MPI_ENV}")
add_test(NAME mpi_gpu.run_output_faults
  COMMAND bash ${CMAKE_SOURCE_DIR}/test/cli/output_faults.sh ${CMAKE_BINARY_DIR}/test-out/faults-run.h5
          $<TARGET_FILE:prefill-bench> run ${CMAKE_SOURCE_DIR}/scenarios/smoke.yaml)
set_tests_properties(mpi_gpu.run_output_faults PROPERTIES LABELS "gpu;mpi" SKIP_RETURN_CODE 77 TIMEOUT 300
  ENVIRONMENT "${PB_MPI_ENV}")

# A device allocation that does not fit: DeviceBuffer and DeviceMemory::take
# name the buffer, the bytes asked and free (gpu); `run` of a model far larger
# than the GPU is refused before allocating, naming the rank, the GPU, the
# need, the free bytes and the rank's largest buffer (cp 1, and cp 2 sharing a GPU).
pb_gpu_test(test/platform/test_out_of_memory.cpp)
set_tests_properties(gpu.test_out_of_memory PROPERTIES RUN_SERIAL ON)  # it asks for what is free
set(PB_HUGE_MODEL --set model.experts=1024 --set model.moe_latent=1024 --set model.expert_inter=65536)
set(PB_NO_FIT_REGEX "\\[rank [01] on [^]]+\\] error: the scenario does not fit on GPU [0-9]+ of [^:]+: [0-9]+ rank\\(s\\) need [0-9.]+ GB \\(weights [0-9.]+ GB, turn-local arena [0-9.]+ GB, rank buffers [0-9.]+ GB\\) and [0-9.]+ GB are free of [0-9.]+ GB; this rank's largest buffer: moe\\.expert_gate_up \\(weights\\), [0-9.]+ GB")
add_test(NAME mpi_gpu.run_does_not_fit
  COMMAND ${PB_EXPECT} 2 "${PB_NO_FIT_REGEX}" $<TARGET_FILE:prefill-bench> run ${CMAKE_SOURCE_DIR}/scenarios/smoke.yaml
          ${PB_HUGE_MODEL} -o ${CMAKE_BINARY_DIR}/test-out/no-fit.h5 --overwrite)
add_test(NAME mpi_gpu.run_does_not_fit_cp2
  COMMAND ${PB_EXPECT} 2 "${PB_NO_FIT_REGEX}" ${PB_MPIRUN} -np 2 $<TARGET_FILE:prefill-bench> run
          ${CMAKE_SOURCE_DIR}/scenarios/smoke-cp2.yaml --set serialize_ranks=true ${PB_HUGE_MODEL}
          -o ${CMAKE_BINARY_DIR}/test-out/no-fit-cp2.h5 --overwrite)
set_tests_properties(mpi_gpu.run_does_not_fit mpi_gpu.run_does_not_fit_cp2 PROPERTIES LABELS "gpu;mpi" TIMEOUT 300
  ENVIRONMENT "${PB_MPI_ENV}" SKIP_REGULAR_EXPRESSION "no CUDA device is visible")

# The fp8 loop engine's widths (mpi_gpu.verify_smoke_fp8_loop) are checked before allocating.
add_test(NAME mpi_gpu.run_fp8_loop_widths_refused
  COMMAND ${PB_EXPECT} 2 "precision.experts fp8 on moe_gemm loop needs model.moe_latent and model.expert_inter multiples of 512"
          $<TARGET_FILE:prefill-bench> run ${CMAKE_SOURCE_DIR}/scenarios/smoke-fp8.yaml --set moe_gemm=loop
          -o ${CMAKE_BINARY_DIR}/test-out/fp8-loop-refused.h5 --overwrite)
set_tests_properties(mpi_gpu.run_fp8_loop_widths_refused PROPERTIES LABELS "gpu;mpi" TIMEOUT 120
  ENVIRONMENT "${PB_MPI_ENV}" SKIP_REGULAR_EXPRESSION "no CUDA device is visible")

# A write that fails leaves HDF5's file struct behind (test/support/lsan-failed-write.supp says why).
set_property(TEST cpu.test_write_faults APPEND PROPERTY ENVIRONMENT
             "LSAN_OPTIONS=suppressions=${CMAKE_SOURCE_DIR}/test/support/lsan-failed-write.supp:print_suppressions=0")
