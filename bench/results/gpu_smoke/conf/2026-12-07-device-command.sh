# The first device call of 2026-12-07 (the matrix's GPU is the card the machine has: h100 or h200), run from the repository root with .whl carried: pi05 on the embedded
# build detached (scripts/device-detach; later calls follow it with scripts/device-wait), and meanwhile tdmpc on
# `local` and act on `et19924` (ExecuTorch 1.2.0 with #19924's hunk applied to a copy, as on 2026-12-04) for
# their speedups on the H100. Not run: no device machine on 2026-12-07.
set -u
S=/tmp/export-matrix-site
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo h200 || echo h100)
echo "gpu: $gpu"
scripts/offline-env .whl true
scripts/device-detach sweep matrix=gpu_smoke "matrix.gpus=[$gpu]" exporter=executorch_cuda policy=pi05 launcher.parallel=1
mkdir -p "$OUT/tdmpc" "$OUT/act"
bash bench/results/gpu_smoke/conf/et19924-patch.sh $S $PWD
OUT=$OUT/tdmpc DEVICE_OUT_DIR=/tmp/gm2 DEVICE_CKPT_DIR=/tmp/ck2 scripts/device-call 470 sweep matrix=gpu_smoke \
  "matrix.gpus=[$gpu]" exporter=executorch_cuda policy=tdmpc > "$OUT/tdmpc/sweep.log" 2>&1 &
OUT=$OUT/act DEVICE_OUT_DIR=/tmp/gm3 DEVICE_CKPT_DIR=/tmp/ck3 scripts/device-call 470 sweep --config-dir /tmp/cd \
  matrix=gpu_smoke "matrix.gpus=[$gpu]" 'matrix.torch=[et19924]' exporter=executorch_cuda policy=act \
  > "$OUT/act/sweep.log" 2>&1 &
wait
tail -n 6 "$OUT/tdmpc/sweep.log" "$OUT/act/sweep.log"
scripts/device-wait 1
