"""TLS and authentication against the secured stack (SECURE=1 dev/stack.sh up): every
server refuses what it should, each refusal is one line naming the setting to fix, and no
secret ever shows in anything indexer writes. Skipped on a stack without TLS."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from indexer.errors import ConfigError
from indexer.search.client import SearchClient, auth_header
from indexer.security import Secret
from indexer.settings import ElasticsearchSettings, MySQLSettings
from indexer.source.kafka.clients import probe
from indexer.source.mysql import connection
from tests.integration.conftest import (
    COLUMNS,
    DATABASE,
    PROFILE,
    REPO,
    STACK,
    DaemonProcess,
    expected_rows,
    insert_rows,
    running,
    sql,
    unique,
    wait_for_documents,
    wait_for_topic,
)

pytestmark = [
    pytest.mark.secure,
    pytest.mark.skipif(not STACK.elasticsearch.tls or not STACK.kafka.sasl,
                       reason="needs the secured stack (SECURE=1 dev/stack.sh up)"),
]

SECRETS = Path(str(PROFILE.get("mysql", {}).get("password_file", "."))).parent
CA = STACK.elasticsearch.ca_file


def secret_values() -> dict[str, str]:
    """Every password and token of the secured stack (dev/stack.sh made them at random)."""
    return {path.name: path.read_text().strip() for path in SECRETS.iterdir() if path.is_file()}


async def indexer(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "indexer", *args], cwd=REPO,
        capture_output=True, text=True, timeout=timeout)


def with_section(raw: dict[str, Any], section: str, drop: tuple[str, ...] = (),
                 **values: Any) -> dict[str, Any]:
    changed = {k: v for k, v in raw.get(section, {}).items() if k not in drop}
    return {**raw, section: {**changed, **values}}


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


@pytest.fixture
def table_config(make_table: Any, make_config: Any, tmp_path: Path) -> tuple[Any, Path]:
    table = make_table(COLUMNS)
    path = tmp_path / "indexer.toml"
    make_config(table.entry(), file=path)
    return table, path


def rewrite(path: Path, section: str, drop: tuple[str, ...] = (), **values: Any) -> Path:
    """A copy of a test config file with one section changed."""
    import tomllib

    from tests.integration.conftest import toml

    raw = tomllib.loads(path.read_text())
    changed = path.with_name(f"changed-{section}-{len(values)}-{len(drop)}.toml")
    changed.write_text(toml(with_section(raw, section, drop, **values)))
    return changed


@pytest.mark.parametrize(("command", "section", "drop", "values", "setting"), [
    ("run", "elasticsearch", ("password_file",), {"password": "wrong-password"},
     "elasticsearch.password"),
    ("run", "elasticsearch", ("ca_file",), {}, "elasticsearch.ca_file"),
    ("run", "elasticsearch", ("username", "password_file"),
     {"api_key": "no-such-id:no-such-key"}, "elasticsearch.api_key"),
    ("run", "kafka", ("sasl_password_file",), {"sasl_password": "wrong-password"},
     "kafka.sasl_password"),
    ("run", "kafka", ("ca_file",), {}, "kafka.ca_file"),
    ("run", "kafka", ("security_protocol", "sasl_mechanism", "sasl_username",
                      "sasl_password_file", "ca_file"), {}, "kafka.security_protocol"),
    ("reindex", "mysql", ("password_file",), {"password": "wrong-password"}, "mysql.password"),
    ("reindex", "mysql", ("ca_file",), {}, "mysql.tls"),
    ("reindex", "mysql", ("ca_file",), {"tls": True}, "mysql.ca_file"),
])
async def test_a_refused_setting_stops_the_start_with_one_line_naming_it(
        table_config: tuple[Any, Path], es: SearchClient, command: str, section: str,
        drop: tuple[str, ...], values: dict[str, Any], setting: str) -> None:
    table, path = table_config
    changed = rewrite(path, section, drop, **values)
    args = ["run"] if command == "run" else ["reindex", table.name]
    result = await indexer(*args, "-c", str(changed), timeout=60)
    assert result.returncode == 2, result.stderr
    (line,) = error_lines(result.stderr)
    assert setting in line, line
    assert "Traceback" not in result.stderr
    # Nothing written: no index was created for the table.
    assert await es.indices(f"{table.alias}-v*") == []


async def test_plain_http_to_the_tls_port_names_the_fix(
        table_config: tuple[Any, Path]) -> None:
    _, path = table_config
    https = STACK.elasticsearch.hosts[0]
    changed = rewrite(path, "elasticsearch", ("ca_file",),
                      hosts=[https.replace("https://", "http://")])
    result = await indexer("check", "-c", str(changed))
    assert result.returncode == 2
    (line,) = error_lines(result.stderr)
    assert "use https:// in elasticsearch.hosts" in line


async def test_the_api_key_header_reaches_elasticsearch_as_an_api_key() -> None:
    # The minimal build cannot issue API keys (its .security index needs a module it lacks):
    # what can be shown on the real server is that it reads indexer's header as one.
    settings = dataclasses.replace(STACK.elasticsearch, username=None, password=None,
                                   api_key=Secret("key-id-42:not-a-real-key"))
    async with aiohttp.ClientSession() as http:
        answer = await http.get(f"{settings.hosts[0]}/_security/_authenticate",
                                headers=auth_header(settings), ssl=_context(settings))
        body = await answer.json()
    assert answer.status == 401
    assert "apikey authentication for id key-id-42" in str(body)


def _context(settings: ElasticsearchSettings) -> Any:
    from indexer.security import tls_context

    return tls_context(ca_file=settings.ca_file)


async def test_a_bearer_token_authenticates() -> None:
    token = (SECRETS / "es-bearer.token").read_text().strip()
    settings = dataclasses.replace(STACK.elasticsearch, username=None, password=None,
                                   bearer_token=Secret(token))
    async with SearchClient(settings) as client:
        me = await client.request("GET", "/_security/_authenticate")
    assert me["authentication_type"] == "token"
    assert me["username"] == "elastic/fleet-server"
    wrong = dataclasses.replace(settings, bearer_token=Secret(token[:-4] + "AAAA"))
    with pytest.raises(ConfigError, match=re.escape("elasticsearch.bearer_token")):
        async with SearchClient(wrong):
            pass


async def test_fingerprint_pinning_replaces_the_ca() -> None:
    import hashlib
    import ssl

    host = STACK.elasticsearch.hosts[0].removeprefix("https://")
    name, port = host.rsplit(":", 1)
    pem = await asyncio.to_thread(ssl.get_server_certificate, (name, int(port)))
    digest = hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem)).hexdigest()
    pinned = dataclasses.replace(STACK.elasticsearch, ca_file=None,
                                 fingerprint=":".join(re.findall("..", digest.upper())))
    async with SearchClient(pinned) as client:
        assert (await client.health())["status"] in ("green", "yellow")
    wrong = dataclasses.replace(pinned, fingerprint="00" * 32)
    with pytest.raises(ConfigError, match=re.escape("elasticsearch.fingerprint")):
        async with SearchClient(wrong):
            pass


async def test_turning_verification_off_is_logged(table_config: tuple[Any, Path]) -> None:
    _, path = table_config
    changed = rewrite(path, "elasticsearch", ("ca_file",), verify_certs=False)
    result = await indexer("check", "-c", str(changed), "--log-level", "INFO")
    assert result.returncode in (0, 1), result.stderr
    assert "NOT verified (elasticsearch.verify_certs = false)" in result.stderr


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_each_sasl_mechanism_authenticates(mechanism: str) -> None:
    await probe(dataclasses.replace(STACK.kafka, sasl_mechanism=mechanism))  # type: ignore[arg-type]
    wrong = dataclasses.replace(STACK.kafka, sasl_mechanism=mechanism,  # type: ignore[arg-type]
                                sasl_password=Secret("wrong-password"))
    with pytest.raises(ConfigError, match=re.escape("kafka.sasl_password")):
        await probe(wrong)


def test_mysql_connections_are_encrypted_and_the_account_requires_it() -> None:
    conn = connection.connect(STACK.mysql, DATABASE)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW SESSION STATUS LIKE 'Ssl_version'")
            ((_, version),) = cur.fetchall()
    finally:
        conn.close()
    assert version.startswith("TLS")
    plain = MySQLSettings(**{**{f.name: getattr(STACK.mysql, f.name)
                                for f in dataclasses.fields(MySQLSettings)}, "ca_file": None})
    with pytest.raises(ConfigError, match=re.escape("mysql.tls = true")):
        connection.connect(plain, DATABASE)


async def test_no_secret_shows_in_anything_a_run_writes(
        db: Any, es: SearchClient, make_table: Any, make_config: Any, tmp_path: Path) -> None:
    secrets = secret_values()
    assert len(secrets) >= 5 and all(len(v) >= 16 for v in secrets.values())
    table = make_table(COLUMNS)
    insert_rows(db, table.name, 1, 300)
    await wait_for_topic(table.topic)
    # Secrets inline in the file too, not only in files it names.
    inline = {"elasticsearch": {"password": secrets["es-indexer.password"]},
              "kafka": {"sasl_password": secrets["kafka-indexer.password"]},
              "mysql": {"password": secrets["mysql-indexer.password"]}}
    path = tmp_path / "indexer.toml"
    make_config(table.entry(), file=path, logging={"format": "json"})
    for section, values in inline.items():
        drop = tuple(f"{key}_file" for key in values)
        path = rewrite(path, section, drop, **values)
    written: list[str] = []
    for args in (["--help"], ["run", "--help"], ["check", "-c", str(path), "--log-level",
                                                  "DEBUG"]):
        result = await indexer(*args)
        written += [result.stdout, result.stderr]
    daemon = DaemonProcess(path, tmp_path / "daemon.log")
    try:
        await wait_for_documents(es, table.alias, expected_rows(db, table.name))
    finally:
        daemon.proc.terminate()
        daemon.proc.wait(30)
        daemon.close()
    written.append(daemon.log.read_text())
    for args in (["reindex", table.name, "--log-level", "DEBUG"],
                 ["reconcile", table.name, "--format", "json", "--log-level", "DEBUG"],
                 ["reconcile", table.name, "--format", "html", "--output",
                  str(tmp_path / "report.html")],
                 ["reconcile", table.name]):
        result = await indexer(*args, "-c", str(path))
        assert result.returncode == 0, result.stderr
        written += [result.stdout, result.stderr]
    written.append((tmp_path / "report.html").read_text())
    # And the refusals: a wrong password is never echoed either.
    secrets["a wrong password"] = wrong_password = "wrong-" + uuid.uuid4().hex
    for section, key in (("elasticsearch", "password"), ("kafka", "sasl_password"),
                         ("mysql", "password")):
        wrong = rewrite(path, section, (), **{key: wrong_password})
        result = await indexer("run" if section != "mysql" else "reindex",
                               *([] if section != "mysql" else [table.name]),
                               "-c", str(wrong), "--log-level", "DEBUG")
        assert result.returncode == 2, result.stderr
        written += [result.stdout, result.stderr]
    text = "\n".join(written)
    assert f"{table.alias}" in text, "the runs wrote what was checked"
    for name, value in secrets.items():
        assert value not in text, f"{name} appears in what indexer wrote"
    assert sql(db, f"SELECT COUNT(*) FROM `{table.name}`")[0][0] == 300


async def test_the_binlog_source_reads_over_tls_with_the_account_that_requires_it(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    """The replication connection is the account's too (it requires TLS: a plain one is
    refused, as tested above), so a dump that streams is an encrypted one."""
    table = make_table(COLUMNS)
    insert_rows(db, table.name, 1, 100)
    config = make_config(table.entry(), source={"kind": "binlog", "name": unique("it-binlog")},
                         canary={"enabled": False})
    async with running(config):
        await wait_for_documents(es, table.alias, expected_rows(db, table.name))
        insert_rows(db, table.name, 101, 150)
        sql(db, f"DELETE FROM `{table.name}` WHERE id <= 10")
        await wait_for_documents(es, table.alias, expected_rows(db, table.name))
