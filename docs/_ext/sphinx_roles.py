"""Griffe extension for the API reference: reST docstrings to Markdown, and strictness.

The package's docstrings are written for reading in the source and in ``help()``: they
use reST roles (``:class:`~aioproducer.errors.KafkaError` ``), double back-quotes and
``::`` before literal blocks. This turns them into mkdocstrings' Markdown: roles become
cross-references (so a reference to a name that does not exist fails the strict build),
``::`` blocks stay code, doctest blocks are fenced.

It also warns about every public function, method, property or class without a docstring
in the modules the reference page renders (the ``::: module`` lines of
``docs/reference.md``), so ``mkdocs build --strict`` fails on a missing docstring. Adding
a module to the reference is one line in that page.
"""

from __future__ import annotations

import builtins
import logging
import re
from pathlib import Path
from typing import Any

import griffe

_log = logging.getLogger("mkdocs.plugins.griffe_sphinx_roles")

_REFERENCE_PAGE = Path(__file__).resolve().parent.parent / "reference.md"
_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|mod|exc|attr|data|obj|const):`(~?)([^`]+?)`")
_LITERAL = re.compile(r"``([^`]+?)``")


def rendered_modules() -> list[str]:
    """The modules the reference page renders, in page order."""
    text = _REFERENCE_PAGE.read_text(encoding="utf-8")
    return re.findall(r"^::: ([\w.]+)\s*$", text, flags=re.MULTILINE)


class SphinxRoles(griffe.Extension):
    """Rewrites docstrings as Markdown and reports public objects without one."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for obj in _walk(pkg):
            if obj.docstring is not None:
                obj.docstring.value = _to_markdown(obj, obj.docstring.value)
        for name in rendered_modules():
            if name.split(".")[0] != pkg.name:
                continue
            module = _get(pkg, name)
            if module is None:
                _log.warning("reference.md renders %s, which does not exist", name)
                continue
            for path in _undocumented(module):
                _log.warning("%s has no docstring", path)


def _get(pkg: griffe.Module, dotted: str) -> Any:
    obj: Any = pkg
    for part in dotted.split(".")[1:]:
        obj = obj.members.get(part)
        if obj is None:
            return None
    return obj


def _walk(obj: griffe.Object) -> list[griffe.Object]:
    found = [obj]
    for member in obj.members.values():
        if not member.is_alias:
            found.extend(_walk(member))  # type: ignore[arg-type]
    return found


def _public_members(module: Any) -> list[Any]:
    exported = module.exports
    members = []
    for name, member in module.members.items():
        if exported is not None:
            if name not in exported:
                continue
        elif name.startswith("_") or member.is_alias:
            continue
        members.append(member)
    return members


def _undocumented(module: Any) -> list[str]:
    missing = []
    if not module.docstring:
        missing.append(module.path)
    for member in _public_members(module):
        try:
            target = member.final_target if member.is_alias else member
        except griffe.AliasResolutionError:
            continue
        if target.is_attribute or target.is_module:
            continue  # constants are described where they are defined
        if not target.docstring:
            missing.append(f"{module.path}.{member.name}")
        if target.is_class:
            for name, sub in target.members.items():
                if (
                    name.startswith("_")
                    or sub.is_alias
                    or (sub.is_attribute and "property" not in sub.labels)
                ):
                    continue
                if not sub.docstring and not sub.is_class:
                    missing.append(f"{module.path}.{member.name}.{name}")
    return missing


def _resolve(obj: griffe.Object, target: str) -> tuple[str, str] | None:
    """``("internal" | "external", full path)`` of ``target`` as seen from ``obj``, or None."""
    head, _, rest = target.partition(".")
    if head == obj.package.name:
        return "internal", target
    scope: Any = obj
    while scope is not None:
        if head in scope.members:
            member = scope.members[head]
            if member.is_alias and not member.target_path.startswith(obj.package.name + "."):
                return "external", target  # e.g. ``ssl.SSLContext`` through ``import ssl``
            return "internal", f"{member.path}.{rest}" if rest else member.path
        scope = scope.parent
    if hasattr(builtins, head):
        return "external", target
    return None


def _exists(obj: griffe.Object, path: str) -> bool:
    try:
        obj.modules_collection[path]
    except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return False
    return True


def _to_markdown(obj: griffe.Object, text: str) -> str:
    def role(match: re.Match[str]) -> str:
        short, target = match.group(1), match.group(2).strip().removesuffix("()")
        shown = target.rsplit(".", 1)[-1] if short else target
        resolved = _resolve(obj, target.lstrip("."))
        if resolved is not None and resolved[0] == "external":
            return f"`{shown}`"
        if resolved is None or not _exists(obj, resolved[1]):
            _log.warning("%s: cannot resolve the reference %r", obj.path, target)
            return f"`{shown}`"
        # A link where the reference page documents the target; plain code where it does
        # not (a module or helper outside the rendered API, e.g. the command line).
        return f'<autoref identifier="{resolved[1]}" optional><code>{shown}</code></autoref>'

    text = _ROLE.sub(role, text)
    text = _LITERAL.sub(lambda m: f"`{m.group(1)}`", text)
    return _blocks(text)


def _blocks(text: str) -> str:
    """``::`` literal blocks and doctest blocks as fenced code."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.rstrip().endswith("::"):
            stripped = line.rstrip()[:-2].rstrip()
            if stripped:
                out.append(stripped + ":")
            i += 1
            while i < len(lines) and not lines[i].strip():
                i += 1
            block: list[str] = []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith((" ", "\t"))):
                block.append(lines[i])
                i += 1
            while block and not block[-1].strip():
                block.pop()
            indent = min(len(b) - len(b.lstrip()) for b in block if b.strip()) if block else 0
            out += ["", "```python", *(b[indent:] for b in block), "```", ""]
            continue
        if line.lstrip().startswith(">>>"):
            block = []
            while i < len(lines) and lines[i].strip():
                # doctest directives are for the test runner, not the reader
                block.append(re.sub(r"\s*# doctest:.*$", "", lines[i].strip()))
                i += 1
            out += ["```pycon", *block, "```"]
            continue
        out.append(line)
        i += 1
    return "\n".join(out)
