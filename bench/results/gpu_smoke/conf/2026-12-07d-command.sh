# The device session of 2026-12-07 (fifth work session): issue 43's rerun of gpu_smoke's decided cells with the
# exporters that check what the fork's flow checks (draws as inputs, uint8 frames through the processors in the
# program, the policy config's tolerance, the fork's compile settings and one-delegate gate, 20 + 100 timing).
#   pi0 as the fork runs it (pi0_bf16_vision: bf16 autocast of the vision tower; pi0 itself, LeRobot 0.6.1's float32
#   SigLIP, keeps its committed ❌ sdpa_bf16_only: no device time for both), detached, followed by
#   `scripts/device-wait`;
#   meanwhile tdmpc, act, gaussian_actor, diffusion and vqbet one at a time in this call (they share the CPUs
#   with pi0's load and lowering: their timings are not quiet ones).
# Run: run(command="bash bench/results/gpu_smoke/conf/2026-12-07d-command.sh", carry=[".whl"])
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo h200 || echo h100)
echo "gpu: $gpu"
mkdir -p "$OUT/small" "$OUT/pi0"
scripts/offline-env .whl true
WHEELS=.whl scripts/device-detach sweep matrix=gpu_smoke "matrix.gpus=[$gpu]" exporter=executorch_cuda \
  policy=pi0_bf16_vision launcher.parallel=1
WHEELS=.whl OUT=$OUT/small DEVICE_OUT_DIR=/tmp/gm2 DEVICE_CKPT_DIR=/tmp/ck2 scripts/device-call "${SMALL_S:-470}" \
  sweep matrix=gpu_smoke "matrix.gpus=[$gpu]" exporter=executorch_cuda \
  'matrix.policies=[tdmpc,act,gaussian_actor,vqbet,diffusion]' launcher.parallel=1 > "$OUT/small/sweep.log" 2>&1
tail -n 8 "$OUT/small/sweep.log"
for log in /tmp/gm2/cells/*/*/*/export.log; do
  echo "== $log"; grep -a "Exported policy\|^error\|Error\|rng_in_program\|not_one_delegate" "$log" | tail -n 8 | cut -c1-600
done
OUT=$OUT/pi0 scripts/device-wait $((575 - SECONDS))
