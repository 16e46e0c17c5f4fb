"""Drive a running `infr serve` with the official OpenAI and Anthropic Python SDKs.

Usage: INFR_BASE=http://127.0.0.1:PORT INFR_API_KEY=KEY python3 sdk_clients.py
(run.sh starts the server and sets both). Prints 'N passed, N failed' and exits non-zero on
any failure.
"""

import os
import sys
import traceback

import anthropic
import openai

BASE = os.environ["INFR_BASE"]
KEY = os.environ.get("INFR_API_KEY", "none")

oa = openai.OpenAI(base_url=BASE + "/v1", api_key=KEY, max_retries=0, timeout=120)
an = anthropic.Anthropic(base_url=BASE, api_key=KEY, max_retries=0, timeout=120)
MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def test_models():
    models = oa.models.list().data
    assert len(models) == 1 and models[0].owned_by == "infr", models


def test_chat_plain_and_stream_agree():
    r = oa.chat.completions.create(model="any", messages=MESSAGES, max_tokens=10, temperature=0)
    text = r.choices[0].message.content
    assert text and r.usage.completion_tokens >= 1, r
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    stream = oa.chat.completions.create(
        model="any", messages=MESSAGES, max_tokens=10, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )
    parts, usage, finish = [], None, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            parts.append(c.delta.content or "")
            finish = c.finish_reason or finish
    assert "".join(parts) == text, (parts, text)
    assert finish == r.choices[0].finish_reason
    assert usage and usage.completion_tokens == r.usage.completion_tokens


def test_completions():
    r = oa.completions.create(model="any", prompt="The capital of France is", max_tokens=5, temperature=0)
    assert r.choices[0].text, r


def test_errors():
    try:
        oa.chat.completions.create(model="any", messages=MESSAGES, max_tokens=2, n=2)
        raise AssertionError("n=2 accepted")
    except openai.BadRequestError as e:
        assert "n" in str(e)
    bad = openai.OpenAI(base_url=BASE + "/v1", api_key="wrong-key", max_retries=0)
    if KEY != "none":
        try:
            bad.models.list()
            raise AssertionError("a wrong key was accepted")
        except openai.AuthenticationError:
            pass


def test_anthropic_plain_and_stream():
    m = an.messages.create(model="any", max_tokens=8, extra_body={"temperature": 0}, system="Be brief.",
                           messages=[{"role": "user", "content": "Say hello."}])
    assert m.content[0].type == "text" and m.content[0].text, m
    assert m.stop_reason in ("end_turn", "max_tokens"), m.stop_reason
    with an.messages.stream(model="any", max_tokens=8, extra_body={"temperature": 0}, system="Be brief.",
                            messages=[{"role": "user", "content": "Say hello."}]) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == m.content[0].text, (text, m.content[0].text)
    assert final.usage.output_tokens == m.usage.output_tokens
    n = an.messages.count_tokens(model="any", messages=[{"role": "user", "content": "Say hello."}], system="Be brief.")
    assert n.input_tokens > 0


def main():
    tests = [(k, v) for k, v in globals().items() if k.startswith("test_") and callable(v)]
    failed = 0
    for name, fn in tests:
        try:
            fn()
            print(f"ok   {name}")
        except Exception:
            failed += 1
            print(f"FAIL {name}")
            traceback.print_exc()
    print(f"{len(tests) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
