"""Generate man/pmem.1, completions/ and the docs site's reference pages (docs/reference/, by
pmem.cli.site) from the command tree and the code, so they cannot drift.

    python -m pmem.cli.docs          # rewrite man/, completions/ and docs/reference/
    python -m pmem.cli.docs --check  # exit 1 if they are stale (tests/cli/test_docs.py does this)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Opt:
    names: list[str]
    help: str
    takes_value: bool


@dataclass
class Cmd:
    path: list[str]
    help: str
    usage: str
    options: list[Opt] = field(default_factory=list)
    arguments: list[str] = field(default_factory=list)
    children: list["Cmd"] = field(default_factory=list)


def command_tree() -> Cmd:
    """Every command of `pmem` that a person sees (hidden ones left out), with its help, usage,
    options and arguments: what the man page, the completions and the site's reference are made of."""
    import typer.main

    from .app import app

    root = typer.main.get_command(app)

    def walk(cmd, path: list[str], parent_ctx) -> Cmd:
        ctx = type(parent_ctx)(cmd, info_name=path[-1], parent=parent_ctx) if parent_ctx else \
            root.context_class(cmd, info_name="pmem")
        node = Cmd(path=path, help=(cmd.help or "").strip(), usage=" ".join(cmd.collect_usage_pieces(ctx)))
        for p in cmd.get_params(ctx):
            if getattr(p, "param_type_name", "") == "argument":
                node.arguments.append((p.metavar or p.name or "").upper())
            else:
                node.options.append(Opt(names=list(p.opts) + list(p.secondary_opts), help=p.help or "",
                                        takes_value=not getattr(p, "is_flag", False)))
        for name in cmd.list_commands(ctx) if hasattr(cmd, "list_commands") else []:
            child = cmd.get_command(ctx, name)
            if child is not None and not child.hidden:
                node.children.append(walk(child, path + [name], ctx))
        return node

    return walk(root, ["pmem"], None)


def every_command(node: Cmd) -> Iterator[Cmd]:
    """`node` and every command below it, depth first."""
    yield node
    for c in node.children:
        yield from every_command(c)


def _roff(text: str) -> str:
    lines = []
    for line in text.replace("\\", "\\e").splitlines():
        if line.startswith((".", "'")):
            line = "\\&" + line
        lines.append(line.replace("-", "\\-"))
    return "\n".join(lines)


def _help_body(text: str) -> str:
    """Click's \\b marks a block to keep as typed: render it with .nf/.fi."""
    out: list[str] = []
    for para in text.split("\n\n"):
        if para.lstrip().startswith("\b"):
            body = para.lstrip()[1:].strip("\n")
            out.append(".nf\n" + _roff(body) + "\n.fi")
        else:
            out.append(_roff(" ".join(para.split())))
        out.append(".PP")
    return "\n".join(out[:-1]) if out else ""


def man_page(tree: Cmd) -> str:
    from ..version import __version__

    parts = [
        f'.TH PMEM 1 "" "pmem {__version__}" "User Commands"',
        ".SH NAME",
        "pmem \\- a personal memory for you and your LLM tools, in one local SQLite file",
        ".SH SYNOPSIS",
        ".B pmem",
        "[\\-\\-db PATH] COMMAND [ARGS]...",
        ".SH DESCRIPTION",
        _help_body(tree.help),
        ".SH GLOBAL OPTIONS",
    ]
    for o in tree.options:
        parts += [".TP", "\\fB" + _roff(", ".join(o.names)) + "\\fR", _roff(o.help)]
    parts.append(".SH COMMANDS")
    for node in list(every_command(tree))[1:]:
        name = " ".join(node.path[1:])
        args = " ".join(node.arguments)
        parts += [".SS " + _roff(f"pmem {name} {args}".strip()), _help_body(node.help)]
        for o in node.options:
            if "--help" in o.names:
                continue
            parts += [".TP", "\\fB" + _roff(", ".join(o.names)) + "\\fR", _roff(o.help)]
    parts += [
        ".SH ENVIRONMENT",
        ".TP", "\\fBPMEM_HOME\\fR", "Directory for all state: database, config.toml, models, backups.",
        ".TP", "\\fBPMEM_DB\\fR", "The database file (overrides PMEM_HOME for the database only).",
        ".TP", "\\fBPMEM_MODELS_DIR\\fR", "Where models are cached.",
        ".TP", "\\fBPMEM_EMBED_MODEL\\fR, \\fBPMEM_CHAT_MODEL\\fR, \\fBPMEM_*\\fR",
        "Any setting of \\fBpmem config\\fR, by its upper-case name.",
        ".TP", "\\fBNO_COLOR\\fR", "Disable colour in terminal output.",
        ".SH EXIT STATUS",
        "0 success, 1 error, 2 usage error (bad option or input), 130 interrupted.",
    ]
    return "\n".join(p for p in parts if p) + "\n"


def _words(node: Cmd) -> list[str]:
    return [c.path[-1] for c in node.children] + [n for o in node.options for n in o.names]


def bash(tree: Cmd) -> str:
    cases = []
    for node in every_command(tree):
        key = " ".join(node.path[1:]) or "pmem"
        cases.append(f'        "{key}") words="{" ".join(_words(node))}" ;;')
    return f"""# bash completion for pmem (generated by `python -m pmem.cli.docs`; do not edit)
_pmem() {{
    local cur path word i
    cur="${{COMP_WORDS[COMP_CWORD]}}"
    path=""
    for ((i = 1; i < COMP_CWORD; i++)); do
        word="${{COMP_WORDS[i]}}"
        case "$word" in -*) continue ;; esac
        case " $(_pmem_words "${{path:-pmem}}") " in
            *" $word "*) path="${{path:+$path }}$word" ;;
        esac
    done
    COMPREPLY=( $(compgen -W "$(_pmem_words "${{path:-pmem}}")" -- "$cur") )
}}
_pmem_words() {{
    local words=""
    case "$1" in
{chr(10).join(cases)}
    esac
    echo "$words"
}}
complete -o default -F _pmem pmem
"""


def zsh(tree: Cmd) -> str:
    def esc(s: str) -> str:
        return s.replace("'", "'\\''").replace(":", "\\:").replace("[", "\\[").replace("]", "\\]")

    lines = ["#compdef pmem", "# zsh completion for pmem (generated by `python -m pmem.cli.docs`; do not edit)", "",
             "_pmem() {", "  local -a words_at", "  local path_key=pmem i w", "  for ((i = 2; i < CURRENT; i++)); do",
             "    w=${words[i]}", "    [[ $w == -* ]] && continue",
             '    if (( ${${(f)"$(_pmem_subcommands $path_key)"}[(Ie)$w]} )); then path_key="$path_key $w"; fi',
             "  done", "  case $path_key in"]
    for node in every_command(tree):
        key = " ".join(node.path)
        specs = []
        for c in node.children:
            specs.append(f"'{esc(c.path[-1])}:{esc(c.help.splitlines()[0] if c.help else '')}'")
        opts = " ".join(f"'{esc(n)}[{esc(o.help.splitlines()[0] if o.help else '')}]'" for o in node.options
                        for n in o.names)
        body = []
        if specs:
            body.append(f"      local -a cmds; cmds=({' '.join(specs)}); _describe command cmds")
        if opts:
            body.append(f"      _arguments -s {opts} '*:file:_files'")
        elif not specs:
            body.append("      _files")
        lines.append(f"    '{key}')")
        lines += body
        lines.append("      ;;")
    lines += ["  esac", "}", "", "_pmem_subcommands() {", "  case $1 in"]
    for node in every_command(tree):
        if node.children:
            names = "\\n".join(c.path[-1] for c in node.children)
            lines.append(f"    '{' '.join(node.path)}') print '{names}' ;;")
    lines += ["  esac", "}", "", '_pmem "$@"', ""]
    return "\n".join(lines)


def fish(tree: Cmd) -> str:
    def esc(s: str) -> str:
        return s.replace("\\", "\\\\").replace("'", "\\'")

    lines = ["# fish completion for pmem (generated by `python -m pmem.cli.docs`; do not edit)",
             "complete -c pmem -f"]
    top = [c.path[-1] for c in tree.children]
    for node in every_command(tree):
        depth = len(node.path) - 1
        if depth == 0:
            cond = "__fish_use_subcommand"
        elif depth == 1:
            cond = f"__fish_seen_subcommand_from {node.path[1]}"
            if node.children:
                sub = " ".join(c.path[-1] for c in node.children)
                cond += f"; and not __fish_seen_subcommand_from {sub}"
        else:
            cond = f"__fish_seen_subcommand_from {node.path[1]}; and __fish_seen_subcommand_from {node.path[-1]}"
        for c in node.children:
            desc = c.help.splitlines()[0] if c.help else ""
            lines.append(f"complete -c pmem -n '{cond}' -a {c.path[-1]} -d '{esc(desc)}'")
        for o in node.options:
            flags = []
            for n in o.names:
                flags.append(f"-l {n[2:]}" if n.startswith("--") else f"-s {n[1:]}")
            req = " -r" if o.takes_value else ""
            desc = o.help.splitlines()[0] if o.help else ""
            lines.append(f"complete -c pmem -n '{cond}' {' '.join(flags)}{req} -d '{esc(desc)}'")
    del top
    return "\n".join(lines) + "\n"


def generated() -> dict[str, str]:
    from . import site

    tree = command_tree()
    return {
        "man/pmem.1": man_page(tree),
        "completions/pmem.bash": bash(tree),
        "completions/_pmem": zsh(tree),
        "completions/pmem.fish": fish(tree),
        **site.pages(tree, ROOT),
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    check = "--check" in argv
    stale = []
    for rel, text in generated().items():
        path = ROOT / rel
        if check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(rel)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if stale:
        print("stale: " + ", ".join(stale) + " (run: python -m pmem.cli.docs)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
