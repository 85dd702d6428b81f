"""95% intervals, as EVIDENCE.md asks for every number: Wilson's for one run's rate, Student's t over seeds,
Newcombe's for the difference of two runs' rates, Hanley and McNeil's for an AUROC."""

import math
import statistics

Z975 = 1.96
# t_{0.975, df} for df = 1..30; beyond 30, the normal's
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def wilson(successes: int, n: int) -> tuple[float, float]:
    """The Wilson score interval of a rate: unlike p ± z·√(p(1−p)/n) it stays inside [0, 1] and is not empty
    at 0 of n (0 hacks of 48 samples is [0, 0.074], not "0")."""
    if n <= 0:
        raise ValueError(f"a rate over {n} samples has no interval")
    p, z2 = successes / n, Z975**2
    center = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z975 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, center - half), min(1.0, center + half)


def t975(df: int) -> float:
    return T975[df - 1] if df <= len(T975) else Z975


def t_interval(values: list[float]) -> tuple[float, float]:
    """(mean, half-width) of the 95% t-interval of the mean over seeds; the half-width is nan for one value."""
    mean = statistics.mean(values)
    if len(values) < 2:
        return mean, math.nan
    return mean, t975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


def newcombe(a: int, n: int, b: int, m: int) -> tuple[float, float]:
    """The 95% interval of a difference of two independent rates, a/n − b/m, from their Wilson intervals
    (Newcombe's hybrid score interval, 1998): two runs at one seed give one difference, which no t-interval has."""
    p, q = a / n, b / m
    (p_lo, p_hi), (q_lo, q_hi) = wilson(a, n), wilson(b, m)
    return p - q - math.hypot(p - p_lo, q_hi - q), p - q + math.hypot(p_hi - p, q - q_lo)


def auroc(positive: list[float], negative: list[float]) -> float:
    """The area under the ROC curve of a score that should rank `positive` above `negative`: the share of
    (positive, negative) pairs it orders right, a tie counting half (Mann-Whitney's U / n₊n₋). 0.5 is chance."""
    if not positive or not negative:
        raise ValueError(f"an AUROC needs both classes, got {len(positive)} positive and {len(negative)} negative")
    right = sum((p > n) + 0.5 * (p == n) for p in positive for n in negative)
    return right / (len(positive) * len(negative))


def hanley_mcneil(area: float, n_positive: int, n_negative: int) -> tuple[float, float]:
    """The 95% interval of an AUROC from its standard error (Hanley and McNeil, 1982), kept inside [0, 1]. At an
    area of 0 or 1 its standard error is 0: with few samples of a class read the counts beside it."""
    if n_positive < 1 or n_negative < 1:
        raise ValueError(f"an AUROC over {n_positive} positive and {n_negative} negative samples has no interval")
    q1, q2 = area / (2 - area), 2 * area * area / (1 + area)
    variance = (area * (1 - area) + (n_positive - 1) * (q1 - area * area)
                + (n_negative - 1) * (q2 - area * area)) / (n_positive * n_negative)
    half = Z975 * math.sqrt(max(variance, 0.0))
    return max(0.0, area - half), min(1.0, area + half)
