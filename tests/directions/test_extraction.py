import pytest
import torch
import transformers

from pgrpo.model.adapter import attach_adapter, knob_parameters
from pgrpo.directions.extraction import (
    HackBasis,
    basis_cache_key,
    extract_basis,
    nll_grads,
    pairs_hash,
    random_basis_like,
    separation,
)


def tiny_model() -> transformers.Qwen3ForCausalLM:
    torch.manual_seed(0)
    config = transformers.Qwen3Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8,
    )
    return transformers.Qwen3ForCausalLM(config).eval()


def planted_pairs(n: int = 40, r: int = 16, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pair gradients whose difference is a strong positive multiple of one unit direction plus small noise."""
    generator = torch.Generator().manual_seed(seed)
    direction = torch.randn(r, generator=generator)
    direction /= direction.norm()
    g_clean = torch.randn(n, r, generator=generator)
    strength = 5.0 + torch.rand(n, 1, generator=generator)
    g_hack = g_clean + strength * direction + 0.1 * torch.randn(n, r, generator=generator)
    return g_hack, g_clean, direction


def test_extraction_recovers_planted_direction_oriented_hack_ward():
    g_hack, g_clean, direction = planted_pairs()
    basis = extract_basis({"m": g_hack}, {"m": g_clean}, k=1)
    assert basis.V["m"].shape == (1, 16)
    assert torch.dot(basis.V["m"][0], direction).item() > 0.99


def test_majority_vote_orients_hack_ward_despite_huge_opposite_outliers():
    g_hack, g_clean, direction = planted_pairs(n=20)
    # 3 of 20 pairs point the other way, hard enough to flip the mean projection.
    g_hack[:3] = g_clean[:3] - 200.0 * direction
    diff = g_hack - g_clean
    assert (diff @ direction).mean() < 0  # sign of the mean would orient it clean-ward
    basis = extract_basis({"m": g_hack}, {"m": g_clean}, k=1)
    assert torch.dot(basis.V["m"][0], direction).item() > 0.99


def test_rows_are_orthonormal_and_sigma_descending():
    generator = torch.Generator().manual_seed(1)
    g_hack, g_clean = torch.randn(30, 12, generator=generator), torch.randn(30, 12, generator=generator)
    basis = extract_basis({"m": g_hack}, {"m": g_clean}, k=4)
    rows = basis.V["m"]
    torch.testing.assert_close(rows @ rows.T, torch.eye(4), atol=1e-5, rtol=0)
    assert torch.all(basis.sigma["m"][:-1] >= basis.sigma["m"][1:])


def test_tau_axis_drops_weak_rows_and_empty_modules_go():
    g_hack, g_clean, _ = planted_pairs()
    basis = extract_basis({"m": g_hack}, {"m": g_clean}, k=3, tau_axis=0.5)
    assert basis.V["m"].shape[0] == 1  # the planted axis dwarfs the noise axes
    zero = torch.zeros(40, 16)
    assert "dead" not in extract_basis({"m": g_hack, "dead": zero}, {"m": g_clean, "dead": zero}, k=2).V


def test_noise_floor_pools_sigma_across_modules():
    basis = HackBasis(
        V={"a": torch.eye(3)[:2], "b": torch.eye(3)[:2]},
        sigma={"a": torch.tensor([10.0, 1.0]), "b": torch.tensor([2.0, 0.5])},
    )
    floored = basis.apply_noise_floor(0.5)  # pooled median of (10, 2, 1, 0.5) is 1.5
    assert floored.sigma["a"].tolist() == [10.0] and floored.sigma["b"].tolist() == [2.0]
    assert floored.k_total == 2
    assert list(basis.apply_noise_floor(0.9).V) == ["a"]


def test_heldout_scores_are_of_the_rows_the_noise_floor_keeps():
    g_hack, g_clean, _ = planted_pairs(n=40)
    g_hack = {"m": g_hack, "weak": 0.01 * torch.randn(40, 16, generator=torch.Generator().manual_seed(5))}
    g_clean = {"m": g_clean, "weak": torch.zeros(40, 16)}
    basis = extract_basis(g_hack, g_clean, k=3, n_heldout=10, noise_floor=0.5)
    assert sum(len(s) for s in basis.sigma.values()) < 6  # the floor dropped rows
    held = slice(30, 40)
    score = separation(basis, {n: g[held] for n, g in g_hack.items()}, {n: g[held] for n, g in g_clean.items()})
    assert float(basis.meta["heldout_hackward_share"]) == pytest.approx(score.hackward_share, rel=1e-5)
    assert float(basis.meta["heldout_hackward_share_null"]) == pytest.approx(score.hackward_share_null, rel=1e-5)
    assert basis.meta["noise_floor"] == "0.5" and basis.meta["k_total"] == str(basis.k_total)


def test_heldout_pairs_are_left_out_and_scored():
    g_hack, g_clean, _ = planted_pairs(n=40)
    basis = extract_basis({"m": g_hack}, {"m": g_clean}, k=1, n_heldout=10)
    assert basis.meta["n_pairs"] == "40" and basis.meta["n_heldout"] == "10"
    assert float(basis.meta["heldout_frac_positive"]) == 1.0
    assert float(basis.meta["heldout_hackward_share"]) > float(basis.meta["heldout_hackward_share_null"])
    random_score = separation(random_basis_like(basis, seed=123), {"m": g_hack[30:]}, {"m": g_clean[30:]})
    assert random_score.hackward_share < float(basis.meta["heldout_hackward_share"])


def test_save_load_round_trip_keeps_tensors_and_metadata(tmp_path):
    g_hack, g_clean, _ = planted_pairs()
    g_a = {"layers.0.q_proj": g_hack, "layers.0.v_proj": g_clean}
    g_b = {"layers.0.q_proj": g_clean, "layers.0.v_proj": g_hack}
    basis = extract_basis(g_a, g_b, k=2, meta={"model_id": "tiny", "pairs_hash": "abc", "normalize": "length"})
    path = tmp_path / "basis.safetensors"
    basis.save(path)
    loaded = HackBasis.load(path, device="cpu")
    assert loaded.meta == basis.meta and loaded.meta["model_id"] == "tiny" and loaded.meta["k"] == "2"
    for name in basis.V:
        assert torch.equal(loaded.V[name], basis.V[name]) and torch.equal(loaded.sigma[name], basis.sigma[name])


def test_a_loaded_basis_is_aligned_whatever_its_metadata_length(tmp_path):
    # where a tensor sits in the file depends on the header's length; a misaligned V made matmuls round
    # differently, so a run that loaded V from the cache drifted (1e-6) from the run that had extracted it
    rows = torch.linalg.qr(torch.randn(16, 4))[0].T.contiguous()
    for n in range(16):
        path = tmp_path / f"b{n}.safetensors"
        HackBasis({"m": rows}, {"m": torch.ones(4)}, {"note": "x" * n}).save(path)
        loaded = HackBasis.load(path)
        assert loaded.V["m"].data_ptr() % 64 == 0 and torch.equal(loaded.V["m"], rows)


def test_save_accepts_non_contiguous_and_bf16_rows(tmp_path):
    rows = torch.eye(4)[:, :2].T  # non-contiguous view
    basis = HackBasis({"m": rows}, {"m": torch.ones(2)}, {"model_id": "x"}).to("cpu", torch.bfloat16)
    basis.save(tmp_path / "b.safetensors")
    assert HackBasis.load(tmp_path / "b.safetensors").V["m"].dtype == torch.bfloat16


def test_a_bases_digest_names_its_numbers_through_a_file_and_changes_with_any_of_them(tmp_path):
    rows = torch.linalg.qr(torch.randn(16, 4, generator=torch.Generator().manual_seed(0)))[0].T.contiguous()
    basis = HackBasis({"m": rows, "n": rows[:2].clone()}, {"m": torch.ones(4), "n": torch.ones(2)}, {"k": "4"})
    basis.save(tmp_path / "b.safetensors")
    loaded = HackBasis.load(tmp_path / "b.safetensors")
    assert loaded.digest() == basis.digest()
    assert HackBasis(basis.V, basis.sigma, {"k": "5"}).digest() == basis.digest()  # meta describes V, is not V
    nudged = rows.clone()
    nudged[0, 0] = torch.nextafter(nudged[0, 0], torch.tensor(2.0))
    changed = [HackBasis({**basis.V, "m": nudged}, basis.sigma),
               HackBasis(basis.V, {**basis.sigma, "n": torch.tensor([1.0, 2.0])}),
               basis.to("cpu", torch.bfloat16),
               HackBasis({"m": rows}, {"m": torch.ones(4)})]
    assert len({basis.digest(), *(other.digest() for other in changed)}) == 1 + len(changed)


def test_cache_key_changes_with_every_input():
    base = dict(model_id="m", pairs_hash="p", k=4, tau_axis=None, normalize="length")
    key = basis_cache_key(**base)
    variants = [
        dict(model_id="m2"), dict(pairs_hash="p2"), dict(k=5), dict(tau_axis=0.1),
        dict(normalize="fixed"), dict(extra={"targets": "q_proj"}),
    ]
    keys = {basis_cache_key(**(base | change)) for change in variants}
    assert key not in keys and len(keys) == len(variants)
    assert basis_cache_key(**base) == key


def test_pairs_hash_depends_on_text_and_order():
    pairs = [("p1", "hack", "clean"), ("p2", "h", "c")]
    assert pairs_hash(pairs) == pairs_hash(list(pairs))
    assert pairs_hash(pairs) != pairs_hash(pairs[::-1])
    assert pairs_hash(pairs) != pairs_hash([("p1", "hack!", "clean"), ("p2", "h", "c")])
    with pytest.raises(ValueError, match="triple"):
        pairs_hash([("p", "h")])


def test_random_basis_matches_k_and_is_orthonormal_and_seeded():
    basis = HackBasis({"a": torch.eye(8)[:3], "b": torch.eye(5)[:1]}, {"a": torch.ones(3), "b": torch.ones(1)})
    control = random_basis_like(basis, seed=7)
    assert {n: v.shape for n, v in control.V.items()} == {"a": (3, 8), "b": (1, 5)}
    torch.testing.assert_close(control.V["a"] @ control.V["a"].T, torch.eye(3), atol=1e-5, rtol=0)
    assert torch.equal(random_basis_like(basis, seed=7).V["a"], control.V["a"])
    assert control.meta["control"] == "random"


def test_a_scaled_random_basis_holds_the_smaller_ones_rows_within_each_modules_rank():
    # matching a placebo in strength bisects on its size: that works only if a larger one holds a smaller one
    basis = HackBasis({"a": torch.eye(8)[:3], "b": torch.eye(5)[:1]}, {"a": torch.tensor([3.0, 2.0, 1.0]),
                                                                       "b": torch.ones(1)})
    small, large = random_basis_like(basis, seed=7), random_basis_like(basis, seed=7, scale=2.4)
    assert {n: v.shape[0] for n, v in large.V.items()} == {"a": 7, "b": 2}
    assert torch.equal(large.V["a"][:3], small.V["a"]) and torch.equal(large.V["b"][:1], small.V["b"])
    assert large.sigma["a"].tolist() == [3.0, 3.0, 3.0, 2.0, 2.0, 1.0, 1.0]  # its shape kept over more rows
    assert random_basis_like(basis, seed=7, scale=10).V["a"].shape == (8, 8)  # at most the module's rank
    assert random_basis_like(basis, seed=7, scale=0).V["b"].shape == (1, 5)  # at least one row


def test_bad_inputs_name_the_problem():
    g = {"m": torch.zeros(4, 3)}
    with pytest.raises(ValueError, match="n_heldout"):
        extract_basis(g, g, k=1, n_heldout=4)
    with pytest.raises(ValueError, match="different modules"):
        extract_basis(g, {"x": torch.zeros(4, 3)}, k=1)
    with pytest.raises(ValueError, match="meta"):
        HackBasis({"m": torch.eye(2)}, {"m": torch.ones(2)}, {"k": 3})



def test_non_finite_gradients_name_the_module_the_side_and_the_pairs_instead_of_failing_the_svd():
    # on a GPU, V's clean-side gradients came back all NaN and the SVD failed to converge, naming nothing
    g_hack, g_clean = torch.randn(6, 3), torch.randn(6, 3)
    g_clean[[1, 4]] = float("nan")
    with pytest.raises(ValueError, match=r"q_proj: the gradients of the clean completions of pairs \[1, 4\] \(2 of 6\)"):
        extract_basis({"q_proj": g_hack}, {"q_proj": g_clean}, k=1)
    g_hack[5, 0] = float("inf")
    with pytest.raises(ValueError, match=r"the hack completions of pairs \[5\]"):
        extract_basis({"q_proj": g_hack}, {"q_proj": torch.randn(6, 3)}, k=1, n_heldout=2)

def completion_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    ids = torch.randint(1, 64, (5, 8), generator=torch.Generator().manual_seed(3))
    attention = torch.ones_like(ids)
    attention[1, :2] = 0  # left-padded prompt
    completion = torch.ones(5, 4)
    completion[2, -1] = 0  # shorter completion
    completion[3, -2:] = 0
    return ids, attention, completion


def test_batched_nll_grads_equal_one_at_a_time_and_leave_grad_alone():
    model = tiny_model()
    modules = attach_adapter(model, target_modules=("q_proj", "down_proj"))
    with torch.no_grad():
        for param in knob_parameters(modules):
            param.normal_(0, 0.05)
    ids, attention, completion = completion_batch()
    batched = nll_grads(model, modules, ids, attention, completion, batch_size=5)
    single = nll_grads(model, modules, ids, attention, completion, batch_size=1)
    for name, module in modules.items():
        assert batched[name].shape == (5, module.rank)
        torch.testing.assert_close(batched[name], single[name], rtol=1e-4, atol=1e-6)
        assert module.delta_s.grad is None


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_nll_grads_match_autograd_of_the_sampling_distributions_nll_with_quarantine_zeroed(temperature):
    model = tiny_model()
    modules = attach_adapter(model, target_modules=("v_proj",))
    with torch.no_grad():
        for param in knob_parameters(modules):
            param.normal_(0, 0.05)
    ids, attention, completion = completion_batch()
    grads = nll_grads(model, modules, ids[:1], attention[:1], completion[:1], normalize="fixed", fixed_denominator=8.0,
                      temperature=temperature)
    hack_values = {name: m.delta_s_hack.detach().clone() for name, m in modules.items()}
    with torch.no_grad():
        for module in modules.values():
            module.delta_s_hack.zero_()
    logits = model(ids[:1]).logits[:, -5:-1].float() / temperature  # the loss scores samples at their temperature
    nll = -logits.log_softmax(-1).gather(-1, ids[:1, -4:, None]).squeeze(-1).sum() / 8.0
    nll.backward()
    for name, module in modules.items():
        torch.testing.assert_close(grads[name][0], module.delta_s.grad, rtol=1e-4, atol=1e-6)
        assert hack_values[name].any()  # nll_grads restored the quarantine knob it had zeroed


def test_nll_grads_reject_bad_normalisation():
    model = tiny_model()
    modules = attach_adapter(model, target_modules=("q_proj",))
    ids, attention, completion = completion_batch()
    with pytest.raises(ValueError, match="fixed_denominator"):
        nll_grads(model, modules, ids, attention, completion, normalize="fixed")
    with pytest.raises(ValueError, match="normalize"):
        nll_grads(model, modules, ids, attention, completion, normalize="mean")
