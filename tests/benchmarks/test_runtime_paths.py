"""benchmarks/runtime_paths.py runs each of its three paths (timing shortened)."""
from pathlib import Path


def test_each_path_runs_and_is_reported(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "benchmarks"))
    import runtime_paths

    ran = []

    def once(step, iters=0, rounds=0):
        step()
        ran.append(step.__name__)
        return 1.0
    monkeypatch.setattr(runtime_paths, "_median_us", once)
    line = runtime_paths.main("label")
    assert ran == ["alias_step", "absent_step", "dynamic_step"]
    assert line == "label: alias epilogue 1.0 us; absent tangent 1.0 us; dynamic step 1.0 us"
