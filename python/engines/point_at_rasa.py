#!/usr/bin/env python3
"""Prints an engine's connector test with its connectors built as ``RasaConnector``s.

    python/engines/point_at_rasa.py TEST_FILE > patched_test.py

LMCache's ``test_native_connector_l2_adapter.py`` builds the connector its adapter wraps as
``MockNativeConnector()`` (an in-memory mock of the native_plugin contract) in its fixtures
and lifecycle tests; each of those is replaced by ``rasa_connector()`` (conftest.py: a
connector on a real gateway). Subclasses of the mock that only record what the adapter
submits are left as they are. Fails if the file no longer has what it replaces (a new
LMCache version: look again)."""

import re
import sys

text = open(sys.argv[1]).read()
pattern = re.compile(r"(\bmock_client = )MockNativeConnector\(\)")
patched, n = pattern.subn(r"\1rasa_connector()", text)
if n < 3:
    sys.exit(f"point_at_rasa: {sys.argv[1]} builds MockNativeConnector() {n} times; expected at least 3")
anchor = "# Third Party\n"
if anchor not in patched:
    sys.exit(f"point_at_rasa: no '# Third Party' imports section in {sys.argv[1]}")
patched = patched.replace(anchor, "from conftest import rasa_connector  # Rasa, not the mock\n" + anchor, 1)
sys.stdout.write(patched)
