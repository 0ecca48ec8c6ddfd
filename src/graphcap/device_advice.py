"""How to fix an operator refusing tensors on two devices, in the model's own terms.

The usual cause is the model and its example inputs on different devices: weights on the GPU and
inputs on the CPU, or a model built under ``torch.device("meta")`` (no weights yet) traced with
real inputs. The fix names the weights on the odd device and says how to bring them together.
"""
from __future__ import annotations

from typing import Optional

import torch


def _weights_on(root: Optional[torch.nn.Module], device: str) -> list[str]:
    if root is None:
        return []
    named = [*root.named_parameters(), *root.named_buffers()]
    return [name for name, t in named if t.device.type == torch.device(device).type]


def device_mismatch_fix(devices: tuple[str, str], root: Optional[torch.nn.Module]) -> str:
    """The fix for an operator that met tensors on ``devices`` while ``root`` was traced."""
    first, second = devices
    meta_weights = _weights_on(root, "meta")
    if "meta" in devices and meta_weights:
        other = second if first == "meta" else first
        shown = ", ".join(meta_weights[:3]) + (", ..." if len(meta_weights) > 3 else "")
        return (f"The model's weights are on the meta device ({shown}): it was built without data, "
                f"and the example inputs are on {other}. To export with the weights, give them data "
                f"first:\n    model.to_empty(device={other!r})\n    model.load_state_dict(state_dict)\n"
                f"To export the structure alone (weights attached when the program is loaded, see "
                f"docs/big-models.md), make the example inputs meta too: x.to('meta') for each one.")
    model_devices = sorted({t.device.type for t in (*root.parameters(), *root.buffers())}) if root is not None else []
    target = model_devices[0] if len(model_devices) == 1 else first
    return (f"An operator met tensors on {first} and on {second}. Put the model and every example "
            f"input on one device, e.g. model.to({target!r}) and x.to({target!r}) for each input "
            f"(and create tensors in forward with device=x.device).")
