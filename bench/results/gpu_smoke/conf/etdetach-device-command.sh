# The device call of 2026-12-04 (third session) that ran gaussian_actor and vqbet on a build `etdetach`: ExecuTorch
# 1.2.0 with pytorch/executorch#19924's hunk and the local detach_copy -> detach mapping
# (conf/patches/executorch-detach-copy-aoti.diff, under bench/results/gpu_smoke/conf/patches/ when it ran), copied to
# /tmp/etd and put first on PYTHONPATH.
# Run from the repository root with .whl carried; $OUT is the device's output folder. It ran twice: as here, then
# (the machine still warm, after the gaussian_actor adapter's fix) without `policies.vqbet.timeout_min=7`.
set -u
S=/tmp/export-matrix-site; R=bench/results/gpu_smoke/conf
scripts/offline-env .whl true
rm -rf /tmp/etd /tmp/cd; mkdir -p /tmp/etd /tmp/cd/torch; cp -a $S/executorch /tmp/etd/
patch -p1 -d /tmp/etd -i $PWD/conf/patches/executorch-19924-aoti.diff > $OUT/sweep.log 2>&1
patch -p1 -d /tmp/etd -i $PWD/conf/patches/executorch-detach-copy-aoti.diff >> $OUT/sweep.log 2>&1
printf 'python: null\nfixes: [pytorch/executorch#19924, detach_copy-view]\nenv: {PYTHONPATH: "/tmp/etd:%s:%s"}\n' $S $PWD \
  > /tmp/cd/torch/etdetach.yaml
cat /tmp/cd/torch/etdetach.yaml >> $OUT/sweep.log
PYTHONPATH=/tmp/etd:$S:$PWD python3 -c 'import executorch.backends.aoti.passes.replace_view_copy_with_view as m; print(m.__file__, [str(k) for k in m._VIEW_TARGETS])' >> $OUT/sweep.log 2>&1
scripts/offline-env .whl timeout 470 python3 -m orchestrator.cli sweep --config-dir /tmp/cd matrix=gpu_smoke \
  'matrix.policies=[gaussian_actor,vqbet]' 'matrix.torch=[etdetach]' launcher.parallel=2 \
  policies.gaussian_actor.timeout_min=6 policies.vqbet.timeout_min=7 out_dir=/tmp/m >> $OUT/sweep.log 2>&1
echo rc=$? >> $OUT/sweep.log
sleep 5
for c in gaussian_actor vqbet; do
  D=/tmp/m/cells/$c/h200/etdetach
  for f in record.json export.log make_random.log; do [ -f $D/$f ] && cp $D/$f $OUT/$c-etdetach-$f; done
done
tail -4 $OUT/sweep.log
