"""One environment: `make install` pins every package it installs to constraints.txt, so that a fresh clone gets
the torch the tests pass with (it resolved 2.14.1 while records were made under 2.11, 2.14 and 2.15)."""
from __future__ import annotations

import re
import subprocess

import pytest
from packaging.requirements import Requirement

from conftest import REPO


tomllib = pytest.importorskip("tomllib")  # Python 3.11+


def _pins() -> dict[str, str]:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, eq, version = line.partition("==")
            assert eq and version, f"constraints.txt: {line!r} is not name==version"
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


def test_make_install_pins_every_dependency_to_a_version_it_allows():
    dry = subprocess.run(["make", "-n", "install", "PY=python"], cwd=REPO, capture_output=True, text=True).stdout
    assert "-c constraints.txt" in dry
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    deps = [*project["dependencies"], *extras["dev"], *extras["slurm"]]
    pins = _pins()
    for dep in map(Requirement, deps):
        name = re.sub(r"[-_.]+", "-", dep.name).lower()
        assert name in pins, f"{dep.name} has no pin in constraints.txt (make constraints)"
        assert dep.specifier.contains(pins[name], prereleases=True), f"{dep.name}=={pins[name]} is outside {dep}"
