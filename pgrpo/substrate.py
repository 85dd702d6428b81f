"""The CPU a base was built on, as far as its bytes can depend on it.

Training a primed base's update (pgrpo.priming) runs the kernels torch and MKL choose for the CPU in hand, so its
last bits depend on the CPU's kind: AMD EPYC machines trained the version-3 primed SmolLM2 to one set of bytes, an
Intel Xeon with AVX-512 and AMX to another (docs/real-model.md). The embedded base pins its kernels instead
(embedded.py's PINNED_KERNELS); on the primed base's 135 M parameters MKL's pinned path made a priming step 4x
slower (10.5 s against 43.5 s on 2 cores), so the priming names the machine that trained it, and the update is
published so that other machines merge it (the same bytes on any CPU) rather than train it."""

import platform
from pathlib import Path

import torch

CPUINFO = Path("/proc/cpuinfo")


def cpu_kind() -> str:
    """The CPU's model name and the kernels torch dispatches on it, e.g. 'AMD EPYC 7B13 (torch AVX2)'."""
    name = _model_name() or platform.processor() or platform.machine()
    return f"{name} (torch {torch.backends.cpu.get_cpu_capability()})"


def _model_name() -> str | None:
    try:
        lines = CPUINFO.read_text().splitlines()
    except OSError:  # not Linux
        return None
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), None)
