"""Drive a running `infr serve` with the official OpenAI and Anthropic Python SDKs.

Usage: INFR_BASE=http://127.0.0.1:PORT INFR_API_KEY=KEY python3 sdk_clients.py
(run.sh starts the server and sets both). Prints 'N passed, N failed' and exits non-zero on
any failure.
"""

import json
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


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}}
TOOL_HISTORY = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature_c": 21}'},
]


def check_tool_calls(calls):
    import json
    for c in calls or []:
        assert c.id and c.type == "function" and c.function.name, c
        assert isinstance(json.loads(c.function.arguments), dict), c


def test_openai_tools():
    # A tiny model may or may not call the tool: the response must be well-formed either way.
    r = oa.chat.completions.create(model="any", messages=TOOL_HISTORY, tools=[WEATHER_TOOL], max_tokens=16,
                                   temperature=0)
    choice = r.choices[0]
    assert choice.finish_reason in ("stop", "length", "tool_calls"), choice
    check_tool_calls(choice.message.tool_calls)
    assert (choice.finish_reason == "tool_calls") == bool(choice.message.tool_calls), choice
    stream = oa.chat.completions.create(model="any", messages=TOOL_HISTORY, tools=[WEATHER_TOOL], max_tokens=16,
                                        temperature=0, stream=True)
    finish = None
    for chunk in stream:
        for c in chunk.choices:
            finish = c.finish_reason or finish
    assert finish == choice.finish_reason, (finish, choice.finish_reason)
    r = oa.chat.completions.create(model="any", messages=MESSAGES, tools=[WEATHER_TOOL], tool_choice="none",
                                   max_tokens=4, temperature=0)
    assert r.choices[0].message.tool_calls is None
    # `required` is enforced with a grammar: a call comes back even for small talk.
    r = oa.chat.completions.create(model="any", messages=[{"role": "user", "content": "Hello!"}], tools=[WEATHER_TOOL],
                                   tool_choice="required", max_tokens=80, temperature=0)
    assert r.choices[0].finish_reason == "tool_calls", r
    assert r.choices[0].message.tool_calls[0].function.name == "get_weather", r
    check_tool_calls(r.choices[0].message.tool_calls)


def test_openai_response_format():
    # `response_format` json_schema is enforced with a grammar: the reply is JSON of the schema.
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    r = oa.chat.completions.create(
        model="any", messages=[{"role": "user", "content": "Describe a person called Ana, aged 31, as JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": True}},
        max_tokens=64, temperature=0)
    assert r.choices[0].finish_reason == "stop", r
    v = json.loads(r.choices[0].message.content)
    assert isinstance(v["name"], str) and isinstance(v["age"], int), v


def test_anthropic_tools():
    tools = [{"name": "get_weather", "description": "Current weather of a city",
              "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    messages = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                           "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "21 C"}]},
    ]
    m = an.messages.create(model="any", max_tokens=16, tools=tools, messages=messages, extra_body={"temperature": 0})
    assert m.stop_reason in ("end_turn", "max_tokens", "tool_use"), m.stop_reason
    assert all(b.type in ("text", "tool_use") for b in m.content), m.content
    with an.messages.stream(model="any", max_tokens=16, tools=tools, messages=messages,
                            extra_body={"temperature": 0}) as s:
        final = s.get_final_message()
    assert final.stop_reason == m.stop_reason, (final.stop_reason, m.stop_reason)
    assert [b.type for b in final.content] == [b.type for b in m.content], (final.content, m.content)


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
