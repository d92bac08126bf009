"""Every registered ``repro_*`` name keeps its docstring, pretrained cfg, constructor arguments and
``architecture()`` (``tests/data/registered_models.json``): a run's config names a model, so a name must
always build the same model. The arguments are read without building anything (timm's
``build_model_with_cfg`` stubbed).

After an intended change to a model, rewrite the file from the repository root:
``PYTHONPATH=. python tests/test_model_registry.py``.
"""
import json
import sys
from pathlib import Path

import timm

import repro.models  # noqa: F401  (registers the repro_* names)
from repro.models import factory
from repro.models.registry import MODELS, architecture

SNAPSHOT = Path(__file__).parent / "data" / "registered_models.json"


def registered() -> dict:
    """name -> its docstring, builder, constructor arguments, pretrained cfg and ``architecture()`` (what a
plan records of it), as JSON would store them."""
    def capture(builder, name, pretrained=False, **kwargs):
        return {"builder": builder.__name__, "kwargs": kwargs}

    original = factory.build_model_with_cfg
    factory.build_model_with_cfg = capture
    try:
        out = {name: {"doc": timm.models.model_entrypoint(name).__doc__, **timm.models.model_entrypoint(name)(),
                      "cfg": timm.get_pretrained_cfg(name).to_dict(), "architecture": architecture(name)} for name in timm.list_models("repro_*")}
    finally:
        factory.build_model_with_cfg = original
    return json.loads(json.dumps(out))


def test_every_name_keeps_its_docstring_cfg_and_constructor_arguments():
    assert registered() == json.loads(SNAPSHOT.read_text())


def test_a_named_configs_docstring_is_its_cfg_description():
    for name, (_, _, description) in MODELS.items():
        assert timm.models.model_entrypoint(name).__doc__ == description == timm.get_pretrained_cfg(name).description


if __name__ == "__main__":
    SNAPSHOT.write_text(json.dumps(registered(), indent=1, sort_keys=True) + "\n")
    sys.exit(0)
