# The device session of 2026-12-07 (fourth work session, 1,800 s of device time): pi0 on `local` detached
# (issue 32 item 1), to be followed by `scripts/device-wait` calls within the machine's warm time, and meanwhile
# vqbet on `et151` (PyPI's executorch 1.5.1: do detach_copy and multinomial still fail?). Carried: .whlc and
# .whlet (see 2026-12-07-short-command.sh).
#   run(command="bash bench/results/gpu_smoke/conf/2026-12-07c-command.sh", carry=[".whlc", ".whlet"])
# Ran on an H100 (the first tries found no machine), 585 s; then `OUT=$OUT/pi0 scripts/device-wait 560` (80 s):
# pi0 ❌ sdpa_bf16_only (export 489 s), vqbet on et151 ❌ detach_copy + multinomial. A third call timed act on
# et151 alone (the earlier run had compiled beside three other cells), 158 s:
#   EXPORT_MATRIX_SITE=/tmp/site151 WHEELS=/tmp/w151 OUT=$OUT/et151 DEVICE_OUT_DIR=/tmp/gm151 DEVICE_CKPT_DIR=/tmp/ck4 \
#     scripts/device-call 420 sweep --config-dir bench/results/gpu_smoke/conf matrix=gpu_smoke "matrix.gpus=[h100]" \
#     'matrix.torch=[et151]' exporter=executorch_cuda policy=act launcher.parallel=1
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo h200 || echo h100)
echo "gpu: $gpu"
mkdir -p /tmp/w12 /tmp/w151 "$OUT/et151" "$OUT/pi0"
cp .whlc/*.whl /tmp/w12/ && cp .whlc/*.whl /tmp/w151/
cp .whlet/executorch-1.2.0*.whl /tmp/w12/ && cp .whlet/executorch-1.5.1*.whl /tmp/w151/
scripts/offline-env /tmp/w12 true
WHEELS=/tmp/w12 scripts/device-detach sweep matrix=gpu_smoke "matrix.gpus=[$gpu]" exporter=executorch_cuda \
  policy=pi0 launcher.parallel=1
EXPORT_MATRIX_SITE=/tmp/site151 WHEELS=/tmp/w151 OUT=$OUT/et151 DEVICE_OUT_DIR=/tmp/gm151 DEVICE_CKPT_DIR=/tmp/ck4 \
  scripts/device-call 400 sweep --config-dir bench/results/gpu_smoke/conf matrix=gpu_smoke "matrix.gpus=[$gpu]" \
  'matrix.torch=[et151]' 'matrix.policies=[vqbet]' exporter=executorch_cuda launcher.parallel=1 \
  > "$OUT/et151/sweep.log" 2>&1
tail -n 8 "$OUT/et151/sweep.log"
for log in /tmp/gm151/cells/*/*/*/export.log; do echo "== $log"; grep -a "Exported policy\|^error\|Error" "$log" | tail -n 6 | cut -c1-400; done
OUT=$OUT/pi0 scripts/device-wait $((585 - SECONDS))
