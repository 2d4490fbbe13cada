"""The README's screenshots of ``lmprep report``, taken by headless Chromium on the shipped project.

    python benchmarks/report_screenshot.py          # writes docs/report.png, docs/report-dropped.png

It copies the shipped project (the tracked ``configs/`` and ``data/raw/``, as a fresh clone has them) into a
temporary directory named ``lmprep``, runs it once (a minute or so), writes the report there and has Chromium
(Debian's package, ``apt-get install chromium``) photograph it twice: the top of the page, and the "What was
dropped" section with a duplicate open beside the document it repeats (the page opens it from the URL's
hash). It prints the page's size.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LMPREP = [sys.executable, "-m", "stages"]
SHOTS = {"report.png": ("", 1500), "report-dropped.png": ("#only=dropped&open=exact_dedup/duplicate:0", 1000)}
WIDTH = 1280


def main() -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        sys.exit("chromium is not installed (apt-get install -y chromium)")
    with tempfile.TemporaryDirectory() as temporary:
        project = Path(temporary) / "lmprep"
        listing = subprocess.run(["git", "ls-files", "-z", "configs", "data/raw"], cwd=ROOT, capture_output=True,
                                 check=True).stdout
        for name in filter(None, listing.decode().split("\0")):
            (project / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, project / name)
        environment = {**os.environ, "PYTHONPATH": str(ROOT)}
        subprocess.run([*LMPREP, "run", "--config", "configs/default.yaml"], cwd=project, check=True, env=environment)
        page = project / "report.html"
        subprocess.run([*LMPREP, "report", "--config", "configs/default.yaml", "--out", str(page)], cwd=project,
                       check=True, env=environment)
        print(f"report.html: {page.stat().st_size:,} bytes")
        for name, (fragment, height) in SHOTS.items():
            target = ROOT / "docs" / name
            subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                            "--hide-scrollbars",
                            "--no-first-run", f"--user-data-dir={temporary}/profile", "--virtual-time-budget=5000",
                            f"--window-size={WIDTH},{height}", f"--screenshot={target}", page.as_uri() + fragment],
                           check=True, capture_output=True)
            print(f"{target.relative_to(ROOT)}: {target.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
