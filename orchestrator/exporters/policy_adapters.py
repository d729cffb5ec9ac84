"""Per-policy adapters for the CPU ExecuTorch exporter (executorch_cpu.py).

An adapter says, for one LeRobot policy type:
  - which tensors make up the example input (observation tensors, and noise where the policy samples it),
  - the eager reference: the policy's own public inference call (predict_action_chunk / select_action),
  - the module to torch.export: an nn.Module that takes those tensors positionally and returns the same
    action tensor with only traceable code (e.g. an unrolled, Python-int-timestep denoising loop).

The exporter compares the ExecuTorch program against the eager reference, so an adapter that drifts from
the policy's real inference shows up as a failed check rather than passing silently.

Imports only stdlib, torch and lerobot: it runs in the torch build's interpreter, next to executorch_cpu.py.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

OBS_IMAGE = "observation.image"
OBS_IMAGES = "observation.images"
ACTION = "action"


class NamedInputs(nn.Module):
    """Exportable wrapper: positional tensors -> dict by name -> `fn(policy, named)` -> action tensor."""

    def __init__(self, policy: nn.Module, names: list[str], fn: Callable[[nn.Module, dict[str, Tensor]], Tensor]):
        super().__init__()
        self.policy = policy
        self.names = list(names)
        self._fn = fn

    def forward(self, *tensors: Tensor) -> Tensor:
        return self._fn(self.policy, dict(zip(self.names, tensors, strict=True)))


class ChunkAdapter:
    """Default: the policy's predict_action_chunk on a batch of single-step observations (ACT and the like)."""

    name = "predict_action_chunk"
    obs_steps = 0  # 0: no time dimension in the observation tensors; n: (B, n, ...)

    def __init__(self, policy: nn.Module):
        self.policy = policy
        self.config = policy.config

    # Observation ---------------------------------------------------------------------------------------
    def observation(self, gen: torch.Generator) -> dict[str, Tensor]:
        """Seeded example observation for the policy's input_features: images in [0, 1), states ~ N(0, 1)."""
        obs = {}
        lead = (1, self.obs_steps) if self.obs_steps else (1,)
        for key, feat in self.config.input_features.items():
            shape = (*lead, *feat.shape)
            if feat.type.name == "VISUAL":
                obs[key] = torch.rand(shape, generator=gen)
            else:
                obs[key] = torch.randn(shape, generator=gen)
        return obs

    def input_names(self, batch: dict) -> list[str]:
        return [k for k in self.config.input_features if isinstance(batch.get(k), Tensor)]

    def extra_inputs(self, batch: dict[str, Tensor], gen: torch.Generator) -> dict[str, Tensor]:
        """Inputs beyond the observation (noise); drawn after the observation from the same generator."""
        return {}

    # Eager reference and exportable module --------------------------------------------------------------
    def eager(self, named: dict[str, Tensor]) -> Tensor:
        self.policy.reset()
        return self.policy.predict_action_chunk(dict(named))

    @staticmethod
    def _forward(policy: nn.Module, named: dict[str, Tensor]) -> Tensor:
        return policy.predict_action_chunk(named)

    def module(self, names: list[str]) -> nn.Module:
        return NamedInputs(self.policy, names, self._forward).eval()

    def describe(self) -> dict:
        return {"adapter": self.name}


class DiffusionAdapter(ChunkAdapter):
    """Diffusion Policy: the denoising loop unrolled with Python-int timesteps; the initial noise is an input.

    The stock loop indexes the scheduler's alphas_cumprod with a tensor timestep, which torch.export cannot
    guard on (GuardOnDataDependentSymNode). Here each step calls the same unet and the same diffusers
    scheduler.step with a Python int, so the schedule becomes constants of the graph.
    DDIM (eta = 0) draws no noise inside the loop. DDPM draws fresh noise at every step but the last; those
    draws are an input too (`step_noise`), and the eager reference draws the same values from the global
    RNG seeded identically, so both sides see the same numbers.
    """

    name = "diffusion_unrolled"

    def __init__(self, policy: nn.Module):
        super().__init__(policy)
        self.obs_steps = self.config.n_obs_steps
        model = policy.diffusion
        model.noise_scheduler.set_timesteps(model.num_inference_steps)
        self.timesteps = [int(t) for t in model.noise_scheduler.timesteps]
        self.scheduler_type = type(model.noise_scheduler).__name__
        # Steps that draw noise inside scheduler.step (DDPM: every t > 0; DDIM with eta = 0: none).
        self.noisy_steps = sum(1 for t in self.timesteps if t > 0) if self.scheduler_type == "DDPMScheduler" else 0
        self.noise_seed = 0

    def _noise_shape(self) -> tuple[int, int, int]:
        return (1, self.config.horizon, self.config.action_feature.shape[0])

    def extra_inputs(self, batch, gen):
        extra = {"noise": torch.randn(self._noise_shape(), generator=gen)}
        if self.noisy_steps:
            # Same draws, in the same order, as diffusers' randn_tensor makes from the global RNG in eager.
            torch.manual_seed(self.noise_seed)
            extra["step_noise"] = torch.stack([torch.randn(self._noise_shape()) for _ in range(self.noisy_steps)])
        return extra

    def eager(self, named):
        named = dict(named)
        noise = named.pop("noise")
        named.pop("step_noise", None)
        self.policy.reset()
        torch.manual_seed(self.noise_seed)
        return self.policy.predict_action_chunk(named, noise=noise)

    def module(self, names):
        adapter = self

        def forward(policy, named):
            cfg = policy.config
            model = policy.diffusion
            batch = {k: v for k, v in named.items() if k not in ("noise", "step_noise")}
            if cfg.image_features:  # as predict_action_chunk does with empty queues
                batch[OBS_IMAGES] = torch.stack([batch[k] for k in cfg.image_features], dim=-4)
            global_cond = model._prepare_global_conditioning(batch)
            sample = named["noise"]
            step_noise = list(named["step_noise"].unbind(0)) if "step_noise" in named else []
            scheduler = model.noise_scheduler
            for t in adapter.timesteps:
                timestep = torch.full(sample.shape[:1], t, dtype=torch.long)
                model_output = model.unet(sample, timestep, global_cond=global_cond)
                if adapter.noisy_steps and t > 0:
                    sample = _ddpm_step(scheduler, model_output, t, sample, step_noise.pop(0))
                else:
                    sample = scheduler.step(model_output, t, sample).prev_sample
            start = cfg.n_obs_steps - 1
            return sample[:, start : start + cfg.n_action_steps]

        return NamedInputs(self.policy, names, forward).eval()

    def describe(self):
        return {
            "adapter": self.name,
            "scheduler": self.scheduler_type,
            "timesteps": self.timesteps,
            "noisy_steps": self.noisy_steps,
        }


def _ddpm_step(scheduler, model_output: Tensor, t: int, sample: Tensor, noise: Tensor) -> Tensor:
    """diffusers DDPMScheduler.step with its randn_tensor draw replaced by `noise`."""
    import diffusers.schedulers.scheduling_ddpm as ddpm

    original = ddpm.randn_tensor
    ddpm.randn_tensor = lambda *args, **kwargs: noise
    try:
        return scheduler.step(model_output, t, sample).prev_sample
    finally:
        ddpm.randn_tensor = original


class QueuedChunkAdapter(ChunkAdapter):
    """Policies whose predict_action_chunk reads observation queues (VQ-BeT, TD-MPC).

    Eager and export both do what select_action does on the first step after reset(): fill the queues with
    copies of the observation, then call predict_action_chunk. `prepare` adds the stacked image key.
    """

    name = "queued_predict_action_chunk"

    def __init__(self, policy, prepare: Callable[[nn.Module, dict[str, Tensor]], dict[str, Tensor]]):
        super().__init__(policy)
        self.prepare = prepare

    def eager(self, named):
        torch.manual_seed(0)
        return self._run(self.policy, dict(named), self.prepare)

    @staticmethod
    def _run(policy, named, prepare):
        from lerobot.policies.utils import populate_queues

        policy.reset()
        batch = prepare(policy, named)
        policy._queues = populate_queues(policy._queues, batch)
        return policy.predict_action_chunk(batch)

    def module(self, names):
        prepare = self.prepare
        return NamedInputs(self.policy, names, lambda policy, named: self._run(policy, named, prepare)).eval()


def _prepare_vqbet(policy, named):
    named = dict(named)
    named[OBS_IMAGES] = torch.stack([named[k] for k in policy.config.image_features], dim=-4)
    return named


def _prepare_tdmpc(policy, named):
    named = dict(named)
    if policy.config.image_features:
        named[OBS_IMAGE] = named[next(iter(policy.config.image_features))]
    return named


class SelectActionAdapter(ChunkAdapter):
    """Policies without action chunks (gaussian_actor): one action from select_action."""

    name = "select_action"

    def eager(self, named):
        self.policy.reset()
        torch.manual_seed(0)
        return self.policy.select_action(dict(named))

    @staticmethod
    def _forward(policy, named):
        return policy.select_action(named)


def make_adapter(policy: nn.Module) -> ChunkAdapter:
    kind = policy.config.type
    if kind == "diffusion":
        return DiffusionAdapter(policy)
    if kind == "vqbet":
        return QueuedChunkAdapter(policy, _prepare_vqbet)
    if kind == "tdmpc":
        return QueuedChunkAdapter(policy, _prepare_tdmpc)
    if kind == "gaussian_actor":
        return SelectActionAdapter(policy)
    return ChunkAdapter(policy)
