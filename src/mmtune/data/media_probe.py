"""Media checked by header only: size and length without decoding pixels or samples.

PIL's `Image.open` reads the header (no `load()`), PyAV opens the container and reads stream
metadata, soundfile reads the audio header. Each returns the numbers token counts need, or raises a
DataError naming the file (missing, not decodable).
"""

from __future__ import annotations

import io
from functools import lru_cache
from pathlib import Path

from ..errors import DataError
from .media import EXIF_ORIENTATION, IMAGE_SUFFIXES, SIDEWAYS, SOUNDFILE_SUFFIXES, packet_count, wav_cut_short


def _src(part: dict):
    if part.get("bytes") is not None:
        return io.BytesIO(part["bytes"])
    return part.get("path")


@lru_cache(maxsize=65536)  # VQA sets ask many questions about one image: read its header once
def _image_size_of_path(path: str) -> tuple[int, int]:
    return _image_size(path)


def _image_size(src) -> tuple[int, int]:
    """(height, width) from the header."""
    import warnings

    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():  # the size is checked against media.MAX_IMAGE_PIXELS by the caller
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(src) as im:
                w, h = im.size
                if _orientation(im) in SIDEWAYS:  # the loader turns it upright (media.upright)
                    w, h = h, w
    except FileNotFoundError:
        raise DataError("missing media", fix="check the path and data.media_root") from None
    except Image.DecompressionBombError as e:  # PIL's own refusal past twice its limit: the size is in the text
        raise _TooLarge(str(e)) from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
        raise DataError(f"corrupt media ({type(e).__name__}: {e})", fix="replace or remove the file") from None
    return h, w


def _orientation(im) -> int | None:
    """The EXIF Orientation tag. JPEG keeps EXIF before the pixels; a PNG's eXIf chunk may follow them, and reading
    it from a file cut short fails: that file is the loader's "corrupt media", so no turn is assumed here."""
    try:
        return im.getexif().get(EXIF_ORIENTATION)
    except (OSError, SyntaxError, ValueError):
        return None


class _TooLarge(Exception):
    pass


def image_size(part: dict, where: str = "") -> tuple[int, int]:
    """(height, width); an image past media.MAX_IMAGE_PIXELS is the loader's "image too large" BadRecord."""
    from .media import _pil_size, check_image_pixels, too_large

    try:
        if part.get("image") is not None:
            w, h = part["image"].size
        elif part.get("bytes") is not None:
            h, w = _image_size(io.BytesIO(part["bytes"]))
        else:
            h, w = _image_size_of_path(str(part["path"]))
    except _TooLarge as e:
        raise too_large(part, where, _pil_size(e)) from None
    except DataError as e:
        raise explained(e, part, "image") from None
    check_image_pixels(w, h, part, where)
    return h, w


def video_shape(part: dict, n_frames: int, fps: float | None, where: str = "") -> tuple[int, int, int]:
    """(frames sampled, height, width) of an in-memory clip, listed frame files, a folder of frames or a video file.

    Sampling by count (`fps=None`) takes exactly `n_frames`; a shorter video is the loader's
    "video too short" BadRecord here too. By fps, the count the loader takes (frames_by_fps)."""
    obj = part.get("video")
    path = part.get("path")
    if obj is not None:
        total = len(obj)
        first = obj[0]
        h, w = (first.size[1], first.size[0]) if hasattr(first, "size") and not hasattr(first, "shape") \
            else tuple(first.shape[:2])
        seconds = rate = None
    elif part.get("frames"):  # the frames' files, listed (data/formats._frame_files)
        h, w = _frames_size([Path(f) for f in part["frames"]], n_frames, part, where)
        total, seconds, rate = len(part["frames"]), None, None
    elif path is not None and Path(path).is_dir():
        from .frame_files import frame_files

        frames = frame_files(Path(path), IMAGE_SUFFIXES)
        if not frames:
            raise DataError("corrupt media (a video folder without image frames)", fix="put the frames (.jpg/.png) in the folder")
        h, w = _frames_size(frames, n_frames, part, where)
        total, seconds, rate = len(frames), None, None
    else:
        try:
            total, seconds, h, w, rate = _video_file_header(part)
        except DataError as e:
            raise explained(e, part, "video", damaged="no video stream" not in e.what) from None
    if fps:
        n = frames_by_fps(total, seconds, rate, n_frames, fps)
    else:
        if total and total < n_frames:
            from .formats import BadRecord
            from .records import media_label

            raise BadRecord("video too short", f"video has {total} frame(s), fewer than model.video_frames={n_frames}: "
                            f"{media_label(part)}", where,
                            f"model.video_frames={total} (or fewer), model.video_fps=N to sample by time, "
                            "or data.on_bad_record=skip to drop such records (they are counted)")
        n = n_frames
    return n, h, w


def _frames_size(files: list, n_frames: int, part: dict, where: str) -> tuple[int, int]:
    """(height, width) of a clip given as frame files, from the headers of the frames the loader takes, which must
    agree (frame_files.check_one_size: the loader's refusal, here at the start-up scan)."""
    from .frame_files import check_one_size
    from .media import sample_indices

    idx = sample_indices(len(files), n_frames)
    sizes = [image_size({"type": "image", "path": str(files[i])}, where) for i in idx]
    check_one_size([(w, h) for h, w in sizes], [files[i].name for i in idx], part, where)
    return sizes[0]


def frames_by_fps(total: int, seconds: float | None, rate: float | None, n_frames: int, fps: float) -> int:
    """How many frames the loader takes from a clip by `model.video_fps`: media.sample_indices on the header's
    numbers, so a rate above the file's own takes each frame once (a 10 fps clip at video_fps=30: its frames, not
    3x as many), and a Matroska / WebM file (no frame count in its header) counts seconds x its own rate."""
    from .media import sample_indices

    if not total and seconds and rate:
        total = max(1, round(seconds * rate))
    if total and rate:
        return len(sample_indices(total, n_frames, fps, rate))
    # No rate of its own (frames folders, listed or in-memory frames, a file without one): the loader takes
    # `n_frames` uniformly, at most the frames there are.
    return min(n_frames, total) if total else n_frames


def _video_file_header(part: dict) -> tuple[int, float | None, int, int, float | None]:
    """(frame count (0 when none is found), seconds or None, height, width, frames a second or None).
    Matroska / WebM (what yt-dlp saves) carry neither a frame count nor a stream duration: the seconds are the
    container's then."""
    import av

    try:
        with av.open(_src(part)) as container:
            if not container.streams.video:
                # a sound-only MP4 / M4A given as a video: the loader's fix (media._frames_file)
                raise DataError("corrupt media (no video stream)",
                                fix="give a video file, or an audio part for audio-only files")
            stream = container.streams.video[0]
            w, h = stream.codec_context.width, stream.codec_context.height
            # Matroska / WebM: no frame count in the header; the packets are counted as the loader counts them
            # (demuxing, no pixels), so a clip shorter than model.video_frames is refused at start, not mid-run.
            total = stream.frames or packet_count(container, stream)
            seconds = float(stream.duration * stream.time_base) if stream.duration and stream.time_base else None
            if seconds is None and container.duration:
                seconds = container.duration / av.time_base
            rate = float(stream.average_rate) if stream.average_rate else None
    except FileNotFoundError:
        raise DataError("missing media", fix="check the path and data.media_root") from None
    except av.error.FFmpegError as e:
        raise DataError(f"corrupt media ({type(e).__name__}: {e})", fix="replace or remove the file") from None
    if not w or not h:
        raise DataError("corrupt media (video without frame size)", fix="re-encode the video")
    return total, seconds, h, w, rate


def audio_seconds(part: dict) -> float:
    try:
        return _audio_seconds(part)
    except DataError as e:
        raise explained(e, part, "audio", damaged="no audio stream" not in e.what) from None


def explained(e: DataError, part: dict, kind: str, damaged: bool = True) -> DataError:
    """A "corrupt media" DataError with what the file's first bytes say it really is and that case's fix
    (data/file_kind.py), as the loader says it (media._undecodable); others unchanged."""
    from .file_kind import explain

    found = explain(part, kind) if e.what.startswith("corrupt media") else None
    if found is None or not (damaged or not found[2]):
        return e
    return DataError(f"{e.what}; {found[0]}", e.where, found[1])


def _audio_seconds(part: dict) -> float:
    if part.get("audio") is not None:  # samples in memory (a decoded datasets Audio dict): read as the loader reads them
        from .media import load_audio

        return len(load_audio(part)) / 16000  # load_audio's default rate
    path = part.get("path")
    suffix = Path(str(path or part.get("name", ""))).suffix.lower()
    if suffix in SOUNDFILE_SUFFIXES:
        import soundfile as sf

        try:
            info = sf.info(_src(part))
        except FileNotFoundError:
            raise DataError("missing media", fix="check the path and data.media_root") from None
        except (RuntimeError, sf.LibsndfileError) as e:
            raise DataError(f"corrupt media ({e})", fix="replace or remove the file") from None
        if info.frames <= 0:  # a header with no samples: nothing to hear, and no audio tokens to give
            raise DataError("corrupt media (the audio holds no samples)", fix="replace or remove the file")
        if suffix == ".wav" and (short := wav_cut_short(_src(part))):  # the decoder refuses it alike
            raise DataError(f"corrupt media (the WAV file is cut short: it {short})",
                            fix="copy or download the file again, or set data.on_bad_record=skip")
        return float(info.duration)
    import av

    try:
        with av.open(_src(part)) as container:
            if not container.streams.audio:
                raise DataError("corrupt media (no audio stream)", fix="give a file with an audio track")
            s = container.streams.audio[0]
            if container.format.name in _UNINDEXED_AUDIO:
                return _packet_seconds(container, s)
            if s.duration and s.time_base:
                return float(s.duration * s.time_base)
            return float(container.duration or 0) / 1e6
    except FileNotFoundError:
        raise DataError("missing media", fix="check the path and data.media_root") from None
    except av.error.FFmpegError as e:
        raise DataError(f"corrupt media ({type(e).__name__}: {e})", fix="replace or remove the file") from None


# Raw audio streams with no index: FFmpeg's duration for them is the first frames' bitrate times the file's
# size ("Estimating duration from bitrate, this may be inaccurate") unless an encoder wrote a Xing / VBRI
# frame; a VBR mp3 without one read 9.7 s for 43 s of sound, so the start-up scan let a clip past
# model.audio_max_seconds through and counted a quarter of its tokens. Their packets' durations are exact
# (read without decoding: milliseconds for a minute).
_UNINDEXED_AUDIO = {"mp3", "aac", "ac3", "eac3", "mp2", "dts"}


def _packet_seconds(container, stream) -> float:
    ticks = sum(p.duration or 0 for p in container.demux(stream))
    if ticks and stream.time_base:
        return float(ticks * stream.time_base)
    return float(container.duration or 0) / 1e6
