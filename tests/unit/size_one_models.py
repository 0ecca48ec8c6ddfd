"""Models whose code branches on a size being 1, shared by the size-0/1 tests of declared dims
(test_dynamic_size_one_range_cut.py) and of Dim.AUTO / Dim.DYNAMIC hints (test_dynamic_hint_size_one.py);
and operators whose kernels, decompositions or tensor metadata ask whether a size is 1, exported at
size-1 examples (test_decomp_keeps_ranges.py, test_serialize_size_one_examples.py).
"""
import torch
import torch.nn.functional as F
from torch.export import Dim


class FlattenUnlessOne(torch.nn.Module):
    """At size 1 the special branch does what the general one does."""

    def forward(self, x):
        if x.size(0) > 1:
            x = x.view(x.size(0), -1)
        else:
            x = x.view(1, -1)
        return x.sum(-1)


class DiffersAtOne(torch.nn.Module):
    """At size 1 the special branch computes something else."""

    def forward(self, x):
        if x.size(0) > 1:
            return x * 2
        return x * 100


class CountsBigBatches(torch.nn.Module):
    """Same outputs at size 1, but the buffer is updated only by the general branch."""

    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x):
        if x.size(0) >= 2:
            self.count.add_(1)
        return x * 2


class _Calls(torch.nn.Module):
    def __init__(self, fn, **children):
        super().__init__()
        self.fn = fn
        self.children_ = torch.nn.ModuleDict(children)

    def forward(self, x):
        return self.fn(self.children_, x)


# (forward, example shape, dims made dynamic): each exported with size-1 examples on its dynamic dims
SIZE_ONE_EXAMPLES = {
    "nearest": (lambda c, x: F.interpolate(x, scale_factor=2, mode="nearest"), (1, 2, 4, 4), (0,)),
    "conv_channels_last": (lambda c, x: c["conv"](x.contiguous(memory_format=torch.channels_last)),
                           (1, 3, 8, 8), (0,)),
    "layer_norm": (lambda c, x: c["ln"](x), (1, 1, 8), (0, 1)),
    "group_norm": (lambda c, x: c["gn"](x), (1, 4, 1, 3), (0, 2)),
    "linear_3d": (lambda c, x: c["lin"](x), (1, 1, 3), (0, 1)),
    "softmax_of_one": (lambda c, x: x.softmax(-1), (2, 1), (1,)),
    "var_keepdim": (lambda c, x: x.var(0, keepdim=True), (2, 1), (0, 1)),
    "pixel_shuffle": (lambda c, x: F.pixel_shuffle(x, 2), (1, 4, 1, 2), (0, 2)),
    "sdpa": (lambda c, x: F.scaled_dot_product_attention(x, x, x), (1, 2, 1, 4), (0, 2)),
}


def operator_example(name):
    """(model, size-1 example, spec with each dynamic dim in [1, 8] named d<dim>, sizes(k): a shape with
    every dynamic dim k) for one entry of SIZE_ONE_EXAMPLES."""
    fn, shape, dims = SIZE_ONE_EXAMPLES[name]
    torch.manual_seed(0)
    model = _Calls(fn, conv=torch.nn.Conv2d(3, 4, 3), ln=torch.nn.LayerNorm(8),
                   gn=torch.nn.GroupNorm(2, 4), lin=torch.nn.Linear(3, 2)).eval()
    spec = {"x": {d: Dim(f"d{d}", min=1, max=8) for d in dims}}
    return model, torch.randn(*shape), spec, lambda k: [k if d in dims else s for d, s in enumerate(shape)]
