"""Per-policy adapters for the embedded exporters (executorch_cpu.py, executorch_cuda.py).

An adapter says, for one LeRobot policy type:
  - which tensors make up the example input (observation tensors, and noise where the policy samples it),
  - the eager reference: the policy's own public inference call (predict_action_chunk / select_action),
  - the program: one or more methods, each an nn.Module to torch.export with its example args, and how to
    compose the methods' outputs into the action (`compose`; for most policies one `forward` method that
    returns the action chunk; for Diffusion `encode` + `denoise_step` with the sampling loop on the host).

The exporter compares the ExecuTorch program against the eager reference, so an adapter that drifts from
the policy's real inference shows up as a failed check rather than passing silently.

Imports only stdlib, torch and lerobot: it runs in the torch build's interpreter, next to the exporters.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

OBS_IMAGE = "observation.image"
OBS_IMAGES = "observation.images"
ACTION = "action"
OBS_LANGUAGE_TOKENS = "observation.language.tokens"
OBS_LANGUAGE_MASK = "observation.language.attention_mask"


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
    preprocess = True  # run the checkpoint's saved preprocessor on the observation (False: the adapter's own)

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
        """The input features, then any language tensors the preprocessor made from --task (tokens, masks)."""
        names = [k for k in self.config.input_features if isinstance(batch.get(k), Tensor)]
        extra = [k for k, v in batch.items() if k.startswith("observation.language") and isinstance(v, Tensor)]
        return names + [k for k in extra if k not in names]

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

    def programs(self, names: list[str], named: dict[str, Tensor]) -> dict[str, tuple[nn.Module, tuple]]:
        """Methods of the ExecuTorch program: name -> (module to torch.export, example args)."""
        return {"forward": (self.module(names), tuple(named[k] for k in names))}

    def compose(self, named: dict[str, Tensor], run: Callable[[str, list[Tensor]], list[Tensor]]) -> Tensor:
        """The action from the program's methods; `run(method, args)` returns the method's outputs."""
        return run("forward", list(named.values()))[0]

    def describe(self) -> dict:
        return {"adapter": self.name}


class DiffusionAdapter(ChunkAdapter):
    """Diffusion Policy: an `encode` method and a `denoise_step` method; the sampling loop runs on the host.

    The stock loop indexes the scheduler's alphas_cumprod with a tensor timestep, which torch.export cannot
    guard on (GuardOnDataDependentSymNode). One graph with the loop unrolled (Python-int timesteps) does
    export, but XNNPACK then lowers and serializes the 250 M-parameter U-Net once per step: with 10 DDIM
    steps the lowering ran for over 9 minutes at 12 GB RSS before it was stopped. So the program holds two
    methods instead, each lowered once:

        encode(<observation tensors>) -> global_cond
        denoise_step(sample, global_cond, timestep (B,) int64, coef (6,), step_noise) -> next sample

    and `compose` runs the loop: sample = noise; for each row of the step table, sample = denoise_step(...);
    then the action slice [n_obs_steps - 1, + n_action_steps). The step table (timesteps and coefficients)
    comes from the policy's diffusers scheduler (DDIM or DDPM, any num_inference_steps); each scheduler step
    is written as
        x0 = clamp(p * sample + q * model_output);  next = c * x0 + d * model_output + e * sample + s * noise
    DDIM (eta = 0) draws no noise (s = 0). DDPM draws fresh noise at every step but the last: those draws are
    an input (`step_noise`), and the eager reference draws the same values from the global RNG seeded
    identically. The check compares the composed program against the policy's own predict_action_chunk.
    """

    name = "diffusion_encode_and_step"

    def __init__(self, policy: nn.Module):
        super().__init__(policy)
        self.obs_steps = self.config.n_obs_steps
        model = policy.diffusion
        scheduler = model.noise_scheduler
        scheduler.set_timesteps(model.num_inference_steps)
        self.timesteps = [int(t) for t in scheduler.timesteps]
        self.scheduler_type = type(scheduler).__name__
        if self.scheduler_type not in ("DDIMScheduler", "DDPMScheduler"):
            raise NotImplementedError(f"No step table for {self.scheduler_type}")
        if scheduler.config.thresholding:
            raise NotImplementedError("Dynamic thresholding in the diffusion scheduler is not supported")
        ddpm = self.scheduler_type == "DDPMScheduler"
        coefs = []
        for i, t in enumerate(self.timesteps):
            if ddpm:
                prev_t = self.timesteps[i + 1] if i + 1 < len(self.timesteps) else -1
            else:
                prev_t = t - scheduler.config.num_train_timesteps // scheduler.num_inference_steps
            coefs.append(_step_coefficients(scheduler, t, prev_t, ddpm))
        self.coef = torch.stack(coefs)  # (steps, 6)
        self.noisy = [bool(c[5] != 0) for c in coefs]
        self.clip = scheduler.config.clip_sample_range if scheduler.config.clip_sample else None
        self.noise_seed = 0

    def _noise_shape(self) -> tuple[int, int, int]:
        return (1, self.config.horizon, self.config.action_feature.shape[0])

    def extra_inputs(self, batch, gen):
        extra = {"noise": torch.randn(self._noise_shape(), generator=gen)}
        if any(self.noisy):
            # Same draws, in the same order, as diffusers' randn_tensor makes from the global RNG in eager.
            torch.manual_seed(self.noise_seed)
            extra["step_noise"] = torch.stack([torch.randn(self._noise_shape()) for _ in range(sum(self.noisy))])
        return extra

    def eager(self, named):
        named = dict(named)
        noise = named.pop("noise")
        named.pop("step_noise", None)
        self.policy.reset()
        torch.manual_seed(self.noise_seed)
        return self.policy.predict_action_chunk(named, noise=noise)

    def _obs_names(self, names):
        return [k for k in names if k not in ("noise", "step_noise")]

    def _step_table(self, named):
        """Per step: timestep (B,), coefficients (6,), noise (B, horizon, action_dim)."""
        device = named["noise"].device  # the table lives where the program runs (CPU or GPU)
        draws = list(named["step_noise"].unbind(0)) if "step_noise" in named else []
        zeros = torch.zeros(self._noise_shape(), device=device)
        rows = []
        for t, coef, noisy in zip(self.timesteps, self.coef.to(device), self.noisy, strict=True):
            rows.append((torch.full((1,), t, dtype=torch.long, device=device), coef,
                         draws.pop(0) if noisy else zeros))
        return rows

    def programs(self, names, named):
        obs_names = self._obs_names(names)

        def encode(policy, obs):
            batch = dict(obs)
            if policy.config.image_features:  # as predict_action_chunk does with empty queues
                batch[OBS_IMAGES] = torch.stack([batch[k] for k in policy.config.image_features], dim=-4)
            return policy.diffusion._prepare_global_conditioning(batch)

        step = DenoiseStep(self.policy.diffusion.unet, self.clip).eval()
        with torch.no_grad():
            global_cond = encode(self.policy, {k: named[k] for k in obs_names})
        t, coef, noise = self._step_table(named)[0]
        return {
            "encode": (NamedInputs(self.policy, obs_names, encode).eval(), tuple(named[k] for k in obs_names)),
            "denoise_step": (step, (named["noise"], global_cond, t, coef, noise)),
        }

    def compose(self, named, run):
        (global_cond,) = run("encode", [named[k] for k in self._obs_names(list(named))])
        sample = named["noise"]
        for t, coef, noise in self._step_table(named):
            (sample,) = run("denoise_step", [sample, global_cond, t, coef, noise])
        start = self.config.n_obs_steps - 1
        return sample[:, start : start + self.config.n_action_steps]

    def describe(self):
        return {
            "adapter": self.name,
            "methods": ["encode", "denoise_step"],
            "scheduler": self.scheduler_type,
            "timesteps": self.timesteps,
            "step_coefficients": [[float(x) for x in row] for row in self.coef],
            "coefficient_order": "p q c d e s",
            "clip_sample_range": self.clip,
            "noisy_steps": sum(self.noisy),
        }


class DenoiseStep(nn.Module):
    """One scheduler step around the U-Net, with the step's constants as inputs (see DiffusionAdapter)."""

    def __init__(self, unet: nn.Module, clip: float | None):
        super().__init__()
        self.unet = unet
        self.clip = clip

    def forward(self, sample: Tensor, global_cond: Tensor, timestep: Tensor, coef: Tensor, noise: Tensor):
        out = self.unet(sample, timestep, global_cond=global_cond)
        x0 = coef[0] * sample + coef[1] * out
        if self.clip is not None:
            x0 = x0.clamp(-self.clip, self.clip)
        return coef[2] * x0 + coef[3] * out + coef[4] * sample + coef[5] * noise


def _step_coefficients(scheduler, t: int, prev_t: int, ddpm: bool) -> Tensor:
    """(p, q, c, d, e, s) of one diffusers DDIM (eta = 0) or DDPM step, in float32 as diffusers computes."""
    ac = scheduler.alphas_cumprod
    a_t = ac[t]
    if prev_t >= 0:
        a_prev = ac[prev_t]
    else:
        a_prev = scheduler.one if ddpm else scheduler.final_alpha_cumprod
    b_t = 1 - a_t
    zero, one = torch.zeros(()), torch.ones(())
    kind = scheduler.config.prediction_type
    # x0 = p * sample + q * out; epsilon = em * out + ex * sample (from the unclipped x0, as diffusers does)
    if kind == "epsilon":
        p, q, em, ex = 1 / a_t**0.5, -(b_t**0.5) / a_t**0.5, one, zero
    elif kind == "sample":
        p, q, em, ex = zero, one, -(a_t**0.5) / b_t**0.5, 1 / b_t**0.5
    elif kind == "v_prediction":
        p, q, em, ex = a_t**0.5, -(b_t**0.5), a_t**0.5, b_t**0.5
    else:
        raise NotImplementedError(f"prediction_type {kind}")
    if not ddpm:
        c, d, e, s = a_prev**0.5, (1 - a_prev) ** 0.5 * em, (1 - a_prev) ** 0.5 * ex, zero
    else:
        cur_alpha = a_t / a_prev
        cur_beta = 1 - cur_alpha
        c, d, e = a_prev**0.5 * cur_beta / b_t, zero, cur_alpha**0.5 * (1 - a_prev) / b_t
        variance = torch.clamp((1 - a_prev) / (1 - a_t) * cur_beta, min=1e-20)
        vt = scheduler.config.variance_type
        if t == 0:
            s = zero
        elif vt == "fixed_small":
            s = variance**0.5
        elif vt == "fixed_small_log":
            s = torch.exp(0.5 * torch.log(variance))
        elif vt == "fixed_large":
            s = cur_beta**0.5
        else:
            raise NotImplementedError(f"DDPM variance_type {vt}")
    return torch.stack([torch.as_tensor(x, dtype=torch.float32) for x in (p, q, c, d, e, s)])


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
    """Policies without action chunks: one action from select_action, traced as is."""

    name = "select_action"

    def eager(self, named):
        self.policy.reset()
        torch.manual_seed(0)
        return self.policy.select_action(dict(named))

    @staticmethod
    def _forward(policy, named):
        return policy.select_action(named)


class GaussianActorAdapter(SelectActionAdapter):
    """gaussian_actor: select_action with the reparameterized sample's standard-normal draw as an input.

    Traced as is, select_action stops in torch.export: TanhMultivariateNormalDiag builds a MultivariateNormal,
    whose argument validation guards on data (GuardOnDataDependentSymNode), and rsample draws from the RNG.
    The covariance is diag(std), so the sample is tanh(mean + sqrt(std) * eps); the exported graph takes eps
    (`sample_noise`) as an input, and the eager reference (the policy's own select_action, RNG seeded with 0)
    draws the same eps with the same call MultivariateNormal.rsample makes.
    """

    name = "gaussian_actor_noise_input"

    def __init__(self, policy):
        super().__init__(policy)
        if self.config.num_discrete_actions is not None:
            raise NotImplementedError("gaussian_actor with num_discrete_actions is not adapted")

    def extra_inputs(self, batch, gen):
        from torch.distributions.utils import _standard_normal

        # Drawn where the policy's rsample draws it (its parameters' device): seeded alike, the CPU's and CUDA's
        # generators give different numbers, and the eager reference on a GPU would not see this eps.
        torch.manual_seed(0)
        shape = (1, self.config.output_features[ACTION].shape[0])
        device = next(self.policy.parameters()).device
        return {"sample_noise": _standard_normal(shape, dtype=torch.float32, device=device)}

    def eager(self, named):
        named = dict(named)
        named.pop("sample_noise")
        return super().eager(named)

    @staticmethod
    def _forward(policy, named):
        named = dict(named)
        eps = named.pop("sample_noise")
        actor = policy.actor
        cache = None
        if policy.shared_encoder and actor.encoder.has_images:
            cache = actor.encoder.get_cached_image_features(named)
        out = actor.network(actor.encoder(named, cache=cache, detach=actor.encoder_is_shared))
        means = actor.mean_layer(out)
        if actor.fixed_std is None:
            std = torch.clamp(torch.exp(actor.std_layer(out)), actor.std_min, actor.std_max)
        else:
            std = actor.fixed_std.expand_as(means)
        return torch.tanh(means + std.sqrt() * eps)


class LanguageTokensAdapter(ChunkAdapter):
    """pi0, pi05: the prompt's token ids and mask, and the flow-matching noise, as inputs of the program.

    Their preprocessor tokenizes --task with PaliGemma's tokenizer, which lives on the Hugging Face hub, so
    offline the adapter feeds seeded token ids (below PaliGemma's vocabulary size) and an all-true mask of the
    config's tokenizer_max_length instead; with make_random's weights any ids test the compiler as well. The
    noise that sample_actions would draw (chunk_size x max_action_dim) is an input, and eager gets the same.
    """

    name = "language_tokens_and_noise"
    preprocess = False
    TOKEN_IDS = 1024

    def observation(self, gen):
        obs = super().observation(gen)
        length = self.config.tokenizer_max_length
        obs[OBS_LANGUAGE_TOKENS] = torch.randint(0, self.TOKEN_IDS, (1, length), generator=gen)
        obs[OBS_LANGUAGE_MASK] = torch.ones(1, length, dtype=torch.bool)
        return obs

    def extra_inputs(self, batch, gen):
        return {"noise": torch.randn((1, self.config.chunk_size, self.config.max_action_dim), generator=gen)}

    def eager(self, named):
        self.policy.reset()
        return self._forward(self.policy, named)

    @staticmethod
    def _forward(policy, named):
        named = dict(named)
        noise = named.pop("noise")
        return policy.predict_action_chunk(named, noise=noise)  # float32, as the policy's own sample_noise

    def describe(self):
        return {"adapter": self.name, "token_ids": "seeded ids in [0, 1024), mask all true (no hub tokenizer)"}


class XVLAAdapter(LanguageTokensAdapter):
    """xvla: seeded token ids (its BART tokenizer is on the hub) and the flow's starting noise as inputs.

    X-VLA's generate_actions draws that noise with torch.randn inside the model; an exported program would draw
    its own, so the adapter hands both sides the same tensor by answering that one call with the input.
    """

    name = "language_tokens_and_noise"

    def observation(self, gen):
        obs = ChunkAdapter.observation(self, gen)
        length = self.config.tokenizer_max_length
        obs[OBS_LANGUAGE_TOKENS] = torch.randint(0, self.TOKEN_IDS, (1, length), generator=gen)
        return obs

    def extra_inputs(self, batch, gen):
        return {"noise": torch.randn((1, self.config.chunk_size, self.policy.model.dim_action), generator=gen)}

    @staticmethod
    def _forward(policy, named):
        named = dict(named)
        noise = named.pop("noise")
        randn = torch.randn

        def given_noise(*size, dtype=None, device=None, **kwargs):
            if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
                size = tuple(size[0])
            if tuple(size) == tuple(noise.shape):
                return noise.to(dtype=dtype or noise.dtype, device=device or noise.device)
            return randn(*size, dtype=dtype, device=device, **kwargs)

        torch.randn = given_noise
        try:
            return policy.predict_action_chunk(named)
        finally:
            torch.randn = randn

    def describe(self):
        return {"adapter": self.name, "token_ids": "seeded ids in [0, 1024) (no hub tokenizer)",
                "noise": "an input: the model's one torch.randn call answered with it"}


class ForwardOnly:
    """A resumed export's adapter, the policy not loaded: the action is the `forward` method's first output."""

    name = "forward"
    compose = ChunkAdapter.compose


def make_adapter(policy: nn.Module) -> ChunkAdapter:
    kind = policy.config.type
    if kind == "diffusion":
        return DiffusionAdapter(policy)
    if kind == "vqbet":
        return QueuedChunkAdapter(policy, _prepare_vqbet)
    if kind == "tdmpc":
        return QueuedChunkAdapter(policy, _prepare_tdmpc)
    if kind == "gaussian_actor":
        return GaussianActorAdapter(policy)
    if kind in ("pi0", "pi05"):
        return LanguageTokensAdapter(policy)
    if kind == "xvla":
        return XVLAAdapter(policy)
    return ChunkAdapter(policy)
