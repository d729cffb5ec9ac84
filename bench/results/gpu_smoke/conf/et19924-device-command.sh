# The device call of 2026-12-04 that ran act on the `et19924` build (run from the repository root, with .whl carried;
# $OUT is the device's output folder). Kept as it ran, for whoever repeats it.
S=/tmp/export-matrix-site; scripts/offline-env .whl true; mkdir -p /tmp/et19924 /tmp/cd/torch; cp -a $S/executorch /tmp/et19924/; F=/tmp/et19924/executorch/backends/aoti/passes/replace_view_copy_with_view.py; python3 - "$F" <<'EOF'
import sys
p = sys.argv[1]; t = open(p).read()
old = "    ops.edge.aten.select_copy.int: ops.edge.aten.select.int,\n"
new = old + "    torch.ops.aten.split_copy.Tensor: torch.ops.aten.split.Tensor,\n    ops.edge.aten.split_copy.Tensor: ops.edge.aten.split.Tensor,\n"
assert t.count(old) == 1, "anchor not found"
open(p, "w").write(t.replace(old, new))
EOF
printf 'python: null\nfixes: [pytorch/executorch#19924]\nenv: {PYTHONPATH: "/tmp/et19924:%s:%s"}\n' $S $PWD > /tmp/cd/torch/et19924.yaml; cat /tmp/cd/torch/et19924.yaml > $OUT/sweep.log; PYTHONPATH=/tmp/et19924:$S:$PWD python3 -c 'import executorch.backends.aoti.passes.replace_view_copy_with_view as m; print(m.__file__, [str(k) for k in m._VIEW_TARGETS])' >> $OUT/sweep.log 2>&1; scripts/offline-env .whl timeout 545 python3 -m orchestrator.cli sweep --config-dir /tmp/cd matrix=gpu_smoke 'matrix.policies=[act]' 'matrix.torch=[et19924]' policies.act.timeout_min=8.7 out_dir=/tmp/m >> $OUT/sweep.log 2>&1; echo rc=$? >> $OUT/sweep.log; D=/tmp/m/cells/act/h200/et19924; for f in record.json export.log make_random.log; do cp $D/$f $OUT/act-et19924-$f; done; cp $D/bundle/export_info.json $OUT/act-et19924-export_info.json; ls -la $D $D/bundle >> $OUT/sweep.log; tail -4 $OUT/sweep.log
