"""The OpenAI SDK against `infr serve` running a random-weight gpt-oss (`infr synth --shape
tiny-gpt-oss`) with gpt-oss's own chat template (`--chat-template-file`): a forced tool call
(`tool_choice` required, then named) comes back as one tool call in the SDK's types, streamed
and not. The model is random, so which tool and which arguments are its own; their shape is
what is checked.

Usage: INFR_BASE=http://127.0.0.1:PORT INFR_API_KEY=KEY python3 sdk_harmony.py (run.sh sets both).
"""

import json
import os
import sys

import openai

oa = openai.OpenAI(base_url=os.environ["INFR_BASE"] + "/v1", api_key=os.environ.get("INFR_API_KEY", "none"),
                   max_retries=0, timeout=120)
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
     "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}},
                    "required": ["city"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "noop", "description": "Nothing",
     "parameters": {"type": "object", "properties": {}, "additionalProperties": False}}},
]
MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]


def check(name, args):
    assert name in ("get_weather", "noop"), name
    a = json.loads(args)
    if name == "get_weather":
        assert isinstance(a.get("city"), str) and len(a["city"]) <= 8, a


def main():
    for choice in ["required", {"type": "function", "function": {"name": "get_weather"}}]:
        r = oa.chat.completions.create(model="any", messages=MESSAGES, tools=TOOLS, tool_choice=choice,
                                       max_tokens=96, temperature=0)
        c = r.choices[0]
        assert c.finish_reason == "tool_calls", r
        assert len(c.message.tool_calls) == 1, r
        call = c.message.tool_calls[0].function
        check(call.name, call.arguments)
        if choice != "required":
            assert call.name == "get_weather", r
        stream = oa.chat.completions.create(model="any", messages=MESSAGES, tools=TOOLS, tool_choice=choice,
                                            max_tokens=96, temperature=0, stream=True)
        name, args, finish = "", "", None
        for chunk in stream:
            if not chunk.choices:
                continue
            d = chunk.choices[0].delta
            for tc in d.tool_calls or []:
                name += tc.function.name or ""
                args += tc.function.arguments or ""
            finish = chunk.choices[0].finish_reason or finish
        assert finish == "tool_calls" and (name, args) == (call.name, call.arguments), (name, args, finish, call)
    print("harmony sdk: 2 passed")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001 - report and fail
        print(f"harmony sdk: FAIL {e!r}")
        sys.exit(1)
