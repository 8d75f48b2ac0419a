"""`mmtune download` (fetch a hub model into the cache for offline runs) and `mmtune compose`."""

from __future__ import annotations

from pathlib import Path

import typer

from ..console import console, user_errors


def download(model_id: str, cache: Path | None = None, revision: str | None = None) -> Path:
    """Download every file of a hub model into the HF cache (or `cache`); returns the snapshot folder."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    from ..errors import ModelLoadError
    from .gated import gated_without_token

    refused = None if Path(model_id).expanduser().exists() else gated_without_token(model_id)
    if refused is not None:  # said before any request: the Hub would answer 401 after a wait
        raise ModelLoadError(f"cannot download {refused[0]}", where="mmtune download", fix=refused[1])
    try:
        return Path(snapshot_download(model_id, revision=revision, cache_dir=str(cache) if cache else None))
    except LocalEntryNotFoundError as e:
        raise ModelLoadError(f"cannot download {model_id}: no network or HF_HUB_OFFLINE is set ({e})",
                             where="mmtune download",
                             fix="run on a machine with network access and HF_HUB_OFFLINE unset, then copy the "
                                 "cache folder (~/.cache/huggingface/hub) over") from None
    except HfHubHTTPError as e:
        raise ModelLoadError(f"cannot download {model_id}: {e}", where="mmtune download",
                             fix="check the id; gated models need `huggingface-cli login` and accepted terms") from None


def register(app: typer.Typer) -> None:
    @app.command("download")
    @user_errors
    def download_cmd(model_id: str = typer.Argument(..., help="hub id, e.g. Qwen/Qwen2-VL-7B-Instruct"),
                     cache: Path = typer.Option(None, "--cache", help="cache folder (default: the HF cache)"),
                     revision: str = typer.Option(None, "--revision")):
        """Download a model into the local cache so later runs work offline (HF_HUB_OFFLINE=1)."""
        path = download(model_id, cache, revision)
        console.print(f"[green]downloaded[/] {model_id} -> {path}")
        if cache:
            console.print(f"use it offline with HF_HUB_CACHE={cache} HF_HUB_OFFLINE=1")

    @app.command("compose")
    @user_errors
    def compose_cmd(vision: str = typer.Option(None, "--vision", help="CLIP/SigLIP hub id or folder"),
                    audio: str = typer.Option(None, "--audio", help="Whisper hub id or folder (instead of --vision)"),
                    lm: str = typer.Option(..., "--lm", help="causal LM hub id or folder"),
                    out: Path = typer.Option(..., "--out", help="folder to write the composed model to"),
                    projector: str = typer.Option("mlp2x_gelu", "--projector", help="mlp2x_gelu | linear (vision)"),
                    vision_feature_layer: int = typer.Option(-2, "--vision-feature-layer")):
        """Build a vision (LLaVA-style) or audio (Qwen2-Audio-style) model from parts, as a transformers folder."""
        from ..errors import ConfigError
        from .compose import compose_audio, compose_llava, save_composed

        if (vision is None) == (audio is None):
            raise ConfigError("give exactly one of --vision (CLIP/SigLIP) and --audio (Whisper)", where="compose",
                              fix="mmtune compose --vision openai/clip-vit-large-patch14-336 "
                                  "--lm Qwen/Qwen2.5-7B-Instruct --out DIR")
        if audio is not None:
            composed = compose_audio(audio, lm)
        else:
            composed = compose_llava(vision, lm, projector=projector, vision_feature_layer=vision_feature_layer)
        save_composed(composed, out)
        for n in composed.notes:
            console.print(f"  {n}")
        console.print(f"[green]wrote[/] {out}")
