"""The suite as run on the backend chosen by the CLI, the pytest plugin or the environment (``test_selected``)."""
