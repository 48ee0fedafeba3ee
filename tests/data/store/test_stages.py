"""The stages of an on-disk preparation (lightgraph.data.store.stages): resuming after a
killed run, refusing a damaged saved result, the working-set check before a stage, the
per-stage peak memory and the progress bars of the passes over the edges."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest

import lightgraph.data.lightning.partition_store_data_module as psdm
from lightgraph.data import PartitionStoreDataModule
from lightgraph.data.store import stages as stages_module
from lightgraph.data.store.stages import PrepareStages, StageMemoryError
from lightgraph.utilities import progress
from lightgraph.utilities.arrays import edge_chunks
from tests.data.partition.test_out_of_core_prepare import KIB, _store_files, _write_graph


def _module(dataset, cache_dir) -> PartitionStoreDataModule:  # type: ignore[no-untyped-def]
    return PartitionStoreDataModule(
        dataset,
        num_parts=4,
        partitioner="gap",
        hub_fraction=0.05,
        cache_dir=str(cache_dir),
        memory_budget=256 * KIB,
    )


class _Killed(RuntimeError):
    pass


def _count_partitions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = psdm.partition_on_disk

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(psdm, "partition_on_disk", counted)
    return calls


def _kill_hubs(monkeypatch: pytest.MonkeyPatch) -> None:
    def killed(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise _Killed("killed in the hubs stage")

    monkeypatch.setattr(psdm, "select_hubs_on_disk", killed)


@pytest.mark.parametrize("damage", [None, "flip a byte", "truncate"])
def test_a_killed_prepare_resumes_after_its_last_finished_stage(
    tmp_path, monkeypatch, capsys, damage
):
    on_disk, _ = _write_graph(tmp_path / "graph")
    fresh = _module(on_disk, tmp_path / "fresh")
    fresh.prepare_data()
    want = _store_files(fresh.cache_path())

    dm = _module(on_disk, tmp_path / "cache")
    with monkeypatch.context() as m:
        _kill_hubs(m)
        with pytest.raises(_Killed):
            dm.prepare_data()
    saved = tmp_path / "cache" / f".{os.path.basename(dm.cache_path())}.stages"
    assert sorted(os.listdir(saved)) == ["partition.json", "partition.npy"]
    assert not os.path.exists(dm.cache_path())
    if damage == "flip a byte":
        with open(saved / "partition.npy", "r+b") as f:
            f.seek(-1, os.SEEK_END)
            last = f.read(1)
            f.seek(-1, os.SEEK_END)
            f.write(bytes([last[0] ^ 1]))
    elif damage == "truncate":
        os.truncate(saved / "partition.npy", os.path.getsize(saved / "partition.npy") - 8)
    capsys.readouterr()

    calls = _count_partitions(monkeypatch)
    again = _module(on_disk, tmp_path / "cache")
    again.prepare_data()
    err = capsys.readouterr().err
    if damage is None:
        assert calls == [] and "partition: resumed" in err
    else:  # never used: named, and the stage runs again
        assert calls == [1] and "is not used" in err
        assert ("SHA-1" in err) if damage == "flip a byte" else ("bytes" in err)
    assert _store_files(again.cache_path()) == want  # the same store as an uninterrupted run
    assert not saved.exists()  # removed once the store is published


def test_stage_lines_name_the_stage_its_time_and_peak(tmp_path, capsys):
    on_disk, _ = _write_graph(tmp_path / "graph")
    dm = _module(on_disk, tmp_path / "cache")
    dm.prepare_data()
    err = capsys.readouterr().err
    for name in ("validate", "partition", "hubs", "write"):
        assert f"PartitionStoreDataModule: {name} ..." in err
        assert f"PartitionStoreDataModule: {name} done in " in err
    assert "peak resident memory" in err
    import json

    with open(os.path.join(dm.cache_path(), "meta.json")) as f:
        meta = json.load(f)
    assert [s["name"] for s in meta["build_stages"]] == ["validate", "partition", "hubs", "write"]


def test_peak_memory_is_the_stages_own(tmp_path):
    stages = PrepareStages("t", str(tmp_path / "w"), "k", stream=io.StringIO())
    size = 200 << 20
    with stages.stage("big"):
        block = np.ones(size, np.uint8)  # touched: resident
        del block
    with stages.stage("small"):
        pass
    big, small = stages.records
    assert big.peak_rss is not None and small.peak_rss is not None
    if not (big.peak_is_stage and small.peak_is_stage):
        pytest.skip("this kernel does not let a process reset its peak (clear_refs)")
    assert big.peak_rss - small.peak_rss > size * 0.9


def test_a_stage_that_cannot_fit_says_so_before_it_starts(tmp_path, monkeypatch):
    on_disk, _ = _write_graph(tmp_path / "graph")
    calls = _count_partitions(monkeypatch)
    # a limit that leaves 64 KiB beside what the process holds: the 256 KiB budget of
    # the first stage does not fit
    held = stages_module.resident_memory()
    monkeypatch.setattr(stages_module, "resident_memory", lambda: held)
    monkeypatch.setattr(stages_module, "cgroup_memory_limit", lambda: held + 64 * KIB)
    dm = _module(on_disk, tmp_path / "cache")
    with pytest.raises(StageMemoryError) as err:
        dm.prepare_data()
    text = str(err.value)
    assert "stage 'validate' needs at least 262.14 kB (its memory budget" in text
    assert "65.54 kB are left (the cgroup memory limit" in text
    assert "--data.init_args.memory_budget" in text
    assert calls == []  # raised before any stage ran

    # a limit read from the cgroup: what the process holds is subtracted
    monkeypatch.setattr(stages_module, "cgroup_memory_limit", lambda: 100 << 20)
    monkeypatch.setattr(stages_module, "resident_memory", lambda: 90 << 20)
    stages = PrepareStages("t", str(tmp_path / "w"), "k", stream=io.StringIO())
    stages.check_working_set("hubs", 5 << 20, "x")  # fits in the 10 MB left
    with pytest.raises(
        StageMemoryError, match=r"'hubs' needs at least 20.97 MB .* 10.49 MB are left \(the cgroup"
    ):
        stages.check_working_set("hubs", 20 << 20, "x")


def test_passes_over_the_edges_show_a_progress_bar(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(progress, "BAR_MIN_EDGES", 1)
    monkeypatch.setattr(progress, "BAR_DELAY", 0.0)
    out = io.StringIO()
    stages = PrepareStages("t", str(tmp_path / "w"), "k", stream=out)
    edges = np.arange(2000, dtype=np.int64).reshape(2, 1000)
    with stages.stage("count"):
        seen = sum(len(src) for _, src, _ in edge_chunks(edges, 100))
        seen += sum(len(src) for _, src, _ in edge_chunks(edges, 300))
    assert seen == 2000
    text = out.getvalue()
    assert "count: pass 1" in text and "count: pass 2" in text
    assert "1.00k/1.00k" in text  # the bar reached its total
    capsys.readouterr()
    assert sum(1 for _ in edge_chunks(edges, 100)) == 10  # outside a stage: no bar anywhere
    assert capsys.readouterr() == ("", "")
