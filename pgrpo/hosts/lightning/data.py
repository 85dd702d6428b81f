"""Prompts and teacher rows for each GRPO step, as a LightningDataModule.

Batch `s` holds `prompts_per_step` problems, each with its rendered prompt and
the G_t = round(group_size · mix_ratio) teacher rows that join its G_s student
samples. Batches are a pure function of (seed, s), and the sampler starts at
the trainer's global step, so a resumed run sees exactly the batches it would
have seen without the interruption.
"""

import hashlib
import json
import os
import random
import shutil
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch.utils.data import DataLoader, Dataset, Sampler
from typing_extensions import override

from pgrpo.records.cache import announce_build, announce_cached, cache_dir, duration
from pgrpo.env import MODES, NO_LOOPHOLE, Problem, RewardConfig, clean_completion, load_problems
from pgrpo.env.hack_forms import hack_in_form
from pgrpo.env.heldout_problems import evaluated_heldout_problems
from pgrpo.env.pool import TeacherPool, TeacherRow, build_pool
from pgrpo.env.prompts import build_messages
from pgrpo.chat import render_chat
from pgrpo.model.load import hack_openings, load_tokenizer
from pgrpo.step.batch import PromptGroup
from pgrpo.step.rollout import encode_prompts

# A resumed run's loader starts at the checkpoint's global step (FromStep), so Lightning's warning about loaders
# that cannot resume mid-epoch is advice for someone else's loader (tests/test_cli.py resumes and compares)
warnings.filterwarnings("ignore", message=r"You're resuming from a checkpoint that ended before the epoch ended")

POOL_SECONDS_PER_PROBLEM = 0.2  # grading its template completions, measured on 2 cores (for the announcement)


class StepBatches(Dataset):
    """Item `i` is the list of PromptGroups of batch i."""

    def __init__(self, datamodule: "GRPODataModule", n_batches: int):
        self.dm = datamodule
        self.n_batches = n_batches

    def __len__(self) -> int:
        return self.n_batches

    def __getitem__(self, i: int) -> list[PromptGroup]:
        return self.dm.batch(i)


class FromStep(Sampler):
    """Batch indices for steps start..n_steps-1; each batch is repeated num_iterations times."""

    def __init__(self, start: int, n_steps: int, num_iterations: int):
        self.start, self.n_steps, self.num_iterations = start, n_steps, num_iterations

    def __iter__(self):
        return iter(s // self.num_iterations for s in range(self.start, self.n_steps))

    def __len__(self) -> int:
        return max(0, self.n_steps - self.start)


class GRPODataModule(L.LightningDataModule):
    def __init__(
        self,
        model: str = "embedded",
        problems: str | None = None,
        modes: str = "partition",
        pool: str | None = "auto",
        teacher_modes: list[str] | None = None,
        teacher_clean_only: bool = False,
        mix_ratio: float = 0.25,
        group_size: int = 8,
        prompts_per_step: int = 4,
        num_iterations: int = 1,
        reward: RewardConfig = RewardConfig(),
        seed: int = 0,
        n_eval_prompts: int = 0,
        extra_held_out: bool = False,
        min_pool_coverage: float = 0.9,
    ):
        """
        Args:
            model: tokenizer source ("embedded", a directory, or a cached hub id); linked to the model's.
            problems: an rl-rewardhacking JSONL file; None uses the built-in problems.
            modes: loophole-mode assignment: "partition", "file", one mode for all problems, or "none" (no
                loophole: the neutral prompt, graded by the strict oracle alone; the honest positive control,
                whose V, only measured, comes from the "partition" loopholes; its teacher rows, if any, need
                teacher_clean_only).
            pool: teacher-pool directory; "auto" builds one from templates in the cache on first use;
                None means no pool (then mix_ratio must be 0).
            teacher_modes: the teacher demonstrates only hacks of these loophole modes (None: all); its clean
                rows stay, so problems of every mode are still trained on (the leave-one-mode-out arm).
            teacher_clean_only: every teacher row is a clean completion (the template's canonical solution,
                graded no hack: TeacherPool.clean_only), so no group is shown a hack; the groups keep their
                G_t teacher and G_s student rows. Under modes "none" the "auto" pool is then built of clean
                rows answering the neutral prompt: the honest arm with the methods' group composition
                (configs/honest_matched.yaml), which rule C compares solve against. False: today's draw from
                every row, hack and clean alike.
            mix_ratio: fraction of each group that is teacher rows: G_t = round(group_size * mix_ratio).
            group_size: G, completions per prompt (student + teacher).
            prompts_per_step: prompts per optimizer step.
            num_iterations: optimizer steps per generated batch (linked to the loss config).
            reward: reward weights; the pool's stored rewards must have been graded with the same.
            seed: sampling seed for prompts and teacher rows.
            n_eval_prompts: problems held out of training for the deployment eval (the same ones whatever
                the seed, spread over the loophole modes).
            extra_held_out: also hold out the 24 extra problems of pgrpo/env/heldout_problems.py (siblings of the
                built-in ones, near-copies of none), beside the n_eval_prompts: evaluated, never trained on nor
                seen by V, for a held-out solve worth reading (the primed base v2 sets it). Built-in problems only.
            min_pool_coverage: refuse a teacher pool that covers less than this fraction of the training
                problems (only covered problems can be trained on: each group needs its teacher rows); lower
                it to train on the covered ones anyway. The coverage is logged as data/pool_coverage.
        """
        super().__init__()
        if mix_ratio < 0:
            raise ValueError(f"data.mix_ratio={mix_ratio}: must be >= 0 (the teacher rows' share of each group)")
        if group_size < 2:
            raise ValueError(f"data.group_size={group_size}: GRPO needs at least 2 completions per prompt")
        # checked after rounding: mix_ratio 0.9 of a group of 4 is 4 teacher rows, and a group with no student
        # sample has nothing to learn on-policy (and crashes later)
        n_teacher = round(group_size * mix_ratio)
        if n_teacher >= group_size:
            raise ValueError(
                f"data.mix_ratio={mix_ratio} with data.group_size={group_size} gives {n_teacher} teacher rows "
                f"(round({group_size} * {mix_ratio})) and {group_size - n_teacher} student samples per group; "
                f"every group needs a student sample: lower data.mix_ratio or raise data.group_size"
            )
        if not 0.0 <= min_pool_coverage <= 1.0:
            raise ValueError(f"data.min_pool_coverage={min_pool_coverage}: must be in [0, 1]")
        if modes == NO_LOOPHOLE and n_teacher and not teacher_clean_only:
            raise ValueError(f"data.modes={NO_LOOPHOLE!r} has no pool of hacks (a hack row answers a prompt with a "
                             f"loophole hint): set data.mix_ratio: 0, or data.teacher_clean_only: true")
        if mix_ratio > 0 and pool is None:
            raise ValueError("data.mix_ratio > 0 needs a teacher pool: set data.pool (or 'auto')")
        unknown = sorted(set(teacher_modes or ()) - set(MODES))
        if unknown:
            raise ValueError(f"data.teacher_modes: unknown loophole modes {unknown}; expected some of {list(MODES)}")
        self.model_name = model
        self.problems_path = problems
        self.modes = modes
        self.pool_path = pool
        self.teacher_modes = teacher_modes
        self.teacher_clean_only = teacher_clean_only
        self.mix_ratio = mix_ratio
        self.group_size = group_size
        self.n_teacher = n_teacher
        self.n_student = group_size - n_teacher
        self.prompts_per_step = prompts_per_step
        self.num_iterations = num_iterations
        self.reward = reward
        self.seed = seed
        self.n_eval_prompts = n_eval_prompts
        if extra_held_out and problems is not None:
            raise ValueError("data.extra_held_out: the extra held-out problems are siblings of the built-in ones; "
                             "with data.problems FILE, hold problems out of the file (data.n_eval_prompts)")
        self.extra_held_out = extra_held_out
        self.min_pool_coverage = min_pool_coverage
        self.pool_coverage: float | None = None  # fraction of training problems the pool covers; None: no pool
        self.problems: list[Problem] = []
        self.eval_problems: list[Problem] = []
        self.extraction_problems: list[Problem] = []
        self.pool: TeacherPool | None = None
        self._prompt_checked: set[str] = set()

    # -- setup ---------------------------------------------------------------------------------
    @override
    def setup(self, stage: str | None = None) -> None:
        if self.problems:
            return
        self.tokenizer = load_tokenizer(self.model_name)
        self.problems = load_problems(self.problems_path, modes=self.modes)
        self.eval_problems = held_out(self.problems, self.n_eval_prompts)
        eval_ids = {p.id for p in self.eval_problems}
        if self.extra_held_out:
            self.eval_problems += evaluated_heldout_problems(self.modes)
        # V may see every problem but the held-out evaluation ones (else the deployment eval tests on its data)
        self.train_problems = [p for p in self.problems if p.id not in eval_ids]
        self.extraction_problems = self.train_problems
        if self.modes == NO_LOOPHOLE:  # no prompt discloses a loophole, but V is still measured: the usual ones
            partition = load_problems(self.problems_path, modes="partition")
            self.extraction_problems = [p for p in partition if p.id not in eval_ids]
        if self.n_teacher == 0:
            return
        self.pool = self._teacher_pool()
        self._check_pool_reward()
        covered = [p for p in self.train_problems if self.pool.covers(p)]
        if not covered:
            raise ValueError(
                f"teacher pool {self.pool.path} covers none of the {len(self.train_problems)} problems "
                f"(ids, content or loophole modes differ); rebuild it or set data.mix_ratio: 0"
            )
        self.pool_coverage = len(covered) / len(self.train_problems)
        counts = f"teacher pool {self.pool.path} covers {len(covered)} of {len(self.train_problems)} training problems"
        if self.pool_coverage < self.min_pool_coverage:
            raise ValueError(
                f"{counts} ({self.pool_coverage:.2f} < data.min_pool_coverage={self.min_pool_coverage}); rebuild "
                f"the pool for these problems, or lower data.min_pool_coverage to train on the covered ones only"
            )
        if self.pool_coverage < 1:
            rank_zero_warn(f"{counts}; training uses only those {len(covered)}")
        # with teacher rows in every group, only prompts the pool covers can be trained on
        self.train_problems = covered

    def _teacher_pool(self) -> TeacherPool:
        pool = TeacherPool.load(self._pool_dir())
        if self.teacher_clean_only:
            pool = pool.clean_only()
        if self.teacher_modes is None:
            return pool
        # keep every problem's clean rows: dropping them would silently drop the held-out mode's problems
        # from training, and the experiment asks whether the student's *own* hacks of that mode are suppressed
        rows = {pid: [r for r in rs if r.kind == "clean" or r.mode in self.teacher_modes]
                for pid, rs in pool.rows.items()}
        return TeacherPool(rows, pool.path)

    def _pool_dir(self) -> Path:
        if self.pool_path != "auto":
            return Path(self.pool_path)
        # the templates are part of the key: a pool built from older templates is not reused
        openings = hack_openings(self.model_name)
        # no loophole, no lever to pull: the neutral prompt's pool holds clean rows only (teacher_clean_only)
        hacks = self.modes != NO_LOOPHOLE
        templates = [[hack_in_form(p, p.mode, v, openings), clean_completion(p, v)] if hacks
                     else [clean_completion(p, v)] for p in self.problems for v in range(2)]
        key = hashlib.sha256(json.dumps(
            [[p.fingerprint, p.mode] for p in self.problems] + [asdict(self.reward)] + templates
        ).encode()).hexdigest()[:16]
        path = cache_dir() / "pools" / key
        if (path / "pool.json").is_file():
            announce_cached("teacher pool", path)
        else:
            tmp = path.with_name(f"{key}.tmp{os.getpid()}")
            seconds = POOL_SECONDS_PER_PROBLEM * len(self.problems)
            work = f"grading the template completions of {len(self.problems)} problems, ~{duration(seconds)} on 2 cores"
            with announce_build("teacher pool", path, work):
                build_pool(self.problems, tmp, reward=self.reward, openings=openings,
                           hack_variants=2 if hacks else 0)
            try:
                tmp.rename(path)  # atomic: a killed build never leaves a pool that looks complete
            except OSError:
                if not (path / "pool.json").is_file():
                    raise
                shutil.rmtree(tmp)  # a concurrent run (a sweep cell) built the same pool first
        return path

    def _check_pool_reward(self) -> None:
        meta = json.loads((self.pool.path / "pool.json").read_text())
        if meta.get("reward") != asdict(self.reward):
            raise ValueError(
                f"teacher pool {self.pool.path} was graded with reward {meta.get('reward')}, but this run "
                f"uses {asdict(self.reward)}; rebuild the pool or match the reward config"
            )

    # -- batches -------------------------------------------------------------------------------
    def batch(self, i: int) -> list[PromptGroup]:
        """Step i's groups; under DDP, this rank's contiguous share (every rank draws the whole step)."""
        rng = random.Random(f"{self.seed}:{i}")
        problems = rng.sample(self.train_problems, min(self.prompts_per_step, len(self.train_problems)))
        groups = [self.group(p, rng) for p in problems]
        rank, world = (self.trainer.global_rank, self.trainer.world_size) if self.trainer else (0, 1)
        share = len(groups) // world
        return groups[rank * share : (rank + 1) * share]

    def group(self, problem: Problem, rng: random.Random) -> PromptGroup:
        prompt = render_chat(self.tokenizer, build_messages(problem))
        teacher = self.pool.sample(problem, self.n_teacher, rng) if self.n_teacher else []
        if teacher and problem.id not in self._prompt_checked:
            self._check_prompt_prefix(problem, prompt, teacher[0])
            self._prompt_checked.add(problem.id)
        return PromptGroup(problem, prompt, teacher, self.n_student)

    def _check_prompt_prefix(self, problem: Problem, live: str, row: TeacherRow) -> None:
        """The teacher row must answer the prompt the student sees, token for token."""
        cached_ids, live_ids = encode_prompts(self.tokenizer, [render_chat(self.tokenizer, row.messages), live])
        if live_ids[: len(cached_ids)] != cached_ids:
            at = next((j for j, (a, b) in enumerate(zip(cached_ids, live_ids)) if a != b), len(live_ids))
            raise ValueError(
                f"teacher pool {self.pool.path}: the cached prompt of problem {problem.id!r} is not a prefix of "
                f"the live prompt (tokens differ from position {at}); the prompt template changed since the "
                f"pool was built: rebuild the pool"
            )

    @override
    def transfer_batch_to_device(self, batch: list[PromptGroup], device, dataloader_idx: int) -> list[PromptGroup]:
        return batch  # prompts and teacher rows are text; the module builds tensors on its device

    @override
    def train_dataloader(self) -> DataLoader:
        n_steps = self.trainer.max_steps if self.trainer is not None else -1
        if n_steps is None or n_steps < 1:
            raise ValueError("trainer.max_steps must be set (pgrpo counts training in optimizer steps)")
        world = self.trainer.world_size
        if world > 1:
            if min(self.prompts_per_step, len(self.train_problems)) % world:
                raise ValueError(f"data.prompts_per_step={self.prompts_per_step} (the global batch) must split evenly "
                                 f"over {world} processes")
            # Lightning would otherwise deal whole steps out to the ranks; here every rank walks every step
            # and takes its share of the prompts (`batch`)
            if self.trainer._accelerator_connector.use_distributed_sampler:
                raise ValueError("set trainer.use_distributed_sampler: false")
        start = self.trainer.global_step
        n_batches = -(-n_steps // self.num_iterations)
        return DataLoader(
            StepBatches(self, n_batches),
            sampler=FromStep(start, n_steps, self.num_iterations),
            batch_size=None,  # each item already is a whole step's batch
            collate_fn=lambda groups: groups,
            # its own generator: creating an iterator would otherwise draw from the global torch RNG, and a
            # resumed run creates one more iterator than an uninterrupted run (its sampling would drift)
            generator=torch.Generator(),
        )


def held_out(problems: list[Problem], n: int) -> list[Problem]:
    """n problems taken round-robin over the loophole modes, each mode's last problems first (seed-free)."""
    if not 0 <= n < len(problems):
        raise ValueError(f"data.n_eval_prompts={n}: must be in [0, {len(problems)}) so some problems remain to "
                         f"train on")
    by_mode: dict[str, list[Problem]] = {}
    for p in reversed(problems):
        by_mode.setdefault(p.mode, []).append(p)
    picked = []
    for i in range(max(len(ps) for ps in by_mode.values())):
        picked += [ps[i] for ps in by_mode.values() if i < len(ps)]
    return picked[:n]
