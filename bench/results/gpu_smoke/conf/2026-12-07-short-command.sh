# A device call of 2026-12-07 (ran on an H100, 09:59-10:05 UTC, with PI05=1): three sweeps at once on the
# one GPU, from carried wheels split to fit one call (.whlc: scripts/download-wheels' set without executorch and
# diffusers; .whlet: executorch 1.2.0 and 1.5.1), each build installed into a site folder of its own:
#   tdmpc on `local` and act on `et19924` (ExecuTorch 1.2.0 with #19924's hunk, as on 2026-12-04): speedups;
#   act and tdmpc on `et151` (PyPI's executorch 1.5.1): the AOTI check of ExecuTorch 1.5's per-weight layout.
# The four cells compile side by side (16 cores); their timed runs may overlap. The detached pi05 was lost: the
# machine went back before the next call. Run: `run(command="PI05=1 bash bench/results/gpu_smoke/conf/2026-12-07-short-command.sh", carry=[".whlc", ".whlet"])`.
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo h200 || echo h100)
echo "gpu: $gpu"
mkdir -p /tmp/w12 /tmp/w151 /tmp/cd/torch "$OUT/tdmpc" "$OUT/act" "$OUT/et151"
cp .whlc/*.whl /tmp/w12/ && cp .whlc/*.whl /tmp/w151/
cp .whlet/executorch-1.2.0*.whl /tmp/w12/ && cp .whlet/executorch-1.5.1*.whl /tmp/w151/
S=/tmp/export-matrix-site
scripts/offline-env /tmp/w12 true
bash bench/results/gpu_smoke/conf/et19924-patch.sh $S $PWD
# With PI05=1, pi05 on `local` first, detached (scripts/device-detach), for `scripts/device-wait` calls to follow.
[ "${PI05:-0}" != 1 ] || WHEELS=/tmp/w12 scripts/device-detach sweep matrix=gpu_smoke "matrix.gpus=[$gpu]" \
  exporter=executorch_cuda policy=pi05 launcher.parallel=1
WHEELS=/tmp/w12 OUT=$OUT/tdmpc DEVICE_OUT_DIR=/tmp/gm2 DEVICE_CKPT_DIR=/tmp/ck2 scripts/device-call 440 sweep \
  matrix=gpu_smoke "matrix.gpus=[$gpu]" exporter=executorch_cuda policy=tdmpc > "$OUT/tdmpc/sweep.log" 2>&1 &
WHEELS=/tmp/w12 OUT=$OUT/act DEVICE_OUT_DIR=/tmp/gm3 DEVICE_CKPT_DIR=/tmp/ck3 scripts/device-call 440 sweep \
  --config-dir /tmp/cd matrix=gpu_smoke "matrix.gpus=[$gpu]" 'matrix.torch=[et19924]' exporter=executorch_cuda \
  policy=act > "$OUT/act/sweep.log" 2>&1 &
EXPORT_MATRIX_SITE=/tmp/site151 WHEELS=/tmp/w151 OUT=$OUT/et151 DEVICE_OUT_DIR=/tmp/gm151 DEVICE_CKPT_DIR=/tmp/ck4 \
  scripts/device-call 440 sweep --config-dir bench/results/gpu_smoke/conf matrix=gpu_smoke "matrix.gpus=[$gpu]" \
  'matrix.torch=[et151]' exporter=executorch_cuda policy=act,tdmpc launcher.parallel=2 > "$OUT/et151/sweep.log" 2>&1 &
wait
for d in tdmpc act et151; do echo "=== $d"; tail -n 5 "$OUT/$d/sweep.log"; done
for log in /tmp/gm2/cells/*/*/*/export.log /tmp/gm3/cells/*/*/*/export.log /tmp/gm151/cells/*/*/*/export.log; do
  echo "== $log"; grep -a "Exported policy\|^error\|Error" "$log" | tail -n 6 | cut -c1-400; done
