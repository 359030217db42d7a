#!/usr/bin/env bash
# What a machine with a CUDA GPU adds to the CPU checks, in one run (about 7 minutes on an H100/H200):
#
#   bash benchmarks/gpu_check.sh                   # logs and tables under runs/gpu-check (or $OUT)
#   PYTHON=.venv/bin/python bash benchmarks/gpu_check.sh
#
# 1. The GPU columns of the benchmarks, each against its peer in the same process: pre-training steps
#    (attnlab vs HF BertForPreTraining, bf16 autocast, benchmarks/pretraining.py), encoder inference
#    (vs HF BertModel, float32 and bfloat16, benchmarks/encoder_inference.py) and generation (vs HF
#    GPT2LMHeadModel.generate, float32, benchmarks/generation.py).
# 2. The default test suite with the GPU visible: every test that trains through the Trainer or the CLI
#    with the default device ("auto") runs on cuda:0 there, bf16/fp16 autocast and the fp16 GradScaler
#    included, and the tests that skip without a GPU run (tests/test_pipelines.py::test_gpu_matches_cpu).
#    Needs pytest-xdist for -n (set JOBS=0 to run serially).
#
# Each part has its own time limit so that one that hangs cannot take the others with it; the summary of
# each is printed last. Nothing here is timed inside a test: the tables are printed, not asserted.
set -u
PY=${PYTHON:-python3}
OUT=${OUT:-runs/gpu-check}
JOBS=${JOBS:-8}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    "$PY" -c "import torch, transformers; print('torch', torch.__version__, '| transformers', transformers.__version__, '|', torch.cuda.get_device_name())"
    nproc
} 2>&1 | tee "$OUT/env.txt"

part() {  # part NAME SECONDS COMMAND...: run with a time limit, log to $OUT/NAME.log
    local name=$1 limit=$2
    shift 2
    echo "== $name: $*"
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    echo "   exit $? ($name)"
}

part pretraining 120 "$PY" benchmarks/pretraining.py --device cuda --skip-prep --presets bert-mini,bert-base-uncased --steps 20 --warmup 3
part encoder_inference 90 "$PY" benchmarks/encoder_inference.py --device cuda --preset bert-base-uncased --batch-sizes 1,32 --seq-lens 128,512
part generation 100 "$PY" benchmarks/generation.py --device cuda --presets gpt-bpe-small,gpt2 --new-tokens 128 --batch-sizes 1,8 --repeats 3 --skip-uncached
if [ "$JOBS" -gt 0 ]; then xdist=(-n "$JOBS"); else xdist=(); fi
# two threads a worker: 8 workers of torch's default (all cores) each oversubscribe the CPU, and a test that
# plans its steps from measured speed (tests/test_translation_plan.py) then plans too few
part tests 300 env OMP_NUM_THREADS="${TEST_THREADS:-2}" "$PY" -m pytest -q -rfE --timeout 200 "${xdist[@]}"

for f in pretraining encoder_inference generation; do
    echo "---- $f"
    grep -v "^\s*$" "$OUT/$f.log" | tail -n 14
done
echo "---- tests"
grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.log" | tail -n 40
