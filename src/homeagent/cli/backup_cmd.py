"""``homeagent backup DEST`` and ``homeagent restore SRC`` (docs/backup.md).

Both work on the files, without the daemon: a backup may be taken while the
daemon runs; a restore goes only into a new or empty folder.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    backup = sub.add_parser(
        "backup", help="copy the data directory into a new folder, consistently, also while the daemon runs"
    )
    backup.add_argument("dest", help="a new or empty folder for the backup, or a new file ending in .tar.gz")
    backup.add_argument("--data-dir", default=argparse.SUPPRESS, help="the data directory to back up")
    backup.add_argument("--quiet", "-q", action="store_true", help="print only problems")
    backup.set_defaults(func=cmd_backup)
    restore = sub.add_parser(
        "restore", help="check a backup and restore it into a new or empty data directory"
    )
    restore.add_argument("src", help="a folder or .tar.gz made by `homeagent backup`")
    restore.add_argument("--data-dir", default=argparse.SUPPRESS,
                         help="the data directory to create (new or empty; no daemon may run on it)")
    restore.add_argument("--check", action="store_true", help="only verify the backup's files; write nothing")
    restore.set_defaults(func=cmd_restore)


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def cmd_backup(args: argparse.Namespace) -> int:
    from homeagent.backup import BackupError, create_backup
    from homeagent.cli.main import paths_from

    root = paths_from(args).root
    try:
        manifest = create_backup(root, Path(args.dest))
    except BackupError as exc:
        print(f"homeagent: backup: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"homeagent: backup failed, nothing kept: {exc}", file=sys.stderr)
        return 1
    for warning in manifest.warnings:
        print(f"homeagent: warning: {warning}", file=sys.stderr)
    for outside in manifest.outside:
        print(f"homeagent: note: {outside['key']} points outside the data directory ({outside['path']}); "
              "it is not in this backup", file=sys.stderr)
    if not args.quiet:
        stores = sum(1 for f in manifest.files if f.kind == "sqlite")
        print(f"backed up {len(manifest.files)} files ({stores} SQLite stores, {_mb(manifest.total_bytes)}) "
              f"from {root} to {Path(args.dest).absolute()}")
        for skipped in manifest.skipped:
            print(f"  skipped {skipped['path']}: {skipped['reason']}")
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    from homeagent.backup import BackupError, check_backup, restore_backup
    from homeagent.cli.main import paths_from

    source = Path(args.src)
    try:
        if args.check:
            manifest = check_backup(source)
            print(f"backup {source.absolute()} is whole: {len(manifest.files)} files, "
                  f"{_mb(manifest.total_bytes)}, made {manifest.created} from {manifest.source}")
            return 0
        target = paths_from(args).root
        manifest = restore_backup(source, target)
    except BackupError as exc:
        print(f"homeagent: restore: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"homeagent: restore failed, nothing restored: {exc}", file=sys.stderr)
        return 1
    print(f"restored {len(manifest.files)} files ({_mb(manifest.total_bytes)}) made {manifest.created} "
          f"from {manifest.source} into {target}")
    for outside in manifest.outside:
        print(f"  note: {outside['key']} pointed outside the data directory ({outside['path']}) and was not "
              "backed up; the restored settings still point there")
    print(f"start it with: homeagent --data-dir {target} run")
    return 0
