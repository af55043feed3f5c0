"""The conformance tests, one module per category; ``test_selected`` runs them on the selected backend."""
