"""Token statistics (repro/probes/diversity.py) on inputs with known answers, and the Aug-ViT analysis."""
import math

import pytest
import timm
import torch
import torch.nn.functional as F

import repro.models  # noqa: F401
from papers.augvit import diversity as aug
from repro.probes.diversity import (attention_std, block_input, feature_diversity, layerwise,
                                    patch_cosine_similarity, relative_diversity)
from repro.probes.hooks import record_blocks


def small_vit(**kw):
    torch.manual_seed(kw.pop("seed", 0))
    cfg = dict(embed_dim=48, num_heads=3, depth=3, patch_size=8)
    return timm.create_model("repro_deit_tiny_c32", **{**cfg, **kw}).eval()


# feature diversity -------------------------------------------------------------------------------------

def test_diversity_of_rank_one_tokens_is_zero():
    z = torch.randn(3, 1, 16).expand(3, 10, 16)  # Z = 1 z^T
    assert torch.allclose(feature_diversity(z), torch.zeros(3), atol=1e-5)
    assert torch.allclose(relative_diversity(z), torch.zeros(3), atol=1e-5)


def test_diversity_is_the_frobenius_residual_at_the_mean():
    v = torch.randn(8)
    z = torch.stack([v, -v, v, -v])[None]  # mean 0: r = ||Z||_F = 2 ||v||
    assert feature_diversity(z).item() == pytest.approx(2 * v.norm().item(), rel=1e-5)
    x = torch.randn(2, 7, 5)
    for _ in range(5):  # any other z is no better than the mean
        other = torch.randn(2, 1, 5)
        assert (feature_diversity(x) <= (x - other).flatten(1).norm(dim=1) + 1e-5).all()


def test_diversity_prefix_tokens_are_left_out_when_asked():
    z = torch.randn(1, 1, 6).expand(2, 5, 6).clone()
    z[:, 0] = 100.0  # a class token unlike the patches
    assert feature_diversity(z).min() > 1
    assert torch.allclose(feature_diversity(z, num_prefix_tokens=1), torch.zeros(2), atol=1e-4)


# patch cosine similarity --------------------------------------------------------------------------------

def test_cosine_of_identical_patches_is_one_and_of_orthogonal_is_zero():
    same = torch.randn(2, 1, 12).expand(2, 9, 12)
    assert torch.allclose(patch_cosine_similarity(same), torch.ones(2), atol=1e-5)
    ortho = 3.0 * torch.eye(12)[:9][None]
    assert patch_cosine_similarity(ortho).item() == pytest.approx(0.0, abs=1e-6)
    pair = torch.tensor([[[1.0, 2.0], [-2.0, -4.0]]])
    assert patch_cosine_similarity(pair).item() == pytest.approx(-1.0, abs=1e-6)


def test_cosine_matches_pairwise_definition_and_skips_class_token():
    h = torch.randn(3, 1 + 10, 7)
    u = F.normalize(h[:, 1:], dim=-1)
    gram = u @ u.transpose(1, 2)
    n = 10
    brute = (gram.sum(dim=(1, 2)) - gram.diagonal(dim1=1, dim2=2).sum(-1)) / (n * (n - 1))
    assert torch.allclose(patch_cosine_similarity(h, num_prefix_tokens=1), brute, atol=1e-5)
    h2 = h.clone()
    h2[:, 0] = torch.randn(3, 7)
    assert torch.allclose(patch_cosine_similarity(h2, num_prefix_tokens=1), brute, atol=1e-5)


# attention std -------------------------------------------------------------------------------------------

def test_attention_std_uniform_is_zero_and_one_hot_is_known():
    n_tok = 10
    uniform = torch.full((2, 3, n_tok, n_tok), 1.0 / n_tok)
    assert torch.allclose(attention_std(uniform), torch.zeros(2), atol=1e-7)
    one_hot = F.one_hot(torch.randint(1, n_tok, (2, 3, n_tok)), n_tok).float()
    assert torch.allclose(attention_std(one_hot), torch.full((2,), math.sqrt(n_tok - 1) / n_tok), atol=1e-6)
    # class token row and column dropped: the one-hot patch entries leave m = 9 columns
    m = n_tok - 1
    assert torch.allclose(attention_std(one_hot, num_prefix_tokens=1), torch.full((2,), math.sqrt(m - 1) / m),
                          atol=1e-6)
    assert torch.allclose(attention_std(one_hot, unbiased=True), torch.full((2,), 1 / math.sqrt(n_tok)), atol=1e-6)


def test_attention_std_rejects_non_square_maps():
    with pytest.raises(ValueError, match="B, H, N, N"):
        attention_std(torch.rand(2, 3, 4, 5))


# layerwise -----------------------------------------------------------------------------------------------

def test_layerwise_reads_z0_and_block_outputs():
    model = small_vit()
    model.train()
    x = torch.randn(2, 3, 32, 32)
    values = layerwise(model, x, feature_diversity, include_input=True, drop_prefix=False)
    assert model.training and len(values) == len(model.blocks) + 1
    with torch.no_grad():
        z = model.patch_embed(x)
        z = torch.cat([model.cls_token.expand(2, -1, -1), z], 1) + model.pos_embed
        assert values[0] == pytest.approx(feature_diversity(z).mean().item(), rel=1e-5)
        for blk in model.blocks:
            z = blk.eval()(z)
        assert values[-1] == pytest.approx(feature_diversity(z).mean().item(), rel=1e-5)


def test_layerwise_attention_and_prefix_counts():
    model = small_vit()
    x = torch.randn(2, 3, 32, 32)
    stds = layerwise(model, x, attention_std, on="attention")
    cos = layerwise(model, x, patch_cosine_similarity)
    with torch.no_grad(), record_blocks(model) as rec:
        model(x)
    assert stds[1] == pytest.approx(attention_std(rec.attention(1), num_prefix_tokens=1).mean().item(), rel=1e-5)
    assert cos[2] == pytest.approx(patch_cosine_similarity(rec.features[2], 1).mean().item(), rel=1e-5)
    with pytest.raises(ValueError, match="on="):
        layerwise(model, x, attention_std, on="logits")


def test_layerwise_handles_convit_late_class_token():
    torch.manual_seed(0)
    model = timm.create_model("repro_convit_tiny_c32", embed_dim=48, num_heads=4, depth=3, gpsa_layers=2,
                              patch_size=8).eval()
    x = torch.randn(2, 3, 32, 32)
    cos = layerwise(model, x, patch_cosine_similarity)
    with torch.no_grad(), record_blocks(model) as rec:
        model(x)
    assert rec.features[0].shape[1] == 16 and rec.features[2].shape[1] == 17
    assert cos[0] == pytest.approx(patch_cosine_similarity(rec.features[0]).mean().item(), rel=1e-5)
    assert cos[2] == pytest.approx(patch_cosine_similarity(rec.features[2], 1).mean().item(), rel=1e-5)


# Aug-ViT -------------------------------------------------------------------------------------------------

def test_gelu_lipschitz_matches_its_derivation():
    x = math.sqrt(2.0)  # GELU'' = phi(x)(2 - x^2) = 0
    closed = 0.5 * (1 + math.erf(x / math.sqrt(2))) + x * math.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    assert aug.gelu_lipschitz() == pytest.approx(closed, abs=1e-7)
    assert 1.12 < closed < 1.13


def test_circulant_spectral_norm_equals_dense_matrix_norm():
    torch.manual_seed(0)
    for din, dout in ((64, 64), (48, 96), (96, 48)):
        layer = repro.models.CirculantLinear(din, dout, num_blocks=4)
        dense = torch.linalg.matrix_norm(layer.dense_weight().double(), ord=2).item()
        assert aug.circulant_spectral_norm(layer) == pytest.approx(dense, rel=1e-9)


def test_variants_match_the_constructor_configs_and_share_weights():
    model = aug.build_augvit("repro_deit_tiny_c32", embed_dim=48, num_heads=3, depth=3, patch_size=8)
    v = aug.variants(model)
    assert set(v) == set(aug.VARIANTS)
    deit = timm.create_model("repro_deit_tiny_c32", embed_dim=48, num_heads=3, depth=3, patch_size=8)
    msa = timm.create_model("repro_deit_tiny_c32", embed_dim=48, num_heads=3, depth=3, patch_size=8,
                            aug_paths=2, aug_mlp=False)
    assert set(v["deit"].state_dict()) == set(deit.state_dict())
    assert set(v["augvit_msa"].state_dict()) == set(msa.state_dict())
    assert torch.equal(v["deit"].blocks[1].attn.qkv.weight, model.blocks[1].attn.qkv.weight)
    x = torch.randn(2, 17, 48)
    blk = v["attention_only"].blocks[0]
    with torch.no_grad():
        assert torch.allclose(blk(x), model.blocks[0].attn(model.blocks[0].norm1(x)))
    with pytest.raises(ValueError, match="aug_mlp=True"):
        aug.variants(deit)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_augvit_keeps_more_diversity_at_depth_than_attention_only(seed):
    model = aug.build_augvit("repro_deit_tiny_c32", seed=seed, embed_dim=64, num_heads=4, depth=6, patch_size=8)
    torch.manual_seed(100 + seed)
    curves = aug.diversity_curves(model, torch.randn(4, 3, 32, 32))
    att, msa, full = curves["attention_only"], curves["augvit_msa"], curves["augvit_msa_mlp"]
    assert att["ratio"][0] == 1.0 and len(att["ratio"]) == 7
    for c in (msa, full):
        assert c["ratio"][-1] > 10 * att["ratio"][-1]
        assert c["relative"][-1] > 10 * att["relative"][-1]
    assert att["relative"][-1] < 0.05  # pure attention collapses the tokens


def test_s4_linear_bound_holds_on_a_small_augvit():
    model = aug.build_augvit("repro_deit_tiny_c32", seed=0, embed_dim=64, num_heads=4, depth=4, patch_size=8)
    x = torch.randn(4, 3, 32, 32)
    rows = aug.s4_bound(model, x)
    assert len(rows) == 4
    lam = aug.gelu_lipschitz()
    for row, blk in zip(rows, model.blocks):
        expect = 1 + lam * sum(torch.linalg.matrix_norm(p.dense_weight(), ord=2).item() for p in blk.aug_attn.paths)
        assert row["alpha"] == pytest.approx(expect, rel=1e-5)
        assert row["r_out"] <= row["linear_term"] and row["verdict"] == "holds"
    # the stack feeds each step's output to the next
    assert rows[1]["r_in"] == pytest.approx(rows[0]["r_out"], rel=1e-6)
    deployed = aug.s4_bound(model, x, setting="model")
    assert len(deployed) == 4 and all(r["r_out"] > 0 for r in deployed)


def test_s4_stack_without_augmented_shortcuts_has_alpha_one():
    model = small_vit()
    rows = aug.s4_bound(model, torch.randn(2, 3, 32, 32))
    assert len(rows) == 3 and all(r["alpha"] == 1.0 and r["beta"] == 1.0 for r in rows)  # one per block


def test_block_input_hook_is_removed():
    model = small_vit()
    with block_input(model.blocks[0]) as first:
        model(torch.randn(1, 3, 32, 32))
    assert first["z"].shape == (1, 17, 48) and not model.blocks[0]._forward_pre_hooks
