"""ragas' Faithfulness wired to an OpenAI-compatible endpoint, here a fake judge served on localhost."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from eval.judge import JudgeConfig, RagasFaithfulnessJudge
from tests.helpers import SweepSetup


class FakeJudge(BaseHTTPRequestHandler):
    """Answers ragas' two structured prompts: statements = sentences; verdict 1 iff the statement's last
    word occurs in the context part of the prompt."""

    requests: list[dict] = []

    def log_message(self, *args: object) -> None:
        return None

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeJudge.requests.append(body)
        prompt = body["messages"][-1]["content"]
        tool = body["tools"][0]["function"]
        if "StatementFaithfulnessAnswer" in json.dumps(tool["parameters"]):
            payload = json.loads(prompt[prompt.rindex("input:") + len("input:") :].split("Output:")[0].strip())
            context = payload["context"].lower()
            answer = {
                "statements": [
                    {"statement": s, "reason": "fake", "verdict": int(s.rstrip(".").split()[-1].lower() in context)}
                    for s in payload["statements"]
                ]
            }
        else:
            payload = json.loads(prompt[prompt.rindex("input:") + len("input:") :].split("Output:")[0].strip())
            answer = {"statements": [s.strip() + "." for s in payload["answer"].split(".") if s.strip()]}
        reply = {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": tool["name"], "arguments": json.dumps(answer)},
                            }
                        ],
                    },
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def endpoint() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), FakeJudge)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    FakeJudge.requests = []
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()


def test_ragas_faithfulness_through_an_openai_compatible_endpoint(endpoint: str) -> None:
    judge = RagasFaithfulnessJudge(JudgeConfig(base_url=endpoint, model="judge-7b"))
    score = judge.score("How high is K2?", "K2 is in Karakoram. K2 is in Alps.", ["K2 lies in the Karakoram range."])
    assert score == 0.5
    assert len(FakeJudge.requests) == 2 and {r["model"] for r in FakeJudge.requests} == {"judge-7b"}


def test_sweep_stores_judge_scores_next_to_offline_faithfulness(endpoint: str, setup: SweepSetup) -> None:
    import duckdb

    from eval.sweep import run_sweep

    config, components = setup
    judge_config = JudgeConfig(base_url=endpoint, model="judge-7b")
    comps = components()
    comps.judge = RagasFaithfulnessJudge(judge_config)
    result = run_sweep(config.model_copy(update={"judge": judge_config}), comps)
    con = duckdb.connect(result.store_path)
    rows = con.execute("SELECT ragas_status, ragas_faithfulness, faithfulness FROM samples").fetchall()
    assert rows and {r[0] for r in rows} <= {"ok", "no_statements"} and "ok" in {r[0] for r in rows}
    assert all(0.0 <= r[1] <= 1.0 for r in rows if r[0] == "ok")
    assert con.execute("SELECT count(*) FROM v_leaderboard WHERE ragas_faithfulness IS NOT NULL").fetchone()[0] > 0
