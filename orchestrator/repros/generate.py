"""Generate standalone repros of a failed cell from the exported programs it kept (exporters/failure_evidence.py).

    <python> orchestrator/repros/generate.py --programs CELL/bundle/programs --out DIR [--seconds 600]

Runs in the cell's torch build (it loads torch.export programs and lowers them as the cell's exporter did). For
each thing the cell's error says (errors.py: one per operator it names, else its first line) it looks for the
smallest part of a method's graph that fails the same way:

1. candidates: the nodes of the operator the error names (errors.operator_names), else the nodes whose stack
   trace holds the innermost user frame the error quotes (`File "x.py", line N`); one-node programs of them, one
   per distinct operator, input shapes, dtypes and arguments (from the nodes' metadata), until one fails the same
   way;
2. otherwise a candidate with the operator nodes that use it (then also those it uses);
3. otherwise delta debugging (ddmin) over the candidates, then over every operator node of the method, bounded
   by --seconds, keeping the part that still fails the same way.

A part becomes a script (script.py's form: torch and ExecuTorch only, the module with its parameters' and
inputs' shapes and dtypes, the exporter's partitioner and compile settings, versions and device printed, exit 1
with `Repro error: <the error>`), written to DIR/<slug>.py; each trial runs that very source in this process.
DIR/generate.json says, per expectation, the script, how it was found, its nodes and the seconds spent.

Imports only stdlib at module level: the file runs in a torch build's interpreter, never in the orchestrator's.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import errors  # noqa: E402
import script  # noqa: E402

SKIPPED = ("_assert_tensor_metadata", "_assert_scalar", "sym_constrain_range_for_size", "_assert_async")
MAX_ONE_NODE_TRIES = 12


class Unrepresentable(ValueError):
    """A part of the graph that a standalone script cannot hold (a higher-order op, a symbolic size)."""


def op_nodes(ep: Any) -> list[Any]:
    """The graph's operator nodes a script can call: ATen-like OpOverloads, in graph order."""
    import torch

    return [n for n in ep.graph.nodes if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
            and n.target._overloadpacket.__name__ not in SKIPPED]


def signature(node: Any) -> str:
    """Operator, arguments' shapes, dtypes and literal values: one-node programs with the same are the same."""
    def show(value: Any) -> str:
        val = getattr(value, "meta", {}).get("val") if hasattr(value, "meta") else None
        if val is not None and hasattr(val, "shape"):
            return f"{str(val.dtype).removeprefix('torch.')}{list(val.shape)}"
        if isinstance(value, (list, tuple)):
            return "[" + ",".join(show(v) for v in value) + "]"
        return repr(value)
    kwargs = sorted((k, show(v)) for k, v in node.kwargs.items())
    return f"{node.target}({', '.join(show(a) for a in node.args)}; {kwargs})"


class Program:
    """One method's exported program and how its parts become scripts."""

    def __init__(self, method: str, ep: Any, settings: dict[str, Any]):
        self.method, self.ep, self.settings = method, ep, settings
        self.kinds = {spec.arg.name: spec.kind.name for spec in ep.graph_signature.input_specs
                      if hasattr(spec.arg, "name")}
        self.nodes = op_nodes(ep)
        self.order = {n: i for i, n in enumerate(ep.graph.nodes)}

    def part(self, chosen: list[Any]) -> script.Part:
        """The chosen nodes (and the getitems of their tuple outputs) as a module: every value they take from
        outside the part is an input, or a parameter/buffer where the program lifted one."""
        import torch

        chosen_set = set(chosen)
        for node in list(chosen_set):
            chosen_set.update(u for u in node.users if u.op == "call_function" and u.target.__name__ == "getitem")
        ordered = sorted(chosen_set, key=self.order.__getitem__)
        part = script.Part()
        names: dict[Any, str] = {}

        def outside(value: Any) -> str:
            if value not in names:
                val = value.meta.get("val")
                if not isinstance(val, torch.Tensor):
                    raise Unrepresentable(f"{value.name} is not a tensor ({type(val).__name__})")
                kind = self.kinds.get(value.name, "USER_INPUT") if value.op == "placeholder" else "USER_INPUT"
                names[value] = part.add_tensor(kind, tuple(int(s) for s in val.shape), val.dtype, value.name)
            return names[value]

        def lit(value: Any) -> str:
            if hasattr(value, "op") and hasattr(value, "meta"):  # a graph node
                return names[value] if value in names else outside(value)
            if isinstance(value, (list, tuple)):  # cat's and stack's tensors come as a list of nodes
                inner = ", ".join(lit(v) for v in value)
                return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
            return script.literal(value)

        for node in ordered:
            if node.target.__name__ == "getitem":
                if node.args[0] not in chosen_set:
                    continue
                names[node] = part.add_line(f"{names[node.args[0]]}[{node.args[1]}]")
                continue
            args = [lit(a) for a in node.args] + [f"{k}={lit(v)}" for k, v in node.kwargs.items()]
            ns, name = node.target.namespace, node.target._overloadpacket.__name__
            names[node] = part.add_line(f"torch.ops.{ns}.{name}.{node.target._overloadname}({', '.join(args)})",
                                        comment=_where(node))
        for node in ordered:  # what leaves the part: values nothing inside it uses, and those used outside it
            val = node.meta.get("val")
            if node in names and (not set(node.users) <= chosen_set or not node.users) and _tensors(val):
                part.outputs.append(names[node])
        if not part.outputs:
            raise Unrepresentable("the part returns no tensor")
        return part


def _tensors(val: Any) -> bool:
    import torch

    if isinstance(val, torch.Tensor):
        return True
    return isinstance(val, (list, tuple)) and bool(val) and all(isinstance(v, torch.Tensor) for v in val)


def _where(node: Any) -> str:
    """The node's innermost source line (`modeling_x.py:12`), for a comment in the script."""
    frames = re.findall(r'File "([^"]+)", line (\d+)', node.meta.get("stack_trace") or "")
    return f"{Path(frames[-1][0]).name}:{frames[-1][1]}" if frames else ""


def quoted_frames(error: str) -> list[tuple[str, int]]:
    """(file name, line) of the frames an error quotes, innermost last (Inductor's `Found from`, `Original
    traceback`)."""
    return [(Path(f).name, int(line)) for f, line in re.findall(r'File "([^"]+)", line (\d+)', error)]


class Search:
    """Trials against one expectation, each the generated script's source run in this process."""

    def __init__(self, program: Program, expected: dict[str, str], meta: dict[str, Any], deadline: float):
        self.program, self.expected, self.meta, self.deadline = program, expected, meta, deadline
        self.tried: dict[frozenset, bool] = {}
        self.last_error: str | None = None

    def source(self, nodes: list[Any], how: str) -> str:
        return script.render(self.program.part(nodes), self.meta, self.program.method, self.expected, how)

    def fails(self, nodes: list[Any]) -> bool:
        key = frozenset(nodes)
        if key not in self.tried:
            try:
                source = self.source(nodes, "trial")
            except Unrepresentable:
                self.tried[key] = False
                return False
            error = run_source(source)
            self.tried[key] = errors.reproduces(self.expected, error)
            self.last_error = error
        return self.tried[key]

    def one_node(self, candidates: list[Any]) -> Any | None:
        seen = set()
        for node in candidates:
            sig = signature(node)
            if sig in seen or time.monotonic() > self.deadline:
                continue
            seen.add(sig)
            if len(seen) > MAX_ONE_NODE_TRIES:
                break
            if self.fails([node]):
                return node
        return None

    def neighbourhood(self, candidates: list[Any]) -> list[Any] | None:
        """A candidate with the operator nodes that use it, then also those it uses: where a one-node program
        does not fail (a view whose copy the backend meets only with a consumer)."""
        ops = set(self.program.nodes)
        seen = set()
        for node in candidates:
            sig = signature(node)
            if sig in seen or len(seen) >= MAX_ONE_NODE_TRIES // 2 or time.monotonic() > self.deadline:
                continue
            seen.add(sig)
            users = [u for u in node.users if u in ops]
            producers = [a for a in node.all_input_nodes if a in ops]
            for part in ([node, *users], [*producers, node, *users]):
                if len(part) > 1 and self.fails(part):
                    return part
        return None

    def ddmin(self, items: list[Any]) -> list[Any] | None:
        """Zeller's ddmin: the smallest failing subset it reaches before the deadline (None: the whole does not
        fail the same way, or no time to know)."""
        if not self.fails(items):
            return None
        n = 2
        while len(items) >= 2 and time.monotonic() < self.deadline:
            size = -(-len(items) // n)
            chunks = [items[i:i + size] for i in range(0, len(items), size)]
            reduced = False
            for chunk in chunks:
                if time.monotonic() > self.deadline:
                    break
                if self.fails(chunk):
                    items, n, reduced = chunk, 2, True
                    break
            if not reduced:  # complements (with 2 chunks, the other chunk: already tried, cached)
                for chunk in chunks:
                    if time.monotonic() > self.deadline:
                        break
                    rest = [x for x in items if x not in chunk]
                    if self.fails(rest):
                        items, n, reduced = rest, max(n - 1, 2), True
                        break
            if not reduced:
                if n >= len(items):
                    break
                n = min(len(items), 2 * n)
        return items


def run_source(source: str) -> str | None:
    """The source's `main()` run here: None where it does not fail, else its error line (quietly: a trial's
    prints and warnings are noise)."""
    namespace: dict[str, Any] = {"__name__": "generated_repro"}
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            exec(compile(source, "<generated repro>", "exec"), namespace)  # noqa: S102 - our own generated code
            namespace["main"]()
    except Exception as exc:  # noqa: BLE001 - the error is what a trial measures
        return script.error_line(exc)
    return None


def candidates_for(program: Program, expected: dict[str, str], error: str) -> list[Any]:
    """The nodes of the operator the fact names; else those whose stack trace holds the innermost frame the
    error quotes that some node has."""
    traces = {n: set(quoted_frames(n.meta.get("stack_trace") or "")) for n in program.nodes}
    quoted = quoted_frames(error)
    if "fact" in expected:
        wanted = errors.operator_names(errors.fact_operator(expected["fact"]))
        exact = [n for n in program.nodes if (n.target._overloadpacket.__name__, n.target._overloadname) in wanted]
        named = [n for n in program.nodes if (n.target._overloadpacket.__name__, None) in wanted]
        # those at the line the error quotes first (diffusion's ConvTranspose1d among its many convolutions)
        return sorted(dict.fromkeys([*exact, *named]), key=lambda n: not traces[n] & set(quoted[-1:]))
    for frame in reversed(quoted):
        hits = [n for n in program.nodes if frame in traces[n]]
        if hits:
            return hits
    return []


def generate(programs_dir: Path, out: Path, seconds: float) -> dict[str, Any]:
    import torch

    meta = json.loads((programs_dir / "programs.json").read_text())
    error = meta["error"]
    result: dict[str, Any] = {"step": meta["step"], "exporter": meta["exporter"], "error": errors.first_line(error),
                              "targets": []}
    if errors.NUMERIC_CHECK in error:
        result["why"] = ("a numerical check failure builds up across the whole program; no part of the graph "
                         "shows it alone: the repro is the export command")
        return result
    started = time.monotonic()
    programs = [Program(m, torch.export.load(programs_dir / f), meta) for m, f in meta["methods"].items()]
    expectations = errors.expectation(error)
    for index, expected in enumerate(expectations):
        share = (seconds - (time.monotonic() - started)) / (len(expectations) - index)
        deadline = time.monotonic() + max(share, 0.0)
        target: dict[str, Any] = {"expected": expected, "slug": errors.slug(expected), "script": None}
        t0 = time.monotonic()
        for program in programs:
            search = Search(program, expected, meta, deadline)
            candidates = candidates_for(program, expected, error)
            node = search.one_node(candidates)
            found, how = ([node], f"a one-node program ({node.target}) of method {program.method}") if node else \
                (search.neighbourhood(candidates), f"a node with its neighbours, of method {program.method}")
            if not found and candidates:
                found = search.ddmin(candidates)
                how = f"delta debugging over the {len(candidates)} nodes the error points at ({program.method})"
            if not found:
                found = search.ddmin(program.nodes)
                how = f"delta debugging over method {program.method}'s {len(program.nodes)} operator nodes"
            target.update(tried=target.get("tried", 0) + len(search.tried), last_error=search.last_error)
            if found:
                name = f"{target['slug']}.py"
                (out / name).write_text(search.source(found, how))
                target.update(script=name, how=how, nodes=len(found), method=program.method)
                break
        target["seconds"] = round(time.monotonic() - t0, 1)
        if not target["script"]:
            target["why"] = ("no part of the graph failed the same way within the time bound"
                             if time.monotonic() < deadline else f"no failing part found in {seconds:g} s")
        result["targets"].append(target)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="generate.py", description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=Path, required=True, help="a failed cell's bundle/programs folder")
    parser.add_argument("--out", type=Path, required=True, help="where the scripts and generate.json go")
    parser.add_argument("--seconds", type=float, default=600.0, help="the search's time bound (all expectations)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    result = generate(args.programs, args.out, args.seconds)
    (args.out / "generate.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    print("Repro generated: " + json.dumps(result, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
