"""Negative-control V: its pairs, its k matched to the real V's per module, and a control arm's fit (the swap at
train start: tests/interventions/test_reads_v.py)."""

from pathlib import Path

import pytest
import torch

from pgrpo.directions.basis import ExtractionConfig, contrastive_pairs
from pgrpo.cli import main
from pgrpo.directions.controls import matched_k
from pgrpo.env import grade_batch, load_problems
from pgrpo.directions.extraction import HackBasis
from pgrpo.records.events import read_scalars

@pytest.fixture(scope="module")
def problems():
    return load_problems()[:12]


def basis(k_per_module: dict[str, int]) -> HackBasis:
    g = torch.Generator().manual_seed(0)
    V = {n: torch.linalg.qr(torch.randn(8, k, generator=g))[0].T.contiguous() for n, k in k_per_module.items()}
    return HackBasis(V, {n: torch.arange(k, 0, -1).float() for n, k in k_per_module.items()}, {})


def test_a_control_with_fewer_rows_than_the_real_v_is_an_error():
    with pytest.raises(ValueError, match="nonhack control V has 1 rows in a, the real V has 3"):
        matched_k(basis({"a": 1, "b": 1}), basis({"a": 3, "b": 1}), "nonhack")


def test_shuffled_control_pairs_mix_the_completions_of_each_problem(problems):
    cfg = ExtractionConfig(n_heldout=2)
    real, shuffled = contrastive_pairs(problems, cfg), contrastive_pairs(problems, cfg, control="shuffled")
    assert {p.problem_id for p in shuffled} == {p.problem_id for p in real}
    hacks = {p.hack for p in shuffled} | {p.clean for p in shuffled}
    by_id = {p.id: p for p in problems}
    grades = grade_batch([(by_id[p.problem_id], text) for p in shuffled for text in (p.hack, p.clean)])
    exploited = [(grades[2 * i].exploited, grades[2 * i + 1].exploited) for i in range(len(shuffled))]
    # a shuffled "hack" is as often a real hack as a shuffled "clean" is, give or take the deal
    assert abs(sum(h for h, _ in exploited) - sum(c for _, c in exploited)) <= len(shuffled) // 4
    assert len(hacks) > 2 * len(real)  # several completions per problem, not one pair


def test_shuffled_v_spans_less_of_the_real_v_than_the_within_pair_swap_did():
    """On a V planted in pair gradients, the old control (labels swapped inside pairs) recovered the real span
    exactly; dealing labels across a prompt's completions leaves only part of it."""
    from pgrpo.directions.extraction import basis_overlap, extract_basis

    gen = torch.Generator().manual_seed(0)
    n_problems, per_problem, r = 60, 4, 16
    hack_dir = torch.linalg.qr(torch.randn(r, 2, generator=gen))[0].T  # (2, r): what a hack adds
    base = torch.randn(n_problems, 1, r, generator=gen)  # each prompt's own gradient
    hack = base + 3 * torch.randn(n_problems, per_problem, 2, generator=gen).abs() @ hack_dir
    style = torch.linalg.qr(torch.randn(r, 4, generator=gen))[0].T  # (4, r): how any two completions differ
    hack = hack + torch.randn(n_problems, per_problem, 4, generator=gen) @ style
    clean = base + torch.randn(n_problems, per_problem, 4, generator=gen) @ style
    real = extract_basis({"m": hack.reshape(-1, r)}, {"m": clean.reshape(-1, r)}, k=2)
    swapped = torch.rand(n_problems, per_problem, 1, generator=gen) < 0.5
    within = extract_basis({"m": torch.where(swapped, clean, hack).reshape(-1, r)},
                           {"m": torch.where(swapped, hack, clean).reshape(-1, r)}, k=2)
    dealt = torch.cat([hack, clean], 1)[:, torch.randperm(2 * per_problem, generator=gen)]  # labels dealt per prompt
    across = extract_basis({"m": dealt[:, :per_problem].reshape(-1, r)}, {"m": dealt[:, per_problem:].reshape(-1, r)}, k=2)
    assert basis_overlap(real, within)[0] == pytest.approx(1.0, abs=0.02)
    assert basis_overlap(real, across)[0] < basis_overlap(real, within)[0]


def test_nonhack_control_pairs_contain_no_hack_on_either_side(problems):
    pairs = contrastive_pairs(problems, ExtractionConfig(n_heldout=2), control="nonhack")
    by_id = {p.id: p for p in problems}
    grades = grade_batch([(by_id[p.problem_id], text) for p in pairs for text in (p.hack, p.clean)])
    assert len(grades) == 2 * len(problems)
    assert all(g.gt_correct and not g.exploited and not g.attempted for g in grades)


CONFIG = Path(__file__).resolve().parents[2] / "configs" / "placebos" / "random_v.yaml"


def fit_random_v(logs: Path, steps: int, *extra: str) -> Path:
    """A CI-sized random_v fit with the refresh every step and the deployment eval every 2 steps."""
    main(["fit", "--config", str(CONFIG), f"--trainer.max_steps={steps}", "--checkpoint.every_n_train_steps=1",
          f"--trainer.logger.init_args.save_dir={logs}", "--trainer.enable_progress_bar=false",
          "--model.generation.max_new_tokens=16", "--data.group_size=4", "--data.prompts_per_step=2",
          "--data.mix_ratio=0", "--data.n_eval_prompts=2", "--trainer.callbacks+=pgrpo.hosts.lightning.callbacks.BasisRefresh",
          "--trainer.callbacks.every_n_steps=1", "--trainer.callbacks+=pgrpo.hosts.lightning.callbacks.DeploymentEval",
          "--trainer.callbacks.every_n_steps=2", "--trainer.callbacks.samples_per_prompt=1", *extra])
    return logs / "random_v" / "version_0"


def test_random_v_config_fit_swaps_v_and_logs_refresh_and_deployment_curves(tmp_path):
    run = fit_random_v(tmp_path, 3)
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["pgrpo_basis"]["meta"]["control"] == "random"
    scalars = read_scalars(run)
    assert [s for s, _ in scalars["basis/refresh_overlap"]] == [0, 1, 2]  # a random control is kept by the refresh
    assert [v for _, v in scalars["basis/refresh_overlap"]] == pytest.approx([1.0] * 3)
    assert [s for s, _ in scalars["deploy/hack"]] == [1, 2]  # every 2 steps and at the end
    (overlap,) = [v for _, v in scalars["basis/control_overlap"]]  # once, at train start
    assert 0.0 < overlap < 0.9  # random rows hold little of the real span


@pytest.mark.slow
def test_a_resumed_control_run_keeps_its_control_v(tmp_path):
    run = fit_random_v(tmp_path, 2)
    first = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["pgrpo_basis"]
    fit_random_v(tmp_path, 3, "--ckpt_path=last")
    resumed = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    assert resumed["global_step"] == 3 and resumed["pgrpo_basis"]["meta"]["control"] == "random"
    assert all(torch.equal(v, first["V"][n]) for n, v in resumed["pgrpo_basis"]["V"].items())


@pytest.mark.slow  # the command runs an extraction per control; test_basis covers extract, this file each control's V
def test_extract_command_reports_each_controls_overlap_with_the_real_v(capsys):
    main(["extract", "--modes", "run_tests", "--extraction.n_heldout", "2", "--controls", "true"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("overlap with the real V")]
    overlaps = {line.split(", ")[1].split(" V:")[0]: float(line.rsplit(" ", 1)[1]) for line in lines}
    assert overlaps.keys() == {"random", "shuffled", "nonhack"}
    assert all(0.0 < v < 1.0 for v in overlaps.values())
