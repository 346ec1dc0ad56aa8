#!/usr/bin/env python3
"""The house rules of src/ that a compiler does not check (docs/design.md, "House rules").

    python3 scripts/check_sources.py [ROOT]      # exit 1 and one line per breach

1. No function longer than 60 lines, data tables excepted: a function whose body is one table
   says so with a `// data table` comment on the line above it.
2. No include cycle among the modules: a module is a header and its source of the same name
   (include/memest/x.hpp or src/<stage>/x.hpp with src/<stage>/x.cpp), and module a depends on
   module b when a file of a includes b's header.
   A file is a part of another module when PARTS says so (its own header serves only that
   module's implementation: the model's family rows, the optimizer's traits table).
3. A test beside each module that has logic: tests/<module>_test.cpp, unless the module is in
   UNTESTED below with the reason it needs none of its own.
"""
import os
import re
import sys

MAX_LINES = 60
# Files that are parts of another module: their header serves only that module's implementation
# (docs/design.md's module map names them with it).
PARTS = {
    "families": "model",           # the model families' rows (src/model/families.cpp)
    "optimizer_traits": "optimizer",  # the optimizers' traits table, defined in optimizer.cpp
    "hf_families": "hf_config",    # the config.json reader of each model_type
    "model_lookup": "hf_config",   # Hub ids and the local Hugging Face cache
    "report_formats": "report",    # the chart and Markdown
    "report_search": "report",     # fit, sweep, compare and layouts
    "report_svg": "report",        # the --plot pictures
    "svg_parts": "report",         # ... their page, axis and legend, shared with serve's
    "walk_state": "walk",          # the walk's concerns, one file each (src/step/walk.hpp)
    "walk_forward": "walk",
    "walk_backward": "walk",
    "walk_fsdp": "walk",
    "walk_in_backward": "walk",
    "plan": "peak",                # peak.hpp's PeakPlan and estimate_step
    "step_names": "step",          # the names of step.hpp's enums
    "monomial": "shape",           # a shape's one monomial, inline for sizing a tensor
    "layout_search": "search",     # fit --gpus
    "option_rules": "run_options",  # the rules between options
    "model_loading": "config",     # --model-loading and its spellings, resolved
    "serve_render": "serve_command",  # memest serve's table and JSON
    "serve_svg": "serve_command",  # memest serve --plot's picture
    "serve_gguf": "serve_llama_cpp",  # GGUF weights: llama.cpp's per-tensor types
    "from_formats": "from",        # memest --from: the frameworks' readings, declared
    "from_tree": "from",           # memest --from: the flat form, and the argument-list reader
    "from_yaml": "from",           # ... YAML read with yaml-cpp
    "from_toml": "from",           # ... TOML read with toml++
    "from_json": "from",           # ... JSON read with json_access
    "from_hf": "from",             # ... DeepSpeed, TrainingArguments and axolotl
    "from_map": "from",            # ... keys to run options, each key accounted for
    "from_torchtune": "from",      # ... each framework's keys
    "from_litgpt": "from",
    "from_torchtitan": "from",
    "from_megatron": "from",
}
# Every file of src/step/rules/ is a part of the module "rules" (rules.hpp).
RULES_DIR = os.path.join("src", "step", "rules")
# Modules checked through another module's test, each with where and why.
UNTESTED = {
    "serve_bnb": "bitsandbytes' bytes of one weight: tests/serve_vllm_test.cpp (vLLM's loader) "
                 "and tests/serve_hf_test.cpp (transformers')",
    "main": "src/cli/main.cpp is one line: cli::run (tests/cli_test.cpp)",
    "gguf_header": "the GGUF header reader: tests/serve_gguf_header_test.cpp and fuzz_gguf",
    "gguf_model": "memest serve --gguf's model and weights: tests/serve_gguf_header_test.cpp",
    "error": "the Error type and its context helper, exercised by every bad-input test",
    "json_access": "the JSON reader of both loaders: tests/config_test.cpp and hf_config_test.cpp",
    "fsdp_init": "FSDP1's constructor replayed: tests/allocator_replay_test.cpp "
                 "(--fsdp-sync-module-states builds FSDP1's units from the host)",
    "nf4_init": "torchao's quantisation replayed: tests/allocator_replay_test.cpp (--qlora-init "
                "replays torchao's NF4 quantisation as the model is built)",
    "layout": "the parallel split rules: tests/parallel_test.cpp",
    "run_config": "run config files: tests/config_test.cpp (the bad-config corpus), "
                  "schema_test.cpp and the round trip of property_test.cpp",
    "step": "the moments' order and names: tests/walk_test.cpp",
    "stack_presets": "the stacks' defaults as data: tests/stacks_test.cpp",
    "run_spec": "the run enums' name tables: tests/config_test.cpp parses each",
    "precision": "tests/precision_test.cpp",
}


def strip_code(text):
    """The text with comments, strings and character literals blanked (lines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) + len(m.group(1)) + 2
            out.append('R"' + re.sub(r"[^\n]", " ", text[i + 2:end - 1]) + '"')
            i = end
        elif c == '"' or (c == "'" and not (i > 0 and text[i - 1].isalnum())):  # 1'000 is a number
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (j - i - 1) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


SIGNATURE = re.compile(r"^\s*(?!(?:if|for|while|switch|return|else|do|case|namespace|struct|"
                       r"class|enum|union|using|typedef|template)\b)[\w:<>,~*&\[\] ]+\([^;{}]*\)"
                       r"[\w\s:&<>,()=*\->]*\{\s*$")


def long_functions(path, text):
    """(line, length, name) of each function over MAX_LINES: a `{` that ends a signature at
    namespace or class level, to its matching `}`."""
    code = strip_code(text).split("\n")
    raw = text.split("\n")
    breaches, depth_stack, i = [], [], 0
    # Track brace depth; record function starts whose enclosing braces are namespaces/classes.
    scopes = []  # kind of each open brace: 'ns', 'class', 'fn', 'block'
    starts = {}
    pending = ""
    for i, line in enumerate(code):
        stripped = line.strip()
        for ch_index, ch in enumerate(line):
            if ch == "{":
                head = (pending + " " + line[:ch_index]).strip()
                inside_fn = any(k == "fn" for k in scopes)
                if inside_fn:
                    kind = "block"
                elif re.search(r"\b(namespace|extern \"C\")\b[^;]*$", head) and "(" not in head:
                    kind = "ns"
                elif re.search(r"\b(struct|class|union|enum)\b[^;()]*$", head):
                    kind = "class"
                elif re.search(r"\)\s*(const)?\s*(noexcept)?\s*(override)?\s*(->[^{]*)?$",
                               head) or re.search(r"\)\s*:\s*.*$", head):
                    kind = "fn"
                else:
                    kind = "block"
                scopes.append(kind)
                if kind == "fn":
                    starts[len(scopes)] = (i, head)
                pending = ""
            elif ch == "}":
                if scopes:
                    kind = scopes.pop()
                    if kind == "fn":
                        first, head = starts.pop(len(scopes) + 1)
                        sig = first
                        while sig > 0 and code[sig - 1].strip() and not re.search(
                                r"[;{}]\s*$", code[sig - 1]) and code[sig - 1].strip() != "":
                            sig -= 1
                        length = i - sig + 1
                        above = raw[sig - 1] if sig > 0 else ""
                        if length > MAX_LINES and "data table" not in above:
                            name = re.findall(r"([~\w:]+)\s*\(", head)
                            breaches.append((sig + 1, length, name[0] if name else head[:40]))
                pending = ""
        if not scopes or scopes[-1] != "fn":
            pending = (pending + " " + stripped) if stripped and not re.search(
                r"[;{}]\s*$", stripped) else ""
    return breaches


def modules(root):
    """module name -> list of its files (relative paths)."""
    mods = {}
    for base, _, files in os.walk(os.path.join(root, "src")):
        for f in files:
            if f.endswith((".cpp", ".hpp")):
                stem = f.rsplit(".", 1)[0]
                if os.path.relpath(base, root) == RULES_DIR:
                    stem = "rules"
                mods.setdefault(PARTS.get(stem, stem), []).append(
                    os.path.relpath(os.path.join(base, f), root))
    for f in os.listdir(os.path.join(root, "include/memest")):
        mods.setdefault(f.rsplit(".", 1)[0], []).append(os.path.join("include/memest", f))
    return mods


def include_cycles(root, mods):
    header_owner = {}
    for name, files in mods.items():
        for f in files:
            if f.endswith(".hpp"):
                header_owner[f.split("include/")[-1].split("src/")[-1]] = name
    graph = {name: set() for name in mods}
    for name, files in mods.items():
        for f in files:
            for inc in re.findall(r'#include [<"]([\w/.]+)[>"]', open(os.path.join(root, f)).read()):
                owner = header_owner.get(inc)
                if owner and owner != name:
                    graph[name].add(owner)
    # Tarjan's strongly connected components.
    index, low, stack, on, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))
    problems = []
    mods = modules(root)
    for files in mods.values():
        for f in files:
            if not f.startswith("src/"):
                continue
            for line, length, name in long_functions(f, open(os.path.join(root, f)).read()):
                problems.append(f"{f}:{line}: {name} is {length} lines (at most {MAX_LINES}; "
                                "a data table says so with // data table above it)")
    for comp in include_cycles(root, mods):
        problems.append(f"include cycle among the modules {', '.join(comp)}")
    tests = set(f[:-len("_test.cpp")] for f in os.listdir(os.path.join(root, "tests"))
                if f.endswith("_test.cpp"))
    for name, files in sorted(mods.items()):
        has_logic = any(f.startswith("src/") and f.endswith(".cpp") for f in files)
        if has_logic and name not in tests and name not in UNTESTED:
            problems.append(f"{[f for f in files if f.endswith('.cpp')][0]}: no tests/{name}_test.cpp "
                            "(or a line in UNTESTED of scripts/check_sources.py saying which test covers it)")
    for name in sorted(UNTESTED):
        if name not in mods:
            problems.append(f"scripts/check_sources.py: UNTESTED names {name}, which is no module")
    print("\n".join(problems) if problems else "src/: every function within "
          f"{MAX_LINES} lines, no include cycle, a test beside each module")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
