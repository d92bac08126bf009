"""Anti-over-smoothing losses (papers/oversmoothing/losses.py) on constructed inputs with known answers."""
import itertools
import math

import numpy as np
import pytest
import timm
import torch
import torch.nn.functional as F

import repro.models  # noqa: F401
from papers.oversmoothing.losses import (AntiOversmoothingLoss, cosine_loss, patch_contrastive_loss,
                                         patch_cutmix, patch_mixing_loss, random_patch_mask)


def small_vit(seed=0, **kw):
    torch.manual_seed(seed)
    cfg = dict(embed_dim=48, num_heads=3, depth=2, patch_size=8, num_classes=5)
    return timm.create_model("repro_deit_tiny_c32", **{**cfg, **kw})


# cosine ------------------------------------------------------------------------------------------------

def test_cosine_loss_of_identical_tokens_is_one():
    h = torch.randn(3, 1, 10).expand(3, 6, 10)
    assert cosine_loss(h).item() == pytest.approx(1.0, abs=1e-6)


def test_cosine_loss_decreases_under_a_gradient_step():
    torch.manual_seed(0)
    h = (torch.randn(2, 6, 10) + 2.0).requires_grad_()  # a shared offset: similar, but not identical tokens
    before = cosine_loss(h)
    before.backward()
    with torch.no_grad():
        after = cosine_loss(h - 20.0 * h.grad)
    assert before.item() > 0.5 and after.item() < before.item() - 1e-3


def test_absolute_cosine_loss_counts_anti_aligned_patches_as_alike():
    """The arXiv form |cos| cannot be lowered by anti-aligning patches; the poster's signed form can."""
    v = torch.randn(10)
    h = torch.stack([v, -v, v, -v])[None]                # 4 patches, pairwise cosine +1 or -1
    pairs = [1.0 if (i + j) % 2 == 0 else -1.0 for i in range(4) for j in range(4) if i != j]
    assert cosine_loss(h).item() == pytest.approx(np.mean(pairs), abs=1e-6)   # -1/3
    assert cosine_loss(h, "absolute").item() == pytest.approx(1.0, abs=1e-6)


def test_absolute_cosine_loss_is_the_mean_absolute_pairwise_cosine():
    torch.manual_seed(1)
    h = torch.randn(3, 5, 7)
    expected = np.mean([[abs(F.cosine_similarity(h[b, i], h[b, j], dim=0).item()) for i in range(5)
                         for j in range(5) if i != j] for b in range(3)])
    assert cosine_loss(h, "absolute").item() == pytest.approx(expected, abs=1e-6)
    with pytest.raises(ValueError, match="cos_form"):
        cosine_loss(h, "squared")


# contrastive -------------------------------------------------------------------------------------------

def orthonormal_e(b=2, n=6, d=8):
    return torch.eye(d)[:n].expand(b, n, d).clone()


def test_contrastive_known_value_at_scaled_e():
    e, n = orthonormal_e(), 6
    for c in (0.5, 2.0, 5.0):
        # e_i^T h_i = c, e_i^T hbar = c / n  ->  softplus(-c (1 - 1/n))
        expect = math.log1p(math.exp(-c * (1 - 1 / n)))
        assert patch_contrastive_loss(e, c * e).item() == pytest.approx(expect, rel=1e-5)
        # InfoNCE over all patches: -log(e^c / (e^c + n - 1))
        infonce = -math.log(math.exp(c) / (math.exp(c) + n - 1))
        assert patch_contrastive_loss(e, c * e, negatives="patches").item() == pytest.approx(infonce, rel=1e-5)


def test_contrastive_prefers_h_aligned_with_e():
    torch.manual_seed(0)
    e, c = orthonormal_e(n=4), 3.0
    aligned = patch_contrastive_loss(e, c * e).item()
    for perm in itertools.permutations(range(4)):
        if perm != tuple(range(4)):
            assert aligned < patch_contrastive_loss(e, c * e[:, list(perm)]).item()
    for _ in range(20):  # random directions with the same norms
        assert aligned < patch_contrastive_loss(e, c * F.normalize(torch.randn(2, 4, 8), dim=-1)).item()
    losses = [patch_contrastive_loss(e, s * e).item() for s in (1, 2, 4, 8)]
    assert losses == sorted(losses, reverse=True)  # falls as h = s e grows


def test_contrastive_stops_gradient_on_e():
    e = torch.randn(2, 6, 8, requires_grad=True)
    h = torch.randn(2, 6, 8, requires_grad=True)
    patch_contrastive_loss(e, h).backward()
    assert e.grad is None and h.grad is not None and h.grad.abs().sum() > 0


# patch CutMix and mixing loss --------------------------------------------------------------------------

def test_patch_cutmix_with_all_ones_mask_is_the_identity():
    x, y = torch.randn(4, 3, 32, 32), torch.tensor([0, 3, 1, 4])
    mix = patch_cutmix(x, y, 8, 5, mask=torch.ones(4, 4))
    assert torch.equal(mix.images, x)
    assert torch.equal(mix.patch_targets, F.one_hot(y, 5).float()[:, None].expand(4, 16, 5))
    assert torch.equal(mix.targets, F.one_hot(y, 5).float()) and torch.equal(mix.lam, torch.ones(4))


def test_mixing_loss_with_all_ones_mask_is_the_patch_head_ce():
    torch.manual_seed(0)
    y = torch.tensor([0, 3, 1])
    mix = patch_cutmix(torch.randn(3, 3, 32, 32), y, 8, 5, mask=torch.ones(4, 4))
    head, h = torch.nn.Linear(12, 5), torch.randn(3, 16, 12)
    logits = head(h)
    expect = F.cross_entropy(logits.reshape(-1, 5), y.repeat_interleave(16))
    assert patch_mixing_loss(logits, mix.patch_targets).item() == pytest.approx(expect.item(), rel=1e-6)


def test_patch_cutmix_box_moves_whole_patches_with_their_labels():
    x, y = torch.randn(2, 3, 16, 24), torch.tensor([1, 2])
    mask = torch.ones(2, 3)
    mask[0, 1:] = 0                                       # patches (0,1), (0,2) come from the partner
    perm = torch.tensor([1, 0])
    mix = patch_cutmix(x, y, 8, 3, mask=mask, perm=perm)
    assert torch.equal(mix.images[0, :, :8, 8:], x[1, :, :8, 8:])
    assert torch.equal(mix.images[0, :, :8, :8], x[0, :, :8, :8])
    assert torch.equal(mix.images[1, :, 8:, :], x[1, :, 8:, :])
    lam = 4 / 6
    assert torch.allclose(mix.lam, torch.full((2,), lam))
    assert torch.allclose(mix.targets[0], torch.tensor([0, lam, 1 - lam]))
    assert torch.equal(mix.patch_targets[0, 1], F.one_hot(torch.tensor(2), 3).float())
    assert torch.equal(mix.patch_targets[0, 0], F.one_hot(torch.tensor(1), 3).float())
    # image-level target = mean of the per-patch targets
    assert torch.allclose(mix.patch_targets.mean(dim=1), mix.targets)


def test_patch_cutmix_keeps_soft_targets_and_random_masks_are_boxes():
    np.random.seed(0)
    soft = torch.softmax(torch.randn(4, 5), dim=-1)
    mix = patch_cutmix(torch.randn(4, 3, 32, 32), soft, (8, 8), 5)
    assert torch.allclose(mix.targets.sum(-1), torch.ones(4)) and torch.allclose(mix.patch_targets.mean(1), mix.targets)
    for _ in range(20):
        cut = 1 - random_patch_mask((7, 7))
        rows, cols = cut.any(1).nonzero(), cut.any(0).nonzero()
        if len(rows):  # the cut region fills its bounding box
            box = cut[rows.min():rows.max() + 1, cols.min():cols.max() + 1]
            assert box.all()
    with pytest.raises(ValueError, match="class indices"):
        patch_cutmix(torch.randn(2, 3, 32, 32), torch.rand(2, 4), 8, 5)


# the combined module -------------------------------------------------------------------------------------

WEIGHTS = {"cos": 0.5, "contrastive": 2.0, "mixing": 0.3}


@pytest.mark.parametrize("cos,contrastive,mixing", list(itertools.product([False, True], repeat=3)))
def test_combined_terms_are_switchable_and_total_is_weighted_sum(cos, contrastive, mixing):
    model = small_vit()
    aos = AntiOversmoothingLoss(model, 5, cos=cos, contrastive=contrastive, mixing=mixing, weights=WEIGHTS)
    np.random.seed(0)
    x, y = torch.randn(3, 3, 32, 32), torch.tensor([0, 4, 2])
    total, terms = aos(x, y)
    on = {k for k, v in dict(cos=cos, contrastive=contrastive, mixing=mixing).items() if v}
    assert set(terms) == {"ce"} | on
    expect = terms["ce"] + sum(WEIGHTS[k] * terms[k] for k in on)
    assert total.item() == pytest.approx(expect.item(), rel=1e-6)
    if not mixing:
        assert terms["ce"].item() == pytest.approx(F.cross_entropy(model(x), y).item(), rel=1e-5)
    assert not model.norm._forward_hooks and not model.blocks[0]._forward_hooks
    total.backward()
    assert model.blocks[-1].mlp.fc2.weight.grad is not None
    if mixing:
        assert aos.patch_head.weight.grad.abs().sum() > 0


def test_module_owns_only_the_patch_head():
    model = small_vit()
    aos = AntiOversmoothingLoss(model, 5, mixing=True)
    assert [n for n, _ in aos.named_parameters()] == ["patch_head.weight", "patch_head.bias"]
    assert list(AntiOversmoothingLoss(model, 5, mixing=False).parameters()) == []
    with pytest.raises(ValueError, match="unknown terms"):
        AntiOversmoothingLoss(model, 5, weights={"cosine": 1.0})


def test_cutmix_control_trains_ce_on_the_mixing_losses_batch_without_its_term():
    model = small_vit()
    control = AntiOversmoothingLoss(model, 5, contrastive=False, mixing=False, patch_cutmix=True)
    assert list(control.parameters()) == []  # no patch head: nothing but CE is trained
    x, y = torch.randn(6, 3, 32, 32), torch.tensor([0, 4, 2, 1, 3, 0])
    np.random.seed(3), torch.manual_seed(3)
    total, terms = control(x, y)
    np.random.seed(3), torch.manual_seed(3)
    mix = patch_cutmix(x, y, 8, 5)
    assert set(terms) == {"ce"} and not torch.equal(mix.images, x)
    assert total.item() == pytest.approx(F.cross_entropy(model(mix.images), mix.targets).item(), rel=1e-5)
    assert total.item() != pytest.approx(F.cross_entropy(model(x), y).item(), rel=1e-3)
    with pytest.raises(ValueError, match="patch-grid CutMix"):
        AntiOversmoothingLoss(model, 5, mixing=True, patch_cutmix=False)


def test_cos_term_falls_after_a_training_step():
    model = small_vit()
    aos = AntiOversmoothingLoss(model, 5, cos=True, contrastive=False, mixing=False, weights={"cos": 10.0})
    x, y = torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 2, 3])
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    _, before = aos(x, y)
    opt.zero_grad()
    aos(x, y)[0].backward()
    opt.step()
    _, after = aos(x, y)
    assert after["cos"].item() < before["cos"].item()


def test_patch_embed_anchor_reads_patch_tokens_only():
    model = small_vit()
    aos = AntiOversmoothingLoss(model, 5, contrastive=True, mixing=False, anchor="patch_embed")
    _, terms = aos(torch.randn(2, 3, 32, 32), torch.tensor([0, 1]))
    assert torch.isfinite(terms["contrastive"])
    with pytest.raises(ValueError, match="anchor"):
        AntiOversmoothingLoss(model, 5, anchor="block3")
