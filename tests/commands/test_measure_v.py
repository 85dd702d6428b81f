"""`pgrpo measure-v` end to end on the embedded default, at the small sizes of the other command tests."""

import json

from pgrpo.cli import main

SMALL = "[--model.generation.max_new_tokens=24, --data.group_size=4, --data.prompts_per_step=2]"


def test_measure_v_runs_on_the_embedded_default_and_writes_its_figures_beside_their_nulls(tmp_path, capsys):
    main(["measure-v", "--rollouts", "12", "--null_draws", "2", "--fit_args", SMALL, "--arms", "[honest, vanilla]",
          "--out", str(tmp_path)])
    result = json.loads((tmp_path / "measure-v.json").read_text())
    assert result["model"] == "embedded" and result["basis"]["k_total"] > 0
    hack, clean = result["pairs"]["hack"], result["pairs"]["clean"]
    assert hack["norm"] > 0 and clean["norm"] > 0
    assert 0 < hack["captured_null"] < 1 and 0 <= hack["captured"] <= 1
    rollouts = result["rollouts"]
    assert rollouts["n"] >= 12  # whole groups
    text = rollouts["text"]
    assert text["n_exploited"] + text["n_clean"] == rollouts["n"]
    assert rollouts["step"]["n_exploited"] + rollouts["step"]["n_clean"] == rollouts["live"]
    # the preset's kept cells: results/confirmatory-2's honest and vanilla, five seeds each, over 300 steps
    arms = result["kept"]["arms"]
    assert [a["arm"] for a in arms] == ["honest", "vanilla"] and all(len(a["seeds"]) == 5 for a in arms)
    assert arms[0]["windows"][-1][1] == 299 and all(0 < s < 1 for a in arms for s in a["share"])
    printed = capsys.readouterr().out
    assert "⟨V, δS⟩ < 0 is hack-ward" in printed
    assert sum(line.startswith("|---") for line in printed.splitlines()) == 3  # the three tables
    assert (tmp_path / "measure-v.md").read_text() in printed
