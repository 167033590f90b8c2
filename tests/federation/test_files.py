"""Atomic writes of one file and of many files at once."""
import os

import pytest

from fedforest.federation.files import atomic_write, atomic_write_many


def _writer(data):
    return lambda fh: fh.write(data)


def test_many_files_land_complete_and_leave_no_temporaries(tmp_path):
    items = [(str(tmp_path / sub / f"f{i}.bin"), _writer(bytes([i]) * (i + 1)))
             for sub in ("a", "b") for i in range(5)]
    atomic_write_many(items)
    for path, _ in items:
        i = int(os.path.basename(path)[1])
        assert open(path, "rb").read() == bytes([i]) * (i + 1)
    assert sorted(os.listdir(tmp_path / "a")) == [f"f{i}.bin" for i in range(5)]
    assert sorted(os.listdir(tmp_path / "b")) == [f"f{i}.bin" for i in range(5)]


def test_a_failing_writer_leaves_no_file_of_the_batch(tmp_path):
    (tmp_path / "f0.bin").write_bytes(b"old")

    def boom(fh):
        fh.write(b"half")
        raise RuntimeError("disk full")

    items = [(str(tmp_path / "f0.bin"), _writer(b"new")), (str(tmp_path / "f1.bin"), boom),
             (str(tmp_path / "f2.bin"), _writer(b"x"))]
    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write_many(items)
    assert sorted(os.listdir(tmp_path)) == ["f0.bin"]        # no temporaries, no new files
    assert (tmp_path / "f0.bin").read_bytes() == b"old"      # the old file untouched


def test_many_matches_one_by_one(tmp_path):
    atomic_write(str(tmp_path / "one" / "x.bin"), _writer(b"abc"))
    atomic_write_many([(str(tmp_path / "many" / "x.bin"), _writer(b"abc"))])
    atomic_write_many([])
    assert (tmp_path / "one" / "x.bin").read_bytes() == (tmp_path / "many" / "x.bin").read_bytes()
