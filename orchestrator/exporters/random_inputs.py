"""Every random draw a policy makes in its chunk becomes an input of the program, as the fork's noise input does.

A policy that samples (flow matching, DDPM steps, VQ-BeT's multinomial, TD-MPC's planning) draws inside its
call; an exported program would draw its own numbers and a check of it against eager would compare two random
draws. So the adapter first runs the policy once with `recording()`: each call of the random functions below is
answered from one seeded torch.Generator and kept. Eager and the traced module then run under `replaying(draws)`,
where the same calls are answered, in order, with the kept tensors, which the program takes as inputs.

A random op that none of these patches answered is left in the traced graph; `random_ops` finds it (by PyTorch's
own `nondeterministic_seeded` tag) and the exporter refuses the program before lowering it (`rng_in_program`).

Multinomial sampling is answered by inverse-CDF sampling from a kept uniform draw (one category per row, or with
replacement): the same distribution, and a computation both sides run alike.

Imports only stdlib and torch: it runs in the torch build's interpreter, next to the exporters.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor

DRAW_PREFIX = "rng_"
_PATCHED = ("randn", "rand", "randn_like", "rand_like", "randint", "multinomial")
_TENSOR_PATCHED = ("normal_", "uniform_")
_RANDN, _RAND, _RANDINT = torch.randn, torch.rand, torch.randint  # the real ones, while the patches answer


class DrawMismatch(RuntimeError):
    """The policy asked for a draw other than the one recorded at this position: its sampling is not fixed."""


def _size(args: tuple) -> tuple[int, ...]:
    if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)):
        args = tuple(args[0])
    return tuple(int(a) for a in args)


def _sample_multinomial(probs: Tensor, uniform: Tensor) -> Tensor:
    """Category indices of `probs` (rows x categories) for `uniform` (rows x samples) by inverse CDF."""
    squeeze = probs.dim() == 1
    rows = probs.reshape(1, -1) if squeeze else probs
    cdf = torch.cumsum(rows.float(), dim=-1)
    cdf = cdf / cdf[..., -1:]
    picks = (cdf.unsqueeze(-2) < uniform.unsqueeze(-1)).sum(-1)
    picks = picks.clamp(max=rows.shape[-1] - 1).to(torch.long)
    return picks[0] if squeeze else picks


@contextmanager
def _patched(answer: Callable[[str, tuple, dict, Callable], Tensor]) -> Iterator[None]:
    """torch's random functions (and Tensor.normal_/uniform_) answered by `answer(name, args, kwargs, original)`."""
    originals = {name: getattr(torch, name) for name in _PATCHED}
    tensor_originals = {name: getattr(torch.Tensor, name) for name in _TENSOR_PATCHED}

    def make(name: str) -> Callable:
        def call(*args: Any, **kwargs: Any) -> Tensor:
            return answer(name, args, kwargs, originals[name])
        return call

    def make_inplace(name: str) -> Callable:
        def call(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
            return self.copy_(answer(name, (self, *args), kwargs, tensor_originals[name]))
        return call

    for name in _PATCHED:
        setattr(torch, name, make(name))
    for name in _TENSOR_PATCHED:
        setattr(torch.Tensor, name, make_inplace(name))
    try:
        yield
    finally:
        for name, fn in originals.items():
            setattr(torch, name, fn)
        for name, fn in tensor_originals.items():
            setattr(torch.Tensor, name, fn)


def _request(name: str, args: tuple, kwargs: dict) -> tuple[str, tuple[int, ...], torch.dtype, Any] | None:
    """(kind, shape, dtype, device) of the draw a call asks for; None where it is not answered (left in the graph)."""
    if name in ("randn", "rand"):
        shape = _size(args)
        dtype = kwargs.get("dtype") or torch.get_default_dtype()
        return ("normal" if name == "randn" else "uniform", shape, dtype, kwargs.get("device"))
    if name in ("randn_like", "rand_like", "normal_", "uniform_"):
        like = args[0]
        kind = "normal" if name in ("randn_like", "normal_") else "uniform"
        if name == "normal_" and (args[1:] or kwargs.get("mean", 0) != 0 or kwargs.get("std", 1) != 1):
            kind = f"normal({_arg(args, kwargs, 1, 'mean', 0)}, {_arg(args, kwargs, 2, 'std', 1)})"
        if name == "uniform_":
            kind = f"uniform({_arg(args, kwargs, 1, 'from', 0)}, {_arg(args, kwargs, 2, 'to', 1)})"
        return (kind, tuple(like.shape), kwargs.get("dtype") or like.dtype, kwargs.get("device") or like.device)
    if name == "randint":
        positional = [a for a in args if not isinstance(a, (tuple, list, torch.Size))]
        low, high = (0, positional[0]) if len(positional) == 1 else (positional[0], positional[1])
        shape = _size(next(a for a in args if isinstance(a, (tuple, list, torch.Size)))) \
            if any(isinstance(a, (tuple, list, torch.Size)) for a in args) else _size(kwargs["size"])
        return (f"randint({int(low)}, {int(high)})", shape, kwargs.get("dtype") or torch.long, kwargs.get("device"))
    if name == "multinomial":
        probs, samples = args[0], (args[1] if len(args) > 1 else kwargs["num_samples"])
        replacement = args[2] if len(args) > 2 else kwargs.get("replacement", False)
        if int(samples) != 1 and not replacement:
            return None
        rows = probs.shape[:-1] if probs.dim() > 1 else (1,)
        return ("multinomial", (*rows, int(samples)), torch.float32, probs.device)
    return None


def _arg(args: tuple, kwargs: dict, index: int, key: str, default: Any) -> Any:
    return args[index] if len(args) > index else kwargs.get(key, default)


def _draw(kind: str, shape: tuple[int, ...], gen: torch.Generator) -> Tensor:
    if kind == "normal":
        return _RANDN(shape, generator=gen)
    if kind in ("uniform", "multinomial"):
        return _RAND(shape, generator=gen)
    numbers = [float(x) for x in re.findall(r"-?[\d.e+-]+", kind)]
    if kind.startswith("normal("):
        return _RANDN(shape, generator=gen) * numbers[1] + numbers[0]
    if kind.startswith("uniform("):
        return _RAND(shape, generator=gen) * (numbers[1] - numbers[0]) + numbers[0]
    low, high = int(numbers[0]), int(numbers[1])
    return _RANDINT(low, high, shape, generator=gen)


def _answer_value(name: str, args: tuple, drawn: Tensor, dtype: torch.dtype, device: Any) -> Tensor:
    if name == "multinomial":
        return _sample_multinomial(args[0], drawn.to(args[0].device))
    return drawn.to(device=device, dtype=dtype) if device is not None else drawn.to(dtype=dtype)


@contextmanager
def recording(gen: torch.Generator, draws: list[Tensor]) -> Iterator[None]:
    """Answer each random call from `gen` (CPU, seeded) and append the draw (float32 or int64, CPU) to `draws`."""

    def answer(name: str, args: tuple, kwargs: dict, original: Callable) -> Tensor:
        asked = _request(name, args, kwargs)
        if asked is None:
            return original(*args, **kwargs)
        kind, shape, dtype, device = asked
        drawn = _draw(kind, shape, gen)
        draws.append(drawn)
        return _answer_value(name, args, drawn, dtype, device)

    with _patched(answer):
        yield


@contextmanager
def replaying(draws: list[Tensor]) -> Iterator[None]:
    """Answer the random calls, in order, with `draws` (the program's inputs, or eager's copies of them)."""
    queue = list(draws)

    def answer(name: str, args: tuple, kwargs: dict, original: Callable) -> Tensor:
        asked = _request(name, args, kwargs)
        if asked is None:
            return original(*args, **kwargs)
        kind, shape, dtype, device = asked
        if not queue:
            raise DrawMismatch(f"the policy drew more than the {len(draws)} recorded draws ({name} {shape})")
        drawn = queue.pop(0)
        if tuple(drawn.shape) != shape:
            raise DrawMismatch(f"draw {len(draws) - len(queue) - 1} was recorded as {tuple(drawn.shape)}, "
                               f"the policy now asks {name} {shape}")
        return _answer_value(name, args, drawn, dtype, device)

    with _patched(answer):
        yield


def draw_names(count: int) -> list[str]:
    return [f"{DRAW_PREFIX}{i}" for i in range(count)]


def split_draws(named: dict[str, Tensor]) -> tuple[dict[str, Tensor], list[Tensor]]:
    """The observation inputs, and the draw inputs in their order."""
    draws = [named[k] for k in sorted((k for k in named if k.startswith(DRAW_PREFIX)), key=lambda k: int(k[4:]))]
    return {k: v for k, v in named.items() if not k.startswith(DRAW_PREFIX)}, draws


def random_ops(graph: Any) -> list[str]:
    """`aten.randn at modeling_x.py:123` for each random op left in an exported graph (nondeterministic_seeded)."""
    found = []
    for node in graph.nodes:
        target = node.target
        if node.op != "call_function" or not hasattr(target, "tags"):
            continue
        if torch.Tag.nondeterministic_seeded not in target.tags or _inert_dropout(node):
            continue
        op = str(target.name()).replace("::", ".").split(".default")[0]
        found.append(f"{op} at {_source_line(node.meta.get('stack_trace') or '')}")
    return list(dict.fromkeys(found))


def _inert_dropout(node: Any) -> bool:
    """A dropout traced in eval mode (train=False) or with p=0 draws nothing."""
    if "dropout" not in str(node.target):
        return False
    args = list(node.args) + [None] * 3
    train = node.kwargs.get("train", args[2])
    p = node.kwargs.get("p", args[1])
    return train is False or p == 0


def _source_line(stack: str) -> str:
    """The innermost `file.py:line` of a node's stack trace that is not torch's or this package's own."""
    frames = re.findall(r'File "([^"]+)", line (\d+)', stack)
    ours = ("/torch/", "random_inputs.py", "policy_adapters.py")
    for path, line in reversed(frames):
        if not any(part in path for part in ours):
            return f"{path.rsplit('/', 1)[-1]}:{line}"
    return f"{frames[-1][0].rsplit('/', 1)[-1]}:{frames[-1][1]}" if frames else "an unknown line"
