"""Registered function names: each alias names the function it stands for, and run ids hash the alias."""
from __future__ import annotations

import pytest

from repro import functions
from repro.runs import RunSpec


@pytest.mark.parametrize("name", sorted(functions.ALIASES))
def test_every_alias_is_the_registered_function(name):
    """A name and its historical import path are the same function (a wrong alias would keep an id for a
    different measurement)."""
    assert functions.lookup(name) is functions.lookup(functions.ALIASES[name])


def test_every_host_registers_its_namespace():
    for namespace, modules in functions.HOSTS.items():
        names = {n for n in functions.ALIASES if n.startswith(namespace + ".")}
        assert names, namespace
        for n in names:
            assert functions.lookup(n).__module__ in modules


def test_ids_hash_the_alias_not_the_name():
    """A spec naming a probe by its registered name has the id of one naming it by the old path; a name
    without an alias hashes as itself (so it can never collide with an aliased one)."""
    cell = {"row": "r", "columns": {"c": "c"}}
    by_name = RunSpec("convit", "t", cell, "tiny", kind="probe", config={"probe": "convit.locality_change"})
    by_path = RunSpec("convit", "t", cell, "tiny", kind="probe",
                      config={"probe": "papers.convit.probes:locality_change"})
    assert by_name.run_id == by_path.run_id and by_name.label == "locality_change"
    other = RunSpec("convit", "t", cell, "tiny", kind="probe", config={"probe": "convit.not_aliased"})
    assert other.fingerprint != by_name.fingerprint and other.label == "not_aliased"
    assert functions.hashed({"probes": [{"fn": "convit.locality"}, "cmhsa.run_summary"]}) == \
        {"probes": [{"fn": "papers.convit.probes:locality"}, "papers.cmhsa.summary:run_summary"]}


def test_register_refuses_bad_and_duplicate_names():
    with pytest.raises(ValueError, match="namespace"):
        functions.register("nodot")
    functions.lookup("convit.locality")
    with pytest.raises(ValueError, match="twice"):
        functions.register("convit.locality")(lambda: None)
