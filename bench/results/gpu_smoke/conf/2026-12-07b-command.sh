# The second device session of 2026-12-07 (1,180 s of device time left): pi05 on `local` detached, to be
# followed by `scripts/device-wait` calls, and meanwhile on `et151` (PyPI's executorch 1.5.1) the rows issue 32
# asks about that had not run with it: repro row 4 (scatter), the grouped_mm repro and vqbet (detach_copy,
# multinomial). Carried: .whlc and .whlet (see 2026-12-07-short-command.sh). Ran on an H100 (10:22-10:37 UTC),
# followed by one `scripts/device-wait 440` call: pi05 ❌ sdpa_bf16_only; both repros lowered on et151; vqbet did
# not run (it is not in matrix gpu_smoke's policies, so the selection dropped it).
#   run(command="bash bench/results/gpu_smoke/conf/2026-12-07b-command.sh", carry=[".whlc", ".whlet"])
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo h200 || echo h100)
echo "gpu: $gpu"
mkdir -p /tmp/w12 /tmp/w151 "$OUT/et151" "$OUT/pi05"
cp .whlc/*.whl /tmp/w12/ && cp .whlc/*.whl /tmp/w151/
cp .whlet/executorch-1.2.0*.whl /tmp/w12/ && cp .whlet/executorch-1.5.1*.whl /tmp/w151/
scripts/offline-env /tmp/w12 true
WHEELS=/tmp/w12 scripts/device-detach sweep matrix=gpu_smoke "matrix.gpus=[$gpu]" exporter=executorch_cuda \
  policy=pi05 launcher.parallel=1
EXPORT_MATRIX_SITE=/tmp/site151 WHEELS=/tmp/w151 OUT=$OUT/et151 DEVICE_OUT_DIR=/tmp/gm151 DEVICE_CKPT_DIR=/tmp/ck4 \
  scripts/device-call 470 sweep --config-dir bench/results/gpu_smoke/conf matrix=gpu_smoke "matrix.gpus=[$gpu]" \
  'matrix.torch=[et151]' exporter=executorch_cuda \
  policy=repro_scatter_value_deterministic,repro_grouped_mm_bf16,vqbet launcher.parallel=1 \
  > "$OUT/et151/sweep.log" 2>&1
tail -n 8 "$OUT/et151/sweep.log"
for log in /tmp/gm151/cells/*/*/*/export.log; do echo "== $log"; grep -a "Exported policy\|^error\|Error" "$log" | tail -n 6 | cut -c1-400; done
OUT=$OUT/pi05 scripts/device-wait $((565 - SECONDS))
