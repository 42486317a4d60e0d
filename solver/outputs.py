"""Output files the commands write (``--csv``, ``--json FILE``, ``--plot``, ``-o``): checked before any
planning, written atomically. The one home of the rule, the same for every command:

- A path is checked before the requirement is read (:func:`check_output_path`), so a bad one costs
  nothing: its folder must exist and be writable (a temporary file is created there and removed, which
  catches permissions, read-only mounts and ACLs alike); a folder, a block device or socket, or a name
  longer than the file system allows is refused.
- An existing file or symbolic link is replaced only with ``--force``. With it, a link is replaced by
  the new file: the link's target is never written.
- A stream (a character device or named pipe: ``/dev/stdout``, ``/dev/null``, ``/dev/full``) is
  written in place; there is nothing to replace.
- A file is written to a temporary file in the same folder, flushed to disk (``fsync``), then renamed
  onto the name (``os.replace``, or ``os.link`` without ``--force`` so that a file that appeared during
  planning is not clobbered). A reader sees the old file or the new one, never a part of either.
- Any OS error (disk full, permission, quota) is an :class:`OutputError` (exit 2) naming the path and
  the error; the temporary file is removed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from clusterplan.errors import OutputError

# What --help says next to every --force (one wording for every command).
FORCE_HELP = "Replace existing output files (a symbolic link is replaced, not followed). Without it they are refused."

_TEMP_PREFIX = ".clusterplan-"  # short: a name near the file system's limit still leaves room
_TEMP_SUFFIX = ".tmp"
_NAME_MAX_DEFAULT = 255  # POSIX NAME_MAX on every common file system, when pathconf cannot say

Kind = Literal["new", "replace", "stream"]


@dataclass(frozen=True)
class OutputTarget:
    """A checked output path and how it will be written."""

    path: Path
    kind: Kind  # new: no such file yet; replace: a file or link, --force given; stream: device or pipe
    flag: str


def _label(flag: str, path: Path) -> str:
    return f"{flag} {path}" if flag else str(path)


def _refuse(flag: str, path: Path, what: str, fix: str) -> OutputError:
    return OutputError(f"{_label(flag, path)}: {what}", fix=fix)


def _folder(path: Path) -> Path:
    return path.parent if str(path.parent) else Path(".")


def _check_folder(path: Path, flag: str) -> None:
    """The folder a new file goes into exists, is a folder, can be written and holds names this long."""
    folder = _folder(path)
    try:
        st = os.stat(folder)
    except FileNotFoundError:
        raise _refuse(
            flag,
            path,
            f"the folder {folder} does not exist",
            f"create it first (mkdir -p {folder}) or choose another path",
        ) from None
    except OSError as exc:
        raise _refuse(flag, path, f"cannot reach the folder {folder}: {exc.strerror}", "choose another path") from None
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(flag, path, f"{folder} is not a folder", "choose a path inside an existing folder")
    try:
        name_max = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = _NAME_MAX_DEFAULT
    if len(os.fsencode(path.name)) > name_max:
        raise _refuse(flag, path, f"the file name is longer than {name_max} bytes", "choose a shorter name")
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=_TEMP_PREFIX, suffix=_TEMP_SUFFIX)
    except OSError as exc:
        raise _refuse(
            flag, path, f"cannot write in {folder}: {exc.strerror}", "choose a writable folder, or fix its permissions"
        ) from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)


def check_output_path(path: Path, force: bool, *, flag: str = "") -> OutputTarget:
    """Refuse ``path`` now (before any planning) if writing it later would fail or clobber a file
    without ``force``; say how it will be written. ``flag`` names the option in messages (``--csv``)."""
    if path.name in ("", ".", ".."):
        raise _refuse(flag, path, "names a folder, not a file", "give a file name")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        _check_folder(path, flag)
        return OutputTarget(path, "new", flag)
    except NotADirectoryError:
        raise _refuse(
            flag, path, f"{_folder(path)} is not a folder", "choose a path inside an existing folder"
        ) from None
    except OSError as exc:
        raise _refuse(flag, path, f"cannot look at it: {exc.strerror}", "choose another path") from None

    mode = st.st_mode
    if stat.S_ISLNK(mode):
        try:
            target_mode: int | None = os.stat(path).st_mode
        except OSError:
            target_mode = None  # a dangling link
        if target_mode is not None and (stat.S_ISCHR(target_mode) or stat.S_ISFIFO(target_mode)):
            return OutputTarget(path, "stream", flag)  # /dev/stdout and friends
        if not force:
            raise _refuse(
                flag,
                path,
                f"is a symbolic link (to {os.readlink(path)}); it is not followed",
                "pass --force to replace the link itself with the file, or choose another name",
            )
        _check_folder(path, flag)
        return OutputTarget(path, "replace", flag)
    if stat.S_ISDIR(mode):
        raise _refuse(flag, path, "is a folder", f"give a file name, e.g. {path / 'out'}{path.suffix or ''}")
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return OutputTarget(path, "stream", flag)
    if not stat.S_ISREG(mode):
        raise _refuse(flag, path, "is a block device or a socket, not a file", "choose a file name")
    if not force:
        raise _refuse(flag, path, "already exists", "pass --force to replace it, or choose another name")
    _check_folder(path, flag)
    return OutputTarget(path, "replace", flag)


def check_outputs(named: Sequence[tuple[str, Path | None]], force: bool) -> list[OutputTarget]:
    """Check every output a command was given (``(flag, path or None)``); two flags naming one file are refused."""
    targets: list[OutputTarget] = []
    seen: dict[str, str] = {}
    for flag, path in named:
        if path is None:
            continue
        key = os.path.realpath(path)
        if key in seen:
            raise OutputError(
                f"{seen[key]} and {flag} name the same file {path}", fix="give each output its own file name"
            )
        seen[key] = flag
        targets.append(check_output_path(path, force, flag=flag))
    return targets


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _write_stream(target: OutputTarget, data: bytes) -> None:
    flags = os.O_WRONLY | getattr(os, "O_NONBLOCK", 0)  # a pipe with no reader: ENXIO, not a hang
    fd = os.open(target.path, flags)
    try:
        os.set_blocking(fd, True)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _fsync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every file system can sync a folder; the data is synced already
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _install(tmp: str, target: OutputTarget, force: bool) -> None:
    """Put the finished temporary file at the target's name; without ``force`` never over an existing one."""
    if force:
        os.replace(tmp, target.path)
        return
    try:
        os.link(tmp, target.path)  # fails with EEXIST if a file appeared since the check: never clobbered
    except FileExistsError:
        raise _refuse(
            target.flag,
            target.path,
            "appeared while clusterplan was planning; it was left as it is",
            "pass --force to replace it, or choose another name",
        ) from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        if os.path.lexists(target.path):  # a file system without hard links: the next best check
            raise _refuse(
                target.flag, target.path, "appeared while clusterplan was planning", "pass --force to replace it"
            ) from None
        os.replace(tmp, target.path)
        return
    os.unlink(tmp)


def _write_file(target: OutputTarget, data: bytes, force: bool) -> None:
    folder = _folder(target.path)
    mode: int | None = None  # a replaced file keeps its permissions; a replaced link or a new file gets the umask's
    try:
        st = os.lstat(target.path)
        if target.kind == "replace" and stat.S_ISREG(st.st_mode):
            mode = stat.S_IMODE(st.st_mode)
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=_TEMP_PREFIX, suffix=_TEMP_SUFFIX)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, mode if mode is not None else 0o666 & ~_umask())  # mkstemp makes it 0600
            os.fsync(fd)
        finally:
            os.close(fd)
        _install(tmp, target, force)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_folder(folder)


def write_bytes(path: Path, data: bytes, *, force: bool, flag: str = "") -> None:
    """Write ``data`` to ``path`` by the module's rule (checked again here: the file system may have
    changed while planning). Raises OutputError with the path and the OS error on any failure."""
    target = check_output_path(path, force, flag=flag)
    try:
        if target.kind == "stream":
            _write_stream(target, data)
        else:
            _write_file(target, data, force)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if exc.errno == errno.ENXIO and target.kind == "stream":
            reason = "a named pipe with no reader"
        raise _refuse(
            flag, path, f"could not be written: {reason}", "free space or fix permissions there, or choose another path"
        ) from None


def write_text(path: Path, text: str, *, force: bool, flag: str = "") -> None:
    """:func:`write_bytes` of ``text`` as UTF-8."""
    write_bytes(path, text.encode("utf-8"), force=force, flag=flag)


def make_folder(path: Path, *, flag: str = "") -> None:
    """Create ``path`` (one level: its parent was checked) unless it is a folder already."""
    try:
        path.mkdir(exist_ok=True)
    except OSError as exc:
        raise _refuse(flag, path, f"the folder could not be created: {exc.strerror}", "choose another path") from None


def write_new_folder(path: Path, files: dict[str, bytes], *, flag: str = "") -> Path:
    """Create the folder ``path`` whole, holding ``files`` (name -> bytes): written into a temporary folder beside
    it, then renamed into place, so a reader (or an interrupted command) never leaves a part of it. Refused if
    ``path`` exists by then; the temporary folder is removed on any failure."""
    try:
        staging = tempfile.mkdtemp(dir=_folder(path), prefix=_TEMP_PREFIX, suffix=_TEMP_SUFFIX)
    except OSError as exc:
        raise _refuse(flag, path, f"the folder could not be created: {exc.strerror}", "choose another path") from None
    try:
        os.chmod(staging, 0o777 & ~_umask())  # mkdtemp makes it 0700
        for name, data in files.items():
            with open(os.path.join(staging, name), "wb") as f:
                f.write(data)
                os.fsync(f.fileno())
        os.rename(staging, path)  # fails if a folder appeared meanwhile: never merged into
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise _refuse(flag, path, f"could not be written: {exc.strerror}", "choose another path") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _fsync_folder(_folder(path))
    return path
