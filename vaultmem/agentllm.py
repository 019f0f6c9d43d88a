"""The chat-completions call the agent-memory tiers make (core condensing, session notes, recipes).

One method, ``ask(system, user) -> reply text``, raising ``SummariserError`` for any trouble (timeout,
HTTP error, malformed reply). The HTTP exchange is ``llm.ChatClient``'s (proxy bypass for a local
server, 1 MiB cap, timeouts, the shared concurrency semaphore), so every LLM client of vaultmem behaves
alike.
Callers validate what the model says and fall back to their offline rules; this module never does.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from vaultmem.errors import SummariserError
from vaultmem.llm import ChatClient, without_thinking

__all__ = ["ChatModel", "reply_object", "without_thinking"]


def reply_object(reply: str) -> dict[str, Any]:
    """The JSON object a reply holds (from its first ``{`` to its last ``}``, thinking left out), or
    SummariserError saying why the reply is junk."""
    text = without_thinking(reply)
    start, end = text.find("{"), text.rfind("}")
    if start == -1 or end < start:
        raise SummariserError("junk reply: no JSON object")
    try:
        data = json.loads(text[start : end + 1])
    except (ValueError, RecursionError) as exc:
        raise SummariserError("junk reply: not JSON") from exc
    if not isinstance(data, dict):
        raise SummariserError("junk reply: not a JSON object")
    return data


class ChatModel:
    """A configured OpenAI-compatible endpoint. Thread-safe: it holds only configuration."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        semaphore: threading.Semaphore | None = None,
    ) -> None:
        self.model = model
        self.name = f"llm:{model}"
        # Raises SummariserError for a base URL that is not http(s): a configuration error.
        self._client = ChatClient(base_url, model, api_key=api_key, timeout_s=timeout_s, semaphore=semaphore)

    def ask(self, system: str, user: str, *, max_tokens: int = 1024) -> str:
        body = {
            "model": self.model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "temperature": 0.2,
            "max_tokens": max_tokens,
        }
        return self._client.complete(json.dumps(body, ensure_ascii=False).encode("utf-8"))
