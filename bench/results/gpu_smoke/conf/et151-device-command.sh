# The device call of 2026-12-06 that ran the et151 build on an H100 (run from the repository root, with
# .whl151 carried: scripts/download-wheels' set with executorch-1.5.1 in place of executorch-1.2.0). Kept as it ran.
# (vqbet is not in matrix gpu_smoke, so the sweep ran three cells.)
WHEELS=.whl151 scripts/device-call 330 sweep --config-dir bench/results/gpu_smoke/conf matrix=gpu_smoke 'matrix.gpus=[h100]' 'matrix.torch=[et151]' exporter=executorch_cuda policy=act,gaussian_actor,tdmpc,vqbet launcher.parallel=4
