"""pgrpo.model.substrate: the CPU a primed base was built on, named so that another CPU's bytes are expected, not found."""

import torch

import pgrpo.model.substrate as substrate
from pgrpo.model.substrate import cpu_kind


def test_the_cpu_kind_names_the_model_and_the_kernels_torch_dispatches_on_it(tmp_path, monkeypatch):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\nflags\t: avx2\n")
    monkeypatch.setattr(substrate, "CPUINFO", info)
    assert cpu_kind() == f"AMD EPYC 7B13 (torch {torch.backends.cpu.get_cpu_capability()})"


def test_a_machine_without_proc_cpuinfo_is_named_by_what_python_knows(tmp_path, monkeypatch):
    monkeypatch.setattr(substrate, "CPUINFO", tmp_path / "missing")
    monkeypatch.setattr(substrate.platform, "processor", lambda: "")
    monkeypatch.setattr(substrate.platform, "machine", lambda: "arm64")
    assert cpu_kind().startswith("arm64 (torch ")


def test_the_machine_names_the_cpu_and_the_gpu_where_cuda_sees_one(monkeypatch):
    monkeypatch.setattr(substrate, "cpu_kind", lambda: "AMD EPYC (torch AVX512)")
    monkeypatch.setattr(substrate.torch.cuda, "is_available", lambda: False)
    assert substrate.machine() == "AMD EPYC (torch AVX512)"
    monkeypatch.setattr(substrate.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(substrate.torch.cuda, "get_device_name", lambda: "NVIDIA H100 80GB HBM3")
    assert substrate.machine() == "AMD EPYC (torch AVX512) + NVIDIA H100 80GB HBM3"
