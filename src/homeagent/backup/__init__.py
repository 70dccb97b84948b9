"""Backup and restore of a whole data directory (``homeagent backup`` / ``homeagent restore``)."""

from homeagent.backup.create import create_backup
from homeagent.backup.manifest import MANIFEST_NAME, BackupError, Manifest, verify
from homeagent.backup.restore import check_backup, restore_backup

__all__ = ["MANIFEST_NAME", "BackupError", "Manifest", "check_backup", "create_backup", "restore_backup", "verify"]
