"""Per-policy adapters for the embedded exporters (executorch_cpu.py, executorch_cuda.py).

An adapter says, for one LeRobot policy type, what the fork's export flow would give its program:
  - the inputs a robot sends: each camera a uint8 HWC frame, the state a float vector (no batch dimension), plus
    the prompt's tokens where the policy takes language, and every random draw the policy makes (random_inputs.py),
  - where the checkpoint's saved processors run: inside the program (`processors = "program"`: the frame's
    uint8 -> float CHW conversion, the preprocessor and the postprocessor, as the fork's raw-frame programs hold
    them), on the host (`"host"`: a preprocessor that tokenizes text cannot be traced), or not at all (`"none"`),
  - the program: one or more methods, each an nn.Module to torch.export with its example args, and how to
    compose the methods' outputs into the action (`compose`; for most policies one `forward` method that
    returns the action chunk; for Diffusion `encode` + `denoise_step` with the sampling loop on the host).

The eager reference is the same composition run eagerly (the policy's own public call between the processors),
with the same draws, so the check compares the program with eager and never two random draws.

Imports only stdlib, torch and lerobot: it runs in the torch build's interpreter, next to the exporters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from random_inputs import draw_names, recording, replaying, split_draws
from torch import Tensor, nn

OBS_IMAGE = "observation.image"
OBS_IMAGES = "observation.images"
ACTION = "action"
OBS_LANGUAGE_TOKENS = "observation.language.tokens"
OBS_LANGUAGE_MASK = "observation.language.attention_mask"
TEXT_STEPS = ("Tokenizer", "NewLine", "Task", "Prompt")  # preprocessor steps that read the task's text


class NamedInputs(nn.Module):
    """Exportable wrapper: positional tensors -> dict by name -> `fn(policy, named)` -> action tensor."""

    def __init__(self, policy: nn.Module, names: list[str], fn: Callable[[nn.Module, dict[str, Tensor]], Tensor]):
        super().__init__()
        self.policy = policy
        self.names = list(names)
        self._fn = fn

    def forward(self, *tensors: Tensor) -> Tensor:
        return self._fn(self.policy, dict(zip(self.names, tensors, strict=True)))


def frame_to_policy_input(frame: Tensor) -> Tensor:
    """A robot's uint8 HWC camera frame as LeRobot's policies read it: float CHW in [0, 1]."""
    return frame.float().div(255).permute(2, 0, 1)


class ChunkAdapter:
    """Default: the policy's predict_action_chunk between its processors (ACT and the like)."""

    name = "predict_action_chunk"
    preprocess = True  # load the checkpoint's saved processors (False: the adapter feeds the policy itself)
    records_draws = True  # the policy's random draws become inputs (random_inputs.py)
    slices_chunk = True  # the program returns the n_action_steps a robot executes, as the fork's programs do
    eager_is_program = True  # eager runs what the program's one method traces (timed once, not twice)

    def __init__(self, policy: nn.Module, options: dict[str, Any] | None = None):
        self.policy = policy
        self.config = policy.config
        self.options = dict(options or {})
        self.pre: Any = None
        self.post: Any = None
        self.processors = "none"
        self.processors_why = "the checkpoint has no saved processors"

    def set_processors(self, pre: Any, post: Any) -> None:
        """The checkpoint's saved processors: in the program, unless a step reads text (then on the host)."""
        self.pre, self.post = pre, post
        text = [type(s).__name__ for s in pre.steps if any(t in type(s).__name__ for t in TEXT_STEPS)]
        if text:
            self.processors = "host"
            self.processors_why = f"the preprocessor reads the task's text ({', '.join(text)}), which no program can"
        else:
            self.processors = "program"
            self.processors_why = "as the fork's raw-frame programs: frame conversion, preprocessor, postprocessor"

    # Observation ---------------------------------------------------------------------------------------
    def observation(self, gen: torch.Generator) -> dict[str, Tensor]:
        """Seeded example of what a robot sends: uint8 HWC frames, states uniform in [0, 1) (the fork's)."""
        obs = {}
        for key, feat in self.config.input_features.items():
            if feat.type.name == "VISUAL":
                c, h, w = feat.shape
                obs[key] = torch.randint(0, 256, (h, w, c), generator=gen, dtype=torch.uint8)
            else:
                obs[key] = torch.rand(tuple(feat.shape), generator=gen)
        return obs

    def host_inputs(self, obs: dict[str, Any]) -> dict[str, Tensor]:
        """The program's named inputs from the robot's observation (and task): the preprocessor runs here when it
        runs on the host."""
        if self.processors != "host":
            return {k: v for k, v in obs.items() if isinstance(v, Tensor)}
        batch = self.pre(self.to_policy_input(obs))
        names = [k for k in self.config.input_features if isinstance(batch.get(k), Tensor)]
        names += [k for k, v in batch.items() if k.startswith("observation.language") and isinstance(v, Tensor)]
        return {k: batch[k] for k in dict.fromkeys(names)}

    def to_policy_input(self, obs: dict[str, Any]) -> dict[str, Any]:
        return {k: frame_to_policy_input(v) if isinstance(v, Tensor) and v.dtype == torch.uint8 and v.dim() == 3
                else v for k, v in obs.items()}

    def extra_inputs(self, named: dict[str, Tensor], gen: torch.Generator) -> dict[str, Tensor]:
        """Inputs beyond the observation: the policy's random draws, recorded from one run on `gen`."""
        if not self.records_draws:
            return {}
        draws: list[Tensor] = []
        with torch.no_grad(), recording(gen, draws):
            self.compute(self.policy, dict(named))
        device = next(iter(named.values())).device if named else "cpu"
        return dict(zip(draw_names(len(draws)), (d.to(device) for d in draws), strict=True))

    # The composition: processors, the policy's call, draws replayed ---------------------------------------
    def batch(self, obs: dict[str, Tensor]) -> dict[str, Tensor]:
        """Observation inputs -> the policy's batch, as the processors (or, without them, LeRobot) make it."""
        features = self.config.input_features
        if self.processors == "program":
            batch = self.pre(self.to_policy_input({k: v for k, v in obs.items() if k in features}))
            batch = {k: v for k, v in batch.items() if isinstance(v, Tensor)}
            return {**batch, **{k: v for k, v in obs.items() if k not in features}}
        if self.processors == "host":
            return dict(obs)
        return {k: v.unsqueeze(0) if k in features else v for k, v in self.to_policy_input(obs).items()}

    def action(self, action: Tensor) -> Tensor:
        if self.slices_chunk and action.dim() == 3 and getattr(self.config, "n_action_steps", None):
            action = action[:, : self.config.n_action_steps]
        return self.post(action) if self.post is not None and self.processors != "none" else action

    def run(self, policy: nn.Module, named: dict[str, Tensor]) -> Tensor:
        """The composition with the recorded draws (inputs named rng_<i>) answering the policy's random calls."""
        obs, draws = split_draws(named)
        with replaying(draws):
            return self.compute(policy, obs)

    def compute(self, policy: nn.Module, obs: dict[str, Tensor]) -> Tensor:
        return self.action(self.act(policy, self.batch(obs)))

    def act(self, policy: nn.Module, batch: dict[str, Tensor]) -> Tensor:
        """The policy's own inference call on its batch (subclasses: another call, or inputs it takes itself)."""
        policy.reset()
        return policy.predict_action_chunk(batch)

    # Eager reference and exportable module --------------------------------------------------------------
    def eager(self, named: dict[str, Tensor]) -> Tensor:
        return self.run(self.policy, dict(named))

    def module(self, names: list[str]) -> nn.Module:
        return NamedInputs(self.policy, names, self.run).eval()

    def programs(self, names: list[str], named: dict[str, Tensor]) -> dict[str, tuple[nn.Module, tuple]]:
        """Methods of the ExecuTorch program: name -> (module to torch.export, example args)."""
        return {"forward": (self.module(names), tuple(named[k] for k in names))}

    def compose(self, named: dict[str, Tensor], run: Callable[[str, list[Tensor]], list[Tensor]]) -> Tensor:
        """The action from the program's methods; `run(method, args)` returns the method's outputs."""
        return run("forward", list(named.values()))[0]

    def describe(self) -> dict:
        return {"adapter": self.name, "processors": self.processors, "processors_why": self.processors_why,
                "frames": "uint8 HWC, as a robot sends them"}


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
    records_draws = False  # its noise and DDPM's step noise are inputs already (noise, step_noise)
    slices_chunk = False  # predict_action_chunk and compose take the n_action_steps slice themselves
    eager_is_program = False  # eager is the policy's own sampling loop; the program composes two methods

    def __init__(self, policy: nn.Module, options: dict[str, Any] | None = None):
        super().__init__(policy, options)
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

    def extra_inputs(self, named, gen):
        extra = {"noise": torch.randn(self._noise_shape(), generator=gen)}
        if any(self.noisy):
            # Same draws, in the same order, as diffusers' randn_tensor makes from the global RNG in eager.
            torch.manual_seed(self.noise_seed)
            extra["step_noise"] = torch.stack([torch.randn(self._noise_shape()) for _ in range(sum(self.noisy))])
        return extra

    def stacked(self, obs: dict[str, Tensor]) -> dict[str, Tensor]:
        """The policy's batch with n_obs_steps copies of the observation, as select_action's queues hold them on
        the first step after reset()."""
        batch = self.batch(obs)
        for key in self.config.input_features:
            if key in batch:
                batch[key] = torch.stack([batch[key]] * self.obs_steps, dim=1)
        return batch

    def eager(self, named):
        obs = {k: v for k, v in named.items() if k not in ("noise", "step_noise")}
        self.policy.reset()
        torch.manual_seed(self.noise_seed)
        return self.action(self.policy.predict_action_chunk(self.stacked(obs), noise=named["noise"]))

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
        adapter = self

        def encode(policy, obs):
            batch = adapter.stacked(obs)
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
        return self.action(sample[:, start : start + self.config.n_action_steps])

    def describe(self):
        where = {"program": "preprocessor in encode; postprocessor on the host after the sampling loop",
                 "none": "none (no saved processors)"}.get(self.processors, self.processors_why)
        return {
            **super().describe(),
            "adapter": self.name,
            "processors_why": where,
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

    def __init__(self, policy, prepare: Callable[[nn.Module, dict[str, Tensor]], dict[str, Tensor]],
                 options: dict[str, Any] | None = None):
        super().__init__(policy, options)
        self.prepare = prepare

    def act(self, policy, batch):
        from lerobot.policies.utils import populate_queues

        policy.reset()
        batch = self.prepare(policy, batch)
        policy._queues = populate_queues(policy._queues, batch)
        return policy.predict_action_chunk(batch)


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

    def act(self, policy, batch):
        policy.reset()
        return policy.select_action(batch)


class GaussianActorAdapter(SelectActionAdapter):
    """gaussian_actor: select_action with the reparameterized sample's standard-normal draw as an input.

    Traced as is, select_action stops in torch.export: TanhMultivariateNormalDiag builds a MultivariateNormal,
    whose argument validation guards on data (GuardOnDataDependentSymNode), and rsample draws from the RNG.
    The covariance is diag(std), so the sample is tanh(mean + sqrt(std) * eps); the exported graph takes eps
    (`sample_noise`) as an input, and the eager reference (the policy's own select_action, RNG seeded with 0)
    draws the same eps with the same call MultivariateNormal.rsample makes.
    """

    name = "gaussian_actor_noise_input"
    records_draws = False  # its one draw is `sample_noise`, taken where MultivariateNormal.rsample takes it
    eager_is_program = False  # eager is the policy's own select_action; the program its rewritten sample

    def __init__(self, policy, options: dict[str, Any] | None = None):
        super().__init__(policy, options)
        if self.config.num_discrete_actions is not None:
            raise NotImplementedError("gaussian_actor with num_discrete_actions is not adapted")

    def extra_inputs(self, named, gen):
        from torch.distributions.utils import _standard_normal

        # Drawn where the policy's rsample draws it (its parameters' device): seeded alike, the CPU's and CUDA's
        # generators give different numbers, and the eager reference on a GPU would not see this eps.
        torch.manual_seed(0)
        shape = (1, self.config.output_features[ACTION].shape[0])
        device = next(self.policy.parameters()).device
        return {"sample_noise": _standard_normal(shape, dtype=torch.float32, device=device)}

    def eager(self, named):
        batch = self.batch({k: v for k, v in named.items() if k != "sample_noise"})
        self.policy.reset()
        torch.manual_seed(0)
        return self.action(self.policy.select_action(batch))

    def act(self, policy, batch):
        batch = dict(batch)
        eps = batch.pop("sample_noise")
        actor = policy.actor
        cache = None
        if policy.shared_encoder and actor.encoder.has_images:
            cache = actor.encoder.get_cached_image_features(batch)
        out = actor.network(actor.encoder(batch, cache=cache, detach=actor.encoder_is_shared))
        means = actor.mean_layer(out)
        if actor.fixed_std is None:
            std = torch.clamp(torch.exp(actor.std_layer(out)), actor.std_min, actor.std_max)
        else:
            std = actor.fixed_std.expand_as(means)
        return torch.tanh(means + std.sqrt() * eps)


class LanguageTokensAdapter(ChunkAdapter):
    """pi0, pi05: the prompt's token ids and mask, and the flow-matching noise, as inputs of the program.

    Their preprocessor tokenizes --task with PaliGemma's tokenizer, which lives on the Hugging Face hub, so
    offline the adapter feeds a prompt-shaped input instead: seeded ids (below PaliGemma's vocabulary size) in
    the prompt's positions and padding after them, the mask true over the prompt only (padding="max_length", as
    the tokenizer step pads). The prompt's length is estimated from --task: pi0's "<task>\n" and pi05's
    "Task: <task>, State: <one bin a state dim>;\nAction: ". The noise sample_actions would draw
    (chunk_size x max_action_dim) is an input, and eager gets the same.

    Option `vision_autocast` (export arg --vision_autocast) does what the fork's PaliGemmaWithExpertModel does:
    the vision tower's image features under torch.autocast(bfloat16) on CUDA when the policy runs in bf16
    (LeRobot 0.6.1 keeps SigLIP in float32).
    """

    name = "language_tokens_and_noise"
    preprocess = False
    TOKEN_IDS = 1024

    def __init__(self, policy, options: dict[str, Any] | None = None):
        super().__init__(policy, options)
        self.processors_why = ("not run: the preprocessor tokenizes with PaliGemma's tokenizer from the hub; frames "
                               "are converted and batched in the program; make_random's normalization is identity")
        self.vision_autocast = self._vision_autocast() if self.options.get("vision_autocast") else None

    def _vision_autocast(self) -> str:
        """Wrap embed_image in bf16 autocast, under the fork's condition (eval, bf16 policy, image on CUDA)."""
        towers = self.policy.model.paligemma_with_expert
        inner = towers.embed_image
        bf16 = str(getattr(self.config, "dtype", "")) == "bfloat16"

        def embed_image(image: Tensor) -> Tensor:
            enabled = not towers.training and bf16 and image.device.type == "cuda"
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=enabled):
                return inner(image)

        towers.embed_image = embed_image
        return "bf16 autocast of the vision tower on CUDA (the fork's)" if bf16 else \
            "asked, but the policy is not bf16: no autocast (the fork's condition)"

    def prompt_length(self) -> int:
        task = str(self.options.get("task") or "")
        words = len(task.split())
        if self.config.type == "pi05":
            return words + 2 * int(getattr(self.config, "max_state_dim", 32)) + 8
        return words + 3

    def observation(self, gen):
        obs = super().observation(gen)
        length = self.config.tokenizer_max_length
        prompt = min(length, self.prompt_length())
        tokens = torch.zeros(1, length, dtype=torch.long)
        tokens[0, :prompt] = torch.randint(1, self.TOKEN_IDS, (prompt,), generator=gen)
        obs[OBS_LANGUAGE_TOKENS] = tokens
        obs[OBS_LANGUAGE_MASK] = torch.arange(length).unsqueeze(0) < prompt
        return obs

    def extra_inputs(self, named, gen):
        noise = {"noise": torch.randn((1, self.config.chunk_size, self.config.max_action_dim), generator=gen)}
        device = next(iter(named.values())).device
        noise = {k: v.to(device) for k, v in noise.items()}
        return {**noise, **super().extra_inputs({**named, **noise}, gen)}

    def act(self, policy, batch):
        batch = dict(batch)
        noise = batch.pop("noise")
        policy.reset()
        return policy.predict_action_chunk(batch, noise=noise)  # float32, as the policy's own sample_noise

    def describe(self):
        return {**super().describe(), "tokens": f"prompt-shaped: {self.prompt_length()} seeded ids in [1, "
                f"{self.TOKEN_IDS}), padding after, mask over the prompt (no hub tokenizer)",
                "vision_autocast": self.vision_autocast}


class XVLAAdapter(LanguageTokensAdapter):
    """xvla: seeded token ids (its BART tokenizer is on the hub); the flow's starting noise, which its
    generate_actions draws with torch.randn, is one of the recorded draws (random_inputs.py)."""

    def __init__(self, policy, options: dict[str, Any] | None = None):
        ChunkAdapter.__init__(self, policy, options)
        self.processors_why = "not run: the preprocessor tokenizes with a tokenizer from the hub"
        self.vision_autocast = None

    def observation(self, gen):
        obs = ChunkAdapter.observation(self, gen)
        length = self.config.tokenizer_max_length
        obs[OBS_LANGUAGE_TOKENS] = torch.randint(0, self.TOKEN_IDS, (1, length), generator=gen)
        return obs

    def extra_inputs(self, named, gen):
        return ChunkAdapter.extra_inputs(self, named, gen)

    def act(self, policy, batch):
        policy.reset()
        return policy.predict_action_chunk(batch)

    def describe(self):
        return {**ChunkAdapter.describe(self), "tokens": f"seeded ids in [0, {self.TOKEN_IDS}) (no hub tokenizer)"}


class ForwardOnly:
    """A resumed export's adapter, the policy not loaded: the action is the `forward` method's first output."""

    name = "forward"
    compose = ChunkAdapter.compose


def make_adapter(policy: nn.Module, options: dict[str, Any] | None = None) -> ChunkAdapter:
    kind = policy.config.type
    if kind == "diffusion":
        return DiffusionAdapter(policy, options)
    if kind == "vqbet":
        return QueuedChunkAdapter(policy, _prepare_vqbet, options)
    if kind == "tdmpc":
        return QueuedChunkAdapter(policy, _prepare_tdmpc, options)
    if kind == "gaussian_actor":
        return GaussianActorAdapter(policy, options)
    if kind in ("pi0", "pi05"):
        return LanguageTokensAdapter(policy, options)
    if kind == "xvla":
        return XVLAAdapter(policy, options)
    return ChunkAdapter(policy, options)
