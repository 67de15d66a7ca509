#!/usr/bin/env bash
# Every compiled-autograd test under every compiler (`-m compilers`: aotgrad, aotgrad_inductor and
# inductor beyond the default identity and eager; tests/compiled_autograd/helpers.py), sharded
# over the machine's cores: one pytest process per shard (AOTGRAD_TEST_SHARD, tests/conftest.py),
# one intra-op thread and one Inductor compile thread each.
#
#   bash benchmarks/compiler_matrix.sh [SHARDS]     # default: cores - 2
#   SHARD_TIMEOUT=480 bash benchmarks/compiler_matrix.sh 14   # each shard stopped after 480 s
#
# Each shard's output goes to "$OUT"/matrix (out/compiler_matrix when OUT is unset);
# summary.txt has each shard's last line and every failure. Exit status 0 when all pass.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=1 TORCHINDUCTOR_COMPILE_THREADS=1
PY="${PYTHON:-python}"
SHARDS="${1:-$(( $(nproc) > 3 ? $(nproc) - 2 : 1 ))}"
RESULTS="${OUT:-$PWD/out/compiler_matrix}"
mkdir -p "$RESULTS"
"$PY" -c "import sys, torch; print('python', sys.version.split()[0], '| torch', torch.__version__, '| shards', $SHARDS)" \
    | tee "$RESULTS/summary.txt"
for ((i = 0; i < SHARDS; i++)); do
    AOTGRAD_TEST_SHARD="$i/$SHARDS" timeout "${SHARD_TIMEOUT:-0}" "$PY" -m pytest -q -rf -p no:cacheprovider -m compilers tests/compiled_autograd \
        > "$RESULTS/shard_$i.txt" 2>&1 &
done
wait
status=0
for ((i = 0; i < SHARDS; i++)); do
    echo "shard $i: $(tail -n 1 "$RESULTS/shard_$i.txt")" | tee -a "$RESULTS/summary.txt"
    grep -E "^(FAILED|ERROR) " "$RESULTS/shard_$i.txt" | tee -a "$RESULTS/summary.txt"
    tail -n 1 "$RESULTS/shard_$i.txt" | grep -qE " passed" || status=1
    tail -n 1 "$RESULTS/shard_$i.txt" | grep -qE "failed|error" && status=1
done
exit $status
