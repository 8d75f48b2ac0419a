"""mmtune's loop vs a plain transformers + peft loop (the seeds' way), HF `Trainer` + peft and TRL's
`SFTTrainer` + peft: same model, records, micro-batch, accumulation and steps.

    python benchmarks/throughput.py [--steps 30] [--model tiny/qwen2-vl] [--repeats 5] [--json] [--save FILE]
        [--epochs N]   # records = 1/N of those drawn: each drawn N times (default 1: each once)
        [--data counting|short-text|long-text]   # the image twin's counting records (default), or text
                                                 # records (tiny/qwen2): "What is 3 + 4?" or ~1,000 tokens
        [--src OTHER/src]   # run "ours" from another checkout's code (a before/after comparison)
        [--peers plain,trainer,sft] [--peer-python VENV/bin/python]   # where trl is installed
        [--device auto|cpu|cuda] [--precision fp32|bf16|fp16]
    python benchmarks/throughput.py --device cuda --precision bf16 --model Qwen/Qwen2-VL-7B-Instruct
        # a full-size model (an embedded config) with random weights, for every variant: benchmarks/gpu/run.py

Peers: "plain" is the loop the seeds wrote (processor on the raw batch, the model's own loss);
"trainer" is `transformers.Trainer` fed by the same processor call in its collator; "sft" is TRL's
`SFTTrainer` with TRL's own vision collator (`DataCollatorForVisionLanguageModeling`) on the records
as a `datasets.Dataset` of `messages` + `images`. All three train on every non-pad token, mmtune on the
answer tokens; tokens/s counts non-pad input tokens for every variant (the work done per step).

Each variant runs in its own process so peak memory is its own: CUDA max_memory_allocated on a GPU,
peak RSS on a CPU. A `--model` that is not a tiny twin is built at full size from its config with random
weights (mmtune's `model.weights=random`; the peers get the same model from mmtune's builder, then peft's
LoRA as before) and the stand-in processor where the real one is not on disk: nothing is downloaded.
`--precision bf16|fp16`: 16-bit frozen weights and autocast for every variant (fp32 LoRA weights), mmtune's
mixed precision and the Trainers' bf16/fp16 flags.
Both process the same synthetic counting records in the same order with the same
micro-batch and accumulation; tokens/s counts non-pad input tokens over the timed steps (the first
step of each is a warm-up and is not timed). Variants run interleaved (ours, plain, ours, plain, ...)
with one thread each; the median of the repeats is reported with the spread (min-max), not the best.
Beside tokens/s each variant reports its process CPU seconds per 1,000 tokens over the same steps (the
machine is shared: CPU time says how much work a token cost, wall time also counts waits for a core);
mmtune's with train.num_workers > 0 would leave out its workers' CPU, so --workers > 0 reports none. Its peak
memory then counts the workers too: the training process's peak RSS plus the peak, sampled every 0.1 s, of
the proportional set size (PSS) summed over every process it started (DataLoader workers, the fork server
they are forked from): each shared page split among the processes sharing it, so pages a worker shares with
the training process (libraries) are partly counted twice -- an over-count, never an under-count.
Every side's data preparation (chat template, processor, labels, collation) is inside its timed window:
mmtune encodes a record when the loop first draws it (nothing is encoded at start-up), the plain loop and
the Trainers call the processor per micro-batch in their collators. With --epochs N > 1 every record is drawn N
times: what a side keeps between epochs (mmtune's encode cache, data.cache_mb) is then real saved work, where
with one epoch it would only move work; the peers encode each draw. TRL is compared on the image records
only: on text records its SFTTrainer tokenizes the whole data set before training (outside any step).
`--save FILE` writes the report with its provenance (benchmarks/_provenance.py: commit, command, versions,
machine, threads, load average).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _provenance import dumps, provenance, write_results  # noqa: E402

DATA = {"counting": ("tiny/qwen2-vl", "synthetic:counting"), "short-text": ("tiny/qwen2", "synthetic:arithmetic"),
        "long-text": ("tiny/qwen2", None)}
# The top-level keys of a results file (tests/test_benchmark_results.py), beside the provenance keys. Files
# written since --epochs existed also carry "epochs" (older ones: one pass, each record drawn once).
RESULT_KEYS = ("model", "data", "steps", "repeats", "workers", "micro_batch_size", "grad_accum", "device",
               "precision", "results", "ratio_ours_over")
LONG_WORDS = 1000  # words in a long-text record's question: ~1,030 tokens with the template


def long_text_records(out: str, n: int) -> Path:
    """n text records with a ~1,000-token question and a short answer, written once as JSON lines."""
    import random

    path = Path(out) / "data" / f"long_text_{n}.jsonl"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        rng = random.Random(0)
        words = ["red", "blue", "green", "circle", "square", "count", "the", "of", "and", "how", "many", "shape"]
        rows = [{"messages": [{"role": "user", "content": " ".join(rng.choice(words) for _ in range(LONG_WORDS))
                               + " How many circles?"},
                              {"role": "assistant", "content": str(rng.randint(0, 9))}]} for _ in range(n)]
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        tmp.replace(path)
    return path


def data_of(args) -> str:
    data = getattr(args, "data", "counting")  # scripts that borrow _config (step_cpu.py) name theirs by --set
    return DATA[data][1] or str(long_text_records(args.out, n_records(args)))


def n_records(args) -> int:
    """Records in the data set: one epoch's worth of the run's micro-batches (+ 8: no record is drawn twice), or
    with --epochs N, 1/N of the records the run draws, so every record is drawn N times (the last pass may
    be partial)."""
    drawn = args.steps * args.mbs * args.accum
    epochs = getattr(args, "epochs", 1)
    return drawn + 8 if epochs == 1 else -(-drawn // epochs)


def _config(args):
    from mmtune.config import load_config
    from mmtune.models.tiny import is_tiny

    ov = [f"model.name={args.model}", "model.gradient_checkpointing=false", f"data.train={data_of(args)}",
          "data.eval=null", f"data.synthetic_train_size={n_records(args)}",
          "adapter.method=lora", "adapter.r=8", "adapter.dropout=0.0", f"train.max_steps={args.steps}",
          f"train.device={device_of(args)}", f"train.precision={args.precision}", "train.gpu=null",
          f"train.micro_batch_size={args.mbs}", f"train.grad_accum={args.accum}",
          "train.lr=1e-4", "train.warmup_steps=0", "train.scheduler=constant", "train.max_grad_norm=null",
          "logging.tensorboard=false", f"output_dir={args.out}/ours", "train.resume=false",
          f"train.num_workers={args.workers}"] + ([] if is_tiny(args.model) else ["model.weights=random"]) \
        + (["data.max_length=2048"] if getattr(args, "data", None) == "long-text" else []) \
        + list(args.set or [])
    return load_config(Path(__file__).resolve().parents[1] / "recipes" / "demo_counting.yaml", ov)


def device_of(args) -> str:
    if args.device != "auto":
        return args.device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _peak(args) -> int:
    import resource

    import torch

    if device_of(args) == "cuda":
        return int(torch.cuda.max_memory_allocated())
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _autocast(args):
    import torch

    if args.precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_of(args), dtype=torch.bfloat16 if args.precision == "bf16" else torch.float16)


def _base_model(args):
    """(model, processor) without adapters: the tiny twin as before; a full-size model from its config with
    random weights through mmtune's builder (the one model code path; the loop is what is compared)."""
    from mmtune.models.tiny import build_tiny, is_tiny

    if is_tiny(args.model):
        return build_tiny(args.model)
    from mmtune.build import load_model
    from mmtune.resolve import local_target, resolve_run

    resolved = resolve_run(_config(args), local_target(device_of(args)))
    loaded = load_model(resolved, device=device_of(args), random_weights=True)
    return loaded.model, loaded.processor


def run_ours(args) -> dict:
    from mmtune.build import build_run
    from mmtune.train.loop import train

    t0 = time.perf_counter()
    children = _ChildMemory().start() if args.workers and device_of(args) == "cpu" else None
    run = build_run(_config(args))
    build_s = time.perf_counter() - t0
    summary = train(run)
    extra = children.stop() if children else 0
    rows = [json.loads(line) for line in open(f"{args.out}/ours/metrics.jsonl")]
    timed = [r for r in rows if r["kind"] == "train"][1:]
    tokens = sum(r["tokens_per_s"] * r["step_time_s"] for r in timed)
    secs = sum(r["step_time_s"] for r in timed)
    cpu = sum(r["cpu_s"] for r in timed) if args.workers == 0 else None
    return {"tokens_per_s": tokens / secs, "cpu_s_per_1k_tokens": cpu and 1000 * cpu / tokens,
            "peak_memory_bytes": _peak(args) + extra, "final_loss": summary and rows[-1]["loss"],
            "data_wait_fraction": sum(r.get("data_wait_s", 0.0) for r in timed) / secs,
            "build_s": build_s, **({"workers_peak_pss_bytes": extra} if children else {})}


class _ChildMemory:
    """The peak over time of the PSS summed over this process's descendants (workers, fork server), sampled
    by a thread every 0.1 s while the run builds and trains (psutil, which accelerate requires)."""

    def __init__(self):
        import threading

        self.peak, self.done = 0, threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def _sample(self):
        import psutil

        me = psutil.Process()
        while not self.done.wait(0.1):
            total = 0
            for child in me.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    total += child.memory_full_info().pss
            self.peak = max(self.peak, total)

    def stop(self) -> int:
        self.done.set()
        self.thread.join()
        return self.peak


LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def plain_model(model_name: str, device: str, base=None):
    """The plain loop's model (peft LoRA r8 on every projection) and its AdamW: on `base`, a (model,
    processor) pair from _base_model, or else the tiny twin `model_name`."""
    import torch
    from peft import LoraConfig, get_peft_model

    from mmtune.models.tiny import build_tiny

    torch.manual_seed(0)
    model, processor = base or build_tiny(model_name)
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=LORA_TARGETS)).to(device)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    return model, processor, opt


def plain_micro_batch(processor, recs, device: str) -> tuple[dict, int]:
    """The seeds' collate: chat template + one processor call on the raw records (a text model's
    "processor" is its tokenizer), every non-pad token a label. Returns (batch with labels, non-pad tokens)."""
    texts, images = [], []
    for r in recs:
        texts.append(processor.apply_chat_template(_text_only(r.messages, processor), tokenize=False))
        images.extend(_images(r))
    batch = processor(text=texts, **({"images": images} if images else {}), padding=True, return_tensors="pt").to(device)
    pad = getattr(processor, "tokenizer", processor).pad_token_id
    batch["labels"] = batch["input_ids"].masked_fill(batch["input_ids"] == pad, -100)
    return batch, int(batch["attention_mask"].sum())


def plain_step(model, opt, batches: list[dict], autocast=contextlib.nullcontext) -> float:
    """One optimizer step of the plain loop over its micro-batches: the model's own loss / accum
    (under `autocast()`: --precision bf16/fp16)."""
    for batch in batches:
        with autocast():
            loss = model(**batch).loss / len(batches)
        loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return float(loss) * len(batches)


def run_plain(args) -> dict:
    """What the seeds wrote: processor on the raw batch, model's own loss, loss/accum, backward, step."""
    import torch

    from mmtune.data.batches import BatchStream
    from mmtune.data.sources import load_records

    cfg = _config(args)
    device = device_of(args)
    torch.manual_seed(0)
    model, processor, opt = plain_model(args.model, device, base=_base_model(args))
    records = load_records(cfg.data.train, cfg.data, split="train").records
    stream = BatchStream(len(records), seed=0, micro_batch_size=args.mbs)
    tokens, secs, cpu = 0, 0.0, 0.0
    for step in range(args.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        made = [plain_micro_batch(processor, [records[i] for i in stream.next()], device) for _ in range(args.accum)]
        loss = plain_step(model, opt, [b for b, _ in made], autocast=lambda: _autocast(args))
        if step > 0:
            secs += time.perf_counter() - t0
            cpu += time.process_time() - c0
            tokens += sum(n for _, n in made)
    return {"tokens_per_s": tokens / secs, "cpu_s_per_1k_tokens": 1000 * cpu / tokens, "peak_memory_bytes": _peak(args),
            "final_loss": loss}


def _peer_setup(args):
    """Model with the same LoRA as the plain loop, the records, and the plain loop's collate."""
    import torch
    from peft import LoraConfig, get_peft_model

    from mmtune.data.sources import load_records

    cfg = _config(args)
    torch.manual_seed(0)
    model, processor = _base_model(args)
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=LORA_TARGETS))
    records = load_records(cfg.data.train, cfg.data, split="train").records
    return model, processor, records


def _text_only(messages: list[dict], processor=None) -> list[dict]:
    """The chat template's messages: media parts as {"type": kind}; a text model's tokenizer (no
    `tokenizer` attribute) gets plain strings, as its template expects."""
    from mmtune.data.records import content_parts, part_text

    if processor is not None and getattr(processor, "tokenizer", None) is None:
        return [{"role": m["role"], "content": part_text(content_parts(m["content"]))} for m in messages]
    return [{"role": m["role"],
             "content": [{"type": p["type"], **({"text": p["text"]} if p["type"] == "text" else {})}
                         for p in content_parts(m["content"])]} for m in messages]


def _images(record) -> list:
    from mmtune.data.records import content_parts

    return [p["image"] for m in record.messages for p in content_parts(m["content"]) if p["type"] == "image"]


def _timed_trainer(trainer, counts: list[int], args) -> dict:
    """Run a (SFT)Trainer; time from the end of step 1 to the end of the last step. Step k uses
    micro-batches [(k-1)*accum, k*accum) in collation order, whatever the dataloader prefetches."""
    from transformers import TrainerCallback

    marks: list[tuple[float, float]] = []

    class StepClock(TrainerCallback):
        def on_step_end(self, *a, **k):
            marks.append((time.perf_counter(), time.process_time()))

    trainer.add_callback(StepClock())
    out = trainer.train()
    secs, cpu = marks[-1][0] - marks[0][0], marks[-1][1] - marks[0][1]
    tokens = sum(counts[args.accum: args.steps * args.accum])
    return {"tokens_per_s": tokens / secs, "cpu_s_per_1k_tokens": 1000 * cpu / tokens, "peak_memory_bytes": _peak(args),
            "final_loss": float(out.training_loss)}


def _trainer_args(cls, args, **extra):
    extra = {"bf16": args.precision == "bf16", "fp16": args.precision == "fp16", **extra}
    return cls(output_dir=f"{args.out}/{extra.pop('name')}", per_device_train_batch_size=args.mbs,
               gradient_accumulation_steps=args.accum, max_steps=args.steps, learning_rate=1e-4,
               lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=0.0, weight_decay=0.0,
               logging_steps=10**6, save_strategy="no", report_to=[], dataloader_num_workers=0,
               remove_unused_columns=False, use_cpu=device_of(args) == "cpu", seed=0,
               disable_tqdm=True, **extra)


def run_trainer(args) -> dict:
    """HF Trainer fed the plain loop's batches (one processor call per micro-batch)."""
    from transformers import Trainer, TrainingArguments

    model, processor, records = _peer_setup(args)
    pad = getattr(processor, "tokenizer", processor).pad_token_id
    counts: list[int] = []

    def collate(recs):
        texts = [processor.apply_chat_template(_text_only(r.messages, processor), tokenize=False) for r in recs]
        images = [im for r in recs for im in _images(r)]
        batch = processor(text=texts, **({"images": images} if images else {}), padding=True, return_tensors="pt")
        batch["labels"] = batch["input_ids"].masked_fill(batch["input_ids"] == pad, -100)
        counts.append(int(batch["attention_mask"].sum()))
        return dict(batch)

    trainer = Trainer(model=model, args=_trainer_args(TrainingArguments, args, name="trainer"),
                      train_dataset=list(records), data_collator=collate)
    return _timed_trainer(trainer, counts, args)


def run_sft(args) -> dict:
    """TRL's SFTTrainer with its own vision-language collator, on messages + images columns."""
    import datasets
    from trl import SFTConfig, SFTTrainer
    from trl.trainer.sft_trainer import DataCollatorForVisionLanguageModeling

    if args.data != "counting":
        raise SystemExit("the sft peer runs on the image records only (--data counting): on text records TRL "
                         "tokenizes the whole data set before training, outside the timed steps")
    model, processor, records = _peer_setup(args)
    rows = {"messages": [], "images": []}
    for r in records:
        rows["messages"].append(_text_only(r.messages))  # {"type": "image"} parts; pixels in "images"
        rows["images"].append(_images(r))
    ds = datasets.Dataset.from_dict(rows)
    counts: list[int] = []
    inner = DataCollatorForVisionLanguageModeling(processor)

    def collate(examples):
        batch = inner(examples)
        counts.append(int(batch["attention_mask"].sum()))
        return batch

    # SFTConfig's own defaults differ from the other variants' settings: checkpointing on, bf16 where
    # supported, truncation at 1,024 tokens. Set to match (no checkpointing, --precision, no truncation).
    config = _trainer_args(SFTConfig, args, name="sft", max_length=None, gradient_checkpointing=False,
                           dataset_kwargs={"skip_prepare_dataset": True})
    trainer = SFTTrainer(model=model, args=config, train_dataset=ds, processing_class=processor,
                         data_collator=collate)
    return _timed_trainer(trainer, counts, args)


VARIANTS = {"ours": run_ours, "plain": run_plain, "trainer": run_trainer, "sft": run_sft}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--mbs", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=1, help="passes over the data: each record is drawn this many times "
                    "(1: each once, nothing any side caches can be reused)")
    ap.add_argument("--accum", type=int, default=2)
    ap.add_argument("--model", default=None, help="default: the --data set's tiny twin (tiny/qwen2-vl, tiny/qwen2)")
    ap.add_argument("--data", default="counting", choices=sorted(DATA))
    ap.add_argument("--save", help="write the report (with its provenance) to this JSON file")
    ap.add_argument("--out", default="runs/bench_throughput")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--workers", type=int, default=0, help="train.num_workers for mmtune (the plain loop has none)")
    ap.add_argument("--repeats", type=int, default=5, help="runs per variant, interleaved; median and spread reported")
    ap.add_argument("--src", help="run mmtune from this src folder (e.g. an export of the previous commit)")
    ap.add_argument("--set", action="append", help="extra config override for mmtune, e.g. --set data.cache_mb=0")
    ap.add_argument("--peers", default=None, help="comma-separated: plain, trainer, sft (default: all three on "
                    "--data counting, plain and trainer on text)")
    ap.add_argument("--peer-python", help="python of an environment with trl (for the sft peer)")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="auto: cuda where available")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--variant", choices=sorted(VARIANTS), help=argparse.SUPPRESS)
    return ap


def variant_command(args, variant: str) -> tuple[list[str], dict]:
    """The command (and environment) that runs one variant once in a fresh process; it prints `RESULT {json}`."""
    python = args.peer_python if (variant == "sft" and args.peer_python) else sys.executable
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    src = args.src if variant == "ours" and args.src else here
    cmd = [python, os.path.abspath(__file__), "--variant", variant, "--steps", str(args.steps), "--mbs", str(args.mbs),
           "--accum", str(args.accum), "--epochs", str(args.epochs), "--model", args.model, "--data", args.data,
           "--out", args.out, "--workers", str(args.workers), "--device", args.device, "--precision", args.precision] \
        + [a for kv in args.set or [] for a in ("--set", kv)]
    env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONPATH": os.path.abspath(src)}
    return cmd, env


def summarize(runs: dict[str, list[dict]], peers: list[str]) -> tuple[dict, dict]:
    """(per-variant medians and spreads, ours-over-peer ratios) of interleaved runs: runs[v][i] is repeat i."""
    results = {}
    for v, rs in runs.items():
        if not rs:
            continue
        tps = [r["tokens_per_s"] for r in rs]
        results[v] = {**{k: median([r[k] for r in rs]) for k in rs[0] if isinstance(rs[0][k], (int, float))},
                      "tokens_per_s_spread": [min(tps), max(tps)], "tokens_per_s_runs": tps}
    # The ratio of each interleaved pair (ours_i / peer_i ran back to back, under the same load), median'd.
    ratios = {}
    for peer in peers:
        if not runs.get(peer) or not runs.get("ours"):
            continue
        pair = [o["tokens_per_s"] / p["tokens_per_s"] for o, p in zip(runs["ours"], runs[peer])]
        ratios[peer] = {"tokens_per_s": results["ours"]["tokens_per_s"] / results[peer]["tokens_per_s"],
                        "tokens_per_s_pairwise_median": median(pair), "tokens_per_s_pairwise_spread": [min(pair), max(pair)],
                        "peak_memory_bytes": results["ours"]["peak_memory_bytes"] / results[peer]["peak_memory_bytes"]}
        if all(r.get("cpu_s_per_1k_tokens") for r in runs["ours"] + runs[peer]):
            # CPU per token, peer over ours (so > 1 means mmtune spends less CPU per token, like tokens/s)
            cpu = [p["cpu_s_per_1k_tokens"] / o["cpu_s_per_1k_tokens"] for o, p in zip(runs["ours"], runs[peer])]
            ratios[peer]["cpu_per_token_pairwise_median"] = median(cpu)
            ratios[peer]["cpu_per_token_pairwise_spread"] = [min(cpu), max(cpu)]
    return results, ratios


def main() -> None:
    args = parser().parse_args()
    args.model = args.model or DATA[args.data][0]
    if args.variant:
        print("RESULT " + json.dumps(VARIANTS[args.variant](args)))
        return
    started = provenance()
    if args.data == "long-text":
        data_of(args)  # written once, before the variants start
    peers = [p for p in (args.peers or ("plain,trainer,sft" if args.data == "counting" else "plain,trainer")).split(",")
             if p]
    runs: dict[str, list[dict]] = {v: [] for v in ["ours", *peers]}
    for _ in range(args.repeats):
        for variant in runs:  # interleaved: ours, plain, trainer, sft, ours, ...
            cmd, env = variant_command(args, variant)
            out = subprocess.run(cmd, capture_output=True, text=True, env=env)
            line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
            if out.returncode != 0 or not line:
                sys.exit(f"{variant} failed:\n{out.stderr[-3000:]}")
            runs[variant].append(json.loads(line[0][7:]))
    results, ratios = summarize(runs, peers)
    report = {"model": args.model, "data": args.data, "steps": args.steps, "epochs": args.epochs, "repeats": args.repeats,
              "workers": args.workers,
              "micro_batch_size": args.mbs, "grad_accum": args.accum, "src": args.src or "this checkout",
              "device": device_of(args), "precision": args.precision,
              "overrides": args.set or [], "results": results, "ratio_ours_over": ratios}
    if args.save:
        write_results(args.save, report, started)
    if args.json:
        print(dumps(report, started))
        return
    print(f"{'':8} {'tokens/s (median)':>18} {'spread':>16} {'peak MiB':>10} {'ours/this tok/s':>16} "
          f"{'this/ours CPU per tok':>22} {'ours/this mem':>14}")
    for v in runs:
        lo, hi = results[v]["tokens_per_s_spread"]
        r = ratios.get(v)
        cpu = f"{r['cpu_per_token_pairwise_median']:22.2f}" if r and "cpu_per_token_pairwise_median" in r else " " * 22
        tail = f"{r['tokens_per_s_pairwise_median']:16.2f} {cpu} {r['peak_memory_bytes']:14.2f}" if r else ""
        mib = results[v]["peak_memory_bytes"] / 2**20
        print(f"{v:8} {results[v]['tokens_per_s']:18.0f} {lo:7.0f}-{hi:<8.0f} {mib:10.0f} {tail}")


if __name__ == "__main__":
    main()
