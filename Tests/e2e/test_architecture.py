"""The folder graph of Sources/Core (issue 33, docs/architecture.md), counted with top-level
types by Tests/architecture/folder_graph.py: no framework folder names a feature's type, and
no two folders name each other (what Access and Events both are lives in the Ledger/ kernel;
the quota reads a QuotaSubject, never the snapshot). A new pair fails here."""
import importlib.util
import os
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


if __name__ == "__main__":
    unittest.main()
