"""YAML + profile + `key=value` overrides -> a validated RunConfig.

Order of precedence, written once here (later wins; `layered`):
  built-in defaults (schema.py) < a profile named inside the recipe (`profile: NAME`: its defaults)
  < the recipe file < a profile named on the command line (`profile=NAME`) < explicit `key=value`.
A profile on the command line is a request to make the run that (`profile=t4_qlora` makes it a QLoRA run
on a T4 whatever the recipe says); a profile inside the recipe is the recipe author's starting point, which
the recipe's own keys refine. Where each value not from the recipe came from is kept on the config
(`config_sources`) and printed as decisions: the start-up summary, config.resolved.yaml and `plan`.

Every problem is collected and raised once (a ConfigError with `.problems`), each naming the key,
the source (file or command line) and a did-you-mean where a near key exists.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError
from .schema import RunConfig

# Recipes and profiles ship inside the package (src/mmtune/recipes links to the checkout's recipes/),
# so `profile=t4_qlora` and `--recipe demo_counting` work from an installed wheel too.
RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"


def profile_dirs() -> list[Path]:
    return [Path.cwd() / "recipes" / "profiles", RECIPES_DIR / "profiles"]


def available_recipes() -> list[str]:
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def find_config(path: str | Path) -> Path:
    """A config path as given; else a shipped recipe by name (`demo_counting`) or by its path in a
    checkout (`recipes/demo_counting.yaml`, as the README writes it), wherever mmtune is installed."""
    p = Path(path).expanduser()
    if p.is_file():
        return p
    name = p.name.removesuffix(".yaml")
    shipped = RECIPES_DIR / f"{name}.yaml"
    if shipped.is_file() and (p.parent in (Path("."), Path("recipes")) or p == Path(name)):
        return shipped
    close = difflib.get_close_matches(name, available_recipes(), n=1)
    raise ConfigError(f"config file {str(p)!r} does not exist, and no recipe is called {name!r}", where=str(p),
                      fix=(f"did you mean {close[0]!r}? " if close else "")
                      + f"give a YAML path, or a recipe name: {', '.join(available_recipes())}")


def available_profiles() -> list[str]:
    names = set()
    for d in profile_dirs():
        if d.is_dir():
            names.update(p.stem for p in d.glob("*.yaml"))
    return sorted(names)


def parse_value(text: str) -> Any:
    """A command-line value, parsed as YAML so `3`, `1e-4`, `true`, `[a, b]` and `null` have types."""
    try:
        return unsplit_pairs(yaml.load(text, Loader=_UniqueKeyLoader)) if text != "" else ""
    except (yaml.YAMLError, RecursionError):
        return text


def unsplit_pairs(value: Any) -> Any:
    """`{question:instruction}` is, to YAML, one key `question:instruction` with no value (a flow
    mapping wants a space after the colon). Nobody means that: read it as `{question: instruction}`."""
    if not isinstance(value, dict):
        return value
    out = {}
    for k, v in value.items():
        if v is None and isinstance(k, str) and ":" in k and "://" not in k:
            k, _, v = k.partition(":")
            k, v = k.strip(), parse_value(v.strip())
        out[k] = v
    return out


def set_dotted(tree: dict, dotted: str, value: Any) -> None:
    node = tree
    parts = dotted.split(".")
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = value


def deep_merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for k, v in top.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


class DuplicateKey(yaml.YAMLError):
    def __init__(self, key, first, second):
        self.key, self.first, self.second = key, first, second
        super().__init__(f"key {key!r} given twice")


# A config is a few hundred values. YAML aliases (`*a`) repeat a node without copying it, so ten lines of
# nested aliases ("billion laughs") stand for 10^9 values: anything that walks the tree (validation, the
# written config.resolved.yaml) would never end. The tree a file stands for is measured as composed, with
# each alias counted at its full size, and refused past this many nodes.
MAX_CONFIG_NODES = 100_000


class AliasBomb(yaml.YAMLError):
    def __init__(self, nodes: int):
        self.nodes = nodes
        super().__init__(f"the YAML expands to more than {nodes:,} values")


def _expanded_size(node, memo: dict, limit: int) -> int:
    """Nodes of the tree `node` stands for, aliases expanded (each shared node sized once, by identity)."""
    got = memo.get(id(node))
    if got is not None:
        return got
    memo[id(node)] = 1  # a recursive alias (`&a [*a]`) counts once, instead of looping
    if isinstance(node, yaml.SequenceNode):
        children = node.value
    elif isinstance(node, yaml.MappingNode):
        children = [n for pair in node.value for n in pair]
    else:
        children = []
    total = 1
    for child in children:
        total += _expanded_size(child, memo, limit)
        if total > limit:
            raise AliasBomb(limit)
    memo[id(node)] = total
    return total


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys in one mapping without a word: a second `data:` section would
    drop the first one's data.train, a second `lr:` would win unseen. Here that is an error naming both lines."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *defaults` merges on purpose
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node.start_mark)
                except TypeError:  # an unhashable key: PyYAML's own error follows
                    continue
                if first is not key_node.start_mark:
                    raise DuplicateKey(key, first, key_node.start_mark)
        return super().construct_mapping(node, deep)

    def get_single_node(self):
        node = super().get_single_node()
        if node is not None:
            _expanded_size(node, {}, MAX_CONFIG_NODES)
        return node


def read_yaml(path: str | Path) -> dict:
    p = find_config(path)
    try:
        data = yaml.load(p.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader) or {}
    except DuplicateKey as e:
        raise ConfigError(f"{p}: key {e.key!r} is given twice in the same section (line {e.first.line + 1} and "
                          f"line {e.second.line + 1}); YAML would silently keep only the second",
                          where=f"{p}:{e.first.line + 1} and {p}:{e.second.line + 1}",
                          fix=f"keep one {e.key!r} (merge the two into one section if it is a section)") from None
    except AliasBomb as e:
        raise ConfigError(f"{p}: {e} through YAML aliases (*name); no run config is that large", where=str(p),
                          fix="write the values out instead of nesting aliases of aliases") from None
    except RecursionError:
        raise ConfigError(f"{p} is nested too deeply to be a run config", where=str(p),
                          fix="a config is sections of keys (model:, data:, train: ...)") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{p}:{mark.line + 1}" if mark else str(p)
        raise ConfigError(f"{p} is not valid YAML: {getattr(e, 'problem', e)}", where=where,
                          fix="fix the YAML syntax at that line") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{p} is not valid UTF-8 (byte {e.start})", where=str(p),
                          fix="re-save the file as UTF-8") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p} must hold a mapping of sections (model:, data:, ...), not a {type(data).__name__}",
                          where=str(p), fix="write the config as sections: `model:`, `data:`, `train:` ... "
                                            "(see recipes/demo_counting.yaml)")
    return anchor_shipped_data(data, p)


def _is_shipped(p: Path) -> bool:
    try:
        return p.resolve().is_relative_to(RECIPES_DIR.resolve())
    except OSError:
        return False


def anchor_shipped_data(tree: dict, p: Path) -> dict:
    """A shipped recipe names its example data as in a checkout (`recipes/data/image_qa.jsonl`, relative to
    the current directory). Run from a wheel, outside a checkout, that path does not exist; the copy shipped
    beside the recipe does. Such a path is then read from the package (an absolute path into it); a
    `recipes/...` file under the current directory still wins (a checkout, or the user's own copy).
    `shipped_data_notes` says so among the run's decisions."""
    if not _is_shipped(p) or not isinstance(tree.get("data"), dict):
        return tree

    def anchored(value):
        if isinstance(value, dict):
            return {k: anchored(v) for k, v in value.items()}
        if isinstance(value, list):
            return [anchored(v) for v in value]
        if isinstance(value, str) and value.startswith("recipes/"):
            file, sep, split = value.partition("::")  # PATH::SPLIT names a split of PATH
            here, packaged = Path(file), RECIPES_DIR.parent / file
            if not here.exists() and packaged.exists():
                return str(packaged) + sep + split
        return value

    return {**tree, "data": anchored(tree["data"])}


def shipped_data_notes(tree: dict, sources: dict) -> None:
    """Note in `sources` (the run's decisions) each data key read from the package's copy of a shipped recipe's
    example data, unless a later layer (a profile, the command line) already owns the key."""
    data = tree.get("data")
    if not isinstance(data, dict):
        return
    root = str(RECIPES_DIR.parent) + "/"
    for key, value in _leaves(data, "data.").items():
        if key not in sources and root in str(value):
            sources[key] = ("the shipped recipe's example data, read from the installed package (no recipes/data/ "
                            "under the current directory)")


def load_profile(name: str) -> dict:
    for d in profile_dirs():
        f = d / f"{name}.yaml"
        if f.is_file():
            return read_yaml(f)
    known = available_profiles()
    close = difflib.get_close_matches(name, known, n=1)
    raise ConfigError(f"unknown profile {name!r}", where="profile=",
                      fix=(f"did you mean {close[0]!r}? " if close else "") + f"known profiles: {', '.join(known)}")


def _schema_keys(model_cls, prefix: str = "") -> list[str]:
    keys = []
    for name, field in model_cls.model_fields.items():
        name = field.alias or name  # model.class (the field class_)
        keys.append(prefix + name)
        ann = field.annotation
        if isinstance(ann, type) and hasattr(ann, "model_fields"):
            keys.extend(_schema_keys(ann, prefix + name + "."))
    return keys


def suggest(key: str) -> str | None:
    """The closest valid dotted key, compared both whole and by the last segment."""
    keys = _schema_keys(RunConfig)
    hit = difflib.get_close_matches(key, keys, n=1, cutoff=0.6)
    if hit:
        return hit[0]
    leaf = key.split(".")[-1]
    by_leaf = {k.split(".")[-1]: k for k in keys}
    hit = difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.7)
    return by_leaf[hit[0]] if hit else None


def _source_of(key: str, overrides: dict[str, str], path: str | None) -> str:
    for k in overrides:
        if key == k or key.startswith(k + ".") or k.startswith(key + "."):
            return f"command line: {k}={overrides[k]}"
    return f"{path}: {key}" if path else key


def validate(tree: dict, *, path: str | None = None, overrides: dict[str, str] | None = None) -> RunConfig:
    from pydantic import ValidationError

    overrides = overrides or {}
    try:
        return RunConfig.model_validate(tree)
    except ValidationError as e:
        from .union_errors import readable_errors

        problems = []
        data = tree.get("data") if isinstance(tree.get("data"), dict) else {}
        derived_eval = isinstance(data.get("train"), list) and data.get("eval") is None  # a mixture's own eval splits
        for err in readable_errors(e.errors(), derived_eval):
            key = ".".join(str(x) for x in err["loc"])
            where = _source_of(key, overrides, path)
            if err["type"] == "extra_forbidden":
                from .aliases import foreign_key, foreign_note, foreign_setting

                theirs = foreign_key(key)
                close = theirs[0] if theirs else suggest(key)
                msg = f"unknown key {key!r}"
                fix = f"did you mean {close!r}?" if close else "remove it; see docs/config.md for every key"
                if theirs and not theirs[0]:  # another tool's setting with no counterpart here
                    fix = "remove it"
                if theirs and theirs[1]:
                    fix += f" ({key.split('.')[-1]} is the name in {theirs[1]})"
                if theirs and foreign_note(key):
                    fix += f": {foreign_note(key)}"
                if setting := foreign_setting(key, err.get("input")):  # their value says which of our keys
                    fix = f"did you mean {setting[0]}? ({setting[1]})"
            elif err["type"] == "missing":
                msg = f"missing required key {key!r}"
                fix = f"add {key}: ... to the config or pass {key}=... on the command line"
            elif err["type"] == "value_error":  # our cross-field rules: the message names the keys itself
                text = str(err["msg"]).removeprefix("Value error, ")
                key = text.split("=")[0].split(":")[0] if not key else key
                where = _source_of(key, overrides, path)
                msg, fix = (f"{key}: {text}" if not text.startswith(key) else text), None
            else:
                from .foreign_values import section_hint, value_hint

                msg = f"{key}: {err['msg']} (got {err.get('input')!r})"
                # a choice or a section written in another tool's words: say ours (config/foreign_values.py)
                fix = (value_hint(key, err.get("input")) if err["type"] == "literal_error" else
                       section_hint(RunConfig, key, err.get("input")) if err["type"] in ("model_type", "dict_type")
                       else None)
            problems.append({"key": key, "message": msg, "where": where, "fix": fix})
        lines = [f"- {p['message']} [{p['where']}]" + (f" -> {p['fix']}" if p["fix"] else "") for p in problems]
        raise ConfigError(f"the config has {len(problems)} problem(s):\n" + "\n".join(lines),
                          where=path, problems=problems) from None


def split_overrides(args: list[str]) -> dict[str, str]:
    _refuse_flags(args)
    out = {}
    for a in args:
        if "=" not in a:
            raise ConfigError(f"override {a!r} is not key=value", where="command line",
                              fix="write overrides as dotted.key=value, e.g. train.max_steps=50")
        k, v = a.split("=", 1)
        out[k.strip()] = v
    return out


def _refuse_flags(args: list[str]) -> None:
    """`--learning_rate 2e-4` (an HF script's flag) or `--train.lr=1e-4`: overrides are key=value only; each such
    flag is named with the override that says it (another tool's name translated, config/aliases.py)."""
    from .aliases import foreign_key, foreign_note, foreign_setting

    flags, i = [], 0
    while i < len(args):
        a = args[i]
        if not a.startswith("--") or len(a) < 3:
            i += 1
            continue
        key, eq, value = a[2:].partition("=")
        if not eq and i + 1 < len(args) and not args[i + 1].startswith("--") and "=" not in args[i + 1]:
            value, i = args[i + 1], i + 1
        key = key.replace("-", "_") if "." not in key else key
        ours = foreign_key(key)
        target = ours[0] if ours and ours[0] else key if key in _schema_keys(RunConfig) else suggest(key)
        fix = f"{target}={value or 'VALUE'}" if target else "(no such option or config key: mmtune train --help)"
        if ours and not ours[0]:  # another tool's setting with nothing here: no near key guessed (as the YAML path)
            fix = "drop it" + (f", {foreign_note(key)}" if foreign_note(key) else "")
        if setting := foreign_setting(key, value):  # `--stage pt`: data.format=text, not train.objective=pt
            fix = setting[0]
        flags.append((a if eq else f"{a} {value}".strip(), fix, ours))
        i += 1
    if flags:
        said = "; ".join(f"{flag} -> {fix}" + (f" ({ours[1]}'s name)" if ours and ours[1] else "")
                         for flag, fix, ours in flags)
        raise ConfigError(f"{len(flags)} command-line option(s) mmtune does not have: {said}", where="command line",
                          fix="write settings as dotted key=value after the config, e.g. mmtune train CONFIG.yaml "
                              + " ".join(fix for _, fix, _ in flags if "=" in fix) + " (docs/config.md lists every key)")


# Keys that say one thing two ways: a later layer (the file over a profile, the command line over the
# file) naming one of a pair replaces the other, so `train.epochs=3` on the command line overrides a
# recipe's `train.max_steps` instead of colliding with it. Both in one layer is an error (schema).
EXCLUSIVE = (("max_steps", "epochs"), ("warmup_steps", "warmup_ratio"))


def _train_keys(tree: dict) -> set[str]:
    train = tree.get("train")
    return {k for k, v in train.items() if v is not None} if isinstance(train, dict) else set()


def drop_overridden(lower: dict, upper_train_keys: set[str]) -> dict:
    """`lower` without the train keys that `upper` replaces by naming their pair."""
    train = lower.get("train")
    if not isinstance(train, dict):
        return lower
    drop = {b for a, b in EXCLUSIVE if a in upper_train_keys} | {a for a, b in EXCLUSIVE if b in upper_train_keys}
    if not drop & set(train):
        return lower
    return {**lower, "train": {k: v for k, v in train.items() if k not in drop}}


def _leaves(tree: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict) and v:
            out.update(_leaves(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _note(sources: dict | None, layer: dict, name: str, below: dict) -> None:
    """Record `name` as the source of each leaf of `layer`, with the value it replaced (from `below`)."""
    if sources is None:
        return
    old = _leaves(below)
    for key, value in _leaves(layer).items():
        was = old.get(key)
        sources[key] = name + (f"; was {was!r} from {sources.get(key, 'the recipe')}"
                               if key in old and was != value else "")


def layered(tree: dict, ov: dict[str, str], sources: dict | None = None, recipe: str = "the recipe") -> dict:
    """The file's tree with its layers (module docstring): the profile it names under it, a command-line
    profile over it, then the command line's `key=value` (`ov` loses its `profile` key). A later layer's key
    replaces its EXCLUSIVE pair from an earlier one. `sources` (when given) is filled with where each value
    not from the file came from. The doctor builds its tree through this too, so both read one config alike."""
    own, named = tree.pop("profile", None), ov.pop("profile", None)
    if isinstance(own, str) and own:
        base = load_profile(own)
        _note(sources, base, f"profile {own} (named in {recipe}; the recipe's own keys win)", {})
        if sources is not None:  # the recipe's keys replace the profile's: theirs are no longer in force
            for key in _leaves(tree):
                sources.pop(key, None)
        tree = deep_merge(drop_overridden(base, _train_keys(tree)), tree)
    if named:
        top = load_profile(named)
        _note(sources, top, f"profile {named} (command line)", tree)
        tree = deep_merge(drop_overridden(tree, _train_keys(top)), top)
    tree = drop_overridden(tree, {k.split(".", 1)[1] for k in ov if k.startswith("train.")})
    for k, v in ov.items():
        value, layer = parse_value(v), {}
        set_dotted(layer, k, value)
        _note(sources, layer, f"command line: {k}={v}", tree)
        set_dotted(tree, k, value)
    from .format_defaults import with_format_defaults

    return with_format_defaults(tree, sources)


def load_config(path: str | Path | None, overrides: list[str] | dict[str, str] | None = None) -> RunConfig:
    """Read, merge and validate. `overrides` are `key=value` strings (or a dict of them)."""
    ov = overrides if isinstance(overrides, dict) else split_overrides(list(overrides or []))
    if path is not None:
        path = find_config(path)  # also done by read_yaml; here so messages name the file read
    tree = read_yaml(path) if path is not None else {}
    sources: dict[str, str] = {}
    tree = layered(tree, ov, sources, recipe=str(path) if path else "the recipe")
    shipped_data_notes(tree, sources)
    if isinstance(tree.get("data"), dict) and isinstance(tree["data"].get("columns"), dict):
        tree["data"]["columns"] = unsplit_pairs(tree["data"]["columns"])  # the same slip in a YAML file
    return with_sources(validate(tree, path=str(path) if path else None, overrides=ov), sources)


def with_sources(cfg: RunConfig, sources: dict[str, str]) -> RunConfig:
    """`cfg` carrying where each value not from the recipe came from (a profile, the command line)."""
    cfg._sources = dict(sources)
    return cfg


def config_sources(cfg) -> dict[str, str]:
    """Dotted key -> where its value came from, for the keys a profile or the command line set."""
    return dict(getattr(cfg, "_sources", None) or {})


def dump_config(cfg: RunConfig) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
