"""transformers architectures with dynamic shapes (docs/torch-suite.md, "transformers architectures
audit"): the defects the audit found, each from the behaviour, on tiny random configs, plus small
models that show the same mechanism without transformers."""
from __future__ import annotations

import io

import pytest
import torch
import transformers
from torch import nn

import graphcap
from graphcap import Dim
from graphcap.errors import ConstraintViolationError

VOCAB = 61


# ---------------------------------------------------------------- a guard on the smaller of two sizes


class WindowByMin(nn.Module):
    """Swin's ``if min(input_resolution) <= window_size``: a branch on the smaller of two sizes."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if min(x.shape[2], x.shape[3]) <= 4:
            return x * 2
        return x + 1


def test_a_branch_on_the_smaller_of_two_sizes_suggests_a_min_for_each():
    h, w, b = Dim("h", min=1, max=9), Dim("w", min=1, max=9), Dim("b", min=1, max=4)
    with pytest.raises(ConstraintViolationError) as info:
        graphcap.export(WindowByMin(), (torch.randn(2, 3, 6, 8),), dynamic_shapes=({0: b, 2: 2 * h, 3: 2 * w},))
    text = str(info.value)
    assert "Constraints violated (h, w)!" in text  # the batch is not named: it plays no part
    assert "h = Dim('h', min=3, max=9)" in text and "w = Dim('w', min=3, max=9)" in text
    # the suggested spec exports and is right over its whole range
    spec = graphcap.refine_dynamic_shapes_from_suggested_fixes(text, ({0: b, 2: 2 * h, 3: 2 * w},))
    ep = graphcap.export(WindowByMin(), (torch.randn(2, 3, 6, 8),), dynamic_shapes=spec)
    for size in [(1, 6, 6), (4, 18, 6), (3, 8, 18)]:
        x = torch.randn(size[0], 3, size[1], size[2])
        torch.testing.assert_close(ep.module()(x), WindowByMin()(x))
    with pytest.raises(AssertionError):
        ep.module()(torch.randn(1, 3, 4, 6))


class LargestAtMost(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if max(x.shape[0], x.shape[1] + 1) < 8:
            return x.sum(0)
        return x.mean(0)


def test_a_branch_on_the_larger_of_two_sizes_bounds_each_from_above():
    a, c = Dim("a", min=1, max=20), Dim("c", min=1, max=20)
    with pytest.raises(ConstraintViolationError) as info:
        graphcap.export(LargestAtMost(), (torch.randn(3, 4),), dynamic_shapes=({0: a, 1: c},))
    text = str(info.value)
    assert "a = Dim('a', min=1, max=7)" in text and "c = Dim('c', min=1, max=6)" in text


def test_a_branch_on_the_smaller_of_two_sizes_within_the_ranges_exports():
    h, w = Dim("h", min=3, max=9), Dim("w", min=5, max=9)
    ep = graphcap.export(WindowByMin(), (torch.randn(1, 3, 6, 12),), dynamic_shapes=({2: 2 * h, 3: 2 * w},))
    x = torch.randn(2, 3, 18, 10)
    torch.testing.assert_close(ep.module()(x[:1]), WindowByMin()(x[:1]))


def test_swin_refused_from_one_and_right_from_two():
    cfg = transformers.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
                                  window_size=4)
    torch.manual_seed(0)
    model = transformers.SwinModel(cfg).eval()
    b = Dim("b", min=1, max=4)
    h1, w1 = Dim("h", min=1, max=3), Dim("w", min=1, max=3)
    x = torch.randn(2, 3, 64, 96)
    with pytest.raises(ConstraintViolationError) as info:
        graphcap.export(model, (x,), dynamic_shapes=({0: b, 2: 32 * h1, 3: 32 * w1},))
    assert "Constraints violated (h, w)!" in str(info.value)
    assert "h = Dim('h', min=2, max=3)" in str(info.value)
    h, w = Dim("h", min=2, max=3), Dim("w", min=2, max=3)
    ep = graphcap.export(model, (x,), dynamic_shapes=({0: b, 2: 32 * h, 3: 32 * w},))
    for y in (torch.randn(1, 3, 64, 64), torch.randn(3, 3, 96, 64)):  # torch's program refuses batch 1 here
        with torch.no_grad():
            torch.testing.assert_close(ep.module()(y).last_hidden_state, model(y).last_hidden_state)


# ---------------------------------------------------------------- a relation with an automatic dim


class PastAndNew(nn.Module):
    """A mask as long as the past plus the new positions, its length left to export (Dim.AUTO)."""

    def forward(self, new: torch.Tensor, past: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        total = past.shape[1] + new.shape[1]
        if mask.shape[1] > total:  # transformers' masking code asks both, as inequalities
            raise ValueError("mask too long")
        if total - mask.shape[1] > 0:
            mask = torch.nn.functional.pad(mask, (0, total - mask.shape[1]), value=1.0)
        scores = torch.cat([past, new], dim=1)[:, :, :1] * mask[..., None]
        return scores[:, -new.shape[1]:] if new.shape[1] > 1 else scores[:, -1:] + 0.0


def _past_and_new(b: int, s: int, p: int) -> tuple[torch.Tensor, ...]:
    return torch.randn(b, s, 4), torch.randn(b, p, 4), torch.rand(b, p + s)


def test_a_mask_of_automatic_length_tied_to_two_dims_runs_and_refuses_a_longer_one():
    b, s, p = Dim("b", min=1, max=6), Dim("s", min=1, max=8), Dim("p", min=1, max=16)
    spec = ({0: b, 1: s}, {0: b, 1: p}, {0: b, 1: Dim.AUTO})
    ep = graphcap.export(PastAndNew(), _past_and_new(2, 3, 5), dynamic_shapes=spec)
    for sizes in [(1, 1, 1), (2, 1, 7), (6, 8, 16), (3, 2, 1)]:  # s = 1 too: that branch is the same
        args = _past_and_new(*sizes)
        torch.testing.assert_close(ep.module()(*args), PastAndNew()(*args))
    new, past, _ = _past_and_new(2, 3, 5)
    with pytest.raises(AssertionError, match="mask"):  # a mask longer than past + new: refused before computing
        ep.module()(new, past, torch.rand(2, 9))


def _tiny_qwen2() -> nn.Module:
    cfg = transformers.Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                   use_cache=False)
    torch.manual_seed(0)
    return transformers.Qwen2ForCausalLM(cfg).eval()


class CachedStep(nn.Module):
    """One decoding step whose past keys and values arrive as tensors, put into a DynamicCache."""

    def __init__(self) -> None:
        super().__init__()
        self.lm = _tiny_qwen2()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, past_key: torch.Tensor,
                past_value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cache = transformers.DynamicCache(config=self.lm.config)
        cache.update(past_key, past_value, 0)
        out = self.lm(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache, use_cache=True)
        return out.logits, out.past_key_values.layers[0].keys


def _step_inputs(b: int, s: int, p: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(b * 100 + s * 10 + p)
    return (torch.randint(3, VOCAB, (b, s), generator=g), torch.ones(b, p + s, dtype=torch.long),
            torch.randn(b, 2, p, 8, generator=g), torch.randn(b, 2, p, 8, generator=g))


def test_decoder_with_a_dynamic_cache_and_an_automatic_mask_length_exports_and_runs_one_token():
    b, s, p = Dim("batch", min=1, max=4), Dim("seq", min=1, max=8), Dim("past", min=1, max=32)
    spec = ({0: b, 1: s}, {0: b, 1: Dim.AUTO}, {0: b, 2: p}, {0: b, 2: p})
    model = CachedStep()
    ep = graphcap.export(model, _step_inputs(2, 3, 5), dynamic_shapes=spec, strict=False)
    buf = io.BytesIO()
    graphcap.save(ep.run_decompositions(), buf)
    loaded = graphcap.load(io.BytesIO(buf.getvalue()))
    for sizes in [(2, 3, 5), (1, 1, 1), (2, 1, 9), (4, 8, 32)]:  # torch's program refuses (2, 1, 1)
        args = _step_inputs(*sizes)
        with torch.no_grad():
            want = model(*args)
            for prog in (ep, loaded):
                got = prog.module()(*args)
                torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    with pytest.raises(AssertionError, match="past"):
        ep.module()(*_step_inputs(2, 3, 33))


# ---------------------------------------------------------------- a cache written in place, saved and loaded


class WrittenCache(nn.Module):
    """transformers' static cache in small: a buffer the forward writes in place with values computed
    from the weights. After an eager call with grad on, the buffer requires grad and is no leaf."""

    def __init__(self, persistent: bool) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.register_buffer("cache", torch.zeros(2, 8, 4), persistent=persistent)

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        self.cache.index_copy_(1, pos, self.proj(x))
        return self.cache.sum(1)


@pytest.mark.parametrize("persistent", [True, False])
def test_a_cache_buffer_with_history_loads_as_a_buffer_the_program_can_write(persistent):
    torch.manual_seed(0)
    model = WrittenCache(persistent)
    model(torch.randn(2, 3, 4), torch.arange(3))  # eager, grad on: the cache now has history
    assert model.cache.requires_grad and not model.cache.is_leaf
    s = Dim("s", min=1, max=8)
    ep = graphcap.export(model, (torch.randn(2, 3, 4), torch.arange(3, 6)), dynamic_shapes=({1: s}, {0: s}))
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    loaded = graphcap.load(io.BytesIO(buf.getvalue()))
    x, pos = torch.randn(2, 2, 4), torch.tensor([6, 7])
    want = ep.module()(x, pos)
    got = loaded.module()(x, pos)  # refused before: a leaf that requires grad written in place
    torch.testing.assert_close(got, want)


def test_a_leaf_buffer_that_requires_grad_loads_as_a_leaf_not_a_view_of_the_file():
    class NoGradWrite(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("acc", torch.zeros(3, requires_grad=True))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                self.acc.add_(x.sum(0))
            return x * 2

    ep = graphcap.export(NoGradWrite(), (torch.randn(4, 3),), dynamic_shapes=({0: Dim("b", min=1, max=8)},))
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    loaded = graphcap.load(io.BytesIO(buf.getvalue()))
    acc = loaded.state_dict["acc"]
    assert acc.requires_grad and acc.is_leaf
    mod = loaded.module()
    mod(torch.ones(2, 3))
    torch.testing.assert_close(dict(mod.named_buffers())["acc"].detach(), torch.full((3,), 2.0))
