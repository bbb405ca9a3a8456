#!/usr/bin/env bash
# The checks that need a real CUDA GPU, in one run that fits in 8 minutes, ending with one table:
#   1. accel-cuda's tests marked `gpu` (tests/accel_cuda, the real-device ones; fast ones first, then slow);
#   2. the GPU rows of the benchmarks (benchmarks/device_rows.py): step overhead with bf16-mixed, 16-mixed
#      with loss scaling, FSDP on one device, and the async save with pinned staging.
# CI never runs it (it has no GPU). Usage, from anywhere:
#   benchmarks/device_check.sh [--dry-run] [--python PY] [--out DIR]
# --dry-run checks the arguments and the plan on a machine without a GPU (collects the tests, runs
# device_rows.py --dry-run) and exits 0; without it, a machine with no CUDA device exits 2 at once.
set -euo pipefail
cd "$(dirname "$0")/.."

dry=0
python="${PYTHON:-}"
out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) dry=1 ;;
        --python) python="${2:?--python needs a path}"; shift ;;
        --out) out="${2:?--out needs a directory}"; shift ;;
        -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "device_check: unknown argument '$1'. Usage: benchmarks/device_check.sh [--dry-run] [--python PY] [--out DIR]" >&2; exit 2 ;;
    esac
    shift
done
if [ -z "$python" ]; then
    if [ -x .venv/bin/python ]; then python=.venv/bin/python; else python=python3; fi
fi
out="${out:-$(mktemp -d -t torchplug-device-XXXXXX)}"
mkdir -p "$out"
export OMP_NUM_THREADS=1 TORCHPLUG_STRICT_PLUGINS=1

if ! "$python" -c "import torchplug_cuda" 2>/dev/null; then
    echo "device_check: accel-cuda is not installed for $python. Hint: $python -m pip install --no-deps -e ./packages/accel-cuda" >&2
    exit 2
fi
gpu=$("$python" -c "import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')")
if [ "$dry" -eq 1 ]; then
    echo "device_check --dry-run: GPU: ${gpu:-none}; python: $python; results would go to $out"
    "$python" -m pytest -p no:cacheprovider -q --collect-only -m gpu tests/accel_cuda | tail -1
    "$python" benchmarks/device_rows.py --dry-run
    exit 0
fi
if [ -z "$gpu" ]; then
    echo "device_check: no CUDA device here (torch.cuda.is_available() is False for $python). Run it on a machine with one NVIDIA GPU, or pass --dry-run." >&2
    exit 2
fi

status=0
row() { printf '%-44s %-8s %s\n' "$1" "$2" "$3"; }
# Each part has its own limit, so that the whole stays within 8 minutes.
run_tests() {  # $1: label, $2: marker expression, $3: seconds
    local log="$out/tests-$1.log" rc=0
    timeout "$3" "$python" -m pytest -p no:cacheprovider -q -m "$2" tests/accel_cuda -rs >"$log" 2>&1 || rc=$?
    local summary
    summary=$(grep -E "passed|failed|error|skipped|no tests ran" "$log" | tail -1)
    [ "$rc" -eq 124 ] && summary="timed out after $3 s"
    echo "$rc|${summary:-see $log}"  # (a subshell: the caller sets the status from the code)
}
fast=$(run_tests fast "gpu and not slow" 120)
slow=$(run_tests slow "gpu and slow" 120)
for result in "$fast" "$slow"; do
    code="${result%%|*}"
    if [ "$code" -ne 0 ] && [ "$code" -ne 5 ]; then status=1; fi  # 5: no test selected
done
rows_rc=0
timeout 210 "$python" benchmarks/device_rows.py --json "$out/rows.json" >"$out/rows.txt" 2>&1 || rows_rc=$?
[ "$rows_rc" -ne 0 ] && status=1

echo
echo "device check on $gpu ($(date -u +%Y-%m-%dT%H:%MZ)); logs in $out"
row "check" "result" "figures"
row "accel-cuda tests, gpu and not slow" "$([ "${fast%%|*}" -eq 0 ] || [ "${fast%%|*}" -eq 5 ] && echo ok || echo FAIL)" "${fast#*|}"
row "accel-cuda tests, gpu and slow" "$([ "${slow%%|*}" -eq 0 ] || [ "${slow%%|*}" -eq 5 ] && echo ok || echo FAIL)" "${slow#*|}"
if [ "$rows_rc" -eq 0 ]; then
    "$python" - "$out/rows.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
for name, r in doc["rows"].items():
    if name == "async-save":
        text = f"blocked {r['blocked_s'] * 1e3:.1f} ms vs sync save {r['sync_s'] * 1e3:.1f} ms ({r['ratio']:.1%})"
    else:
        text = f"{r['trainer_us']:.1f} µs/step vs raw {r['raw_us']:.1f} µs ({r['ratio']:.2f}x)"
    print(f"{'benchmark row ' + name:<44} {'ok':<8} {text}")
PY
else
    row "benchmark rows (device_rows.py)" "FAIL" "exit $rows_rc: see $out/rows.txt"
fi
exit "$status"
