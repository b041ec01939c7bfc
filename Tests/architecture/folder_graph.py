#!/usr/bin/env python3
"""Folder dependencies of Sources/Core, counted with top-level types (docs/architecture.md):
folder A *names* folder B when a Swift file under A mentions, outside comments and string
literals, a type (struct, enum, class, protocol, actor, typealias) declared at the top level
of a file under B. Prints the two-way pairs and every framework folder that names a feature
folder's type. `python3 Tests/architecture/folder_graph.py [Sources/Core]`."""
import collections
import os
import re
import sys

FRAMEWORKS = {"HTTP", "RPC", "FastCGI", "Process", "Database", "HTTPClient", "Auth", "Metrics", "JSON", "Crypto",
              "Config", "Logging", "Support"}
DECLARATION = re.compile(r"^(?:(?:public|internal|fileprivate|private|final|indirect)\s+)*"
                         r"(?:struct|enum|class|protocol|actor|typealias)\s+([A-Z][A-Za-z0-9_]*)", re.M)
WORD = re.compile(r"\b([A-Z][A-Za-z0-9_]*)\b")


def graph(root):
    """{folder: {other folder: {type names}}}: what each folder names of the others."""
    declared, files = {}, []
    for directory, _, names in os.walk(root):
        for name in sorted(names):
            if name.endswith(".swift"):
                path = os.path.join(directory, name)
                folder = os.path.relpath(path, root).split(os.sep)[0]
                with open(path) as f:
                    text = f.read()
                files.append((folder, text))
                for m in DECLARATION.finditer(text):
                    declared.setdefault(m.group(1), folder)
    uses = collections.defaultdict(lambda: collections.defaultdict(set))
    for folder, text in files:
        code = re.sub(r'"""[\s\S]*?"""', '""', text)
        code = re.sub(r"//.*", "", code)
        code = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', code)
        for word in set(WORD.findall(code)):
            owner = declared.get(word)
            if owner and owner != folder:
                uses[folder][owner].add(word)
    return uses


def two_way_pairs(uses):
    return sorted((a, b) for a in uses for b in uses[a] if a < b and a in uses.get(b, {}))


def frameworks_naming_features(uses):
    return sorted((a, b) for a in uses if a in FRAMEWORKS for b in uses[a] if b not in FRAMEWORKS)


if __name__ == "__main__":
    uses = graph(sys.argv[1] if len(sys.argv) > 1 else "Sources/Core")
    for a, b in two_way_pairs(uses):
        print(f"{a} <-> {b}: {a} names {', '.join(sorted(uses[a][b]))}; {b} names {', '.join(sorted(uses[b][a]))}")
    for a, b in frameworks_naming_features(uses):
        print(f"framework {a} names {b}: {', '.join(sorted(uses[a][b]))}")
    print(f"{len(two_way_pairs(uses))} two-way pairs, {len(frameworks_naming_features(uses))} framework folders naming a feature")
