"""The vLLM backend: the weight push, the logprob gap, the importance correction, resume.

These run in the vLLM venv (`make test-vllm`, which .ci/run calls); the plain test command has no vLLM
and skips them, which is not a pass: `make test-vllm` sets PGRPO_REQUIRE_VLLM, under which a missing vLLM fails.
"""

import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch

if os.environ.get("PGRPO_REQUIRE_VLLM"):
    import vllm  # noqa: F401  (`make test-vllm`: a missing vLLM is a failure, not a skip)
else:
    pytest.importorskip("vllm", reason="vLLM is an optional extra: `make test-vllm` installs it and runs these tests")

from pgrpo.model.adapter import knobs_zeroed, quarantine_zeroed  # noqa: E402
from pgrpo.chat import render_chat  # noqa: E402
from pgrpo.step.batch import PromptGroup  # noqa: E402
from pgrpo.env import load_problems  # noqa: E402
from pgrpo.env.prompts import build_messages  # noqa: E402
from pgrpo.step.generation import GenerationConfig
from pgrpo.hosts.lightning.module import ProjectedGRPO  # noqa: E402
from pgrpo.records.events import read_scalars  # noqa: E402
from pgrpo.step.rollout import pack  # noqa: E402
from test_cli import fast  # noqa: E402


# make test-vllm runs under xdist's loadgroup: the tests of the one engine stay on one worker (one start-up),
# the fits in their own processes run on the other
one_engine = pytest.mark.xdist_group("one_engine")


@pytest.fixture(scope="module")
def grpo():
    """One module with the vLLM backend on the embedded default (one engine for the module's tests)."""
    module = ProjectedGRPO(generation=GenerationConfig(backend="vllm", max_new_tokens=16, vllm_kv_cache_gib=0.25))
    module.configure_model()
    module.trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False)
    return module


def _groups(module, n_student: int = 4) -> list[PromptGroup]:
    return [PromptGroup(p, render_chat(module.tokenizer, build_messages(p)), [], n_student)
            for p in load_problems()[:2]]


def _trainer_logp(module, samples) -> list[list[float]]:
    """The trainer's own logprobs of the sampled tokens (what the loss recomputes)."""
    packed = pack(samples.prompt_ids, samples.completions, module.tokenizer.pad_token_id)
    with torch.no_grad():
        logp = module.engine.logprobs(packed)
    return [logp[i, : len(c)].tolist() for i, c in enumerate(samples.completions)]


def _max_gap(a: list[list[float]], b: list[list[float]]) -> float:
    return max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb))


def _set_knobs(module, seed: int, scale: float = 2.0, knob: str = "delta_s") -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.adapter.values():
            getattr(m, knob).copy_(torch.randn(m.rank, generator=g) * scale)


@one_engine
def test_pushed_knobs_make_vllms_logprobs_equal_the_trainers(grpo):
    _set_knobs(grpo, 0)
    samples = grpo.sampler.sample(_groups(grpo))
    trainer = _trainer_logp(grpo, samples)
    assert _max_gap(samples.sampler_logp, trainer) < 1e-3
    # the knobs matter: had the push been skipped, vLLM would have sampled the base, this far away
    with knobs_zeroed(grpo.adapter):
        base = _trainer_logp(grpo, samples)
    assert _max_gap(samples.sampler_logp, base) > 0.1


@one_engine
def test_a_knob_change_is_pushed_once_and_the_deployment_view_gets_its_own_weights(grpo):
    _set_knobs(grpo, 1)
    _set_knobs(grpo, 2, knob="delta_s_hack")
    pushes = grpo.sampler.engine().pushes
    grpo.sampler.sample(_groups(grpo))
    grpo.sampler.sample(_groups(grpo))
    assert grpo.sampler.engine().pushes == pushes + 1  # the same knobs are not pushed again
    with quarantine_zeroed(grpo.adapter):  # what DeploymentEval samples
        deployed = grpo.sampler.sample(_groups(grpo))
        assert _max_gap(deployed.sampler_logp, _trainer_logp(grpo, deployed)) < 1e-3
    kept = _trainer_logp(grpo, deployed)  # the quarantine back: a different model
    assert _max_gap(deployed.sampler_logp, kept) > 0.1
    assert grpo.sampler.engine().pushes == pushes + 2


@one_engine
def test_the_same_torch_seed_gives_the_same_vllm_samples(grpo):
    torch.manual_seed(3)
    a = grpo.sampler.sample(_groups(grpo))
    torch.manual_seed(3)
    b = grpo.sampler.sample(_groups(grpo))
    torch.manual_seed(4)
    c = grpo.sampler.sample(_groups(grpo))
    assert a.completions == b.completions
    assert a.completions != c.completions


@one_engine
def test_a_call_of_more_prompt_tokens_than_one_scheduler_step_samples_every_row(grpo):
    # 16 prompts x 8 samples x 200 tokens, as an end-of-run evaluation call: more than vLLM's 4096-token step, so a
    # prompt split over two steps had its seeded CPU generator rewound ("CPU Generator does not use offset")
    from pgrpo.step.rollout import SamplingConfig

    vocab = len(grpo.tokenizer)
    prompts = [[(7 * i + j) % (vocab - 8) + 4 for j in range(200)] for i in range(16)]
    completions, clipped, _ = grpo.sampler.engine().sample(prompts, 8, SamplingConfig(max_new_tokens=2),
                                                            grpo.tokenizer.eos_token_id)
    assert len(completions) == len(clipped) == 16 * 8


@one_engine
def test_vllm_and_hf_sample_the_same_distribution(grpo, monkeypatch):
    """Many samples of one prompt from each backend: the mean trainer logprob per token agrees within noise,
    while HF at half the temperature (a different distribution) is far off: the comparison can tell."""
    _set_knobs(grpo, 5, scale=1.0)
    groups = _groups(grpo, n_student=64)[:1]

    def mean_logp(backend: str, temperature: float) -> float:
        monkeypatch.setattr(grpo.generation, "backend", backend)
        monkeypatch.setattr(grpo.generation, "temperature", temperature)
        torch.manual_seed(0)
        samples = grpo.sampler.sample(groups)
        monkeypatch.setattr(grpo.generation, "temperature", 1.0)
        values = [x for row in _trainer_logp(grpo, samples) for x in row]
        return sum(values) / len(values)

    vllm, hf, cold = mean_logp("vllm", 1.0), mean_logp("hf", 1.0), mean_logp("hf", 0.5)
    assert abs(vllm - hf) < 0.25 * abs(cold - hf), (vllm, hf, cold)


def _fit(*args: str) -> None:
    """One fit in its own process: a vLLM engine owns process-wide state (its distributed group)."""
    proc = subprocess.run([sys.executable, "-m", "pgrpo.cli", *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


VLLM_RUN = ("--model.generation.backend=vllm", "--model.generation.vllm_kv_cache_gib=0.25",
            "--model.generation.importance_cap=2")


def test_a_vllm_run_logs_a_small_gap_and_resumes_exactly_like_an_uninterrupted_run(tmp_path):
    _fit(*fast("vanilla", tmp_path / "whole", 4, *VLLM_RUN))
    _fit(*fast("vanilla", tmp_path / "broken", 2, *VLLM_RUN))
    _fit(*fast("vanilla", tmp_path / "broken", 4, *VLLM_RUN, "--ckpt_path=last"))
    whole, broken = (tmp_path / name / "vanilla" / "version_0" for name in ("whole", "broken"))
    a = torch.load(whole / "checkpoints" / "last.ckpt", weights_only=False)
    b = torch.load(broken / "checkpoints" / "last.ckpt", weights_only=False)
    assert a["global_step"] == b["global_step"] == 4
    # the resumed engine started from the base: only a push of the restored knobs gives the same samples
    for key, value in a["state_dict"].items():
        torch.testing.assert_close(b["state_dict"][key], value, rtol=0, atol=0)
    gap = read_scalars(broken)["gen/logprob_gap"]
    assert [step for step, _ in gap] == [0, 1, 2, 3]
    assert max(v for _, v in gap) < 1e-3
    assert b["state_dict"] and any(v.abs().sum() > 0 for v in b["state_dict"].values())


_SAMPLE_WITH_VLLM = """
import json, os, sys
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt
llm = LLM(model=sys.argv[1], dtype="float32", kv_cache_memory_bytes=1 << 28, logprobs_mode="processed_logprobs",
          skip_tokenizer_init=True, enforce_eager=True)
params = SamplingParams(n=4, max_tokens=12, logprobs=0, seed=0, detokenize=False)
out = llm.generate([TokensPrompt(prompt_token_ids=json.loads(sys.argv[2]))], params, use_tqdm=False)[0]
print(json.dumps([[list(o.token_ids), [s[t].logprob for s, t in zip(o.logprobs, o.token_ids)]] for o in out.outputs]))
"""


def test_vllm_loads_the_exported_deployed_model_and_scores_its_samples_as_transformers_does(route_ckpt, tmp_path):
    import json

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pgrpo.cli import main

    out = tmp_path / "deployed"
    main(["export", str(route_ckpt), "--out", str(out)])
    tokenizer = AutoTokenizer.from_pretrained(out, local_files_only=True)
    prompt = tokenizer("class Solution:\n    def twoSum(self, nums, target):").input_ids
    proc = subprocess.run([sys.executable, "-c", _SAMPLE_WITH_VLLM, str(out), json.dumps(prompt)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    samples = json.loads(proc.stdout.strip().splitlines()[-1])
    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True).eval()
    for tokens, sampled in samples:
        with torch.no_grad():
            logits = model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1]
        own = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1)
        torch.testing.assert_close(torch.tensor(sampled), own, atol=1e-3, rtol=0)


_START_ENGINE = """
import sys
from pathlib import Path
from pgrpo.step.vllm_engine import VLLMEngine
VLLMEngine(Path(sys.argv[1]), "float32", seed=0, kv_cache_gib=0.25, max_model_len=None)
print("started")
"""


def test_vllm_starts_on_a_checkpoint_that_keeps_other_tensors_beside_its_weights(tmp_path):
    # a primed base keeps its low-rank update (update.safetensors) beside its merged model.safetensors; vLLM read
    # every top-level *.safetensors as a shard of the weights and refused the update's tensors
    import shutil

    from safetensors.torch import save_file

    from pgrpo.model.load import resolve_model_path
    from pgrpo.step.vllm_engine import weights_view

    base = tmp_path / "primed"
    shutil.copytree(resolve_model_path("embedded"), base)
    save_file({"layers.0.mlp.down_proj.lora_a": torch.zeros(2, 2)}, base / "update.safetensors")
    view = weights_view(base)
    assert view is not None and not (Path(view.name) / "update.safetensors").exists()
    assert sorted(f.name for f in Path(view.name).iterdir()) == sorted(f.name for f in base.iterdir()
                                                                        if f.name != "update.safetensors")
    assert weights_view(resolve_model_path("embedded")) is None  # nothing to leave out: vLLM reads it as it is
    proc = subprocess.run([sys.executable, "-c", _START_ENGINE, str(base)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and "started" in proc.stdout, proc.stderr[-3000:]
