"""`pmem sync`: one memory on every device, end-to-end encrypted, over git or a synced folder."""

import sys
from typing import Optional

import typer

from . import output as out
from .common import JsonOpt, PmemGroup, open_store

KeyFileOpt = typer.Option(None, "--key-file", help="The sync key's file (default: $PMEM_SYNC_KEY_FILE, "
                          "else pmem.db.sync/key beside the database).")
KindOpt = typer.Option(None, "--kind", help="git or folder (default: git for URLs and git repositories, "
                       "else folder).")
PassOpt = typer.Option(False, "--passphrase", help="Keep the key wrapped by a passphrase (asked, or "
                       "$PMEM_SYNC_PASSPHRASE) instead of a key file.")


def register(app: typer.Typer) -> None:
    sync_app = typer.Typer(cls=PmemGroup, help="Sync this memory with your other devices (end-to-end encrypted).",
                           no_args_is_help=False, rich_markup_mode=None)
    sync_app.callback(invoke_without_command=True)(_sync)
    sync_app.command("init")(sync_init)
    sync_app.command("join")(sync_join)
    sync_app.command("status")(sync_status)
    sync_app.command("compact")(sync_compact)
    sync_app.command("retire")(sync_retire)
    sync_app.command("rejoin")(sync_rejoin)
    sync_app.command("key")(sync_key)
    app.add_typer(sync_app, name="sync")


def _progress(text: str) -> None:
    out.note(text)


def _passphrase(ask: bool, confirm: bool = False) -> Optional[str]:
    import os

    if not ask:
        return None
    phrase = os.environ.get("PMEM_SYNC_PASSPHRASE")
    if phrase:
        return phrase
    if sys.stdin is None or not sys.stdin.isatty():
        from ..errors import UsageError

        raise UsageError("--passphrase needs a terminal to ask on, or $PMEM_SYNC_PASSPHRASE")
    return typer.prompt("Passphrase for the sync key", hide_input=True, confirmation_prompt=confirm)


def _report(data: dict, as_json: bool) -> None:
    if as_json:
        out.print_json(data)
        return
    line = (f"synced with {data['remote']}: sent {data['sent']} changes, applied {data['applied']} "
            f"from {data['received_changesets']} changesets")
    if data["conflicts"]:
        line += f", {data['conflicts']} conflicts (pmem sync status)"
    if data["purged"]:
        line += f", purged {len(data['purged'])}"
    out.echo(out.visible(line))
    for gap in data["gaps"]:
        out.note(f"sync: device {gap['device']} is missing changeset {gap['missing']} "
                 f"(it has up to {gap['present_up_to']}); its later changes wait until it arrives")
    for lost in data.get("rolled_back", []):
        out.note(f"sync: the remote holds device {lost['device']}'s changesets up to {lost['present_up_to']}, but "
                 f"{lost['vouched_by']} applied up to {lost['vouched_up_to']}: rolled back or deleted there; that "
                 "device writes them again at its next sync")
    if data["push_retries"]:
        out.note(f"sync: the push lost {data['push_retries']} race(s) with other devices and was retried")
    if data.get("recloned"):
        out.note("sync: the remote's history was compacted on another device; this device cloned it afresh")
    if data.get("fill_error"):
        out.note(out.visible(f"sync: could not embed what arrived without vectors: {data['fill_error']}; they are "
                             "found by their words until the next `pmem sync` embeds them"))
    if data.get("vectors_missing"):
        how = ("being embedded in the background (pmem sync status)" if data.get("filling")
               else "the next `pmem sync` (or `pmem reindex --missing`) embeds them")
        out.note(f"sync: {data['vectors_missing']} memories wait for vectors, found by their words meanwhile: {how}")


def _sync(ctx: typer.Context, as_json: bool = JsonOpt) -> None:
    """Pull, apply the other devices' changes, send this device's, push.

    Set up first with `pmem sync init` (the first device) or `pmem sync join` (the next).

    \b
    Examples:
      pmem sync
      pmem sync status
    """
    if ctx.invoked_subcommand is not None:
        return
    from .. import sync

    with open_store() as store:
        report = sync.run(store, progress=_progress, passphrase=_store_passphrase(store))
    _report(report, as_json)


def _store_passphrase(store) -> Optional[str]:
    """The passphrase, asked only when this device's key is wrapped by one."""
    from .. import sync

    return _passphrase(bool(sync.SyncLog(store).exists() and sync.SyncLog(store).get("key_wrapped")))


def sync_init(
    remote: str = typer.Argument(..., metavar="REMOTE|DIR", help="An empty git remote (anything `git clone` "
                                 "takes) or a folder a file syncer replicates."),
    key_file: Optional[str] = KeyFileOpt,
    kind: Optional[str] = KindOpt,
    passphrase: bool = PassOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Start syncing this memory to REMOTE (git) or DIR (a synced folder), with a new key.

    The key is written to --key-file (0600) when that file is absent; copy it to your other
    devices (or type `pmem sync key`'s output there). Without it nobody can read the remote.

    \b
    Examples:
      git init --bare /mnt/nas/pmem.git && pmem sync init /mnt/nas/pmem.git
      pmem sync init ~/Sync/pmem --key-file ~/.pmem-sync.key
    """
    from .. import sync

    phrase = _passphrase(passphrase, confirm=True)
    with open_store() as store:
        report = sync.init(store, remote, kind=kind, key_file=key_file, passphrase=phrase, progress=_progress)
    if not as_json and report.get("key_created"):
        out.note(f"sync: a new key is in {report['key_file']}: copy it to your other devices")
    _report(report, as_json)


def sync_join(
    remote: str = typer.Argument(..., metavar="REMOTE|DIR", help="The git remote or folder another device "
                                 "started with `pmem sync init`."),
    key_file: Optional[str] = KeyFileOpt,
    kind: Optional[str] = KindOpt,
    passphrase: bool = PassOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Add this device: pull everything, then send what this memory already held.

    It returns once the memories are stored: searchable by their words at once, and by meaning
    with the vectors that came with them (same embedding model on both devices); the others are
    embedded in the background (`pmem sync status` counts what waits; resumable).

    The key comes from --key-file (or $PMEM_SYNC_KEY_FILE), else it is asked for (the text
    `pmem sync key` prints on another device). A wrong key is refused before anything is written.

    \b
    Examples:
      pmem sync join ssh://nas/srv/pmem.git --key-file ~/.pmem-sync.key
      pmem sync join ~/Sync/pmem
    """
    import os

    from .. import sync

    key_text = None
    with open_store() as store:
        given = key_file or os.environ.get("PMEM_SYNC_KEY_FILE")
        if not given and not (sync.sync_dir(store) / "key").exists():
            if sys.stdin is None or not sys.stdin.isatty():
                from ..errors import UsageError

                raise UsageError("no sync key: pass --key-file (or set PMEM_SYNC_KEY_FILE)")
            key_text = typer.prompt("Sync key (from `pmem sync key` on another device)", hide_input=True)
        phrase = _passphrase(passphrase, confirm=True)
        report = sync.join(store, remote, kind=kind, key_file=key_file, key_text=key_text, passphrase=phrase,
                           progress=_progress, fill=False)
        if report["vectors_missing"]:
            from .. import fill

            report["filling"] = fill.kick(store.path, scan=False, by="join")  # the one fill (pmem/fill.py)
    _report(report, as_json)


def sync_status(as_json: bool = JsonOpt) -> None:
    """Show the devices, how far this one has applied each, and the conflicts (from the last pull).

    \b
    Example:
      pmem sync status --json
    """
    from .. import sync

    with open_store() as store:
        data = sync.status(store)
    if as_json:
        out.print_json(data)
        return
    out.echo(out.visible(f"this device: {data['device']}  remote: {data['remote']} ({data['kind']})"))
    out.echo(f"changes not sent yet: {data['pending_changes']}")
    for d in data["devices"]:
        retired = (f"  retired by {d['retired'].get('by')} at {d['retired'].get('at')}" if d["retired"] else "")
        if d["this"]:
            out.echo(f"  {d['device']}  (this device)  wrote {d['written']} changesets{retired}")
        else:
            out.echo(f"  {d['device']}  applied {d['applied_up_to']} of {d['last']} changesets"
                     + (f" ({d['waiting']} waiting)" if d["waiting"] and not d["retired"] else "") + retired)
    background = data.get("background")
    if background:
        out.echo(out.visible(f"background sync: {'ok' if background.get('ok') else 'failed'} at {background.get('at')}"
                             + ("" if background.get("ok") else f": {background.get('error')}")))
    if data.get("vectors_missing"):
        from ..fill import describe, how_far

        info = data.get("fill") or {}
        now = describe(info)
        out.echo(out.visible(f"waiting for vectors: {data['vectors_missing']}"
                             + (f" (embedding in the background: {how_far(info)})" if data.get("filling") else
                                f" (the background fill {now}; the next `pmem sync` embeds them)" if now else
                                " (the next `pmem sync` embeds them)")))
    out.echo(f"conflicts: {data['conflicts']}")
    for c in data["recent_conflicts"]:
        out.echo(out.visible(f"  {c['at']}  {c['memory_id']}  {c['field']}: kept {c['kept']}, "
                             f"lost {c['lost']} ({_short(c['lost_value'])})"))


def _short(value) -> str:
    import json

    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= 40 else text[:39] + "…"


def sync_compact(as_json: bool = JsonOpt) -> None:
    """Squash the git remote's history into one commit, so old versions of files are dropped.

    git keeps every version of every file: after a purge, the changeset that held the memory is
    rewritten, but its old version (sealed) stays in the history until it is squashed. Run this
    once every device has synced since the purge (it lists those that have not). Every other
    device clones afresh at its next `pmem sync`, losing nothing. The remote drops the old
    objects at its own garbage collection; a copy someone made before keeps them. A folder has no
    history: there it only syncs and reports.

    \b
    Example:
      pmem forget 1a2b3c4d --purge --yes && pmem sync compact
    """
    from .. import sync

    with open_store() as store:
        report = sync.compact(store, progress=_progress, passphrase=_store_passphrase(store))
    if as_json:
        out.print_json(report)
        return
    if report["squashed"]:
        out.echo(out.visible(f"compacted {report['remote']}: one commit now (epoch {report['epoch']}); this "
                             f"clone {_size(report['size_before'])} -> {_size(report['size_after'])}"))
        out.note("sync: the remote drops the old objects at its own garbage collection (a hosted remote decides "
                 "when); copies made before keep them")
    else:
        out.echo(out.visible(f"nothing to compact in {report['remote']}: {report['note']}"))
    for d in report["holding_purged"]:
        out.note(f"sync: device {d['device']} has not synced since a purge: {d['changesets']} of its changesets "
                 "still hold purged memories; run `pmem sync compact` again after it syncs")


def _size(n: Optional[int]) -> str:
    if n is None:
        return "?"
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.0f} kB"


def sync_retire(
    device: str = typer.Argument(..., metavar="DEVICE", help="The device's id, or a unique start of it "
                                 "(`pmem sync status` lists them)."),
    as_json: bool = JsonOpt,
) -> None:
    """Retire another device (a lost laptop): nobody waits on its missing changesets any more.

    What it had sent stays. If it syncs again it is refused, and `pmem sync rejoin` there brings
    it back as a new device. Its copy of the key is not revoked: if it may be in someone else's
    hands, start a new remote with a new key (`pmem sync init`).

    \b
    Example:
      pmem sync retire 3f9a1c
    """
    from .. import sync

    with open_store() as store:
        report = sync.retire(store, device, progress=_progress, passphrase=_store_passphrase(store))
    if as_json:
        out.print_json(report)
    elif report["already"]:
        out.echo(f"device {report['retired']} was already retired (by {report['note'].get('by')})")
    else:
        out.echo(f"retired device {report['retired']}: the others stop waiting on it at their next `pmem sync`")


def sync_rejoin(as_json: bool = JsonOpt) -> None:
    """Sync again as a new device after this one was retired elsewhere, keeping this memory.

    What this device sealed before it learnt of its retirement is sent as before; later changes
    go out under its new id.

    \b
    Example:
      pmem sync rejoin
    """
    from .. import sync

    with open_store() as store:
        report = sync.rejoin(store, progress=_progress, passphrase=_store_passphrase(store))
    if not as_json:
        out.note(f"sync: this device was {report['previous_device']}; it syncs as {report['device']} now")
    _report(report, as_json)


def sync_key(passphrase: bool = PassOpt) -> None:
    """Print this device's sync key, to type on the next device at `pmem sync join`.

    Anyone with it and a copy of the remote can read every memory: keep it as you keep passwords.

    \b
    Example:
      pmem sync key
    """
    from .. import sync

    with open_store() as store:
        wrapped = sync.SyncLog(store).exists() and sync.SyncLog(store).get("key_wrapped")
        out.echo(sync.export_key(store, _passphrase(bool(wrapped) or passphrase)))
