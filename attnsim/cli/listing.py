"""``attnsim list KIND``: the built-in (and ``$ATTNSIM_CONFIG_PATH``) configs of one kind, one line each."""

from __future__ import annotations

# kind -> config folder (attnsim.core.config.search_dirs); recipes and reproductions are not YAML folders
CONFIG_KINDS = ("systems", "models", "hardware", "experiments", "sweeps", "stacks")
KINDS = CONFIG_KINDS + ("recipes", "reproductions")
_WIDTH = 110  # descriptions are cut to this many characters (the full text is in the file)


def register(sub) -> None:
    p = sub.add_parser(
        "list",
        help="list the systems, models, hardware, experiments, ... attnsim knows",
        description="One line per config of KIND: its name and a short description (the file's "
        "description key, else its first comment line). --json: a list of {name, description, "
        "file} (hardware also kind).",
    )
    p.add_argument("kind", choices=KINDS, help="what to list")
    p.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    p.set_defaults(func=list_cmd)


def _first_comment(text: str) -> str:
    """The first comment paragraph of a YAML file, as one line."""
    lines = []
    for ln in text.splitlines():
        s = ln.strip()
        if s.startswith("#"):
            lines.append(s.lstrip("#").strip())
        elif lines or s:
            break
    return " ".join(x for x in lines if x)


def _short(text: str) -> str:
    """The first sentence of ``text``, cut to _WIDTH characters."""
    text = " ".join(str(text).split())
    depth = 0
    for i, ch in enumerate(text[:_WIDTH]):  # the first '. ' outside parentheses ends the sentence
        depth += (ch in "([") - (ch in ")]")
        if ch == "." and depth <= 0 and text[i + 1 : i + 2] == " ":
            text = text[: i + 1]
            break
    return text if len(text) <= _WIDTH else text[: _WIDTH - 3].rstrip() + "..."


def entries(kind: str) -> list[dict]:
    """``[{name, description, file}]`` (sorted by name) for one kind of :data:`KINDS`."""
    from attnsim.core.config import ConfigError, display_path, find_config, parse_yaml, read_text_file

    if kind == "recipes":
        from attnsim.core.plot_options import DOC_RECIPE_SUMMARIES
        from attnsim.plots import RECIPES

        table = [
            {"name": n, "description": _short((f.__doc__ or "").strip()), "file": None} for n, f in RECIPES.items()
        ]
        return table + [{"name": n, "description": t, "file": None} for n, t in DOC_RECIPE_SUMMARIES.items()]
    if kind == "reproductions":
        from attnsim.studies import reproduce

        out = []
        for folder in reproduce.folders():
            spec = reproduce.read_spec(folder)
            out.append({"name": folder.name, "description": _short(spec.title), "file": display_path(folder)})
        return out
    from attnsim.core.config import available

    out = []
    for name in available(kind):
        path = find_config(kind, name)
        text = read_text_file(path, kind="document")
        try:
            data = parse_yaml(text, file=display_path(path))
        except ConfigError:
            data = None
        data = data if isinstance(data, dict) else {}
        desc = data.get("description") or _first_comment(text) or data.get("name") or ""
        if kind == "models" and "num_layers" in data:  # the shape, from the file's own keys
            heads = f"{data.get('num_heads')}/{data.get('num_kv_heads', data.get('num_heads'))} heads"
            desc = f"{_short(desc).rstrip('.')}: {data['num_layers']} layers, hidden {data.get('hidden_size')}, {heads}"
        e = {"name": name, "description": _short(desc), "file": display_path(path)}
        if kind == "hardware":
            e["kind"] = str(data.get("kind", "?"))
        out.append(e)
    return out


def list_cmd(args) -> int:
    from attnsim.core.report import table

    rows = entries(args.kind)
    if args.json:
        from attnsim.sim.results import dumps

        print(dumps(rows, indent=1))
        return 0
    if args.kind == "hardware":
        print(table([[r["name"], r["kind"], r["description"]] for r in rows], ["name", "kind", "description"]))
    else:
        print(table([[r["name"], r["description"]] for r in rows], ["name", "description"]))
    return 0
