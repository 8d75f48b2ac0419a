"""`mmtune plan CONFIG [key=value ...] [--gpu NAME] [--gpus N] [--nodes M] [--strategy S] [--json] [--search]`."""

from __future__ import annotations

from typing import List, Optional

import typer


def _parse_size(text: str, n: int) -> tuple:
    try:
        parts = tuple(int(x) for x in text.lower().split("x"))
    except ValueError:
        parts = ()
    if len(parts) != n:
        from ..errors import ConfigError

        shape = "WxH" if n == 2 else "FRAMESxWxH"
        raise ConfigError(f"cannot read {text!r} as {shape}", where="plan options",
                          fix=f"e.g. {'1280x720' if n == 2 else '8x640x360'}")
    return parts


def gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def render(result, console) -> None:
    from rich.markup import escape
    from rich.table import Table

    r = result
    head = (f"[bold]{r.model}[/] {r.method} {r.precision} on {r.gpu_name}" + (f" x{r.gpus} ({r.strategy})" if r.gpus > 1 else ""))
    console.print(head)
    from .margin import verdict_line

    verdict = verdict_line(r)
    console.print(("[green]" if r.fits else "[red]") + escape(verdict) + "[/]", soft_wrap=True)
    console.print(f"batch: {r.batch['source']}; micro-batch {r.batch['micro_batch_size']} x accumulation {r.batch['grad_accum']}")
    t = Table(show_header=True, box=None)
    t.add_column("memory (per GPU)")
    t.add_column("bytes", justify="right")
    t.add_row("peak allocated", gib(r.peak_allocated_bytes))
    t.add_row("peak reserved", gib(r.peak_reserved_bytes))
    t.add_row("process total (nvidia-smi)", gib(r.process_total_bytes))
    t.add_row("GPU total", gib(r.gpu_total_bytes))
    console.print(t)
    b = Table(show_header=True, box=None, title=f"breakdown at the peak (phase: {r.peak_phase})")
    b.add_column("part")
    b.add_column("bytes", justify="right")
    for k, v in r.breakdown.items():
        if v:
            b.add_row(k.replace("_", " "), gib(v))
    console.print(b)
    media = {k: v for k, v in r.media_tokens.items() if v["max"]}
    for k, v in media.items():
        console.print(f"{k} tokens per record: max {v['max']}, p95 {v['p95']}, mean {v['mean']:.1f}")
    console.print(f"step time ~{r.step_time_s:.2f} s, ~{r.tokens_per_s:,.0f} tokens/s (roofline estimate)")
    p = r.step_time_parts
    if p:
        console.print(f"  per micro-batch {p['forward_backward_s_per_micro_batch']:.3f} s x {r.batch['grad_accum']}, "
                      f"optimizer {p['optimizer_s']:.3f} s" + (f", 4-bit dequantisation {p['dequant_s']:.3f} s"
                                                             if p['dequant_s'] else "")
                      + (f", communication {p['comm_exposed_s']:.3f} s not hidden" if r.gpus > 1 else "")
                      + f" ({p['matmul_tflops']:g} TFLOP/s, {p['bandwidth_gbs']:g} GB/s peak)")
    g = getattr(r, "generation", None)
    if g:  # grpo: its generation phase, added to the step time (plan/grpo.py)
        console.print(f"  generation {g['generation_s_per_micro_batch']:.3f} s x {r.batch['grad_accum']}: "
                      f"{g['generations']} generate calls of {g['prompts_per_micro_batch']} x {g['prompt_tokens']}-token "
                      f"prompt(s), {g['max_completion_length']} new tokens at {g['decode_s_per_token'] * 1e3:.2f} ms each; "
                      f"peaks: generation {gib(g['generation_peak_bytes'])}, training {gib(g['training_peak_bytes'])}")
    if r.comm:
        c = r.comm
        console.print(f"  {c['strategy']} traffic per GPU per step over {c['interconnect']} ({c['link_gbs']:g} GB/s): "
                      f"all-reduce {gib(c['all_reduce_bytes'])}, all-gather {gib(c['all_gather_bytes'])}, "
                      f"reduce-scatter {gib(c['reduce_scatter_bytes'])}: {c['comm_time_s']:.3f} s")
        if c.get("nodes", 1) > 1:
            console.print(f"  across {c['nodes']} nodes (hierarchical): within a node {gib(c['intra_node_bytes'])} per GPU "
                          f"over {c['interconnect']}, {c['intra_node_s']:.3f} s; between nodes {gib(c['inter_node_bytes'])} "
                          f"per node over {c['node_link']}: {c['inter_node_s']:.3f} s")
    if r.offload:  # train.offload=optimizer (plan/offload.py)
        o = r.offload
        console.print(f"  optimizer offload ({o['mode']}): {gib(o['gpu_saved_bytes'])} per GPU off the GPU; pinned host "
                      f"memory {gib(o['host_bytes_per_rank'])} per rank, {gib(o['host_bytes_per_node'])} per node; PCIe "
                      f"{gib(o['h2d_bytes'] + o['d2h_bytes'])} per step"
                      + (f" at {o['host_link_gbs']:g} GB/s: {o['pcie_s']:.3f} s" if o['host_link_gbs'] else "")
                      + f"; CPU optimizer step {o['cpu_optimizer_s']:.3f} s (assumed {o['host_adam_gbs']:g} GB/s)")
    for d in r.decisions:  # escaped: "pip install 'mmtune[gpu]'" in a reason must print, not vanish as markup
        console.print(f"[dim]decision: {escape(d)}[/]")
    console.print(f"[dim]planned in {r.plan_seconds:.1f} s[/]")
    # The verdict again, last: the decisions above push the first one off a screen.
    console.print(("[bold green]" if r.fits else "[bold red]") + escape(verdict) + "[/]", soft_wrap=True)


def render_verification(v, console) -> None:
    from rich.table import Table

    console.print(f"[bold]{v.model}[/] planned for {v.gpu_id}, measured on {v.device_name}")
    t = Table(show_header=True, box=None)
    for c in ("", "predicted", "measured", "error"):
        t.add_column(c, justify="right" if c else "left")
    p, m, e = v.predicted, v.measured, v.error_pct

    def pct(x):
        return "-" if x is None else f"{x:+.1f} %"
    t.add_row("peak allocated", gib(p["peak_allocated_bytes"]), gib(m["peak_allocated_bytes"]), pct(e["peak_allocated"]))
    if m["peak_reserved_bytes"] is not None:
        t.add_row("peak reserved (max_memory_reserved)", gib(p["peak_reserved_bytes"]), gib(m["peak_reserved_bytes"]),
                  pct(e["peak_reserved"]))
    t.add_row("step time", f"{p['step_time_s']:.3f} s", f"{m['step_time_s']:.3f} s", pct(e["step_time"]))
    console.print(t)
    for d in v.decisions:
        console.print(f"[dim]{d}[/]")


def register(app: typer.Typer) -> None:
    @app.command("plan")
    def plan_cmd(
        config: str = typer.Argument(..., help="run config YAML"),
        overrides: Optional[List[str]] = typer.Argument(None, help="key=value overrides"),
        gpu: Optional[str] = typer.Option(None, "--gpu", help="target GPU id, e.g. t4, a100-40gb, h100"),
        gpus: int = typer.Option(1, "--gpus", help="GPUs per node (data parallel)"),
        nodes: int = typer.Option(1, "--nodes", help="nodes (each with --gpus GPUs)"),
        node_link: Optional[float] = typer.Option(None, "--node-link", help="GB/s per direction per node between "
                                                  "nodes (default 25: 200 Gb/s InfiniBand)"),
        strategy: Optional[str] = typer.Option(None, "--strategy", help="ddp | fsdp | zero2 | zero3 | auto "
                                               "(default: the config's train.strategy, as the run decides it)"),
        as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
        search: bool = typer.Option(False, "--search", help="find the fastest config that fits"),
        assume_installed: str = typer.Option("gpu-extra", "--assume-installed", help="the target machine's optional "
                                             "packages: gpu-extra (the gpu extra's: flash-attn, liger-kernel, bitsandbytes), "
                                             "none (core only) or here (this machine's)"),
        fixes: bool = typer.Option(True, "--fixes/--no-fixes", help="when the run does not fit: search the smallest "
                                   "changes that make it fit and print them as key=value lines (default on)"),
        margin: Optional[float] = typer.Option(None, "--margin", help="headroom to keep free, in % of the planned "
                                               "process total, at least 0.5 GiB (default 5; docs/plan.md, margin rule)"),
        image: Optional[List[str]] = typer.Option(None, "--image", help="declared image WxH (no data)"),
        video: Optional[List[str]] = typer.Option(None, "--video", help="declared video FRAMESxWxH (no data)"),
        audio: Optional[List[float]] = typer.Option(None, "--audio", help="declared audio seconds (no data)"),
        verify: bool = typer.Option(False, "--verify", help="run the planned step for real on this machine's CUDA GPU "
                                    "(random weights, no download) and print predicted vs measured"),
        steps: int = typer.Option(3, "--steps", help="with --verify: timed steps after 2 warm-up steps"),
        layers: Optional[int] = typer.Option(None, "--layers", help="with --verify: cut the decoder to N layers "
                                             "(plan and measured model alike)"),
    ):
        """Predict peak GPU memory and step time of the exact run, without a GPU."""
        from rich.markup import escape

        from ..config import load_config
        from ..console import console
        from ..errors import MMTuneError
        from .batch import Declared
        from .planner import predict

        resolved = None
        try:
            cfg = load_config(config, list(overrides or []) + ([f"train.strategy={strategy}"] if strategy else []))
            declared = None
            if image or video or audio:
                declared = Declared(images=[_parse_size(s, 2) for s in image or []],
                                    videos=[_parse_size(s, 3) for s in video or []],
                                    audio_seconds=list(audio or []))
            target = gpu or cfg.train.gpu
            if verify:
                from .verify import verify as run_verify

                v = run_verify(cfg, gpu=target, declared=declared, steps=steps, layers=layers)
                if as_json:
                    import json

                    typer.echo(json.dumps(v.to_dict(), indent=2))
                else:
                    render_verification(v, console)
                return
            if search:
                from .search import candidate_line
                from .search import search as run_search

                if not as_json:
                    console.print("planning candidates (each line as it is planned):")
                res = run_search(cfg, gpu=target, gpus=gpus * nodes, nodes=nodes, node_link_gbs=node_link,
                                 declared=declared, margin_pct=margin,
                                 strategy="ddp" if cfg.train.strategy == "auto" else cfg.train.strategy,
                                 on_candidate=None if as_json else (lambda c: candidate_line(c, console)),
                                 assume_installed=assume_installed)
                if as_json:
                    typer.echo(res.to_json())
                else:
                    res.render(console, rows=False)
                if res.best is None:
                    raise typer.Exit(1)
                return
            from ..resolve import resolve_run, target_for

            # The strategy is the run's decision (train.strategy, auto weighed on this many GPUs), as train takes it.
            resolved = resolve_run(cfg, target_for(cfg, target, local=False, gpus=gpus, nodes=nodes,
                                                   assume_installed=assume_installed))
            r = predict(resolved, gpus=gpus * nodes, strategy=resolved.strategy, declared=declared, margin_pct=margin,
                        nodes=nodes, node_link_gbs=node_link)
        except MMTuneError as e:
            if resolved is not None and not as_json:  # what the run decides on that GPU, even if planning failed
                for line in resolved.summary_lines():
                    console.print(f"decision: {escape(line)}", soft_wrap=True)
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None
        fix = None
        if not r.fits and fixes:
            from .fixes import find_fix, planner_for

            try:
                fix = find_fix(resolved, first=r, plan_fn=planner_for(cfg, gpu=target, gpus=gpus, nodes=nodes,
                                                                      declared=declared, margin_pct=margin,
                                                                      assume_installed=assume_installed))
            except MMTuneError as e:
                typer.echo(f"error while searching for a fix: {e}", err=True)
        if as_json:
            import json

            d = r.to_dict()
            if fix is not None:
                d["fix"] = {"overrides": fix.fix.overrides if fix.fix else None,
                            "lines": fix.fix.lines if fix.fix else [], "why_none": fix.why_none,
                            "candidates": fix.tried, "seconds": round(fix.seconds, 1)}
            typer.echo(json.dumps(d, indent=2))
        else:
            render(r, console)
            if fix is not None:
                from .fixes import render_fix

                render_fix(fix, console, command=(" ".join(["mmtune plan", config, *(overrides or [])]),
                                                  f" --gpu {target}" if target else ""))
        if not r.fits:
            raise typer.Exit(1)
