"""The conformance tests, one module per category; ``selected.test_selected`` runs them on the selected backend."""
