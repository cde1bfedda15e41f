"""`lakefs-delta`: the one console command. Each subcommand is a thin front to a library call."""

from __future__ import annotations

import argparse
import json
import shlex
import sys


def _stack(args: argparse.Namespace) -> int:
    from lakefs_delta import stack

    try:
        if args.action == "up":
            state = stack.up()
            print(f"lakeFS  {state.lakefs_endpoint}  (access key {state.lakefs_access_key_id})")
            print(f"MinIO   {state.minio_endpoint}  (bucket {stack.BUCKET})")
            print(f"Redis   {state.redis_url}")
            print("Run `eval \"$(lakefs-delta stack env)\"` to point this shell at the stack.")
        elif args.action == "down":
            stack.down()
        elif args.action == "status":
            report = stack.status()
            for service, facts in report.items():
                state = "healthy" if facts["healthy"] else ("running, not healthy" if facts["pid"] else "stopped")
                print(f"{service:7} {state}" + (f" (pid {facts['pid']})" if facts["pid"] else ""))
            return 0 if all(facts["healthy"] for facts in report.values()) else 1
        elif args.action == "env":
            for name, value in stack.load_state().environment().items():
                print(f"export {name}={shlex.quote(value)}")
        elif args.action == "build":
            print(stack.build_minio())
            print(stack.build_lakefs())
    except stack.StackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _config(args: argparse.Namespace) -> int:
    from exporter.config import load_config

    print(json.dumps(load_config(args.config).masked(), indent=2))
    return 0


def _export(args: argparse.Namespace) -> int:
    from exporter.config import load_config
    from exporter.export import export_commit

    config = load_config(args.config)
    outcomes = export_commit(config, args.repo, args.ref, args.commit, tables=args.table or None, export_all=args.all)
    failed = 0
    for outcome in outcomes:
        print(outcome.summary())
        failed += not outcome.ok
    if not outcomes:
        print("no table changed in this commit (use --all to export every table)")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lakefs-delta", description=__doc__)
    parser.add_argument("--config", help="YAML config file (default: $LAKEFS_DELTA_CONFIG)")
    commands = parser.add_subparsers(dest="command", required=True)

    stack_cmd = commands.add_parser("stack", help="local lakeFS + MinIO + Redis on 127.0.0.1")
    stack_cmd.add_argument("action", choices=["up", "down", "status", "env", "build"])
    stack_cmd.set_defaults(run=_stack)

    config_cmd = commands.add_parser("config", help="show the effective configuration, secrets masked")
    config_cmd.add_argument("action", choices=["show"])
    config_cmd.set_defaults(run=_config)

    export_cmd = commands.add_parser("export", help="export the Delta tables of one commit")
    export_cmd.add_argument("--repo", required=True)
    export_cmd.add_argument("--ref", required=True, help="branch or tag the export is filed under")
    export_cmd.add_argument("--commit", help="commit id (default: the ref's head)")
    export_cmd.add_argument("--table", action="append", help="table name from _lakefs_tables (repeatable)")
    export_cmd.add_argument("--all", action="store_true", help="export every table, changed or not")
    export_cmd.set_defaults(run=_export)

    args = parser.parse_args(argv)
    from exporter.errors import ExporterError

    try:
        return args.run(args)
    except ExporterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
