# Make the `et19924` build on a device machine: a copy of the installed ExecuTorch (SITE) at /tmp/et19924 with
# pytorch/executorch#19924's hunk (split_copy -> split in ReplaceViewCopyWithView), and its torch config in
# /tmp/cd/torch/et19924.yaml for `--config-dir /tmp/cd`.   bash et19924-patch.sh SITE REPO
set -eu
S=$1
mkdir -p /tmp/et19924 /tmp/cd/torch && cp -a "$S/executorch" /tmp/et19924/
python3 - /tmp/et19924/executorch/backends/aoti/passes/replace_view_copy_with_view.py <<'PY'
import sys
p = sys.argv[1]; t = open(p).read()
old = "    ops.edge.aten.select_copy.int: ops.edge.aten.select.int,\n"
new = old + "    torch.ops.aten.split_copy.Tensor: torch.ops.aten.split.Tensor,\n    ops.edge.aten.split_copy.Tensor: ops.edge.aten.split.Tensor,\n"
assert t.count(old) == 1, "anchor not found"
open(p, "w").write(t.replace(old, new))
PY
printf 'python: null\nfixes: [pytorch/executorch#19924]\nenv: {PYTHONPATH: "/tmp/et19924:%s:%s"}\n' "$S" "$2" > /tmp/cd/torch/et19924.yaml
