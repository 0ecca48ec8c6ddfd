"""Small contracts of graphcap's exported programs that torch-written code relies on."""
import pytest
import torch

import graphcap


class _OddSlice(torch.nn.Module):
    def forward(self, w):
        return w[1:-1:2]


@pytest.mark.parametrize("scale, offset, bad, remainder", [(2, 0, 11, 0), (2, 1, 10, 1), (3, -1, 12, 2)])
def test_derived_size_of_wrong_form_names_its_remainder(scale, offset, bad, remainder):
    """A size that no integer root can produce is refused with torch's modulo condition."""
    dimx = torch.export.Dim("dimx", min=3, max=6)
    example = scale * 4 + offset
    ep = graphcap.export(_OddSlice(), (torch.randn(example),), dynamic_shapes=({0: dimx * scale + offset},))
    with pytest.raises(AssertionError, match=rf"Guard failed: w\.size\(\)\[0\] % {scale} == {remainder}"):
        ep.module()(torch.randn(bad))
    good = torch.randn(scale * 5 + offset)
    torch.testing.assert_close(ep.module()(good), _OddSlice()(good))
