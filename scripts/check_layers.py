#!/usr/bin/env python3
"""The layering rules of docs/architecture.md, checked two ways:

1. includes: a file under src/<layer>/ (or tools/flashseek) may include project headers only from the layers that
   layer may depend on (ALLOWED below); test code may include anything.
2. libraries (with --graphviz FILE): the dependency graph CMake writes with --graphviz has no cycle among the
   flashseek_* libraries, and no library links one it may not depend on.

Usage: scripts/check_layers.py [--src ROOT] [--graphviz FILE.dot]   Exit status 1 on any violation, naming it.
"""
import argparse
import os
import re
import sys

# layer -> the layers it may use (its own layer is always allowed). "cli" is tools/flashseek.
ALLOWED = {
    "util": set(),
    "loader": {"util"},
    "model": {"loader", "util"},
    "backend": {"model", "loader", "util"},
    "cpu": {"backend", "model", "loader", "util"},
    "cuda": {"backend", "model", "loader", "util"},
    "backends": {"backend", "cpu", "cuda", "model", "loader", "util"},
    "tokenizer": {"util"},
    "scheduler": {"backend", "model", "util"},
    "runtime": {"scheduler", "tokenizer", "backend", "model", "loader", "util"},
    "server": {"runtime", "scheduler", "tokenizer", "backend", "model", "loader", "util"},
    # The CLI sees backends only through the backend interface and the registry: no cpu/ or cuda/ headers.
    "cli": {"backends", "server", "runtime", "scheduler", "tokenizer", "backend", "model", "loader", "util"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/[^"]+"', re.M)
SOURCE_EXT = (".h", ".hpp", ".cpp", ".cu", ".cuh")


def layer_files(root):
    for layer in ALLOWED:
        base = os.path.join(root, "tools", "flashseek") if layer == "cli" else os.path.join(root, "src", layer)
        if not os.path.isdir(base):
            continue
        for dirpath, _, files in os.walk(base):
            for f in sorted(files):
                if f.endswith(SOURCE_EXT):
                    yield layer, os.path.join(dirpath, f)


def check_includes(root):
    problems = []
    for layer, path in layer_files(root):
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        for m in INCLUDE.finditer(text):
            target = m.group(1)
            if target not in ALLOWED or target == layer:
                continue
            if target not in ALLOWED[layer]:
                line = text.count("\n", 0, m.start()) + 1
                problems.append(f"{os.path.relpath(path, root)}:{line}: layer '{layer}' includes "
                                f"\"{target}/...\" (allowed: {', '.join(sorted(ALLOWED[layer])) or 'nothing'})")
    return problems


def library_layer(name):
    if name == "flashseek":
        return "cli"
    if name.startswith("flashseek_"):
        return name[len("flashseek_"):]
    return None


def check_graphviz(path):
    """CMake's --graphviz output: nodes 'nodeN [ label = "name" ...]' and edges 'nodeA -> nodeB'."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    labels = dict(re.findall(r'"?(node\d+)"?\s*\[\s*label\s*=\s*"([^"]+)"', text))
    edges = set()
    for a, b in re.findall(r'"?(node\d+)"?\s*->\s*"?(node\d+)"?', text):
        la, lb = library_layer(labels.get(a, "")), library_layer(labels.get(b, ""))
        if la in ALLOWED and lb in ALLOWED and la != lb:
            edges.add((la, lb))
    problems = []
    if not labels:
        problems.append(f"{path}: no nodes found (not a CMake graphviz file?)")
    for a, b in sorted(edges):
        if b not in ALLOWED[a]:
            problems.append(f"library flashseek_{a} links flashseek_{b}, which layer '{a}' may not use")
        if (b, a) in edges and a < b:
            problems.append(f"libraries flashseek_{a} and flashseek_{b} depend on each other")
    # Longer cycles: depth-first search over the library graph.
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    state = {}

    def visit(node, stack):
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                problems.append("library cycle: " + " -> ".join("flashseek_" + c for c in cycle))
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return problems, len(edges)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--graphviz", help="the .dot file of `cmake --graphviz=FILE BUILD_DIR`")
    args = ap.parse_args()
    root = os.path.abspath(args.src)
    problems = check_includes(root)
    summary = "includes: checked"
    if args.graphviz:
        graph_problems, n_edges = check_graphviz(args.graphviz)
        problems += graph_problems
        summary += f"; libraries: {n_edges} edges between flashseek layers checked"
    for p in problems:
        print("check_layers: " + p)
    print(f"check_layers: {summary}, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
