"""Debian's chromium, headless, for the report page's tests (installed by `bash scripts/install.sh test`)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def chromium(page: Path, *args: str) -> str:
    """Open `page` from disk (file://) with `args`; its stdout. Fails, never skips, without chromium."""
    binary = shutil.which("chromium")
    assert binary is not None, "chromium is not installed; install it with: bash scripts/install.sh test"
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run(
            [binary, *FLAGS, f"--user-data-dir={profile}", *args, page.resolve().as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 0, f"chromium failed ({proc.returncode}): {proc.stderr[-2000:]}"
    return proc.stdout


def dump_dom(page: Path) -> str:
    """The page's DOM after its scripts ran and its media loaded (10 s of virtual time)."""
    return chromium(page, "--virtual-time-budget=10000", "--dump-dom")


def screenshot(page: Path, png: Path, width: int = 1200, height: int = 1000) -> Path:
    chromium(page, f"--window-size={width},{height}", f"--screenshot={png}", "--virtual-time-budget=5000")
    assert png.is_file(), f"chromium wrote no screenshot to {png}"
    return png
