"""How long the inspector's session page takes in a real browser until it shows the session:
overview, the user's waveform, the first 2 minutes of user audio and the first event rows
(docs/inspector.md, "Big sessions"). Needs Debian's chromium and chromium-driver, and selenium.

    .venv/bin/python scripts/inspect_page_time.py http://127.0.0.1:8732/#/s/SESSION [RUNS]

Prints one line per load (the first against a server that has not read the session yet includes
reading it).
"""

from __future__ import annotations

import sys
import tempfile
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

READY = (
    "return typeof S !== 'undefined' && S.ov && [...S.peaks.values()].some(p => p !== 'loading') "
    "&& document.getElementById('audio-user').readyState >= 1 && document.querySelectorAll('#events tbody tr').length > 0"
)


def main(url: str, runs: int) -> None:
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--window-size=1500,1000"):
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={tempfile.mkdtemp(prefix='chromium-profile-')}")
    driver = webdriver.Chrome(options=opts, service=Service("/usr/bin/chromedriver"))
    try:
        driver.get(url)
        for _ in range(runs):
            driver.refresh()
            start = time.perf_counter()
            while not driver.execute_script(READY):
                time.sleep(0.02)
            print(f"session page ready in {time.perf_counter() - start:.2f} s")
    finally:
        driver.quit()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3)
