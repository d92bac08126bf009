"""CMHSA: conv-phase model, conv -> MHSA transfer (Theorem 1), Lemma 2, head lower bounds (Theorems 5/6)."""
import itertools

import pytest
import timm
import torch

import repro.models.cmhsa_models  # noqa: F401  (registers the timm names)
from repro.models.attention import Attention
from repro.models.conv_phase import PatchConvolution, conv_phase_vit
from repro.models.patches import patchify
from repro.models.transfer import (conv_layer_to_attention, conv_patch_blocks, conv_to_mhsa, head_offsets,
                                   heads_required, interior_mask, neighbourhood_radius)
from papers.cmhsa.theorems import head_bound_row
from repro.probes.conv_theorems import (predicted_attention, centre_patch_map, lemma2_table,
                                        model_transfer_gap, one_hot_head_residuals, patch_errors,
                                        predicted_border_output, random_patch_conv, sampled_one_hot_residual,
                                        transferred_attention)


def _layer_and_input(k, p, c, grid=4, seed=0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    layer = random_patch_conv(k, p, c, (grid, grid), gen, dtype)
    x = torch.randn(2, grid * grid, p * p * c, generator=gen, dtype=dtype)
    return layer, x


def test_patch_convolution_is_the_pixel_convolution():
    layer, _ = _layer_and_input(3, 4, 2)
    img = torch.randn(2, 2, 16, 16)
    assert torch.allclose(layer(patchify(img, 4)), patchify(layer.conv(img), 4), atol=1e-6)


@pytest.mark.parametrize("k,p,c", list(itertools.product((3, 5), (4, 8, 16), (1, 3))))
def test_transfer_exact_on_interior_patches(k, p, c):
    layer, x = _layer_and_input(k, p, c, seed=k * 100 + p * 10 + c)
    attn = transferred_attention(layer)
    y_conv, y_attn = layer(x), attn(x)
    inside = interior_mask(layer.grid, p, k)
    assert inside.sum() == 4  # 4x4 grid, one ring of border patches
    per_patch = (y_attn - y_conv).norm(dim=-1) / y_conv.norm(dim=-1)
    assert per_patch[:, inside].max() <= 1e-5
    assert patch_errors(y_conv, y_attn)[:, ~inside].min() > 1e-3  # zero padding is not reproduced


@pytest.mark.parametrize("bias_form", ["one_hot", "quadratic"])
@pytest.mark.parametrize("k,p", [(3, 4), (5, 4), (5, 2), (3, 8)])
def test_border_behaviour_as_documented(bias_form, k, p):
    layer, x = _layer_and_input(k, p, 2, grid=4, seed=7)
    attn = transferred_attention(layer, bias_form=bias_form)
    offsets = head_offsets(neighbourhood_radius(k, p))
    amap = attn.attention_map(x)[0].double()
    # one-hot on the existing / clamped neighbour, uniform over all patches where it is missing ('one_hot')
    assert (amap - predicted_attention(layer.grid, offsets, bias_form)).abs().max() < 1e-6
    assert patch_errors(predicted_border_output(x, layer, bias_form), attn(x)).max() < 1e-5
    if bias_form == "quadratic":  # left-edge query, head aimed left: attends to itself
        left = offsets.index((0, -1))
        assert amap[left, 4].argmax() == 4


def test_patch_blocks_match_convolved_basis_images():
    gen = torch.Generator().manual_seed(3)
    for k, p, c in [(3, 3, 2), (5, 2, 1), (5, 1, 2), (3, 4, 1)]:
        w = torch.randn(c, c, k, k, generator=gen, dtype=torch.float64)
        m = neighbourhood_radius(k, p)
        by_index = conv_patch_blocks(w, p, m)  # (offsets, D_out, D_in)
        by_conv = centre_patch_map(w, p, m).permute(1, 0, 2)
        assert torch.allclose(by_index, by_conv, atol=1e-12)


def test_heads_required_and_condition():
    assert [heads_required(k, p) for k, p in [(3, 16), (5, 16), (5, 8), (3, 1), (5, 2), (5, 1), (7, 2), (1, 4)]] \
        == [9, 9, 9, 9, 9, 25, 25, 1]
    for k in (3, 5):  # Corollary 4 at the c32 patch size and the paper's
        assert heads_required(k, 8) == heads_required(k, 16) == 9


def test_transfer_rejects_bad_inputs():
    layer = PatchConvolution(3, 1, (6, 6), 5)  # pixel input, K = 5 needs 25 heads
    with pytest.raises(ValueError, match="needs 25 heads"):
        conv_layer_to_attention(layer.conv, Attention(3, 9, head_dim=3, rel_pos_grid=(6, 6)), 1)
    layer = PatchConvolution(48, 4, (4, 4), 3)
    with pytest.raises(ValueError, match="head size 16 < token dim 48"):
        conv_layer_to_attention(layer.conv, Attention(48, 9, head_dim=16, rel_pos_grid=(4, 4)), 4)
    with pytest.raises(ValueError, match="no relative position bias"):
        conv_layer_to_attention(layer.conv, Attention(48, 9, head_dim=48), 4)
    with pytest.raises(ValueError, match="odd"):
        PatchConvolution(48, 4, (4, 4), 4)
    with pytest.raises(ValueError, match="embed_dim must be"):
        conv_phase_vit(3, img_size=32, patch_size=8, embed_dim=100)
    with pytest.raises(ValueError, match="global_pool='avg'"):
        conv_phase_vit(3, img_size=32, patch_size=8, global_pool="token")


def test_extra_heads_and_keep_qk():
    layer, x = _layer_and_input(3, 4, 1)
    attn = Attention(16, 12, head_dim=20, rel_pos_grid=layer.grid)
    q_before = attn.qkv.weight[:12 * 20].clone()
    conv_layer_to_attention(layer.conv, attn, 4, keep_qk=True)
    assert torch.equal(attn.qkv.weight[:12 * 20], q_before)
    proj = attn.proj.weight.view(16, 12, 20)
    assert proj[:, 9:].abs().sum() == 0 and proj[:, :, 16:].abs().sum() == 0
    inside = interior_mask(layer.grid, 4, 3)
    assert patch_errors(layer(x), attn(x))[:, inside].max() < 1e-5  # random q/k logits << c = 30


def _perturbed(model, seed):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=gen))
    return model.eval()


@pytest.mark.parametrize("k", [3, 5])
def test_whole_model_transfer_interior(k):
    conv = _perturbed(conv_phase_vit(k, img_size=16, patch_size=4, in_chans=2, depth=1, num_classes=5), k)
    attn = conv_to_mhsa(conv).eval()
    assert attn.blocks[0].attn.num_heads == 9 and attn.blocks[0].attn.head_dim == 32
    conv_sd, attn_sd = conv.state_dict(), attn.state_dict()
    shared = [n for n in conv_sd if ".attn." not in n]
    assert len(shared) == len([n for n in attn_sd if ".attn." not in n]) > 0
    assert all(torch.equal(conv_sd[n], attn_sd[n]) for n in shared)
    x = torch.randn(3, 2, 16, 16)
    err = patch_errors(conv.forward_features(x), attn.forward_features(x))
    inside = interior_mask(conv.grid_size, 4, k)
    assert err[:, inside].max() < 1e-5 and err[:, ~inside].max() > 1e-3


def test_whole_model_transfer_stays_on_the_models_device():
    """The transfer builds its index tensors where the weights are: on CUDA the first GPU campaign failed
    with a cuda/cpu mix. The meta device stands in for any device but the CPU (it rejects the mix too)."""
    conv = conv_phase_vit(3, img_size=16, patch_size=4, in_chans=2, depth=2, num_classes=5).to("meta")
    attn = conv_to_mhsa(conv)
    assert {p.device.type for p in attn.parameters()} == {"meta"}


def test_two_block_model_interior_shrinks_by_depth():
    conv = _perturbed(conv_phase_vit(3, img_size=24, patch_size=4, in_chans=1, depth=2, num_classes=3), 11)
    attn = conv_to_mhsa(conv)
    rows = model_transfer_gap(conv, attn, torch.randn(2, 1, 24, 24))
    assert [r["interior_patches"] for r in rows[:2]] == [16, 4]
    assert all(r["interior_max_err"] < 1e-5 for r in rows[:2])
    assert rows[-1]["block"] == "logits" and rows[-1]["all_mean_err"] > 0


@pytest.mark.parametrize("kernel, patch, channels, needed", [(3, 3, 1, 9), (5, 5, 1, 9), (3, 1, 3, 9), (5, 1, 5, 25)])
def test_head_lower_bounds(kernel, patch, channels, needed):
    """Theorems 5 / 6 through the probe the head_bounds table runs: patch input (P = K) needs 9 heads, pixel
    input (P = 1, C_in = C_out = K) K^2; one head fewer leaves a residual, by one-hot, any positional
    attention and an explicit least-squares fit alike."""
    r = head_bound_row({"theorem": {"kernel": kernel, "patch": patch, "channels": channels}})
    assert r["heads_needed"] == r["positional_rank"] == needed
    assert max(r["one_hot_at"], r["positional_at"], r["lstsq_at"]) < 1e-12
    assert min(r["one_hot_below"], r["positional_below"], r["lstsq_below"]) > 1e-3


def test_greedy_offsets_are_optimal_and_match_sampled_lstsq():
    gen = torch.Generator().manual_seed(5)
    w = torch.randn(1, 1, 3, 3, generator=gen, dtype=torch.float64)
    t = centre_patch_map(w, 3, 1)  # P = K = 3: the 9 neighbour patches
    energy = t.pow(2).sum(dim=(0, 2))
    exhaustive = min(energy.sum() - energy[list(s)].sum() for s in itertools.combinations(range(9), 8))
    greedy = one_hot_head_residuals(t, 9)
    assert abs(greedy[7]["residual"] - (exhaustive / energy.sum()).sqrt().item()) < 1e-12
    assert greedy[8]["residual"] < 1e-12
    eight = greedy[7]["offsets"]
    sampled = sampled_one_hot_residual(w, 3, eight, 1, 4000, gen)
    assert abs(sampled - greedy[7]["residual"]) < 0.15 * greedy[7]["residual"]
    assert sampled_one_hot_residual(w, 3, list(range(9)), 1, 400, gen) < 1e-10


@pytest.mark.parametrize("bias_form", ["one_hot", "quadratic"])
def test_lemma2_error_decreases_with_scale(bias_form):
    rows = lemma2_table(bias_form=bias_form)
    mass = [r["off_target_mass"] for r in rows]
    out = [r["interior_max_err"] for r in rows]
    assert all(a > b for a, b in zip(mass, mass[1:])) and all(a > b for a, b in zip(out, out[1:]))
    assert all(r["off_target_mass"] <= r["bound"] + 1e-12 for r in rows)
    assert mass[-1] < 1e-11 and out[-1] < 1e-10 and mass[0] > 0.9


def _vit_params(dim, depth, classes, mlp, attn):
    block = 4 * dim + dim * mlp + mlp + mlp * dim + dim + attn
    return depth * block + 2 * dim + dim * classes + classes


HEADS = 9


def _attn_params(dim, grid):
    """qkv (9 heads of size dim) + output projection + one relative-position table per head."""
    return dim * 3 * HEADS * dim + 3 * HEADS * dim + HEADS * dim * dim + dim + HEADS * (2 * grid - 1) ** 2


EXPECTED_PARAMS = {
    # conv phase: LN/FFN/head + a C -> C KxK conv with bias per layer (C = 3)
    "repro_cmhsa_3_conv": _vit_params(768, 6, 100, 3072, 3 * 3 * 9 + 3),
    "repro_cmhsa_5_conv": _vit_params(768, 6, 100, 3072, 3 * 3 * 25 + 3),
    "repro_cmhsa_attn": _vit_params(768, 6, 100, 3072, _attn_params(768, 14)),
    "repro_cmhsa_3_conv_c32": _vit_params(192, 6, 100, 768, 3 * 3 * 9 + 3),
    "repro_cmhsa_5_conv_c32": _vit_params(192, 6, 100, 768, 3 * 3 * 25 + 3),
    "repro_cmhsa_attn_c32": _vit_params(192, 6, 100, 768, _attn_params(192, 4)),
}


def test_parameter_counts_as_stated():
    assert EXPECTED_PARAMS == {"repro_cmhsa_3_conv": 28_431_964, "repro_cmhsa_5_conv": 28_432_828,
                               "repro_cmhsa_attn": 156_001_834, "repro_cmhsa_3_conv_c32": 1_800_028,
                               "repro_cmhsa_5_conv_c32": 1_800_892, "repro_cmhsa_attn_c32": 9_797_050}


def _check_registered(name):
    model = timm.create_model(name)
    assert sum(p.numel() for p in model.parameters()) == EXPECTED_PARAMS[name], name
    assert len(model.blocks) == 6 and model.num_classes == 100 and model.global_pool == "avg"
    assert model.pos_embed is None and model.cls_token is None
    return model


@pytest.mark.parametrize("name", ["repro_cmhsa_3_conv_c32", "repro_cmhsa_5_conv_c32", "repro_cmhsa_attn_c32"])
def test_registered_c32_models(name):
    model = _check_registered(name)
    assert model.embed_dim == 192 and model.grid_size == (4, 4)
    assert model(torch.randn(1, 3, 32, 32)).shape == (1, 100)


@pytest.mark.slow  # builds the 156M-parameter attention model (about 10 s on 2 CPU cores)
@pytest.mark.parametrize("name", ["repro_cmhsa_3_conv", "repro_cmhsa_5_conv", "repro_cmhsa_attn"])
def test_registered_paper_models(name):
    model = _check_registered(name)
    assert model.embed_dim == 768 and model.grid_size == (14, 14)
    if name == "repro_cmhsa_attn":
        assert model.blocks[0].attn.num_heads == 9 and model.blocks[0].attn.head_dim == 768


def test_registered_models_take_overrides_and_transfer():
    conv = timm.create_model("repro_cmhsa_5_conv_c32", num_classes=10, depth=2)
    attn = timm.create_model("repro_cmhsa_attn_c32", num_classes=10, depth=2)
    small = timm.create_model("repro_cmhsa_attn", img_size=32, patch_size=4, depth=1, num_classes=7)
    assert small.embed_dim == 48 and small.blocks[0].attn.head_dim == 48 and small.grid_size == (8, 8)
    assert small(torch.randn(2, 3, 32, 32)).shape == (2, 7)
    assert conv_to_mhsa(_perturbed(conv, 2), attn_model=attn) is attn
    x = torch.randn(2, 3, 32, 32)
    inside = interior_mask((4, 4), 8, 5)
    conv.eval(), attn.eval()
    hidden_c = conv.blocks[0](conv.patch_embed(x))
    hidden_a = attn.blocks[0](attn.patch_embed(x))
    assert patch_errors(hidden_c, hidden_a)[:, inside].max() < 1e-5
    with pytest.raises(ValueError, match="no pretrained weights"):
        timm.create_model("repro_cmhsa_3_conv_c32", pretrained=True)


@pytest.mark.parametrize("transfer", ["exact", "trainable"])
def test_transfer_keeps_the_logits_at_224_px(transfer):
    """Theorem 1's construction (exact: W_Q = W_K = 0, c = 30) keeps a 224-px CMHSA-3's logits within 1 %;
    the training transfer (random W_Q, W_K kept, 90 % of the attention on the offset) within a few %."""
    from papers.cmhsa.experiments import transfer_kwargs
    conv = _perturbed(timm.create_model("repro_cmhsa_3_conv", depth=1, num_classes=100), 5)
    attn = timm.create_model("repro_cmhsa_attn", depth=1, num_classes=100)
    conv_to_mhsa(conv, attn_model=attn, **transfer_kwargs("full", transfer))
    x = torch.randn(4, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        zc, za = conv(x), attn.eval()(x)
    gap = ((za - zc).norm() / zc.norm()).item()
    assert gap < (0.01 if transfer == "exact" else 0.05), gap
    if transfer == "exact":
        assert (za.argmax(1) == zc.argmax(1)).all()
