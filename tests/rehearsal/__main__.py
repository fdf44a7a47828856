"""`python -m tests.rehearsal up|down|inventory|list|sweep`: the rehearsal box for humans."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tests.rehearsal import box as boxes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.rehearsal", description=boxes.__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="boot a fresh box and print its inventory path")
    up.add_argument("--name")
    down = sub.add_parser("down", help="shut a box down and delete it")
    down.add_argument("names", nargs="*")
    down.add_argument("--all", action="store_true")
    inv = sub.add_parser("inventory", help="print a box's Ansible inventory")
    inv.add_argument("name")
    sub.add_parser("list", help="list running boxes")
    sub.add_parser("sweep", help="remove the boxes left by runs that were killed (their owner process is gone)")
    args = parser.parse_args(argv)
    if args.command == "up":
        box = boxes.boot(args.name, owned=False)
        path = box.write_inventory(box.directory / "inventory.yml")
        print(f"{box.name} is up: ssh -p {box.ssh_port} -i {box.key} {box.user}@127.0.0.1")
        print(f"inventory: {path}")
    elif args.command == "down":
        names = boxes.all_boxes() if args.all else args.names
        for name in names:
            boxes.destroy(boxes.load(name))
            print(f"{name} is down")
    elif args.command == "inventory":
        print(Path(boxes.load(args.name).write_inventory(boxes.RUNTIME / args.name / "inventory.yml")).read_text())
    elif args.command == "sweep":
        for box in boxes.sweep():
            print(f"removed box {box.name}, left by process {box.owner} (gone)")
    else:
        print("\n".join(boxes.all_boxes()) or "no boxes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
