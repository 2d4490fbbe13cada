"""AdamW's state in a checkpoint: its tensors as named safetensors entries, the rest as JSON metadata."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pipeline.engine import atomic

if TYPE_CHECKING:
    import torch

OPTIMIZER_PREFIX = "optimizer."


def flatten(state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Split an optimizer state dict into named tensors and JSON-able rest."""
    import torch

    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for param_id, param_state in state["state"].items():
        for key, value in param_state.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{OPTIMIZER_PREFIX}{param_id}.{key}"] = value.detach().contiguous()
            else:
                scalars.setdefault(str(param_id), {})[key] = value
    meta = {
        "param_ids": [str(param_id) for param_id in state["state"]],
        "scalars": scalars,
        "param_groups": json.loads(atomic.dumps_json(state["param_groups"], indent=None)),
    }
    return tensors, meta


def unflatten(meta: dict[str, Any], tensors: dict[str, torch.Tensor]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {int(param_id): {} for param_id in meta["param_ids"]}
    for param_id, values in meta["scalars"].items():
        state[int(param_id)].update(values)
    for name, tensor in tensors.items():
        if name.startswith(OPTIMIZER_PREFIX):
            param_id, key = name[len(OPTIMIZER_PREFIX) :].split(".", 1)
            state[int(param_id)][key] = tensor
    return {"state": state, "param_groups": meta["param_groups"]}
