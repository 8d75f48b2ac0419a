"""GRPO's rewards, one registry over the task metrics: a reward and the eval number it is meant to raise are
the same code (mmtune.evaluate.metrics).

A reward scores each completion against its record's references: `fn(completions, references) -> list of
floats`, one per completion (`references[i]` is the list of accepted answers of completion i's record).
- every per-item metric: exact_match, vqa_accuracy, relaxed_accuracy, anls, f1 (the metric on one item);
- count: 1 / (1 + |error|) of the number parsed from the answer (the MAE's error, 0 when no number is found);
- format: 1 when the whole answer (stripped) matches the reward's `pattern`, else 0; `.` spans newlines (re.DOTALL):
  a reasoning block runs over several lines, and a `<think>.*</think>` pattern that stops at the first newline scores
  every real completion 0 (unsloth#1761);
- your own: `pkg.module:function` with the contract above, imported when the run starts.
"""

from __future__ import annotations

import re

from .metrics import METRICS, parse_number

PER_ITEM = ("exact_match", "vqa_accuracy", "relaxed_accuracy", "anls", "f1")
BUILT_IN = (*PER_ITEM, "count", "format")


def check_reward(name: str, pattern: str | None = None) -> None:
    """ValueError (with a did-you-mean) for a name that is neither built in nor an import path; a format reward
    needs a pattern that compiles."""
    if ":" in name:
        return  # an import path: resolved when the run builds its objective (reward_function)
    if name not in BUILT_IN:
        import difflib

        close = difflib.get_close_matches(name, BUILT_IN, n=1)
        raise ValueError(f"unknown reward {name!r}" + (f"; did you mean {close[0]!r}?" if close else "")
                         + f" (built in: {', '.join(BUILT_IN)}; or pkg.module:function)")
    if name == "format":
        if not pattern:
            raise ValueError("the format reward needs `pattern` (a regular expression the answer must match)")
        try:
            re.compile(pattern)
        except re.error as e:
            raise ValueError(f"the format reward's pattern does not compile: {e}") from None


def _count(completions, references):
    out = []
    for p, refs in zip(completions, references):
        got, want = parse_number(p), parse_number(refs[0]) if refs else None
        out.append(0.0 if got is None or want is None else 1.0 / (1.0 + abs(got - want)))
    return out


def reward_function(name: str, pattern: str | None = None):
    """The scoring function of a reward (check_reward has vetted the name)."""
    if name in PER_ITEM:
        metric = METRICS[name]
        return lambda completions, references: [float(metric([p], [refs])) for p, refs in zip(completions, references)]
    if name == "count":
        return _count
    if name == "format":
        rx = re.compile(pattern, re.DOTALL)  # completions span lines: see the module docstring
        return lambda completions, references: [float(rx.fullmatch(p.strip()) is not None) for p in completions]
    import importlib

    module, _, attr = name.partition(":")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        from ..errors import ConfigError

        raise ConfigError(f"reward {name!r} cannot be imported: {e}", where="train.grpo.rewards",
                          fix="give pkg.module:function importable here, fn(completions, references) -> list of "
                              "floats (docs/preference.md)") from None
    _takes_completions_and_references(fn, name)
    return fn


def _takes_completions_and_references(fn, name: str) -> None:
    """A ConfigError when `fn` cannot be called as the step calls it, fn(completions, references): TRL's rewards
    are fn(completions, **kwargs), and such a function raised a TypeError at the first GRPO step, mid-run."""
    import inspect

    if not callable(fn):
        return  # MM120 names what it is
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # a builtin without a signature: called as it is
    try:
        sig.bind(["a"], [["a"]])
    except TypeError as e:
        from ..errors import ConfigError

        raise ConfigError(f"reward {name!r} cannot be called as fn(completions, references): its signature is "
                          f"{name.partition(':')[2]}{sig} ({e})", where="train.grpo.rewards",
                          fix="take the references as the second argument: def f(completions, references, **kw) -> "
                              "list of floats (a TRL reward's fn(completions, **kwargs) needs it; docs/preference.md)") from None


def score(fn, name: str, completions, references) -> list[float]:
    """`fn`'s rewards, checked: one finite number per completion, or a ConfigError naming the reward. A reward that
    raises (a regex without a match, an answer it cannot parse) would end the run with the user's traceback mid-step:
    it is a ConfigError naming the completion it raised on (fn called again one completion at a time to find it)."""
    try:
        got = list(fn(completions, references))
    except Exception as e:  # the user's code, on text the model sampled: any exception is theirs
        _raised(fn, name, completions, references, e)
    numbers = [_number(x) for x in got]
    if len(got) != len(completions) or any(x is None for x in numbers):
        from ..errors import ConfigError

        raise ConfigError(f"reward {name!r} must return one finite number per completion ({len(completions)}); "
                          f"it returned {str(got)[:120]}", where="train.grpo.rewards",
                          fix="fn(completions, references) -> list of floats, one per completion (docs/preference.md)")
    return numbers


def _number(x) -> float | None:
    """x as a float when it is one finite real number: Python's, numpy's (np.float32 is no float subclass) or a 0-d
    tensor's; None for text, None, NaN, a bool, a list."""
    import math
    import numbers

    if isinstance(x, bool) or type(x).__name__ == "bool_":
        return None
    if isinstance(x, numbers.Real) or (getattr(x, "shape", None) == () and hasattr(x, "__float__")
                                       and "bool" not in str(getattr(x, "dtype", ""))):
        x = float(x)
        return x if math.isfinite(x) else None
    return None


def _raised(fn, name, completions, references, e):
    from ..errors import ConfigError

    culprit = None
    for c, r in zip(completions, references):  # which completion it raises on, to show it
        try:
            fn([c], [r])
        except Exception:
            culprit = c
            break
    on = f" on the completion {culprit[:80]!r}" if culprit is not None else ""
    raise ConfigError(f"reward {name!r} raised {type(e).__name__}: {str(e)[:160]}{on}", where="train.grpo.rewards",
                      fix=f"make {name} return a number (0) for a completion it cannot parse, never raise: sampled "
                          "answers need not hold what the reward looks for") from e
