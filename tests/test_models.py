"""The shared model core against timm's reference implementations and the papers' definitions."""
import math

import pytest
import timm
import torch
import torch.nn.functional as F
from timm.models.vision_transformer import VisionTransformer as TimmViT

from conftest import REPO
import repro.models as rm
from repro.models import GPSA, Attention, CirculantLinear, TalkingHeadsAttention, VisionTransformer
from repro.models.blocks import Block
from repro.models.cost import count_macs, count_params, macs_without_attention
from repro.probes.hooks import record_blocks

torch.manual_seed(0)

# ours -> timm reference (DeiT "+" and ConViT "+" via timm configured accordingly)
PAIRS = {
    "repro_deit_tiny": lambda: timm.create_model("deit_tiny_patch16_224"),
    "repro_deit_small": lambda: timm.create_model("deit_small_patch16_224"),
    "repro_convit_tiny": lambda: timm.create_model("convit_tiny"),
    "repro_convit_small": lambda: timm.create_model("convit_small"),
    "repro_deit_tiny_plus": lambda: TimmViT(embed_dim=256, num_heads=4),
    "repro_convit_tiny_plus": lambda: timm.create_model("convit_tiny", embed_dim=64),
}
SLOW_PAIRS = {
    "repro_deit_base": lambda: timm.create_model("deit_base_patch16_224"),
    "repro_convit_base": lambda: timm.create_model("convit_base"),
    "repro_deit_small_plus": lambda: TimmViT(embed_dim=576, num_heads=9),
    "repro_convit_small_plus": lambda: timm.create_model("convit_small", embed_dim=64),
    "repro_deit_base_plus": lambda: TimmViT(embed_dim=1024, num_heads=16),
    "repro_convit_base_plus": lambda: timm.create_model("convit_base", embed_dim=64),
}


def _check_pair(name, make_ref):
    ref = make_ref().eval()
    ours = timm.create_model(name).eval()
    assert count_params(ours) == count_params(ref)
    conv = rm.from_timm(ref).eval()
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        a, b = ref(x), conv(x)
    assert (a - b).abs().max().item() <= 1e-5 * max(1.0, a.abs().max().item())
    assert set(conv.state_dict()) == set(ours.state_dict())
    ours.load_state_dict(conv.state_dict())  # the registered name itself, with timm's weights: a setting without
    with torch.no_grad():                    # parameters (a scale, an eps, an activation) would show here
        c = ours(x)
    assert (a - c).abs().max().item() <= 1e-5 * max(1.0, a.abs().max().item())


@pytest.mark.parametrize("name", PAIRS)
def test_params_and_outputs_match_timm(name):
    _check_pair(name, PAIRS[name])


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW_PAIRS)
def test_params_and_outputs_match_timm_large(name):
    _check_pair(name, SLOW_PAIRS[name])


def test_from_timm_rejects_other_architectures():
    with pytest.raises(TypeError, match="supports"):
        rm.from_timm(torch.nn.Linear(2, 2))


def _gpsa(heads=9, grid=(5, 5), dim=36, alpha=1.0):
    m = GPSA(dim, heads, grid=grid, locality_strength=alpha)
    torch.nn.init.normal_(m.qk.weight, std=0.3)
    m.local_init()
    m.gating_param.data = torch.randn(heads)
    return m


def test_gpsa_attention_dropout_is_timms_one_mask_on_the_gated_map():
    """Train mode with attention dropout: the same output as timm's GPSA at the same seed (one mask)."""
    from timm.models.convit import GPSA as TimmGPSA
    ours = _gpsa(heads=4, grid=(4, 4), dim=32)
    ours.attn_drop = 0.3
    ref = TimmGPSA(32, num_heads=4, attn_drop=0.3)
    ref.load_state_dict(ours.state_dict())
    ours.train(), ref.train()
    x = torch.randn(3, 16, 32)
    ref(x)  # timm builds its relative indices on the first call: compare from the second on
    torch.manual_seed(7)
    a = ref(x)
    torch.manual_seed(7)
    b = ours(x)
    assert torch.allclose(a, b, atol=1e-5), (a - b).abs().max()
    torch.manual_seed(8)
    assert not torch.allclose(ours(x), b, atol=1e-3)  # dropout is on: another seed, another mask
    ours.eval(), ref.eval()
    assert torch.allclose(ours(x), ref(x), atol=1e-5)


def test_gpsa_sdpa_form_equals_explicit_form_forward_and_grad():
    m = _gpsa()
    x = torch.randn(3, 25, 36, requires_grad=True)
    out = m(x)
    ref = m.forward_explicit(x)
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-5)
    g = torch.randn_like(out)
    grads = torch.autograd.grad(out, [x, *m.parameters()], g)
    grads_ref = torch.autograd.grad(ref, [x, *m.parameters()], g)
    for a, b in zip(grads, grads_ref):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)


def test_gpsa_attention_rows_sum_to_one_without_renormalising():
    m = _gpsa()
    x = torch.randn(2, 25, 36)
    g = m.gate().view(1, -1, 1, 1)
    raw = (1 - g) * m.content_attention(x) + g * m.positional_attention()
    assert torch.allclose(raw.sum(-1), torch.ones(()), atol=1e-6)


def test_gpsa_conv_init_heads_peak_at_their_kernel_offsets():
    grid = (7, 7)
    m = _gpsa(heads=9, grid=grid, alpha=1.0)
    pos = m.positional_attention()  # (H, N, N)
    offsets = m.kernel_offsets()
    for h in range(9):
        dy, dx = offsets[h].tolist()
        for qy in range(1, 6):       # interior queries: the target patch exists
            for qx in range(1, 6):
                q = qy * grid[1] + qx
                k = int(pos[h, q].argmax())
                assert (k // grid[1] - qy, k % grid[1] - qx) == (dy, dx)
    # a stronger locality strength concentrates the attention on the offset
    m10 = _gpsa(heads=9, grid=grid, alpha=10.0)
    assert m10.positional_attention().amax(-1).min() > 0.99
    assert {tuple(o) for o in offsets.tolist()} == {(a, b) for a in (-1, 0, 1) for b in (-1, 0, 1)}


def test_gpsa_even_kernel_centres_are_half_integer():
    m = _gpsa(heads=4, grid=(6, 6), dim=16)
    pos = m.positional_attention()
    q = 3 * 6 + 3
    for h, (dy, dx) in enumerate(m.kernel_offsets().tolist()):
        top4 = set(pos[h, q].topk(4).indices.tolist())
        expect = {(3 + int(math.floor(dy + s))) * 6 + 3 + int(math.floor(dx + t)) for s in (-.5, .5) for t in (-.5, .5)}
        assert top4 == expect


def test_gpsa_gating_frozen_and_freeze_flags():
    m = VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=3, num_heads=4, gpsa_layers=2,
                          train_gating=False, gating_init=0.0)
    assert not m.blocks[0].attn.gating_param.requires_grad
    assert float(m.blocks[0].attn.gate()[0]) == 0.5
    m = VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=3, num_heads=4, gpsa_layers=2,
                          freeze_gpsa=True)
    assert not any(p.requires_grad for p in m.blocks[1].attn.parameters())
    assert all(p.requires_grad for p in m.blocks[2].attn.parameters())


def test_relpos_bias_is_the_table_entry_of_the_offset_and_sdpa_matches_explicit():
    a = Attention(24, 3, rel_pos_grid=(3, 4))
    torch.nn.init.normal_(a.rel_pos.table)
    bias = a.rel_pos()
    t = a.rel_pos.table
    for i in range(12):
        for j in range(12):
            dy, dx = j // 4 - i // 4, j % 4 - i % 4
            assert torch.equal(bias[:, i, j], t[:, dy + 2, dx + 3])
    x = torch.randn(2, 13, 24)  # with one prefix token: zero bias for it
    assert torch.equal(a.rel_pos(1)[:, 0], torch.zeros(3, 13))
    q, k, v = a._qkv(x)
    explicit = a._merge(a.attention_map(x) @ v)
    assert torch.allclose(a(x), explicit, atol=1e-5)


def test_talking_heads_with_identity_mixing_is_plain_attention():
    th = TalkingHeadsAttention(24, 4)
    plain = Attention(24, 4)
    plain.load_state_dict(th.state_dict(), strict=False)
    for lin in (th.mix_logits, th.mix_weights):
        torch.nn.init.eye_(lin.weight)
        torch.nn.init.zeros_(lin.bias)
    x = torch.randn(2, 10, 24)
    assert torch.allclose(th(x), plain(x), atol=1e-5)
    torch.nn.init.normal_(th.mix_weights.weight)
    assert not torch.allclose(th(x), plain(x), atol=1e-3)


def test_block_norm_placements_compute_their_equations():
    x = torch.randn(2, 5, 16)
    for norm in ("pre_ln", "post_ln", "res_post_ln"):
        blk = Block(16, Attention(16, 2), norm=norm).eval()
        for p in blk.parameters():
            torch.nn.init.normal_(p, std=0.5)
        a, m = blk.attn, blk.mlp
        if norm == "pre_ln":
            y = x + a(blk.norm1(x)); y = y + m(blk.norm2(y))
        elif norm == "post_ln":
            y = blk.norm1(x + a(x)); y = blk.norm2(y + m(y))
        else:  # supplement Table 1: Y4 = Y + LN(MSA(LN Y)); Y_{l+1} = Y4 + LN(MLP(LN Y4))
            y = x + blk.post_norm1(a(blk.norm1(x))); y = y + blk.post_norm2(m(blk.norm2(y)))
        assert torch.allclose(blk(x), y, atol=1e-6), norm
    with pytest.raises(ValueError, match="norm placement"):
        Block(16, Attention(16, 2), norm="sandwich")


def test_post_ln_model_has_no_final_norm_after_its_last_block():
    """A Post-LN stack ends in its last block's LN (Xiong et al.): no LN o LN before the head."""
    post = timm.create_model("repro_deit_tiny_post_ln_c32", depth=2, num_classes=10).eval()
    pre = timm.create_model("repro_deit_tiny_c32", depth=2, num_classes=10)
    assert isinstance(post.norm, torch.nn.Identity) and isinstance(pre.norm, torch.nn.LayerNorm)
    seen = {}
    post.blocks[-1].register_forward_hook(lambda mod, args, out: seen.__setitem__("last", out))
    feats = post.forward_features(torch.randn(2, 3, 32, 32))
    assert torch.equal(feats, seen["last"])  # what the head reads is the last block's own LN output
    n = sum(p.numel() for p in post.parameters()) - sum(p.numel() for p in pre.parameters())
    assert n == -2 * post.embed_dim  # the final LN's weight and bias are gone, nothing else differs


def test_circulant_fft_product_equals_dense_matrix_and_is_circulant():
    lin = CirculantLinear(32, 32, num_blocks=4)
    W = lin.dense_weight()
    b = 8
    blk = W[:b, b:2 * b]
    assert torch.equal(blk, torch.roll(torch.roll(blk, 1, 0), 1, 1))  # circulant: constant diagonals
    x = torch.randn(3, 7, 32)
    assert torch.allclose(lin(x), x @ W.T + lin.bias, atol=1e-5)
    lin.fft = False
    assert torch.allclose(lin(x), x @ W.T + lin.bias, atol=1e-6)
    assert count_params(lin) == 4 * 4 * 8 + 32


def test_augvit_block_matches_release_equation():
    blk = Block(16, Attention(16, 2), aug_paths=2, aug_scale=0.75).eval()
    x = torch.randn(2, 5, 16)
    h = blk.norm1(x)
    y = (x + blk.attn(h) + sum(F.gelu(p(h)) for p in blk.aug_attn.paths)) * 0.75
    h2 = blk.norm2(y)
    y = (y + blk.mlp(h2) + sum(F.gelu(p(h2)) for p in blk.aug_mlp.paths)) * 0.75
    assert torch.allclose(blk(x), y, atol=1e-6)


def test_macs_count_attention_matmuls_deit_small_is_4_6_gmacs():
    m = timm.create_model("repro_deit_small")
    macs, by_op = count_macs(m, 224, by_op=True)
    assert abs(macs / 1e9 - 4.6) < 0.01            # DeiT paper: 4.6G
    assert abs(macs_without_attention(by_op) / 1e9 - 4.24) < 0.01  # ConViT Table 1 convention: 4.3G
    with torch.device("meta"):  # shapes only: the same counts without allocating weights
        meta = timm.create_model("repro_deit_small")
    meta_macs, meta_by_op = count_macs(meta, 224, by_op=True)
    assert meta_macs == macs and macs_without_attention(meta_by_op) == macs_without_attention(by_op)


def test_augvit_fft_costs_far_less_than_dense_release_product():
    fft = timm.create_model("repro_augvit_small", img_size=64, patch_size=16)
    dense = timm.create_model("repro_augvit_small", img_size=64, patch_size=16, aug_fft=False)
    deit = timm.create_model("repro_deit_small", img_size=64, patch_size=16)
    base = count_macs(deit, 64)
    assert count_params(fft) == count_params(dense) > count_params(deit)
    assert count_macs(fft, 64) - base < 0.1 * (count_macs(dense, 64) - base)


def test_every_named_model_builds_and_runs_at_small_size():
    names = timm.list_models("repro_*")
    assert len(names) >= 32
    for n in names:
        kw = dict(img_size=32, depth=2, num_classes=7)
        if "cmhsa" in n:
            continue  # conv-phase / attention-phase models are tested in test_cmhsa_models.py
        if "c32" not in n:
            kw["patch_size"] = 8
        if "convit" in n:
            kw["gpsa_layers"] = 1
        m = timm.create_model(n, **kw)
        assert m(torch.randn(2, 3, 32, 32)).shape == (2, 7), n


def test_hooks_read_attention_on_each_layers_actual_input():
    m = timm.create_model("repro_convit_tiny_c32", depth=4, gpsa_layers=2).eval()
    x = torch.randn(2, 3, 32, 32)
    with record_blocks(m) as rec:
        out = m(x)
    assert torch.equal(out, m(x))  # hooks do not change the function
    assert rec.inputs[0].shape == (2, 64, 192) and rec.inputs[3].shape == (2, 65, 192)  # cls joins at block 2
    assert torch.allclose(rec.inputs[1], m.blocks[1].norm1(rec.features[0]))
    for i in range(4):
        a = rec.attention(i)
        assert a.shape[:2] == (2, 4) and torch.allclose(a.sum(-1), torch.ones(()), atol=1e-5)
    assert not m.blocks[0].attn._forward_hooks


def test_import_repro_models_registers_every_model_and_pretrained_is_refused():
    """A fresh interpreter: `import repro.models` is enough for timm.create_model (plain `import repro` loads no
    torch, so that the report imports without it); pretrained=True is one clear error."""
    import subprocess
    import sys
    code = ("import timm, repro.models; names = timm.list_models('repro_*'); m = timm.create_model('repro_convit_small'); "
            "print(len(names), type(m).__name__)\n"
            "try:\n    timm.create_model('repro_deit_tiny', pretrained=True)\nexcept ValueError as e:\n    print('refused:', e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.splitlines()
    assert int(first.split()[0]) >= 30 and first.split()[1] == "VisionTransformer"
    assert second.startswith("refused: repro_deit_tiny: vitrepro publishes no pretrained weights")
