"""The embedded default: a tiny pretrained Qwen3 coder and a byte-level BPE tokenizer that pgrpo builds itself.

The machines have no model hub, so the project ships a recipe instead of weights.
`build_embedded_default` turns the recipe into an ordinary Hugging Face checkpoint
directory (tokenizer, random init, then `pgrpo.model.pretrain` on chat-formatted
problems: about 6 minutes on 2 cores), and everything downstream loads it
through `from_pretrained` like any real checkpoint. The build is deterministic,
and `recipe_hash` covers everything that decides its bytes (constants, corpora,
the pretraining code, library versions), so the cache directory it names is
rebuilt whenever the recipe changes.

Deterministic across machines too, where it can be: torch picks its kernels for the CPU it runs on (AVX-512,
AVX2 or plain), and MKL its code path, and each sums in its own order, so one recipe built different bytes on an
AVX2 and an AVX-512 machine (and every run on it differed after). The cache builds in a child process with both
pinned (`PINNED_KERNELS`), on any x86-64 CPU with AVX2.
"""

import hashlib
import inspect
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tokenizers
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from torch.optim.optimizer import register_optimizer_step_post_hook
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from pgrpo.records.cache import (KEPT_BUILDS, announce, announce_build, announce_cached, cache_dir as default_cache_dir,
                         duration, files_digest, progress_ticker)

# Bump when a build step changes in a way the constants and sources hashed below do not capture.
RECIPE_VERSION = 4
SEED = 0
VOCAB_SIZE = 2048
PAD_TOKEN, IM_START, EOS_TOKEN = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (PAD_TOKEN, IM_START, EOS_TOKEN)  # ids 0, 1, 2
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
MODEL_SHAPE = {
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "max_position_embeddings": 2048,
}
# pgrpo.model.pretrain's run: 450 steps of 16 examples (about 1.5 epochs of its corpus; 5.9 min on 2 cores with the
# kernels pinned, 2.9 min without)
PRETRAIN = {"steps": 450, "lr": 6e-3, "batch_size": 16, "seed": SEED}
# torch's kernels and MKL's code path fixed for the build, whatever the CPU offers beyond AVX2 (x86-64 only: other
# CPUs have neither setting, and their builds are deterministic on the machine alone)
PINNED_KERNELS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"}
PINS_KERNELS = platform.machine().lower() in ("x86_64", "amd64")
# Tests build with a few steps: the mechanics under test do not depend on how well the base codes.
PRETRAIN_STEPS_ENV = "PGRPO_PRETRAIN_STEPS"
MARKER = "pgrpo_embedded.json"  # written last; a directory without it is not a finished build
STALE_TMP_SECONDS = 3600  # a build takes seconds; an older temp dir belongs to a killed build
CHECKSUMS = "SHA256SUMS"  # `sha256sum` writes and checks it: `cd results/bases/<build> && sha256sum -c SHA256SUMS`
# The build's time as announced, measured on 2 cores (pretraining runs on 2 threads on any machine):
# tokenizer, corpus and saving, then each pretraining step.
BUILD_SECONDS, PRETRAIN_STEP_SECONDS = 12, 0.79  # pinned (PINNED_KERNELS): MKL's COMPATIBLE path costs 2x

# Python idioms and English words that prompts and completions are made of, so
# that they get their own merges even where the problem set is thin. Written out
# literally (not taken from `keyword`/`builtins`) so the corpus does not depend
# on the Python version.
IDIOMS = '''\
False None True and as assert async await break class continue def del elif else except finally
for from global if import in is lambda nonlocal not or pass raise return try while with yield
abs all any bin bool bytes chr dict divmod enumerate filter float frozenset hash hex int isinstance
iter len list map max min next object ord pow print range repr reversed round set sorted str sum
tuple type zip self cls __init__ __eq__ __name__ __main__ __repr__ Optional List Dict Tuple
import collections, functools, heapq, itertools, math, string, bisect
from typing import *
from collections import defaultdict, deque, Counter
class Solution:
    def twoSum(self, nums: List[int], target: int) -> List[int]:
        seen = {}
        for i in range(len(nums)):
            if target - nums[i] in seen:
                return [seen[target - nums[i]], i]
            seen[nums[i]] = i
        return []
class ListNode:
    def __init__(self, val=0, next=None):
        self.val = val
        self.next = next
class TreeNode:
    def __init__(self, val=0, left=None, right=None):
        self.val = val
        self.left = left
        self.right = right
n = len(nums)
m, n = len(grid), len(grid[0])
dp = [0] * (n + 1)
dp = [[0] * (n + 1) for _ in range(m + 1)]
for i, x in enumerate(nums):
for j in range(i + 1, n):
while left < right:
    mid = (left + right) // 2
left, right = 0, len(nums) - 1
ans = max(ans, dp[i])
res.append(x)
stack.pop()
queue = deque([root])
count = Counter(s)
heapq.heappush(heap, (dist, node))
return sorted(result)
return -1
if not nums:
    return 0
elif x > 0:
else:
    continue
except ValueError:
raise ValueError("invalid input")
def run_tests():
    assert Solution().twoSum([2, 7, 11, 15], 9) == [0, 1]
    print("all tests passed")
if __name__ == "__main__":
    run_tests()
with open("result.txt", "w") as f:
    f.write("PASS")
sys.exit(0)
```python
```
Given an array of integers nums and an integer target, return the indices of the two numbers such
that they add up to target. You may assume that each input would have exactly one solution. Return
the answer in any order. Given a string s, return the length of the longest substring. Given the root
of a binary tree, return the number of nodes. Example 1: Input: nums = [1, 2, 3] Output: 6
Explanation: The sum is 6. Constraints: 1 <= n <= 10^5. The answer is guaranteed to fit in a 32-bit
integer. Note that the array is sorted in ascending order. Find the minimum and maximum value.
You are an expert Python programmer. Write correct, efficient Python 3 code that solves the problem
and passes all tests. Output the code in the following format. Your solution to the problem should be
a method of the class Solution and should pass all tests. Use the following starter code. It will be
evaluated by calling a function, by reading the attribute valid, by checking the program output, the
file in the working directory, the value your method returns, and the exit status of the script.
PROBLEM: SOLUTION: system user assistant
'''


def training_corpus() -> list[str]:
    """The tokenizer's training texts: the idioms plus every built-in problem's statement and code."""
    try:
        from pgrpo.env.problems import MODES, load_problems
        from pgrpo.env.prompts import SYSTEM_PROMPT, user_message

        problems = load_problems()
    except ModuleNotFoundError as e:
        if e.name != "pgrpo.env.builtin_problems":
            raise
        # No substitute corpus: a tokenizer trained without the problems would be silently different.
        raise RuntimeError(
            f"cannot build the embedded default: the built-in problem set is missing ({e})"
        ) from e
    corpus = [IDIOMS, SYSTEM_PROMPT]
    for p in problems:
        # the prompts as the student sees them (every mode's hint), so they tokenize compactly
        corpus += [user_message(p, mode) for mode in MODES] + [p.canonical_solution]
    return corpus


def pretrain_settings() -> dict:
    """PRETRAIN, with the step count from $PGRPO_PRETRAIN_STEPS when set (a positive integer)."""
    raw = os.environ.get(PRETRAIN_STEPS_ENV)
    if raw is None:
        return dict(PRETRAIN)
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"${PRETRAIN_STEPS_ENV}={raw!r}: must be a positive integer (pretraining steps)")
    return PRETRAIN | {"steps": int(raw)}


def recipe_hash(openings: str = "shared") -> str:
    """Hash of everything that decides the build's bytes (`openings`: how its hacks open, exploits.OPENINGS);
    names the cache directory."""
    from pgrpo import chat
    from pgrpo.model import pretrain
    from pgrpo.env import attempts, exploits

    recipe = {
        "recipe_version": RECIPE_VERSION,
        "pretrain": pretrain_settings(),
        "openings": openings,
        # the pretraining corpus is made by this code from the problems and the exploit templates
        "pretrain_sources": [inspect.getsource(m) for m in (pretrain, chat, exploits, attempts)],
        "seed": SEED,
        "vocab_size": VOCAB_SIZE,
        "special_tokens": SPECIAL_TOKENS,
        "chat_template": CHAT_TEMPLATE,
        "model_shape": MODEL_SHAPE,
        "kernels": PINNED_KERNELS if PINS_KERNELS else "native",
        "corpus": training_corpus(),
        # a new library version may initialise or train differently from the same recipe
        "versions": [torch.__version__, transformers.__version__, tokenizers.__version__],
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def build_tokenizer(corpus: list[str]) -> PreTrainedTokenizerFast:
    """Byte-level BPE: every string encodes, and decode(encode(s)) == s."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        chat_template=CHAT_TEMPLATE,
        model_max_length=MODEL_SHAPE["max_position_embeddings"],
        clean_up_tokenization_spaces=False,  # it would rewrite " ." to "." and break the round trip
    )


def init_model(tokenizer: PreTrainedTokenizerFast) -> Qwen3ForCausalLM:
    """A randomly initialised tiny Qwen3, the same every time, without touching the global RNG."""
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        tie_word_embeddings=True,
        bos_token_id=pad,  # as in Qwen: no BOS is prepended, <|endoftext|> stands in for one
        eos_token_id=eos,
        pad_token_id=pad,
        **MODEL_SHAPE,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(bos_token_id=pad, eos_token_id=eos, pad_token_id=pad)
    return model


def build_embedded_default(out_dir: Path, openings: str = "shared") -> Path:
    """Write the embedded checkpoint (config, safetensors weights, tokenizer, marker) into out_dir, pretrained on
    hacks that open as `openings` says (exploits.OPENINGS)."""
    out_dir = Path(out_dir)
    corpus = training_corpus()
    tokenizer = build_tokenizer(corpus)
    model = init_model(tokenizer)
    from pgrpo.model.pretrain import pretrain, pretraining_corpus

    settings = pretrain_settings()
    corpus = pretraining_corpus(tokenizer, settings["seed"], openings)
    # counted by an optimizer hook, not an argument of pretrain(): pretrain.py's source is in the recipe hash,
    # and a change to it rebuilds every cached base although progress lines do not change what is built
    tick = progress_ticker("pretraining", settings["steps"])
    counting = register_optimizer_step_post_hook(lambda optimizer, args, kwargs: tick())
    try:
        stats = pretrain(model, tokenizer, corpus, settings["steps"], settings["lr"], settings["batch_size"],
                         settings["seed"])
    finally:
        counting.remove()
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    marker = {
        "recipe_version": RECIPE_VERSION,
        "recipe_hash": recipe_hash(openings),
        "openings": openings,
        # losses, not the seconds it took: the marker is part of the build's bytes, which are deterministic
        "pretrain": settings | {"first_loss": stats.first_loss, "final_loss": stats.final_loss},
        "sha256": {name: _sha256(out_dir / name) for name in ("model.safetensors", "tokenizer.json")},
    }
    (out_dir / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    return out_dir


def build_pinned(out_dir: Path, openings: str) -> Path:
    """`build_embedded_default` in a child process whose kernels are pinned (`PINNED_KERNELS`): they are chosen when
    torch loads, so this process, whose torch is loaded, cannot change its own."""
    if not PINS_KERNELS or all(os.environ.get(k) == v for k, v in PINNED_KERNELS.items()):
        return build_embedded_default(out_dir, openings)
    child = subprocess.run([sys.executable, "-m", "pgrpo.model.embedded", str(out_dir), openings],
                           env=os.environ | PINNED_KERNELS)
    if child.returncode:
        raise RuntimeError(f"building the embedded base model into {out_dir} failed in its child process (exit "
                           f"{child.returncode}; its error is printed above)")
    return Path(out_dir)


def cached_build_digest(build_id: str, cache_dir: Path | None = None) -> str | None:
    """sha256 over the files of the finished build `build_id` (embedded-<recipe hash>) in the cache, its marker
    aside; None when the cache holds no such build. Two recipes whose builds share a digest built the same base:
    a refactor of the sources the recipe hashes changes its id, not its bytes."""
    build = Path(cache_dir or default_cache_dir()) / build_id
    if not (build / MARKER).is_file():
        return None
    return files_digest(build, besides=(MARKER,))


def embedded_default_path(cache_dir: Path | None = None, openings: str = "shared") -> Path:
    """The built embedded checkpoint (hacks opening as `openings` says) under the cache, building it on first use.

    Cache root: `cache_dir`, else $PGRPO_CACHE, else ~/.cache/pgrpo. The build
    goes into a temporary sibling that is renamed into place only when complete,
    so a killed build never leaves a directory that looks finished.
    """
    root = Path(cache_dir or default_cache_dir())
    final = root / f"embedded-{recipe_hash(openings)}"
    if (final / MARKER).is_file():
        announce_cached("embedded base model", final)
        return final
    root.mkdir(parents=True, exist_ok=True)
    _remove_stale_builds(root)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=root))
    steps = pretrain_settings()["steps"]
    seconds = BUILD_SECONDS + steps * PRETRAIN_STEP_SECONDS
    work = f"tokenizer and {steps} pretraining steps, ~{duration(seconds)} on 2 cores"
    try:
        if not restore_kept_build(KEPT_BUILDS / final.name, tmp):
            with announce_build("embedded base model", final, work):
                build_pinned(tmp, openings)
        if final.is_dir() and not (final / MARKER).is_file():
            shutil.rmtree(final)  # only a rename creates `final`, so this one was not made by a build
        try:
            tmp.rename(final)
        except OSError:
            if not (final / MARKER).is_file():
                raise
            # A concurrent process finished the same recipe first; its bytes equal ours.
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def restore_kept_build(kept: Path, out_dir: Path) -> bool:
    """Copy the build kept in `kept` into `out_dir`, every file's sha256 checked against its SHA256SUMS: True when
    restored. A build takes minutes and its last bits depend on the machine; the kept bytes are the ones the kept
    results trained on. No kept build: False, silently; a corrupt or incomplete one: False, with one line saying
    why (the caller builds instead)."""
    if not kept.is_dir():
        return False
    start = time.perf_counter()
    try:
        sums = read_checksums(kept / CHECKSUMS)
        if MARKER not in sums:
            raise ValueError(f"{CHECKSUMS} does not list {MARKER}")
        for name, expected in sums.items():
            shutil.copyfile(kept / name, out_dir / name)
            if (actual := _sha256(out_dir / name)) != expected:
                raise ValueError(f"{name} has sha256 {actual[:16]}, {CHECKSUMS} says {expected[:16]}")
    except (OSError, ValueError) as err:
        for path in out_dir.iterdir():
            path.unlink()
        announce(f"embedded base model: the kept build in {kept} is not used ({err}); building it instead")
        return False
    announce(f"embedded base model: restored from {kept} (sha256 of its {len(sums)} files checked) in "
             f"{duration(time.perf_counter() - start)}")
    return True


def read_checksums(path: Path) -> dict[str, str]:
    """`sha256sum`'s output (one `<sha256>  <file>` a line) as {file: sha256}; a line of another shape is an error."""
    sums = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        digest, _, name = line.partition("  ")
        if len(digest) != 64 or not name or "/" in name:
            raise ValueError(f"{path}:{number}: not a `<sha256>  <file>` line: {line!r:.100}")
        sums[name] = digest
    return sums


def _remove_stale_builds(root: Path) -> None:
    # Young temp dirs may belong to a build running in another process: leave them.
    cutoff = time.time() - STALE_TMP_SECONDS
    for tmp in root.glob(".embedded-*.tmp-*"):
        if tmp.is_dir() and tmp.stat().st_mtime < cutoff:
            shutil.rmtree(tmp, ignore_errors=True)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


if __name__ == "__main__":  # build_pinned's child: python -m pgrpo.model.embedded OUT_DIR OPENINGS
    build_embedded_default(Path(sys.argv[1]), sys.argv[2])
