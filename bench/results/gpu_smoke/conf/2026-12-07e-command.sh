# The device call of 2026-12-07 (sixth work session), issue 43's rerun of gpu_smoke's small decided cells alone
# (tdmpc, act, gaussian_actor, vqbet, diffusion) with the exporters that check what the fork's flow checks, when
# too little of the session is left for pi0_bf16_vision's two calls (2026-12-07d-command.sh).
# Run: run(command="bash bench/results/gpu_smoke/conf/2026-12-07e-command.sh", carry=[".whl"])
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo h200 || echo h100)
echo "gpu: $gpu"
mkdir -p "$OUT/small"
WHEELS=.whl OUT=$OUT/small DEVICE_OUT_DIR=/tmp/gm2 DEVICE_CKPT_DIR=/tmp/ck2 scripts/device-call "${SMALL_S:-560}" \
  sweep matrix=gpu_smoke "matrix.gpus=[$gpu]" exporter=executorch_cuda \
  'matrix.policies=[tdmpc,act,gaussian_actor,vqbet,diffusion]' launcher.parallel=1 > "$OUT/small/sweep.log" 2>&1
tail -n 8 "$OUT/small/sweep.log"
for log in /tmp/gm2/cells/*/*/*/export.log; do
  echo "== $log"; grep -a "Exported policy\|^error\|Error\|rng_in_program\|not_one_delegate" "$log" | tail -n 8 | cut -c1-600
done
