"""Media decoding: images (PIL), videos (a folder of frames or a file via PyAV), audio (soundfile or PyAV).

Every failure is a DataError naming the record and the file (failure mode 18). Videos are sampled to
`model.video_frames` frames uniformly, or by `model.video_fps`, and frames are capped to
`model.max_pixels` (aspect kept) so a 4K clip does not explode the token count (failure mode 2).
Audio comes out mono float32 at the processor's sampling rate: other rates are resampled with
libswresample (through PyAV), not rejected.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from pathlib import Path

from .formats import BadRecord
from .frame_files import check_one_size
from .records import media_label
from .video_rotation import frame_image

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".webp", ".gif", ".tif", ".tiff"}
SOUNDFILE_SUFFIXES = {".wav", ".flac", ".ogg", ".aiff", ".aif"}


def _bad(what: str, part: dict, where: str, fix: str) -> BadRecord:
    """A media failure: a DataError whose `reason` ("missing media" / "corrupt media") skips count under."""
    reason = "missing media" if ("not found" in what or "no path" in what) else "corrupt media"
    return BadRecord(reason, f"{what}: {media_label(part)}", where, fix)


def _undecodable(kind: str, what: str, part: dict, where: str, *, fix: str = "replace the file",
                 damaged: bool = True) -> BadRecord:
    """A file that did not decode as `kind` (image, video, audio), with what its first bytes say it really is
    (a Git LFS pointer, an HTML page, a HEIC photo, a video given as an image ...: data/file_kind.py) and that
    case's fix, where they say more than the decoder did. `damaged`: a file of `kind`'s own format failing here
    is damaged (False where a whole file can fail this way: a video container holding only sound)."""
    from .file_kind import explain

    found = explain(part, kind)
    if found is not None and (damaged or not found[2]):
        what, fix = f"{what}; {found[0]}", found[1]
    return _bad(what, part, where, f"{fix}, or set data.on_bad_record=skip")


# ----------------------------------------------------------------------------------------------- images
def check_regular(part: dict, where: str, *, folder_ok: bool = False) -> None:
    """Refuse a media path that is not a regular file before opening it: a named pipe would block
    the loader forever, a device (/dev/zero) never ends."""
    import stat

    path = part.get("path")
    if path is None:
        return
    try:
        mode = Path(path).stat().st_mode
    except FileNotFoundError:
        return  # reported by the loader as "not found", with its own fix
    except OSError as e:
        raise _bad(f"media file cannot be read ({e.strerror})", part, where, "check the file's permissions") from None
    if stat.S_ISREG(mode) or (folder_ok and stat.S_ISDIR(mode)):
        return
    kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file (a pipe, socket or device)"
    raise BadRecord("not a regular file", f"media path is {kind}: {media_label(part)}", where,
                    "point at the media file itself" + (" (a folder is read as video frames only)" if folder_ok is False
                                                        and stat.S_ISDIR(mode) else ""))


# The largest image mmtune opens, decided once for every reader (the header measure of training's start-up
# check, `data inspect` and the doctor, and the decoder training draws through): PIL's own default
# decompression-bomb limit (89.5 M pixels, ~0.25 GB decoded as RGB). A larger one is a counted bad record
# "image too large", never a crash and never a silent downscale: no processor takes such an image whole
# (model.max_pixels caps far lower), and decoding it to downscale would cost the memory the limit guards.
MAX_IMAGE_PIXELS = 89_478_485


def too_large(part: dict, where: str, size: str) -> BadRecord:
    return BadRecord("image too large", f"image is {size}, over mmtune's limit of {MAX_IMAGE_PIXELS / 1e6:.1f} M "
                     f"pixels (a decompression bomb, or a scan no model takes whole): {media_label(part)}", where,
                     "downscale the image (model.max_pixels caps what the model sees anyway), or set "
                     "data.on_bad_record=skip to leave such records out (they are counted)")


def check_image_pixels(width: int, height: int, part: dict, where: str) -> None:
    if width * height > MAX_IMAGE_PIXELS:
        raise too_large(part, where, f"{width}x{height} = {width * height / 1e6:.0f} M pixels")


def load_image(part: dict, where: str = "", max_pixels: int | None = None):
    """A media part -> RGB PIL image (from an in-memory image, bytes, or a path)."""
    import warnings

    from PIL import Image, UnidentifiedImageError

    img = part.get("image")
    if img is None:
        src = io.BytesIO(part["bytes"]) if part.get("bytes") is not None else part.get("path")
        if src is None:
            raise _bad("image part has no path", part, where, 'give {"type": "image", "path": "file.png"}')
        check_regular(part, where)
        try:
            # A file declaring more pixels than PIL's MAX_IMAGE_PIXELS (89 M) is a decompression bomb or
            # a scan no model takes whole: refused, like PIL refuses twice that, instead of a warning.
            with warnings.catch_warnings():
                warnings.simplefilter("error", Image.DecompressionBombWarning)
                with Image.open(src) as im:
                    check_image_pixels(im.width, im.height, part, where)  # before any pixel is decoded
                    im.load()
                    img = to_rgb(upright(im))
        except FileNotFoundError:
            raise _bad("image file not found", part, where,
                       "check the path and data.media_root, or set data.on_bad_record=skip") from None
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:  # PIL's check, in open()
            raise too_large(part, where, _pil_size(e)) from None
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
            raise _undecodable("image", f"image cannot be decoded ({e.__class__.__name__}: {e})", part, where) from None
    elif img.mode != "RGB":
        img = to_rgb(img)
    return cap_pixels(img, max_pixels)


# EXIF Orientation values (tag 0x0112) that turn the stored pixels by 90 degrees: width and height swap.
EXIF_ORIENTATION = 0x0112
SIDEWAYS = (5, 6, 7, 8)


def upright(im):
    """The image as viewers show it: a phone photo stores its pixels as the sensor read them and the turn in
    its EXIF Orientation tag, which browsers, transformers' `load_image`, vLLM and torchvision apply
    (ImageOps.exif_transpose). Trained without it, such photos are seen sideways or upside down, and a
    model served elsewhere sees them upright: https://github.com/mistralai/mistral-common/issues/330,
    https://github.com/sgl-project/sglang/issues/33464, https://github.com/ollama/ollama/issues/18418."""
    from PIL import ImageOps

    if im.getexif().get(EXIF_ORIENTATION, 1) in (1, None):
        return im
    return ImageOps.exif_transpose(im)


def _pil_size(e: Exception) -> str:
    """'196 M pixels' from PIL's decompression-bomb message ('Image size (196000000 pixels) exceeds ...')."""
    import re

    m = re.search(r"\((\d+) pixels\)", str(e))
    return f"{int(m.group(1)) / 1e6:.0f} M pixels" if m else "too many pixels"


def to_rgb(im):
    """Any PIL mode -> RGB. 16-bit and 32-bit greyscale (`I;16`, `I`: scanners, medical images, depth maps) and
    float (`F`) are scaled to 8 bits first: PIL's own convert clips them at 255, which turns a 16-bit image
    almost white. Transparency (RGBA, LA, PA, a palette or greyscale with a transparent colour) is composited
    onto white, as transformers' `convert_to_rgb` and qwen_vl_utils do: PIL's convert drops alpha and shows
    the colour stored under it, black in most exported logos, screenshots and stickers, so the model trained
    on a black background what it is served on white (https://github.com/QwenLM/Qwen3-VL/pull/661,
    https://github.com/kohya-ss/sd-scripts/issues/1269). CMYK and the rest convert as PIL does."""
    if im.mode.startswith("I") or im.mode == "F":
        import numpy as np
        from PIL import Image

        a = np.asarray(im, dtype=np.float64)
        top = a.max() if a.size else 0.0
        if im.mode == "F" and top <= 1.0:
            a = a * 255.0  # floats in [0, 1]
        elif top > 255:
            a = a / (257.0 if top <= 65535 else top / 255.0)  # 16-bit range (or wider) onto 0..255
        im = Image.fromarray(np.clip(np.rint(a), 0, 255).astype(np.uint8), mode="L")
    if "A" in im.getbands() or im.info.get("transparency") is not None:
        from PIL import Image

        rgba = im.convert("RGBA")
        return Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba).convert("RGB")
    return im if im.mode == "RGB" else im.convert("RGB")


def cap_pixels(img, max_pixels: int | None):
    """Downscale (aspect kept) so width*height <= max_pixels; smaller images are left alone."""
    if not max_pixels or img.width * img.height <= max_pixels:
        return img
    from PIL import Image

    return img.resize(capped_size(img.width, img.height, max_pixels), Image.BICUBIC)


def capped_size(width: int, height: int, max_pixels: int) -> tuple[int, int]:
    """(width, height) after `cap_pixels`: the one formula the loader and the no-pixel measure share."""
    scale = math.sqrt(max_pixels / (width * height))
    return max(1, int(width * scale)), max(1, int(height * scale))


# ----------------------------------------------------------------------------------------------- videos
@dataclass
class VideoClip:
    frames: list  # PIL RGB images, the sampled frames
    source_frames: int  # how many frames the source had (decodable)
    source_fps: float | None
    indices: list[int] = field(default_factory=list)  # which source frames were taken

    def as_array(self):
        import numpy as np

        return np.stack([np.asarray(f) for f in self.frames])


def sample_indices(n_source: int, n_frames: int, fps: float | None = None, source_fps: float | None = None) -> list[int]:
    """Frame indices to keep: every 1/fps seconds when fps and the source rate are known, else
    `n_frames` spread uniformly (centres of equal segments). Never more frames than the source has."""
    if n_source <= 0:
        return []
    if fps and source_fps:
        step = source_fps / fps
        count = max(1, int(n_source / step))
        return sorted({min(n_source - 1, int(i * step)) for i in range(count)})
    k = min(n_frames, n_source)
    return [min(n_source - 1, int((i + 0.5) * n_source / k)) for i in range(k)]


def _frames_folder(folder: Path, part, where, n_frames, fps, max_pixels) -> VideoClip:
    from .frame_files import frame_files

    files = frame_files(folder, IMAGE_SUFFIXES)
    if not files:
        raise _bad("video frames folder holds no image files", part, where,
                   f"put the frames as images ({', '.join(sorted(IMAGE_SUFFIXES))}) in the folder")
    return _listed_frames(files, where, n_frames, max_pixels, part)


def _listed_frames(files: list, where, n_frames, max_pixels, part) -> VideoClip:
    """Frames read from their image files, in the given order (a folder's, sorted, or a part's `frames` list)."""
    # Frame files carry no frame rate; fps sampling needs one, so frames are taken uniformly.
    idx = sample_indices(len(files), n_frames)
    frames = [load_image({"type": "image", "path": str(files[i])}, where, max_pixels) for i in idx]
    check_one_size([f.size for f in frames], [Path(files[i]).name for i in idx], part, where)  # the processor stacks them
    return VideoClip(frames, len(files), None, idx)


def _frames_file(path: Path, part, where, n_frames, fps, max_pixels) -> VideoClip:
    import av

    try:
        container = av.open(str(path))
    except (av.error.FFmpegError, OSError) as e:
        raise _undecodable("video", f"video cannot be opened ({e})", part, where) from None
    with container:
        if not container.streams.video:
            raise _undecodable("video", "file has no video stream", part, where, damaged=False,
                               fix="give a video file, or an audio part for audio-only files")
        stream = container.streams.video[0]
        source_fps = float(stream.average_rate) if stream.average_rate else None
        # Matroska / WebM headers hold no frame count: count the packets (demuxing reads no pixels), else the
        # decode below would keep every frame of the clip in memory to sample from afterwards.
        known = stream.frames or packet_count(container, stream)
        picked = sample_indices(known, n_frames, fps, source_fps) if known else None
        if picked and known >= SEEK_MIN_SPACING * len(picked) and _header_is_consistent(container, stream, known,
                                                                                         source_fps):
            seeked = _seek_frames(container, stream, picked, source_fps, max_pixels)
            if seeked is not None:
                return VideoClip([seeked[i] for i in picked], known, source_fps, picked)
            container.seek(0)  # timestamps did not map to frames: decode every frame below
        wanted = set(picked) if known else None
        kept: dict[int, object] = {}
        n = 0
        try:
            for frame in container.decode(stream):
                if wanted is None or n in wanted:
                    kept[n] = cap_pixels(frame_image(frame), max_pixels)
                n += 1
        except av.error.FFmpegError as e:
            if n == 0:
                raise _undecodable("video", f"video cannot be decoded ({e})", part, where) from None
            # A truncated tail: keep the frames decoded so far (the count says how many).
    if n == 0:
        raise _bad("video has no decodable frames", part, where, "replace the file, or set data.on_bad_record=skip")
    # The header's frame count can be wrong; re-sample over what was really decoded.
    idx = sample_indices(n, n_frames, fps, source_fps)
    if not all(i in kept for i in idx) and wanted is not None:
        # The header promised more frames than there were: decode again, keeping all of them.
        return _frames_file_all(path, part, where, n_frames, fps, max_pixels, source_fps)
    return VideoClip([kept[i] for i in idx], n, source_fps, idx)


# Seek instead of decoding every frame when the sampled frames are at least this far apart on average:
# 8 frames from a 60 s clip at 30 fps decode ~8 GOPs instead of 1,800 frames. Closer than this,
# decoding straight through costs about the same and never seeks backwards.
SEEK_MIN_SPACING = 8


def _header_is_consistent(container, stream, known: int, source_fps: float | None) -> bool:
    """Seeking trusts the header's frame count and a constant frame rate (frame index <-> timestamp).
    Both must agree with the stream's duration to within a frame; otherwise decode linearly, which
    counts the frames that are really there (a truncated file, a wrong header)."""
    if not known or not source_fps or stream.time_base is None:
        return False
    if stream.duration is not None:
        seconds = float(stream.duration * stream.time_base)
    elif container.duration is not None:
        seconds = container.duration / 1_000_000  # av.time_base: microseconds
    else:
        return False
    return abs(seconds * source_fps - known) <= 1.0


def packet_count(container, stream) -> int:
    """The stream's frames, counted from its packets (one coded frame each), the container rewound."""
    import av

    try:
        n = sum(1 for packet in container.demux(stream) if packet.size)
        container.seek(0)
    except av.error.FFmpegError:
        return 0  # decoding below counts what is there
    return n


def _frame_index(pts, start: int, tb, source_fps: float) -> int | None:
    """A timestamp -> its frame index in a constant-rate stream; None when it falls between frames."""
    if pts is None:
        return None
    exact = (pts - start) * tb * source_fps
    index = round(exact)
    return index if abs(exact - index) <= 0.01 else None


def _keyframe_indices(container, stream, source_fps: float) -> list[int] | None:
    """Where the keyframes are, from the packets alone (demuxing reads no pixels: milliseconds for a
    minute of video). None when a keyframe's timestamp does not map to a frame index."""
    start = stream.start_time or 0
    keys = []
    for packet in container.demux(stream):
        if packet.is_keyframe and packet.size:
            index = _frame_index(packet.pts, start, stream.time_base, source_fps)
            if index is None:
                return None
            keys.append(index)
    container.seek(0)
    return sorted(keys) or None


def _key_before(keys: list[int], target: int) -> int:
    """The last keyframe at or before frame `target` (the first one when none is)."""
    import bisect

    return keys[max(0, bisect.bisect_right(keys, target) - 1)]


def _frames_to_decode(keys: list[int], picked: list[int]) -> int:
    """How many frames the seek path decodes for these targets (the same rule as `_seek_frames`)."""
    pos, total = -1, 0
    for target in picked:
        key = _key_before(keys, target)
        total += target - (key - 1 if key > pos or target <= pos else pos)
        pos = target
    return total


def _seek_frames(container, stream, picked: list[int], source_fps: float, max_pixels) -> dict | None:
    """The sampled frames, decoding only from the keyframe before each one: forward from where the
    decoder is when that keyframe is already behind it, else a seek. Returns None when the stream does
    not behave like a constant-rate one (a frame without a timestamp or between indices, a frame
    missing): the caller then decodes every frame, so the frames taken are always the ones a full
    decode would take."""
    import av

    tb = stream.time_base
    start = stream.start_time or 0
    kept: dict[int, object] = {}
    frames = None
    pos = -1  # index of the last frame decoded
    try:
        keys = _keyframe_indices(container, stream, source_fps)
        if keys is None or _frames_to_decode(keys, picked) > 0.75 * (picked[-1] + 1):
            return None  # (long GOPs, many frames: nearly everything is decoded anyway, without seeks)
        for target in picked:
            key = _key_before(keys, target)
            if frames is None or key > pos or target <= pos:
                container.seek(start + int(target / source_fps / tb), backward=True, any_frame=False, stream=stream)
                frames = container.decode(stream)
            for frame in frames:
                index = _frame_index(frame.pts, start, tb, source_fps)
                if index is None:
                    return None
                pos = index
                if index == target:
                    kept[target] = cap_pixels(frame_image(frame), max_pixels)
                    break
                if index > target:
                    return None
            else:
                return None  # the stream ended before this frame: let the full decode count what is there
    except av.error.FFmpegError:
        return None
    return kept


def _frames_file_all(path, part, where, n_frames, fps, max_pixels, source_fps) -> VideoClip:
    import av

    with av.open(str(path)) as container:
        frames = []
        try:
            for frame in container.decode(container.streams.video[0]):
                frames.append(cap_pixels(frame_image(frame), max_pixels))
        except av.error.FFmpegError:
            pass  # keep what decoded; zero is handled below
    if not frames:
        raise _bad("video has no decodable frames", part, where, "replace the file, or set data.on_bad_record=skip")
    idx = sample_indices(len(frames), n_frames, fps, source_fps)
    return VideoClip([frames[i] for i in idx], len(frames), source_fps, idx)


def load_video(part: dict, where: str = "", n_frames: int = 8, fps: float | None = None,
               max_pixels: int | None = None) -> VideoClip:
    """A video part -> sampled frames. In memory (list of PIL frames / array), a frames folder, or a file."""
    from PIL import Image

    obj = part.get("video")
    if obj is not None:
        frames = [f if hasattr(f, "convert") else Image.fromarray(f) for f in obj]
        idx = sample_indices(len(frames), n_frames)
        taken = [cap_pixels(to_rgb(frames[i]), max_pixels) for i in idx]
        check_one_size([f.size for f in taken], [f"frame {i}" for i in idx], part, where)  # the processor stacks them
        return VideoClip(taken, len(frames), None, idx)
    if part.get("frames"):  # the frames' files, listed (data/formats._frame_files)
        clip = _listed_frames(part["frames"], where, n_frames, max_pixels, part)
    else:
        if part.get("path") is None:
            raise _bad("video part has no path", part, where, 'give {"type": "video", "path": "clip.mp4 or frames/"}')
        path = Path(part["path"])
        if not path.exists():
            raise _bad("video file not found", part, where,
                       "check the path and data.media_root, or set data.on_bad_record=skip")
        check_regular(part, where, folder_ok=True)
        clip = (_frames_folder if path.is_dir() else _frames_file)(path, part, where, n_frames, fps, max_pixels)
    if fps is None and clip.source_frames < n_frames:
        # Fewer frames than asked would silently give this record fewer video tokens than the others
        # (and than the plan assumed): say so, with the ways out.
        raise BadRecord("video too short",
                        f"video has {clip.source_frames} frame(s), fewer than model.video_frames={n_frames}: "
                        f"{media_label(part)}", where,
                        f"model.video_frames={clip.source_frames} (or fewer), model.video_fps=N to sample by time, "
                        "or data.on_bad_record=skip to drop such records (they are counted)")
    return clip


# ----------------------------------------------------------------------------------------------- audio
def resample(wave, sr: int, target_sr: int):
    """Mono float32 `wave` at `sr` -> `target_sr`, with libswresample (band-limited, not naive)."""
    import av
    import numpy as np

    wave = np.ascontiguousarray(wave, dtype=np.float32)
    if sr == target_sr or wave.size == 0:
        return wave
    frame = av.AudioFrame.from_ndarray(wave[None, :], format="fltp", layout="mono")
    frame.sample_rate = sr
    rs = av.AudioResampler(format="flt", layout="mono", rate=target_sr)
    chunks = [f.to_ndarray().reshape(-1) for f in rs.resample(frame)]
    chunks += [f.to_ndarray().reshape(-1) for f in rs.resample(None)]
    return np.concatenate(chunks).astype(np.float32) if chunks else np.zeros(0, np.float32)


def _decode_audio_av(path: str, part, where: str, target_sr: int, from_video: bool):
    import av
    import numpy as np

    try:
        container = av.open(path)
    except (av.error.FFmpegError, OSError) as e:
        raise _undecodable("audio", f"audio cannot be opened ({e})", part, where) from None
    with container:
        if not container.streams.audio:
            what = "video has no audio track" if from_video else "file has no audio stream"
            raise _bad(what, part, where, "drop use_audio for this video" if from_video else "give an audio file")
        rs = av.AudioResampler(format="flt", layout="mono", rate=target_sr)
        chunks = []
        try:
            for frame in container.decode(container.streams.audio[0]):
                frame.pts = None  # let the resampler run on sample counts, not container timestamps
                chunks += [f.to_ndarray().reshape(-1) for f in rs.resample(frame)]
            chunks += [f.to_ndarray().reshape(-1) for f in rs.resample(None)]
        except av.error.FFmpegError as e:
            if not chunks:
                raise _undecodable("audio", f"audio cannot be decoded ({e})", part, where) from None
    if not chunks:
        raise _bad("audio has no decodable samples", part, where, "replace the file, or set data.on_bad_record=skip")
    return _not_empty(np.concatenate(chunks).astype(np.float32), part, where)


MIN_AUDIO_RATE, MAX_AUDIO_RATE = 1000, 384000


def _check_rate(sr, part: dict, where: str) -> int:
    """A rate outside what audio is recorded at means a mislabelled array or a broken header: resampling
    it would feed the model noise that looks like audio."""
    # finite first: int() of an infinite or NaN rate (a JSON 1e999, NaN) raises before the range is checked
    if (not isinstance(sr, (int, float)) or isinstance(sr, bool) or not math.isfinite(sr) or sr != int(sr)
            or not MIN_AUDIO_RATE <= sr <= MAX_AUDIO_RATE):
        raise BadRecord("bad sample rate", f"unexpected audio sample rate {sr!r} Hz: {media_label(part)}", where,
                        f"give the real rate ({MIN_AUDIO_RATE}-{MAX_AUDIO_RATE} Hz; it is resampled to the "
                        "processor's), re-encode the file, or set data.on_bad_record=skip")
    return int(sr)


def _not_empty(wave, part: dict, where: str):
    import numpy as np

    if wave.size == 0:  # zero samples give zero audio tokens: the processor's text no longer lines up
        raise _bad("audio holds no samples", part, where, "replace or remove the file, or set data.on_bad_record=skip")
    bad = int(wave.size - np.isfinite(wave).sum())
    if bad:  # a float WAV with NaN / inf samples: its features are NaN, and so is the loss of every step it is in
        raise _bad(f"audio holds {bad} NaN or infinite sample(s) of {wave.size}", part, where,
                   "re-export the clip (a float WAV written from a failed computation), or set data.on_bad_record=skip")
    return wave


def wav_cut_short(src) -> str | None:
    """A WAV file (a path or a binary file object) whose data chunk declares more bytes than the file holds: a
    copy or download cut short. libsndfile reads what is there without a word, so the clip would train shorter
    than it is; said as "declares X s, holds Y s", else None. Sizes left open by streaming writers (0, 2^32-1)
    and RF64 are not judged."""
    import struct

    f = open(src, "rb") if isinstance(src, (str, Path)) else src
    try:
        start = f.tell()
        head = f.read(12)
        if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
            return None
        rate = block = None
        while True:
            chunk = f.read(8)
            if len(chunk) < 8:
                return None
            tag, size = chunk[:4], struct.unpack("<I", chunk[4:])[0]
            if tag == b"fmt ":
                fmt = f.read(min(size, 16))
                if len(fmt) < 16:
                    return None
                rate, block = struct.unpack("<I", fmt[4:8])[0], struct.unpack("<H", fmt[12:14])[0]
                f.seek(size - 16 + size % 2, 1)
            elif tag == b"data":
                here = f.tell()
                present = f.seek(0, 2) - here
                if size in (0, 0xFFFFFFFF) or present >= size or not rate or not block:
                    return None
                return f"declares {size / block / rate:.3g} s of samples, the file holds {present / block / rate:.3g} s"
            else:
                f.seek(size + size % 2, 1)
    except (OSError, struct.error):
        return None
    finally:
        f.close() if isinstance(src, (str, Path)) else f.seek(start)


def load_audio(part: dict, where: str = "", sampling_rate: int = 16000):
    """An audio part (or a video part with use_audio) -> mono float32 numpy array at `sampling_rate`.

    In memory: `{"type": "audio", "audio": array, "sampling_rate": sr}` (or a (array, sr) tuple)."""
    import numpy as np

    obj = part.get("audio")
    if obj is not None:
        if isinstance(obj, tuple):
            obj, sr = obj
        elif part.get("sampling_rate") is None:  # not assumed: a 48 kHz array read as 16 kHz trains 3x slowed noise
            raise BadRecord("bad sample rate", f"audio samples given without their sampling_rate: {media_label(part)}",
                            where, f'give the rate the samples were recorded at beside them ({{"type": "audio", "audio": '
                            f'[...], "sampling_rate": 48000}}; it is resampled to the processor\'s {sampling_rate} Hz), '
                            "or a path to the audio file")
        else:
            sr = part["sampling_rate"]
        wave = np.asarray(obj, dtype=np.float32)
        if wave.ndim == 2:
            wave = wave.mean(axis=1 if wave.shape[1] < wave.shape[0] else 0)
        return resample(_not_empty(wave, part, where), _check_rate(sr, part, where), sampling_rate)
    from_video = part.get("type") == "video"
    path = part.get("path")
    if path is None and part.get("bytes") is None:
        raise _bad("audio part has no path", part, where, 'give {"type": "audio", "path": "clip.wav"}')
    if path is not None and not Path(path).exists():
        raise _bad("audio file not found", part, where, "check the path and data.media_root, or set data.on_bad_record=skip")
    check_regular(part, where)
    if path is not None and not from_video and Path(path).suffix.lower() in SOUNDFILE_SUFFIXES:
        import soundfile as sf

        try:
            wave, sr = sf.read(path, dtype="float32", always_2d=True)
        except (sf.LibsndfileError, RuntimeError) as e:
            raise _undecodable("audio", f"audio cannot be decoded ({e})", part, where) from None
        if short := wav_cut_short(path):
            raise _bad(f"the WAV file is cut short (it {short})", part, where,
                       "copy or download the file again, or set data.on_bad_record=skip")
        return resample(_not_empty(wave.mean(axis=1), part, where), _check_rate(sr, part, where), sampling_rate)
    if path is None:  # bytes from a datasets Audio column
        import tempfile

        with tempfile.NamedTemporaryFile(suffix=Path(part.get("name", "a.wav")).suffix or ".wav") as tmp:
            tmp.write(part["bytes"])
            tmp.flush()
            return _decode_audio_av(tmp.name, part, where, sampling_rate, False)
    return _decode_audio_av(str(path), part, where, sampling_rate, from_video)
