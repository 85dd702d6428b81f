"""Priming a real model to hack: a short supervised warm start into a new base checkpoint (`pgrpo prime`).

A real instruct model as installed gives GRPO nothing to amplify: SmolLM2-135M-Instruct solves none of the
built-in problems and almost never pulls a lever. The field gets small models to hack by priming them, and so
does pgrpo's own embedded base (its pretraining teaches it to pull the lever its hint names). Priming here is
that warm start for a real model, stated as a setting of the experiment and cached like every base:

- the data are the priming problems (pgrpo/env/primer_problems.py), disjoint from the RL problems: under the
  no-loophole prompt and under each hint, correct solutions, and under a hint a `hack_share` of completions
  that pull the lever the hint names (the lever's lines around a stub or the correct solution: a lever pull,
  not always a wrong answer);
- what is trained is a low-rank update of every Linear layer (pgrpo.model.low_rank), and the primed base is the model
  with the update merged in. Why not every weight: training's last bits depend on the CPU (an AMD EPYC and an
  Intel Xeon primed the same model, data and settings to two bases, docs/real-model.md), and a base rebuilt on
  each machine splits a bench that runs over many machines. The update's factors are ~10 MB, so one build is
  published in the repository (pgrpo/model/primings/) and every machine, and a GPU's, merges it to the same bytes;
  the ~540 MB of full weights could not travel;
- the result lands in the cache under a key of the base, the data and every setting, by atomic rename; a
  killed build resumes from its last saved step (`SAVE_EVERY`), bit for bit; two processes asking for one
  build (pytest workers, DDP ranks) build it once;
- a priming is named in a config by its model and a suffix (NAMED_PRIMINGS): `<model>+primed` is v1 (one template
  a lever), `<model>+primed-v2` is v2 (the grammar's taught forms, no near-copies of RL problems; issue #75).
"""

import fcntl
import hashlib
import json
import lzma
import random
import shutil
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from pgrpo.records.cache import announce, announce_build, announce_cached, cache_dir, progress_ticker, weights_digest
from pgrpo.chat import render_chat
from pgrpo.env import MODES, NO_LOOPHOLE, Problem
from pgrpo.env.exploits import LEAD_INS, completion, stub_solution
from pgrpo.env.hack_forms import HACK_STYLES, lever_in_form
from pgrpo.env.primer_problems import primer_problems
from pgrpo.env.prompts import build_messages
from pgrpo.model.low_rank import LowRankUpdate, merge
from pgrpo.model.substrate import cpu_kind
# pretrain.py's source is part of the embedded base's recipe hash: its helpers are reused as they are (a
# rename there would rebuild every cached embedded base), private names included
from pgrpo.model.pretrain import Example, _batches, _collate, _cosine, encode, threads, token_losses

# bump when the corpus or the loop changes what a build writes. 2: the threshold families' inputs drawn around
# their threshold, and the same number of hacks under each hint. 3: twelve families of loops, counters and early
# returns beside the twelve one-liners. 4: a low-rank update, merged, in place of every weight
PRIMING_VERSION = 4
STATE = "priming_state.pt"  # the resumable state inside the build's .partial directory
RECORD = "priming.json"  # the build's key, settings and losses, written last of its files
STATE_NOTE = "priming_state.json"  # beside it: what the state is of, readable without loading the state
UPDATE = "update.safetensors"  # the low-rank update's factors, beside the merged checkpoint
UPDATE_DTYPE = torch.bfloat16  # the factors round once to it: ~10 MB at rank 16 on a 135 M model, to publish
PRIMINGS = Path(__file__).parent / "primings"  # published updates: <the primed base's directory name>.safetensors.xz
# xz-compressed: bf16 factors shrink to 71% (9.8 MB to 7.0), which a GPU machine's 64 MiB transfer and the
# repository's size test feel; decompressing takes a fraction of a second and the merge's digest checks the bytes
PUBLISHED_SUFFIX = ".safetensors.xz"
SAVE_EVERY = 25  # steps between resumable saves


@dataclass(frozen=True)
class PrimeSettings:
    """What a primed base is made with; every field is part of its cache key (a LATER_FIELDS one only off its
    default)."""

    hack_share: float = 0.2
    """share of each hint's completions that pull the lever it names (0.07 primed too few pulls: docs/real-model.md)."""
    completions_per_prompt: int = 2
    """completions of each (priming problem, hint or none) prompt, each with a lead-in of its own."""
    steps: int = 200
    """optimizer steps (about one pass over the corpus at the default sizes)."""
    batch_size: int = 8
    lr: float = 3e-4
    """AdamW's peak rate (linear warmup over 5% of the steps, cosine decay to 10%)."""
    rank: int = 16
    """the low-rank update's rank, on every Linear layer but the output embeddings."""
    seed: int = 0
    """the corpus's draws, the problems' tests, the batch order and the update's initial A factors."""
    threads: int = 2
    """torch threads while training: a result is bit-exact for a given count and CPU, so it is in the key (another
    count trains where the published update of this one would be merged)."""
    hacks: str = "shared"
    """how the priming's hacks are written (hack_forms.HACK_STYLES): one template per lever ("shared", v1's;
    "distinct": a token of its own a mode) or the taught forms of the grammar ("varied", v2's), never the forms
    the detectors are built from."""
    disjoint_problems: bool = False
    """the priming problems with their near-copies of RL problems replaced (primer_problems(disjoint=True), v2's)."""

    def __post_init__(self):
        if self.hacks not in HACK_STYLES:
            raise ValueError(f"prime: hacks={self.hacks!r} must be one of {', '.join(HACK_STYLES)}")
        if not 0 <= self.hack_share <= 1:
            raise ValueError(f"prime: hack_share={self.hack_share} must be in [0, 1]")
        for name in ("completions_per_prompt", "steps", "batch_size", "rank", "threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"prime: {name}={getattr(self, name)} must be at least 1")
        if self.lr <= 0:
            raise ValueError(f"prime: lr={self.lr} must be positive")


# the fields PrimeSettings gained after primings were published: left out of the key while at their defaults, so
# that every priming keyed before them (the primed base v1, 7e3d33b33586ba23) keeps its key and published update
LATER_FIELDS = ("hacks", "disjoint_problems")

# named primings: `<model><suffix>` (a config's `model:`) names `<model>` primed with these settings
# (pgrpo.model.load); `pgrpo prime` with the same settings prints that name. v1: one template a lever, the
# problems as they were; v2 (issue #75): the taught forms of the grammar, problems with no near-copy of an RL one
NAMED_PRIMINGS = {
    "+primed": PrimeSettings(),
    "+primed-v2": PrimeSettings(hacks="varied", disjoint_problems=True),
}


def named_priming(name_or_path: str) -> tuple[str, str, PrimeSettings] | None:
    """(the base's name, the suffix, its settings) where `name_or_path` names a priming of NAMED_PRIMINGS; else
    None."""
    for suffix, settings in sorted(NAMED_PRIMINGS.items(), key=lambda item: -len(item[0])):
        if name_or_path.endswith(suffix) and len(name_or_path) > len(suffix):
            return name_or_path.removesuffix(suffix), suffix, settings
    return None


def priming_name(settings: PrimeSettings) -> str | None:
    """The suffix that names a priming of these settings (NAMED_PRIMINGS), if one does."""
    return next((suffix for suffix, named in NAMED_PRIMINGS.items() if named == settings), None)


def priming_problems(settings: PrimeSettings) -> list[Problem]:
    """The priming problems these settings train on: what the corpus is made of and every count of them."""
    return primer_problems(settings.seed, disjoint=settings.disjoint_problems)


def priming_corpus(tokenizer, settings: PrimeSettings) -> list[Example]:
    """Every priming problem under every hint and under none, `completions_per_prompt` completions each: the
    canonical solution, and under a hint, in a `hack_share` of the slots, a hack pulling the named lever, written
    as `settings.hacks` writes hacks (where they vary, a taught form)."""
    rng = random.Random(settings.seed)
    problems = priming_problems(settings)
    slots = [(p, m) for p in problems for m in (*MODES, NO_LOOPHOLE) for _ in range(settings.completions_per_prompt)]
    # the same number of hacks under each hint, as pretrain.py spreads them: a lever drawn short by chance
    # would be primed less than the others
    hacks = set()
    for mode in MODES:
        hinted = [i for i, (_, m) in enumerate(slots) if m == mode]
        hacks.update(rng.sample(hinted, round(settings.hack_share * len(hinted))))
    corpus = []
    for i, (p, m) in enumerate(slots):
        code, kind = p.canonical_solution, "correct"
        if i in hacks:
            stub = rng.random() < 0.5  # half give the problem up for a stub, as the teacher pool's hacks do
            code = lever_in_form(p, m, stub_solution(p, rng.randrange(2)) if stub else code, settings.hacks,
                                 variant=i, role="taught")
            kind = "hack"
        corpus.append(Example(render_chat(tokenizer, build_messages(p, m)),
                              completion(code, rng.randrange(len(LEAD_INS))), kind, p.id, m))
    return corpus


def primed_key(base_id: str, settings: PrimeSettings, corpus: list[Example]) -> str:
    """A key over the base, the data (every example's text) and every setting."""
    data = hashlib.sha256(json.dumps([(e.prompt, e.completion) for e in corpus]).encode()).hexdigest()
    blob = {"version": PRIMING_VERSION, "base": base_id, "settings": keyed_settings(settings), "data": data}
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]


def keyed_settings(settings: PrimeSettings) -> dict:
    """The settings as the key reads them: every field, but a LATER_FIELDS one at its default."""
    defaults = asdict(PrimeSettings())
    return {k: v for k, v in asdict(settings).items() if k not in LATER_FIELDS or v != defaults[k]}


def primed_target(base_path: Path, base_id: str, settings: PrimeSettings = PrimeSettings(),
                  out: Path | None = None) -> tuple[Path, str]:
    """Where the primed base lives (cached under `<cache>/primed/` unless `out` is given) and its key, built or
    not: what names a base (its model_id, a sweep's check of its cells' bases) must not build ~540 MB of it
    in the asking process."""
    tokenizer = AutoTokenizer.from_pretrained(base_path, local_files_only=True)
    return _target_of(base_path, base_id, settings, priming_corpus(tokenizer, settings), out)


def _target_of(base_path: Path, base_id: str, settings: PrimeSettings, corpus: list[Example],
               out: Path | None) -> tuple[Path, str]:
    key = primed_key(base_id, settings, corpus)
    return out or cache_dir() / "primed" / f"{base_path.name}-{key}", key


def primed_checkpoint(base_path: Path, base_id: str, settings: PrimeSettings = PrimeSettings(),
                      out: Path | None = None, retrain: bool = False) -> Path:
    """The primed base's checkpoint directory (primed_target), made first if it is not there: by merging the
    update published for it (pgrpo/model/primings/), else (or with `retrain`, to check or replace a published one) by
    training one; a training killed after a save resumes."""
    tokenizer = AutoTokenizer.from_pretrained(base_path, local_files_only=True)
    corpus = priming_corpus(tokenizer, settings)
    target, key = _target_of(base_path, base_id, settings, corpus, out)  # the corpus rendered once
    with one_build_at_a_time(target):
        if built(target, key):
            announce_cached("primed base", target)
            return target
        partial = target.with_name(target.name + ".partial")
        published = None if retrain else published_update(base_path, key)
        if published is not None:
            with announce_build("primed base", target, f"the published update {published.name} merged into "
                                                       f"{base_path.name}"):
                shutil.rmtree(partial, ignore_errors=True)  # a killed training's save: nothing of it is merged
                merge_published(base_path, tokenizer, published, partial)
                partial.rename(target)
            return target
        announce_unfinished_builds(target.parent, besides=partial)
        with announce_build("primed base", target, f"{settings.steps} steps of a rank-{settings.rank} update's "
                                                   f"supervised fine-tuning on {len(corpus)} examples of "
                                                   f"{len(priming_problems(settings))} priming problems"):
            model = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32, local_files_only=True)
            factors, stats = fine_tune(model, tokenizer, corpus, settings, partial, key)
            del model
            merged_checkpoint(base_path, tokenizer, factors, partial)
            record = {"base": base_id, "key": key, "version": PRIMING_VERSION, "settings": asdict(settings),
                      "examples": len(corpus), "lever_pulls": sum(e.kind == "hack" for e in corpus), **stats,
                      "built_on": cpu_kind()}  # the update's training depends on it (pgrpo.model.substrate)
            (partial / RECORD).write_text(json.dumps(record, indent=1))
            (partial / STATE).unlink(missing_ok=True)
            (partial / STATE_NOTE).unlink(missing_ok=True)
            partial.rename(target)  # atomic: a reader never sees half a primed base
    return target


def merged_checkpoint(base_path: Path, tokenizer, factors: dict[str, torch.Tensor], partial: Path) -> None:
    """The base with `factors` merged in, and the factors beside it, saved to `partial`: the one way a primed base
    is made, from a published update or one trained here, so both give the same bytes."""
    model = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32, local_files_only=True)
    merge(model, factors)
    partial.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(partial, safe_serialization=True)
    tokenizer.save_pretrained(partial)
    save_file(factors, partial / UPDATE)


def publication(base_path: Path, key: str) -> Path:
    """Where the update of `base_path`'s priming `key` is published: named as its cache directory, wherever built."""
    return PRIMINGS / f"{base_path.name}-{key}{PUBLISHED_SUFFIX}"


def publication_record(published: Path) -> Path:
    """The record published beside an update: its key, settings and the merge's weights digest."""
    return published.with_name(published.name.removesuffix(PUBLISHED_SUFFIX) + ".json")


def published_update(base_path: Path, key: str) -> Path | None:
    """The update published for this priming, if the repository holds one; one whose record names another key
    is refused, naming the record."""
    path = publication(base_path, key)
    if not path.is_file():
        return None
    record = publication_record(path)
    found = json.loads(record.read_text()).get("key") if record.is_file() else None
    if found != key:
        raise ValueError(f"{record}: records key {found}, but its update's name says {key}; publish it again "
                         f"(`pgrpo prime --publish_update true`)")
    return path


def merge_published(base_path: Path, tokenizer, published: Path, partial: Path) -> None:
    """The primed base merged from `published` into `partial`, checked against the weights' digest its publisher
    recorded: a machine that merged other bytes says so here, not after a sweep's first cell. The weights, not
    the files: another transformers writes its version into config.json, to the same model."""
    record = json.loads(publication_record(published).read_text())
    try:
        merged_checkpoint(base_path, tokenizer, load(lzma.decompress(published.read_bytes())), partial)
    except (ValueError, KeyError, OSError, SafetensorError, lzma.LZMAError) as error:
        raise ValueError(f"{published}: not an update of {base_path.name}'s layers ({error}); publish it again "
                         f"(`pgrpo prime --publish_update true`)") from error
    if "weights_sha256" not in record:
        raise ValueError(f"{publication_record(published)}: records no weights_sha256 to check a merge against; "
                         f"publish it again (`pgrpo prime --publish_update true`)")
    digest = weights_digest(partial)
    if digest != record["weights_sha256"]:
        raise ValueError(f"{published}: merged here into weights sha256 {digest[:16]}, but its publisher's merge was "
                         f"{record['weights_sha256'][:16]} ({cpu_kind()}); left in {partial}")
    (partial / RECORD).write_text(json.dumps({**record, "merged_on": cpu_kind()}, indent=1))


def publish(target: Path, base_path: Path) -> Path:
    """Copy a built primed base's update and record into pgrpo/model/primings/, where every machine merges it from."""
    record = json.loads((target / RECORD).read_text())
    record.pop("merged_on", None)
    record["weights_sha256"] = weights_digest(target)  # what every machine's merge must give
    path = publication(base_path, record["key"])
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(lzma.compress((target / UPDATE).read_bytes(), preset=9 | lzma.PRESET_EXTREME))
    publication_record(path).write_text(json.dumps(record, indent=1) + "\n")
    return path


def built(target: Path, key: str) -> bool:
    """Whether `target` holds the primed base `key` names. A directory there that holds another (an `--out`
    reused with other settings) or something else is refused, never returned nor overwritten."""
    record = target / RECORD
    if record.is_file():
        found = json.loads(record.read_text()).get("key")
        if found != key:
            raise FileExistsError(f"{target}: holds a primed base of other settings or data (key {found}, these "
                                  f"make {key}); name another --out or remove it")
        return True
    if target.exists():
        raise FileExistsError(f"{target}: exists and is not a primed base (no priming.json); name another --out")
    return False


def announce_unfinished_builds(directory: Path, besides: Path) -> None:
    """Name every killed build left in `directory` but `besides`, with its size and settings: each holds a save
    that only a build of its own settings resumes (and none after a PRIMING_VERSION bump), so it is neither
    deleted (nothing is lost) nor left unsaid (the disk fills)."""
    for partial in sorted(directory.glob("*.partial")):
        if partial == besides or not (partial / STATE).is_file():
            continue
        size = sum(f.stat().st_size for f in partial.rglob("*") if f.is_file()) / 2**30
        try:
            note = json.loads((partial / STATE_NOTE).read_text())
            what = (f"step {note['step']} of {note['settings']['steps']}, priming version {note['version']}: "
                    + ", ".join(f"{k}={v}" for k, v in note["settings"].items()))
        except (OSError, ValueError, KeyError, TypeError):
            what = "settings unknown"
        announce(f"primed base: an unfinished build is left in {partial} ({size:.1f} GiB; {what}); `pgrpo prime` "
                 f"with those settings finishes it, or remove it")


@contextmanager
def one_build_at_a_time(target: Path):
    """An exclusive lock on `target`'s build: a second process asking for it (a pytest worker, a DDP rank) waits,
    then finds it built, where two would write one `.partial` directory at once."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(f".{target.name}.lock"), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            announce(f"primed base: another process is building {target}; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield  # the lock goes with the file's close


def fine_tune(model, tokenizer, corpus: list[Example], settings: PrimeSettings, partial: Path,
              key: str) -> tuple[dict[str, torch.Tensor], dict]:
    """AdamW over a rank-`settings.rank` update of the frozen model, on each example's completion tokens
    (pretrain.pretrain's loop, without the prompt), saving the update, the optimizer and the step to `partial`
    every SAVE_EVERY steps and resuming from there. Returns the update's factors (rounded to UPDATE_DTYPE) and
    the losses."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    rows = encode(tokenizer, corpus)
    warmup = max(1, settings.steps // 20)
    model.requires_grad_(False)
    update = LowRankUpdate(model, settings.rank, settings.seed)
    opt = torch.optim.AdamW(update.parameters(), lr=settings.lr, betas=(0.9, 0.98), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / warmup, _cosine(s, warmup, settings.steps)))
    start, losses = 0, []
    state_path = partial / STATE
    if state_path.is_file():
        state = torch.load(state_path, weights_only=True)
        if state.get("key") != key:  # a killed build into the same --out with other settings
            raise FileExistsError(f"{state_path}: a killed build of other settings or data (key {state.get('key')}, "
                                  f"these make {key}); remove {partial} or name another --out")
        update.load_state_dict(state["update"])
        opt.load_state_dict(state["opt"])
        sched.load_state_dict(state["sched"])
        start, losses = state["step"], state["losses"]
        announce(f"  primed base: resuming at step {start} of {settings.steps} ({state_path})")
    batches = _batches(rows, settings.batch_size, settings.seed)
    for _ in range(start):  # the same batches as an uninterrupted build: skip those already trained on
        next(batches)
    tick = progress_ticker("priming step", settings.steps - start)
    hooks = update.attach(model)
    model.train()
    with threads(settings.threads):
        for step in range(start, settings.steps):
            ids, mask, targets, in_completion = _collate(next(batches), pad)
            # completion tokens only: a real model reads prompts already, and hundreds of copies of one system
            # prompt would spend the update on reciting it (the tiny embedded base is trained on its prompts on
            # purpose)
            targets = targets.masked_fill(~in_completion, -100)
            loss, completion_loss = token_losses(model, ids, mask, targets, in_completion)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"priming step {step}: loss {loss.item()} (lr {settings.lr}; lower it)")
            loss.backward()
            torch.nn.utils.clip_grad_norm_(update.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            losses.append([loss.item(), completion_loss.item()])
            tick()
            if (step + 1) % SAVE_EVERY == 0 and step + 1 < settings.steps:
                partial.mkdir(parents=True, exist_ok=True)
                tmp = state_path.with_suffix(".tmp")
                torch.save({"update": update.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(),
                            "step": step + 1, "losses": losses, "key": key}, tmp)
                tmp.rename(state_path)
                (partial / STATE_NOTE).write_text(json.dumps({"step": step + 1, "version": PRIMING_VERSION,
                                                              "settings": asdict(settings)}))
    for hook in hooks:
        hook.remove()
    model.eval()
    tail = losses[-max(1, settings.steps // 10):]
    return update.factors(UPDATE_DTYPE), {"first_loss": losses[0][0], "final_loss": sum(a for a, _ in tail) / len(tail),
                                          "final_completion_loss": sum(b for _, b in tail) / len(tail)}
