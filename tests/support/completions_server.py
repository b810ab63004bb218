"""A local OpenAI-compatible completions server on 127.0.0.1 for the accuracy gate's tests: GET /v1/models and
non-streamed POST /v1/completions, as vLLM serves them and lm_eval's `local-completions` client calls them (one
prompt per request, `{"choices": [{"index", "text"}]}` back: lm_eval 0.4.13 openai_completions.py
`parse_generations`).

It answers arithmetic word problems in GSM8K's format, `#### <n>`: the answer of the last known question in the
prompt (a few-shot prompt holds the examples' questions first), or that answer plus one for a question in `wrong`.
"""

from __future__ import annotations

import json
import signal
import threading

from tests.support.openai_server import KEY, LocalV1Server, _JsonHandler


class _Handler(_JsonHandler):
    served_name: str
    answers: dict[str, int]  # question -> the right answer
    wrong: frozenset[str]
    requests: list[dict]
    stop: bool  # SIGTERM to the process at the first completion request, as a Job's deadline sends it

    def _authorised(self) -> bool:
        if self.headers.get("Authorization") == f"Bearer {KEY}":
            return True
        self._json(401, {"error": "Unauthorized"})
        return False

    def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
        if self.path != "/v1/models":
            self._json(404, {"error": "not found"})
        elif self._authorised():
            self._json(200, {"object": "list", "data": [{"id": self.served_name, "object": "model"}]})

    def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        if self.path != "/v1/completions":
            self._json(404, {"error": "not found"})
            return
        if not self._authorised():
            return
        self.requests.append(body)
        if self.stop and len(self.requests) == 1:
            main = threading.main_thread().ident
            assert main is not None
            signal.pthread_kill(main, signal.SIGTERM)
        if body.get("model") != self.served_name:
            self._json(404, {"error": {"message": f"The model `{body.get('model')}` does not exist.", "code": 404}})
            return
        prompt = str(body.get("prompt", ""))
        asked = max(self.answers, key=lambda question: prompt.rfind(question))
        answer = self.answers[asked] + (1 if asked in self.wrong else 0)
        self._json(200, {"id": "cmpl-1", "object": "text_completion", "model": self.served_name,
                         "choices": [{"index": 0, "text": f" Adding them gives {answer}.\n#### {answer}",
                                      "finish_reason": "stop"}],
                         "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": 8}})


class CompletionServer(LocalV1Server):
    """`with CompletionServer(answers, wrong=...) as url:` serves on 127.0.0.1 at a free port; url ends in /v1.
    `requests` collects every completion request's body. With `stop`, the first completion request sends SIGTERM to
    the process's main thread (the program under test runs there and takes it as Ctrl-C)."""

    def __init__(self, answers: dict[str, int], wrong: frozenset[str] = frozenset(),
                 served_name: str = "llama-8b", stop: bool = False) -> None:
        self.requests: list[dict] = []
        attributes = {"served_name": served_name, "answers": dict(answers), "wrong": wrong, "requests": self.requests,
                      "stop": stop}
        super().__init__(type("Handler", (_Handler,), attributes))
