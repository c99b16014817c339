"""The LLM judge: ragas' Faithfulness and claim entailment through an OpenAI-compatible endpoint (a fake
judge on localhost), the judge server's process handling (the fake judge as a subprocess), and the agreement
between the offline checker and the judge that a run stores."""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Iterator
from http.server import HTTPServer
from pathlib import Path

import pytest

from eval.faithfulness.judge import JudgeConfig, RagasFaithfulnessJudge, RagasJudgeConfig, parse_verdict
from eval.faithfulness.judge_server import JudgeServerError, ServerConfig, ServerProcess, free_port
from eval.metrics import cohen_kappa
from tests.fake_judge import FakeJudge
from tests.helpers import SweepSetup

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def endpoint() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), FakeJudge)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    FakeJudge.requests = []
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()


def test_ragas_faithfulness_through_an_openai_compatible_endpoint(endpoint: str) -> None:
    judge = RagasFaithfulnessJudge(RagasJudgeConfig(base_url=endpoint, model="judge-7b"))
    score = judge.score("How high is K2?", "K2 is in Karakoram. K2 is in Alps.", ["K2 lies in the Karakoram range."])
    assert score == 0.5
    assert len(FakeJudge.requests) == 2 and {r["model"] for r in FakeJudge.requests} == {"judge-7b"}


def test_claim_entailment_reads_yes_no_and_never_guesses_the_rest(endpoint: str) -> None:
    judge = RagasFaithfulnessJudge(RagasJudgeConfig(base_url=endpoint, model="judge-7b"))
    context = "[1] K2\nK2 lies in the Karakoram range."
    assert judge.entails("K2 is in the Karakoram.", context) == (True, "ok")
    assert judge.entails("K2 is in the Alps.", context) == (False, "ok")
    verdict, status = judge.entails("K2 is GARBLE.", context)
    assert verdict is None and status == "unparsed: maybe"
    assert FakeJudge.requests[-1]["max_tokens"] == 3 and FakeJudge.requests[-1]["temperature"] == 0.0
    judge.close()
    down = RagasFaithfulnessJudge(RagasJudgeConfig(base_url=f"http://127.0.0.1:{free_port()}/v1", model="j"))
    verdict, status = down.entails("K2 is in the Alps.", context)
    assert verdict is None and status.startswith("error: APIConnectionError")


@pytest.mark.parametrize(
    ("reply", "expected"),
    [("Yes", True), ("yes.", True), (" NO, it does not", False), ('"no"', False), ("Maybe", None), ("", None)],
)
def test_parse_verdict(reply: str, expected: bool | None) -> None:
    assert parse_verdict(reply)[0] is expected


def test_cohen_kappa_matches_hand_computed_values() -> None:
    # 20 claims: both yes 10, both no 5, checker yes/judge no 3, checker no/judge yes 2.
    pairs = [(True, True)] * 10 + [(False, False)] * 5 + [(True, False)] * 3 + [(False, True)] * 2
    # po = 0.75; p_checker = 0.65, p_judge = 0.6; pe = 0.39 + 0.14 = 0.53; kappa = 0.22 / 0.47
    assert cohen_kappa(pairs) == pytest.approx(0.22 / 0.47)
    assert cohen_kappa([(True, True), (False, False)]) == pytest.approx(1.0)
    assert cohen_kappa([(True, False), (False, True)]) == pytest.approx(-1.0)
    assert cohen_kappa([(True, True)] * 4) is None  # chance agreement 1: undefined, not 0 or 1
    assert cohen_kappa([]) is None


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_server_process_comes_up_answers_and_stops_cleanly(tmp_path: Path) -> None:
    port = free_port()
    command = [sys.executable, str(ROOT / "tests" / "fake_judge.py"), str(port)]
    server = ServerProcess(command, f"http://127.0.0.1:{port}/v1", tmp_path / "judge.log", ServerConfig())
    with server:
        proc = server.proc
        assert proc is not None and proc.poll() is None and _listening(port)
        judge = RagasFaithfulnessJudge(RagasJudgeConfig(base_url=server.base_url, model="judge"))
        assert judge.entails("Ice is cold.", "Ice is cold.") == (True, "ok")
    assert proc.poll() is not None and server.proc is None
    deadline = time.monotonic() + 5
    while _listening(port) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _listening(port)


def test_a_server_that_dies_on_start_is_one_clear_error_with_its_log(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "import sys; print('loading judge'); sys.exit('OSError: no such model: /nope')"]
    server = ServerProcess(command, f"http://127.0.0.1:{free_port()}/v1", tmp_path / "judge.log", ServerConfig())
    with pytest.raises(JudgeServerError) as info:
        server.start()
    message = str(info.value)
    assert "exited with code 1 before it came up" in message and "no such model: /nope" in message
    assert str(tmp_path / "judge.log") in message and "\n" not in message


def test_a_server_that_never_answers_times_out_and_is_stopped(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "import time; time.sleep(60)"]
    server = ServerProcess(
        command, f"http://127.0.0.1:{free_port()}/v1", tmp_path / "judge.log", ServerConfig(startup_timeout_s=1.5)
    )
    with pytest.raises(JudgeServerError, match="did not answer"):  # not "exited": it was stopped at the timeout
        server.start()
    assert server.proc is None


def test_a_judge_port_taken_before_the_server_binds_it_is_retried_on_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """free_port() cannot reserve a port: when the server finds it taken, the judge starts on another one."""
    import eval.faithfulness.judge as judge_module
    from eval.faithfulness.judge import JudgeDeps, ServedJudge, ServedJudgeConfig

    taken = tmp_path / "taken-once"
    fake = str(ROOT / "tests" / "fake_judge.py")
    script = (
        "import pathlib, runpy, sys\n"
        f"marker = pathlib.Path({str(taken)!r})\n"
        "if not marker.exists():\n"
        "    marker.touch()\n"
        "    sys.exit('OSError: [Errno 98] Address already in use')\n"
        f"sys.argv = [{fake!r}, sys.argv[1]]\n"
        f"runpy.run_path({fake!r}, run_name='__main__')\n"
    )
    monkeypatch.setattr(
        judge_module, "server_command", lambda model, name, port, config: [sys.executable, "-c", script, str(port)]
    )
    judge = ServedJudge(ServedJudgeConfig(max_tokens=16), JudgeDeps(log_dir=tmp_path, default_model="m"))
    try:
        assert judge.entails("Ice is cold.", "Ice is cold.") == (True, "ok")
        logs = sorted(p.name for p in tmp_path.glob("judge-server-*.log"))
        assert len(logs) == 2 and logs[0].endswith("-1.log") and logs[1].endswith("-2.log")
    finally:
        judge.close()


def test_sweep_stores_judge_verdicts_and_the_runs_agreement(endpoint: str, setup: SweepSetup) -> None:
    import duckdb

    from eval.run.sweep import run_sweep

    config, components = setup
    judge_config = JudgeConfig(base_url=endpoint, model="judge-7b")
    comps = components()
    comps.judge = RagasFaithfulnessJudge(RagasJudgeConfig(base_url=endpoint, model="judge-7b"))
    result = run_sweep(config.model_copy(update={"judge": judge_config}), comps)
    con = duckdb.connect(result.store_path)
    rows = con.execute("SELECT ragas_status, ragas_faithfulness, faithfulness FROM samples").fetchall()
    assert rows and {r[0] for r in rows} <= {"ok", "no_statements"} and "ok" in {r[0] for r in rows}
    assert all(0.0 <= r[1] <= 1.0 for r in rows if r[0] == "ok")
    assert con.execute("SELECT count(*) FROM v_leaderboard WHERE ragas_faithfulness IS NOT NULL").fetchall()[0][0] > 0
    pairs = con.execute("SELECT supported, judge_supported FROM claims WHERE judge_status = 'ok'").fetchall()
    assert pairs and con.execute("SELECT count(*) FROM claims WHERE judge_status IS NULL").fetchall()[0][0] == 0
    kappa, n = con.execute("SELECT judge_kappa, judge_claims FROM runs").fetchall()[0]
    assert n == len(pairs)
    expected = cohen_kappa([(bool(a), bool(b)) for a, b in pairs])
    assert kappa == (pytest.approx(expected) if expected is not None else None)
    view = con.execute("SELECT sum(n_claims) FROM v_judge_agreement").fetchall()[0][0]
    assert view == len(pairs)


@pytest.mark.slow
def test_real_vllm_judge_server_serves_the_bundled_model_and_shuts_down(tmp_path: Path) -> None:
    """On this CPU the bundled 135M model only proves the plumbing: a real `vllm` server process answers real
    requests (its replies are read, whatever they say) and is gone afterwards."""
    from eval.faithfulness.judge import JudgeDeps, ServedJudge, ServedJudgeConfig
    from eval.run.scoring import ragas_columns
    from eval.run.wiring import bundled_model

    deps = JudgeDeps(log_dir=tmp_path, default_model=bundled_model())
    judge = ServedJudge(ServedJudgeConfig(max_tokens=64), deps)
    proc, port = judge.server.proc, int(judge.server.base_url.rsplit(":", 1)[1].split("/")[0])
    assert proc is not None
    try:
        context = "[1] France\nParis is the capital and largest city of France."
        verdict, status = judge.entails("Paris is the capital of France.", context)
        assert status == "ok" or status.startswith("unparsed: "), status  # a reply, not a connection error
        assert (verdict is None) == status.startswith("unparsed")
        ragas = ragas_columns(judge, "What is the capital of France?", "Paris is the capital of France.", context)
        assert "Connection" not in str(ragas["ragas_status"]), ragas  # the server answered; a 135M judge may not parse
    finally:
        judge.close()
    assert proc.poll() is not None and judge.server.proc is None
    deadline = time.monotonic() + 10
    while _listening(port) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _listening(port)
    log = next(tmp_path.glob("judge-server-*.log")).read_text(errors="replace")
    assert "/v1/chat/completions" in log
