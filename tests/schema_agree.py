#!/usr/bin/python3
"""Check that schema/asp.schema.json and libasp's parser agree.

Every config under examples/ (*.asp.json) and tests/configs/valid/ must be
accepted by both; every one under tests/configs/invalid/ must be rejected by
both. JSON Schema cannot express every rule the parser enforces (duplicate
keys: Python's json silently keeps the last; an escaped NUL inside extension
keys or values; unpaired surrogate escapes), so those configs live in
tests/configs/invalid-parser-only/: the parser must reject them, and the
schema must accept them, which proves they belong there and not in invalid/.

The "schema" side rejects a file that is not strict JSON, as the parser does:
invalid UTF-8, NaN/Infinity, or anything Python's json refuses.

Run from anywhere after `make lib`:  /usr/bin/python3 tests/schema_agree.py
It needs Debian's python3-jsonschema, hence /usr/bin/python3. The C side is
tests/tools/config_lint.c, built here into build/tests/config-lint.
"""
import glob
import json
import os
import subprocess
import sys

import jsonschema

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINT_SRC = os.path.join(ROOT, "tests", "tools", "config_lint.c")
LINT = os.path.join(ROOT, "build", "tests", "config-lint")
LIBASP = os.path.join(ROOT, "build", "libasp.a")


def build_lint():
    """Build the C checker when it is missing or older than its inputs."""
    if not os.path.exists(LIBASP):
        sys.exit("schema_agree: %s is missing; run `make lib` first" % LIBASP)
    inputs = [LINT_SRC, LIBASP, os.path.join(ROOT, "include", "asp.h")]
    if os.path.exists(LINT) and all(
            os.path.getmtime(LINT) >= os.path.getmtime(f) for f in inputs):
        return
    os.makedirs(os.path.dirname(LINT), exist_ok=True)
    libs = subprocess.run(["pkg-config", "--libs", "libssh2", "libcjson", "openssl"],
                          check=True, capture_output=True, text=True).stdout.split()
    subprocess.run(["cc", "-std=c11", "-I" + os.path.join(ROOT, "include"), LINT_SRC,
                    LIBASP] + libs + ["-lpthread", "-o", LINT], check=True)


def reject_constant(name):
    raise ValueError("%s is not JSON" % name)


def schema_verdict(validator, path):
    """(accepted, reason) according to strict JSON plus the schema."""
    try:
        with open(path, "rb") as f:
            # A UTF-8 byte order mark is allowed, as the parser allows it.
            text = f.read().decode("utf-8-sig")
        doc = json.loads(text, parse_constant=reject_constant)
    except (UnicodeDecodeError, ValueError) as e:
        return False, "not JSON: %s" % e
    error = jsonschema.exceptions.best_match(validator.iter_errors(doc))
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path) or "top level"
        return False, "%s: %s" % (where, error.message)
    return True, "valid"


def parser_verdict(path):
    """(accepted, message) according to libasp."""
    r = subprocess.run([LINT, path], capture_output=True, text=True, errors="replace")
    if r.returncode not in (0, 1):
        sys.exit("schema_agree: %s crashed on %s (status %d): %s"
                 % (LINT, path, r.returncode, r.stderr.strip()))
    return r.returncode == 0, r.stdout.strip()


def corpus():
    """(path, expect_valid, checked_by_schema) for every config to check."""
    def files(pattern):
        found = sorted(glob.glob(os.path.join(ROOT, pattern)))
        if not found:
            sys.exit("schema_agree: no files match %s" % pattern)
        return found

    for p in files("examples/*.asp.json") + files("tests/configs/valid/*.json"):
        yield p, True, True
    for p in files("tests/configs/invalid/*.json"):
        yield p, False, True
    for p in files("tests/configs/invalid-parser-only/*.json"):
        yield p, False, False


def main():
    build_lint()
    with open(os.path.join(ROOT, "schema", "asp.schema.json"), encoding="utf-8") as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)

    passed = failed = 0
    for path, expect_valid, by_schema in corpus():
        name = os.path.relpath(path, ROOT)
        s_ok, s_why = schema_verdict(validator, path)
        p_ok, p_why = parser_verdict(path)
        problems = []
        if p_ok != expect_valid:
            problems.append("parser %s it" % ("accepted" if p_ok else "rejected"))
        if by_schema:
            if s_ok != expect_valid:
                problems.append("schema %s it" % ("accepted" if s_ok else "rejected"))
        elif not s_ok:
            problems.append("schema rejects it too: move it to tests/configs/invalid/")
        if problems:
            failed += 1
            print("FAIL %s: %s (schema: %s; parser: %s)"
                  % (name, "; ".join(problems), s_why, p_why))
        else:
            passed += 1
            print("ok   %s: %s (schema: %s; parser: %s)"
                  % (name, "valid" if expect_valid else "invalid",
                     s_why if by_schema else "not checked, " + s_why, p_why))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
