"""Exports from several threads at once; module() from many threads; internal failures are graphcap's.

Tracing is serialized by ``graphcap.api.TRACING_LOCK`` (torch's pre-dispatch
mode stack and current tracer are per process); these tests check that
concurrent exports of different models all succeed and are right, and that a
failure of the machinery is never blamed on the user's model.
"""
from __future__ import annotations

import threading

import pytest
import torch

import graphcap
from conftest import build_zoo
from graphcap.trace import recorder


class SmallTransformer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.head(self.encoder(x)).mean(dim=1)


def _resnet_job():
    built = build_zoo("tv_resnet18")
    return built.model.eval(), tuple(built.args)


def _transformer_job():
    torch.manual_seed(0)
    return SmallTransformer().eval(), (torch.randn(2, 5, 32),)


def _export_concurrently(jobs):
    """Export each (model, args) on its own thread, all started together; results by job."""
    results: list = [None] * len(jobs)
    start = threading.Barrier(len(jobs))

    def run(i):
        model, args = jobs[i]
        try:
            start.wait()
            results[i] = graphcap.export(model, args)
        except BaseException as e:  # reported by the test
            results[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def _assert_matches_eager(jobs, results):
    for (model, args), ep in zip(jobs, results):
        assert isinstance(ep, graphcap.ExportedProgram), f"{type(model).__name__}: {ep!r}"
        with torch.no_grad():
            torch.testing.assert_close(ep.module()(*args), model(*args), atol=1e-4, rtol=1e-4)


def test_two_threads_export_resnet_and_transformer():
    jobs = [_resnet_job(), _transformer_job()]
    _assert_matches_eager(jobs, _export_concurrently(jobs))


def test_four_threads_export_two_resnets_and_two_transformers():
    jobs = [_resnet_job(), _transformer_job(), _resnet_job(), _transformer_job()]
    _assert_matches_eager(jobs, _export_concurrently(jobs))


def test_run_decompositions_concurrently_with_exports():
    base_model, base_args = _transformer_job()
    base = graphcap.export(base_model, base_args)
    results: dict = {}

    def decompose():
        try:
            results["decomposed"] = base.run_decompositions()
        except BaseException as e:
            results["decomposed"] = e

    jobs = [_resnet_job()]
    t = threading.Thread(target=decompose)
    t.start()
    exported = _export_concurrently(jobs)
    t.join()
    _assert_matches_eager(jobs, exported)
    decomposed = results["decomposed"]
    assert isinstance(decomposed, graphcap.ExportedProgram), repr(decomposed)
    with torch.no_grad():
        torch.testing.assert_close(decomposed.module()(*base_args), base_model(*base_args), atol=1e-4, rtol=1e-4)


def test_module_called_from_many_threads_at_once_stays_correct():
    model, args = _transformer_job()
    module = graphcap.export(model, args).module()
    inputs = [torch.randn(2, 5, 32) for _ in range(8)]
    with torch.no_grad():
        expected = [model(x) for x in inputs]
    got: list = [None] * len(inputs)
    start = threading.Barrier(len(inputs))

    def run(i):
        start.wait()
        with torch.no_grad():
            for _ in range(3):
                got[i] = module(inputs[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, atol=1e-4, rtol=1e-4)


def test_internal_failure_is_reported_as_graphcaps_not_the_models(monkeypatch):
    # a bug inside graphcap's recorder: the tracer it reads is gone
    monkeypatch.setattr(recorder.fx_private, "current_make_fx_tracer", lambda: None)
    model, args = _transformer_job()
    with pytest.raises(graphcap.InternalError) as info:
        graphcap.export(model, args)
    err = info.value
    assert not isinstance(err, graphcap.TraceError)
    assert isinstance(err, AttributeError)  # still the original's type, for except clauses
    assert isinstance(err.__cause__, AttributeError)
    text = str(err)
    assert "graphcap failed while tracing SmallTransformer" in text
    assert "not in SmallTransformer" in text and "raised AttributeError while" not in text


def _raiser_from(filename: str, exc: str):
    """A function whose frame looks like it is in ``filename`` (as the traceback sees it)."""
    namespace: dict = {}
    exec(compile(f"def fail(x):\n    raise {exc}\n", filename, "exec"), namespace)
    return namespace["fail"]


def test_torch_machinery_assertion_is_reported_as_internal():
    # what two unserialized traces produced: torch's mode stack asserting
    pop = _raiser_from("/site-packages/torch/utils/_python_dispatch.py",
                       "AssertionError('Trying to pop empty mode stack')")

    class Model(torch.nn.Module):
        def forward(self, x):
            return pop(x.sin())

    with pytest.raises(graphcap.InternalError) as info:
        graphcap.export(Model(), (torch.ones(3),))
    assert isinstance(info.value, AssertionError) and not isinstance(info.value, graphcap.TraceError)
    assert "Model raised" not in str(info.value) and "graphcap failed while tracing Model" in str(info.value)
    assert "test_threads.py" in str(info.value)  # where the user's code was when it failed


def test_operator_input_checks_stay_the_users():
    # torch's operator implementations validate the user's arguments: not internal
    check = _raiser_from("/site-packages/torch/_refs/__init__.py", "RuntimeError('shape is invalid')")
    with pytest.raises(graphcap.TraceError) as info:
        graphcap.export(lambda x: check(x), (torch.ones(3),))
    assert not isinstance(info.value, graphcap.InternalError)
    # an assertion in torch.nn.functional checks the user's arguments too
    nn_assert = _raiser_from("/site-packages/torch/nn/functional.py", "AssertionError('embed_dim mismatch')")
    with pytest.raises(graphcap.TraceError):
        graphcap.export(lambda x: nn_assert(x), (torch.ones(3),))


def test_users_own_errors_stay_the_users():
    def asserts(x):
        assert x.shape[0] == 3, "needs three rows"
        return x

    def bad_view(x):
        return x.view(-1, 7)

    with pytest.raises(graphcap.TraceError) as info:
        graphcap.export(asserts, (torch.ones(2),))
    assert not isinstance(info.value, graphcap.InternalError) and "needs three rows" in str(info.value)
    with pytest.raises(graphcap.TraceError) as info:
        graphcap.export(bad_view, (torch.ones(5),))
    assert not isinstance(info.value, graphcap.InternalError)
    assert "bad_view raised RuntimeError" in str(info.value)
    # a builtin graphcap replaces while tracing re-raises the user's mistake as the user's

    def empty_max(x):
        return x * max([])

    with pytest.raises(graphcap.TraceError) as info:
        graphcap.export(empty_max, (torch.ones(2),))
    assert not isinstance(info.value, graphcap.InternalError) and isinstance(info.value, ValueError)
