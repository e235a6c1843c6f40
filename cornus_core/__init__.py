"""cornus_core: the headless core shared by cornus-tui, cornus-server and the caretaker.

Policy, spec models, wire protocol, 9P, proxies and credentials live here. This package never
imports a UI library (textual, rich); tests/test_import_hygiene.py keeps it so.
"""

__version__ = "0.1.0"
