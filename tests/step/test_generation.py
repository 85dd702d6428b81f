"""The samplers: the same samples and grades whether grading overlaps sampling or not; a sampler with other
settings samples as one built with them and shares the run's engine; a sampler's rollouts are what
`pgrpo.evaluation.evaluate` reads."""

import pytest
import torch

from pgrpo.model.adapter import attach_adapter
from pgrpo.hosts.lightning.data import GRPODataModule
from pgrpo.env import load_problems
from pgrpo.step.generation import GenerationConfig, Grading, HFSampler, VLLMSampler, build_sampler
from pgrpo.model.load import load_model_and_tokenizer
from pgrpo.hosts.lightning.module import ProjectedGRPO


@pytest.fixture(scope="module")
def policy():
    model, tokenizer = load_model_and_tokenizer("embedded")
    return model, attach_adapter(model, ("q_proj", "v_proj")), tokenizer


@pytest.fixture(scope="module")
def batch():
    data = GRPODataModule(modes="run_tests", mix_ratio=0, group_size=4, prompts_per_step=2)
    data.setup("fit")
    return data.batch(0)


def test_completions_that_end_are_graded_while_the_batch_still_generates_with_the_same_grades(batch):
    outcomes = []
    for overlap in (True, False):
        module = ProjectedGRPO(generation=GenerationConfig(max_new_tokens=48), grade_while_generating=overlap)
        module.configure_model()
        # the tests' 2-step base rarely ends a completion: make some end early, as a trained one does
        module.policy.generation_config.sequence_bias = [[[module.tokenizer.eos_token_id], 3.0]]
        torch.manual_seed(0)
        students = module.sampler.sample(batch)
        started = [students.grading.submitted(row) for row in range(len(students.texts))]
        outcomes.append((students.texts, started, module.sampler.grade(batch, students)))
    (texts, started, grades), (texts_after, started_after, grades_after) = outcomes
    assert texts == texts_after and grades == grades_after
    ended_rows = [not c for c in students.clipped]
    assert any(started) and started == ended_rows  # the rows that ended, and only with the overlap on
    assert not any(started_after)


def test_a_sampler_with_another_temperature_samples_as_one_built_with_it_and_leaves_the_runs_own(policy, batch):
    model, adapter, tokenizer = policy
    own = HFSampler(model, adapter, tokenizer, GenerationConfig(max_new_tokens=12), Grading())
    colder = own.with_settings(temperature=0.3)
    built = HFSampler(model, adapter, tokenizer, GenerationConfig(max_new_tokens=12, temperature=0.3), Grading())
    drawn = []
    for sampler in (colder, built, own):
        torch.manual_seed(0)
        samples = sampler.sample(batch)
        samples.grading.close()
        drawn.append(samples.completions)
    assert drawn[0] == drawn[1] != drawn[2]
    assert own.settings.temperature == 1.0 and colder.policy is own.policy


def test_the_backend_picks_the_sampler_and_a_vllm_sampler_with_other_settings_shares_its_engine(policy):
    model, adapter, tokenizer = policy
    built = {backend: build_sampler(model, adapter, tokenizer, GenerationConfig(backend=backend), Grading(),
                                    model="embedded", dtype="float32") for backend in ("hf", "vllm")}
    assert type(built["hf"]) is HFSampler and type(built["vllm"]) is VLLMSampler  # the engine starts on first use
    assert built["vllm"].slot.engine is None
    warmer = built["vllm"].with_settings(temperature=1.5)
    assert warmer.slot is built["vllm"].slot and warmer.settings.temperature == 1.5


def test_rollouts_are_n_graded_samples_of_each_problem_in_order(policy):
    model, adapter, tokenizer = policy
    sampler = HFSampler(model, adapter, tokenizer, GenerationConfig(max_new_tokens=8), Grading())
    problems = load_problems()[:2]
    torch.manual_seed(0)
    rows = sampler.rollouts(problems, 3)
    assert len(rows) == 6
    assert [grade.mode for _, grade in rows] == [p.mode for p in problems for _ in range(3)]
    assert all(isinstance(text, str) for text, _ in rows)
