"""The ``openai`` backend: any OpenAI-compatible chat server (``vllm serve``, SGLang, llama.cpp,
``transformers serve``, or a hosted model).

Requests in a batch go out concurrently so the server can batch them. Transient failures (connection
errors, timeouts, 408, 409, 429, 5xx) are retried by the ``openai`` client itself, ``model.max_retries``
times, waiting as the server's ``Retry-After`` says or else with jittered exponential backoff; each
attempt times out after ``model.request_timeout_s``. A refusal (another 4xx) or a failure that outlives
its retries is recorded on that request's ``Completion.error``: one bad request never fails the batch.
The API key is read from the variable named by ``model.api_key_env`` and never stored.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from spade_core.llm.base import Completion, GenerationRequest, ModelError, SamplingParams, seeded
from spade_core.llm.chat_tokens import template_kwargs

MAX_CONCURRENCY = 64


class OpenAIGenerator:
    supports_token_prompts = False
    streams = True  # serves concurrent requests: the rollout engine streams episodes to it

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 3,
        check: bool = True,
        enable_thinking: bool | None = None,
    ) -> None:
        import openai

        if not base_url or not base_url.startswith(("http://", "https://")):
            raise ModelError(f"model.base_url {base_url!r} must be an http(s) URL of an OpenAI-compatible server")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.model_ref = f"openai:{model}"
        self.max_retries = max_retries
        # model.enable_thinking, as the server's chat-template variable (vLLM and SGLang read it)
        self.template_kwargs = template_kwargs(enable_thinking)
        self._openai = openai
        self.client = openai.OpenAI(
            base_url=self.base_url, api_key=api_key or "unused", timeout=timeout_s, max_retries=max_retries
        )
        if check:
            self.check()

    @classmethod
    def from_config(cls, model_cfg: Any) -> OpenAIGenerator:
        if not model_cfg.base_url:
            raise ModelError("model.backend 'openai' needs model.base_url (e.g. http://127.0.0.1:8000/v1)")
        return cls(
            model_cfg.base_url,
            model_cfg.name_or_path,
            os.environ.get(model_cfg.api_key_env),
            model_cfg.request_timeout_s,
            model_cfg.max_retries,
            enable_thinking=model_cfg.enable_thinking,
        )

    def check(self) -> None:
        """Fail at once, with one line, when the server cannot be reached (no retries here)."""
        try:
            self.client.with_options(timeout=10.0, max_retries=0).models.list()
        except self._openai.APIConnectionError:
            raise ModelError(f"cannot reach the OpenAI-compatible server at {self.base_url}") from None
        except self._openai.APIStatusError as exc:
            if exc.status_code in (401, 403):
                raise ModelError(f"server at {self.base_url} refused the API key ({exc.status_code})") from None

    def _one(self, request: GenerationRequest, params: SamplingParams) -> Completion:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": request.messages,
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
        }
        if params.stop:
            kwargs["stop"] = list(params.stop)
        if request.seed is not None:
            kwargs["seed"] = request.seed
        if params.logprobs:
            kwargs["logprobs"] = True
        extra: dict[str, Any] = {}
        if params.top_k:
            extra["top_k"] = params.top_k  # vLLM / SGLang sampling extension
        if self.template_kwargs:
            extra["chat_template_kwargs"] = self.template_kwargs
        if extra:
            kwargs["extra_body"] = extra
        if request.tools:
            kwargs["tools"] = request.tools
        try:
            response = self.client.chat.completions.create(**kwargs)  # the client retries transient failures
        except Exception as exc:  # a refusal or exhausted retries: recorded as data, never raised
            status = getattr(exc, "status_code", None)
            what = f"HTTP {status}" if status else type(exc).__name__
            return Completion(text="", finish_reason="error", error=f"{what}: {str(exc)[:300]}")
        choice = response.choices[0]
        text = choice.message.content or ""
        for call in getattr(choice.message, "tool_calls", None) or []:
            # a server that parses tool calls returns them structured: give the env the text form back
            fn = call.function
            text += f'<tool_call>{{"name": {json.dumps(fn.name)}, "arguments": {fn.arguments or "{}"}}}</tool_call>'

        logprobs = None
        if params.logprobs and choice.logprobs is not None and choice.logprobs.content:
            logprobs = [float(t.logprob) for t in choice.logprobs.content]
        usage = getattr(response, "usage", None)
        return Completion(
            text=text,
            logprobs=logprobs,
            finish_reason="length" if choice.finish_reason == "length" else "stop",
            prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        )

    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
        requests = seeded(requests, params)
        if len(requests) <= 1:
            return [self._one(r, params) for r in requests]
        with ThreadPoolExecutor(max_workers=min(len(requests), MAX_CONCURRENCY)) as pool:
            return list(pool.map(lambda r: self._one(r, params), requests))

    def close(self) -> None:
        self.client.close()
