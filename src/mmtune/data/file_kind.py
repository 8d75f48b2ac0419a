"""What a media file really is, read from its first bytes, for the message when it does not decode.

A decoder's own words ("cannot identify image file", "Invalid data found when processing input") say that a
file failed, not why. Most such files in users' datasets are something else under an image's or a clip's
name, each with its own way out:
- a Git LFS pointer (a dataset repository cloned without Git LFS: every "image" is 130 bytes of text,
  https://github.com/huggingface/datasets/issues/5226, https://github.com/haotian-liu/LLaVA/issues/1201);
- an HTML page (a download that got an error, login or rate-limit page instead of the file);
- an iPhone HEIC / HEIF or an AVIF photo where the installed Pillow has no decoder for it
  (https://github.com/python-pillow/Pillow/issues/4163, https://github.com/replicate/dreambooth/issues/23);
- an SVG, a PDF, a Photoshop file: not raster images;
- a video or audio file given as an image part, or the other way round;
- an empty file (a copy or download interrupted before its first byte).
A file whose own format is recognised (PNG, JPEG, ...) and still fails is damaged or cut short: said as such.
"""

from __future__ import annotations

HEAD_BYTES = 512

# ISO base media ("ftyp") brands: HEIF stills, AVIF, and the video ones (MP4, QuickTime, 3GP).
_HEIF = {b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"mif1", b"msf1"}
_AVIF = {b"avif", b"avis"}

# (prefix, what it is, its kind of media) for formats told by their first bytes.
_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "a PNG image", "image"),
    (b"\xff\xd8\xff", "a JPEG image", "image"),
    (b"GIF8", "a GIF image", "image"),
    (b"BM", "a BMP image", "image"),
    (b"II*\x00", "a TIFF image", "image"),
    (b"MM\x00*", "a TIFF image", "image"),
    (b"8BPS", "a Photoshop (PSD) document", "document"),
    (b"%PDF-", "a PDF document", "document"),
    (b"fLaC", "a FLAC audio file", "audio"),
    (b"OggS", "an Ogg file (audio or video)", "audio"),
    (b"ID3", "an MP3 audio file", "audio"),
    (b"\x1aE\xdf\xa3", "a Matroska / WebM video", "video"),
    (b"PK\x03\x04", "a ZIP archive", "archive"),
    (b"\x1f\x8b", "a gzip archive", "archive"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive", "archive"),
)


def _head(part: dict) -> bytes | None:
    if part.get("bytes") is not None:
        return bytes(part["bytes"][:HEAD_BYTES])
    path = part.get("path")
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            return f.read(HEAD_BYTES)
    except OSError:
        return None


def _riff(head: bytes) -> tuple[str, str] | None:
    if head[:4] != b"RIFF" or len(head) < 12:
        return None
    form = head[8:12]
    if form == b"WAVE":
        return "a WAV audio file", "audio"
    if form == b"WEBP":
        return "a WebP image", "image"
    if form == b"AVI ":
        return "an AVI video", "video"
    return None


def _ftyp(head: bytes) -> tuple[str, str] | None:
    if head[4:8] != b"ftyp" or len(head) < 12:
        return None
    brands = {head[8:12]} | {head[i:i + 4] for i in range(16, min(len(head), int.from_bytes(head[:4], "big")), 4)}
    if brands & _HEIF:
        return "a HEIC / HEIF photo (an iPhone's default format)", "heif"
    if brands & _AVIF:
        return "an AVIF image", "heif"
    if head[8:12] in (b"M4A ", b"M4B "):
        return "an M4A audio file", "audio"
    return "an MP4 / QuickTime video", "video"


def _text(head: bytes) -> tuple[str, str] | None:
    try:  # a multi-byte character cut at the end of the head is still text
        text = head.decode("utf-8") if len(head) < HEAD_BYTES else head[:-3].decode("utf-8", errors="strict")
    except UnicodeDecodeError:
        return None
    if sum(c.isprintable() or c in "\t\r\n" for c in text) < 0.95 * len(text):
        return None  # binary that happens to be valid UTF-8
    text = text.lstrip("\ufeff \t\r\n")
    low = text.lower()
    if low.startswith("version https://git-lfs"):
        return "a Git LFS pointer (a text stub, not the file)", "lfs"
    if low.startswith(("<!doctype html", "<html")) or "<html" in low[:200]:
        return "an HTML page", "html"
    if low.startswith("<svg") or (low.startswith("<?xml") and "<svg" in low):
        return "an SVG (vector) image", "svg"
    if low.startswith(("{", "[")):
        return "a JSON text file", "text"
    first = text.splitlines()[0][:60] if text.strip() else ""
    return (f"a text file (it begins {first!r})", "text") if first else None


def what_it_is(part: dict) -> tuple[str, str] | None:
    """(what the file is, its kind: image, video, audio, document, archive, heif, lfs, html, svg, text, empty) from
    its first bytes, or None when they say nothing known (or cannot be read)."""
    head = _head(part)
    if head is None:
        return None
    if not head:
        return "an empty file (0 bytes)", "empty"
    for prefix, what, kind in _MAGIC:
        if head.startswith(prefix):
            return what, kind
    return _riff(head) or _ftyp(head) or _text(head)


_FIXES = {
    "empty": "copy or download the file again (it was cut off before its first byte)",
    "lfs": "the dataset was cloned without Git LFS: run `git lfs install && git lfs pull` in its folder "
           "(or download it with `huggingface-cli download --repo-type dataset`)",
    "html": "the download got a web page (an error, login or rate-limit page) instead of the file: download it again, "
            "with the credentials or URL the host needs",
    "heif": "convert it to JPEG or PNG (e.g. `heif-convert photo.heic photo.jpg`, ImageMagick, or pillow-heif's "
            "register_heif_opener() before converting with Pillow)",
    "svg": "render it to PNG first (e.g. `rsvg-convert -o out.png in.svg`, or cairosvg): models take raster images",
    "document": "export or render it to PNG first (a PDF: `pdftoppm -png in.pdf page`)",
    "archive": "extract the archive and point the record at the files inside it",
    "text": "the path names a text file, not media: check the record's path",
}


def explain(part: dict, wanted: str) -> tuple[str, str, bool] | None:
    """For a media part that did not decode as `wanted` (image, video, audio): (what the file really is, the fix,
    whether it is of `wanted`'s own kind), or None when its first bytes say nothing more than the decoder did."""
    found = what_it_is(part)
    if found is None:
        return None
    what, kind = found
    if kind == wanted or (kind == "audio" and wanted == "video" and what.startswith("an Ogg")):
        # Its own format, recognised, and it still failed: damaged, or cut short.
        return f"the file is {what} but damaged or cut short", "copy or download the file again, or replace it", True
    if kind in ("image", "video", "audio"):
        as_part = {"image": '{"type": "image", ...}', "video": '{"type": "video", ...}', "audio": '{"type": "audio", ...}'}
        return f"the file is {what}, given as {wanted}", f"give it as {as_part[kind]}, or fix the record's path", False
    return f"the file is {what}, not {'an' if wanted[0] in 'aeiou' else 'a'} {wanted}", _FIXES[kind], False

