"""Workspace paths: normalised relative paths that cannot leave the run's workspace (SPEC §7).

Rules, in order:

- Surrounding whitespace is stripped, then the text is put in Unicode NFC so
  that "café.md" typed two ways is one file.
- A leading "/" is the workspace root, not the machine's: "/etc/passwd" is
  the workspace file "etc/passwd". Likewise "./" and repeated slashes go.
- Refused: direction controls and invisible characters (``mas_core.text``:
  U+202E would show "a\u202Etxt.exe" as "aexe.txt"); "." and ".." segments that climb ("a/../../x" and also "a/../b" —
  no segment may be ".."), backslashes and Windows drives ("C:\\x", "..\\x"),
  NUL and other control characters, segments that look like "..", "." or a
  separator once compatibility-normalised ("．．", "∕"), empty paths, paths
  longer than :data:`MAX_PATH_LENGTH` characters.

Every refusal is a :class:`~tools_app.plugin.ToolError` whose message the
model can act on.
"""

from __future__ import annotations

import difflib
import re
import unicodedata

from mas_core.text import BIDI_CONTROLS, describe, hidden_character
from tools_app.plugin import ToolError

MAX_PATH_LENGTH = 500

_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_DRIVE_RE = re.compile(r"^[A-Za-z]:")
# Characters that look like a separator but survive NFKC: refused so a path
# never reads differently to a person, a model and a file system.
_SEPARATOR_LOOKALIKES = frozenset("\u2215\u2044\u29f8\u29f9\ufe68\u2216")


def _leaves(path: str) -> ToolError:
    return ToolError(f"path {path!r} leaves the workspace: '..' segments are not allowed")


def _clean(raw: object, *, allow_empty: bool) -> tuple[str, list[str], bool]:
    """Common checks; returns (original, segments, had_trailing_slash)."""
    if not isinstance(raw, str):
        raise ToolError(f"path must be a string, got {type(raw).__name__}")
    original = raw
    if "\x00" in raw:
        raise ToolError(f"path {original!r} contains a NUL character")
    path = unicodedata.normalize("NFC", raw.strip())
    if _CONTROL_RE.search(path):
        raise ToolError(f"path {original!r} contains a control character")
    hidden = hidden_character(path)
    if hidden is not None:
        kind = "a direction control" if hidden in BIDI_CONTROLS else "an invisible character"
        raise ToolError(f"path {original!r} contains {kind} ({describe(hidden)}); remove it")
    if "\\" in path:
        raise ToolError(f"path {original!r} contains a backslash; use '/' to separate folders")
    if _DRIVE_RE.match(path):
        raise ToolError(f"path {original!r} is a drive path; workspace paths are relative, like 'notes/plan.md'")
    if not path and not allow_empty:
        raise ToolError("path is empty; give a file path like 'notes/plan.md'")
    trailing = path.endswith("/")
    segments = []
    for segment in path.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            raise _leaves(original)
        folded = unicodedata.normalize("NFKC", segment)
        if folded in (".", "..") or "/" in folded or "\\" in folded or _SEPARATOR_LOOKALIKES.intersection(folded):
            raise ToolError(f"path {original!r} has a segment {segment!r} that reads as '.', '..' or a separator")
        segments.append(segment)
    if len("/".join(segments)) > MAX_PATH_LENGTH:
        raise ToolError(f"path is too long ({len('/'.join(segments))} characters, max {MAX_PATH_LENGTH})")
    return original, segments, trailing


def normalise_path(raw: object) -> str:
    """A file path: "./notes//a.md" → "notes/a.md"; raise ToolError when it is not one."""
    original, segments, trailing = _clean(raw, allow_empty=False)
    if not segments:
        raise ToolError(f"path {original!r} names the workspace root, not a file")
    if trailing:
        raise ToolError(f"path {original!r} ends with '/': give a file name, like 'notes/plan.md'")
    return "/".join(segments)


def normalise_prefix(raw: object) -> str:
    """A listing prefix: may be empty (everything) and keeps a trailing "/" ("notes/")."""
    _original, segments, trailing = _clean(raw, allow_empty=True)
    if not segments:
        return ""
    return "/".join(segments) + ("/" if trailing else "")


def is_agent_file(path: str) -> bool:
    """Agent definitions written into the workspace: ``agents/**.md``."""
    return path.startswith("agents/") and path.endswith(".md")


def top_level_prefixes(paths: list[str]) -> list[str]:
    """First segments of the paths: "notes/" for folders, the name for top-level files."""
    return sorted({path.split("/", 1)[0] + ("/" if "/" in path else "") for path in paths})


MAX_LISTED_FILES = 50


def missing_file_message(path: str, paths: list[str]) -> str:
    """'File not found' with the closest paths (difflib, same file name) and the files that exist."""
    if not paths:
        return f"File not found: {path}. The workspace is empty."
    name = path.rsplit("/", 1)[-1]
    similar = difflib.get_close_matches(path, paths, n=3, cutoff=0.6)
    similar += [p for p in paths if p.rsplit("/", 1)[-1] == name and p not in similar]
    message = f"File not found: {path}."
    if similar:
        message += f" Did you mean: {', '.join(similar[:5])}?"
    listed = ", ".join(paths[:MAX_LISTED_FILES])
    more = f", … and {len(paths) - MAX_LISTED_FILES} more" if len(paths) > MAX_LISTED_FILES else ""
    return message + f" Files in the workspace ({len(paths)}): {listed}{more}"
