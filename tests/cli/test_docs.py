"""man/ and completions/ are generated from the code; this fails when they are stale."""

from __future__ import annotations

from pmem.cli import docs


def test_generated_docs_are_current():
    stale = [rel for rel, text in docs.generated().items()
             if not (docs.ROOT / rel).exists() or (docs.ROOT / rel).read_text(encoding="utf-8") != text]
    assert not stale, f"stale: {stale}; run `python -m pmem.cli.docs`"


def test_man_page_documents_every_command():
    text = (docs.ROOT / "man/pmem.1").read_text(encoding="utf-8")
    for node in list(docs.every_command(docs.command_tree()))[1:]:
        assert ".SS " + f"pmem {' '.join(node.path[1:])}".replace("-", "\\-") in text  # roff escapes '-'


def test_completions_name_every_command():
    tree = docs.command_tree()
    bash = (docs.ROOT / "completions/pmem.bash").read_text()
    fish = (docs.ROOT / "completions/pmem.fish").read_text()
    zsh = (docs.ROOT / "completions/_pmem").read_text()
    for child in tree.children:
        name = child.path[-1]
        assert f" {name} " in bash or f'"{name} ' in bash or f" {name}\"" in bash
        assert f"-a {name} " in fish
        assert f"'{name}:" in zsh


def test_site_reference_names_every_command():
    """docs/reference/cli.md (the site's command page) has a section for every command and
    subcommand, and the site's navigation includes it."""
    text = (docs.ROOT / "docs/reference/cli.md").read_text(encoding="utf-8")
    for node in list(docs.every_command(docs.command_tree()))[1:]:
        name = " ".join(node.path)
        assert f"`{name}` {{#{'-'.join(node.path)}}}" in text, name
    assert "reference/cli.md" in (docs.ROOT / "mkdocs.yml").read_text(encoding="utf-8")


def test_site_reference_names_every_setting_and_api_name():
    import pmem
    from pmem import config

    settings = (docs.ROOT / "docs/reference/configuration.md").read_text(encoding="utf-8")
    for key in config.KEYS:
        assert f"| `{key}` |" in settings, key
    api = (docs.ROOT / "docs/reference/api.md").read_text(encoding="utf-8")
    for name in pmem.__all__:
        assert f"## `{name}" in api, name


def test_every_page_is_in_the_site_navigation():
    """A page left out of mkdocs.yml's nav is a page nobody finds (mkdocs only warns)."""
    import re

    nav = (docs.ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    listed = set(re.findall(r"(?:^\s*-\s+|:\s+)([\w./-]+\.md)\s*$", nav, re.MULTILINE))
    pages = {p.relative_to(docs.ROOT / "docs").as_posix() for p in (docs.ROOT / "docs").rglob("*.md")}
    decisions = {p for p in pages if p.startswith("decisions/") and p != "decisions/index.md"}
    assert not (pages - decisions) - listed, sorted((pages - decisions) - listed)
    assert not listed - pages, sorted(listed - pages)
    # decision records are listed by decisions/index.md rather than one by one in the nav
    index = (docs.ROOT / "docs/decisions/index.md").read_text(encoding="utf-8")
    assert all(f"({p.split('/', 1)[1]})" in index for p in decisions)


def test_decision_index_maps_to_records_that_exist():
    rows = [line.split("\t") for line in (docs.ROOT / "docs/decisions/INDEX").read_text(encoding="utf-8").splitlines()
            if line and not line.startswith("#")]
    assert len(rows) > 50
    for name, record in rows:
        assert (docs.ROOT / "docs/decisions" / record).is_file(), (name, record)
