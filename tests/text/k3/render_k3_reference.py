#!/usr/bin/env python3
"""Renders K3 prompts with the reference: SHARED_DIR/chat_templates/Kimi-K3.jinja (shared test data) through
tests/text/jinja/render_reference.py (the environment of transformers' apply_chat_template).

usage: render_k3_reference.py SHARED_DIR < cases.json > rendered.json
cases.json is a JSON array of template-variable objects; the output is an array of {"text": ...} or
{"error": ...}. The transcription expects what encoding_k3.py's normalize_conversation hands the renderer,
so tool-call `arguments` strings are parsed first exactly as its normalize_tool_arguments does (blank -> {},
a JSON object -> that object, unparseable -> kept as `_xtml_json_block`).
"""
import json
import os
import sys


def normalize_arguments(holder):
    args = holder.get("arguments")
    if isinstance(args, str):
        if not args.strip():
            holder["arguments"] = {}
            return
        try:
            holder["arguments"] = json.loads(args)
        except json.JSONDecodeError:
            holder["arguments"] = {}
            holder["_xtml_json_block"] = args


def main():
    shared = sys.argv[1]
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "jinja"))
    import render_reference  # noqa: E402

    template = open(os.path.join(shared, "chat_templates", "Kimi-K3.jinja"), encoding="utf-8").read()
    out = []
    for variables in json.load(sys.stdin):
        for message in variables.get("messages", []):
            for call in message.get("tool_calls") or []:
                normalize_arguments(call["function"] if isinstance(call.get("function"), dict) else call)
        try:
            out.append({"text": render_reference.render(template, variables)})
        except Exception as e:  # the template raised: report, the C++ side decides
            out.append({"error": f"{type(e).__name__}: {e}"})
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
