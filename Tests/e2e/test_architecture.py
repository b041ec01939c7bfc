"""The folder graph of Sources/Core (issue 33, docs/architecture.md), counted with top-level
types by Tests/architecture/folder_graph.py: no framework folder names a feature's type, and
no two folders name each other (what Access and Events both are lives in the Ledger/ kernel;
the quota reads a QuotaSubject, never the snapshot). A new pair fails here."""
import importlib.util
import os
import re
import unittest

from harness.billing import REPO



def folder_graph():
    spec = importlib.util.spec_from_file_location("folder_graph", os.path.join(REPO, "Tests", "architecture", "folder_graph.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FolderGraph(unittest.TestCase):
    def test_no_two_way_pair_and_no_framework_naming_a_feature(self):
        fg = folder_graph()
        uses = fg.graph(os.path.join(REPO, "Sources", "Core"))
        self.assertGreater(len(uses), 20, "the graph covers the feature and framework folders")
        self.assertEqual(fg.two_way_pairs(uses), [],
                         {pair: (sorted(uses[pair[0]][pair[1]]), sorted(uses[pair[1]][pair[0]])) for pair in fg.two_way_pairs(uses)})
        # The kernel (Ledger/) names neither of the folders built on it.
        self.assertNotIn("Access", uses["Ledger"])
        self.assertNotIn("Events", uses["Ledger"])
        self.assertEqual(fg.frameworks_naming_features(uses), [])


class FeaturesHoldTheirDependencies(unittest.TestCase):
    """Routes and RPC methods are built with what they need of the process (in App/); the
    contexts carry only the request's or the connection's own state (issue 33, item 4)."""

    # The context protocols that may exist: the frameworks' own, the signed-in user, and the
    # two narrowed to a thread's or a connection's state (its database probe).
    ALLOWED = {"RequestContextProtocol", "DatabaseRequestContext", "AuthenticatedRequestContext", "Context",
               "RPCContextProtocol", "SystemRPCContext"}

    def sources(self):
        for folder, _, files in os.walk(os.path.join(REPO, "Sources", "Core")):
            for name in files:
                if name.endswith(".swift"):
                    path = os.path.join(folder, name)
                    with open(path) as f:
                        yield os.path.relpath(path, REPO), f.read()

    def test_no_feature_declares_a_context_protocol_of_its_own(self):
        context_protocols = {}
        for path, text in self.sources():
            for name, parents in re.findall(r"(?m)^\s*protocol (\w+)\s*:\s*([^{]*)\{", text):
                if "Context" in parents or name.endswith("Context"):
                    context_protocols[name] = path
        self.assertIn("DatabaseRequestContext", context_protocols, "the scan sees the context protocols")
        self.assertEqual(set(context_protocols) - self.ALLOWED, set(), context_protocols)

    def test_the_contexts_forward_no_process_member(self):
        for name in ("BillingRequestContext.swift", "AdminRPCContext.swift"):
            with open(os.path.join(REPO, "Sources", "Core", "App", name)) as f:
                text = f.read()
            self.assertNotIn("let services", text.replace("let services = ", ""), name)
            self.assertEqual(re.findall(r"var \w+: [^{\n]+\{ services\.", text), [], name)


if __name__ == "__main__":
    unittest.main()
