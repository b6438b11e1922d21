"""Kafka Connect's REST API: are the connectors that feed the tables running?

A Debezium task that fails (a row larger than the producer's ``max.request.size``, a lost
binlog position) stays FAILED until someone restarts it, while Kafka and Elasticsearch look
fine. The states are read here; what counts as a problem is decided by the pure
:func:`connector_problems`.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import Any

import aiohttp

from indexer.errors import ConnectUnavailable
from indexer.security import redact_url, tls_context, tls_reason
from indexer.settings import ConnectSettings


@dataclass(frozen=True)
class TaskState:
    id: int
    state: str
    worker: str
    trace: str = ""


@dataclass(frozen=True)
class ConnectorState:
    name: str
    state: str
    worker: str
    tasks: tuple[TaskState, ...]
    trace: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "state": self.state, "worker": self.worker,
                "error": error_summary(self.trace) or None,
                "tasks": [{"id": t.id, "state": t.state, "worker": t.worker,
                           "error": error_summary(t.trace) or None} for t in self.tasks]}


def parse_states(expanded: dict[str, Any]) -> list[ConnectorState]:
    """States out of ``GET /connectors?expand=status``."""
    states = []
    for name, entry in sorted(expanded.items()):
        status = entry.get("status", {})
        connector = status.get("connector", {})
        tasks = tuple(TaskState(int(t.get("id", 0)), str(t.get("state", "UNKNOWN")),
                                str(t.get("worker_id", "")), str(t.get("trace", "")))
                      for t in status.get("tasks", []))
        states.append(ConnectorState(name, str(connector.get("state", "UNKNOWN")),
                                     str(connector.get("worker_id", "")), tasks,
                                     str(connector.get("trace", ""))))
    return states


def error_summary(trace: str) -> str:
    """The first line of a Java stack trace, and its deepest cause when that says more
    ("RecordTooLargeException: The message is 3011689 bytes ...")."""
    lines = [line.strip() for line in trace.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    causes = [line.removeprefix("Caused by: ") for line in lines if line.startswith("Caused by:")]
    if causes and causes[-1] != lines[0]:
        return f"{lines[0]} (caused by {causes[-1]})"
    return lines[0]


def connector_problems(url: str, states: list[ConnectorState],
                       wanted: tuple[str, ...]) -> list[str]:
    """Each configured connector that is missing, and each connector or task not RUNNING,
    with its error and the REST call that restarts it. A PAUSED connector is a problem too:
    nothing flows while it is paused."""
    problems = []
    by_name = {s.name: s for s in states}
    for name in wanted:
        if name not in by_name:
            known = ", ".join(by_name) or "none"
            problems.append(f"connector {name!r} does not exist on {redact_url(url)} "
                            f"(connectors there: {known})")
    base = redact_url(url).rstrip("/")
    for state in states:
        if wanted and state.name not in wanted:
            continue
        restart = (f"restart it: curl -X POST '{base}/connectors/{state.name}/restart"
                   "?includeTasks=true&onlyFailed=true'")
        if state.state == "PAUSED":
            problems.append(f"connector {state.name!r} is PAUSED: no change flows "
                            f"(resume it: curl -X PUT '{base}/connectors/{state.name}/resume')")
            continue
        if state.state != "RUNNING":
            error = error_summary(state.trace)
            problems.append(f"connector {state.name!r} is {state.state}"
                            + (f": {error}" if error else "") + f"; {restart}")
        if not state.tasks and state.state == "RUNNING":
            problems.append(f"connector {state.name!r} has no running task; {restart}")
        for task in state.tasks:
            if task.state != "RUNNING":
                error = error_summary(task.trace)
                problems.append(f"connector {state.name!r} task {task.id} is {task.state}"
                                + (f" on {task.worker}" if task.worker else "")
                                + (f": {error}" if error else "") + f"; {restart}")
    return problems


class ConnectClient:
    """One HTTP session to a Kafka Connect worker's REST API."""

    def __init__(self, settings: ConnectSettings) -> None:
        if settings.url is None:
            raise ValueError("connect.url is not set")
        self._settings = settings
        self._url: str = settings.url.rstrip("/")
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> ConnectClient:
        s = self._settings
        auth = (aiohttp.BasicAuth(s.username, s.password.reveal())
                if s.username and s.password else None)
        ssl: Any = None
        if self._url.startswith("https://"):
            ssl = tls_context(ca_file=s.ca_file, verify=s.verify_certs)
        self._session = aiohttp.ClientSession(
            auth=auth, timeout=aiohttp.ClientTimeout(total=s.request_timeout_s),
            connector=aiohttp.TCPConnector(ssl=ssl if ssl is not None else True))
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._session is not None:
            await self._session.close()

    async def states(self) -> list[ConnectorState]:
        return parse_states(await self._get("/connectors?expand=status"))

    async def names(self) -> list[str]:
        return [str(name) for name in await self._get("/connectors")]

    async def committed_gtids(self, name: str, server: str) -> str | None:
        """The GTID set a connector has committed as its source offset for Debezium's logical
        server ``server`` (its topic.prefix): Kafka Connect commits a source offset only
        once Kafka acknowledged every record before it (GET .../offsets, Kafka 3.6+)."""
        found = await self._get(f"/connectors/{name}/offsets")
        for entry in found.get("offsets", []):
            if entry.get("partition", {}).get("server") == server:
                gtids = entry.get("offset", {}).get("gtids")
                return str(gtids) if gtids else None
        return None

    async def _get(self, path: str) -> Any:
        assert self._session is not None, "use the client as an async context manager"
        where = redact_url(self._url)
        try:
            async with self._session.get(self._url + path) as response:
                if response.status in (401, 403):
                    raise ConnectUnavailable(
                        f"Kafka Connect at {where} refused the request ({response.status}): "
                        "check connect.username and connect.password")
                if response.status >= 400:
                    raise ConnectUnavailable(f"Kafka Connect at {where} answered "
                                             f"{response.status}: {await response.text()}")
                return await response.json()
        except aiohttp.ClientSSLError as exc:
            raise ConnectUnavailable(f"Kafka Connect at {where}: TLS: "
                                     f"{tls_reason(str(exc))} (check connect.ca_file)") from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ConnectUnavailable(f"Kafka Connect at {where} does not answer "
                                     f"({type(exc).__name__}: {exc}); is the worker running? "
                                     "(connect.url)") from exc
