"""The key index: what a state table holds per key, rebuilt from segments, asked for a batch of keys at once."""

import numpy as np
import pyarrow as pa

from tailfill.lake.key_index import Applied, KeyIndex, Version, segment


def _seg(*entries: tuple[str, Applied]) -> pa.Table:
    return segment(list(entries))


def live(v: int, part: int, file: str, pos: int) -> Applied:
    return Applied(Version(v, part, v), file, pos)


def gone(v: int, part: int) -> Applied:
    return Applied(Version(v, part, v), None, -1)


def test_a_later_row_of_a_key_replaces_an_earlier_in_a_segment_and_across_segments():
    index = KeyIndex()
    index.add(_seg(("a", live(1, 0, "f1", 0)), ("b", live(2, 1, "f1", 1)), ("a", live(3, 0, "f1", 2))), "s1")
    index.add(_seg(("b", gone(7, 1)), ("c", live(8, 2, "f2", 0))), "s2")
    assert index.get("a") == live(3, 0, "f1", 2)
    assert index.get("b") == gone(7, 1)
    assert index.get("c") == live(8, 2, "f2", 0)
    assert index.get("zz") is None
    assert index.live() == 2 and len(index) == 3
    assert dict(index.items()) == {"a": live(3, 0, "f1", 2), "b": gone(7, 1), "c": live(8, 2, "f2", 0)}
    assert index.segments == ["s1", "s2"]


def test_a_lookup_answers_for_a_batch_of_keys_known_or_not():
    index = KeyIndex()
    index.add(_seg(("a", live(5, 3, "f1", 4)), ("b", gone(6, 1))), "s1")
    found = index.lookup(["b", "new", "a"])
    assert found.known.tolist() == [True, False, True]
    assert found.version[[0, 2]].tolist() == [6, 5]
    assert found.partition[[0, 2]].tolist() == [1, 3]
    assert found.file[0] == -1 and found.pos[2] == 4
    assert index.file_uri(found.file[[2]]).to_pylist() == ["f1"]


def test_the_index_grows_past_its_first_arrays_without_losing_a_key():
    index = KeyIndex()
    for s in range(5):
        index.add(_seg(*[(f"k{i}", live(s, 0, f"f{s}", i)) for i in range(s * 900, s * 900 + 1000)]), f"s{s}")
    assert len(index) == 4 * 900 + 1000
    assert index.get("k0") == live(0, 0, "f0", 0)
    assert index.get("k950") == live(1, 0, "f1", 950)  # written by segment 0, then by segment 1
    assert index.get("k4599") == live(4, 0, "f4", 4599)
    assert np.array_equal(index.lookup(["k1899", "k1900"]).version, [2, 2])


def test_following_a_rebuilt_segment_list_reloads_the_index(tmp_path):
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    fs = pafs.LocalFileSystem()
    for name, seg in (("s1", _seg(("a", live(1, 0, "f1", 0)))), ("s2", _seg(("b", live(2, 0, "f1", 1)))),
                      ("base", _seg(("a", live(1, 0, "f9", 0))))):
        pq.write_table(seg, tmp_path / name)
    index = KeyIndex()
    index.follow(fs, [str(tmp_path / "s1"), str(tmp_path / "s2")])
    assert index.live() == 2
    index.follow(fs, [str(tmp_path / "base")])  # compaction replaced the list: only what the base holds
    assert dict(index.items()) == {"a": live(1, 0, "f9", 0)}
