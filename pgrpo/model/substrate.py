"""The CPU a base was built on, as far as its bytes can depend on it, and whether it computes in bf16.

Training a primed base's update (pgrpo.model.priming) runs the kernels torch and MKL choose for the CPU in hand, so its
last bits depend on the CPU's kind: AMD EPYC machines trained the version-3 primed SmolLM2 to one set of bytes, an
Intel Xeon with AVX-512 and AMX to another (docs/real-model.md). The embedded base pins its kernels instead
(embedded.py's PINNED_KERNELS); on the primed base's 135 M parameters MKL's pinned path made a priming step 4x
slower (10.5 s against 43.5 s on 2 cores), so the priming names the machine that trained it, and the update is
published so that other machines merge it (the same bytes on any CPU) rather than train it."""

import platform
from pathlib import Path

import torch

CPUINFO = Path("/proc/cpuinfo")
BF16_FLAGS = {"avx512_bf16", "amx_bf16"}  # /proc/cpuinfo's names for bf16 matrix instructions


def cpu_kind() -> str:
    """The CPU's model name and the kernels torch dispatches on it, e.g. 'AMD EPYC 7B13 (torch AVX2)'."""
    name = _cpuinfo_field("model name") or platform.processor() or platform.machine()
    return f"{name} (torch {torch.backends.cpu.get_cpu_capability()})"


def machine() -> str:
    """What runs this process: the CPU's kind, and the GPU where CUDA sees one. A run's last bits and its times
    depend on both, so a sweep's cell records it (pgrpo.commands.sweep) rather than a session's notes."""
    gpu = f" + {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    return cpu_kind() + gpu


def has_bf16_units() -> bool | None:
    """Whether the CPU multiplies bf16 matrices in hardware (AVX512-BF16 or AMX); None where it cannot be told.
    Without them torch's bf16 matmuls take a slow path: 53x float32's time on a 2-core AMD EPYC with AVX2 (a
    (512, 576) @ (576, 1536) product, 769 ms against 14.6 ms), where AVX512-BF16 made SmolLM2's step 1.6x
    faster than float32 (docs/real-model.md)."""
    flags = _cpuinfo_field("flags")
    return None if flags is None else bool(set(flags.split()) & BF16_FLAGS)


def _cpuinfo_field(name: str) -> str | None:
    try:
        lines = CPUINFO.read_text().splitlines()
    except OSError:  # not Linux
        return None
    return next((line.split(":", 1)[1].strip() for line in lines if line.split(":", 1)[0].strip() == name), None)
