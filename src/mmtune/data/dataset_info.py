"""LLaMA-Factory's dataset registry (`dataset_info.json`), read as LLaMA-Factory reads it, so its users
point `data.dataset_info` at their file and name their datasets in `data.train` / `data.eval` unchanged.

An entry names where the data is (`file_name` under the registry's folder -- a file or a folder of
files -- or `hf_hub_url` with optional `subset` / `split`), its `formatting` (`alpaca`, the default, or
`sharegpt`), its `columns` (alpaca: prompt / query / response / history / system; sharegpt: messages /
system; both: images / videos / audios) and, for sharegpt, its `tags` (role_tag / content_tag /
user_tag / assistant_tag / system_tag). Only the columns an entry names are read, as in LLaMA-Factory;
media paths resolve against the registry's folder (LLaMA-Factory's default media_dir). A `ranking: true`
entry (preference pairs: `chosen` / `rejected` columns) is read as data.format=preference. A sharegpt entry's
`tools` column and its function_call / observation turns are read as tool calls (data/tool_calls.py). Entries
mmtune cannot train on (ModelScope / script sources) are refused with the entry's name and the key that makes
them so.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import DataError
from .formats import BadRecord

ALPACA_COLUMNS = {"prompt": "instruction", "query": "input", "response": "output", "history": None, "system": None}
SHAREGPT_COLUMNS = {"messages": "conversations", "system": None, "tools": None}
MEDIA_COLUMNS = {"images": None, "videos": None, "audios": None}
RANKING_COLUMNS = {"chosen": "chosen", "rejected": "rejected"}  # a `ranking: true` entry's pair
SHAREGPT_TAGS = {"role_tag": "from", "content_tag": "value", "user_tag": "human", "assistant_tag": "gpt",
                 "observation_tag": "observation", "function_tag": "function_call", "system_tag": "system"}


@dataclass
class Entry:
    name: str
    registry: Path
    formatting: str
    columns: dict
    tags: dict
    file: Path | None = None
    hub: str | None = None
    subset: str | None = None
    split: str = "train"
    notes: list[str] = field(default_factory=list)
    ranking: bool = False  # preference pairs (chosen / rejected): data.format=preference
    # an alpaca entry naming columns.prompt alone: LLaMA-Factory's way to register a raw-text corpus for stage pt
    # (its own c4_demo / wiki_demo entries), where the prompt column is the document and there is no answer: its
    # rows without the answer column are documents, data.format=text (row_format)
    prompt_only: bool = False

    @property
    def where(self) -> str:
        return f"{self.registry}: {self.name}"

    def rows(self, split: str | None):
        """(base folder for relative media, rows), like rows.iter_rows."""
        from .hub import hub_rows, repo_rows
        from .rows import iter_rows

        split = split or self.split
        if self.hub is not None:
            return hub_rows(self.hub, split, self.subset)
        if self.file.is_dir():  # LLaMA-Factory loads every file of a folder
            return self.registry.parent, repo_rows(self.file, split, self.subset)
        return self.registry.parent, iter_rows(str(self.file), split)[1]

    def row_format(self, row) -> str | None:
        """The data.format a row of this entry is read by, where it is not the entry's (None): a prompt-only
        entry's row with no answer column is one raw-text document (LLaMA-Factory's stage-pt corpus, c4_demo); a
        row that has the answer column ("output" by default) is SFT data, as LLaMA-Factory's stage sft reads it."""
        if self.prompt_only and isinstance(row, dict) and row.get(self.columns["response"]) is None:
            return "text"
        return None

    def to_row(self, row, where: str) -> dict:
        """One row of this entry in the layout its format (`alpaca` / `messages` / `text`) reads."""
        if not isinstance(row, dict):
            return row
        media = {ours: row.get(theirs) for ours, theirs in self.columns.items() if ours in MEDIA_COLUMNS and theirs}
        out = {"id": row["id"]} if row.get("id") is not None else {}
        if self.row_format(row) == "text":
            return {**out, "text": row.get(self.columns["prompt"])}  # format text names a missing or empty one
        if self.ranking:
            return {**out, **media, **self._pair_row(row, where)}
        if self.formatting == "alpaca":
            for key in ("prompt", "response"):
                if row.get(self.columns[key]) is None:
                    raise BadRecord("missing field", f"record has no {self.columns[key]!r} ({self.where}: "
                                    f"columns.{key})", where, f"the record's fields are: {', '.join(sorted(map(str, row)))}; "
                                    f"set columns.{key} in the entry to the field that holds it")
            out.update(instruction=row[self.columns["prompt"]], output=row[self.columns["response"]],
                       input=row.get(self.columns["query"]) if self.columns["query"] else None)
            for key in ("history", "system"):
                if self.columns[key]:
                    out[key] = row.get(self.columns[key])
            return {**out, **media}
        out["messages"] = self._messages(row, where)
        if self.columns["system"] and row.get(self.columns["system"]):
            out["system"] = row[self.columns["system"]]
        if self.columns.get("tools") and row.get(self.columns["tools"]) is not None:
            out["tools"] = row[self.columns["tools"]]  # a JSON string of schemas, as LLaMA-Factory stores it
        return {**out, **media}

    def _pair_row(self, row: dict, where: str) -> dict:
        """A ranking row as data.format=preference reads it: prompt turns, chosen, rejected."""
        sides = {}
        for side in ("chosen", "rejected"):
            v = row.get(self.columns[side])
            if v is None:
                raise BadRecord("missing field", f"record has no {self.columns[side]!r} ({self.where}: columns.{side})",
                                where, f"the record's fields are: {', '.join(sorted(map(str, row)))}")
            if isinstance(v, dict):  # sharegpt: {"from": "gpt", "value": ...}
                v = {"role": "assistant", "content": v.get(self.tags["content_tag"], v.get("content"))}
            sides[side] = v
        if self.formatting == "alpaca":
            prompt = row.get(self.columns["prompt"])
            if not isinstance(prompt, str):
                raise BadRecord("missing field", f"record has no {self.columns['prompt']!r} ({self.where}: "
                                "columns.prompt)", where, f"the record's fields are: {', '.join(sorted(map(str, row)))}")
            query = row.get(self.columns["query"]) if self.columns["query"] else None
            messages = [{"role": "user", "content": prompt + ("\n" + query if isinstance(query, str) and query else "")}]
        else:
            messages = self._messages(row, where)
        if self.columns["system"] and row.get(self.columns["system"]):
            messages = [{"role": "system", "content": row[self.columns["system"]]}, *messages]
        return {"prompt": messages, **sides}

    def _messages(self, row: dict, where: str) -> list[dict]:
        msgs = row.get(self.columns["messages"])
        if not isinstance(msgs, list) or not msgs:
            raise BadRecord("missing field", f"record has no conversation list {self.columns['messages']!r} "
                            f"({self.where}: columns.messages)", where,
                            f"the record's fields are: {', '.join(sorted(map(str, row)))}")
        t = self.tags
        roles = {t["user_tag"]: "user", t["assistant_tag"]: "assistant", t["system_tag"]: "system"}
        messages = []
        for i, m in enumerate(msgs):
            role = m.get(t["role_tag"]) if isinstance(m, dict) else None
            if not isinstance(role, (str, type(None))):
                raise BadRecord("bad type", f"message {i}'s {t['role_tag']} is a {type(role).__name__}, not a role name",
                                where, f"{self.where}: tags name user {t['user_tag']!r}, assistant {t['assistant_tag']!r}")
            if role in (t["observation_tag"], t["function_tag"]):  # tool turns: read by the messages format
                messages.append({"role": "observation" if role == t["observation_tag"] else "function_call",
                                 "content": m.get(t["content_tag"])})
                continue
            if role not in roles:
                raise BadRecord("bad conversation", f"message {i} has {t['role_tag']}={role!r}"[:200], where,
                                f"{self.where}: tags name user {t['user_tag']!r}, assistant {t['assistant_tag']!r}, "
                                f"system {t['system_tag']!r}; set tags.role_tag / user_tag / assistant_tag to match")
            messages.append({"role": roles[role], "content": m.get(t["content_tag"])})
        return messages


# An entry's keys and the types LLaMA-Factory gives them: anything else is an error naming the key, not a
# TypeError from deep inside the reader.
_ENTRY_TYPES = {"file_name": (str,), "hf_hub_url": (str,), "subset": (str,), "split": (str,), "formatting": (str,),
                "columns": (dict,), "tags": (dict,), "ranking": (bool,)}


def _check_types(e: dict, where: str) -> None:
    for key, types in _ENTRY_TYPES.items():
        v = e.get(key)
        if v is not None and not isinstance(v, types):
            raise DataError(f"{where}: {key} is a {type(v).__name__} ({json.dumps(v, default=str)[:60]})",
                            where=f"{where}.{key}", fix=f"{key} is a {' or '.join(t.__name__ for t in types)} in "
                                                        "LLaMA-Factory's dataset_info.json")
    for key in ("columns", "tags"):
        bad = [k for k, v in (e.get(key) or {}).items() if not isinstance(v, (str, type(None)))]
        if bad:
            raise DataError(f"{where}: {key}.{bad[0]} is not a name", where=f"{where}.{key}.{bad[0]}",
                            fix=f"each of {key} maps to the field name (a string) in your records")


def read_registry(path: str | Path) -> dict:
    p = Path(path).expanduser()
    if p.is_dir():  # LLaMA-Factory's dataset_dir
        p = p / "dataset_info.json"
    if not p.is_file():
        raise DataError(f"data.dataset_info: {p} does not exist", where="data.dataset_info",
                        fix="give the path of LLaMA-Factory's dataset_info.json (or the folder holding it)")
    try:
        info = json.loads(p.read_text(encoding="utf-8-sig"))  # -sig: a byte-order mark is dropped
    except json.JSONDecodeError as e:
        raise DataError(f"{p} is not valid JSON ({e.msg})", where=f"{p}:{e.lineno}", fix="fix the syntax") from None
    except UnicodeDecodeError as e:
        raise DataError(f"{p} is not valid UTF-8 (byte {e.start})", where=str(p), fix="re-save the file as UTF-8") from None
    if not isinstance(info, dict) or not all(isinstance(v, dict) for v in info.values()):
        raise DataError(f"{p} is not a dataset registry (an object of name -> entry)", where=str(p),
                        fix="LLaMA-Factory's dataset_info.json maps each dataset name to {file_name | hf_hub_url, ...}")
    return {"__path__": p, **info}


def registry_names(path: str | Path) -> list[str]:
    return [k for k in read_registry(path) if k != "__path__"]


def entry(path: str | Path, name: str) -> Entry:
    """The registry's entry `name`, checked; DataError naming the file and key otherwise."""
    info = read_registry(path)
    reg: Path = info.pop("__path__")
    if name not in info:
        close = difflib.get_close_matches(name, list(info), n=1)
        raise DataError(f"no dataset {name!r} in {reg}", where=f"{reg}: {name}",
                        fix=(f"did you mean {close[0]!r}? " if close else "") + f"names: {', '.join(sorted(info)) or '(none)'}")
    e = info[name]
    where = f"{reg}: {name}"
    _check_types(e, where)
    ranking = bool(e.get("ranking"))  # preference pairs: read as data.format=preference (data/preference.py)
    fmt = e.get("formatting", "alpaca")
    if fmt not in ("alpaca", "sharegpt"):
        raise DataError(f"{name}: formatting {fmt!r} is not one LLaMA-Factory defines", where=f"{where}.formatting",
                        fix="formatting is alpaca or sharegpt")
    given = e.get("columns") or {}
    defaults = {**(ALPACA_COLUMNS if fmt == "alpaca" else SHAREGPT_COLUMNS), **MEDIA_COLUMNS,
                **(RANKING_COLUMNS if ranking else {})}
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise DataError(f"{name}: columns {', '.join(unknown)} are not read for {fmt} data", where=f"{where}.columns",
                        fix=f"{fmt} columns: {', '.join(defaults)}"
                            + ("; tool-calling data is read from sharegpt entries" if "tools" in unknown else ""))
    tags = {**SHAREGPT_TAGS, **(e.get("tags") or {})}
    out = Entry(name=name, registry=reg, formatting=fmt, columns={**defaults, **given}, tags=tags,
                subset=e.get("subset"), split=e.get("split", "train"), ranking=ranking,
                prompt_only=fmt == "alpaca" and not ranking and set(given) - set(MEDIA_COLUMNS) == {"prompt"})
    if e.get("file_name"):
        out.file = (reg.parent / e["file_name"]).expanduser()
        if not out.file.exists():
            raise DataError(f"{name}: file_name {e['file_name']!r} does not exist ({out.file})", where=f"{where}.file_name",
                            fix="file_name is relative to the folder of dataset_info.json")
    elif e.get("hf_hub_url"):
        out.hub = e["hf_hub_url"]
    else:
        has = ", ".join(k for k in ("ms_hub_url", "om_hub_url", "script_url") if e.get(k)) or "no source"
        raise DataError(f"{name} has {has}; mmtune reads file_name or hf_hub_url entries", where=where,
                        fix="download the data and give file_name, or an hf_hub_url")
    return out
