#!/usr/bin/env python3
"""Batch front end to render_reference.py (beside this file) for rill's Jinja tests.

usage: jinja_reference.py < cases.jsonl > results.jsonl
Each input line is {"template": TEXT} or {"template_file": PATH}, plus "variables": {...}. Each output
line is {"ok": true, "output": TEXT} or {"ok": false, "kind": "raised" | "template_error" | "exception",
"type": NAME, "message": TEXT} (+ "line" for syntax errors). "raised" is raise_exception() (render_reference.py exits 2 with it, as it
does for "template_error"); "exception" is any other Python error (the script would exit 1).
Rendering uses render_reference.make_env(), i.e. exactly the reference environment; each distinct
template text is compiled once (render_reference.render would recompile it for every case).
"""
import json
import sys

import render_reference  # beside this script (its directory is on sys.path); first: it explains a missing jinja2
import jinja2


_compiled = {}


def compile_template(source):
    if source not in _compiled:
        _compiled[source] = render_reference.make_env().from_string(source)
    return _compiled[source]


def render(case):
    if "template" in case:
        source = case["template"]
    else:
        with open(case["template_file"], encoding="utf-8") as f:
            source = f.read()
    try:
        return {"ok": True, "output": compile_template(source).render(**case["variables"])}
    except render_reference.TemplateError as e:
        return {"ok": False, "kind": "raised", "type": type(e).__name__, "message": str(e)}
    except jinja2.TemplateSyntaxError as e:
        return {"ok": False, "kind": "template_error", "type": type(e).__name__, "message": e.message or "",
                "line": e.lineno}
    except jinja2.TemplateError as e:
        return {"ok": False, "kind": "template_error", "type": type(e).__name__, "message": str(e)}
    except Exception as e:  # noqa: BLE001 - any Python error is a failed render
        return {"ok": False, "kind": "exception", "type": type(e).__name__, "message": str(e)}


for line in sys.stdin:
    if line.strip():
        print(json.dumps(render(json.loads(line))), flush=True)
