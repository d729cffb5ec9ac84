"""The embedded exporters' random draws as program inputs (orchestrator/exporters/random_inputs.py), for real:
a module that samples is recorded, traced with torch.export under the replayed draws, and its program matches
eager; a draw nobody answers is found in the traced graph with its op and source line."""

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "orchestrator" / "exporters"))
import random_inputs  # noqa: E402


class Sampler(torch.nn.Module):
    """Flow-matching-like noise, a categorical pick and an in-place uniform, as policies draw them."""

    def forward(self, x):
        noise = torch.randn(x.shape[0], 4)
        probs = torch.softmax(x, dim=-1)
        pick = torch.multinomial(probs, num_samples=1)
        jitter = torch.empty(x.shape[0], 4).uniform_(-0.5, 0.5)
        return noise + pick.float() + jitter


class Unanswered(torch.nn.Module):
    def forward(self, x):
        return torch.bernoulli(torch.sigmoid(x))  # not one of the answered calls


def _recorded(module, x):
    draws = []
    with torch.no_grad(), random_inputs.recording(torch.Generator().manual_seed(0), draws):
        first = module(x)
    return first, draws


def test_draws_become_inputs_and_the_program_matches_eager():
    x = torch.randn(3, 5)
    model = Sampler().eval()
    first, draws = _recorded(model, x)
    assert [tuple(d.shape) for d in draws] == [(3, 4), (3, 1), (3, 4)]

    class WithDraws(torch.nn.Module):
        def forward(self, x, *draws):
            with random_inputs.replaying(list(draws)):
                return model(x)

    with torch.no_grad(), random_inputs.replaying(draws):
        eager = model(x)
    assert torch.equal(eager, first)  # replaying gives the recorded run again
    ep = torch.export.export(WithDraws(), (x, *draws))
    assert random_inputs.random_ops(ep.graph) == []
    assert torch.equal(ep.module()(x, *draws), eager)
    other = [torch.rand_like(d) if d.is_floating_point() else d for d in draws]
    assert not torch.equal(ep.module()(x, *other), eager)  # the draws are inputs, not constants


def test_same_seed_same_draws_and_multinomial_follows_its_probabilities():
    x = torch.tensor([[10.0, -10.0, -10.0], [-10.0, -10.0, 10.0]])
    _, a = _recorded(Sampler(), x)
    _, b = _recorded(Sampler(), x)
    assert all(torch.equal(p, q) for p, q in zip(a, b, strict=True))
    picks = random_inputs._sample_multinomial(torch.softmax(x, -1), torch.rand(2, 1000))
    assert picks[0].eq(0).float().mean() > 0.99 and picks[1].eq(2).float().mean() > 0.99


def test_a_draw_that_asks_for_another_shape_is_refused():
    with pytest.raises(random_inputs.DrawMismatch, match=r"recorded as \(2, 4\)"):
        with random_inputs.replaying([torch.zeros(2, 4)]):
            torch.randn(3, 4)


def test_an_unanswered_random_op_is_named_with_its_source_line():
    ep = torch.export.export(Unanswered(), (torch.randn(2, 3),))
    found = random_inputs.random_ops(ep.graph)
    assert len(found) == 1
    assert found[0].startswith("aten.bernoulli at test_random_inputs.py:")
    line = int(found[0].rsplit(":", 1)[1])
    assert "torch.bernoulli" in Path(__file__).read_text().splitlines()[line - 1]


def test_eval_mode_dropout_is_not_a_random_op():
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Dropout(0.1)).eval()
    assert random_inputs.random_ops(torch.export.export(model, (torch.randn(2, 3),)).graph) == []
    model.train()
    assert random_inputs.random_ops(torch.export.export(model, (torch.randn(2, 3),)).graph)
