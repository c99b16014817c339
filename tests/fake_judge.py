"""A fake OpenAI-compatible judge: answers ragas' two structured prompts and the claim entailment prompt.
Run in a thread by the tests, or as a server process (`python -m tests.fake_judge PORT`) standing in for
`vllm serve` when the judge server's process handling is tested.
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any


def _entailment(prompt: str) -> str:
    """yes iff the statement's last word occurs in the context; "maybe" for a statement saying GARBLE."""
    context = prompt.split("Statement:")[0].lower()
    statement = prompt.split("Statement:")[1].split("\n")[0].strip()
    if "GARBLE" in statement:
        return "maybe"
    return "Yes." if statement.rstrip(".").split()[-1].lower() in context else "no"


class FakeJudge(BaseHTTPRequestHandler):
    """Answers ragas' two structured prompts: statements = sentences; verdict 1 iff the statement's last
    word occurs in the context part of the prompt."""

    requests: list[dict[str, Any]] = []

    def log_message(self, *args: object) -> None:
        return None

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeJudge.requests.append(body)
        prompt = body["messages"][-1]["content"]
        if "tools" not in body:  # the claim entailment prompt
            self._reply(body, {"role": "assistant", "content": _entailment(prompt)}, "stop")
            return
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
        call = {"id": "call_1", "type": "function", "function": {"name": tool["name"], "arguments": json.dumps(answer)}}
        self._reply(body, {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls")

    def do_GET(self) -> None:  # noqa: N802
        self._send({"object": "list", "data": [{"id": "judge", "object": "model"}]})

    def _reply(self, body: dict[str, Any], message: dict[str, Any], finish: str) -> None:
        choice = {"index": 0, "finish_reason": finish, "message": message}
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        self._send(
            {
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [choice],
                "usage": usage,
            }
        )

    def _send(self, reply: dict[str, Any]) -> None:
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


if __name__ == "__main__":
    HTTPServer(("127.0.0.1", int(sys.argv[1])), FakeJudge).serve_forever()
