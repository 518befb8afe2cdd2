"""The project's scripts/ loaded as modules for the tests that call their functions (scripts/ is not a package)."""

import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def load(name: str) -> ModuleType:
    """scripts/<name>.py (``name`` may hold a folder: "gpu/detection_power"), executed afresh as a module of its
    file's name."""
    spec = importlib.util.spec_from_file_location(Path(name).name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
