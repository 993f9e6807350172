"""``read_json_object`` / ``read_bounded_file``: every way a named JSON file can be wrong is one
line naming the file, in the caller's error class; nothing blocks and nothing past the cap is read.
The three commands that read a config.json (glm-config, indexcache, cpkv-serve) run their own
hostile cases through it end to end."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cpkv_cli import InputError, read_bounded_file, read_json_object

FIX = "give the model's config.json"


class OwnError(ValueError):
    """A package's own error class (glm-config raises its ConfigFileError)."""


def _file(tmp_path: Path, data: bytes | str) -> Path:
    path = tmp_path / "config.json"
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


CASES = {
    "not_json": (b"{oops", r"is not valid JSON \(Expecting property name"),
    "empty": (b"", r"is not valid JSON \(Expecting value"),
    "not_utf8": (b'{"a": "\xff"}', r"is not UTF-8 text \(invalid start byte at byte 7\)"),
    "list": (b"[1, 2]", "must hold a JSON object; got list"),
    "deep": (b"[" * 100_000 + b"]" * 100_000, "nests arrays or objects too deeply; not a config"),
    "huge_int": (b'{"n": ' + b"9" * 5000 + b"}", "holds an integer of over 4300 digits"),
    "over_cap": (b'{"a": "' + b"x" * 64 + b'"}', r"is 73 bytes, over the 64 a config.json may"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_bad_file_is_one_line_naming_it(tmp_path, name):
    data, message = CASES[name]
    path = _file(tmp_path, data)
    with pytest.raises(InputError, match=message) as exc:
        read_json_object(path, fix=FIX, max_bytes=64 if name == "over_cap" else 2**20)
    assert str(exc.value).startswith(str(path)) and "\n" not in str(exc.value)


def test_a_good_file_gives_its_text_and_object(tmp_path):
    path = _file(tmp_path, '{"index_topk": 2048}\n')
    assert read_json_object(path, fix=FIX) == ('{"index_topk": 2048}\n', {"index_topk": 2048})
    assert read_bounded_file(path, fix=FIX) == b'{"index_topk": 2048}\n'


def test_missing_directory_fifo_and_device_are_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "fifo")  # a blocking open would wait for a writer forever
    (tmp_path / "dir").mkdir()
    for path, message in [
        (tmp_path / "nope", f"{tmp_path}/nope does not exist; {FIX}"),
        (tmp_path / "dir", f"{tmp_path}/dir is not a regular file; {FIX}"),
        (tmp_path / "fifo", f"{tmp_path}/fifo is not a regular file; {FIX}"),
        (Path("/dev/zero"), f"/dev/zero is not a regular file; {FIX}"),
    ]:
        with pytest.raises(InputError) as exc:
            read_json_object(path, fix=FIX)
        assert str(exc.value) == message


def test_a_file_longer_than_its_size_says_is_cut_at_the_cap():
    """``/proc`` files are regular with st_size 0: the size check passes, the read must stop."""
    with pytest.raises(InputError, match=r"/proc/self/status grew past 100 bytes"):
        read_bounded_file(Path("/proc/self/status"), fix=FIX, max_bytes=100)


def test_the_callers_error_class_and_words(tmp_path):
    path = _file(tmp_path, b"[]")
    with pytest.raises(OwnError, match="must hold a JSON object"):
        read_json_object(path, fix=FIX, error=OwnError)
    with pytest.raises(OwnError, match=r"over the 1 a tokenizer\.json may have .*; give it"):
        read_json_object(path, fix="give it", what="a tokenizer.json", max_bytes=1, error=OwnError)


def test_an_unprintable_name_is_shown_as_its_repr(tmp_path):
    path = tmp_path / "a\nb"
    with pytest.raises(InputError) as exc:
        read_json_object(path, fix=FIX)
    assert "\n" not in str(exc.value) and "does not exist" in str(exc.value)


def test_a_name_with_a_nul_byte_is_one_line(tmp_path):
    with pytest.raises(InputError, match=r"has a NUL byte in its name; give the model's"):
        read_json_object(Path(f"{tmp_path}/a\0b"), fix=FIX)
