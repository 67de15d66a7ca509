#!/usr/bin/env bash
# aotgrad on a GPU machine, in at most ~8 minutes: the CUDA tests (tests/test_cuda.py, marker
# `gpu`) and the demo by default; the GPU measurements by name.
#
#   bash benchmarks/gpu_check.sh                        # tests demo (from the repository root)
#   bash benchmarks/gpu_check.sh tests demo zoo ca ddp  # the steps named, in this order
#   bash benchmarks/gpu_check.sh --bench                # every step: tests demo ca ddp steps zoo
#   bash benchmarks/gpu_check.sh --zoo                  # tests demo zoo
#   bash benchmarks/gpu_check.sh profile                # where resnet18's and mobilenetv2's step go
#   bash benchmarks/gpu_check.sh ro                     # mode="reduce-overhead", static inputs on/off
#
# Steps: tests (the CUDA tests), demo, ca (compiled autograd with Inductor against eager's
# backward), ddp (2 and 4 gloo ranks on the CPU cores), steps (inductor against
# aotgrad_inductor, small models), zoo (four zoo models in bf16, inductor against
# aotgrad_inductor), profile (torch.profiler on resnet18 and mobilenetv2 in bf16, inductor against
# aotgrad_inductor: kernels, syncs, copies and top ops per step), ro (torch.compile's
# mode="reduce-overhead": inductor, aotgrad_inductor, and aotgrad_inductor without telling Inductor
# its static inputs, on resnet18 and gpt2). PYTHON=... picks the interpreter.
#
# Written for the measured machines (torch 2.11 + CUDA, no network, nothing to install): aotgrad
# is imported from this checkout through PYTHONPATH. Each step's output goes to the terminal and
# to a file under "$OUT" (out/gpu_check when OUT is unset); summary.txt has one line per step.
# Exit status: 0 when every step passed.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python}"
RESULTS="${OUT:-$PWD/out/gpu_check}"
mkdir -p "$RESULTS"
: > "$RESULTS/summary.txt"
failed=0

step() {  # step NAME SECONDS COMMAND...: run with a time limit, keep its output and status
    local name=$1 limit=$2
    shift 2
    echo "== $name: $*"
    local start=$SECONDS
    timeout "$limit" "$@" > >(tee "$RESULTS/$name.txt") 2>&1
    local status=$?
    wait  # let tee finish writing
    echo "$name: exit $status after $((SECONDS - start)) s" | tee -a "$RESULTS/summary.txt"
    [ "$status" -eq 0 ] || failed=1
}

case "${1:-}" in
    "") set -- tests demo ;;
    --bench) set -- tests demo ca ddp steps zoo ;;
    --zoo) set -- tests demo zoo ;;
esac
for name in "$@"; do  # every name checked before anything runs
    case "$name" in
    tests|demo|ca|ddp|steps|zoo|profile|ro) ;;
    *) echo "unknown step '$name' (steps: tests demo ca ddp steps zoo profile ro; or --bench, --zoo)" >&2; exit 2 ;;
    esac
done

step environment 60 "$PY" -c "
import sys, torch, aotgrad
print('python', sys.version.split()[0], '| torch', torch.__version__, '| cuda', torch.version.cuda,
      '| available', torch.cuda.is_available())
if torch.cuda.is_available():
    print('device', torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))
print('aotgrad from', aotgrad.__file__)"

for name in "$@"; do
    case "$name" in
    tests)  # -rs prints the reason of any skip (on a machine without a usable GPU every test skips)
        # (three xdist workers where pytest-xdist is installed: 82 s on an H200 with torch 2.11)
        workers=$("$PY" -c "import xdist" 2>/dev/null && echo "-n 3")
        step test_cuda 360 "$PY" -m pytest -q -rs -p no:cacheprovider -m gpu $workers tests/test_cuda.py ;;
    demo)
        step demo 120 "$PY" -m aotgrad demo ;;
    ca)  # compiled autograd with Inductor against eager's backward, on the GPU
        step ca_cuda 150 "$PY" benchmarks/compiled_autograd.py --device cuda --models mlp,cnn,gpt --iters 10 --rounds 3 ;;
    ddp)  # DDP splitting with gloo ranks on the CPU cores (more cores than ranks: all-reduce can overlap)
        step ddp_2 100 "$PY" benchmarks/ddp.py --ranks 2 --layers 8 --width 1024 --batch 64 --bucket-mb 4 --steps 10 --rounds 3 --timeout 95
        step ddp_4 100 "$PY" benchmarks/ddp.py --ranks 4 --layers 8 --width 1024 --batch 64 --bucket-mb 4 --steps 10 --rounds 3 --timeout 95 ;;
    steps)  # inductor against aotgrad_inductor, training steps on the GPU
        step step_cuda 150 "$PY" benchmarks/compile_and_step.py --device cuda --models mlp,cnn,gpt --iters 20 --rounds 2 --warmup 2 --compile-repeats 1 --markdown ;;
    zoo)  # issue 23: two transformers and two timm models in bf16 (a missing library: a skipped row); 209 s on an
        # H100 (session 16), ~300 s on an H200 (session 22: mobilenetv2's cold compiles are ~55 s each)
        step zoo_cuda 360 "$PY" benchmarks/zoo.py --device cuda --variant bf16 --backends inductor,aotgrad_inductor \
            --models gpt2,bert,resnet18,mobilenetv2 --steps 3 --rounds 3 --iters 5 --markdown --json "$RESULTS/zoo_cuda.json" ;;
    profile)  # issue 23: why the CNNs' CUDA steps are slower under aotgrad_inductor
        step profile_resnet18 200 "$PY" benchmarks/zoo_profile.py --model resnet18 --device cuda --variant bf16 --python-top 30
        step profile_mobilenetv2 200 "$PY" benchmarks/zoo_profile.py --model mobilenetv2 --device cuda --variant bf16 --python-top 30 ;;
    ro)  # CUDA graphs: parameters and saved values as Inductor's static inputs, or copied at each replay
        step reduce_overhead 180 "$PY" benchmarks/reduce_overhead.py --device cuda --models resnet18,gpt2 --iters 20 ;;
    esac
done

echo "results in $RESULTS"
exit $failed
