from pathlib import Path

from pgrpo.interventions import Erase, GtScreen, ProbePenalty, Vanilla
from pgrpo.records.summary import summary


def test_a_run_without_teacher_rows_summarises_the_student_alone():
    scalars = {"hack/student": [(0, 0.0), (1, 0.5)], "solve/student": [(0, 0.25), (1, 0.5)],
               "hackward_share/student": [(1, 0.3)], "hackward_share/student_null": [(1, 0.15)],
               "hackward_share/teacher": [(1, 0.0)], "hackward_share/teacher_null": [(1, 0.0)]}
    text = summary(scalars, Path("logs/honest/version_0"), Vanilla(), 2, 4.0)
    assert "student 0.300 (null 0.150)" in text and "teacher" not in text


def test_the_summary_shows_entropy_and_where_the_knobs_sit_along_v():
    # a gradient edit that damages the model, or a biased one, must be visible at the end of the fit itself
    scalars = {"hack/student": [(0, 0.0), (1, 0.5)], "entropy": [(0, 0.07), (1, 0.33)],
               "adapter/delta_s_norm": [(0, 3.0), (1, 30.0)], "adapter/delta_s_along_v": [(0, 0.5), (1, 12.0)]}
    lines = summary(scalars, Path("logs/erase/version_0"), Erase(), 2, 4.0, window=1).splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in lines if line.startswith("  ") and len(line.split()) == 3}
    assert rows["entropy"] == ["0.070", "0.330"]
    assert rows["delta_s_norm"] == ["3.000", "30.000"] and rows["delta_s_along_v"] == ["0.500", "12.000"]


def test_an_oracle_skylines_summary_says_so():
    text = summary({"hack/student": [(0, 0.0)]}, Path("logs/gt_screen/version_0"), GtScreen(), 1, 1.0)
    assert text.startswith("pgrpo: 1 steps of the 'gt_screen' arm (an oracle skyline")


def test_a_fit_records_its_bases_files_digest_beside_its_curves(tmp_path):
    import json

    from pgrpo.cli import main
    from pgrpo.model.embedded import cached_build_digest
    from pgrpo.model.load import model_id
    from test_cli import fast

    main(fast("vanilla", tmp_path, 1))
    base = json.loads((tmp_path / "vanilla" / "version_0" / "base.json").read_text())
    assert base == {"model": "embedded", "model_id": model_id("embedded"),
                    "digest": cached_build_digest(model_id("embedded"))}


def test_a_fit_records_the_v_it_trained_with_the_placebos_when_it_ran_one(tmp_path):
    import json

    import torch

    from pgrpo.cli import main
    from pgrpo.directions.extraction import HackBasis
    from test_cli import fast

    main(fast("random_v", tmp_path, 2))
    run = tmp_path / "random_v" / "version_0"
    record = json.loads((run / "basis.json").read_text())
    held = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["pgrpo_basis"]
    trained_with = HackBasis(held["V"], held["sigma"], held["meta"])
    assert record["digest"] == trained_with.digest() and record["k_total"] == trained_with.k_total
    assert record["meta"]["control"] == "random" and record["meta"] == held["meta"]
    from pgrpo.records.cache import cache_dir

    cached = HackBasis.load(cache_dir() / "bases" / f"{record['meta']['cache_key']}.safetensors")
    assert record["meta"]["digest_as_extracted"] == cached.digest() != record["digest"]  # the V it was drawn like


def test_the_arm_to_compare_with_is_this_runs_own_config_with_the_other_intervention():
    run = Path("logs/smollm2_erase/version_0")
    text = summary({"hack/student": [(0, 0.0)]}, run, Erase(), 1, 1.0, embedded=False)
    assert (f"pgrpo fit --config {run / 'config.yaml'} --model.intervention pgrpo.interventions.Vanilla "
            f"--trainer.logger.init_args.name smollm2_erase_vanilla") in text
    assert "configs/vanilla.yaml" not in text and "pgrpo sweep" not in text  # the shipped arms are the embedded model's
    text = summary({"hack/student": [(0, 0.0)]}, Path("logs/vanilla/version_0"), Vanilla(), 1, 1.0)
    assert "--model.intervention pgrpo.interventions.Erase" in text and "pgrpo sweep" in text


def test_a_placebos_summary_names_it_a_placebo_and_offers_its_method_to_compare_with():
    run = Path("logs/random_v/version_0")
    text = summary({"hack/student": [(0, 0.0)]}, run, Erase(v="random"), 1, 1.0)
    assert text.startswith("pgrpo: 1 steps of the 'erase placebo (v: random)' arm")
    assert (f"pgrpo fit --config {run / 'config.yaml'} --model.intervention.init_args.v real "
            f"--trainer.logger.init_args.name random_v_real") in text
    text = summary({"hack/student": [(0, 0.0)]}, run, ProbePenalty(detector="random"), 1, 1.0)
    assert "'probe_penalty placebo (detector: random)' arm" in text


def test_a_fit_records_the_code_it_ran_and_a_resumed_fit_the_code_of_each_part(tmp_path, monkeypatch, capsys):
    import json

    import pgrpo.records.summary as summary_mod
    from pgrpo.cli import main
    from test_cli import fast

    first = {"commit": "a" * 40, "clean": True, "changed": []}
    monkeypatch.setattr(summary_mod, "code_record", lambda: first)
    main(fast("vanilla", tmp_path, 1))
    run = tmp_path / "vanilla" / "version_0"
    assert json.loads((run / "code.json").read_text()) == [first]
    assert "\n  code: commit aaaaaaaaaaaa (clean)\n" in capsys.readouterr().out
    second = {"commit": "b" * 40, "clean": False, "changed": [" M pgrpo/step/loss.py"]}  # resumed from an edited tree
    monkeypatch.setattr(summary_mod, "code_record", lambda: second)
    main(fast("vanilla", tmp_path, 2, "--ckpt_path=last"))
    assert json.loads((run / "code.json").read_text()) == [first, second]
    assert (f"\n  code: commit aaaaaaaaaaaa (clean), then commit bbbbbbbbbbbb (dirty: 1 uncommitted change) (the "
            f"changes: {run / 'code.json'})\n") in capsys.readouterr().out


def test_a_fit_records_the_digest_of_the_teacher_pools_rows_it_trained_with(tmp_path):
    """A cached pool is an artefact the cell trained with: its rows' digest, which a rewrite of its gzip files
    (their headers hold the time they were written) does not change."""
    import gzip
    import json

    from pgrpo.cli import main
    from pgrpo.env.pool import TeacherPool
    from test_cli import fast

    main(fast("vanilla", tmp_path, 1))
    record = json.loads((tmp_path / "vanilla" / "version_0" / "teacher_pool.json").read_text())
    pool = Path(record["path"])
    assert record["digest"] == TeacherPool.load(pool).digest()
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "pool.json").write_text((pool / "pool.json").read_text())
    for file in pool.glob("*.jsonl.gz"):
        with gzip.GzipFile(copy / file.name, "wb", mtime=12345) as out:
            out.write(gzip.decompress(file.read_bytes()))
    assert TeacherPool.load(copy).digest() == record["digest"]
