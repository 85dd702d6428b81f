"""What only a GPU exercises: bf16 folding on the device, merged generation, a step of each intervention family with
checkpoint and exact resume, where V, the knobs and the optimizer state live, export and eval of a device run.

They run on CUDA (`make gpu-check` runs them on a GPU machine) and skip where there is none. PGRPO_TEST_DEVICE=cpu
runs them on the CPU: `make gpu-check DEVICE=cpu` rehearses them so, and there they check only that they run.
"""

import copy
import json
import os
from pathlib import Path

import lightning as L
import pytest
import torch
from transformers import AutoModelForCausalLM

from pgrpo.model.adapter import KNOB_NAMES, attach_adapter, folded_weight, knobs_zeroed, merged_for_generation
from pgrpo.chat import render_chat
from pgrpo.cli import main
from pgrpo.hosts.lightning.data import GRPODataModule
from pgrpo.env import load_problems
from pgrpo.env.prompts import build_messages
from pgrpo.interventions import Erase
from pgrpo.model.load import load_model_and_tokenizer
from pgrpo.step.generation import GenerationConfig
from pgrpo.step.loss import token_logprobs
from pgrpo.hosts.lightning.module import ProjectedGRPO
from pgrpo.step.rollout import SamplingConfig, sample, seeded
from test_adapter import input_ids, randomize_knobs, tiny_model
from test_cli import fast

DEVICE = os.environ.get("PGRPO_TEST_DEVICE", "cuda")
ACCELERATOR = "gpu" if DEVICE.startswith("cuda") else DEVICE
pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(DEVICE.startswith("cuda") and not torch.cuda.is_available(),
                       reason="no CUDA device: these check what only a GPU exercises (`make gpu-check` runs them on "
                              "one; PGRPO_TEST_DEVICE=cpu runs them here)"),
]
ON_DEVICE = (f"--trainer.accelerator={ACCELERATOR}", "--trainer.devices=1")
# one of each family of hooks (pgrpo/interventions/base.py): gradient, advantage, reward, and route's update
FAMILIES = ["erase", "adv_gate", "probe_penalty", "route"]


def _bf16_ulp(t: torch.Tensor) -> float:
    return float(t.float().abs().max()) * 2**-8


def test_the_adapter_folds_bf16_weights_on_the_device_as_on_the_cpu_and_unfolds_them_exactly():
    on_cpu = tiny_model(torch.bfloat16)
    on_device = copy.deepcopy(on_cpu).to(DEVICE)
    ids = input_ids().to(DEVICE)
    with torch.no_grad():
        bare = on_device(ids).logits
    weights = {n: p.detach().clone() for n, p in on_device.named_parameters()}
    adapters = {"cpu": attach_adapter(on_cpu), "device": attach_adapter(on_device)}
    for adapter in adapters.values():
        randomize_knobs(adapter)
    with torch.no_grad():
        for name, m in adapters["device"].items():
            # the SVD ran on each device (signs may differ); the folded weight does not depend on them
            got, want = folded_weight(m, KNOB_NAMES).cpu().float(), folded_weight(adapters["cpu"][name], KNOB_NAMES)
            torch.testing.assert_close(got, want.float(), atol=2 * _bf16_ulp(want), rtol=0, msg=name)
            assert m.delta_s.device.type == torch.device(DEVICE).type and m.delta_s.dtype == torch.float32
        trained = on_device(ids).logits  # the training path: the fold inside the autograd function
        with merged_for_generation(adapters["device"]):
            merged = on_device(ids).logits
        with knobs_zeroed(adapters["device"]):
            zeroed = on_device(ids).logits
    torch.testing.assert_close(merged, trained, atol=0, rtol=0)  # the same folded weight, the same kernel
    assert not torch.equal(merged, bare)
    torch.testing.assert_close(zeroed, bare, atol=0, rtol=0)  # at δ = 0 the adapted model is the base, bit for bit
    for name, p in on_device.named_parameters():
        if not name.endswith(KNOB_NAMES):  # folding never writes the base weight
            assert torch.equal(p, weights[name.replace(".base.", ".")]), name


def test_generation_with_the_adapter_merged_on_the_device_samples_what_the_unmerged_adapter_does():
    policy, tokenizer = load_model_and_tokenizer("embedded", device=DEVICE)
    adapter = attach_adapter(policy)
    randomize_knobs(adapter)
    prompts = [render_chat(tokenizer, build_messages(p)) for p in load_problems()[:2]]
    sampling = SamplingConfig(max_new_tokens=16)
    with seeded(0, DEVICE):
        unmerged = sample(policy, tokenizer, prompts, 3, sampling)[1]
    with seeded(0, DEVICE), merged_for_generation(adapter):
        merged = sample(policy, tokenizer, prompts, 3, sampling)[1]
    assert merged == unmerged
    assert sum(map(len, merged)) > len(merged)  # it generated, not just stopped


@pytest.mark.parametrize("arm", FAMILIES)
def test_a_step_of_each_intervention_family_on_the_device_checkpoints_and_resumes_exactly(arm, tmp_path):
    main(fast(arm, tmp_path / "whole", 2, *ON_DEVICE))
    main(fast(arm, tmp_path / "again", 2, *ON_DEVICE))
    main(fast(arm, tmp_path / "short", 1, *ON_DEVICE))
    main(fast(arm, tmp_path / "short", 2, *ON_DEVICE, "--ckpt_path=last"))
    whole, again, resumed = (
        torch.load(tmp_path / run / arm / "version_0" / "checkpoints" / "last.ckpt", weights_only=False)
        for run in ("whole", "again", "short"))
    assert whole["global_step"] == resumed["global_step"] == 2
    # a GPU's attention backward may add in a different order from run to run (the H100 check found resumed knobs
    # off in the last bits): a resume must then differ from the whole run no more than a second whole run does
    noise = max(float((again["state_dict"][k] - v).abs().max()) for k, v in whole["state_dict"].items())
    for key, value in whole["state_dict"].items():
        assert value.device.type == "cpu"  # a checkpoint loads on a machine without the device
        torch.testing.assert_close(resumed["state_dict"][key], value, rtol=0, atol=4 * noise, msg=lambda m: f"{key}: "
                                   f"{m} (two whole runs differ by at most {noise:.2e})")
    moved = sum(float(v.abs().sum()) for v in whole["state_dict"].values())
    assert moved > 0


class WhereTheyLive(L.Callback):
    """Where V, the knobs and the optimizer state are during the run: Lightning moves them to the CPU at its end."""

    def on_train_batch_end(self, trainer, module, *_):
        self.v = {t.device.type for t in module.basis.V.values()}
        self.adapter = {p.device.type for m in module.adapter.values() for p in (m.delta_s, m.delta_s_hack, m.U, m.Vh)}
        self.optimizer = {t.device.type for s in trainer.optimizers[0].state.values() for t in s.values()
                          if isinstance(t, torch.Tensor) and t.dim() > 0}  # Adam's step counter is a host scalar


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_v_the_knobs_and_the_optimizer_state_live_on_the_device_during_a_step(dtype, tmp_path):
    module = ProjectedGRPO(dtype=dtype, intervention=Erase(), generation=GenerationConfig(max_new_tokens=16))
    data = GRPODataModule(seed=0, group_size=4, prompts_per_step=2)
    where = WhereTheyLive()
    trainer = L.Trainer(accelerator=ACCELERATOR, devices=1, max_steps=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                        callbacks=[where])
    trainer.fit(module, data)
    device = torch.device(DEVICE).type
    assert where.v == where.adapter == where.optimizer == {device}
    assert {m.U.dtype for m in module.adapter.values()} == {getattr(torch, dtype)}
    assert all(torch.isfinite(m.delta_s).all() for m in module.adapter.values())


@pytest.mark.parametrize("length", [192, 320])
def test_a_padded_bf16_backward_through_attention_gives_finite_knob_gradients(length):
    # cuDNN's attention backward gave NaN at T % 128 == 64 under a padding mask on the H100 (pytorch#196678): V's
    # clean-side gradients were all NaN. token_logprobs keeps its forwards off that kernel.
    policy, _ = load_model_and_tokenizer("embedded", "bfloat16", device=DEVICE)
    adapter = attach_adapter(policy)
    ids = torch.randint(3, policy.config.vocab_size, (4, length), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, :40], mask[2, :7], mask[3, -5:] = 0, 0, 0  # left-padded prompts (fully masked rows), a short completion
    with torch.enable_grad():
        logp, _ = token_logprobs(policy, ids.to(DEVICE), mask.to(DEVICE), 64)
        (logp * mask[:, -64:].to(DEVICE)).sum().backward()
    assert all(torch.isfinite(m.delta_s.grad).all() for m in adapter.values())


def test_a_device_runs_checkpoint_exports_and_evaluates_on_the_device(tmp_path):
    main(fast("route", tmp_path, 2, *ON_DEVICE))
    ckpt = tmp_path / "route" / "version_0" / "checkpoints" / "last.ckpt"
    exported = tmp_path / "deployed"
    main(["export", str(ckpt), "--out", str(exported), "--device", DEVICE])
    model = AutoModelForCausalLM.from_pretrained(exported, local_files_only=True).to(DEVICE).eval()
    with torch.no_grad():
        assert torch.isfinite(model(input_ids().clamp(max=model.config.vocab_size - 1).to(DEVICE)).logits).all()
    out = tmp_path / "eval.json"
    main(["eval", "--ckpt_path", str(ckpt), "--device", DEVICE, "--n", "2", "--sampling.max_new_tokens", "16",
          "--out", str(out)])
    report = json.loads(Path(out).read_text())
    assert report["source"]["arm"] == "route" and report["source"]["step"] == 2
    assert report["variants"]["fixed_name"]["samples"] > 0
