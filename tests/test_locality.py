"""Nonlocality, gating and ConViT's test-time interventions (ConViT Sec. 4, Tables 5-6, Figs. 4-6)."""
import copy
import itertools
import math

import pytest
import timm
import torch
from torch import nn

import repro.models  # noqa: F401  (registers the repro_* models with timm)
from papers.convit.probes import (LocalityTracker, evaluate, gpsa_attention_masked, pos_embed_masked,
                                  table5_pos_embed, table6_masked_attention)
from repro.probes.locality import (eval_mode, gating, layer_nonlocality, layer_nonlocality_official_bug,
                                   nonlocality)


def _cells(grid):
    return list(itertools.product(range(grid[0]), range(grid[1])))


def _convit(**kw):
    torch.manual_seed(0)
    return timm.create_model("repro_convit_tiny_c32", **{"depth": 3, "gpsa_layers": 2, **kw})


def _scramble(model, std=0.3, seed=1):
    """Weights far from the near-uniform attention of a fresh init, so layer inputs visibly matter."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * std)
    return model


# --- the definition ------------------------------------------------------------------------------

def test_attention_to_self_has_zero_nonlocality():
    grid = (4, 5)
    attn = torch.eye(20).expand(2, 3, 20, 20)
    assert torch.equal(nonlocality(attn, grid), torch.zeros(3))


def test_attention_to_a_neighbour_has_nonlocality_one():
    grid = (4, 5)
    cells = _cells(grid)
    attn = torch.zeros(2, 20, 20)
    for i, (y, x) in enumerate(cells):
        attn[0, i, cells.index((y, x + 1 if x + 1 < grid[1] else x - 1))] = 1  # horizontal neighbour
        attn[1, i, cells.index((y + 1 if y + 1 < grid[0] else y - 1, x))] = 1  # vertical neighbour
    assert torch.allclose(nonlocality(attn, grid), torch.ones(2))


def test_uniform_attention_gives_the_mean_pairwise_distance():
    grid = (3, 4)
    cells = _cells(grid)
    mean = sum(math.hypot(a[0] - b[0], a[1] - b[1]) for a in cells for b in cells) / len(cells) ** 2
    attn = torch.full((1, 2, 12, 12), 1 / 12)
    assert torch.allclose(nonlocality(attn, grid), torch.full((2,), mean))


def test_class_token_is_dropped_and_patch_rows_renormalised():
    grid = (3, 3)
    cells = _cells(grid)
    attn = torch.zeros(1, 10, 10)
    attn[0, 0, 0] = 1  # the class token's own row does not count
    for i, (y, x) in enumerate(cells):
        attn[0, 1 + i, 0] = 0.5  # half on the class token, half on a patch at distance 1
        attn[0, 1 + i, 1 + cells.index((y, x + 1 if x < 2 else x - 1))] = 0.5
    assert torch.allclose(nonlocality(attn, grid, num_prefix=1), torch.ones(1))


def test_nonlocality_rejects_a_mismatched_grid():
    with pytest.raises(ValueError, match="prefix"):
        nonlocality(torch.ones(1, 2, 65, 65) / 65, (8, 8))


# --- GPSA at convolutional init ------------------------------------------------------------------

def _expected_positional(grid, centre):
    """Mean over queries of the distance to the in-grid key(s) nearest query + centre (ties shared)."""
    cells = _cells(grid)
    total = 0.0
    for q in cells:
        d2 = [(k[0] - q[0] - centre[0]) ** 2 + (k[1] - q[1] - centre[1]) ** 2 for k in cells]
        best = [k for k, d in zip(cells, d2) if d <= min(d2) + 1e-9]
        total += sum(math.hypot(k[0] - q[0], k[1] - q[1]) for k in best) / len(best)
    return total / len(cells)


@pytest.mark.parametrize("name,interior", [
    ("repro_convit_tiny9_c32", None),  # 3x3 kernel: integer offsets, one key per head
    ("repro_convit_tiny_c32", (2 + math.sqrt(2)) / 4),  # 2x2 kernel: centres at (+-1/2, +-1/2)
])
def test_conv_init_heads_attend_their_kernel_offset(name, interior):
    """Gate ~ 1 and alpha = 50: each head looks at query + its offset; on the 8x8 grid's border the nearest
    in-grid key replaces the missing one, so the full-grid value is below the offset's norm."""
    torch.manual_seed(0)
    m = timm.create_model(name, depth=2, gpsa_layers=2, locality_strength=50.0, gating_init=40.0,
                              global_pool="avg")
    gpsa = m.blocks[0].attn
    offsets = gpsa.kernel_offsets()
    measured = torch.tensor(layer_nonlocality(m, torch.randn(2, 3, 32, 32)))
    expected = torch.tensor([_expected_positional((8, 8), c.tolist()) for c in offsets])
    assert torch.allclose(measured, expected.expand(2, -1), atol=1e-4)
    # interior queries: exactly the offset (one key, or four tied keys for half-integer centres)
    pos = gpsa.positional_attention().view(len(offsets), 8, 8, 8, 8)[:, 2:6, 2:6]
    dist = torch.tensor([[math.hypot(ky - qy, kx - qx) for ky, kx in _cells((8, 8))]
                         for qy, qx in _cells((8, 8))]).view(8, 8, 8, 8)[2:6, 2:6]
    per_head = (pos * dist).sum((-1, -2)).mean((-1, -2))
    target = offsets.norm(dim=-1) if interior is None else torch.full((len(offsets),), interior)
    assert torch.allclose(per_head, target, atol=1e-4)


def test_default_conv_init_gpsa_is_more_local_than_mhsa_layers():
    m = _convit(depth=4)
    nl = torch.tensor(layer_nonlocality(m, torch.randn(4, 3, 32, 32))).mean(dim=1)
    assert nl[:2].max() < nl[2:].min() - 0.5


# --- the released code's measurement (issue #23) -------------------------------------------------

@pytest.mark.parametrize("name", ["repro_convit_tiny_c32", "repro_deit_tiny_c32"])
def test_official_bug_feeds_patch_embeddings_to_every_layer(name):
    torch.manual_seed(0)
    m = _scramble(timm.create_model(name, depth=3, **({"gpsa_layers": 2} if "convit" in name else {})))
    x = torch.randn(4, 3, 32, 32)
    # the released code skips the position embedding and norm1; without them layer 0 sees the same input.
    # For DeiT this also checks the class-token rule: renormalised patch rows = softmax over patch keys.
    with torch.no_grad():
        m.pos_embed.zero_()
    m.blocks[0].norm1 = nn.Identity()
    correct, bug = torch.tensor(layer_nonlocality(m, x)), torch.tensor(layer_nonlocality_official_bug(m, x))
    assert torch.allclose(correct[0], bug[0], atol=1e-5)
    assert ((correct[1:] - bug[1:]).abs().amax(dim=1) > 1e-2).all()


def test_official_bug_differs_on_layer_zero_of_the_unmodified_model():
    m = _scramble(_convit())
    x = torch.randn(4, 3, 32, 32)
    diff = torch.tensor(layer_nonlocality(m, x)) - torch.tensor(layer_nonlocality_official_bug(m, x))
    assert diff[0].abs().max() > 1e-2


# --- interventions -------------------------------------------------------------------------------

def _snapshot(model):
    return {n: (p, p.detach().clone()) for n, p in model.named_parameters()}


def _assert_restored(model, snap):
    now = dict(model.named_parameters())
    assert now.keys() == snap.keys()
    for n, (obj, value) in snap.items():
        assert now[n] is obj and torch.equal(now[n], value), n


def test_masking_contexts_restore_parameters_bit_exactly():
    m = _scramble(_convit())
    snap = _snapshot(m)
    with pos_embed_masked(m):
        assert not m.pos_embed.any()
    _assert_restored(m, snap)
    for mask, gate in (("content", 1.0), ("position", 0.0)):
        with gpsa_attention_masked(m, 1, mask):
            assert gating(m)[0] == [gate] * 4 and gating(m)[1] != [gate] * 4
        _assert_restored(m, snap)
    with pytest.raises(RuntimeError), gpsa_attention_masked(m, 2, "content"):
        raise RuntimeError("evaluation failed")
    _assert_restored(m, snap)


def test_masking_rejects_bad_arguments():
    m = _convit()
    with pytest.raises(ValueError, match="GPSA layers"):
        gpsa_attention_masked(m, 3, "content")
    with pytest.raises(ValueError, match="unknown mask"):
        gpsa_attention_masked(m, 1, "values")
    with pytest.raises(ValueError, match="pos_embed"):
        pos_embed_masked(timm.create_model("repro_deit_tiny_c32", depth=1, pos_embed="none"))


def _all_gpsa(seed=0):
    """Every block GPSA; average pooling, since a class token joining after the last block sees no patch."""
    torch.manual_seed(seed)
    return timm.create_model("repro_convit_tiny_c32", depth=2, gpsa_layers=2, locality_strength=10.0,
                             global_pool="avg").eval()


def test_content_masked_output_does_not_depend_on_qk_weights():
    m, x = _all_gpsa(), torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        with gpsa_attention_masked(m, 2, "content"):
            before = m(x)
        plain = m(x)
        for blk in m.blocks:
            blk.attn.qk.weight.normal_(0, 1.0)
        with gpsa_attention_masked(m, 2, "content"):
            after = m(x)
        assert not torch.allclose(plain, m(x), atol=1e-4)  # unmasked, the qk weights do matter
    assert torch.equal(before, after)


def test_position_masked_output_does_not_depend_on_pos_proj():
    m, x = _all_gpsa(), torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        with gpsa_attention_masked(m, 2, "position"):
            before = m(x)
        plain = m(x)
        for blk in m.blocks:
            blk.attn.pos_proj.weight.mul_(-3.0)
        with gpsa_attention_masked(m, 2, "position"):
            after = m(x)
        assert not torch.allclose(plain, m(x), atol=1e-4)
    assert torch.equal(before, after)


def test_pos_embed_masking_equals_a_model_with_zero_pos_embed():
    torch.manual_seed(0)
    m = timm.create_model("repro_deit_tiny_c32", depth=2).eval()
    with torch.no_grad():
        m.pos_embed.normal_(0, 1.0)
    zeroed = copy.deepcopy(m)
    with torch.no_grad():
        zeroed.pos_embed.zero_()
        x = torch.randn(3, 3, 32, 32)
        with pos_embed_masked(m):
            masked = m(x)
        assert not torch.allclose(masked, m(x), atol=1e-4)
    assert torch.equal(masked, zeroed(x))


# --- evaluation and tables -----------------------------------------------------------------------

class _Logits(nn.Module):
    """Returns its input as logits, so accuracy can be set by hand."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, x):
        return x * self.scale


def test_evaluate_counts_top1_and_top5_over_batches():
    logits = torch.arange(10.0).repeat(4, 1)  # ranking 9, 8, 7, 6, 5, ...
    labels = torch.tensor([9, 6, 5, 0])  # top-1 hit, top-5 hit, top-5 hit, miss
    res = evaluate(_Logits(), logits, labels, batch_size=3)
    assert res == {"top1": 25.0, "top5": 75.0}
    loader = [(logits[:1], labels[:1]), (logits[1:], labels[1:])]
    assert evaluate(_Logits(), loader) == res


class _CentredHead(nn.Module):
    """The head on features centred over the batch: a scrambled model's features share one large part across
    images, which alone would decide every prediction; without it, predictions follow the images."""

    def __init__(self, head):
        super().__init__()
        self.head = head

    def forward(self, f):
        return self.head(f - f.mean(0))


def test_tables_5_and_6_clip_k_and_score_each_intervention():
    """Labels are the unmasked model's own predictions (top-1 100 %), so each intervention's score is its own:
    a table that scored the unmasked model under a mask's name, or the reverse, fails."""
    m = _scramble(_convit(num_classes=5)).eval()
    m.head = _CentredHead(m.head)
    x = torch.randn(32, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        y = m(x).argmax(-1)
    t5 = table5_pos_embed(m, x, y)
    with pos_embed_masked(m):
        masked = evaluate(m, x, y)["top1"]
    assert t5 == {"top1": 100.0, "top1_pos_masked": masked} and masked < 100.0
    rows = table6_masked_attention(m, x, y)
    assert [(r["k"], r["k_used"]) for r in rows] == [(3, 2), (5, 2), (10, 2)]
    for how in ("content", "position"):
        with gpsa_attention_masked(m, 2, how):
            masked = evaluate(m, x, y)["top1"]
        assert rows[0][f"top1_{how}_masked"] == masked < 100.0
    assert rows[2]["top1_none"] == 100.0


def test_tracker_records_plain_lists_and_keeps_training_mode():
    m = _convit(depth=3, drop_path_rate=0.5).train()
    tracker = LocalityTracker(torch.randn(2, 3, 32, 32))
    rec = tracker(m, epoch=4)
    assert m.training and all(mod.training for mod in m.modules())
    assert rec["epoch"] == 4 and tracker.history == [rec]
    assert [len(r) for r in rec["nonlocality"]] == [4, 4, 4] == [len(r) for r in rec["nonlocality_official_bug"]]
    assert rec["gating"] == [[pytest.approx(1 / (1 + math.exp(-1)))] * 4] * 2
    assert all(isinstance(v, float) for row in rec["nonlocality"] for v in row)
    assert tracker(m, 5)["nonlocality"] == rec["nonlocality"]  # eval mode: drop path off, deterministic


def test_eval_mode_restores_mixed_modes():
    m = _convit().train()
    m.blocks[1].eval()
    with eval_mode(m):
        assert not any(mod.training for mod in m.modules())
    assert m.training and not m.blocks[1].training and m.blocks[0].training
