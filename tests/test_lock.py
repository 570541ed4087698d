"""requirements-lock.txt and tools/install.py, which installs it for `make` in two pips side by side.

The lock must pin what requirements.txt pins (else make falls back to requirements.txt, slower and unlocked), and
the two pips must never share a package folder: checked against the files this venv's packages installed.
"""

from __future__ import annotations

from importlib.metadata import distributions

import pytest
from helpers import REPO

from tools import install

LOCK = (REPO / "requirements-lock.txt").read_text()
REQUIREMENTS = (REPO / "requirements.txt").read_text()


def test_the_lock_pins_what_requirements_txt_pins_for_the_platform_it_names():
    assert install.lock_platform(LOCK) == "Linux x86_64, CPython 3.11"
    assert install.why_not_locked(REQUIREMENTS, LOCK, "Linux x86_64, CPython 3.11") is None
    locked = install.pins(LOCK)
    assert locked["torch"] == "2.14.1" and locked["torchvision"] == "0.29.1" and locked["ray"] == "2.60.0"
    assert "pip" not in locked  # each venv keeps the pip it was made with


def test_elsewhere_or_with_a_changed_pin_requirements_txt_is_installed_and_says_why():
    assert "this is Windows AMD64, CPython 3.11" in install.why_not_locked(REQUIREMENTS, LOCK,
                                                                            "Windows AMD64, CPython 3.11")
    assert install.why_not_locked(REQUIREMENTS, "", "Linux x86_64, CPython 3.11") == \
        "requirements-lock.txt is missing or names no platform"
    changed = REQUIREMENTS.replace("numpy==2.4.6", "numpy==2.4.7")
    reason = install.why_not_locked(changed, LOCK, "Linux x86_64, CPython 3.11")
    assert "does not pin numpy==2.4.7" in reason and "tools/install.py --lock" in reason


@pytest.mark.skipif(install.why_not_locked(REQUIREMENTS, LOCK, install.this_platform()) is not None,
                    reason="this venv was not built from the lock (another platform): its folders say nothing of it")
def test_the_two_pips_share_no_folder_and_together_install_the_whole_lock():
    big, rest = install.split(LOCK)
    names = {line.split("==")[0] for line in big}
    assert {"torch", "triton", "nvidia-cublas", "cuda-bindings", "ray"} <= names and "torchvision" not in names
    assert sorted(big + rest) == sorted(f"{n}=={v}" for n, v in install.pins(LOCK).items())
    # what each package of this venv put down, by its first folder in site-packages (its RECORD)
    folders: dict[str, set[str]] = {}
    for dist in distributions():
        name = install.normalise(dist.metadata["Name"])
        tops = {f.parts[0] for f in dist.files or [] if len(f.parts) > 1 and not f.parts[0].startswith("..")}
        folders[name] = {t for t in tops if not t.endswith((".dist-info", ".data")) and t != "__pycache__"}
    big_folders = set().union(*(folders.get(n, set()) for n in names))
    rest_folders = set().union(*(folders.get(line.split("==")[0], set()) for line in rest))
    assert {"torch", "nvidia", "ray"} <= big_folders
    assert not big_folders & rest_folders, big_folders & rest_folders
