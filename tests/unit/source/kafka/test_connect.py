from indexer.source.kafka.connect import (
    ConnectorState,
    TaskState,
    connector_problems,
    error_summary,
    parse_states,
)

TRACE = "\n".join([
    "org.apache.kafka.connect.errors.ConnectException: Unrecoverable exception from producer "
    "send callback",
    "\tat org.apache.kafka.connect.runtime.WorkerSourceTask.maybeThrowProducerSendException"
    "(WorkerSourceTask.java:312)",
    "Caused by: org.apache.kafka.common.errors.RecordTooLargeException: The message is 3011689 "
    "bytes when serialized which is larger than 1048576, which is the value of the "
    "max.request.size configuration.",
    ""])
URL = "http://connect:8083"


def test_states_from_the_expanded_listing() -> None:
    (state,) = parse_states({"cdc": {"status": {
        "name": "cdc", "connector": {"state": "RUNNING", "worker_id": "w:8083"},
        "tasks": [{"id": 0, "state": "FAILED", "worker_id": "w:8083", "trace": TRACE}],
        "type": "source"}}})
    assert state == ConnectorState("cdc", "RUNNING", "w:8083",
                                   (TaskState(0, "FAILED", "w:8083", TRACE),))


def test_error_summary_keeps_the_first_line_and_the_deepest_cause() -> None:
    summary = error_summary(TRACE)
    assert summary.startswith("org.apache.kafka.connect.errors.ConnectException: Unrecoverable")
    assert "(caused by org.apache.kafka.common.errors.RecordTooLargeException: The message is " \
           "3011689 bytes" in summary
    assert error_summary("") == ""
    assert error_summary("java.lang.IllegalStateException: x\n\tat a.b(C.java:1)") == \
        "java.lang.IllegalStateException: x"


def test_problems_name_the_connector_task_error_and_restart_call() -> None:
    states = [ConnectorState("cdc", "RUNNING", "w", (TaskState(0, "FAILED", "w", TRACE),)),
              ConnectorState("other", "FAILED", "w", ())]
    (task,) = connector_problems(URL, states, ("cdc",))
    assert task.startswith("connector 'cdc' task 0 is FAILED on w: org.apache.kafka")
    assert "RecordTooLargeException" in task
    assert task.endswith("curl -X POST 'http://connect:8083/connectors/cdc/restart"
                         "?includeTasks=true&onlyFailed=true'")
    # Without a list, every connector on the worker is watched.
    assert len(connector_problems(URL, states, ())) == 2


def test_missing_paused_and_taskless_connectors_are_problems() -> None:
    paused = ConnectorState("cdc", "PAUSED", "w", (TaskState(0, "PAUSED", "w"),))
    (problem,) = connector_problems(URL, [paused], ("cdc",))
    assert "PAUSED" in problem and "/connectors/cdc/resume" in problem
    (missing,) = connector_problems(URL, [paused], ("nope",))
    assert missing == "connector 'nope' does not exist on http://connect:8083 " \
                      "(connectors there: cdc)"
    taskless = ConnectorState("cdc", "RUNNING", "w", ())
    assert "no running task" in connector_problems(URL, [taskless], ())[0]
    healthy = ConnectorState("cdc", "RUNNING", "w", (TaskState(0, "RUNNING", "w"),))
    assert connector_problems(URL, [healthy], ("cdc",)) == []


def test_credentials_in_the_url_never_show() -> None:
    failed = ConnectorState("cdc", "FAILED", "w", ())
    (problem,) = connector_problems("http://admin:hunter22@connect:8083", [failed], ())
    assert "hunter22" not in problem
