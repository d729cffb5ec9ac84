# A device call of 2026-12-07, made while the first one's detached pi05 runs: act and tdmpc on the et151 build
# (the device's torch 2.11.0 with PyPI's executorch 1.5.1, carried as .whl151: scripts/download-wheels' set with
# executorch-1.5.1 in place of 1.2.0), installed into a site folder of its own so the running sweep's is untouched.
# The check reads ExecuTorch 1.5's per-weight layout (aoti_runner.FqnAotiMethod). Not run (no machine on 2026-12-07);
# 2026-12-07-short-command.sh does the same with less carried.
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo h200 || echo h100)
mkdir -p "$OUT/et151"
EXPORT_MATRIX_SITE=/tmp/site151 WHEELS=.whl151 OUT=$OUT/et151 DEVICE_OUT_DIR=/tmp/gm151 DEVICE_CKPT_DIR=/tmp/ck4 \
  scripts/device-call 420 sweep --config-dir bench/results/gpu_smoke/conf matrix=gpu_smoke "matrix.gpus=[$gpu]" \
  'matrix.torch=[et151]' exporter=executorch_cuda policy=act,tdmpc launcher.parallel=2 > "$OUT/et151/sweep.log" 2>&1
tail -n 8 "$OUT/et151/sweep.log"
for log in /tmp/gm151/cells/*/*/*/export.log; do echo "== $log"; grep -a "Exported policy\|error" "$log" | tail -n 4; done
scripts/device-wait 60
