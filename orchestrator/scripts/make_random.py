"""Save a random-init checkpoint (policy + processors) for a LeRobot policy type.

usage: python make_random.py <policy_type> <out_dir> [key=json ...]
2 cameras of 224x224 and a 14-D arm unless the policy needs otherwise; identity normalization; seed 0.
These are random weights: they test the compiler, not a trained policy.

This is the repro pack's make_random.py. It runs as a file, with the interpreter of a torch build, so it
imports nothing from the orchestrator package (that environment need not have it installed).
"""

import json
import os
import sys
from pathlib import Path

import torch
from lerobot.configs.types import FeatureType, NormalizationMode, PolicyFeature
from lerobot.policies.factory import get_policy_class, make_policy_config, make_pre_post_processors

name, out = sys.argv[1], Path(sys.argv[2])
overrides = {k: json.loads(v) for k, v in (a.split("=", 1) for a in sys.argv[3:])}
torch.manual_seed(0)
cfg = make_policy_config(name, device="cpu")
V = lambda c, h, w: PolicyFeature(type=FeatureType.VISUAL, shape=(c, h, w))  # noqa: E731
S = lambda d: PolicyFeature(type=FeatureType.STATE, shape=(d,))  # noqa: E731
cams = {"observation.images.top": V(3, 224, 224), "observation.images.wrist": V(3, 224, 224)}
state, act = 14, 14
if name == "tdmpc":
    cams = {"observation.image": V(3, 84, 84)}
elif name in ("vqbet", "gaussian_actor"):
    cams = {"observation.images.top": V(3, 96, 96)}
elif name == "multi_task_dit":
    cams = {"observation.images.top": V(3, 224, 224)}
elif name == "lingbot_vla_v2":
    state, act = 55, 55
elif name == "wall_oss_05" and getattr(cfg, "camera_key_mapping", None):
    cams = {k: V(3, 224, 224) for k in cfg.camera_key_mapping}
if hasattr(cfg, "primary_image_features"):
    cfg.primary_image_features = ["observation.images.top"]
    if hasattr(cfg, "wrist_image_features"):
        cfg.wrist_image_features = ["observation.images.wrist"]
if not cfg.input_features:
    cfg.input_features = {**cams, "observation.state": S(state)}
if not cfg.output_features:
    cfg.output_features = {"action": PolicyFeature(type=FeatureType.ACTION, shape=(act,))}
if name != "tdmpc":  # TD-MPC's config refuses anything but its own action normalization.
    cfg.normalization_mapping = {k: NormalizationMode.IDENTITY for k in ("VISUAL", "STATE", "ACTION", "ENV")}
for k, v in overrides.items():
    setattr(cfg, k, v)
policy = get_policy_class(name)(cfg)
if name == "tdmpc":
    # TD-MPC zero-initializes its reward and Q output layers, so every planned trajectory would score exactly 0.
    for layer in (policy.model._reward[-1], *(q[-1] for q in policy.model._Qs)):
        layer.reset_parameters()
policy.save_pretrained(out)
saved = {"saved": str(out), "params_M": round(sum(p.numel() for p in policy.parameters()) / 1e6, 1)}
try:
    pre, post = make_pre_post_processors(cfg, dataset_stats=None)
except OSError as exc:
    # Not in the repro pack: offline (HF_HUB_OFFLINE=1) the processors of pi0 and pi05 cannot be built, since their
    # tokenizer (PaliGemma's) is on the hub. The policy is saved without them; the embedded exporters' adapters
    # feed token ids directly (orchestrator/exporters/policy_adapters.py), and say so in their report.
    if os.environ.get("HF_HUB_OFFLINE") != "1":
        raise
    saved["processors"] = f"not saved, offline: {str(exc).splitlines()[0]}"
    print(f"make_random: {name}'s processors not saved (offline): {str(exc).splitlines()[0]}", file=sys.stderr)
else:
    pre.save_pretrained(out)
    post.save_pretrained(out)
print(json.dumps(saved))
