#!/usr/bin/env python3
"""Reference chat-template renderer, the oracle of rill's Jinja and chat-template tests: renders a template
the way Hugging Face transformers' apply_chat_template does (jinja2 immutable sandbox, trim_blocks and
lstrip_blocks on, loop controls, a json.dumps-based `tojson` that accepts ensure_ascii/indent/separators/
sort_keys, raise_exception, strftime_now). Uses only Python's jinja2 (Debian: python3-jinja2, which
scripts/setup.sh installs).

usage: render_reference.py TEMPLATE.jinja < request.json > rendered.txt
request.json is an object whose keys become template variables: messages, tools, add_generation_prompt,
bos_token, eos_token, thinking, ... Exit status 2 and the message on stderr when the template raises.
"""
import collections.abc
import datetime
import json
import sys

try:
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError as e:
    sys.exit(f"render_reference.py: {sys.executable} cannot import jinja2 ({e}); on Debian: apt-get install "
             "python3-jinja2 (scripts/setup.sh does)")


class TemplateError(Exception):
    pass


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.datetime.now().strftime(fmt)


class Sandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox of current jinja2 whatever 3.1.x is installed: 3.1.5 made list.pop and
    list.clear unsafe (they were missing from its known mutable sequence methods); Debian 12 ships 3.1.2."""

    def is_safe_attribute(self, obj, attr, value):
        if isinstance(obj, collections.abc.MutableSequence) and attr in ("pop", "clear"):
            return False
        return super().is_safe_attribute(obj, attr, value)


def make_env():
    env = Sandbox(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(template_text, variables):
    return make_env().from_string(template_text).render(**variables)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    variables = json.load(sys.stdin)
    try:
        sys.stdout.write(render(open(sys.argv[1], encoding="utf-8").read(), variables))
    except (TemplateError, jinja2.TemplateError) as e:
        print(f"template error: {e}", file=sys.stderr)
        sys.exit(2)
