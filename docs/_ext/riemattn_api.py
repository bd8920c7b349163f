"""Write the API reference's pages from the package's ``__all__`` lists, at every build.

Nothing here is a hand-kept list of names: every public module of :mod:`riemattn` (a dotted name
with no part starting with ``_``) gets a page ``docs/api/<module>.rst``, and every name in its
``__all__`` appears in that page's table. A name is *documented* (an autosummary stub with its
full docstring) once, at its home: the public module that defines it (``obj.__module__``), or,
for objects defined in a private module or data without a ``__module__``, the deepest public
module whose ``__all__`` holds it. Every other module that re-exports the name lists it in a
second table that links to the home page. A name added to any ``__all__`` therefore appears at
the next build with no edit to the docs.

Runs on ``config-inited``: before Sphinx looks for the source files and before autosummary writes
its stubs (``builder-inited``), so the pages written here are read in the same build.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types
from pathlib import Path

PACKAGE = "riemattn"


def public_modules(package: str = PACKAGE) -> list[str]:
    """Every importable public module of *package*, the package itself first."""
    pkg = importlib.import_module(package)
    names = [package]
    for info in pkgutil.walk_packages(pkg.__path__, package + "."):
        if any(part.startswith("_") for part in info.name.split(".")):
            continue
        names.append(info.name)
    out = []
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as exc:  # an optional extra missing: the build must say so, not hide it
            raise RuntimeError(f"API reference: cannot import {name} ({exc}); install the 'docs', "
                               f"'llm' and 'testing' extras") from exc
        out.append(name)
    return out


def exported(module_name: str) -> list[str]:
    mod = importlib.import_module(module_name)
    return list(getattr(mod, "__all__", []))


def home_of(obj, name: str, listing: dict[str, list[str]]) -> str:
    """The public module where *obj* (exported as *name*) is documented."""
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    holders = [m for m, names in listing.items()
               if name in names and getattr(importlib.import_module(m), name, None) is obj]
    defined = getattr(obj, "__module__", None) if (inspect.isclass(obj) or inspect.isroutine(obj)) else None
    if defined in holders:
        return defined
    return max(holders, key=lambda m: (m.count("."), len(m)))


def _title(text: str, char: str = "=") -> str:
    return f"{text}\n{char * len(text)}\n"


def page_text(mod_name: str, listing: dict[str, list[str]]) -> str:
    """The reST page of one public module: its docstring and a table of every name in ``__all__``."""
    mod = importlib.import_module(mod_name)
    own, elsewhere, submodules = [], [], []
    for name in listing[mod_name]:
        obj = getattr(mod, name)
        if isinstance(obj, types.ModuleType):
            submodules.append(obj.__name__)
            continue
        home = home_of(obj, name, listing)
        (own if home == mod_name else elsewhere).append(f"{home}.{name}")
    lines = [_title(f"``{mod_name}``"), f".. automodule:: {mod_name}\n",
             f".. currentmodule:: {mod_name}\n"]
    if own:
        lines.append(".. rubric:: Defined here\n")
        lines.append(".. autosummary::\n   :toctree: generated/\n   :nosignatures:\n")
        lines += [f"   {full.rsplit('.', 1)[1]}" for full in own]
        lines.append("")
    if elsewhere or submodules:
        # full names from here on: autosummary rejects names that start with the current module
        lines.append(".. currentmodule:: None\n")
    if elsewhere:
        lines.append(".. rubric:: Re-exported (documented in their home module)\n")
        lines.append(".. autosummary::\n   :nosignatures:\n")
        lines += [f"   ~{full}" for full in elsewhere]
        lines.append("")
    if submodules:
        lines.append(".. rubric:: Submodules in ``__all__``\n")
        lines.append(".. autosummary::\n")
        lines += [f"   ~{sub}" for sub in submodules]
        lines.append("")
    if not listing[mod_name]:
        lines.append(f"``{mod_name}`` has no ``__all__``: it exports no names (a command-line "
                     f"entry point or a module of the reproductions).\n")
    return "\n".join(lines) + "\n"


def write_pages(app, config=None) -> None:
    outdir = Path(app.srcdir) / "api"
    outdir.mkdir(exist_ok=True)
    modules = public_modules()
    listing = {m: exported(m) for m in modules}
    written = set()
    for mod_name in modules:
        text = page_text(mod_name, listing)
        path = outdir / f"{mod_name}.rst"
        if not path.exists() or path.read_text() != text:  # unchanged files keep Sphinx's cache
            path.write_text(text)
        written.add(path.name)
    for stale in outdir.glob(f"{PACKAGE}*.rst"):
        if stale.name not in written:
            stale.unlink()


# -- references to re-exported names ------------------------------------------------------------
def _lookup(dotted: str, prefer_attribute: bool = False):
    """The object a dotted name reaches by importing its longest module prefix, or None.

    ``riemattn.sweep`` is both a module and the function the package re-exports under that name:
    with *prefer_attribute* the function wins (a ``:func:`` reference), otherwise the module.
    """
    parts = dotted.split(".")
    if prefer_attribute and len(parts) > 1:
        parent = _lookup(".".join(parts[:-1]))
        attr = getattr(parent, parts[-1], None)
        if attr is not None and not isinstance(attr, types.ModuleType):
            return attr
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


def documented_name(dotted: str, prefer_attribute: bool = False) -> str | None:
    """Where the object named *dotted* (possibly through a re-export) is documented."""
    obj = _lookup(dotted, prefer_attribute)
    if obj is None:
        return None
    listing = {m: exported(m) for m in public_modules()}
    if isinstance(obj, types.ModuleType):
        return obj.__name__ if obj.__name__ in listing else None
    name = dotted.rsplit(".", 1)[1]
    owner = getattr(obj, "__qualname__", name)
    if "." in owner and (inspect.isroutine(obj) or inspect.isclass(obj)):  # a method or nested class
        cls_name, member = owner.rsplit(".", 1)
        cls = _lookup(f"{obj.__module__}.{cls_name}")
        cls_home = documented_name(f"{obj.__module__}.{cls_name}") if cls is not None else None
        return f"{cls_home}.{member}" if cls_home else None
    try:
        return f"{home_of(obj, name, listing)}.{name}"
    except ValueError:  # in no __all__: link to the public module that defines it, if any
        module = getattr(obj, "__module__", None)
        while module and any(p.startswith("_") for p in module.split(".")):
            module = module.rsplit(".", 1)[0] if "." in module else None
        return module if module in listing else None


def resolve_reexport(app, env, node, contnode):
    """missing-reference: resolve ``riemattn.sa``, ``energy`` in gradient_flow, ... to their home."""
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip("~.")
    if not target.split(".")[0] == PACKAGE:
        contexts = [node.get("py:module"), ]
        if node.get("py:module") and node.get("py:class"):
            contexts.insert(0, f"{node['py:module']}.{node['py:class']}")
        candidates = [f"{c}.{target}" for c in contexts if c] or [f"{PACKAGE}.{target}"]
    else:
        candidates = [target]
    domain = env.get_domain("py")
    for candidate in candidates:
        home = documented_name(candidate, prefer_attribute=node["reftype"] != "mod")
        if home is None:
            continue
        for reftype in (node["reftype"], "obj", "mod"):
            found = domain.resolve_xref(env, node["refdoc"], app.builder, reftype, home, node, contnode)
            if found is not None:
                return found
    return None


# -- docstrings written for the terminal: |x| is a norm, not a reST substitution -----------------
def escape_bars(app, what, name, obj, options, lines):
    """Escape ``|`` outside literal blocks and inline literals, so ``|x|_W`` stays text."""
    literal_indent = None
    for k, line in enumerate(lines):
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if literal_indent is not None:
            if stripped and indent <= literal_indent:
                literal_indent = None
            else:
                continue
        if stripped.startswith(">>>") or stripped.startswith("..."):
            continue
        if "|" in line:
            pieces = line.split("``")
            for j in range(0, len(pieces), 2):  # even pieces are outside ``inline literals``
                pieces[j] = pieces[j].replace("\\|", "|").replace("|", "\\|")
            lines[k] = "``".join(pieces)
        if stripped.endswith("::"):
            literal_indent = indent


def setup(app):
    app.connect("config-inited", write_pages)
    app.connect("missing-reference", resolve_reexport)
    app.connect("autodoc-process-docstring", escape_bars)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
