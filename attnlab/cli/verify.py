"""``attnlab verify``: check model directories, checkpoints and whole run directories against their
manifests (`attnlab.manifest`), or re-seal a directory whose files were changed on purpose.

    attnlab verify runs/sst2                  # every checkpoint and model directory under the run
    attnlab verify runs/bert/model            # one model directory
    attnlab verify --update runs/bert/model   # after editing tokenizer_config.json by hand

Exit status: 0 when everything verifies, 1 when something is damaged (each named with the reason).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "verify",
        help="check checkpoints and model directories against their SHA-256 manifests",
        description="Verify every directory holding a manifest.json at or under each PATH (a model "
        "directory, a checkpoint, a run directory): each listed file must have its recorded size and "
        "SHA-256.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="directories to check (searched recursively)")
    p.add_argument(
        "--update",
        action="store_true",
        help="re-hash the files each manifest lists and write it again, or seal a PATH without one (for "
        "files changed on purpose, or a checkpoint of an older attnlab; default: only check)",
    )
    p.set_defaults(func=run_verify)


def sealed_directories(path: Path) -> list[Path]:
    """``path`` and the directories under it that hold an attnlab manifest, in path order (a JSON object of
    the same name without attnlab's format, e.g. the prepared-shards cache of `attnlab pretrain`, is not
    one; an unreadable one or one that is not an object is, to be reported)."""
    from attnlab.manifest import MANIFEST_FORMAT, MANIFEST_NAME

    if not path.is_dir():
        raise NotADirectoryError(f"{path}: not a directory")
    found = []
    for manifest in path.rglob(MANIFEST_NAME):
        if any(part.startswith(".") for part in manifest.relative_to(path).parts):
            continue  # a checkpoint being written (.tmp-*) or moved aside (.old-*)
        try:
            raw = json.loads(manifest.read_text(encoding="utf-8"))
        except (ValueError, OSError):
            raw = {"format": MANIFEST_FORMAT}
        if not isinstance(raw, dict) or raw.get("format") == MANIFEST_FORMAT:
            found.append(manifest.parent)
    return sorted(found)


def _update(directory: Path) -> str:
    from attnlab.manifest import read_manifest, write_manifest

    old = read_manifest(directory)
    assert old is not None
    names = [n for n in old.files if (directory / n).is_file()]
    new = write_manifest(directory, names, run_id=old.run_id, extra=old.extra)
    changed = sorted(n for n in names if new.files[n] != old.files[n])
    dropped = sorted(set(old.files) - set(names))
    return f"updated {directory}: re-hashed {changed or 'no change'}, dropped {dropped or 'none'}"


def _check(directory: Path) -> str:
    from attnlab.manifest import verify_directory

    manifest = verify_directory(directory)
    assert manifest is not None
    return f"ok {directory} ({len(manifest.files)} files, run id {manifest.run_id})"


def run_verify(args: argparse.Namespace) -> int:
    from attnlab.manifest import IntegrityError, write_manifest

    damaged = checked = unsealed = 0
    for root in map(Path, args.paths):
        directories = sealed_directories(root)
        if not directories and args.update:  # e.g. a checkpoint of an older attnlab: seal what is there
            print(f"sealed {root}: {sorted(write_manifest(root).files)}")
            checked += 1
            continue
        if not directories:
            print(
                f"{root}: no attnlab manifest.json at or under it: nothing to verify (`attnlab verify "
                f"--update {root}` seals the files there, if you trust them)",
                file=sys.stderr,
            )
            unsealed += 1
        for directory in directories:
            checked += 1
            try:
                print(_update(directory) if args.update else _check(directory))
            except IntegrityError as e:
                damaged += 1
                print(f"DAMAGED {directory}: {e}")
    summary = f"{checked} director{'y' if checked == 1 else 'ies'} checked, {damaged} damaged"
    summary += f", {unsealed} path{'' if unsealed == 1 else 's'} without a manifest" if unsealed else ""
    print(summary, file=sys.stderr)
    return 1 if damaged or unsealed else 0
