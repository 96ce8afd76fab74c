"""A resumable bench refuses to pair runs of two builds of a model (bench.harness.models)."""

from bench.harness.models import build_of, mixed_build, unmatched_before

BUILD = {"model": "lab-spell", "weights": "aaaa", "torch": "2.13.0", "transformers": "5.25.0"}


def test_other_weights_are_refused_other_packages_warned():
    assert mixed_build([{"arm": "A"}], BUILD) == (None, None)  # runs from before builds were recorded
    assert mixed_build([{"build": BUILD}], BUILD) == (None, None)
    refusal, warning = mixed_build([{"build": {**BUILD, "weights": "bbbb"}}], BUILD)
    assert "weights bbbb" in refusal and "weights aaaa" in refusal and warning is None
    assert mixed_build([{"build": {**BUILD, "model": "smollm2-135m", "weights": "cccc"}}], BUILD) == (None, None)
    refusal, warning = mixed_build([{"build": {**BUILD, "transformers": "5.24.0"}}], BUILD)
    assert refusal is None and "transformers 5.24.0" in warning


def test_runs_of_one_seed_that_began_elsewhere_are_named():
    runs = [{"arm": "A", "nodes": 2, "seed": 0, "rounds": 15, "before": [0.2, 0.1]},
            {"arm": "B", "nodes": 2, "seed": 0, "rounds": 15, "before": [0.2, 0.1]},
            {"arm": "A", "nodes": 2, "seed": 1, "rounds": 15, "before": [0.3, 0.1]},
            {"arm": "E", "nodes": 2, "seed": 1, "rounds": 15, "before": [0.5, 0.5]}]  # specialties: its own evals
    assert unmatched_before(runs) == []
    runs.append({"arm": "RB", "nodes": 2, "seed": 0, "rounds": 15, "before": [0.25, 0.1]})
    (line,) = unmatched_before(runs)
    assert line.startswith("seed 0: RB began from [0.25, 0.1], A from [0.2, 0.1]")


def test_build_of_hashes_the_weights(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"one")
    first = build_of(str(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(b"two")
    build_of.cache_clear()
    second = build_of(str(tmp_path))
    assert first["weights"] != second["weights"] and first["transformers"] == second["transformers"]
    assert len(first["weights"]) == 16
