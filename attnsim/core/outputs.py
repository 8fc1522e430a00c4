"""One check for every output path a command will write, run before any work.

``check_output(path, flag, kind="file" | "dir", inputs=())`` raises a one-line
:class:`~attnsim.core.config.ConfigError` ``<path>: <flag>: <what>`` (the CLI prints ``error: ...`` and
exits 2) when the path cannot be written, so no simulation runs and no file is written:

* a file output that is an existing folder, or a folder output that is an existing file;
* a file output whose folder does not exist (a typo; ``create=True`` for the paths attnsim picks
  itself, such as ``results/<name>.h5``, and for figure paths inside a figure folder); folder
  outputs (``--out DIR``, ``--fig-dir``) are created with their parents;
* a path whose parent chain runs through a file (``results.h5/x.csv``);
* a read-only target: the existing file, or the nearest existing folder (missing folders are
  created at write time), lacks write permission, no write bit is set in its mode (a file marked
  read-only, even for root), or it sits on a read-only file system;
* an output that is one of the command's ``inputs`` (same file by ``os.path.samefile``, or the same
  resolved path), e.g. ``attnsim asm p.s -o p.s``.

:data:`SafeName` (a pydantic ``str`` type; :func:`check_name` is its rule) is the one validator for
names that become file or folder names (experiment and sweep ``name:``, hence ``results/<name>/``):
letters, digits, ``_ . + -`` and inner spaces, at most 128 characters, not starting with ``.`` or a
space, no path separators, so ``../../x`` or ``/tmp/x`` cannot leave ``results/``.
:data:`RelativePath` / :func:`inside` keep a figure path (``figures[].out``) inside its folder.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Annotated, Iterable, Literal, Optional

from pydantic import AfterValidator

from attnsim.core.config import ConfigError

NAME_RE = re.compile(r"[\w+\-](?:[\w.+\- ]{0,126}[\w.+\-])?")
NAME_RULE = "a plain name (letters, digits, '_.+-', inner spaces; at most 128; no '/', no leading '.')"


def _writable(p: Path, st: os.stat_result) -> bool:
    return os.access(p, os.W_OK | (os.X_OK if stat.S_ISDIR(st.st_mode) else 0)) and bool(st.st_mode & 0o222)


def _nearest_existing(p: Path) -> tuple[Path, Optional[os.stat_result]]:
    q = p
    while True:
        try:
            return q, q.stat()
        except FileNotFoundError:
            if q.parent == q:
                return q, None
            q = q.parent
        except NotADirectoryError:  # a component on the way is a file
            q = q.parent
        except OSError as exc:  # pragma: no cover - e.g. permission denied on a parent
            raise ConfigError(f"cannot inspect ({exc.strerror or exc})", file=str(q)) from None


def _same(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists() and os.path.samefile(a, b):
            return True
    except OSError:  # pragma: no cover
        pass
    return a.resolve() == b.resolve()


def check_output(
    path: str | os.PathLike,
    flag: str,
    kind: Literal["file", "dir"] = "file",
    inputs: Iterable[str | os.PathLike] = (),
    create: bool = False,
) -> Path:
    """Refuse an output path that cannot be written as ``kind`` (see the module docstring); returns it."""
    if not isinstance(path, (str, os.PathLike)):  # the Python API: save(5), sweep(out=None)
        raise ConfigError(f"expected a path, got {type(path).__name__}", file=flag)
    p = Path(path)
    name = str(path)
    if kind == "file" and name.endswith(("/", os.sep)):
        raise ConfigError("expected a file path, got a directory path (trailing '/')", file=name, key=flag)
    for src in inputs:
        if src is not None and _same(p, Path(src)):
            raise ConfigError(f"output is the input file {str(src)!r}; choose another path", file=name, key=flag)
    try:
        st = p.stat()
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        st = None
    except OSError as exc:
        raise ConfigError(f"cannot inspect ({exc.strerror or exc})", file=name, key=flag) from None
    if st is not None:
        is_dir = stat.S_ISDIR(st.st_mode)
        if kind == "file" and is_dir:
            raise ConfigError("expected a file path, got a directory", file=name, key=flag)
        if kind == "dir" and not is_dir:
            raise ConfigError("expected a directory, got a file", file=name, key=flag)
        if kind == "file" and not stat.S_ISREG(st.st_mode):
            raise ConfigError("expected a regular file path, got a special file", file=name, key=flag)
        if not _writable(p, st):
            raise ConfigError(f"read-only {'directory' if is_dir else 'file'}", file=name, key=flag)
        if kind == "dir":
            return p
    anchor, ast = _nearest_existing(p.parent if st is not None or kind == "file" else p)
    if ast is None:  # pragma: no cover - nothing exists up to the root
        raise ConfigError("no existing parent directory", file=name, key=flag)
    if not stat.S_ISDIR(ast.st_mode):
        raise ConfigError(f"{str(anchor)!r} is a file, not a directory", file=name, key=flag)
    if kind == "file" and not create and anchor != p.parent:
        raise ConfigError(f"directory {str(p.parent)!r} does not exist", file=name, key=flag)
    if not _writable(anchor, ast):
        raise ConfigError(f"directory {str(anchor)!r} is read-only", file=name, key=flag)
    return p


def check_name(name: str, what: str = "name", file: Optional[str] = None) -> str:
    """``name`` if it is safe as one file or folder name (see :data:`NAME_RE`), else a ConfigError."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ConfigError(f"expected {NAME_RULE}, got {name!r}", file=file, key=what)
    return name


def _safe_name(v: str) -> str:
    if not NAME_RE.fullmatch(v):
        raise ValueError(f"expected {NAME_RULE}")  # validate() appends ", got <value>"
    return v


SafeName = Annotated[str, AfterValidator(_safe_name)]


def _relative_problem(rel: str) -> Optional[str]:
    r = Path(rel)
    if not str(rel) or r.is_absolute() or ".." in r.parts or str(rel).startswith("~"):
        return "expected a path relative to the figure folder, without '..'"
    return None


def _relative(v: str) -> str:
    problem = _relative_problem(v)
    if problem:
        raise ValueError(problem)  # validate() appends ", got <value>"
    return v


RelativePath = Annotated[str, AfterValidator(_relative)]


def inside(folder: str | os.PathLike, rel: str, what: str, file: Optional[str] = None) -> Path:
    """``folder / rel`` where ``rel`` is relative and stays inside ``folder`` (no '..', not absolute)."""
    problem = _relative_problem(rel)
    if problem:
        raise ConfigError(f"{problem}, got {str(rel)!r}", file=file, key=what)
    return Path(folder) / rel


def figure_paths(out: str | Path, flag: str = "-o", inputs=(), create: bool = False) -> list[Path]:
    """``out`` and its sibling in the other format (PDF <-> PNG; SVG gets a PNG), after checking both
    can be written (:func:`check_output`); call it before rendering. Here, not in attnsim.plots, so
    commands check their figure paths without importing matplotlib."""
    from attnsim.core.config import ConfigError

    check_output(out, flag, inputs=inputs, create=create)  # as given: a trailing '/' means a folder
    out = Path(out)
    suffix = out.suffix.lower()
    if suffix not in (".pdf", ".png", ".svg"):
        raise ConfigError(f"expected a .pdf, .png or .svg file, got {out.name!r}", file=str(out), key=flag)
    paths = [out, out.with_suffix(".pdf" if suffix == ".png" else ".png")]
    check_output(paths[1], flag, inputs=inputs, create=create)
    return paths


# ---------------------------------------------------------------- stored strings on a terminal / in a spreadsheet


def terminal_text(text: str) -> str:
    """``text`` with control and format characters (ESC sequences, BEL, backspace, carriage return, C1 controls,
    bidi overrides; Unicode categories Cc/Cf) written as backslash escapes; newlines and tabs kept. A results
    file received from someone else cannot recolour, retitle or rewrite the terminal it is shown on."""
    import unicodedata

    if text.isprintable():
        return text
    return "".join(
        ch
        if ch in "\n\t" or unicodedata.category(ch) not in ("Cc", "Cf")
        else ch.encode("unicode_escape").decode("ascii")
        for ch in text
    )


class TerminalSafe:
    """A text stream wrapper whose ``write`` passes :func:`terminal_text` (``contextlib.redirect_stdout``
    around a command that prints stored strings: every line, however it is built, is cleaned once)."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, s: str) -> int:
        self._stream.write(terminal_text(s))
        return len(s)

    def __getattr__(self, name):
        return getattr(self._stream, name)


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value):
    """A CSV cell that a spreadsheet does not run: a string starting with ``= + - @`` TAB or CR gets a leading
    ``'`` (OWASP, "CSV Injection"); numbers, and strings that are plain numbers (``-1.5``), are unchanged."""
    if not isinstance(value, str) or not value.startswith(_FORMULA_START):
        return value
    try:
        float(value)
        return value  # a negative number written as text stays a number
    except ValueError:
        return "'" + value
