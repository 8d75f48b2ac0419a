"""The doctor never raises: every shipped recipe across adapter x precision x strategy x data modality x attention.

    python benchmarks/doctor_crash_sweep.py [--out PATH]

A run has a problem when `run_doctor` raises, or when a check crashed (MM099, a bug in mmtune). Findings,
errors included, are the doctor's job and not problems: a QLoRA run under FSDP is refused with a finding,
which is what it should do. Each recipe runs as shipped and in four variants; variant v of recipe i takes
adapter ADAPTERS[(i+v) % 3], precision PRECISIONS[(i+v) % 2], strategy STRATEGIES[(i+2v) % 3], data
MODALITIES[(i+v) % 4] and attention ATTENTION[(i+v+v//2) % 2], so every recipe meets every adapter, precision,
strategy, modality and attention kernel (rotations of one-factor sweeps; the full product would be 15 x 144
runs). Duplicates of a recipe's own setup are dropped. FlashAttention-2 is planned for the A100 target; this
CPU has no flash_attn, so the doctor builds its local models with SDPA (doctor/pieces.py buildable_here).
The memory plan (MM001 / MM003) is left out, as in tests/doctor/test_recipes.py: at 7B it takes minutes on
2 cores and has its own tests; every other check runs on the first 20 records of each split against an
A100 80GB. Exit status 1 when any run has a problem. tests/doctor/test_crash_sweep.py runs a few combos.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

# What the results file holds beside the provenance (tests/test_benchmark_results.py).
RESULT_KEYS = ("runs", "problems", "results")

ROOT = Path(__file__).resolve().parents[1]
ADAPTERS = ("lora", "qlora", "full")
PRECISIONS = ("bf16", "fp16")
STRATEGIES = ("ddp", "fsdp", "zero3")
MODALITIES = ("text", "image", "audio", "video+audio")
ATTENTION = ("sdpa", "flash_attention_2")
DATA = {"image": "recipes/data/image_qa.jsonl", "audio": "recipes/data/audio_qa.jsonl",
        "video+audio": "recipes/data/video_audio_qa.jsonl"}  # text: written by text_data()
SKIP = ("MM001", "MM003")
GPU = "a100-80gb"
MAX_RECORDS = 20


@dataclass(frozen=True)
class Combo:
    recipe: str  # recipes/NAME.yaml, relative to the repository
    adapter: str | None = None  # None: as the recipe says
    precision: str | None = None
    strategy: str | None = None
    modality: str | None = None  # None: the recipe's own data
    attention: str | None = None  # None: the recipe's own model.attn_implementation

    @property
    def label(self) -> str:
        parts = [Path(self.recipe).stem] + [f"{k}={v}" for k, v in
                                            (("adapter", self.adapter), ("precision", self.precision),
                                             ("strategy", self.strategy), ("data", self.modality),
                                             ("attn", self.attention)) if v]
        return " ".join(parts)


def recipes() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "recipes").glob("*.yaml"))


def _own(recipe: str) -> dict:
    import yaml

    tree = yaml.safe_load((ROOT / recipe).read_text()) or {}
    return {"adapter": (tree.get("adapter") or {}).get("method", "lora"),
            "precision": (tree.get("train") or {}).get("precision", "bf16"),
            "strategy": (tree.get("train") or {}).get("strategy", "auto")}


def combos() -> list[Combo]:
    out = []
    for i, recipe in enumerate(recipes()):
        own = _own(recipe)
        seen = {(own["adapter"], own["precision"], own["strategy"], None, None)}
        out.append(Combo(recipe))
        for v in range(4):
            c = (ADAPTERS[(i + v) % 3], PRECISIONS[(i + v) % 2], STRATEGIES[(i + 2 * v) % 3], MODALITIES[(i + v) % 4],
                 ATTENTION[(i + v + v // 2) % 2])
            if c in seen:
                continue
            seen.add(c)
            out.append(Combo(recipe, *c))
    return out


def text_data(folder: Path) -> str:
    path = folder / "text_qa.jsonl"
    if not path.exists():
        rows = [{"messages": [{"role": "user", "content": f"What is {i} plus one?"},
                              {"role": "assistant", "content": str(i + 1)}]} for i in range(8)]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def overrides(combo: Combo, work: Path) -> list[str]:
    ov = [f"output_dir={work / 'run'}"]
    if combo.adapter:
        ov.append(f"adapter.method={combo.adapter}")
    if combo.precision:
        ov.append(f"train.precision={combo.precision}")
    if combo.strategy:
        ov.append(f"train.strategy={combo.strategy}")
    if combo.attention:
        ov.append(f"model.attn_implementation={combo.attention}")
    if combo.modality:
        train = text_data(work) if combo.modality == "text" else str(ROOT / DATA[combo.modality])
        # eval.best_metric may name a metric of the recipe's own eval set (seed002's mixture score)
        ov += [f"data.train={train}", "data.eval=null", "data.format=messages", "eval.best_metric=eval_loss"]
    return ov


def run_one(combo: Combo, work: Path) -> dict:
    """{combo, seconds, errors (codes), problem (None, or what raised / crashed)}."""
    from mmtune.doctor.registry import all_checks
    from mmtune.doctor.runner import INTERNAL_ERROR, run_doctor

    codes = [c.code for c in all_checks() if c.code not in SKIP]
    t0 = time.perf_counter()
    problem = None
    errors: list[str] = []
    try:
        rep = run_doctor(ROOT / combo.recipe, overrides(combo, work), GPU, max_records=MAX_RECORDS, only=codes)
        errors = sorted(rep.codes("error"))
        crashed = [f.message for f in rep.findings if f.code == INTERNAL_ERROR]
        if crashed:
            problem = "; ".join(crashed)
    except Exception as e:  # noqa: BLE001 - the sweep reports what escaped instead of stopping
        problem = f"raised {type(e).__name__}: {e}\n{traceback.format_exc(limit=8)}"
    return {"combo": asdict(combo), "label": combo.label, "seconds": round(time.perf_counter() - t0, 2),
            "errors": errors, "problem": problem}


def sweep(selected: list[Combo] | None = None, progress=print) -> list[dict]:
    os.chdir(ROOT)  # recipes name their data relative to the repository
    results = []
    with tempfile.TemporaryDirectory(prefix="mmtune-crash-sweep-") as tmp:
        for combo in selected if selected is not None else combos():
            r = run_one(combo, Path(tmp))
            results.append(r)
            if progress:
                progress(f"{'PROBLEM' if r['problem'] else 'ok':7s} {r['seconds']:6.1f}s  {r['label']}  "
                         f"errors: {','.join(r['errors']) or '-'}")
    return results


def main(argv: list[str]) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from _provenance import provenance, write_results

    started = provenance()
    out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else None
    t0 = time.perf_counter()
    results = sweep()
    bad = [r for r in results if r["problem"]]
    print(f"{len(results)} runs, {len(bad)} problem(s), {time.perf_counter() - t0:.0f} s")
    for r in bad:
        print(f"--- {r['label']}\n{r['problem']}")
    if out is not None:
        write_results(out, {"runs": len(results), "problems": len(bad), "gpu": GPU,
                            "max_records": MAX_RECORDS, "skipped_checks": list(SKIP),
                            "seconds": round(time.perf_counter() - t0, 1), "results": results}, started)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
