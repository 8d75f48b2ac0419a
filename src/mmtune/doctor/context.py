"""The pieces checks inspect, each built once and only when a check asks for it.

Pieces: `tree` (the merged YAML + profile + overrides, before validation), `cfg` (the RunConfig as
written), `resolved` (the one resolved run: every automatic decision, the processor and its media caps,
on the target GPU), `launched` (the resolved run this process launches: `resolved` unless the caller
supplies another -- `mmtune train --smoke` checks the launch against its tiny twin's run on the CPU, with the
smoke run's batch sizes and precision), `gpu` (the target GPU's spec), `model_config` (the model's transformers config, no
weights, no download; None when none is on disk or embedded), `loaded` (model + processor + family: real for tiny
twins, on `meta` for full-size models), `adapted` (the model after adapters), `scan` (one streaming pass
over the dataset through the training encoder's length engine), `encoder` (the run's training encoder),
`plan` (the planner's prediction).
A piece that cannot be built raises NotAvailable with the reason; the runner reports the checks that
needed it as not run. A piece that fails because of
the user's setup (a ModelLoadError, a DataError) also becomes a finding once, under `build_errors`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_MODEL = "model checks are not part of the fast pre-train subset"
# Pieces `mmtune train`'s fast pre-train subset never builds (no model, no data pass): the reason instead.
NOT_FAST = {"loaded": _MODEL, "adapted": _MODEL, "grad_model": _MODEL,
            "scan": "the data scan is not part of the fast pre-train subset"}


class NotAvailable(Exception):
    """A piece a check needs cannot be built here; the reason is shown instead of a guess."""


@dataclass
class BuildError:
    piece: str
    what: str
    where: str | None
    fix: str | None
    kind: str = ""  # the error class: ConfigError, ModelLoadError, DataError
    claimed: bool = False  # reported by a check that claims the piece


@dataclass
class DoctorContext:
    config_path: str | None
    overrides: dict[str, str] = field(default_factory=dict)
    gpu_name: str | None = None
    fast: bool = False
    write_clean: str | None = None
    max_records: int | None = None  # None = the whole dataset
    full: bool = False  # decode every record's media, not a stated random sample of large splits
    assume_installed: str = "gpu-extra"  # the target GPU machine's optional packages (resolve/target.py)
    _cache: dict[str, Any] = field(default_factory=dict)
    _failed: dict[str, str] = field(default_factory=dict)
    build_errors: list[BuildError] = field(default_factory=list)
    config_error: Any = None  # the ConfigError when the config did not validate
    user_offline: bool = True  # whether the user's environment is offline (the doctor itself always is)
    piece_seconds: dict[str, tuple[float, float]] = field(default_factory=dict)  # piece -> (wall, CPU) to build it

    # -- access ---------------------------------------------------------------------------------
    def need(self, piece: str):
        if piece in self._cache:
            return self._cache[piece]
        if piece in self._failed:
            raise NotAvailable(self._failed[piece])
        builder = getattr(self, f"_build_{piece}", None)
        if builder is None:
            raise KeyError(f"unknown doctor piece {piece!r}")
        if self.fast and piece in NOT_FAST:
            raise NotAvailable(NOT_FAST[piece])
        from ..errors import MMTuneError

        t0, c0 = time.perf_counter(), time.process_time()
        try:
            value = builder()
        except NotAvailable as e:
            self._failed[piece] = str(e)
            raise
        except MMTuneError as e:
            # The user's setup is at fault: say it once, as a finding, and skip what depends on it.
            self.build_errors.append(BuildError(piece, e.what, e.where, e.fix, type(e).__name__))
            self._failed[piece] = f"{piece} could not be built: {e.what}"
            raise NotAvailable(self._failed[piece]) from None
        finally:
            # Where the doctor's time goes (benchmarks/startup.py): wall and CPU seconds per piece, each
            # including the pieces it needed first (`resolved` includes `cfg`).
            self.piece_seconds[piece] = (time.perf_counter() - t0, time.process_time() - c0)
        self._cache[piece] = value
        return value

    def has(self, piece: str) -> bool:
        try:
            self.need(piece)
            return True
        except NotAvailable:
            return False

    def put(self, piece: str, value) -> None:
        """Supply a piece directly (tests build broken setups this way)."""
        self._cache[piece] = value

    # -- builders -------------------------------------------------------------------------------
    def _build_tree(self) -> dict:
        from ..config.loader import layered, read_yaml, shipped_data_notes
        from ..errors import ConfigError

        try:
            tree = read_yaml(self.config_path) if self.config_path is not None else {}
            self.sources: dict[str, str] = {}  # the layers' order: config/loader.py's docstring
            tree = layered(tree, dict(self.overrides), self.sources, recipe=str(self.config_path or "the recipe"))
            shipped_data_notes(tree, self.sources)
            return tree
        except ConfigError as e:
            self.config_error = e
            raise NotAvailable(f"the config could not be read: {e.what}") from None

    def _build_cfg(self):
        from ..config.loader import validate, with_sources
        from ..errors import ConfigError

        tree = self.need("tree")
        ov = {k: v for k, v in self.overrides.items() if k != "profile"}
        try:
            return with_sources(validate(tree, path=self.config_path, overrides=ov), getattr(self, "sources", {}))
        except ConfigError as e:
            self.config_error = e
            raise NotAvailable("the config is invalid (see MM019)") from None

    def _build_gpu(self):
        cfg = self.need("cfg") if self.has("cfg") else None
        name = self.gpu_name or (cfg.train.gpu if cfg is not None else None)
        if not name:
            raise NotAvailable("no target GPU given (--gpu NAME or train.gpu)")
        from ..gpus import get_gpu

        return get_gpu(name)

    def _build_resolved(self):
        """The run as `train` on the target will run it: the same resolve_run, the same decisions."""
        from ..resolve import resolve_run, target_for

        cfg = self.need("cfg")
        return resolve_run(cfg, target_for(cfg, self.gpu_name, local=False, assume_installed=self.assume_installed))

    def _build_launched(self):
        """The run as launched: the target's resolved run, unless train's preflight supplied the one it runs."""
        return self.need("resolved")

    def _build_loaded(self):
        from .pieces import build_loaded

        return build_loaded(self.need("resolved"))

    def _build_adapted(self):
        from .pieces import build_adapted

        return build_adapted(self.need("resolved"))

    def _build_grad_model(self):
        """A real model with adapters for a real backward: the config's own model when it is a tiny
        twin, else the family's tiny twin with the same adapter config (gradient flow depends on the
        module graph and the adapter placement, which the twin shares, not on the widths)."""
        from .pieces import build_grad_model

        return build_grad_model(self.need("resolved"))

    def _build_scan(self):
        from .datascan import scan_dataset

        self._need_renderable()
        return scan_dataset(self.need("resolved"), limit=self.max_records,
                            write_clean=Path(self.write_clean) if self.write_clean else None, full=self.full)

    def _need_renderable(self) -> None:
        """The processor exists (else its own finding, said once) and can render conversations: without a
        chat template (a base model's tokenizer) every record fails in apply_chat_template, which MM030
        reports once; the checks that render records are then not run, instead of each crashing."""
        pinfo = self.need("processor_info")
        proc = pinfo.processor
        tok = getattr(proc, "tokenizer", proc)
        from ..data.documents import documents_only

        if documents_only(self.need("cfg").data):
            return  # raw text (data.format=text) is not rendered by a template
        if not (getattr(proc, "chat_template", None) or getattr(tok, "chat_template", None)):
            raise NotAvailable("the model's tokenizer has no chat template, so no record can be rendered (see MM030)")

    def _build_processor_info(self):
        from .pieces import build_processor_info

        return build_processor_info(self.need("resolved"))

    def _build_encoder(self):
        """The run's training encoder, one for every check that renders or encodes a record."""
        from ..data.encode import Encoder

        self._need_renderable()
        return Encoder.for_run(self.need("resolved"))

    def _build_model_config(self):
        """The model's transformers config, read once for every check that compares against it (None
        when none is on disk or embedded). Tests supply a broken one with put("model_config", ...)."""
        from .pieces import model_config

        return model_config(self.need("cfg"))

    def _build_plan(self):
        from .pieces import build_plan

        self.need("gpu")
        return build_plan(self.need("resolved"))
