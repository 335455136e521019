"""man/ and completions/ are generated from the code; this fails when they are stale."""

from __future__ import annotations

from pmem.cli import docs


def test_generated_docs_are_current():
    stale = [rel for rel, text in docs.generated().items()
             if not (docs.ROOT / rel).exists() or (docs.ROOT / rel).read_text(encoding="utf-8") != text]
    assert not stale, f"stale: {stale}; run `python -m pmem.cli.docs`"


def test_man_page_documents_every_command():
    text = (docs.ROOT / "man/pmem.1").read_text(encoding="utf-8")
    for node in list(docs._all(docs._tree()))[1:]:
        assert ".SS " + docs._roff(f"pmem {' '.join(node.path[1:])}") in text  # roff escapes '-'


def test_completions_name_every_command():
    tree = docs._tree()
    bash = (docs.ROOT / "completions/pmem.bash").read_text()
    fish = (docs.ROOT / "completions/pmem.fish").read_text()
    zsh = (docs.ROOT / "completions/_pmem").read_text()
    for child in tree.children:
        name = child.path[-1]
        assert f" {name} " in bash or f'"{name} ' in bash or f" {name}\"" in bash
        assert f"-a {name} " in fish
        assert f"'{name}:" in zsh
