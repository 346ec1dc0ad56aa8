#!/usr/bin/env python3
"""clang-tidy (.clang-tidy) on the sources a change touches.

    python3 scripts/tidy.py BUILD_DIR            # check the files changed since the record
    python3 scripts/tidy.py BUILD_DIR --all      # check every source
    python3 scripts/tidy.py BUILD_DIR --record   # check what changed, then record the tree

The whole tree takes longer on CI's two cores than the rest of the suite, so CI checks only
the sources whose key is not in .ci/tidy-clean: a source's key is a hash of its text, of the
project headers it includes and of .clang-tidy, so a changed header re-checks its includers.
`--record` adds the key of each source as it checks clean (and drops keys no source has); a change that forgets it is
checked again next time (slower, never skipped). BUILD_DIR needs compile_commands.json (the dev
preset writes it; its unity files stand for their sources, compile_db).
"""
import hashlib
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORD = os.path.join(ROOT, ".ci", "tidy-clean")


def sources():
    out = []
    for base, _, files in os.walk(os.path.join(ROOT, "src")):
        out += [os.path.relpath(os.path.join(base, f), ROOT) for f in files if f.endswith(".cpp")]
    return sorted(out)


def header_path(name, src):
    for cand in (os.path.join("include", name), os.path.join("src", name),
                 os.path.join(os.path.dirname(src), name)):
        if os.path.isfile(os.path.join(ROOT, cand)):
            return cand
    return None


def key(src, config):
    """The hash of the source, the project headers it reaches and the tidy configuration."""
    seen, todo, h = set(), [src], hashlib.sha1(config)
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        text = open(os.path.join(ROOT, f), "rb").read()
        h.update(f.encode() + b"\0" + text)
        for inc in re.findall(rb'#include [<"]([\w/.]+)[>"]', text):
            p = header_path(inc.decode(), f)
            if p:
                todo.append(p)
    return h.hexdigest()


def compile_db(build):
    """A directory whose compile_commands.json has an entry for every source. The dev preset
    compiles the libraries as unity files, so BUILD_DIR's lists those; each source of a unity
    target gets its target's command (the flags are the same for every source of a target)."""
    entries = json.load(open(os.path.join(build, "compile_commands.json")))
    listed = {os.path.relpath(e["file"], ROOT) for e in entries}
    missing = [s for s in sources() if s not in listed]
    if not missing:
        return build
    unity = {}
    for e in entries:
        m = re.search(r"CMakeFiles/([^/]+)\.dir/Unity/unity_\d+_cxx\.cxx$", e["file"])
        if m:
            unity.setdefault(m.group(1), e)
    out = list(entries)
    for src in missing:
        e = unity.get("memest_cli" if src.startswith("src/cli/") else "memest_core")
        if e is None:
            sys.exit(f"tidy: {src}: no compile command in {build}/compile_commands.json")
        path = os.path.join(ROOT, src)
        # GCC's unity-only -Wno-subobject-linkage (cmake/Warnings.cmake) is unknown to clang.
        command = e["command"].replace(e["file"], path).replace(" -Wno-subobject-linkage", "")
        out.append({"directory": e["directory"], "file": path, "command": command})
    db = os.path.join(build, "tidy-db")
    os.makedirs(db, exist_ok=True)
    with open(os.path.join(db, "compile_commands.json"), "w") as f:
        json.dump(out, f)
    return db


def tidy(build, src):
    p = subprocess.run(["clang-tidy", "-p", build, "--quiet", os.path.join(ROOT, src)],
                       capture_output=True, text=True)
    return src, p.returncode, p.stdout


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    build, mode = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "")
    config = open(os.path.join(ROOT, ".clang-tidy"), "rb").read()
    keys = {s: key(s, config) for s in sources()}
    clean = set(open(RECORD).read().split()) if os.path.exists(RECORD) else set()
    stale = [s for s in keys if mode == "--all" or keys[s] not in clean]
    print(f"tidy: {len(stale)} of {len(keys)} sources changed since the record", flush=True)
    if stale:
        build = compile_db(build)
    failed, passed = [], []
    with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        for src, rc, out in pool.map(lambda s: tidy(build, s), stale):
            print(f"tidy: {src}: {'ok' if rc == 0 else 'FAILED'}", flush=True)
            (passed if rc == 0 else failed).append(src)
            if rc != 0:
                print(out)
            if mode == "--record":
                record(keys, clean, passed)
    if failed:
        print(f"tidy: {len(failed)} sources have findings: {', '.join(failed)}")
        sys.exit(1)


def record(keys, clean, passed):
    """Keep the keys still current and clean, so an interrupted or failing run keeps its work."""
    kept = {k for k in keys.values() if k in clean} | {keys[s] for s in passed}
    with open(RECORD, "w") as f:
        f.write("# clang-tidy was clean on these keys (scripts/tidy.py --record)\n")
        f.write("\n".join(sorted(kept)) + "\n")

if __name__ == "__main__":
    main()
