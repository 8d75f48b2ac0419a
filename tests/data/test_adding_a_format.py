"""docs/internals.md "Adding a data format", kept true: the files and names its steps give exist, every registered
format's module has what the steps say, and a throwaway format written as the steps say (one module, one
registry line) reads records, refuses a bad row with its reason and a misspelt data.columns entry."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from mmtune.config.schema import DataConfig
from mmtune.data.formats import FORMATS, check_format, format_module, known_formats
from mmtune.data.sources import load_records
from mmtune.errors import ConfigError

from .conftest import jsonl

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "internals.md"


def _section() -> str:
    text = DOC.read_text()
    start = text.index("### Adding a data format")
    return text[start:text.index("\n## ", start)]


def test_the_steps_name_files_and_names_that_exist():
    sec = _section()
    for path in ("src/mmtune/data/row_formats/", "tests/data/test_adding_a_format.py"):
        assert path in sec, path
        assert (ROOT / path).exists(), path
    for name in ("formats.FORMATS", "FIELDS", "to_records(row, fmt, columns, where,", "row_formats/qa.py", "load_note"):
        assert name in sec, name
    assert (ROOT / "src/mmtune/data/row_formats/qa.py").is_file()


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_registered_format_is_one_module_with_fields_and_a_reader(fmt):
    mod = format_module(fmt)
    assert FORMATS[fmt] == f".row_formats.{fmt}" and mod.__name__ == f"mmtune.data.row_formats.{fmt}"
    assert "id" in mod.FIELDS and all(isinstance(v, tuple) and v for v in mod.FIELDS.values())
    assert callable(mod.to_records)


THROWAWAY = '''
    """A throwaway data format for tests/data/test_adding_a_format.py: prompt / completion rows with one picture."""
    from mmtune.data.formats import BadRecord, _get, _media_part, _qa_record

    FIELDS = {"prompt": ("prompt",), "completion": ("completion", "answer"), "picture": ("picture",), "id": ("id",)}


    def to_records(row, fmt, columns, where, index, rid, resolve, templates=None):
        media = [_media_part("image", _get(row, fmt, "picture", columns, where), resolve, where)]
        answer = _get(row, fmt, "completion", columns, where)
        if not isinstance(answer, str) or not answer.strip():
            raise BadRecord("no answer", "the completion is empty", where, "give every row a completion")
        return [_qa_record(rid, where, media, _get(row, fmt, "prompt", columns, where), answer, [answer])]
'''


@pytest.fixture
def throwaway(tmp_path, monkeypatch):
    """Step 1: the module (written outside the source tree, imported by its name as the registry imports
    `.row_formats.<name>`); step 2: its registry line. Both undone afterwards."""
    mod_dir = tmp_path / "mods"
    mod_dir.mkdir()
    (mod_dir / "throwaway_format.py").write_text(textwrap.dedent(THROWAWAY))
    monkeypatch.syspath_prepend(str(mod_dir))
    monkeypatch.setitem(FORMATS, "throwaway", "throwaway_format")
    monkeypatch.setattr("mmtune.data.formats._MODULES", {})  # the modules loaded so far, this one's forgotten after
    yield "throwaway"
    sys.modules.pop("throwaway_format", None)


def test_a_format_added_as_the_steps_say_reads_records(throwaway, imgs):
    assert throwaway in known_formats()
    f = jsonl(imgs / "train.jsonl", [
        {"id": "q1", "prompt": "What colour?", "completion": "red", "picture": "a.png"},
        {"prompt": "And this one?", "answer": "blue", "picture": "b.png"},  # the second name of `completion`
        {"prompt": "Empty?", "completion": " ", "picture": "a.png"},
    ])
    rs = load_records(str(f), DataConfig(format=throwaway, on_bad_record="skip"))
    assert [r.id for r in rs] == ["q1", "1"]
    assert rs[0].messages[0]["content"][0] == {"type": "image", "path": str(imgs / "a.png")}
    assert [r.answer_text() for r in rs] == ["red", "blue"]
    assert dict(rs.skipped) == {"no answer": 1} and rs.problems[0][0] == f"{f}:3"


def test_a_format_added_as_the_steps_say_checks_its_columns(throwaway):
    check_format(throwaway, {"prompt": "question"})
    with pytest.raises(ConfigError, match="did you mean 'picture'"):
        check_format(throwaway, {"pictures": "img"})
