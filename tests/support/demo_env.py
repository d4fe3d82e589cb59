"""Fixtures for CLI tests that run inside a ``ledgerctl demo`` directory.

Import ``demo_root`` and ``demo`` into a test module: ``demo_root`` creates the demo once
per module, ``demo`` runs the test inside it with no connection defaults from the
environment or the user's config (only the demo's ``ledgerctl.toml``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pulsarctl_py.demo import create_demo
from pulsarctl_py.precedence import SETTINGS

#: every setting's variable (stores, bookie options, write settings, passwords)
ENV_DEFAULTS = tuple(
    s.env for s in SETTINGS if s.env is not None and s.env.startswith("LEDGERCTL_")
)


def isolate(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No setting from the environment or ~/.config for this test."""
    for var in ENV_DEFAULTS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-user-config"))


@pytest.fixture(scope="module")
def demo_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("demo") / "demo"
    create_demo(root)
    return root


@pytest.fixture
def demo(demo_root: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    isolate(monkeypatch, tmp_path)
    monkeypatch.chdir(demo_root)
    return demo_root
