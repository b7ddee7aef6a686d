"""The inspector in a real headless Chromium (Debian's ``chromium`` + ``chromium-driver``, driven
by selenium), on the log of a real spoken turn the user barges in on: served by ``duplex-es
inspect``, and exported by ``duplex-es inspect SESSION --out`` and opened from disk.

Each run saves a screenshot under the test's tmp directory; with
``DUPLEX_ES_UPDATE_SCREENSHOT=1`` the served page's one also replaces docs/img/inspector.png
(the README's).
"""

from __future__ import annotations

import base64
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from duplex_es.events import AudioAppended, TickOutput
from duplex_es.replay import replay
from duplex_es.store import Database, EventLog

from conftest import backend_url
from inspect_support import CUT_MS, serving_inspector, spoken_barge_in, world_session
from servers import running
from wsclient import WsClient
from tampering import attack

pytestmark = pytest.mark.slow

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
REPO = Path(__file__).resolve().parents[2]

if not (os.path.exists(CHROMIUM) and os.path.exists(DRIVER)):
    pytest.skip(f"{CHROMIUM} or {DRIVER} is missing: apt-get install -y chromium chromium-driver", allow_module_level=True)

# selenium is in the test extra: missing, the test fails (only a missing browser skips it).
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By

#: What the typing user sends: markup that would run if the page (or the export's inlined data)
#: treated it as HTML.
MARKUP = "</script><script>window.pwned = 1</script><img src=x onerror='window.pwned = 2'>"

#: Lane rows of the timeline canvas (CSS px), as inspector.js lays them out for a speech session.
USER_ROWS, ASSISTANT_ROWS = (20, 116), (116, 212)
#: Lane colours (RGB) of inspector.js: user waveform, assistant waveform, the truncation cut.
BLUE, ORANGE, RED = (47, 111, 206), (200, 85, 61), (198, 40, 40)

_COUNT = """
function countPixels(y0, y1, x0, x1, rgb) {
  const c = document.getElementById('timeline'), ctx = c.getContext('2d'), dpr = window.devicePixelRatio || 1;
  x0 = Math.max(0, Math.round(x0 * dpr)); x1 = Math.min(c.width, Math.round(x1 * dpr));
  const d = ctx.getImageData(x0, Math.round(y0 * dpr), Math.max(1, x1 - x0), Math.round((y1 - y0) * dpr)).data;
  let n = 0;
  for (let i = 0; i < d.length; i += 4) if (Math.abs(d[i] - rgb[0]) < 10 && Math.abs(d[i + 1] - rgb[1]) < 10 && Math.abs(d[i + 2] - rgb[2]) < 10) n++;
  return n;
}
"""


def pixels(rows: tuple[int, int], rgb: tuple[int, int, int], x0: float = 0, x1: float = 4000) -> str:
    """A script counting the canvas pixels of colour ``rgb`` in lane ``rows``, columns x0..x1."""
    return f"{_COUNT} return countPixels({rows[0]}, {rows[1]}, {x0}, {x1}, {list(rgb)});"


@pytest.fixture(scope="module")
def spoken(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """A real barge-in on SQLite: ``{"url", "session_id", "user_s", "assistant_s", "done_seq",
    "world"}`` (the logged audio's durations in seconds, to the sample; a world session made
    on the same log)."""
    folder = tmp_path_factory.mktemp("inspector-browser")
    with backend_url("sqlite", folder) as url:
        with running(url, folder, worker_args=["--chunk-ms", "250"]) as (port, _, _):
            made = spoken_barge_in(port)
            world = world_session(port)
            typed = WsClient(port)  # a user who types markup: the page must show it as text
            typed.say(MARKUP)
            typed.respond()
            typed.close()
        db = Database(url)
        log = EventLog(db)
        records = log.read_session(made["session_id"])
        accepted = {row.seq for row in replay(log, made["session_id"]).timeline if row.verdict == "accepted"}
        db.dispose()
    user = sum(len(base64.b64decode(r.event.audio)) // 2 for r in records if isinstance(r.event, AudioAppended))
    # The reply as the session kept it: an answer that came after the cut was discarded.
    said = sum(len(base64.b64decode(r.event.audio)) // 2 for r in records if isinstance(r.event, TickOutput) and r.seq in accepted)
    done = next(r.seq for r in records if r.event.TYPE == "response.done")
    yield {
        "url": url, "folder": folder, **made, "user_s": user / 24000, "assistant_s": said / 24000, "done_seq": done, "world": world,
        "typed": typed.session_id,
    }


@pytest.fixture
def browser() -> Iterator[Any]:
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in (
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--window-size=1500,1000", "--autoplay-policy=no-user-gesture-required",
    ):
        opts.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    opts.add_argument(f"--user-data-dir={profile}")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(DRIVER))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def wait_for(driver: Any, script: str, what: str, timeout: float = 30.0) -> Any:
    """Poll ``script`` in the page until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        got = driver.execute_script(script)
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"the page never showed {what}; browser log: {driver.get_log('browser')}")
        time.sleep(0.1)


def check_page(driver: Any, spoken: dict, shot: Path, after_zoom: Callable[[], None] = lambda: None) -> None:
    """The "Done when" checks on the loaded session page; saves a screenshot to ``shot``."""
    wait_for(driver, "return typeof S !== 'undefined' && S.ov && document.getElementById('audio-user').readyState >= 1 "
             "&& document.getElementById('audio-assistant').readyState >= 1", "the session with its audio")
    # Both speakers' waveforms are drawn (their peaks arrive after the page).
    wait_for(driver, pixels(USER_ROWS, BLUE).replace("return countPixels", "return 200 < countPixels"), "the user's waveform")
    wait_for(driver, pixels(ASSISTANT_ROWS, ORANGE).replace("return countPixels", "return 20 < countPixels"), "the assistant's waveform")
    # The cut: a red line in the assistant's lane where the client truncated the reply.
    cut_x = driver.execute_script(
        "const r = S.ov.responses[0], it = r.items[0]; return it.truncated_ms === %d ? xOf(r.start_ms + it.offset_ms + it.truncated_ms) : null;" % CUT_MS
    )
    assert cut_x is not None
    red = driver.execute_script(pixels(ASSISTANT_ROWS, RED, cut_x - 2, cut_x + 3))
    assert red > 20, f"no truncation line at x={cut_x}"
    # The audio elements hold the logged audio: their durations are the log's, to the sample.
    user_s, assistant_s = driver.execute_script("return [document.getElementById('audio-user').duration, document.getElementById('audio-assistant').duration]")
    assert abs(user_s - spoken["user_s"]) < 1 / 24000 and abs(assistant_s - spoken["assistant_s"]) < 1 / 24000
    # ... and play it: from the cursor set by clicking the timeline in the user's speech.
    canvas = driver.find_element(By.ID, "timeline")
    width = canvas.size["width"]
    at = driver.execute_script("return xOf(2000)")  # 2 s into the user's audio, inside the first turn
    ActionChains(driver).move_to_element_with_offset(canvas, int(at - width / 2), int((USER_ROWS[0] + USER_ROWS[1]) / 2 - canvas.size["height"] / 2)).click().perform()
    wait_for(driver, "return document.getElementById('side-title').textContent.startsWith('State after event #')", "the state at the clicked point")
    driver.find_element(By.ID, "play").click()
    wait_for(driver, "return document.getElementById('audio-user').currentTime > 2.1", "the user's audio playing from the cursor", timeout=15)
    driver.execute_script("document.getElementById('audio-user').pause()")
    # Clicking an event shows the state after it.
    row = driver.find_element(By.CSS_SELECTOR, f"#events tr[data-seq='{spoken['done_seq']}']")
    row.click()
    wait_for(driver, f"return document.getElementById('side-title').textContent === 'State after event #{spoken['done_seq']}'", "the state at response.done")
    state = driver.execute_script("return JSON.parse(document.getElementById('side-json').textContent)")
    assert state["responses"][spoken["response_id"]]["status"] == "cancelled"
    assert "response.done" in driver.find_element(By.ID, "side-event").text
    # Zoomed on the barge-in for the screenshot.
    driver.execute_script("const r = S.ov.responses[0]; setView(r.start_ms - 2500, r.start_ms + r.audio_ms + 600); S.cursor = null; window.scrollTo(0, 0);")
    wait_for(driver, pixels(ASSISTANT_ROWS, ORANGE).replace("return countPixels", "return 200 < countPixels"), "the zoomed reply")
    after_zoom()
    driver.save_screenshot(str(shot))
    # Errors of any source, and the page's own warnings (not the browser's note that this
    # test's pixel readbacks would be faster with willReadFrequently).
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE" or e["level"] == "WARNING" and e["source"] == "console-api"]
    assert errors == [], errors


def test_the_served_inspector_shows_the_barge_in(spoken: dict, browser: Any, tmp_path: Path):
    with serving_inspector(spoken["url"], tmp_path) as base:
        browser.get(base)
        wait_for(browser, f"return !!document.querySelector(\"#sessions tr[data-session='{spoken['session_id']}']\")", "the session in the list")
        browser.find_element(By.CSS_SELECTOR, f"#sessions tr[data-session='{spoken['session_id']}']").click()
        shot = tmp_path / "inspector.png"
        check_page(browser, spoken, shot)
    assert shot.stat().st_size > 10_000
    if os.environ.get("DUPLEX_ES_UPDATE_SCREENSHOT"):
        (REPO / "docs" / "img").mkdir(exist_ok=True)
        shutil.copy(shot, REPO / "docs" / "img" / "inspector.png")


def test_the_exported_file_works_opened_from_disk(spoken: dict, browser: Any, tmp_path: Path):
    out = tmp_path / "session.html"
    subprocess.run(
        [sys.executable, "-m", "duplex_es.cli.main", "inspect", spoken["session_id"], "--db", spoken["url"], "--out", str(out)],
        check=True, capture_output=True,
    )
    browser.get(out.as_uri())
    shot = tmp_path / "exported.png"
    check_page(browser, spoken, shot)
    assert browser.execute_script("return location.protocol") == "file:"
    assert shot.stat().st_size > 10_000


def test_a_key_is_asked_for_under_serve_and_the_audit_names_a_tampered_check(spoken: dict, browser: Any, tmp_path: Path):
    """``serve --api-key``'s /inspect/: the page asks for the key (a wrong one is refused), then
    fetches with it; on a tampered copy of the log the failing audit check is highlighted."""
    copy = tmp_path / "tampered.db"
    with sqlite3.connect(spoken["url"].removeprefix("sqlite:///")) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)
    db = Database(f"sqlite:///{copy}")
    sid = spoken["session_id"]
    attack(db, f"UPDATE events SET data = replace(data, 'turn_detected', 'client_cancelled') WHERE session_id = '{sid}' AND type = 'response.done'")
    db.dispose()
    with running(f"sqlite:///{copy}", tmp_path, workers=0, server_args=["--api-key", "inspector-test-key"]) as (port, _, _):
        browser.get(f"http://127.0.0.1:{port}/inspect/#/s/{sid}")
        wait_for(browser, "return !document.getElementById('login').hidden", "the key form")
        browser.find_element(By.ID, "login-key").send_keys("not-the-key")
        browser.find_element(By.CSS_SELECTOR, "#login-form button").click()
        wait_for(browser, "return document.getElementById('login-error').textContent === 'That key was refused.'", "the refusal")
        browser.find_element(By.ID, "login-key").clear()
        browser.find_element(By.ID, "login-key").send_keys("inspector-test-key")
        browser.find_element(By.CSS_SELECTOR, "#login-form button").click()
        failed = wait_for(browser, "return [...document.querySelectorAll('#audit .badge.failed')].map(b => b.textContent)", "the failed audit")
        assert failed == ["audit failed: chain", "chain ✗"]
        assert "edited" in browser.find_element(By.CSS_SELECTOR, "#audit .violation").text
        # The audio came with the key too (as blobs): the players hold the logged audio.
        wait_for(browser, "return document.getElementById('audio-user').readyState >= 1", "the user's audio")
        duration = browser.execute_script("return document.getElementById('audio-user').duration")
        assert abs(duration - spoken["user_s"]) < 1 / 24000
        browser.save_screenshot(str(tmp_path / "tampered.png"))
        refused = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        # The one refused key shows as the 401 the browser logs for its request; nothing else failed.
        assert all("401" in e["message"] for e in refused), refused


def test_a_world_session_shows_its_frames_with_the_interactions_each_chunk_applied(spoken: dict, browser: Any, tmp_path: Path):
    world = spoken["world"]
    with serving_inspector(spoken["url"], tmp_path) as base:
        browser.get(f"{base}#/s/{world['session_id']}")
        wait_for(browser, "return document.querySelectorAll('#filmstrip .chunk img').length > 2 && "
                 "[...document.querySelectorAll('#filmstrip .chunk img')].every(i => i.complete && i.naturalWidth === 48)", "the filmstrip's frames")
        cards = browser.find_elements(By.CSS_SELECTOR, "#filmstrip .chunk")
        applied = next(c for c in cards if f"chunk {world['applied_chunk']} " in c.text)
        assert "#1 camera=" in applied.text and "#2 “snowy hills”" in applied.text
        applied.click()
        wait_for(browser, "return document.getElementById('side-title').textContent.startsWith('State after event #')", "the state after the chunk")
        assert "world.chunk" in browser.find_element(By.ID, "side-event").text
        browser.save_screenshot(str(tmp_path / "world.png"))
        assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


def test_going_from_one_session_to_another_leaves_nothing_of_the_first_on_the_page(spoken: dict, browser: Any, tmp_path: Path):
    world = spoken["world"]
    with serving_inspector(spoken["url"], tmp_path) as base:
        browser.get(f"{base}#/s/{spoken['session_id']}")
        row = f"#events tr[data-seq='{spoken['done_seq']}']"
        wait_for(browser, "return typeof S !== 'undefined' && S.ov && S.ov.session_id === %r && document.querySelector(%r)" % (spoken["session_id"], row), "the speech session's events")
        browser.find_element(By.CSS_SELECTOR, row).click()
        wait_for(browser, "return document.getElementById('side-title').textContent.startsWith('State after event #')", "its state")
        browser.execute_script("location.hash = '#/s/' + %r" % world["session_id"])  # straight to another session
        wait_for(browser, "return S.ov && S.ov.session_id === %r && document.querySelectorAll('#events tbody tr').length > 0" % world["session_id"], "the world session")
        assert spoken["session_id"] not in browser.find_element(By.ID, "side-json").text
        assert browser.find_element(By.ID, "side-title").text == "Click the timeline or an event"
        assert spoken["session_id"] not in browser.find_element(By.ID, "summary").text
        time.sleep(1.0)  # any answer still coming for the first session
        # No request of the first session's lanes under the second's id (they were 404s).
        assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


def test_what_a_user_typed_stays_text_in_the_page_and_in_the_export(spoken: dict, browser: Any, tmp_path: Path):
    out = tmp_path / "typed.html"
    subprocess.run(
        [sys.executable, "-m", "duplex_es.cli.main", "inspect", spoken["typed"], "--db", spoken["url"], "--out", str(out)],
        check=True, capture_output=True,
    )
    with serving_inspector(spoken["url"], tmp_path) as base:
        for url in (f"{base}#/s/{spoken['typed']}", out.as_uri()):
            browser.get(url)
            rows = wait_for(browser, "return [...document.querySelectorAll('#events tbody tr')].map(r => r.textContent).join('\\n')", "the events")
            assert "input.text.appended" in rows and MARKUP[:40] in rows  # shown as the characters typed
            assert browser.execute_script("return window.pwned === undefined && !document.querySelector('#events img')")
            assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
