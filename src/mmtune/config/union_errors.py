"""pydantic's errors for a key that takes one of several types (`data.train: str | list[SourceConfig]`), made readable.

pydantic reports every branch of such a union: a mixture with one bad weight came out as four problems, among them
"data.train.str: Input should be a valid string" and the real one under a key like
"data.train.list[function-after[_weight_or_samples(), SourceConfig]].0.weight". Here: the branch names leave the key
(data.train.0.weight); a branch the value is not even the type of is dropped when another branch says what is wrong
inside it; when the value fits no branch, one problem lists what the key takes. Errors under `data.eval` that only
repeat `data.train`'s (the mixture's eval list is derived from its sources when data.eval is unset) are dropped."""

from __future__ import annotations

SCALARS = {"str", "int", "float", "bool", "none", "list", "dict"}


def _is_branch(part) -> bool:
    return isinstance(part, str) and ("[" in part or part in SCALARS or part.startswith("function-"))


def _mismatch(err: dict, branch_at: int) -> bool:
    """The value is not of this branch's type at all (the error is at the branch itself, not inside it)."""
    return len(err["loc"]) == branch_at + 1 and (err["type"].endswith("_type") or err["type"] == "literal_error")


def readable_errors(errors: list[dict], derived_eval: bool = False) -> list[dict]:
    out: list[dict] = []
    unions: dict[tuple, list[tuple[dict, bool]]] = {}
    for err in errors:
        loc = tuple(err["loc"])
        if derived_eval and loc[:2] == ("data", "eval"):
            continue
        at = next((k for k, part in enumerate(loc) if _is_branch(part)), None)
        if at is None:
            out.append(err)
            continue
        clean = {**err, "loc": tuple(p for p in loc if not _is_branch(p))}
        unions.setdefault(loc[:at], []).append((clean, _mismatch(err, at)))
    for key, items in unions.items():
        inside = [e for e, mismatch in items if not mismatch]
        if inside:
            out.extend(inside)
            continue
        wanted = " or ".join(dict.fromkeys(e["msg"].removeprefix("Input should be ") for e, _ in items))
        out.append({**items[0][0], "loc": key, "type": "union_type", "msg": f"Input should be {wanted}"})
    return out
