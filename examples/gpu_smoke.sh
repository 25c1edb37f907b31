#!/usr/bin/env bash
# One-shot check of the agent's CUDA and NCCL paths on a GPU machine (a few minutes on one H200).
#   bash examples/gpu_smoke.sh [OUT_DIR]      # from the repo root; needs torch + torchvision
# Exercises: fp32 auto batch search, AMP (fp16 + GradScaler), bf16, the CUDA out-of-memory
# recovery of the search (via --max-memory), NCCL with one rank per GPU, and gloo on a GPU host.
# Exits non-zero on the first failure; prints a summary of every profile at the end.
set -euo pipefail
OUT=${1:-${OUT:-/tmp/srifty-gpu-smoke}}
PY=${PYTHON:-python}
mkdir -p "$OUT"
NGPU=$($PY -c "import torch; print(torch.cuda.device_count())")
echo "GPUs: $NGPU"

step() {
  echo "+ $*"
  local began=$SECONDS
  "$@"
  echo "  ($((SECONDS - began)) s)"
}

A="$PY -m profiler.agent"
step $A compute --model torchvision:resnet18 --input-shape 3,224,224 --batch-sizes auto --max-batch 512 \
  --device cuda -q --out "$OUT/r18_fp32_auto.json"
step $A compute --model torchvision:resnet50 --input-shape 3,224,224 --batch-sizes 32,128 --precision amp \
  --device cuda -q --out "$OUT/r50_amp.json"
step $A compute --model examples.tiny_model:build_transformer --input-shape 128,256 --batch-sizes 8,64 \
  --precision bf16 --device cuda -q --out "$OUT/tf_bf16.json"
# An 8 GB cap on the allocator: the search must meet (and recover from) real CUDA OOMs.
step $A compute --model torchvision:resnet50 --input-shape 3,224,224 --batch-sizes auto --max-memory 8GB \
  --max-batch 4096 --iters 5 --warmup 2 --device cuda -q --out "$OUT/r50_oom_search.json"
step $A comm --world-size "$NGPU" --backend nccl -q --out "$OUT/comm_nccl.json"
step $A comm --world-size 2 --backend gloo --sizes 1KB..16MB -q --out "$OUT/comm_gloo.json"
$A validate "$OUT"/*.json

$PY - "$OUT" <<'PYEOF'
import json, sys, pathlib
for path in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    doc = json.loads(path.read_text())
    print(f"== {path.name}: {doc['kind']}")
    if doc["kind"] == "compute":
        print(f"   device {doc['device']['name']} {doc['device']['precision']}, max_batch {doc['max_batch_size']}"
              f" (capped {doc.get('max_batch_capped')}), probes {[(p['batch_size'], p['fits']) for p in doc['batch_search']]}")
        for s in doc["samples"]:
            ph = s["phases"]
            print(f"   b={s['batch_size']:5d} fwd {ph['forward']['median_ms']:8.3f} bwd {ph['backward']['median_ms']:8.3f}"
                  f" opt {ph['optimizer']['median_ms']:7.3f} ms, peak {s['peak_memory_bytes'] / 2**30:6.2f} GiB,"
                  f" buckets {[round(b['ready_fraction'], 2) for b in s['buckets']]}")
        if doc.get("failed_samples"):
            print("   failed:", doc["failed_samples"])
    else:
        for s in doc["samples"][:: max(1, len(doc["samples"]) // 6)] + doc["samples"][-1:]:
            print(f"   {s['size_bytes']:>11d} B  {s['median_ms']:9.4f} ms  busbw {s['busbw_gbps']:8.2f} Gb/s")
PYEOF
