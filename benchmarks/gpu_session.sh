#!/usr/bin/env bash
# One call on a GPU machine: the steps named on the command line, each under its own time
# limit, every log packed into $OUT/logs.tgz after each step (8 files at most come back from
# the device tool, and a call cut off at its limit returns what $OUT holds then: the logs of
# every step that ended).
# Usage: benchmarks/gpu_session.sh [STEP ...]     (default: smoke warm tests sanitize fp32)
# Steps:
#   smoke      benchmarks/check_cupy_surface.py (our CuPy names and calls against this CuPy),
#              then benchmarks/gpu_smoke.py: tune, plan, convolve, a CUDA graph and the torch module
#              on one small problem against float64, in seconds; when it fails the call
#              stops there (SMOKE_STOPS=0: goes on), leaving the device time for a fix
#   warm       benchmarks/warm_kernels.py: every kernel instance compiled once, one process
#              per CPU, into the kernel cache on disk (algorithms/cuda/_binaries.py; first
#              on a fresh machine: later steps and their test workers then load instead of
#              compiling, which they did not before 2026-11-29: CuPy never read its own)
#   sass       SASS (nvcc -cubin, cuobjdump -sass) of a few instances whose instruction order
#              matters (SASS_KERNELS: "file:instance;..."), for reading load grouping
#   tests      kernel compile checks, host checks and tests/gpu (pytest-xdist, JOBS workers;
#              TESTS overrides the test paths, TESTS_K selects by pytest -k expression)
#   sanitize   compute-sanitizer memcheck and racecheck over small shapes of tests/gpu
#   overhead   benchmarks/bench_overhead.py (issue 9: cached find, plan, convolve, ResNet-50)
#   host       benchmarks/bench_host_path.py (issue 9: a plan call's host time step by step,
#              its run's prepared launches taken apart (kernel lookup, bind, stream query,
#              the launch alone), every configuration's enqueue time on the small problem; with
#              HOST_LAYER=net:layer and HOST_MATH, batch 32, on that layer too)
#   host_drift benchmarks/host_drift.py (issue 11: does the host's speed drift? one host-bound
#              and one device-bound configuration of MobileNet-v2 block6.2.expand sampled as
#              the tuner samples, every half second for DRIFT_S seconds (default 60), with
#              steal time, CPU share and clock)
#   call_path  benchmarks/bench_call_path.py (issue 9: every call path's host time on a tiny
#              problem, interleaved: algorithm, plan, convolve, backward calls, the module)
#   host_profile  benchmarks/profile_host.py (issues 9, 13: cProfile of a plan call, the
#              module's forward and its training step on the small problem, by function)
#   launch_cost  benchmarks/bench_launch_cost.py (issue 9: host us per kernel launch by its
#              argument count, packed in a structure and prepared (_launch), per cuBLAS
#              call and per cuBLASLt call (_cublaslt), per workspace view)
#   gemm_algos benchmarks/bench_gemm_algos.py (issue 10: each cuBLASLt heuristic algorithm
#              for ResNet-50's TF32 stride-1 1x1 GEMMs, against cuBLAS's choice and cuDNN)
#   profile    Nsight Compute over benchmarks/profile_kernels.py, one ncu process per case
#              (PROFILE_CASES=a,b to choose; NCU_METRICS="" to drop the stall metrics),
#              then benchmarks/ncu_summary.py's table of every kernel: run `warm` first
#   tuner      benchmarks/bench_tuner.py (issue 11: tuning time and regret, ResNet-50 b32)
#              (TUNER_PROFILE=1: then once more under cProfile, into tuner_profile.txt:
#              where exhaustive tuning's seconds go, about one tuning's time more)
#   tuner_unbatched  the same with CONVTUNE_BATCH_BELOW_MS=0.05 on both sides
#   startup    benchmarks/bench_startup.py (issue 9: what a fresh process pays before its first
#              answer on the GPU: import, a cached find, a plan's first call with its kernels
#              read from the disk cache; run `warm` first; about 60 s)
#   cold       benchmarks/bench_cold_tune.py (issue 11: exhaustive ResNet-50 b32 tuning on an
#              empty kernel cache, the kernels compiled ahead by threads, then each at its
#              first run, then with the cache the first filled; a process and a store each)
#   tuner_more the same for VGG-16 b16 and MobileNet-v2 b32 (issue 11's regret target covers
#              the three networks), each under its own T_TUNER
#              (ISO_HERE=1: every tuner step also re-measures in its own process, to tell
#              whether its times and the isolated child's differ by process or by order;
#              ISO_DEVICE=1: the re-measurement also times each configuration on the device
#              alone, to tell which ones are host-bound)
#   tuner_fast  ResNet-50 in fast mode, the store first filled with the other three networks
#              and the cost model fitted by a separate process first (--saved-model: the
#              timed tuning loads it; the report gives that fit's time too); then once more
#              under cProfile (tuner_fast_profile.txt: where a fast find's seconds go)
#              (FAST_TRAIN_ON overrides the networks the store is filled with, e.g.
#              vgg16:16,googlenet:32,mobilenet_v2:32,sweep:32)
#   train      benchmarks/bench_train.py (issue 13: a ResNet-50 training step vs PyTorch,
#              phase by phase, then every distinct convolution in each direction timed
#              alone on both sides: about 30 s more than the 78 s of 2026-11-23)
#   model      benchmarks/bench_model.py --results on the bench_*.json of the bench steps
#              run before it in the same call (issue 11: the cost model, leave-one-network-
#              out over this GPU's measurements); no GPU time of its own
#   sweep sweep_tf32  benchmarks/bench_gpu.py on tuner.networks' synthetic sweep (124 layers
#              between and around the networks' shapes, batch 32) in fp32 or tf32: training
#              rows for the cost model that no network holds out (issue 11), and our picks
#              against cuDNN on shapes no kernel was written for (issue 10); SWEEP_ARGS adds
#              bench_gpu options (the model's rows alone, cheaper: "--no-torch --warmup 1
#              --max-reps 10")
#   targets    benchmarks/issue10_targets.py on this call's bench_{fp32,tf32,fp16,small}.json:
#              issue 10's table, each target met or not (after those steps); then
#              benchmarks/compare_runs.py on each of its bench_*.json against the newest stored
#              run of that mode on this GPU (compare_<mode>.md: new configurations' status,
#              wins and failures, ours/cuDNN per layer in both runs)
#   fp32 tf32 fp16 bf16 bwd_data bwd_filter small small_tf32 small_fp16
#              benchmarks/bench_gpu.py in that mode (NETWORKS overrides the networks;
#              small* = GoogLeNet b32 and MobileNet-v2 b32, in fp32, tf32 or float16: the
#              cost model's only 1x1 layers in TF32 and float16 when ResNet-50 is held out)
# Each step's limit is T_<STEP> seconds (default 150; the tuner_* steps use T_TUNER); keep
# their sum inside the call's limit. Seen on an H100 (2026-11-23): tests 95-112 s, sanitize
# 100 s, fp32/tf32/fp16 about 40 s each, bwd_* 20 s each, small 51 s, tuner 53 s (more now
# that it re-measures twice), train 78 s, overhead over 110 s (give it 200). 2026-11-25:
# warm 12 s (234 instances, 16 processes), fp32/tf32/fp16 49 s each, and tests over 170 s
# with 8 workers (cut off at 97%, wgmma failing): give tests 240-300 s. 2026-11-27 (H100):
# warm 11 s (248 instances), tests with TESTS=tests/gpu and TESTS_K on the kernels and plans
# 72 s (795 tests), tf32 52 s, fp16 48 s, fp32 41 s, small 59 s, overhead 111 s, tuner 85 s,
# launch_cost 2 s; small_tf32 and small_fp16 were cut off at 75 s with 73 and 64 of 79
# layers done (give them 110 s), and tuner_fast at 110 s had not finished fitting (give it
# 200 s). 2026-11-28 (counted on the CPU, not timed): the wgmma tiles since then offer
# 1.6-1.8x the candidates (FP32 ResNet-50 + VGG-16 1,156, GoogLeNet + MobileNet-v2 3,438):
# give fp32 90 s, tf32 80 s, small 120 s. Keep the limits' sum (sanitize counts twice, one
# limit per tool) under the call's: logs are packed last.
#
# The GPU image has CuPy, PyTorch, numpy, scipy and pytest but not SQLAlchemy or platformdirs;
# bring them as wheels (on the machine with network, from the repository root):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     --platform manylinux_2_28_x86_64 -d .whl sqlalchemy greenlet platformdirs
# and name .whl in the device tool's `carry`.
set -uo pipefail
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(smoke warm tests sanitize fp32)
OUT=${OUT:-gpu_out}
# The logs are kept outside $OUT and packed into it after each step: a call cut off at its
# limit then returns the steps that ended, not the first 8 of many loose files.
LOG_ROOT=$(mktemp -d "${TMPDIR:-/tmp}/convtune_session.XXXXXX")
LOG="$LOG_ROOT/logs"
mkdir -p "$LOG" "$OUT"
pack() {  # the logs so far into $OUT/logs.tgz, replaced whole (a cut-off tar leaves the last)
    local part="$LOG_ROOT/logs.tgz.$BASHPID"  # outside $OUT: a cut-off leaves no stray file
    tar czf "$part" -C "$LOG_ROOT" logs 2>/dev/null && mv -f "$part" "$OUT/logs.tgz"
}
# DEADLINE_S: the seconds this call may take in all (the device tool's timeout_s less 20;
# 0: none). Each step's limit shrinks to what is left before it, a step with under 20 s
# left is skipped, and the logs are packed every 30 s besides after each step, so a call
# cut off mid-step still returns that step's log so far (the limits' sum of a planned call
# had come to 720 s against a 600 s call: a review of the benchmarks, 2026-11-30).
DEADLINE_S=${DEADLINE_S:-0}
if (( DEADLINE_S > 0 )); then
    # Its output to /dev/null: a background job holding the call's stdout would keep the
    # call from ending until its sleep did.
    ( while sleep 30; do pack; done ) > /dev/null 2>&1 &
    PACKER=$!
    trap 'kill "$PACKER" 2>/dev/null' EXIT
fi
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH="/tmp/site:$PWD"
fi
export CONVTUNE_DB_URL="sqlite:///$LOG/convtune.db"
{
    date -u; nvidia-smi; nvcc --version
    python3 -c "import cupy, numpy, torch; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'cudnn', torch.backends.cudnn.version())"
} > "$LOG/env.log" 2>&1
rc=0 last=0
limit() {  # limit STEP: that step's time limit in seconds, within DEADLINE_S if set
    local var="T_${1^^}"
    local seconds=${!var:-150}
    if (( DEADLINE_S > 0 && DEADLINE_S - SECONDS - 10 < seconds )); then
        seconds=$((DEADLINE_S - SECONDS - 10))
    fi
    echo "$seconds"
}
run() {  # run STEP LOGNAME COMMAND...: the command under the step's limit, output to a log
    local step=$1 name=$2; shift 2
    local began=$SECONDS status=0 seconds
    seconds=$(limit "$step")
    if (( seconds < 20 )); then
        echo "== $name: skipped, $seconds s left before DEADLINE_S" | tee "$LOG/$name.log"
        rc=124 last=124
        return 0
    fi
    timeout -k 5 "$seconds" "$@" > "$LOG/$name.log" 2>&1 || status=$?
    echo "== $name: exit $status, $((SECONDS - began)) s"
    [[ $status -ne 0 ]] && rc=$status
    last=$status
    return 0
}
bench() {  # bench STEP NETWORKS ARGS...: bench_gpu in one mode
    local step=$1 networks=$2; shift 2
    run "$step" "bench_$step" python3 benchmarks/bench_gpu.py --networks "${NETWORKS:-$networks}" \
        --out "$LOG/bench_$step.json" "$@"
    tail -n 45 "$LOG/bench_$step.log"
}
# The host checks of the CUDA backend, run beside tests/gpu where CuPy is real.
HOST_CHECKS="tests/test_cuda_loader.py tests/test_cuda_fft_layout.py tests/test_cuda_workspaces.py
    tests/test_cuda_launch_limits.py tests/test_cuda_work.py tests/test_cuda_tf32_copies.py
    tests/test_cublas_calls.py"
# Small shapes only under the sanitizers: they slow kernels down by 10-100x.
SAN_K="odd or groups4 or dilation_stride or depthwise_s2 or element_aligned or holes_1x1_s2 or vector_fills"
for step in "${steps[@]}"; do
    case $step in
    smoke)
        # Seconds: every CuPy name and call of ours against this CuPy (a finding is printed
        # and counts in the call's status, but only the smoke check below stops the call).
        run smoke cupy_surface python3 benchmarks/check_cupy_surface.py
        tail -n 20 "$LOG/cupy_surface.log"
        run smoke smoke python3 benchmarks/gpu_smoke.py --device cuda
        cat "$LOG/smoke.log"
        if [[ $last -ne 0 && ${SMOKE_STOPS:-1} != 0 ]]; then
            echo "== smoke failed: the remaining steps are skipped"
            break
        fi ;;
    warm)
        run warm warm python3 benchmarks/warm_kernels.py
        tail -n 5 "$LOG/warm.log" ;;
    sass)
        # Default: the depthwise and direct fills (stage_shared) and the NHWC transpose.
        kernels=${SASS_KERNELS:-"depthwise.cu:depthwise_conv<float, 32, 8, 2, 3, 3>;direct.cu:direct_conv<float, 16, 16, 8>;rearrange.cu:transpose<unsigned int, 0>"}
        IFS=';' read -ra items <<< "$kernels"
        for item in "${items[@]}"; do
            file=${item%%:*} name=${item#*:}
            tag=$(echo "$name" | tr -c 'A-Za-z0-9' '_')
            printf '#include "%s"\nvoid* keep[] = { (void*)&%s };\n' "$file" "$name" > "/tmp/$tag.cu"
            run sass "sass_$tag" bash -c "nvcc -std=c++17 -arch=sm_90 -I kernels -cubin \
                -o /tmp/$tag.cubin /tmp/$tag.cu && cuobjdump -sass /tmp/$tag.cubin"
        done ;;
    tests)
        # shellcheck disable=SC2086  # TESTS is a list of test paths
        # -v: each result is logged as it comes (one line per test, "[gwN] ... FAILED
        # name"), so a run cut off by its limit still names its failures.
        run tests gpu_tests python3 -m pytest -v -p no:cacheprovider -n "${JOBS:-12}" \
            ${TESTS_K:+-k "$TESTS_K"} \
            ${TESTS:-tests/test_kernels_compile.py $HOST_CHECKS tests/gpu}
        grep -E "(FAILED|ERROR) |^(FAILED|ERROR)|[0-9]+ (passed|failed)" "$LOG/gpu_tests.log" \
            | sort -u | tail -n 60 ;;
    sanitize)
        for tool in memcheck racecheck; do
            # wgmma under the sanitizers through its own file only: since bb7b625 the two
            # generic files' selection held 108 wgmma tests, each over every wgmma tile,
            # where racecheck was cut off at 140 s already (NOTES-gpu.md, 2026-11-29). The
            # generic files' wgmma tests run in `tests`.
            run sanitize "$tool" compute-sanitizer --tool "$tool" --error-exitcode 99 \
                python3 -m pytest -q -x -p no:cacheprovider \
                -k "($SAN_K and not k130) and (not implicit_gemm_wgmma or test_implicit_gemm_wgmma)" \
                tests/gpu/test_cuda_algorithms.py tests/gpu/test_cuda_backward.py \
                tests/gpu/test_winograd.py tests/gpu/test_depthwise.py \
                tests/gpu/test_implicit_gemm_tc.py tests/gpu/test_implicit_gemm_wgmma.py
            tail -n 6 "$LOG/$tool.log"
        done ;;
    overhead)
        run overhead overhead python3 benchmarks/bench_overhead.py --device cuda \
            --seconds 1 --out "$LOG/overhead.json"
        tail -n 30 "$LOG/overhead.log" ;;
    host)
        run host host_path python3 benchmarks/bench_host_path.py --device cuda:0 \
            --out "$LOG/host_path.json"
        tail -n 80 "$LOG/host_path.log"
        if [ -n "${HOST_LAYER:-}" ]; then  # e.g. resnet50:res5.1x1a.rest, with HOST_MATH
            run host host_path_layer python3 benchmarks/bench_host_path.py --device cuda:0 \
                --layer "$HOST_LAYER" --math "${HOST_MATH:-fp32}" \
                --out "$LOG/host_path_layer.json"
            tail -n 80 "$LOG/host_path_layer.log"
        fi ;;
    host_drift)
        run host_drift host_drift python3 benchmarks/host_drift.py --device cuda:0 \
            --seconds "${DRIFT_S:-60}" --out "$LOG/host_drift.json"
        tail -n 16 "$LOG/host_drift.log" ;;
    call_path)
        run call_path call_path python3 benchmarks/bench_call_path.py --device cuda \
            --out "$LOG/call_path.json"
        tail -n 16 "$LOG/call_path.log" ;;
    host_profile)
        run host_profile host_profile python3 benchmarks/profile_host.py --device cuda
        tail -n 130 "$LOG/host_profile.log" ;;
    launch_cost)
        run launch_cost launch_cost python3 benchmarks/bench_launch_cost.py \
            --out "$LOG/launch_cost.json"
        tail -n 12 "$LOG/launch_cost.log" ;;
    gemm_algos)
        run gemm_algos gemm_algos python3 benchmarks/bench_gemm_algos.py \
            --out "$LOG/gemm_algos.json"
        tail -n 70 "$LOG/gemm_algos.log" ;;
    profile)
        sections=(--section SpeedOfLight --section LaunchStats --section Occupancy
                  --section WarpStateStats --section ComputeWorkloadAnalysis
                  --section MemoryWorkloadAnalysis)
        metrics=${NCU_METRICS-regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio}
        cases=${PROFILE_CASES:-$(python3 benchmarks/profile_kernels.py --list | cut -d: -f1)}
        for case in ${cases//,/ }; do
            ncu=(ncu --profile-from-start off --clock-control none --csv --page details
                 "${sections[@]}")
            run profile "ncu_$case" "${ncu[@]}" ${metrics:+--metrics "$metrics"} \
                python3 benchmarks/profile_kernels.py --cases "$case"
            if grep -q "==ERROR==" "$LOG/ncu_$case.log" && [[ -n $metrics ]]; then
                run profile "ncu_$case" "${ncu[@]}" python3 benchmarks/profile_kernels.py \
                    --cases "$case"  # without the stall metrics, in case ncu refused them
            fi
            grep "^case " "$LOG/ncu_$case.log"
        done
        python3 benchmarks/ncu_summary.py "$LOG"/ncu_*.log > "$LOG/profile.md"
        cat "$LOG/profile.md" ;;
    tuner|tuner_unbatched)
        # tuner_unbatched: samples batch back-to-back runs only below 50 us (default 0.5 ms),
        # so that kernels of 0.05-0.5 ms are timed one L2-flushed run at a time.
        batch_below=$([[ $step == tuner ]] && echo "${CONVTUNE_BATCH_BELOW_MS:-0.5}" || echo 0.05)
        CONVTUNE_BATCH_BELOW_MS=$batch_below run tuner "$step" python3 benchmarks/bench_tuner.py \
            --device cuda:0 --model resnet50 --batch 32 --iso-budget-s 0.1 --out "$LOG/$step.json" \
            ${ISO_HERE:+--iso-here} ${ISO_DEVICE:+--iso-device} \
            ${TUNER_PROFILE:+--profile "$LOG/${step}_profile.txt"}
        tail -n 28 "$LOG/$step.log" ;;
    startup)
        run startup startup python3 benchmarks/bench_startup.py --device cuda:0 --rounds 5 \
            --out "$LOG/startup.json"
        tail -n 8 "$LOG/startup.log" ;;
    cold)
        run cold cold python3 benchmarks/bench_cold_tune.py --device cuda:0 --model resnet50 \
            --batch 32 --out "$LOG/cold.json"
        tail -n 8 "$LOG/cold.log" ;;
    tuner_more)
        for spec in vgg16:16 mobilenet_v2:32; do
            model=${spec%%:*}
            run tuner "tuner_$model" python3 benchmarks/bench_tuner.py --device cuda:0 \
                --model "$model" --batch "${spec#*:}" --iso-budget-s 0.1 \
                --out "$LOG/tuner_$model.json" ${ISO_HERE:+--iso-here} ${ISO_DEVICE:+--iso-device}
            tail -n 10 "$LOG/tuner_$model.log"
        done ;;
    tuner_fast)
        run tuner tuner_fast python3 benchmarks/bench_tuner.py --device cuda:0 --model resnet50 \
            --batch 32 --iso-budget-s 0.1 --mode fast --saved-model \
            --train-on "${FAST_TRAIN_ON:-vgg16:16,googlenet:32,mobilenet_v2:32}" \
            --out "$LOG/tuner_fast.json" \
            --profile "$LOG/tuner_fast_profile.txt" ${ISO_HERE:+--iso-here} ${ISO_DEVICE:+--iso-device}
        tail -n 29 "$LOG/tuner_fast.log" ;;
    train)
        run train train python3 benchmarks/bench_train.py --device cuda --seconds 5
        tail -n 15 "$LOG/train.log" ;;
    model)
        results=()
        for mode in fp32 tf32 fp16 bf16 small small_tf32 small_fp16 sweep sweep_tf32; do
            [[ -f "$LOG/bench_$mode.json" ]] && results+=("$LOG/bench_$mode.json")
        done
        if [[ ${#results[@]} -eq 0 ]]; then
            echo "model: run it after bench steps (fp32 tf32 fp16 small) in the same call" >&2
            rc=2
        else
            run model model python3 benchmarks/bench_model.py --results "${results[@]}" \
                --out "$LOG/model.json"
            tail -n 14 "$LOG/model.log"
        fi ;;
    fp32) bench fp32 resnet50:32,vgg16:16 --math fp32 ;;
    tf32) bench tf32 resnet50:32,vgg16:16 --math tf32 ;;
    fp16) bench fp16 resnet50:32,vgg16:16 --dtype float16 ;;
    bf16) bench bf16 resnet50:32 --dtype bfloat16 ;;
    bwd_data) bench bwd_data resnet50:32 --direction backward_data ;;
    bwd_filter) bench bwd_filter resnet50:32 --direction backward_filter ;;
    small) bench small googlenet:32,mobilenet_v2:32 --math fp32 ;;
    small_tf32) bench small_tf32 googlenet:32,mobilenet_v2:32 --math tf32 ;;
    small_fp16) bench small_fp16 googlenet:32,mobilenet_v2:32 --dtype float16 ;;
    # shellcheck disable=SC2086  # SWEEP_ARGS is a list of bench_gpu options
    sweep) bench sweep sweep:32 --math fp32 ${SWEEP_ARGS:-} ;;
    # shellcheck disable=SC2086
    sweep_tf32) bench sweep_tf32 sweep:32 --math tf32 ${SWEEP_ARGS:-} ;;
    targets)  # issue 10's table from this call's bench_{fp32,tf32,fp16,small}.json
        found=()
        for mode in fp32 tf32 fp16 small; do
            [[ -f "$LOG/bench_$mode.json" ]] && found+=("$LOG/bench_$mode.json")
        done
        if [[ ${#found[@]} -gt 0 ]]; then
            run targets targets python3 benchmarks/issue10_targets.py "${found[@]}"
            cat "$LOG/targets.log"
        else
            echo "targets: no bench_fp32/tf32/fp16/small JSON in this call"
        fi
        # Every bench file of this call against the newest stored run of its mode on this
        # GPU: the configurations new since then, whether they pass, and what they won.
        for json in "$LOG"/bench_*.json; do
            [[ -f $json ]] || continue
            mode=$(basename "$json" .json)
            run targets "compare_${mode#bench_}" python3 benchmarks/compare_runs.py --latest \
                "$json" --out "$LOG/compare_${mode#bench_}.md"
            head -n 8 "$LOG/compare_${mode#bench_}.log"
        done ;;
    *) echo "unknown step: $step" >&2; rc=2 ;;
    esac
    pack
done
pack && rm -rf "$LOG_ROOT"
exit $rc
