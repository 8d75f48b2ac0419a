"""Each named kind of bad user data (tests/data/fuzz_kinds.py) ends as it must through load, `data inspect`'s
scan, training's start-up check and the encoder: kept, counted under its reason, or one error naming the
file -- and the counts add up (records in = kept + skipped by reason), with no raw exception under either
data.on_bad_record policy. One test per kind, so a regression names the kind.

    PYTHONPATH=src:. python -m tests.data.fuzz_kinds      # every kind's outcome, printed
"""

from __future__ import annotations

import pytest

from .fuzz_kinds import FILE, OK, kinds, make_envs, outcome, verdict


@pytest.fixture(scope="module")
def named(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kinds")
    ks = kinds(folder / "kinds")
    return make_envs(folder / "envs"), {k.name: k for k in ks}, folder / "kinds"


def _names() -> list[str]:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        return [k.name for k in kinds(Path(d))]


NAMES = _names()


def test_the_kinds_cover_what_users_data_holds():
    """Every family the fuzzer is asked to cover has kinds, and the kinds include both outcomes: kept and
    counted (a corpus of refusals only would prove nothing about silent loss)."""
    families = ("messages_", "content_", "role_", "part_", "image_url", "image_", "sharegpt_", "alpaca_", "query_",
                "response_", "chartqa_", "audio_", "video_", "answer_", "duplicate_ids", "multi_qa", "utf16",
                "array_in", "trailing_comma", "half_written", "crlf", "bom", ".csv", ".parquet")
    assert all(any(f in n for n in NAMES) for f in families), [f for f in families if not any(f in n for n in NAMES)]
    assert len(NAMES) >= 100 and len(set(NAMES)) == len(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_kind_ends_as_it_must(named, name):
    envs, ks, folder = named
    k = ks[name]
    got = outcome(envs, k, folder)
    assert verdict(k, got) == "", f"{name} ({k.file}, expected {k.expect}): {verdict(k, got)}"
    if k.expect not in (OK, FILE):  # a bad record says where it is
        assert got["problems"] and all(k.file in where for where, _ in got["problems"]), got["problems"]
