"""A video's own audio track (a video part with `use_audio`, Omni families): the one forward flag it needs.

The processor interleaves such a video's frames and audio frames by time in one block
(`<|vision_start|><|audio_start|> ... <|audio_end|><|vision_end|>`); the model's M-RoPE positions
(`get_rope_index`, Qwen2.5-Omni and Qwen3-Omni, transformers 5.24) place that block on the shared time axis
only when the forward is given `use_audio_in_video=True`, one flag for the whole forward. Without it the block
is positioned as a plain audio clip followed by text positions. What the flag does to other records (read
from both families' `get_rope_index`): it changes which blocks are counted, `video_nums` = blocks opened by
vision_start + audio_start instead of vision_start + video_pad, and the number of media blocks walked
(images + audio instead of images + videos + audio). So
- a record without a video is positioned the same either way (no block of either kind: same counts);
- a record with a plain video (no `use_audio`) needs the flag off: with it on, its video is never walked
  and gets text positions;
- a record with both kinds of video cannot be positioned right by either flag: the encoder refuses it.
A micro-batch is therefore exact with the flag on when none of its records holds a plain video, and with
it off when none holds an audio-carrying one; one holding both kinds is refused by the collator, and a run
whose data could draw both into one micro-batch is refused before training (`check_records`; the doctor's
MM033 says the same), while `mmtune serve` batches waiting requests of one kind only (`video_kind`).
tests/data/test_audio_in_video.py proves each case against the model called directly.
"""

from __future__ import annotations

from .formats import BadRecord

FLAG = "use_audio_in_video"  # the model's forward kwarg; also the per-record encoding key the collator reads


def video_kinds(parts) -> tuple[int, int]:
    """(videos fed with their audio track, plain videos) among a record's media parts."""
    av = sum(1 for p in parts if p["type"] == "video" and p.get("use_audio"))
    return av, sum(1 for p in parts if p["type"] == "video") - av


def check_record(record) -> None:
    """Refuse a record holding both kinds of video: no value of the one flag positions both right."""
    av, plain = video_kinds(record.media_parts())
    if av and plain:
        raise BadRecord("unsupported modality", f"record has {av} video(s) with their audio track (use_audio) and "
                        f"{plain} without: the model positions a forward's videos one way only "
                        "(use_audio_in_video)", record.where(),
                        "give every video of the record use_audio, or none, or split it into two records")


def mark(encoding: dict, record) -> dict:
    """`encoding` with the per-record FLAG key when the record feeds a video's audio track."""
    if video_kinds(record.media_parts())[0]:
        import torch

        encoding[FLAG] = torch.tensor(True)  # a tensor, like every other value of an encoding (caches, workers)
    return encoding


def video_kind(encoding: dict) -> str:
    """An encoding's kind for batching: "audio" (flagged), "plain" (a video without its track), "" (no video)."""
    return "audio" if FLAG in encoding else "plain" if "video_grid_thw" in encoding else ""


def batch_flag(items: list[dict]) -> bool:
    """Whether the micro-batch of encodings `items` needs `use_audio_in_video=True` (pops the per-record key).
    A batch mixing audio-carrying videos and plain videos has no right flag: a DataError, never a silent guess."""
    plain = sum(1 for it in items if video_kind(it) == "plain")
    on = sum(bool(it.pop(FLAG)) for it in items if FLAG in it)
    if not on:
        return False
    if plain:
        from ..errors import DataError

        raise DataError(f"a micro-batch holds {on} record(s) whose video carries its audio track (use_audio) and "
                        f"{plain} with a plain video; the model takes one use_audio_in_video flag per forward, "
                        "right for one kind only", where="train.micro_batch_size",
                        fix="train.micro_batch_size=1 (eval.batch_size=1), or give all videos use_audio or none, "
                            "or train the two kinds in separate stages")
    return True


def count_kinds(records) -> dict[str, tuple[int, str]]:
    """Records by the one kind of video they hold ("audio": fed with its track, "plain"): (count, first record).
    Records without video, and records with both kinds (refused one by one by `check_record`), are not counted."""
    out: dict[str, tuple[int, str]] = {}
    for r in records:
        add_kind(out, r)
    return out


def add_kind(counts: dict, record) -> None:
    av, plain = video_kinds(record.media_parts())
    if bool(av) != bool(plain):
        kind = "audio" if av else "plain"
        n, first = counts.get(kind, (0, record.where()))
        counts[kind] = (n + 1, first)


def mixed_kinds_error(counts: dict, batch_size: int, where: str, split: str):
    """The DataError for data whose records could share a micro-batch of `batch_size` across the two kinds of
    video (the module docstring), counted, with the first record of each kind; None when it cannot happen."""
    if batch_size <= 1 or not ("audio" in counts and "plain" in counts):
        return None
    from ..errors import DataError

    (n_av, first_av), (n_plain, first_plain) = counts["audio"], counts["plain"]
    return DataError(f"data.{split}: {n_av} record(s) feed a video's audio track (use_audio, first {first_av}) and "
                     f"{n_plain} have a plain video (first {first_plain}); with {where}={batch_size} both can share "
                     "a micro-batch, whose one use_audio_in_video flag positions only one kind right",
                     where=where, fix=f"{where}=1, or give all videos use_audio or none, or train the two kinds in "
                                      "separate stages")


def check_records(records, batch_size: int, where: str, split: str) -> None:
    """Refuse, before any step, data whose records could mix the two kinds of video in one micro-batch."""
    if batch_size > 1 and (e := mixed_kinds_error(count_kinds(records), batch_size, where, split)) is not None:
        raise e
