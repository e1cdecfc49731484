"""Short labels for experiments that differ in a few settings: ``lr=3.4e-4, clip=0.2``.

A search's configurations differ in the searched keys; a figure's legend names each one by
those keys only, under the name a practitioner types (the key's last part, ``lambda`` for
``training.lambda_``), with values at the fewest significant digits that still tell the
configurations apart.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

# RLlib's names of common hyperparameters -> how papers and other libraries write them.
SHORT_NAMES = {
    "lambda_": "lambda",
    "clip_param": "clip",
    "num_epochs": "epochs",
    "minibatch_size": "minibatch",
    "train_batch_size_per_learner": "batch",
    "entropy_coeff": "entropy",
    "vf_loss_coeff": "vf_coeff",
    "fcnet_hiddens": "hiddens",
    "fcnet_activation": "activation",
    "num_steps_sampled_before_learning_starts": "learning_starts",
}
MIN_DIGITS, MAX_DIGITS = 2, 6


def short_value(value: Any, digits: int = MIN_DIGITS) -> str:
    """``value`` for a label: floats at ``digits`` significant digits (scientific below 0.01
    and from 10,000 on, without padding: ``3e-4``), everything else as written in YAML."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if not isinstance(value, float):
        return json.dumps(value) if isinstance(value, (list, dict)) else str(value)
    if value == 0 or 1e-2 <= abs(value) < 1e4:
        return f"{value:.{digits}g}"
    mantissa, exponent = f"{value:.{digits - 1}e}".split("e")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def short_names(keys: Sequence[str]) -> dict[str, str]:
    """Each dotted key's short name: its last part (or ``SHORT_NAMES``'s), the whole key where
    two keys would read the same."""
    short = {key: SHORT_NAMES.get(key.rsplit(".", 1)[-1], key.rsplit(".", 1)[-1]) for key in keys}
    clashing = {name for name in short.values() if list(short.values()).count(name) > 1}
    return {key: key if name in clashing else name for key, name in short.items()}


def short_labels(differs: Sequence[dict[str, Any]]) -> list[str]:
    """One label per experiment from the settings it differs in (``{dotted key: value}``):
    ``lr=3.4e-4, clip=0.2``, at the fewest significant digits (2 to 6) that keep every label
    distinct."""
    keys = list(dict.fromkeys(key for settings in differs for key in settings))
    names = short_names(keys)
    labels: list[str] = []
    for digits in range(MIN_DIGITS, MAX_DIGITS + 1):
        labels = [
            ", ".join(
                f"{names[key]}={short_value(settings[key], digits)}"
                for key in keys
                if key in settings
            )
            for settings in differs
        ]
        if len(set(labels)) == len(labels):
            break
    return labels
