"""A pause armed for one pipeline holds that pipeline's batches only, counted apart from any other's."""

from __future__ import annotations

import threading

from tailfill import failpoints


def test_a_pause_armed_for_one_pipeline_lets_its_first_arrivals_pass_then_holds_it_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILFILL_FAULT_DIR", str(tmp_path))
    monkeypatch.setenv("TAILFILL_FAULT_SKIP", "1")
    monkeypatch.delenv("TAILFILL_FAULT_PAUSE", raising=False)
    (tmp_path / "pause-before-commit@a").touch()
    failpoints.pause("before-commit", scope="b")  # not armed for b: passes, and counts nothing
    failpoints.pause("before-commit")  # nor for every pipeline
    failpoints.pause("before-commit", scope="a")  # a's first arrival passes (TAILFILL_FAULT_SKIP)
    assert not (tmp_path / "before-commit@a").exists()
    held = threading.Thread(target=failpoints.pause, args=("before-commit", "a"))
    held.start()
    held.join(1.0)
    assert held.is_alive() and (tmp_path / "before-commit@a").exists()  # the second is held, and says so
    (tmp_path / "before-commit@a.release").touch()
    held.join(10)
    assert not held.is_alive()
    assert (tmp_path / "before-commit@a.arrivals").read_text().count("\n") == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["before-commit@a", "before-commit@a.arrivals",
                                                           "before-commit@a.release", "pause-before-commit@a"]
