"""`lakefs-delta`: the one console command. Each subcommand is a thin front to a library call."""

from __future__ import annotations

import argparse
import json
import os
import sys

from lakefs_delta.progress import Shown


def _config(args: argparse.Namespace) -> int:
    from exporter.config import load_config

    print(json.dumps(load_config(args.config).masked(), indent=2))
    return 0


def _export(args: argparse.Namespace) -> int:
    from exporter.config import load_config
    from exporter.export.commit import export_commit
    from exporter.export.job import ExportAt
    from exporter.lakefs.lake import Lake

    config = load_config(args.config)
    with Shown() as shown:
        outcomes = export_commit(Lake.connect(config), ExportAt(args.repo, args.ref, args.commit),
                                 tables=args.table or None, export_all=args.all, progress=shown)
    failed = 0
    for outcome in outcomes:
        print(outcome.summary())
        failed += not outcome.ok
    if not outcomes:
        print("no table changed in this commit (use --all to export every table)")
    return 1 if failed else 0


def _serve(args: argparse.Namespace) -> int:
    import logging

    import uvicorn

    from exporter.config import ConfigError, load_config
    from hooks.app import create_app

    config = load_config(args.config)
    if not config.webhook_tokens:
        raise ConfigError("webhook_tokens: at least one token is required to serve webhooks "
                          "(LAKEFS_DELTA_WEBHOOK_TOKENS)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    uvicorn.run(create_app(config), host=args.host, port=args.port, log_level="warning")
    return 0


def _worker(args: argparse.Namespace) -> int:
    import tempfile

    from exporter.config import load_config
    from workers.app import configure

    config = load_config(args.config)
    argv = ["worker", "--loglevel=INFO", f"--concurrency={args.concurrency or config.workers.concurrency}",
            "--without-gossip", "--without-mingle"]
    if args.beat:  # the periodic catch-up; a Redis lock lets only one worker's run go at a time
        argv += ["--beat", "--schedule", f"{tempfile.gettempdir()}/lakefs-delta-beat-{os.getpid()}"]
    if args.name:
        argv += ["-n", args.name]
    # the default queue and the large tables' queue, unless told which
    argv += ["--queues", args.queues or f"celery,{config.workers.large_table_queue}"]
    configure(config).worker_main(argv)
    return 0


def _healthcheck(args: argparse.Namespace) -> int:
    """The health of this container's process, by its role: `serve` answers GET /healthz, a
    `worker` answers a Celery ping addressed to its own node name. The role (and `--port`,
    `--name`) are read from the command PID 1 runs unless `--role` says."""
    import socket
    import urllib.request
    from pathlib import Path

    command = [part.decode() for part in Path(args.cmdline).read_bytes().split(b"\0") if part]
    role = args.role or ("worker" if "worker" in command else "serve")

    def option(name: str, default: str) -> str:
        return command[command.index(name) + 1] if name in command[:-1] else default

    if role == "serve":
        url = f"http://127.0.0.1:{option('--port', '18080')}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=3) as answer:
                healthy = answer.status == 200
        except OSError as exc:
            print(f"unhealthy: {url}: {exc}", file=sys.stderr)
            return 1
        return 0 if healthy else 1
    from exporter.config import load_config
    from workers.app import configure

    node = option("--name", "celery@%h").replace("%h", socket.gethostname())
    replies = configure(load_config(args.config)).control.ping(destination=[node], timeout=5)
    if not replies:
        print(f"unhealthy: worker {node} did not answer a ping", file=sys.stderr)
        return 1
    return 0


def _catch_up(args: argparse.Namespace) -> int:
    from exporter.upkeep.catch_up import catch_up
    from exporter.config import load_config
    from exporter.lakefs.lake import Lake
    from exporter.state.status import StatusStore
    from workers.app import configure
    from workers.tasks import send_catch_up

    config = load_config(args.config)
    with Shown() as shown:
        plan = catch_up(Lake.connect(config), StatusStore(config.redis), args.repo or None, progress=shown)
    configure(config)
    for line in send_catch_up(plan):  # the workers' periodic catch-up sends the same
        print(line)
    for item in plan.given_up:
        print(f"failed  {item} (permanent failure: not queued again)")
    for item in plan.in_flight:
        print(f"busy    {item} (queued, running or retrying: left to its delivery)")
    for item in plan.skipped_repositories:
        print(f"skipped {item}")
    print(plan.summary())
    return 0


def _versions(args: argparse.Namespace) -> int:
    from exporter.branch_tables.table import branch_table_versions
    from exporter.config import load_config
    from exporter.lakefs.lake import Lake

    versions = branch_table_versions(Lake.connect(load_config(args.config)), args.repo, args.branch, args.table)
    if args.json:
        print(json.dumps(versions, indent=2))
        return 0
    print(f"{versions['location']}  head version {versions['head_version']}, offset {versions['offset']}")
    print(f"{'commit':<64}  {'version':>7}  {'source':>6}  appended")
    for entry in versions["commits"]:
        appended = "-" if not entry["appended"] else "{}..{}".format(*entry["appended"])
        why = f"  synthetic: {entry['synthetic']}" if entry["synthetic"] else ""
        print(f"{entry['commit_id']:<64}  {entry['version']:>7}  {entry['source_version']:>6}  {appended}{why}")
    return 0


def _prune(args: argparse.Namespace) -> int:
    from exporter.config import load_config
    from exporter.lakefs.lake import Lake
    from exporter.upkeep.retention import prune

    config = load_config(args.config)
    policy = config.retention.model_copy(update={k: v for k, v in (("keep_last", args.keep_last),
                                                                     ("keep_hours", args.keep_hours)) if v is not None})
    lake = Lake.connect(config)
    for repository in args.repo:
        with Shown() as shown:
            plan = prune(lake, repository, policy, dry_run=args.dry_run, progress=shown)
        for location in [*plan.deleted, *plan.row_diffs_deleted]:
            print(f"{'would delete' if args.dry_run else 'deleted'}  {location}")
        if args.verbose:
            for location, why in plan.kept.items():
                print(f"kept  {location}  ({why})")
        print(plan.summary())
    return 0


def _verify(args: argparse.Namespace) -> int:
    from exporter.config import load_config
    from exporter.lakefs.lake import Lake
    from exporter.upkeep.retention import verify

    config = load_config(args.config)
    with Shown() as shown:
        result = verify(Lake.connect(config), args.repo, args.ref, args.table, args.commit, progress=shown)
    print(result.summary())
    return 0 if result.ok else 1


def _install_actions(args: argparse.Namespace) -> int:
    from exporter.config import load_config
    from exporter.errors import ConfigError
    from exporter.lakefs.installer import action_files, install_actions
    from exporter.lakefs.client import LakeFS

    config = load_config(args.config)
    url = args.url or (config.public_url and config.public_url + "/webhooks/lakefs")
    if not url:
        raise ConfigError("install-actions: give --url, the webhook URL lakeFS calls, or set public_url")
    tables = dict(item.split("=", 1) for item in args.table or [])
    files = action_files(url, args.branches or [args.branch], tables, args.branch_tables or [], args.checks or [])
    commit_id = install_actions(LakeFS(config.lakefs), args.repo, args.branch, files, force=args.force)
    print(f"committed {commit_id}" if commit_id else "already installed; nothing to commit")
    return 0


def _check(args: argparse.Namespace) -> int:
    """The merge gate's report on the change from --from into --into, as lakeFS's hook would see it:
    exit 0 when every rule passes, 1 when one fails."""
    from exporter.checks.gate import check_change
    from exporter.config import load_config
    from exporter.diff.table import DiffCache
    from exporter.lakefs.lake import Lake

    config = load_config(args.config)
    report = check_change(Lake.connect(config), args.repo, args.source, args.into,
                          diffs=DiffCache(config.redis, config.api.diff_cache_ttl_seconds))
    print(json.dumps(report.as_dict(), indent=2) if args.json else report.text(config.public_url), end="")
    return 0 if report.passed else 1


def _diff(args: argparse.Namespace) -> int:
    from exporter.config import load_config
    from exporter.diff.table import DiffCache, cached_diff
    from exporter.lakefs.lake import Lake

    left, sep, right = args.refs.partition("..")
    if not sep or not left or not right:
        print("error: refs must be written LEFT..RIGHT, e.g. main..exp1", file=sys.stderr)
        return 2
    config = load_config(args.config)
    lake = Lake.connect(config)
    if not args.table:
        if args.rows:
            print("error: --rows needs --table", file=sys.stderr)
            return 2
        from exporter.diff.table import diff_commits
        from exporter.diff.overview import compare_refs

        overview = compare_refs(lake, DiffCache(config.redis, config.api.diff_cache_ttl_seconds), args.repo,
                                *diff_commits(lake.lakefs, args.repo, left, right))
        print(json.dumps(overview, indent=2) if args.json else render_overview(overview, left, right))
        return 0
    if args.rows:
        from exporter.diff.rows.compute import RowDiffCache, RowDiffQuery, cached_row_diff

        key = tuple(c.strip() for c in (args.key or "").split(",") if c.strip())
        diff, _ = cached_row_diff(lake, RowDiffCache(config.redis, config.api.diff_cache_ttl_seconds),
                                  RowDiffQuery(args.repo, left, right, args.table.strip("/"), key))
        diff["rows"] = []
        if diff["rows_location"]:  # the first `--limit` of its rows
            from exporter.diff.rows.file import rows_page

            diff["rows"] = rows_page(lake.store(args.repo), diff["rows_location"], 0, max(args.limit, 1))[0]
        print(json.dumps(diff, indent=2) if args.json else render_row_diff(diff, left, right, args.limit))
        return 0
    diff, _ = cached_diff(lake, DiffCache(config.redis, config.api.diff_cache_ttl_seconds), args.repo, left, right,
                          args.table.strip("/"))
    if args.json:
        print(json.dumps(diff, indent=2))
    else:
        print(render_diff(diff, left, right))
    return 0


def render_overview(overview: dict, left: str, right: str) -> str:
    """One line per table that differs between the two refs."""
    lines = [f"{left}..{right}: {len(overview['tables'])} table(s) differ"]
    for table in overview["tables"]:
        rows = table["rows"]["difference"]
        lines.append(f"  {table['path']:<40} {table['diff_type']:<8} rows {'?' if rows is None else f'{rows:+d}'}"
                     f"  files {table['files']['left']} -> {table['files']['right']}"
                     + ("  schema changed" if table["schema_changed"] else ""))
    return "\n".join(lines)


def render_row_diff(diff: dict, left: str, right: str, limit: int = 50) -> str:
    """The row diff as a human reads it: counts, per partition, files, then the rows (up to `limit`)."""
    counts = diff["counts"]
    lines = [f"{diff['table_path']}: {left}..{right}  rows added {counts['added']}, removed {counts['removed']}"
             + (f", updated {counts['updated']}" if diff["key"] else "")
             + f"  ({diff['bytes_read']:,} bytes of differing files read)"]
    for partition, per in sorted(diff["partitions"].items()):
        if partition:
            lines.append(f"  {partition}: +{per['added']} -{per['removed']}" + (f" ~{per['updated']}" if diff["key"] else ""))
    files = diff["files"]
    lines.append(f"files: {len(files['added'])} added, {len(files['removed'])} removed, "
                 f"{len(files['deletion_vector_changed'])} with a changed deletion vector")
    sign = {"added": "+", "removed": "-", "updated": "~"}
    for row in diff["rows"][:limit]:
        before = f"  (was {json.dumps(row['before'])})" if row.get("before") else ""
        lines.append(f"{sign[row['change']]} {json.dumps(row['values'])}{before}")
    total = sum(counts.values())
    if total > min(limit, len(diff["rows"])):
        lines.append(f"... {total - min(limit, len(diff['rows']))} more (--limit N for more; all of them: "
                     f"{diff['rows_location']}, Parquet)")
    return "\n".join(lines)


def _sign_in_link(args: argparse.Namespace) -> int:
    from exporter.config import load_config
    from lakefs_delta.client import sign_in_link

    config = load_config(args.config)
    page = {key: value for key, value in (("repository", args.repo), ("left", args.left), ("right", args.right),
                                          ("table_path", args.table)) if value}
    print(sign_in_link(args.url.rstrip("/"), config.lakefs.access_key_id,
                       config.lakefs.secret_access_key.get_secret_value(), page))
    return 0


def _recipient_create(args: argparse.Namespace) -> int:
    from datetime import datetime, timedelta, timezone

    from exporter.config import load_config
    from exporter.errors import ConfigError
    from exporter.state.recipients import Recipients, profile

    config = load_config(args.config)
    known = {share.name for share in config.sharing.shares}
    unknown = [share for share in args.share if share not in known]
    if unknown:
        raise ConfigError(f"sharing.shares: no share {unknown[0]!r} (configured: {', '.join(sorted(known)) or 'none'})")
    days = config.sharing.recipient_days if args.days is None else args.days
    if days <= 0:
        raise ConfigError(f"--days must be positive, not {days}: a token that has expired already is no token")
    expires = datetime.now(timezone.utc) + timedelta(days=days)
    recipient, token = Recipients(config.redis).create(args.name, args.share, expires)
    endpoint = args.endpoint or config.sharing.endpoint or "http://127.0.0.1:18080/delta-sharing"
    document = json.dumps(profile(endpoint, token, recipient), indent=2) + "\n"
    if args.output:
        descriptor = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds a secret
        os.fchmod(descriptor, 0o600)  # also when the file existed with another mode
        with os.fdopen(descriptor, "w") as out:
            out.write(document)
        print(f"recipient {recipient.name}: shares {', '.join(recipient.shares)}, expires {recipient.expires}; "
              f"profile written to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(document)
    return 0


def _recipient_list(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from exporter.config import load_config
    from exporter.state.recipients import Recipients

    recipients = Recipients(load_config(args.config).redis).list()
    if args.json:
        print(json.dumps([{**asdict(r), "state": r.state()} for r in recipients], indent=2))
        return 0
    for r in recipients:
        print(f"{r.name:<24} {r.state():<8} shares {','.join(r.shares):<24} created {r.created}  expires {r.expires}"
              + (f"  revoked {r.revoked}" if r.revoked else ""))
    if not recipients:
        print("no recipients")
    return 0


def _recipient_revoke(args: argparse.Namespace) -> int:
    from exporter.config import load_config
    from exporter.state.recipients import Recipients

    recipient = Recipients(load_config(args.config).redis).revoke(args.name)
    print(f"recipient {recipient.name} revoked at {recipient.revoked}: its token no longer works")
    return 0


def render_diff(diff: dict, left: str, right: str) -> str:
    """The diff as a human reads it: type, row count, schema changes, operations."""
    rows = diff["row_count"]
    change = "unknown" if rows["difference"] is None else f"{rows['difference']:+d}"
    lines = [f"{diff['table_path']}: {left}..{right}  diff_type={diff['diff_type']}"
             + ("  (history truncated)" if diff["history_truncated"] else ""),
             f"rows   {rows['left']} -> {rows['right']}  ({change})"]
    files = diff["files"]
    side = lambda f: f"{f['count']} files / {f['bytes']} bytes" if f else "absent"  # noqa: E731
    lines.append(f"files  {side(files['left'])} -> {side(files['right'])}")
    if diff["schema_changes"]:
        lines.append("schema changes:")
        lines += [f"  {c['change']:<19} {c['column']:<30} {c['left']} -> {c['right']}" for c in diff["schema_changes"]]
    lines.append(f"operations on {right} not on {left}: {len(diff['results'])}")
    for op in diff["results"]:
        lines.append(f"  v{op['id']:<5} {op['operation']:<22} {op['operation_type']:<8} "
                     f"{json.dumps(op['operation_content'].get('operationParameters', {}))[:80]}")
    return "\n".join(lines)


def _add_export_commands(commands) -> None:
    """The subcommands for commands that export."""
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


def _add_process_commands(commands) -> None:
    """The subcommands for the long-running processes."""
    serve_cmd = commands.add_parser("serve", help="the webhook receiver and API (uvicorn)")
    serve_cmd.add_argument("--host", default="127.0.0.1")
    serve_cmd.add_argument("--port", type=int, default=18080)
    serve_cmd.set_defaults(run=_serve)

    worker_cmd = commands.add_parser("worker", help="a Celery worker for export tasks")
    worker_cmd.add_argument("--concurrency", type=int)
    worker_cmd.add_argument("--no-beat", dest="beat", action="store_false",
                            help="do not run the periodic catch-up in this worker (it runs by default)")
    worker_cmd.add_argument("--name", help="Celery node name, e.g. w1@%%h")
    worker_cmd.add_argument("--queues", help="comma-separated queues to consume (default: celery and the "
                                             "workers.large_table_queue), e.g. `lakefs_delta.large` for a worker of its own")
    worker_cmd.set_defaults(run=_worker)


def _add_repository_commands(commands) -> None:
    """The subcommands for commands that act on repositories."""
    catch_up_cmd = commands.add_parser("catch-up", help="queue recent commits and tags whose export is incomplete")
    catch_up_cmd.add_argument("--repo", action="append",
                              help="repository (repeatable; default: catch_up.repositories, else every repository)")
    catch_up_cmd.set_defaults(run=_catch_up)

    install_cmd = commands.add_parser("install-actions", help="upload the export action and descriptors, and commit")
    install_cmd.add_argument("--repo", required=True)
    install_cmd.add_argument("--branch", required=True)
    install_cmd.add_argument("--url", help="the webhook URL lakeFS calls (default: <public_url>/webhooks/lakefs)")
    install_cmd.add_argument("--branches", nargs="*", help="branch globs the action runs on (default: --branch)")
    install_cmd.add_argument("--table", action="append", help="NAME=PATH, a descriptor to install (repeatable)")
    install_cmd.add_argument("--force", action="store_true", help="replace different existing files")
    install_cmd.add_argument("--branch-tables", nargs="*", metavar="PATTERN",
                             help="branch globs that keep a branch table per table (<ref>/latest/<table>/)")
    install_cmd.add_argument("--checks", nargs="*", metavar="BRANCH",
                             help="branch globs whose merges and commits are checked against each changed table's "
                                  "declared rules (a second action, calling <url>/checks)")
    install_cmd.set_defaults(run=_install_actions)


def _add_diff_command(commands) -> None:
    """The subcommands for the diff and the merge gates' check."""
    check_cmd = commands.add_parser("check", help="check a change against each changed table's declared rules "
                                                  "(the merge gate); exit 1 when a rule fails")
    check_cmd.add_argument("--repo", required=True)
    check_cmd.add_argument("--from", dest="source", required=True, help="the ref whose changes are checked")
    check_cmd.add_argument("--into", required=True, help="the ref they would be merged into")
    check_cmd.add_argument("--json", action="store_true")
    check_cmd.set_defaults(run=_check)

    diff_cmd = commands.add_parser("diff", help="how a Delta table changed between two refs")
    diff_cmd.add_argument("--repo", required=True)
    diff_cmd.add_argument("refs", help="LEFT..RIGHT, e.g. main..exp1")
    diff_cmd.add_argument("--table", help="table path from the repository root (default: every table that differs)")
    diff_cmd.add_argument("--json", action="store_true")
    diff_cmd.add_argument("--rows", action="store_true", help="which rows changed (read from the differing files)")
    diff_cmd.add_argument("--key", help="with --rows: comma-separated key columns; equal keys are one update")
    diff_cmd.add_argument("--limit", type=int, default=50, help="with --rows: rows shown, printed or in --json (default 50)")
    diff_cmd.set_defaults(run=_diff)


def _add_retention_commands(commands) -> None:
    """The subcommands for branch tables' versions, prune and verify."""
    versions_cmd = commands.add_parser("versions", help="a branch table's lakeFS commit <-> Delta version mapping")
    versions_cmd.add_argument("--repo", required=True)
    versions_cmd.add_argument("--branch", required=True)
    versions_cmd.add_argument("--table", required=True, help="table name (its descriptor's name)")
    versions_cmd.add_argument("--json", action="store_true")
    versions_cmd.set_defaults(run=_versions)

    prune_cmd = commands.add_parser("prune", help="delete per-commit exports outside the retention policy "
                                                  "(never branch tables or tags' exports)")
    prune_cmd.add_argument("--repo", action="append", required=True, help="repository (repeatable)")
    prune_cmd.add_argument("--keep-last", type=int, help="newest first-parent commits kept per branch "
                                                         "(default: retention.keep_last)")
    prune_cmd.add_argument("--keep-hours", type=float, help="exports younger than this are kept "
                                                            "(default: retention.keep_hours)")
    prune_cmd.add_argument("--dry-run", action="store_true", help="list what would be deleted; delete nothing")
    prune_cmd.add_argument("--verbose", action="store_true", help="also list what is kept, and why")
    prune_cmd.set_defaults(run=_prune)

    verify_cmd = commands.add_parser("verify", help="check that every live data file and deletion vector of an "
                                                    "export (or branch table) still exists; exit 1 when not")
    verify_cmd.add_argument("--repo", required=True)
    verify_cmd.add_argument("--ref", required=True, help="the ref the export is under (a branch for its branch table)")
    verify_cmd.add_argument("--table", required=True, help="table name")
    verify_cmd.add_argument("--commit", help="the export of this commit (default: the branch table of --ref)")
    verify_cmd.set_defaults(run=_verify)


def _add_access_commands(commands) -> None:
    """The subcommands for health and sign-in."""
    health_cmd = commands.add_parser("healthcheck", help="exit 0 when this container's serve or worker is healthy")
    health_cmd.add_argument("--role", choices=["serve", "worker"], help="default: from the command PID 1 runs")
    health_cmd.add_argument("--cmdline", default="/proc/1/cmdline", help=argparse.SUPPRESS)
    health_cmd.set_defaults(run=_healthcheck)

    link_cmd = commands.add_parser("sign-in-link", help="a one-time link to the diff page, signed in as the "
                                                        "config's lakeFS identity")
    link_cmd.add_argument("--url", default="http://127.0.0.1:18080", help="the service's URL")
    link_cmd.add_argument("--repo")
    link_cmd.add_argument("--left", default="main")
    link_cmd.add_argument("--right")
    link_cmd.add_argument("--table", help="table path from the repository root")
    link_cmd.set_defaults(run=_sign_in_link)


def _add_sharing_commands(commands) -> list[argparse.ArgumentParser]:
    """`sharing recipient create|list|revoke`; returns the leaf commands."""
    sharing_cmd = commands.add_parser("sharing", help="Delta Sharing: the recipients of the shares in `sharing.shares`")
    sharing_commands = sharing_cmd.add_subparsers(dest="sharing_command", required=True)
    recipient_cmd = sharing_commands.add_parser("recipient", help="create, list or revoke recipients")
    recipient_commands = recipient_cmd.add_subparsers(dest="recipient_command", required=True)
    create_cmd = recipient_commands.add_parser("create", help="a recipient and its bearer token; prints the "
                                                              "profile file a Delta Sharing client reads")
    create_cmd.add_argument("name")
    create_cmd.add_argument("--share", action="append", required=True, help="a share it may read (repeatable)")
    create_cmd.add_argument("--days", type=float, help="days until the token expires (default: sharing.recipient_days)")
    create_cmd.add_argument("--endpoint", help="the server's URL as the recipient reaches it "
                                               "(default: sharing.endpoint)")
    create_cmd.add_argument("--output", help="write the profile to this file (mode 600) instead of stdout")
    create_cmd.set_defaults(run=_recipient_create)
    list_cmd = recipient_commands.add_parser("list", help="every recipient: shares, expiry, state")
    list_cmd.add_argument("--json", action="store_true")
    list_cmd.set_defaults(run=_recipient_list)
    revoke_cmd = recipient_commands.add_parser("revoke", help="the recipient's token stops working at once")
    revoke_cmd.add_argument("name")
    revoke_cmd.set_defaults(run=_recipient_revoke)
    return [create_cmd, list_cmd, revoke_cmd]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lakefs-delta", description=__doc__)
    parser.add_argument("--config", help="YAML config file (default: $LAKEFS_DELTA_CONFIG)")
    commands = parser.add_subparsers(dest="command", required=True)
    for add in (_add_export_commands, _add_process_commands, _add_repository_commands, _add_diff_command,
                _add_retention_commands, _add_access_commands):
        add(commands)
    leaves = _add_sharing_commands(commands)
    for command in [*commands.choices.values(), *leaves]:
        command.add_argument("--config", default=argparse.SUPPRESS, help="YAML config file")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from exporter.errors import ExporterError

    try:
        return args.run(args)
    except ExporterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
