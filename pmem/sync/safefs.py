"""File operations under a folder that a stranger may write: the sync folder, or pmem's git clone
of a remote (threat model: README, Sync, "A remote you do not trust").

The root is the person's own choice, stored as its real path when sync started: the folders above
it are trusted as they are, and the root itself is opened with O_NOFOLLOW (a root that has become
a link was replaced by whoever shares the folder above it). Under it no link is ever followed:
each path component is opened relative to its parent's descriptor with O_NOFOLLOW and must be a
directory; the last must be a regular file, opened with O_NOFOLLOW (and O_NONBLOCK, so a FIFO
cannot hold a sync), checked by fstat and read to at most its limit + 1 bytes. A write creates a
temporary beside the target (O_EXCL) inside a checked directory and renames it over the name (a
rename replaces a link, never writes through it). Anything else where pmem expects its own file
or folder is refused with one line, never followed or opened.
"""

from __future__ import annotations

import errno
import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from .keys import SyncError

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_LINKED = (errno.ELOOP, errno.ENOTDIR, getattr(errno, "EFTYPE", errno.ELOOP))
TMP_PREFIX = ".pmem-tmp-"


def _not_ours(root: Path, rel: str, found: str) -> SyncError:
    return SyncError(f"{rel} in {root} is {found}: pmem never makes one there, so someone else wrote "
                     "this remote; refused (nothing was followed)")


def root_link(root: Path) -> SyncError:
    return SyncError(f"the sync folder {root} is now a symbolic link or a file (it was a folder when sync started "
                     "here): whoever shares the folder above it may have replaced it; refused (nothing followed)")


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISREG(mode):
        return "a file"
    return "a special file (a FIFO, socket or device)"


def _parts(rel: str) -> list[str]:
    parts = rel.split("/")
    if not all(p and p not in (".", "..") for p in parts):
        raise ValueError(f"not a path under the root: {rel!r}")  # pmem's own names only: a bug
    return parts


@contextmanager
def _folder(root: Path, parts: list[str], create: bool) -> Iterator[int | None]:
    """A descriptor of root/parts[0]/..., each component a real directory (None: one is missing
    and `create` is false)."""
    try:
        try:
            fd = os.open(root, _DIR)
        except FileNotFoundError:
            if not create:
                yield None
                return
            root.mkdir(parents=True, exist_ok=True)
            fd = os.open(root, _DIR)
    except OSError as exc:
        if exc.errno in _LINKED:
            raise root_link(root) from None
        raise SyncError(f"cannot open {root}: {exc.strerror}") from None
    try:
        for i, part in enumerate(parts):
            rel = "/".join(parts[:i + 1])
            try:
                nxt = os.open(part, _DIR, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    os.close(fd)
                    fd = -1
                    yield None
                    return
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass  # made meanwhile (another process): opened, and checked, below
                nxt = _open_dir(root, rel, part, fd)
            except OSError as exc:
                if exc.errno in _LINKED:
                    raise _not_ours(root, rel, _lkind(fd, part)) from None
                raise SyncError(f"cannot open {root / rel}: {exc.strerror}") from None
            os.close(fd)
            fd = nxt
        yield fd
    finally:
        if fd >= 0:
            os.close(fd)


def _open_dir(root: Path, rel: str, part: str, fd: int) -> int:
    try:
        return os.open(part, _DIR, dir_fd=fd)
    except OSError as exc:
        if exc.errno in _LINKED:
            raise _not_ours(root, rel, _lkind(fd, part)) from None
        raise SyncError(f"cannot open {root / rel}: {exc.strerror}") from None


def _lkind(fd: int, name: str) -> str:
    try:
        return _kind(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except OSError:
        return "not a folder"


def read(root: Path, rel: str, limit: int) -> bytes | None:
    """The bytes of root/rel, a regular file of at most `limit` bytes; None when it is not there."""
    *dirs, name = _parts(rel)
    with _folder(root, dirs, create=False) as fd:
        if fd is None:
            return None
        try:
            f = os.open(name, _FILE, dir_fd=fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno in _LINKED:
                raise _not_ours(root, rel, _lkind(fd, name)) from None
            raise SyncError(f"cannot read {root / rel}: {exc.strerror}") from None
    try:
        st = os.fstat(f)
        if not stat.S_ISREG(st.st_mode):
            raise _not_ours(root, rel, _kind(st.st_mode))
        if st.st_size > limit:
            raise SyncError(f"{rel} in {root} is {st.st_size:,} bytes; refusing more than {limit:,} (not read)")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(f, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        if left <= 0:
            raise SyncError(f"{rel} in {root} grew past {limit:,} bytes while read; refused")
        return b"".join(chunks)
    except OSError as exc:
        raise SyncError(f"cannot read {root / rel}: {exc.strerror}") from None
    finally:
        os.close(f)


def kind(root: Path, rel: str) -> str | None:
    """"file", "dir" or None (not there); a link or a special file there is refused."""
    *dirs, name = _parts(rel)
    with _folder(root, dirs, create=False) as fd:
        if fd is None:
            return None
        try:
            mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SyncError(f"cannot look at {root / rel}: {exc.strerror}") from None
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    raise _not_ours(root, rel, _kind(mode))


def entries(root: Path, rel: str | None = None) -> dict[str, str]:
    """The names in root/rel (the root itself when None), each with what it is: "file", "dir",
    "link" or "other" (never followed); {} when the folder is not there."""
    with _folder(root, _parts(rel) if rel else [], create=False) as fd:
        if fd is None:
            return {}
        out = {}
        try:
            with os.scandir(fd) as it:
                for e in it:
                    out[e.name] = ("link" if e.is_symlink() else "dir" if e.is_dir(follow_symlinks=False)
                                   else "file" if e.is_file(follow_symlinks=False) else "other")
        except OSError as exc:
            raise SyncError(f"cannot list {root / (rel or '')}: {exc.strerror}") from None
        return out


def refuse(root: Path, rel: str, what: str) -> SyncError:
    """The refusal for `what` found where pmem keeps its own file or folder."""
    return _not_ours(root, rel, {"link": "a symbolic link", "dir": "a folder", "file": "a file"}.get(
        what, "a special file (a FIFO, socket or device)"))


def write(root: Path, rel: str, data: bytes) -> None:
    """Replace root/rel by `data` at once (folders made as needed, none of them followed if a link):
    a reader or a file syncer never sees half a file."""
    *dirs, name = _parts(rel)
    with _folder(root, dirs, create=True) as fd:
        assert fd is not None
        tmp = f"{TMP_PREFIX}{os.urandom(6).hex()}"
        try:
            f = os.open(tmp, _NEW, 0o644, dir_fd=fd)
            try:
                view, done = memoryview(data), 0
                while done < len(view):
                    done += os.write(f, view[done:])
                os.fsync(f)
            finally:
                os.close(f)
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        except OSError as exc:
            try:
                os.unlink(tmp, dir_fd=fd)
            except OSError:
                pass
            if exc.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                raise _not_ours(root, rel, "a folder") from None
            raise SyncError(f"cannot write {root / rel}: {exc.strerror}") from None


def unlink(root: Path, rel: str) -> None:
    """Remove root/rel if it is there (a link is removed, not followed)."""
    *dirs, name = _parts(rel)
    with _folder(root, dirs, create=False) as fd:
        if fd is None:
            return
        try:
            os.unlink(name, dir_fd=fd)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise SyncError(f"cannot remove {root / rel}: {exc.strerror}") from None
