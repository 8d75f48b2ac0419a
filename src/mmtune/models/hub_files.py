"""Where a model's files are: a local folder, the hub cache, or a hub id still to download.

An offline model that is not complete on disk fails here with the missing files and the command that
fetches them, instead of a hub traceback (failure mode 24); weights a clone left as Git LFS pointers are
named before transformers stops on their header.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ModelLoadError
from .families import Family


def _offline() -> bool:
    from ..compat.hub import hub_offline

    return hub_offline()


def cached_snapshot(repo_id: str, revision: str | None) -> Path | None:
    """The local snapshot folder of a hub model, or None when nothing of it is cached."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, revision=revision, local_files_only=True))
    except (LocalEntryNotFoundError, FileNotFoundError, OSError, ValueError):
        return None


def missing_files(folder: Path, family: Family | None = None, tokenizer: bool = True,
                  weights: bool = True) -> list[str]:
    """Files a loadable model folder needs and this one lacks (config, weights, tokenizer/processor)."""
    import json

    missing = []
    if not (folder / "config.json").is_file():
        missing.append("config.json")
    index = folder / "model.safetensors.index.json"
    if not weights:
        pass
    elif index.is_file():
        shards = sorted(set(json.loads(index.read_text()).get("weight_map", {}).values()))
        missing += [s for s in shards if not (folder / s).is_file()]
    elif not (list(folder.glob("*.safetensors")) or list(folder.glob("*.bin"))):
        missing.append("model weights (*.safetensors)")
    if tokenizer and not ((folder / "tokenizer.json").is_file() or (folder / "tokenizer_config.json").is_file()
            or (folder / "vocab.json").is_file()):
        missing.append("tokenizer (tokenizer.json / tokenizer_config.json)")
    if family is not None and set(family.modalities) - {"text"}:
        if not any((folder / f).is_file() for f in ("preprocessor_config.json", "processor_config.json")):
            missing.append("preprocessor_config.json")
    return missing


def _raise_for_run_folder(name: str) -> None:
    """An mmtune run folder (or a path inside one) as model.name: the fix is `mmtune export` (a stage-2 recipe
    naming stage 1's model, models/run_folder.py)."""
    from .run_folder import export_fix

    found = export_fix(name)
    if found is not None:
        raise ModelLoadError(found[0], where="model.name", fix=found[1])


def is_local_name(name: str) -> bool:
    """Whether model.name names a folder on this machine (never downloaded), not a hub id: it exists, starts
    with `.`, `/` or `~`, or has more path parts than ORG/NAME (runs/x/final)."""
    return Path(name).expanduser().exists() or name.startswith((".", "/", "~")) or name.count("/") >= 2


def _shadows_hub_id(name: str) -> bool:
    """A folder named like a Hub id (ORG/NAME, no ./ ~ or / in front) that exists here: transformers and mmtune
    read the folder, never the Hub model, so a half-copied or empty folder of that name (a `git clone` stopped,
    a `mkdir -p` for a download) stops a run that meant the Hub id ("make sure you don't have a local directory
    with the same name", transformers' own hint)."""
    return name.count("/") == 1 and not name.startswith((".", "/", "~")) and Path(name).is_dir()


def unreadable_weights(folder: Path) -> list[tuple[str, str]]:
    """(file, why) for each *.safetensors file in `folder` whose header cannot be read: a Git LFS pointer
    (a clone without git-lfs leaves ~130-byte text files named like the weights) or a file cut short.
    transformers stops on them with "SafetensorError: Error while deserializing header: HeaderTooLarge"."""
    import json
    import struct

    bad = []
    for f in sorted(folder.glob("*.safetensors")):
        try:
            size = f.stat().st_size
            with open(f, "rb") as fh:
                head = fh.read(8)
                if head.startswith(b"version "):  # "version https://git-lfs.github.com/spec/v1"
                    bad.append((f.name, f"a Git LFS pointer ({size} bytes), not the weights"))
                    continue
                if len(head) < 8:
                    bad.append((f.name, f"{size} bytes: too short for a safetensors header"))
                    continue
                (n,) = struct.unpack("<Q", head)
                if n > size - 8:
                    bad.append((f.name, f"its header claims {n} bytes but the file holds {size}: cut short"))
                    continue
                header = json.loads(fh.read(n))
            # The header parses, but the tensors it lists may lie past the end (a download stopped in the data):
            # safetensors then stops with "incomplete metadata, file not fully covered".
            end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
            if 8 + n + end > size:
                bad.append((f.name, f"its tensors need {8 + n + end} bytes but the file holds {size}: cut short"))
        except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
            bad.append((f.name, f"its header does not parse ({type(e).__name__})"))
    return bad


def _raise_for_gguf(name: str, files: list[Path]) -> None:
    """A GGUF file (llama.cpp's single-file format, mostly quantized: Q4_K_M, Q8_0) in place of a save_pretrained
    folder: without this, a .gguf path read as "folder ... does not exist" (it does) and a folder of them as
    "save the model with save_pretrained into this folder". Its weights are quantized to llama.cpp's own block
    types (transformers' GGUF quantizer says is_trainable False); the checkpoint it was converted from trains."""
    gguf = [f for f in files if f.suffix.lower() == ".gguf"]
    if gguf:
        raise ModelLoadError(
            f"model.name {name} is a GGUF checkpoint ({gguf[0].name}: llama.cpp's format, quantized to its own block "
            "types); mmtune loads safetensors checkpoints saved with save_pretrained, and transformers' GGUF "
            "quantizer is not trainable", where="model.name",
            fix="model.name=<the hub id the GGUF was converted from> (its model card names the base model, e.g. "
                "Qwen/Qwen2.5-VL-7B-Instruct); adapter.method=qlora gives the 4-bit memory; a trained run exports "
                "back to GGUF with llama.cpp's convert_hf_to_gguf.py after mmtune export --merge")


def model_folder(name: str, revision: str | None = None, family: Family | None = None,
                 tokenizer: bool = True, weights: bool = True) -> Path | str:
    """A local folder holding the model, or the hub id when it may still be downloaded.

    Offline (HF_HUB_OFFLINE=1 or no network) a model that is not complete on disk is a
    ModelLoadError naming the missing files and the `mmtune download` command.
    """
    path = Path(name).expanduser()
    # A hub id is ORG/NAME; anything with more path parts (runs/x/final) is a folder, never downloaded.
    if is_local_name(name):
        if not path.is_dir():
            _raise_for_gguf(name, [path] if path.is_file() else [])
            _raise_for_run_folder(name)
            if path.is_file():
                raise ModelLoadError(f"model.name {name} is a file, not a model folder", where="model.name",
                                     fix=f"model.name={path.parent} if that folder was saved with save_pretrained, "
                                         "or a hub id")
            raise ModelLoadError(f"model folder {name} does not exist", where="model.name",
                                 fix="point model.name at a folder saved with save_pretrained, or use a hub id")
        miss = missing_files(path, family, tokenizer, weights)
        if miss:
            if "config.json" in miss:
                _raise_for_gguf(name, sorted(path.glob("*.gguf")))
                _raise_for_run_folder(name)
            have = ", ".join(sorted(p.name for p in path.iterdir())[:20]) or "nothing"
            what, fix = f"model folder {name} lacks: {', '.join(miss)} (it holds: {have})", \
                "save the model with save_pretrained into this folder"
            if _shadows_hub_id(name):
                what += (f"; {name} is also the form of a Hub id, and a folder of that name here ({path.resolve()}) "
                         "is read instead of the Hub model")
                fix = (f"to train the Hub model {name}, rename or remove the folder {path.resolve()} (or run from "
                       f"another folder); to train the folder, {fix}")
            raise ModelLoadError(what, where="model.name", fix=fix)
        return path
    if name.lower().endswith(("-gguf", "_gguf")):  # the hub's convention for GGUF-only repos (Qwen, unsloth, bartowski)
        _raise_for_gguf(name, [Path(name.rsplit("/", 1)[-1] + ".gguf")])
    snap = cached_snapshot(name, revision)
    if snap is not None:
        miss = missing_files(snap, family, tokenizer, weights)
        if not miss:
            return snap
        if _offline():
            raise ModelLoadError(f"model {name} is only partly in the local cache ({snap}); missing: {', '.join(miss)}",
                                 where="model.name", fix=f"mmtune download {name}   (on a machine with network)")
        return name
    if _offline():
        need = ["config.json", "model weights (*.safetensors)", "tokenizer (tokenizer.json / tokenizer_config.json)"]
        if family is not None and set(family.modalities) - {"text"}:
            need.append("preprocessor_config.json")
        from huggingface_hub import constants

        raise ModelLoadError(
            f"model {name} is not in the local cache ({constants.HF_HUB_CACHE}) and downloads are off "
            f"(HF_HUB_OFFLINE); missing: {', '.join(need)}",
            where="model.name", fix=f"mmtune download {name}   (then run again; or point model.name at a local folder)")
    return name
