"""Checkpoints: save, find the latest, resume with identical continuation, keep best + last K.

A checkpoint folder `checkpoint-<step>/` holds:
- `adapter/` (PEFT format, `PeftModel.from_pretrained` loads it) or `model/` (full fine-tuning:
  `from_pretrained`-loadable), plus the processor;
- `trainable.safetensors`: every trainable tensor by parameter name, the exact resume source;
- `state.json` + `state.safetensors`: optimizer, scheduler, grad scaler, RNG states (python, numpy, torch,
  cuda), step, data position (epoch, batch index within the epoch), best-metric bookkeeping, the data
  fingerprint -- no pickle anywhere (train/state_files.py); a checkpoint of the earlier format
  (`state.pt`) is read through a guarded converter that executes nothing (train/legacy_state.py);
- `meta.json`: step, metrics at save time, the data fingerprint, the base model's weight-file fingerprint
  (models/base_fingerprint.py: chat, export, eval and resume refuse another base of the same shapes);
- `config.json`: the run's config (the resume guard compares it);
- `manifest.json`, written last: every other file's size and sha256.
Written to a temporary folder, every file fsynced, then renamed (and the parent folder fsynced), so a
kill or power loss mid-save never leaves a half checkpoint that resume would pick up. On resume the
manifest is verified, and a checkpoint that fails (truncated, zero-byte, flipped bytes) is passed over
for the newest one that verifies, with a message naming the file (train/durable.py does the disk work).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path

from ..config.schema import LORA_METHODS
from .durable import fmt_bytes, fsync_dir, fsync_tree, is_disk_full, verify_manifest, write_manifest
from .state_files import write_state

CKPT_RE = re.compile(r"^checkpoint-(\d+)$")
TMP_PREFIX = ".tmp-checkpoint-"
REPLACED = ".replaced"  # a complete checkpoint moved aside while a new save of the same step takes its name


def list_checkpoints(output_dir: str | Path) -> list[Path]:
    d = Path(output_dir)
    if not d.is_dir():
        return []
    # A folder with a manifest is listed even when its state is gone, so the damage is named on resume.
    found = [(int(m.group(1)), p) for p in d.iterdir() if p.is_dir() and (m := CKPT_RE.match(p.name))
             and any((p / f).is_file() for f in ("state.json", "state.pt", "manifest.json"))]
    return [p for _, p in sorted(found)]


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    ckpts = list_checkpoints(output_dir)
    return ckpts[-1] if ckpts else None


def newest_valid_checkpoint(output_dir: str | Path) -> tuple[Path | None, list[str]]:
    """The newest checkpoint whose manifest verifies, and one line per newer checkpoint passed over
    (what was wrong with it). A checkpoint from before manifests existed is taken as it is."""
    passed: list[str] = []
    for ckpt in reversed(list_checkpoints(output_dir)):
        problem = verify_manifest(ckpt)
        if problem is None:
            return ckpt, passed
        passed.append(f"{ckpt.name}: {problem}")
    return None, passed


def clean_leftovers(output_dir: str | Path) -> list[str]:
    """Remove the temporary folders of saves that did not finish (a kill, a full disk): they hold no
    usable checkpoint and would otherwise keep the disk full."""
    d = Path(output_dir)
    gone = []
    if d.is_dir():
        for p in d.iterdir():
            if p.name.startswith(TMP_PREFIX) and p.name.endswith(REPLACED) and p.is_dir():
                final = d / f"checkpoint-{p.name[len(TMP_PREFIX):-len(REPLACED)]}"
                if not final.exists():  # killed between the two renames: the old checkpoint is the one to keep
                    p.rename(final)
                    continue
            if p.name.startswith(TMP_PREFIX) and p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
                gone.append(p.name)
    return gone


def folder_bytes(folder: Path) -> int:
    """The disk space a folder's files take: allocated blocks where larger than the size (every small file
    takes a whole block: a checkpoint of many small processor files needs more than its sizes add up to)."""
    total = 0
    for f in folder.rglob("*"):
        try:
            st = f.stat()
        except OSError:  # removed meanwhile
            continue
        if f.is_file():
            total += max(st.st_size, getattr(st, "st_blocks", 0) * 512)
    return total


def estimate_checkpoint_bytes(run) -> int:
    """One checkpoint's size: the previous one's when there is one, else from the state it will hold
    (trainable tensors twice -- exact copy and loadable export -- plus Adam's two moments; a full
    fine-tune exports the whole model)."""
    prev = latest_checkpoint(run.cfg.output_dir)
    if prev is not None:
        return folder_bytes(prev)
    model = run.unwrapped_model()
    trainable = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    exported = (sum(p.numel() * p.element_size() for p in model.parameters())
                if run.cfg.adapter.method == "full" else trainable)
    return 3 * trainable + exported


def resolve_checkpoint(path: Path) -> Path:
    """A checkpoint folder as given, else a run folder's best, else its latest; verified against its manifest
    (eval, export and chat never read a truncated or changed file as if it were the trained weights)."""
    from ..errors import MMTuneError

    path = Path(path)
    from .sharded_checkpoint import has_sharded

    if not path.is_dir():
        raise MMTuneError(f"{path} does not exist" if not path.exists() else f"{path} is a file, not a run folder",
                          where=str(path), fix="give runs/NAME (a run folder) or runs/NAME/checkpoint-N")
    if (path / "trainable.safetensors").is_file() or has_sharded(path) or (path / "manifest.json").is_file():
        return _verified(path, path)
    best = path / "best"
    if best.is_symlink() and not best.exists():
        latest, _ = newest_valid_checkpoint(path)
        raise MMTuneError(f"{best} points at {os.readlink(best)}, which is gone", where=str(best),
                          fix=(f"give a checkpoint explicitly, e.g. {latest}" if latest is not None
                               else "no intact checkpoint is left in this run folder"))
    if best.exists():
        return _verified(best.resolve(), path)
    latest = latest_checkpoint(path)
    if latest is None:
        raise MMTuneError(f"{path} holds no checkpoint", where=str(path),
                          fix="give runs/NAME/checkpoint-N or a run folder with checkpoints")
    return _verified(latest, path)


def _verified(ckpt: Path, given: Path) -> Path:
    from ..errors import MMTuneError

    problem = verify_manifest(ckpt)
    if problem is None:
        return ckpt
    run_dir = ckpt.parent
    intact = [c for c in reversed(list_checkpoints(run_dir)) if c != ckpt and verify_manifest(c) is None]
    raise MMTuneError(f"checkpoint {ckpt} is damaged: {problem}", where=str(ckpt),
                      fix=(f"use an intact one: {intact[0]}" if intact else
                           "no intact checkpoint is left beside it: train again (or restore the folder from a copy)"))


def rng_state() -> dict:
    import numpy as np
    import torch

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def trainable_state(model) -> dict:
    return {n: p.detach().cpu().contiguous() for n, p in model.named_parameters() if p.requires_grad}


def check_disk(run) -> None:
    """Refuse before writing when the disk cannot hold one more checkpoint: a save that fails half way
    costs the time since the last save and leaves nothing usable."""
    from ..errors import MMTuneError

    out = Path(run.cfg.output_dir)
    need = estimate_checkpoint_bytes(run)
    free = shutil.disk_usage(out).free
    if free < need:
        raise MMTuneError(
            f"not enough free disk for a checkpoint: {fmt_bytes(free)} free, one checkpoint needs about "
            f"{fmt_bytes(need)}", where=str(out),
            fix="free space on that disk (old runs, caches) or point output_dir at a larger disk, then run the "
                "same command again: training resumes from the last checkpoint")


def save_checkpoint(run, step: int, train_state: dict, metrics: dict | None = None) -> Path:
    """Write checkpoint-<step> durably; every rank calls it (each writes its RNG state, and under a
    sharded strategy its shards; the main rank writes the rest, the manifest and renames). A full disk
    or an I/O error at any write is an MMTuneError saying how much space is needed and free; the
    temporary folder is removed and the checkpoints saved before are left as they were."""
    from ..errors import MMTuneError

    check_disk(run)  # on every rank: the same folder, the same answer, so no rank waits for another in vain
    out = Path(run.cfg.output_dir)
    tmp = out / f"{TMP_PREFIX}{step}"
    try:
        return _write_checkpoint(run, step, train_state, metrics, out, tmp)
    except BaseException as e:
        # Whatever stopped the save (a full disk, an I/O error, a signal's second KeyboardInterrupt): the
        # partial folder is useless and would keep the disk full; the error itself goes on unchanged
        # unless it is the disk's, which is said in words below.
        written = folder_bytes(tmp) if tmp.is_dir() else 0
        shutil.rmtree(tmp, ignore_errors=True)
        if not isinstance(e, OSError) and not (isinstance(e, Exception) and is_disk_full(e)):
            raise
        full = is_disk_full(e)
        what = "the disk is full" if full else (e.strerror or str(e))
        try:
            free = f"; {fmt_bytes(shutil.disk_usage(out).free)} free now"
        except OSError:
            free = ""
        need = f"; this save needs about {fmt_bytes(estimate_checkpoint_bytes(run))} (it had written " \
               f"{fmt_bytes(written)} when it failed){free}" if full else ""
        where = getattr(e, "filename", None) if isinstance(e, OSError) else None
        raise MMTuneError(
            f"saving checkpoint-{step} failed: {what} ({e.__class__.__name__}"
            + (f", errno {e.errno}" if isinstance(e, OSError) else "") + f"){need}; the earlier checkpoints are "
            "intact and the partial one was removed", where=str(where or tmp),
            fix=("free space on that disk or use a larger one for output_dir" if full else
                 "check that output_dir is writable and its disk healthy")
            + "; then run the same command again: training resumes from the last good checkpoint") from None


def _write_checkpoint(run, step, train_state, metrics, out: Path, tmp: Path) -> Path:
    from safetensors.torch import save_file

    from ..sharding import full_state_dict
    from .deepspeed_checkpoint import gathered_state, save_deepspeed, writes_deepspeed
    from .sharded_checkpoint import save_rank_rng, save_sharded, writes_sharded

    acc = run.accelerator
    main = acc.is_main_process
    final = out / f"checkpoint-{step}"
    if main:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
    acc.wait_for_everyone()
    # ---- what every rank writes: its RNG, and (sharded strategies) its shards -- collectives inside
    save_rank_rng(tmp, acc.process_index, acc.num_processes, rng_state())
    model = run.unwrapped_model()
    sharded = writes_sharded(run)
    zero = writes_deepspeed(run)  # DeepSpeed ZeRO: each rank writes its optimizer partition (deepspeed_checkpoint.py)
    if zero:
        save_deepspeed(run, tmp)
        whole, trainable = gathered_state(run)  # on the main rank (ZeRO-3: gathered, a collective)
    elif sharded:
        save_sharded(run, tmp)
        # The loadable adapter is small: gathered onto the main rank. A full model is gathered by `mmtune
        # export` from the shards, not at every save.
        gathered = full_state_dict(model, trainable_only=True) if run.cfg.adapter.method != "full" else None
    acc.wait_for_everyone()
    if not main:
        return final
    # ---- the main rank: loadable weights, state, meta, config; then manifest and rename
    if zero:
        export_weights(model, run, tmp, state_dict=trainable if run.cfg.adapter.method != "full" else whole)
        save_file(trainable, str(tmp / "trainable.safetensors"))
    elif not sharded:
        export_weights(model, run, tmp)
        save_file(trainable_state(model), str(tmp / "trainable.safetensors"))
    elif gathered is not None:
        export_weights(model, run, tmp, state_dict=gathered)
    elif run.processor is not None and hasattr(run.processor, "save_pretrained"):
        run.processor.save_pretrained(str(tmp / "processor"))
    data = train_state.get("data")
    train_state = {k: v for k, v in train_state.items() if k != "data"}
    write_state(tmp, "state", {
        "optimizer": None if sharded or zero else run.optimizer.state_dict(),  # in sharded/ or deepspeed/
        "scheduler": run.scheduler.state_dict(),
        "scaler": run.scaler_state(),
        "rng": rng_state(),
        "world_size": acc.num_processes,
        "train_state": train_state,
    })
    # The data fingerprint taken at start (train/data_fingerprint.py) goes into meta.json, which the
    # resume guard reads before the state itself.
    # The base model's weight files as they were at start (models/base_fingerprint.py): chat, export, eval
    # and resume compare them with the model at model.name then.
    (tmp / "meta.json").write_text(json.dumps({"step": step, "metrics": metrics or {}, "data": data,
                                               "base_weights": run.base_weights}, indent=2))
    (tmp / "config.json").write_text(json.dumps(run.cfg.model_dump(mode="json"), indent=2))
    fsync_tree(tmp)
    write_manifest(tmp)  # last: its presence says every file above is complete
    if final.exists():  # the same step saved again (a resumed run's signal save): the old one moves aside
        aside = out / f"{TMP_PREFIX}{step}{REPLACED}"  # deleted only once the new one holds the name
        shutil.rmtree(aside, ignore_errors=True)
        final.rename(aside)
        tmp.rename(final)
        shutil.rmtree(aside, ignore_errors=True)  # a kill before this: clean_leftovers removes it
    else:
        tmp.rename(final)
    fsync_dir(out)  # the rename itself survives a power loss
    return final


def export_weights(model, run, folder: Path, state_dict: dict | None = None) -> None:
    """The loadable part: a PEFT adapter folder, or a full model folder; plus the processor.
    `state_dict`: the tensors gathered from a sharded model (the model's own are shards)."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a shard-writing bar per checkpoint is noise in the run log
    extra = {"state_dict": state_dict} if state_dict is not None else {}
    if run.cfg.adapter.method in LORA_METHODS:
        model.save_pretrained(str(folder / "adapter"), **extra)
        target = folder / "adapter"
    else:
        model.save_pretrained(str(folder / "model"), safe_serialization=True, **extra)
        target = folder / "model"
    if run.processor is not None and hasattr(run.processor, "save_pretrained"):
        run.processor.save_pretrained(str(target))


def base_changed(ckpt: Path, base: str, example: str, *, what: str | None = None, fix: str | None = None):
    """The error for a checkpoint whose trained tensors do not fit the base model its own run names (chat,
    export and serve rebuild the model from the run's config.resolved.yaml): the model at model.name is not
    the one it was trained on (replaced, re-downloaded as another size or revision). `what`: how it differs
    when the shapes agree (check_base_weights)."""
    from ..errors import MMTuneError

    run = ckpt.parent if (ckpt.parent / "config.resolved.yaml").is_file() else ckpt
    what = what or f"the trained tensors of {ckpt} do not fit the model at model.name={base} (e.g. {example})"
    return MMTuneError(f"{what}: that is not the model this run was trained on", where=f"{ckpt}: model.name",
                       fix=f"put the model the run was trained on back at {base} (model.name in "
                           f"{run / 'config.resolved.yaml'})" + (f"; {fix}" if fix else ""))


def check_base_weights(ckpt: Path, base: str, *, fix: str | None = None) -> None:
    """Stop when the weight files at model.name are not the ones the checkpoint's run started from, though
    every shape fits (peft would load the adapter onto them without a word): models/base_fingerprint.py."""
    from ..models.base_fingerprint import differs

    try:
        saved = json.loads((ckpt / "meta.json").read_text(encoding="utf-8")).get("base_weights")
    except (OSError, ValueError, AttributeError):
        return  # read_meta names a damaged meta.json where it matters (resume)
    why = differs(saved, base)
    if why is not None:
        raise base_changed(ckpt, base, "", what=f"the weight files at model.name={base} are not the ones {ckpt.name}'s "
                                                f"run started from: {why}", fix=fix)


def load_trainable(model, ckpt: Path, *, strict: bool = True, base: str | None = None) -> None:
    """Copy the checkpoint's trainable tensors into `model` (by parameter name, unwrapped model).

    strict: every trainable parameter of the model must be in the checkpoint (resume); evaluation only
    needs every saved tensor to have a home. base: the model.name of the checkpoint's own run, when `model`
    was rebuilt from it (chat, export): tensors that do not fit then mean that model is another one now.
    """
    import torch
    from safetensors.torch import load_file

    from .sharded_checkpoint import has_sharded, load_sharded_weights

    if not (ckpt / "trainable.safetensors").is_file() and has_sharded(ckpt):
        load_sharded_weights(model, ckpt)  # written under train.strategy=fsdp: DCP reshards onto this model
        if base is not None:
            check_base_weights(ckpt, base)
        return
    saved = load_file(str(ckpt / "trainable.safetensors"))
    params = dict(model.named_parameters())
    missing = [n for n, p in params.items() if p.requires_grad and n not in saved] if strict else []
    unexpected = [n for n in saved if n not in params]
    if unexpected and base is not None:
        raise base_changed(ckpt, base, f"{unexpected[0]} has no place in it")
    if missing or unexpected:
        from ..errors import MMTuneError

        raise MMTuneError(
            f"checkpoint {ckpt} does not match this run's trainable parameters "
            f"({len(missing)} missing, {len(unexpected)} unexpected, e.g. {(missing or unexpected)[0]})",
            where=str(ckpt),
            fix="use the config that wrote it; to start fresh, train.resume=false or a new output_dir",
        )
    # A shape that differs (another adapter rank) would fail inside copy_ as a bare RuntimeError.
    shapes = [f"{n}: saved {tuple(t.shape)}, this run {tuple(params[n].shape)}" for n, t in saved.items()
              if tuple(t.shape) != tuple(params[n].shape)]
    if shapes and base is not None:
        raise base_changed(ckpt, base, shapes[0].replace("this run", "the base model"))
    if shapes:
        from ..errors import MMTuneError

        raise MMTuneError(f"checkpoint {ckpt} holds tensors of other shapes than this run's ({len(shapes)}, e.g. "
                          f"{shapes[0]}): it was written with another adapter rank or model",
                          where=str(ckpt), fix="use the config that wrote it; to start fresh, train.resume=false or a "
                                               "new output_dir")
    if base is not None:  # after the shapes: a shape that differs is the clearer message
        check_base_weights(ckpt, base)
    with torch.no_grad():
        for n, t in saved.items():
            params[n].copy_(t.to(params[n].device, params[n].dtype))


def read_meta(ckpt: Path) -> dict:
    """meta.json: {"step", "metrics", "data"}; an MMTuneError naming it when it is missing or not ours
    (a checkpoint from before manifests has nothing else to vouch for it)."""
    from ..errors import MMTuneError

    try:
        meta = json.loads((ckpt / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        meta = e
    if not isinstance(meta, dict) or not isinstance(meta.get("step"), int) or isinstance(meta.get("step"), bool):
        raise MMTuneError(f"cannot resume from {ckpt.name}: its meta.json is missing or does not hold the step",
                          where=str(ckpt / "meta.json"), fix=_other_checkpoint_fix(ckpt))
    if not isinstance(meta.get("metrics", {}), dict):
        meta["metrics"] = {}
    return meta


def read_checkpoint_state(ckpt: Path) -> dict:
    """The state a checkpoint holds (optimizer, scheduler, scaler, RNG, train_state) as plain values and
    tensors: `state.json` + `state.safetensors`, or an earlier checkpoint's `state.pt` through the guarded
    converter. Nothing read is executed; a state that is not one mmtune wrote is an MMTuneError."""
    from ..errors import MMTuneError
    from .legacy_state import LegacyStateRefused, read_legacy_state
    from .state_files import StateFormatError, has_state, read_state

    try:
        if has_state(ckpt, "state"):
            state = read_state(ckpt, "state")
        elif (ckpt / "state.pt").is_file():
            state = read_legacy_state(ckpt / "state.pt")
        else:
            raise StateFormatError("it holds neither state.json nor state.pt")
        if not isinstance(state, dict) or not isinstance(state.get("train_state"), dict):
            raise StateFormatError("its state lacks the train state (step, data position)")
        _check_train_state(state["train_state"])
        return state
    except (StateFormatError, LegacyStateRefused) as e:
        raise MMTuneError(f"cannot resume from {ckpt.name}: {e}", where=str(ckpt), fix=_other_checkpoint_fix(ckpt)) \
            from None


def _check_train_state(ts: dict) -> None:
    """The values the loop continues from have the types it needs (a hand-edited state would otherwise
    fail steps later, far from the cause)."""
    from .state_files import StateFormatError

    def whole(v):
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    pos = ts.get("position")
    if not whole(ts.get("step")):
        raise StateFormatError(f"the train state's step is {ts.get('step')!r}, not a step number")
    if not isinstance(pos, dict) or not whole(pos.get("epoch")) or not whole(pos.get("index")):
        raise StateFormatError(f"the train state's position is {pos!r}, not {{epoch, index}}")
    if not isinstance(ts.get("best"), dict) or not isinstance(ts.get("accepted_changes", []), list):
        raise StateFormatError("the train state's best-checkpoint record or accepted changes are not what mmtune writes")


def _other_checkpoint_fix(ckpt: Path) -> str:
    older = [c for c in reversed(list_checkpoints(ckpt.parent)) if c.name != ckpt.name and verify_manifest(c) is None]
    return ((f"move {ckpt} out of the run folder to resume from {older[0].name}, or " if older else "")
            + "start over with train.resume=false (or a new output_dir)")


def load_checkpoint(run, ckpt: Path) -> dict:
    """Restore trainable tensors, optimizer, scheduler, scaler and RNG (this rank's own where it was
    saved); return the saved train_state. Every rank calls it. A state whose values do not fit this run
    (a file edited by hand) is an MMTuneError naming the checkpoint, not a traceback."""
    from ..errors import MMTuneError

    state = read_checkpoint_state(ckpt)
    try:
        return _restore(run, ckpt, state)
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise MMTuneError(f"cannot resume from {ckpt.name}: its state does not fit this run "
                          f"({e.__class__.__name__}: {str(e)[:300]})", where=str(ckpt),
                          fix=_other_checkpoint_fix(ckpt)) from None


def _restore(run, ckpt: Path, state: dict) -> dict:
    from ..console import console
    from ..errors import MMTuneError
    from .deepspeed_checkpoint import has_deepspeed, load_deepspeed, writes_deepspeed
    from .sharded_checkpoint import has_sharded, load_sharded, rank_rng, writes_sharded

    fresh = [{k: v for k, v in g.items() if k != "params"} for g in run.optimizer.param_groups]
    if has_deepspeed(ckpt) != writes_deepspeed(run):  # the optimizer state of one cannot go into the other
        wrote, n = state_strategy(ckpt), state.get("world_size")
        engines = ("a DeepSpeed engine", "PyTorch's optimizer")
        was, now = engines if has_deepspeed(ckpt) else engines[::-1]
        raise MMTuneError(f"{ckpt.name} holds the optimizer state of {was} (train.strategy={wrote} on {n} "
                          f"process(es)); this run steps with {now} (train.strategy={run.resolved.strategy} on "
                          f"{run.accelerator.num_processes}): the two do not convert into each other", where=str(ckpt),
                          fix=f"resume with train.strategy={wrote} on {n} process(es), or start over with "
                              "train.resume=false (its weights alone: mmtune eval / export read trainable.safetensors)")
    if has_deepspeed(ckpt):
        load_deepspeed(run, ckpt, state.get("world_size"))  # weights, master weights, optimizer: exact
    elif has_sharded(ckpt):
        load_sharded(run, ckpt)  # weights and optimizer, resharded onto this world size
    elif writes_sharded(run) and run.accelerator.num_processes > 1:
        raise MMTuneError(f"{ckpt.name} was written without sharding (train.strategy={state_strategy(ckpt)}); "
                          "this run shards its optimizer state (train.strategy=fsdp)", where=str(ckpt),
                          fix="resume with the strategy that wrote it (train.strategy=ddp), or start over with "
                              "train.resume=false")
    else:
        from .optimizer_state import load_optimizer_state

        load_trainable(run.unwrapped_model(), ckpt)
        load_optimizer_state(run, ckpt, state)  # another train.optimizer's state (accepted change): fresh
    if not run.cfg.train.accept_changes:  # another base accepted on purpose is the user's call
        check_base_weights(ckpt, run.cfg.model.name, fix="or start over on this model: train.resume=false or a new "
                                                         "output_dir")
    run.scheduler.load_state_dict(state["scheduler"])
    _apply_config_hyperparameters(run, fresh)
    run.load_scaler_state(state["scaler"])
    acc = run.accelerator
    mine, note = rank_rng(ckpt, acc.process_index, acc.num_processes)
    if mine is not None or acc.process_index == 0:
        set_rng_state(mine if mine is not None else state["rng"])
    else:
        # A rank the saving run did not have (resumed on more processes): its own stream, not a copy of the
        # main rank's, which would draw the main rank's dropout masks again (train/seeding.py).
        from .seeding import seed_streams

        seed_streams(run.cfg.train.seed + int(state["train_state"].get("step", 0)), acc.process_index)
    if note and acc.is_main_process:
        console.print(f"[yellow]note:[/] {note}")
    train_state = state["train_state"]
    saved_world = state.get("world_size")
    if saved_world and saved_world != acc.num_processes:
        train_state = {**train_state, "position": _reposition(train_state["position"], saved_world, acc,
                                                               ckpt.name)}
    return train_state


def _reposition(position: dict, saved_world: int, acc, name: str) -> dict:
    """The data position of a checkpoint written by `saved_world` processes, on this world size: the
    records of the epoch seen so far are kept as a count (each rank's micro-batch index scaled), so an
    epoch still has its length. Mid-epoch, which records come next differs from a continuation on the old
    world size (each rank reads its own slice of the epoch): said, not hidden."""
    from ..console import console

    index = position["index"] * saved_world // acc.num_processes
    if acc.is_main_process:
        console.print(f"[yellow]note:[/] {name} was written by {saved_world} process(es), this run has "
                      f"{acc.num_processes}: the data position in epoch {position['epoch']} is kept as a count of "
                      "micro-batches" + (" (at an epoch start: exact)" if position["index"] == 0 else
                                         "; the rest of this epoch is drawn from the new ranks' slices"))
    return {**position, "index": index}


def state_strategy(ckpt: Path) -> str:
    try:
        return json.loads((ckpt / "config.json").read_text())["train"].get("strategy", "ddp")
    except (OSError, ValueError, KeyError):
        return "ddp"


def _apply_config_hyperparameters(run, fresh: list[dict]) -> None:
    """The optimizer's and scheduler's state dicts carry the learning rate (and decay) of the run that
    saved them; the config in force decides them (the resume guard has refused unaccepted changes).
    The moments and step counts stay the checkpoint's. Unchanged values give back exactly the saved lr:
    the same expression LambdaLR computes."""
    sched = run.scheduler
    for g, f in zip(run.optimizer.param_groups, fresh):
        g.update({k: v for k, v in f.items() if k != "lr"})
    sched.base_lrs = [f.get("initial_lr", f["lr"]) for f in fresh]
    lrs = [base * fn(sched.last_epoch) for base, fn in zip(sched.base_lrs, sched.lr_lambdas)]
    for g, lr in zip(run.optimizer.param_groups, lrs):
        g["lr"] = lr
    sched._last_lr = lrs


def prune_checkpoints(output_dir: str | Path, keep_last: int, keep: set[Path] = frozenset()) -> None:
    """Delete all but the newest `keep_last` checkpoints, never deleting those in `keep` (the best)."""
    ckpts = list_checkpoints(output_dir)
    for p in ckpts[:-keep_last] if keep_last > 0 else ckpts:
        if p.resolve() not in {k.resolve() for k in keep}:
            shutil.rmtree(p, ignore_errors=True)
