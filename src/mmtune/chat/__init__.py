"""`mmtune chat`: talk to a trained run (its best checkpoint, adapter or full) or to any model.

The prompt is built by the run's own Encoder (same chat template, system prompt, media caps, video
frames, audio rate as training) and answered by evaluation's `generate_answers` (greedy,
`eval.max_new_tokens`), so what chat says is what evaluation would have scored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import MMTuneError

MEDIA_FLAGS = ("image", "video", "audio")


def is_run_or_checkpoint(target: Path) -> bool:
    return target.is_dir() and any((target / n).exists() for n in ("trainable.safetensors", "best",
                                                                    "config.resolved.yaml"))


@dataclass
class ChatSession:
    model: object
    encoder: object
    pad_id: int
    dtype: object
    device: object
    autocast: object
    max_new_tokens: int
    source: str  # what was loaded, for the banner
    history: list[dict] = field(default_factory=list)

    def media_part(self, kind: str, path: str | Path) -> dict:
        p = Path(path).expanduser()
        if kind not in self.encoder.modalities:
            raise MMTuneError(f"this model does not take {kind}", where=f"--{kind} {path}",
                              fix=f"it takes: {', '.join(sorted(self.encoder.modalities))}")
        if not p.exists():
            raise MMTuneError(f"{kind} file not found: {p}", where=f"--{kind} {path}", fix="check the path")
        part = {"type": kind, "path": str(p.resolve())}
        _check_attachment(part, kind, path, self.encoder)
        return part

    def ask(self, text: str, media: list[dict] = (), streamer=None) -> str:
        """One user turn (media first, then the text, as the training data puts them) -> the answer.
        The conversation so far, media included, is the context."""
        from ..data.records import Record
        from ..evaluate.run_eval import generate_answers

        turn = {"role": "user", "content": [*media, {"type": "text", "text": text}]}
        record = Record(id=f"chat-{len(self.history) // 2}", source="chat", messages=[*self.history, turn])
        [answer] = generate_answers(self.model, self.encoder, [record], device=self.device, dtype=self.dtype,
                                    pad_id=self.pad_id, batch_size=1, max_new_tokens=self.max_new_tokens,
                                    autocast=self.autocast, streamer=streamer)
        self.history += [turn, {"role": "assistant", "content": [{"type": "text", "text": answer}]}]
        return answer

    def reset(self) -> None:
        self.history.clear()

    def streamer(self, out=None):
        """Tokens printed as they are generated (the prompt and special tokens are not)."""
        from transformers import TextStreamer

        class _To(TextStreamer):
            def on_finalized_text(self, text: str, stream_end: bool = False):
                print(text, end="" if not stream_end else "\n", flush=True, file=out)

        return _To(self.encoder.tokenizer, skip_prompt=True, skip_special_tokens=True)


def _check_attachment(part: dict, kind: str, given, encoder) -> None:
    """An attachment is read now, the way the question will read it, so a folder, a text file or a damaged
    file is an error about `--image PATH`, not one about a data record in the middle of generation."""
    from ..data import media
    from ..errors import DataError

    where = f"--{kind} {given}"
    try:
        if kind == "image":
            media.load_image(part, where)
        elif kind == "audio":
            media.load_audio(part, where, encoder.sampling_rate)
        else:
            media.load_video(part, where, n_frames=encoder.cfg.model.video_frames, fps=encoder.cfg.model.video_fps)
    except DataError as e:  # a BadRecord too
        raise MMTuneError(e.what, where=where, fix=f"give a readable {kind} file"
                          + (" (a folder is read as video frames: --video)" if Path(part["path"]).is_dir() else "")) from None


def load_session(target: str, *, device: str | None = None, system: str | None = None,
                 max_new_tokens: int | None = None) -> ChatSession:
    """A run folder or checkpoint (its config.resolved.yaml says how to rebuild it), else a model name
    or folder (a Hub id, an exported merged model, `tiny/qwen2-vl`)."""
    from ..build import build_run
    from ..config import load_config
    from ..data.encode import Encoder
    from ..export import run_config_of
    from ..export.origin import MARKER, as_exported_model, export_checkpoint, is_adapter_export
    from ..train.checkpoint import load_trainable, resolve_checkpoint

    path = Path(target).expanduser()
    origin = export_checkpoint(path)  # an mmtune export answers as its run did (its card says chat it)
    if is_run_or_checkpoint(path) or is_adapter_export(path):
        if not is_run_or_checkpoint(path) and origin is None:
            raise MMTuneError(f"{path} is an adapter export whose run is gone: its base model and the run's "
                              "settings are unknown here", where=str(path),
                              fix="chat with the run folder, or with a merged export (mmtune export RUN --merge)")
        ckpt = resolve_checkpoint(path if origin is None else origin)
        cfg = run_config_of(ckpt)
        source = f"{ckpt} ({cfg.model.name}, {cfg.adapter.method})"
        if origin is not None:
            source = f"{path}, the adapter of {source}"
    elif origin is not None and (path / "config.json").is_file():
        ckpt = None
        cfg = as_exported_model(run_config_of(origin), path.resolve())
        source = f"{target} (exported from {origin}: its system prompt, media settings and answer length)"
    else:
        if path.exists() and not (path / "config.json").is_file():
            raise MMTuneError(f"{path} is neither a run folder, a checkpoint nor a model folder", where=str(path),
                              fix="give runs/NAME (its best checkpoint), runs/NAME/checkpoint-N, a folder with "
                                  "config.json (e.g. from `mmtune export --merge`), or a model id")
        ckpt = None
        # A plain model: LoRA with nothing trained is the model itself (B = 0) and keeps its weights
        # frozen in their dtype, where adapter.method=full would copy every weight to fp32.
        cfg = load_config(None, [f"model.name={target}", "adapter.method=lora"])
        source = f"{target} (as published, no fine-tuning)"
        if (path / MARKER).is_file():
            source = f"{target} (an mmtune export whose run folder is gone: without the run's system prompt and settings)"
    updates = {}
    if device:
        updates["train"] = cfg.train.model_copy(update={"device": device})
    if system is not None:
        updates["data"] = cfg.data.model_copy(update={"system_prompt": system})
    cfg = cfg.model_copy(update=updates)
    run = build_run(cfg, with_data=False, with_optimizer=False)
    model = run.unwrapped_model()
    if ckpt is not None:
        load_trainable(model, ckpt, strict=False, base=cfg.model.name)
    model.eval()
    # The resolved run's processor (media caps applied once) and pad id: what evaluation used.
    return ChatSession(model=model, encoder=Encoder.for_run(run.resolved), pad_id=run.resolved.pad_token_id,
                       dtype=run.resolved.compute_dtype, device=run.accelerator.device,
                       autocast=run.accelerator.autocast, max_new_tokens=max_new_tokens or cfg.eval.max_new_tokens,
                       source=source)
