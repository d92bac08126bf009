"""Our models as timm models: the properties timm's own model tests assert (tests/test_models.py of
pytorch-image-models), checked here with timm's public functions on one small model of every family.

Each family is a registered name at 32 px with a tiny width and depth; DeiT also at 224 px. Where timm
has the same architecture (DeiT, ConViT) the API is compared with timm's own model on the same weights.
"""
import pytest
import timm
import torch
from PIL import Image
from timm.data import ImageDataset, create_loader, create_transform, resolve_data_config
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.layers import resample_abs_pos_embed
from timm.models import get_notrace_functions, get_notrace_modules
from timm.optim import create_optimizer_v2
from torchvision.models.feature_extraction import create_feature_extractor

import papers.augvit.models  # noqa: F401  (registers augvit_dense_proj)
import repro.models as rm
from repro.data.image_loader import eval_transform

TINY = dict(depth=2, embed_dim=48, num_heads=3)
FAMILIES = {  # family -> (registered name, overrides that make it tiny)
    "deit_c32": ("repro_deit_tiny_c32", TINY),
    "deit_224": ("repro_deit_tiny", TINY),
    "convit_4_heads": ("repro_convit_tiny_c32", dict(depth=3, gpsa_layers=2, embed_dim=48, num_heads=4)),
    "convit_9_heads": ("repro_convit_tiny9_c32", dict(depth=3, gpsa_layers=2, embed_dim=54, num_heads=9)),
    "cmhsa_relpos": ("repro_cmhsa_attn_c32", dict(depth=2, patch_size=4)),
    "cmhsa_conv_phase": ("repro_cmhsa_3_conv_c32", dict(depth=2, patch_size=4)),
    "talking_heads": ("repro_deit_base_th", dict(TINY, img_size=32, patch_size=4, num_classes=10)),
    "augvit": ("repro_augvit_small", dict(TINY, img_size=32, patch_size=4, num_classes=10)),
    "augvit_dense_proj": ("augvit_dense_proj", dict(TINY, aug_paths=2, aug_scale=0.75)),
    "post_ln": ("repro_deit_tiny_post_ln_c32", TINY),
    "res_post_ln": ("repro_deit_tiny_res_post_ln_c32", TINY),
}
GRID_BOUND = ("convit_4_heads", "convit_9_heads", "cmhsa_relpos", "cmhsa_conv_phase")  # attention built for one grid
TRACER = dict(leaf_modules=get_notrace_modules(), autowrap_functions=get_notrace_functions())


def _model(family: str, seed: int = 0, **overrides) -> torch.nn.Module:
    name, kwargs = FAMILIES[family]
    torch.manual_seed(seed)
    return timm.create_model(name, **{**kwargs, **overrides}).eval()


def _images(model, batch: int = 2, seed: int = 1) -> torch.Tensor:
    _, h, w = model.pretrained_cfg["input_size"]
    return torch.randn(batch, 3, h, w, generator=torch.Generator().manual_seed(seed))


def test_every_registered_name_has_a_pretrained_cfg_that_describes_it():
    names = timm.list_models("repro_*")
    assert len(names) >= 32 and timm.list_models("repro_*", name_matches_cfg=True) == names
    assert timm.list_models("augvit_dense_proj", name_matches_cfg=True) == ["augvit_dense_proj"]
    for name in [*names, "augvit_dense_proj"]:
        with torch.device("meta"):  # shapes only, no weights: all of them in about 10 s
            model = timm.create_model(name, **({"aug_paths": 2} if name == "augvit_dense_proj" else {}))
        cfg, keys = model.pretrained_cfg, model.state_dict()
        assert model.default_cfg is cfg and cfg["architecture"] == name
        assert timm.get_pretrained_cfg_value(name, "input_size") == cfg["input_size"]
        assert cfg["input_size"] == (3, *model.patch_embed.img_size) and cfg["num_classes"] == model.num_classes
        assert cfg["crop_pct"] == (1.0 if cfg["input_size"][-1] == 32 else 0.875), name
        assert (cfg["mean"], cfg["std"]) == (IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD)
        assert cfg["interpolation"] == "bicubic"
        assert f"{cfg['classifier']}.weight" in keys
        first = cfg["first_conv"]  # timm's cfg test: a name, or a tuple of names, of layers the model has
        assert first and all(f"{f}.weight" in keys for f in ((first,) if isinstance(first, str) else first)), name
        if "cmhsa" not in name:
            assert first == "patch_embed.proj"
        assert ("Table" in cfg["description"] or "Sec." in cfg["description"]) and cfg["paper_name"], name


@pytest.mark.parametrize("size", [32, 224])
def test_timms_data_pipeline_from_the_cfg_is_the_projects_eval_pipeline(size):
    model = timm.create_model("repro_deit_tiny_c32" if size == 32 else "repro_deit_tiny", **TINY)
    config = resolve_data_config({}, model=model)
    assert config["input_size"] == (3, size, size)
    img = Image.frombytes("RGB", (45, 40), bytes(range(256)) * 21 + bytes(120))
    ours = eval_transform({"img_size": size, "mean": IMAGENET_DEFAULT_MEAN, "std": IMAGENET_DEFAULT_STD})
    assert torch.equal(create_transform(**config)(img), ours(img))
    # a model built at another size gets that size's pipeline, not the registered one
    small = timm.create_model("repro_deit_small", img_size=32, patch_size=4, depth=1)
    assert resolve_data_config({}, model=small)["input_size"] == (3, 32, 32)
    assert resolve_data_config({}, model=small)["crop_pct"] == 1.0


@pytest.mark.parametrize("family", FAMILIES)
def test_pretrained_true_is_one_line_error(family):
    name, kwargs = FAMILIES[family]
    with pytest.raises(ValueError, match="no pretrained weights") as err:
        timm.create_model(name, pretrained=True, **kwargs)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("family", FAMILIES)
def test_backward_reaches_every_parameter_and_grad_checkpointing_changes_nothing(family):
    """timm's test_model_backward and test_model_forward (checkpointing keeps the output), plus: the
    checkpointed blocks really run twice, and train-mode grads (drop path on) are the same."""
    drop = dict(drop_path_rate=0.2, num_classes=42)
    model, x = _model(family, **drop).train(), _images(_model(family))
    torch.manual_seed(3)
    model(x).square().mean().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert not missing, f"no gradient for {missing}"
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}

    model.zero_grad(set_to_none=True)
    model.set_grad_checkpointing()
    calls = []
    # the attention, not the block: the recomputation stops once the saved tensors are back
    model.blocks[0].attn.register_forward_hook(lambda *_: calls.append(1))
    torch.manual_seed(3)
    out = model(x)
    out.square().mean().backward()
    assert out.shape == (2, 42) and len(calls) == 2  # forward, then recomputed in the backward pass
    for n, p in model.named_parameters():
        assert torch.allclose(p.grad, grads[n], rtol=1e-5, atol=1e-7), n
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(x), _model(family, **drop)(x))


@pytest.mark.parametrize("family", FAMILIES)
def test_classifier_and_pooling_as_timms_vit(family):
    """timm's test_model_default_cfgs_non_std: feature widths, pre-logits = the head removed, '' = tokens."""
    model = _model(family)
    x = _images(model)
    with torch.no_grad():
        tokens = model.forward_features(x)
        pre_logits = model.forward_head(tokens, pre_logits=True)
        assert tokens.shape[-1] == model.num_features and pre_logits.shape == (2, model.head_hidden_size)
        model.reset_classifier(0)
        assert model.num_classes == 0 and torch.equal(model(x), pre_logits)
        model.reset_classifier(0, "")
        assert torch.equal(model(x), tokens)
        model.reset_classifier(7, "avg")
        patches = tokens[:, model.num_prefix_tokens:]
        assert torch.allclose(model(x), model.head(patches.mean(1)), atol=1e-6)
        name, kwargs = FAMILIES[family]
        bare = timm.create_model(name, **{**kwargs, "num_classes": 0, "global_pool": ""})
        assert bare(x).shape == tokens.shape


@pytest.mark.parametrize("kind", ["deit", "convit"])
def test_pooling_and_intermediates_equal_timms_own_model(kind):
    """Same weights (from_timm): every pooling timm's model has, and forward_intermediates, give timm's output."""
    common = dict(img_size=32, patch_size=4, depth=3, num_classes=10)
    torch.manual_seed(0)
    if kind == "deit":
        ref = timm.create_model("deit_tiny_patch16_224", embed_dim=48, num_heads=3, **common).eval()
    else:
        ref = timm.create_model("convit_tiny", embed_dim=12, num_heads=4, local_up_to_layer=2, **common).eval()
    ours = rm.from_timm(ref).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        for pool in ("token", "avg", ""):
            ref.reset_classifier(0, pool), ours.reset_classifier(0, pool)
            assert torch.allclose(ours(x), ref(x), atol=1e-5), pool
        mine, inter = ours.forward_intermediates(x)
        theirs, inter_ref = ref.forward_intermediates(x)
        assert torch.allclose(mine, theirs, atol=1e-5)
        assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(inter, inter_ref)) and len(inter) == 3


@pytest.mark.parametrize("family", FAMILIES)
def test_forward_intermediates_feature_info_and_features_only(family):
    """timm's test_model_forward_intermediates and test_model_forward_intermediates_features."""
    model = _model(family)
    x = _images(model)
    depth, grid = len(model.blocks), model.grid_size
    assert [f["num_chs"] for f in model.feature_info] == [model.embed_dim] * depth
    with torch.no_grad():
        final, inter = model.forward_intermediates(x)
        assert torch.equal(final, model.forward_features(x)) and len(inter) == depth
        assert all(y.shape == (2, model.embed_dim, *grid) for y in inter)
        last = model.forward_intermediates(x, indices=[-1], output_fmt="NLC", norm=True, intermediates_only=True,
                                           return_prefix_tokens=True, stop_early=True)
        assert torch.equal(torch.cat(last[0][::-1], dim=1), final)  # prefix + patch tokens = the features
        model.set_grad_checkpointing()
        assert torch.equal(model.forward_intermediates(x)[0], final)

        name, kwargs = FAMILIES[family]
        torch.manual_seed(0)
        features = timm.create_model(name, **kwargs, features_only=True, out_indices=(0, -1)).eval()
        outs = features(x)
        assert type(features).__name__ == "FeatureGetterNet"
        assert features.feature_info.channels() == [model.embed_dim] * 2
        assert features.feature_info.reduction() == [x.shape[-1] // grid[1]] * 2
        assert [torch.equal(a, b) for a, b in zip(outs, (inter[0], inter[-1]))] == [True, True]


@pytest.mark.parametrize("family", FAMILIES)
def test_fx_traces_and_extracts_each_block(family):
    """timm's test_model_forward_fx / backward_fx, and torchvision's create_feature_extractor on the blocks."""
    model = _model(family)
    x = _images(model)
    with torch.no_grad():
        traced = torch.fx.symbolic_trace(model)
        assert torch.equal(traced(x), model(x))
        extractor = create_feature_extractor(model, {f"blocks.{i}": str(i) for i in range(len(model.blocks))},
                                             tracer_kwargs=TRACER)
        blocks = list(extractor(x).values())
        inter = model.forward_intermediates(x, output_fmt="NLC", intermediates_only=True)
        assert all(torch.equal(b[:, b.shape[1] - i.shape[1]:], i) for b, i in zip(blocks, inter))
    train = torch.fx.symbolic_trace(_model(family, num_classes=42).train())
    train(x).mean().backward()
    assert all(p.grad is not None for p in train.parameters())


@pytest.mark.parametrize("family", FAMILIES)
def test_torchscript(family):
    """timm's test_model_forward_torchscript: every family scripts (timm's DeiT and ConViT do too)."""
    model = _model(family)
    x = _images(model)
    scripted = torch.jit.script(model)
    with torch.no_grad():
        assert torch.equal(scripted(x), model(x))


@pytest.mark.parametrize("kind", ["deit", "convit"])
def test_layer_decay_groups_equal_timms(kind):
    """create_optimizer_v2(layer_decay=...) gives every parameter the lr scale and decay timm's model gets."""
    common = dict(img_size=32, patch_size=4, depth=3, num_classes=10)
    if kind == "deit":
        ref = timm.create_model("deit_tiny_patch16_224", embed_dim=48, num_heads=3, **common)
    else:
        ref = timm.create_model("convit_tiny", embed_dim=12, num_heads=4, local_up_to_layer=2, **common)
    ours = rm.from_timm(ref)

    def scales(model):
        opt = create_optimizer_v2(model, "adamw", lr=1.0, weight_decay=0.05, layer_decay=0.5)
        by_param = {id(p): (g["lr_scale"], g["weight_decay"]) for g in opt.param_groups for p in g["params"]}
        return {n: by_param[id(p)] for n, p in model.named_parameters()}

    got = scales(ours)
    assert got == scales(ref)
    assert got["blocks.0.attn.proj.weight"][0] < got["blocks.2.attn.proj.weight"][0] < got["head.weight"][0] == 1
    assert got["pos_embed"] == (got["patch_embed.proj.weight"][0], 0.0)


@pytest.mark.parametrize("family", FAMILIES)
def test_no_weight_decay_names_parameters_the_model_has(family):
    model = _model(family)
    assert model.no_weight_decay() <= {n for n, _ in model.named_parameters()}


def test_relative_position_tables_get_no_weight_decay():
    """As timm's Swin and BEiT: the optimizer factory keeps CMHSA's bias tables out of weight decay."""
    model = _model("cmhsa_relpos")
    optimizer = create_optimizer_v2(model, "adamw", lr=1e-3, weight_decay=0.05)
    decay = {id(p): g["weight_decay"] for g in optimizer.param_groups for p in g["params"]}
    tables = [p for n, p in model.named_parameters() if n.endswith("rel_pos.table")]
    assert len(tables) == 2 and all(decay[id(p)] == 0.0 for p in tables)
    assert decay[id(model.blocks[0].attn.qkv.weight)] == 0.05


@pytest.mark.parametrize("family", [f for f in FAMILIES if f not in GRID_BOUND])
def test_dynamic_img_size_resamples_the_position_embedding(family):
    """At its own size the dynamic model is the fixed one; at another, the fixed model built there with the
    embedding resampled (timm's resample_abs_pos_embed)."""
    fixed = _model(family)
    dynamic = _model(family, dynamic_img_size=True)
    x = _images(fixed)
    size, p = fixed.pretrained_cfg["input_size"][-1], fixed.patch_size
    other = torch.randn(2, 3, size + 2 * p, size - 2 * p)
    there = _model(family, img_size=(size + 2 * p, size - 2 * p))
    state = dict(fixed.state_dict())
    state["pos_embed"] = resample_abs_pos_embed(state["pos_embed"], new_size=list(there.grid_size),
                                                old_size=list(fixed.grid_size), num_prefix_tokens=1)
    there.load_state_dict(state)
    with torch.no_grad():
        assert torch.allclose(dynamic(x), fixed(x), atol=1e-6)
        assert torch.allclose(dynamic(other), there(other), atol=1e-5)
    with pytest.raises(AssertionError):  # the fixed model still checks its input size
        fixed(other)


@pytest.mark.parametrize("family", GRID_BOUND)
def test_dynamic_img_size_is_refused_where_attention_is_built_for_one_grid(family):
    with pytest.raises(ValueError, match="dynamic_img_size=True needs attention that works on any patch grid") as err:
        _model(family, dynamic_img_size=True)
    assert "\n" not in str(err.value)


def _image_folder(root, classes: int = 2, per_class: int = 6) -> None:
    gen = torch.Generator().manual_seed(0)
    for c in range(classes):
        (root / f"class{c}").mkdir(parents=True)
        for i in range(per_class):  # odd sizes: the pipeline, not the files, makes them 32 px
            pixels = (torch.rand(37 + i, 41, 3, generator=gen) * 255).to(torch.uint8).numpy()
            Image.fromarray(pixels).save(root / f"class{c}" / f"{i}.png")


def test_trains_two_steps_through_timms_data_pipeline_with_grad_checkpointing(tmp_path):
    """A 32-px model trained by timm's own tools only: data config from the model, transforms, loader,
    layer-decayed optimizer, checkpointed blocks; then evaluated through the eval loader."""
    _image_folder(tmp_path / "train")
    _image_folder(tmp_path / "val", per_class=3)
    torch.manual_seed(0)
    model = timm.create_model("repro_deit_tiny_c32", **TINY, num_classes=2)
    model.set_grad_checkpointing()
    config = resolve_data_config({}, model=model)
    assert config["input_size"] == (3, 32, 32) and config["crop_pct"] == 1.0

    train_loader = create_loader(ImageDataset(str(tmp_path / "train")), batch_size=4, is_training=True,
                                 use_prefetcher=False, num_workers=0, **config)
    optimizer = create_optimizer_v2(model, "adamw", lr=1e-3, weight_decay=0.05, layer_decay=0.75)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    calls = []
    model.blocks[1].attn.register_forward_hook(lambda *_: calls.append(1))
    model.train()
    for step, (images, targets) in zip(range(2), train_loader):
        assert images.shape == (4, 3, 32, 32) and abs(float(images.mean())) < 3
        loss = torch.nn.functional.cross_entropy(model(images), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        assert torch.isfinite(loss)
    assert len(calls) == 4  # two steps, each block run forward and again in the backward pass
    assert all(not torch.equal(p, before[n]) for n, p in model.named_parameters()), "every parameter moved"

    eval_set = ImageDataset(str(tmp_path / "val"))
    eval_loader = create_loader(eval_set, batch_size=4, is_training=False, use_prefetcher=False, num_workers=0,
                                **config)
    assert repr(eval_set.transform) == repr(create_transform(**config))  # Resize(32) + CenterCrop(32) + norm
    model.eval()
    correct = seen = 0
    with torch.no_grad():
        for images, targets in eval_loader:
            logits = model(images)
            assert logits.shape == (len(targets), 2) and torch.equal(logits, model(images))
            correct += int((logits.argmax(1) == targets).sum())
            seen += len(targets)
    assert seen == 6
