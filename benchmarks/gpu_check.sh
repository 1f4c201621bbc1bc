#!/usr/bin/env bash
# The GPU check of --model.compile_mode cudagraphs, in one run of at most 9.5 minutes (570 s) on one H100 or H200:
#
#   bash benchmarks/gpu_check.sh        # results in $OUT (the device tool's folder) or ./gpu_check
#
# 1. tests: tests/test_captured_update.py with CUDA (the captured update follows eager over 100 steps; a captured
#    fit resumed from last.ckpt equals an uninterrupted one), besides its CPU tests;
# 2. lunar: benchmarks/throughput.py --device cuda: LunarLander-v3, 256-256, batch 256, one update per env step:
#    td3_lightning eager, compile_mode reduce-overhead, compile_mode cudagraphs, and the plain PyTorch loop;
# 3. car, walker2d, td7: car.yaml, walker2d.yaml and halfcheetah_td7.yaml (the TD7 set) for 2000 training steps
#    each, eager against cudagraphs; td7_official: with a checkout of github.com/sfujim/TD7 in .td7/ (ignored by git;
#    carry it), the official TD7 code on HalfCheetah-v5 (benchmarks/td7_official.py).
# Each part has its own time limit; one that fails is reported in the summary and the next one runs. The summary
# (markdown, for benchmarks/README.md) is printed at the end and kept in summary.md beside each part's output.
# On a machine without td3_lightning's dependencies (the device image has torch and Lightning, not gymnasium,
# Box2D, MuJoCo or jsonargparse): run benchmarks/gpu_wheels.sh here first and carry .whl; they are installed
# into /tmp/site below.
set -u
cd "$(dirname "$0")/.."
site=""
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "error: installing .whl/ failed; rerun benchmarks/gpu_wheels.sh" >&2; exit 2; }
    site=/tmp/site
fi
export PYTHONPATH="$PWD${site:+:$site}${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MUJOCO_GL=disable
python3 -c 'import torch, sys; torch.cuda.is_available() or sys.exit("error: benchmarks/gpu_check.sh needs a CUDA device; torch sees none")' || exit 2
out="${OUT:-gpu_check}"
mkdir -p "$out"

summary="$out/summary.md"
{
    echo "## GPU check of compile_mode cudagraphs (commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown))"
    echo
    python3 -c 'import torch, lightning; print(f"{torch.cuda.get_device_name()}, {torch.get_num_threads()} CPU threads, torch {torch.__version__} (CUDA {torch.version.cuda}), Lightning {lightning.__version__}")'
    echo
} > "$summary"

part() {  # part NAME LIMIT_SECONDS COMMAND...: run it, add its markdown (stdout) or its failure to the summary
    local name=$1 limit=$2 start=$SECONDS rc
    shift 2
    # the whole check stays under the device tool's 600 s per command (wheels installed first)
    if [ "$limit" -gt $((570 - SECONDS)) ]; then limit=$((570 - SECONDS)); fi
    if [ "$limit" -le 10 ]; then echo "### $name: skipped, no time left" >> "$summary"; return; fi
    echo "== $name (at most $limit s): $*" >&2
    timeout "$limit" "$@" > "$out/$name.out" 2> "$out/$name.err"
    rc=$?
    {
        echo "### $name: exit $rc after $((SECONDS - start)) s"
        echo
        echo "\`$*\`"
        if [ "$rc" -ne 0 ]; then
            echo
            echo '```'
            tail -n 15 "$out/$name.err"
            echo '```'
        fi
        echo
        tail -n 40 "$out/$name.out"
        echo
    } >> "$summary"
}

part tests 120 python3 -m pytest -q -rs -p no:cacheprovider tests/test_captured_update.py
part lunar 180 python3 benchmarks/throughput.py --device cuda --steps 3000 --repeats 1 --skip sb3
part car 100 python3 benchmarks/throughput.py --device cuda --configs car --config-steps 2000 --repeats 1
part walker2d 100 python3 benchmarks/throughput.py --device cuda --configs walker2d --config-steps 2000 --repeats 1
part td7 120 python3 benchmarks/throughput.py --device cuda --configs halfcheetah_td7 --config-steps 2000 --repeats 1
if [ -d .td7 ]; then  # a checkout of github.com/sfujim/TD7 carried here: the official code on the same device
    part td7_official 90 python3 benchmarks/td7_official.py --td7 .td7 --env HalfCheetah-v5 --steps 2000 --warmup 1000
fi
cat "$summary"
