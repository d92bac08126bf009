"""The numbers behind a verdict (scipy.stats), apart from the rules that read them, so each is tested alone."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

POWER = 0.8  # the power at which the smallest resolvable effect is stated


@dataclass
class Test:
    """One lhs - rhs > margin comparison across seeds: effect, interval, both one-sided p-values."""
    effect: float                    # mean(lhs) - mean(rhs) - margin
    ci: tuple[float, float] | None   # 95 % two-sided interval of the effect (None: no spread to estimate it)
    p_greater: float | None          # one-sided p of effect > 0 (None: exact values, no test)
    p_less: float | None             # one-sided p of effect < 0
    name: str                        # "Welch t", "one-sample t", "exact"
    statistic: float | None
    n: tuple[int, int | str]         # seeds per side ("const" for a number)
    mde: float | None = None         # smallest effect the test resolves (one-sided alpha, 80 % power)
    basis: str = ""                  # where the mde comes from
    p_greater_adj: float | None = None  # Holm-adjusted across the claim's comparisons
    p_less_adj: float | None = None


def flat(values) -> bool:
    """No spread across seeds beyond float rounding (relative 1e-9)."""
    v = np.asarray(values, dtype=float)
    return float(np.ptp(v)) <= 1e-9 * max(1.0, float(np.max(np.abs(v))))


def resolvable_effect(a: list, b: list, rhs_const: bool, alpha: float,
                      binomial: float | None = None) -> tuple[float | None, str]:
    """The smallest lhs - rhs a one-sided test detects at 80 % power, from the seed spread or else ``binomial``."""
    na, nb = len(a), len(b)
    va = float(np.var(a, ddof=1)) if na >= 2 else None
    vb = 0.0 if rhs_const else (float(np.var(b, ddof=1)) if nb >= 2 else None)
    if va is not None and vb is not None and va + vb > 0:
        qa, qb = va / na, 0.0 if rhs_const else vb / nb  # Welch's standard error and Welch-Satterthwaite df
        df = (qa + qb) ** 2 / ((qa ** 2 / (na - 1) if qa else 0.0) + (qb ** 2 / (nb - 1) if qb else 0.0))
        t = stats.t.ppf(1 - alpha, df) + stats.t.ppf(POWER, df)
        return float(t * math.sqrt(qa + qb)), f"seed spread, n={na} vs {'const' if rhs_const else nb}"
    if binomial:
        se = binomial * math.sqrt(1 / na + (0.0 if rhs_const else 1 / nb))
        z = stats.norm.ppf(1 - alpha) + stats.norm.ppf(POWER)
        return float(z * se), "test-set binomial error only; seed noise adds to it"
    return None, "unknown: one run per side and no test-set noise model"


def compare_means(a: list, b: list, rhs_const: bool, alpha: float, margin: float = 0.0,
                  binomial: float | None = None) -> Test:
    """lhs - rhs > margin across seeds: Welch's t, a one-sample t where one side is flat, exact where both are."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    ma, mb = float(np.mean(a)), float(np.mean(b))
    n = (len(a), "const" if rhs_const else len(b))
    mde, basis = resolvable_effect(list(a), list(b), rhs_const, alpha, binomial)
    effect = ma - mb - margin
    a_flat, b_flat = flat(a), rhs_const or flat(b)
    if a_flat and b_flat:  # a t statistic of rounding noise would mean nothing
        return Test(effect, None, None, None, "exact", None, n, mde, basis)
    if b_flat:    # lhs against a number: is its mean above mb + margin?
        r, shift, name = stats.ttest_1samp(a, mb + margin), mb + margin, "one-sample t"
    elif a_flat:  # the same from the other side: -rhs above -(ma - margin) (same t, same sign)
        r, shift, name = stats.ttest_1samp(-b, margin - ma), margin - ma, "one-sample t"
    else:
        r, shift, name = stats.ttest_ind(a, b + margin, equal_var=False), 0.0, "Welch t"
    lo, hi = r.confidence_interval(0.95)
    return Test(effect, (float(lo) - shift, float(hi) - shift), float(stats.t.sf(r.statistic, r.df)),
                float(stats.t.cdf(r.statistic, r.df)), name, float(r.statistic), n, mde, basis)


def rate_test(values: list, bound: float, rate: float, alpha: float) -> Test:
    """The share of runs at or below ``bound`` exceeds ``rate``: an exact binomial test, for all-or-nothing outcomes."""
    n, k = len(values), int(sum(float(v) <= bound for v in values))
    lo, hi = stats.binomtest(k, n, rate).proportion_ci(0.95, method="exact")
    # The smallest share above ``rate`` that n runs would show at one-sided ``alpha``.
    k_min = next((j for j in range(n + 1) if stats.binom.sf(j - 1, n, rate) < alpha), None)
    mde = None if k_min is None else k_min / n - rate
    return Test(k / n - rate, (float(lo) - rate, float(hi) - rate),
                float(stats.binomtest(k, n, rate, alternative="greater").pvalue),
                float(stats.binomtest(k, n, rate, alternative="less").pvalue), "exact binomial", float(k), (n, "const"),
                mde, f"exact binomial, {n} runs against a share of {rate:g}")


def holm(pvalues: list[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (step-down, monotone, capped at 1), in the input order."""
    p = np.asarray(pvalues, dtype=float)
    order = np.argsort(p, kind="stable")
    adjusted = np.maximum.accumulate(np.minimum(1.0, (len(p) - np.arange(len(p))) * p[order]))
    return adjusted[np.argsort(order)].tolist()


def adjust(tests: list[Test]) -> None:
    """Holm across a claim's tested comparisons, separately for each direction (family-wise alpha)."""
    tested = [t for t in tests if t.p_greater is not None]
    for attr in ("p_greater", "p_less"):
        for t, p in zip(tested, holm([getattr(t, attr) for t in tested])):
            setattr(t, attr + "_adj", p)
