# Issue 47 item 3, NOT RUN YET (no GPU machine was lent to the session that wrote it): the kernel breakdown on a
# GPU. One call of about 560 s on the embedded build (torch 2.11.0 + executorch 1.2.0, the wheels in .whl):
#   tdmpc      passes at about 3.8x eager, so its `kernels` step is forced (`--kernels` in its export_args): the
#              GPU path end to end (CUPTI's kernels, GPU time, in record.json's `kernels`) on a cell known to pass
#              in about two minutes;
#   diffusion  row 1 (slow through the fork: 0.8x on the H100) and conv_no_choice (ConvTranspose1d has no Triton
#              choice, on the H200 of 2026-12-03): where it lowers and runs slower than eager, its `kernels` step
#              profiles both sides by itself (the default: no flag); where it still fails in compile-model there is
#              nothing to profile and its record says conv_no_choice.
# Run: run(command="bash bench/results/gpu_smoke/conf/2026-12-07-kernels.sh", carry=[".whl"])
# Then here: tar -xzf <files_at>/k/cells.tgz -C <dir>; `export-matrix collect out_dir=<dir> matrix=gpu_smoke
# 'policies.tdmpc.export_args=[--kernels]'` (the same override, or tdmpc's record reads as stale) writes
# report.html with the Kernel breakdown; `export-matrix show tdmpc/h100/local ...` prints its line.
# For a float32 program that passes and is slower (act on PyPI's executorch 1.5.1, 1.01x alone on 2026-12-07), see
# 2026-12-07c-command.sh's et151 call and add 'policies.act.export_args=[--kernels]'.
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo h200 || echo h100)
echo "gpu: $gpu"
mkdir -p "$OUT/k"
WHEELS=.whl OUT=$OUT/k DEVICE_OUT_DIR=/tmp/gmk DEVICE_CKPT_DIR=/tmp/ckk scripts/device-call "${KERNELS_S:-560}" \
  sweep matrix=gpu_smoke "matrix.gpus=[$gpu]" exporter=executorch_cuda 'matrix.policies=[tdmpc,diffusion]' \
  'policies.tdmpc.export_args=[--kernels]' launcher.parallel=1 > "$OUT/k/sweep.log" 2>&1
tail -n 8 "$OUT/k/sweep.log"
for log in /tmp/gmk/cells/*/*/*/export.log; do
  echo "== $log"; grep -a "^\[kernels\]\|Exported policy timing:\|^error\|conv_no_choice\|NoValidChoices" "$log" \
    | tail -n 8 | cut -c1-400
done
