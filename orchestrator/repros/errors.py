"""When two failures are the same: an error's facts (the operators it names) and its normalized first line.

Shared by the repro generator (generate.py, in a torch build) and `export-matrix repro` (the orchestrator), so
both judge "reproduces" alike. Stdlib only.

- A fact is one operator the error names, as the compiler said it: `missing fallback kernel aten::detach_copy`
  (ExecuTorch's AOTI backend), `missing out variant aten::erfinv` (to_executorch), `not in Core ATen
  aten.erfinv.default` (the edge dialect's check), `lowering aten.convolution.default: <first line>` (Inductor's
  LoweringException). A cell whose error names three operators has three facts, and a repro per fact.
- Otherwise the first line, normalized: numbers as <N>, addresses as <ADDR>, graph node names as %<node>, paths as
  their file name, whitespace as one space.
A repro reproduces a fact when its error has that fact, and a first line when its normalized first line is equal.
"""

from __future__ import annotations

import re

NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?(?![\w])")
ADDRESS = re.compile(r"\b0x[0-9a-fA-F]+\b")
NODE = re.compile(r"%[A-Za-z_]\w*")
PATH = re.compile(r"(?:[\w.+-]*/)+([\w.+-]+)")
FALLBACK = re.compile(r"missing fallback kernels \(\d+ total\):((?:\s*- [\w:.]+)+)")
OUT_VARIANTS = re.compile(r"Missing out variants: \{([^}]*)\}")
NOT_CORE = re.compile(r"Operator torch\._ops\.(\w+\.\w+\.\w+) is not in Core ATen opset")
LOWERING = re.compile(r"LoweringException: .*?target: (\w+\.\w+\.\w+)", re.S)
NUMERIC_CHECK = "does not reproduce its test case"  # a difference built up across a program: no graph slice shows it


def one_line(text: str, limit: int = 2000) -> str:
    return " ".join(str(text).split())[:limit]


def first_line(error: str) -> str:
    """The error's type and the first line of its message (the next line too where the first ends in a colon:
    "SpecViolationError:" then the message)."""
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    head = lines[0] if lines else ""
    return one_line(f"{head} {lines[1]}" if head.rstrip().endswith(":") and len(lines) > 1 else head)


def normalize(line: str) -> str:
    text = ADDRESS.sub("<ADDR>", re.sub(r"^(?:builtins|__main__)\.", "", one_line(line)))
    text = PATH.sub(r"\1", NODE.sub("%<node>", text))
    return NUMBER.sub("<N>", text)


def facts(error: str) -> list[str]:
    """The operators the error names, each as one fact (see the module's doc), in the order it names them."""
    text = str(error)
    found = [f"missing fallback kernel {op}" for block in FALLBACK.findall(text)
             for op in re.findall(r"- ([\w:.]+)", block)]
    found += [f"missing out variant {op.strip().strip(chr(39))}" for block in OUT_VARIANTS.findall(text)
              for op in block.split(",") if op.strip()]
    found += [f"not in Core ATen {op}" for op in NOT_CORE.findall(text)]
    found += [f"lowering {op}: {normalize(first_line(text))}" for op in LOWERING.findall(text)]
    return list(dict.fromkeys(found))


def fact_operator(fact: str) -> str:
    """The operator a fact names, as the compiler spelled it (aten::split_copy.Tensor, aoti_torch_cuda_x_out)."""
    return fact.split(": ", 1)[0].rsplit(" ", 1)[-1]


def message(fact: str) -> str:
    """A fact as the compiler words it, for one operator alone: what the failure catalog's patterns know."""
    op = fact_operator(fact)
    if fact.startswith("missing fallback kernel "):
        return f"RuntimeError: Method forward missing fallback kernels (1 total):\n  - {op}\nPlease add them"
    if fact.startswith("missing out variant "):
        return f"RuntimeError: Missing out variants: {{'{op}'}}"
    if fact.startswith("not in Core ATen "):
        return f"SpecViolationError: Operator torch._ops.{op} is not in Core ATen opset"
    return fact.split(": ", 1)[-1]


def operator_names(op: str) -> list[tuple[str, str | None]]:
    """(name, overload) pairs a graph node's operator may have for an operator the compiler named: the edge
    dialect's view copies come from their views (detach_copy from detach), AOTI's C shims name the op and its
    overload (aoti_torch_cuda_scatter_value_out: scatter.value)."""
    op = re.sub(r"^(?:torch\._ops\.)?(?:aten|edge)(?:::|\.)", "", op)
    shim = re.match(r"aoti_torch_(?:cuda|cpu)_(\w+?)(?:_out)?$", op)
    if shim:
        name = shim[1]
        pairs: list[tuple[str, str | None]] = [(name, None)]
        if "_" in name:
            base, overload = name.rsplit("_", 1)
            pairs.append((base, overload))
        return pairs
    name, _, overload = op.partition(".")
    pairs = [(name, overload or None)]
    if name.endswith("_copy"):
        pairs.append((name.removesuffix("_copy"), overload or None))
    if name in ("detach_copy", "alias_copy"):
        pairs += [("detach", None), ("alias", None)]
    return pairs


def expectation(error: str) -> list[dict[str, str]]:
    """What a repro of this error must show: one expectation per fact, else the normalized first line."""
    found = facts(error)
    if found:
        return [{"fact": fact} for fact in found]
    return [{"first_line": normalize(first_line(error))}]


def reproduces(expected: dict[str, str], error: str | None) -> bool:
    if not error:
        return False
    if "fact" in expected:
        return expected["fact"] in facts(error)
    return normalize(first_line(error)) == expected["first_line"]


def slug(expected: dict[str, str]) -> str:
    """A file name for a repro of this expectation: its operator, else its first words."""
    text = fact_operator(expected["fact"]) if "fact" in expected else expected["first_line"]
    text = re.sub(r"^(?:torch\._ops\.)?aten(?:::|\.)", "", text.split(": ", 1)[-1] if "fact" not in expected
                  else text)
    return (re.sub(r"\W+", "_", text).strip("_").lower() or "failure")[:48]
